"""The PySpark connector on a real local SparkSession (and real Ray for the round trip).

- Spark -> dataflow -> Spark equals Spark's own computation of the same query.
- Staging the same DataFrame twice gives every worker the same records in the same
  epochs, even when Spark's own row order is random.
- Schema problems fail with the column's name and the fix; a table stream whose schema
  does not fit its SparkSink fails when the graph is built.
- A DataFrame read as Arrow batches, through table operators, into a SparkSink equals
  Spark's own query, epoch by epoch.
- A source staged in a temporary directory of its own (no ``staging=``) leaves nothing
  behind: not after ``cleanup()``, not once it is garbage; a pickled copy (a worker's)
  deletes nothing.
- A driver that dies while publishing to a table leaves, after the resumed run, every
  epoch in the table exactly once.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

import operators  # noqa: F401 - registers the Stream methods
from connectors.arrow_records import SchemaError
from connectors.spark import SparkSink, spark_source
from operators.table import col, count
from timely import Dataflow, GraphBuildError, UserFunctionError


def events(spark: Any, n: int) -> Any:
    """A click/view log made by Spark from ids, in a random order (rand() has no seed)."""
    return (
        spark.range(n)
        .select(
            (F.col("id") * 7 % 23).alias("user"),
            (F.col("id") * 13 % 5).alias("ad"),
            F.when(F.col("id") % 3 == 0, "click").otherwise("view").alias("kind"),
            (F.col("id") % 6).cast("int").alias("epoch"),
        )
        .orderBy(F.rand())
    )


def test_round_trip_on_ray_equals_spark_own_query(
    spark: Any, ray_local: Any, tmp_path: Any
) -> None:
    df = events(spark, 3000).cache()
    flow = Dataflow("clicks_per_ad")
    src = spark_source(df, epoch_column="epoch", records="dicts", staging=str(tmp_path))
    assert src.partitions() >= 2, "the test needs several partitions to spread"
    counts = (
        flow.source(src)
        .where(lambda e: e["kind"] == "click")
        .count_by(lambda e: e["ad"])
        .select(lambda kv: {"ad": kv[0], "clicks": kv[1]})
    )
    schema = T.StructType(
        [T.StructField("ad", T.LongType()), T.StructField("clicks", T.LongType())]
    )
    sink = SparkSink(str(tmp_path / "out"), schema=schema, table="clicks_per_ad_ids")
    counts.sink(sink)
    flow.run(workers=2, backend="ray")

    want = Counter(
        (r["epoch"], r["ad"], r["count"])
        for r in df.where("kind = 'click'").groupBy("epoch", "ad").count().collect()
    )
    got = sink.dataframe(spark, epoch_column="epoch").collect()
    assert Counter((r["epoch"], r["ad"], r["clicks"]) for r in got) == want
    table = spark.table("clicks_per_ad_ids")
    assert table.schema == schema.add("epoch", T.LongType())
    assert Counter((r["epoch"], r["ad"], r["clicks"]) for r in table.collect()) == want
    sink.commit(None)  # a second commit appends nothing new to the table
    assert spark.table("clicks_per_ad_ids").count() == len(want)


def test_a_dataframe_through_table_operators_into_spark_equals_spark_own_query(
    spark: Any, tmp_path: Any
) -> None:
    df = events(spark, 3000).cache()
    src = spark_source(
        df, epoch_column="epoch", records="arrow", columns=["ad", "kind"], staging=str(tmp_path)
    )
    _, batches, _ = src.read(0, None)
    assert all(isinstance(b, pa.RecordBatch) and b.schema.equals(src.schema) for b in batches)
    assert src.schema.names == ["ad", "kind"]

    flow = Dataflow("table_clicks")
    table = flow.source(src).as_table(src.schema)
    per_ad = table.where(col("kind") == "click").group_by("ad").agg(clicks=count())
    sink = SparkSink(str(tmp_path / "out"), table="table_clicks", spark=spark)
    per_ad.sink(sink)  # no schema given and no table yet: the sink takes the table's
    assert sink.schema is not None and sink.schema.names == ["ad", "clicks"]
    flow.run(workers=2, backend="inline")

    want = sorted(
        (r["epoch"], r["ad"], r["count"])
        for r in df.where("kind = 'click'").groupBy("epoch", "ad").count().collect()
    )
    assert len({e for e, _, _ in want}) >= 2  # several epochs, each its own counts
    got = sink.dataframe(epoch_column="epoch").collect()
    assert sorted((r["epoch"], r["ad"], r["clicks"]) for r in got) == want
    rows = spark.table("table_clicks").collect()
    assert sorted((r["epoch"], r["ad"], r["clicks"]) for r in rows) == want


def test_a_table_that_does_not_fit_its_spark_sink_fails_when_the_graph_is_built(
    spark: Any, tmp_path: Any
) -> None:
    flow = Dataflow("misfit")
    src = spark.createDataFrame([(1, "a", 0)], "n int, s string, epoch long")
    table = flow.source(
        spark_source(src, epoch_column="epoch", records="arrow", staging=str(tmp_path))
    ).as_table(pa.schema([("n", pa.int32()), ("s", pa.string()), ("epoch", pa.int64())]))
    longs = pa.schema([("n", pa.int64()), ("s", pa.string())])
    with pytest.raises(
        GraphBuildError,
        match=r"step 'out': SparkSink: column 'n' is int32 in the table but int64 .*"
        r"with_columns\(n=col\('n'\).cast\('int64'\)\)",
    ):
        table.select("n", "s").sink(SparkSink(str(tmp_path / "a"), longs), name="out")
    with pytest.raises(GraphBuildError, match=r"'epoch' is not in the sink's schema.*select"):
        table.sink(SparkSink(str(tmp_path / "b"), longs))
    with pytest.raises(GraphBuildError, match=r"table's schema has a column 'epoch'.*rename"):
        table.sink(SparkSink(str(tmp_path / "c"), table="misfit_new", spark=spark))
    spark.createDataFrame([(1, "a", 0)], "n long, s string, epoch long").write.partitionBy(
        "epoch"
    ).saveAsTable("misfit_old")
    with pytest.raises(GraphBuildError, match=r"'n' is int32 in the table but int64"):
        table.select("n", "s").sink(SparkSink(str(tmp_path / "d"), table="misfit_old"))
    # the fix the message gives works: same columns, any order, the sink's types
    fixed = table.select("s", n=col("n").cast("int64"))
    fixed.sink(SparkSink(str(tmp_path / "e"), table="misfit_old", spark=spark))
    flow.run(workers=1, backend="inline")
    assert sorted(tuple(r) for r in spark.table("misfit_old").collect()) == [(1, "a", 0)]


def per_worker(src: Any, workers: int) -> list[dict[int, Counter[Any]]]:
    """What each worker reads: its partitions' records, per epoch."""
    out: list[dict[int, Counter[Any]]] = [defaultdict(Counter) for _ in range(workers)]
    for p in range(src.partitions()):
        offset = None
        while (got := src.read(p, offset)) is not None:
            epoch, records, offset = got
            out[p % workers][epoch].update(records)
    return out


@pytest.mark.parametrize("epoch_column", ["epoch", None])
def test_two_stagings_give_each_worker_the_same_records(
    spark: Any, tmp_path: Any, epoch_column: str | None
) -> None:
    df = events(spark, 2000)  # not cached: each staging runs the random orderBy again
    a = spark_source(df, epoch_column=epoch_column, staging=str(tmp_path), batch_size=97)
    b = spark_source(df, epoch_column=epoch_column, staging=str(tmp_path), batch_size=97)
    assert a.staged != b.staged and a.partitions() >= 2
    for workers in (2, 3):
        assert per_worker(a, workers) == per_worker(b, workers)
    everything = sum((c for w in per_worker(a, 1) for c in w.values()), Counter())
    assert everything == Counter(tuple(r) for r in df.collect())
    if epoch_column is None:  # epochs by row order: 97 rows each, over all files
        sizes = [sum(c.values()) for _, c in sorted(per_worker(a, 1)[0].items())]
        assert sizes[:-1] == [97] * (len(sizes) - 1)


def test_default_staging_leaves_no_directory_behind(spark: Any) -> None:
    import gc
    import pickle
    from pathlib import Path
    from urllib.parse import urlparse

    df = spark.createDataFrame([(1, "a"), (2, "b")], "n long, s string")

    def staged_in(src: Any) -> Path:
        return Path(urlparse(src.staged).path).parent

    src = spark_source(df, epoch_column="n")
    own = staged_in(src)
    assert own.name.startswith("timely-spark-") and any(own.iterdir())
    copy = pickle.loads(pickle.dumps(src))
    del copy
    gc.collect()
    assert any(own.iterdir())  # a worker's copy going away deletes nothing
    src.cleanup()
    assert not own.exists()
    src.cleanup()  # again: nothing to do, no error

    dropped = spark_source(df, epoch_column="n")
    other = staged_in(dropped)
    assert other.exists()
    del dropped
    gc.collect()
    assert not other.exists()


def test_source_from_a_table_name_and_a_path(spark: Any, tmp_path: Any) -> None:
    df = spark.createDataFrame([(1, "a"), (2, "b"), (2, "c")], "n long, s string")
    df.write.parquet(str(tmp_path / "data"))
    df.createOrReplaceTempView("small")
    for data in ("small", str(tmp_path / "data")):
        src = spark_source(data, spark=spark, epoch_column="n", staging=str(tmp_path))
        got = sorted((e, r) for e, c in per_worker(src, 1)[0].items() for r in c.elements())
        assert got == [(1, (1, "a")), (2, (2, "b")), (2, (2, "c"))]


def test_source_schema_errors_name_the_column_and_the_fix(spark: Any, tmp_path: Any) -> None:
    df = spark.createDataFrame([(1, "a", 1.5)], "n long, s string, x double")
    with pytest.raises(SchemaError, match=r"epoch column 'when' is not in .*\['n', 's', 'x'\]"):
        spark_source(df, epoch_column="when", staging=str(tmp_path))
    with pytest.raises(SchemaError, match=r"epoch column 's' is string, not an integer.*cast"):
        spark_source(df, epoch_column="s", staging=str(tmp_path))
    with pytest.raises(SchemaError, match=r"column 'y' is not in the DataFrame"):
        spark_source(df, columns=["n", "y"], staging=str(tmp_path))
    void = df.withColumn("nothing", F.lit(None))
    with pytest.raises(SchemaError, match=r"'nothing' has Spark type void.*cast\('string'\)"):
        spark_source(void, staging=str(tmp_path))
    with pytest.raises(ValueError, match=r"Spark cannot read 'no_such_table'"):
        spark_source("no_such_table", spark=spark, staging=str(tmp_path))


def test_sink_schema_errors_name_the_column_and_the_fix(spark: Any, tmp_path: Any) -> None:
    people = spark.createDataFrame([(1, "a", 5)], "id long, name string, epoch long")
    people.write.partitionBy("epoch").saveAsTable("people")
    wrong_type = pa.schema([("id", pa.string()), ("name", pa.string())])
    with pytest.raises(SchemaError, match=r"column 'id' is string in the sink's schema but int64"):
        SparkSink(str(tmp_path / "a"), schema=wrong_type, table="people", spark=spark)
    extra = pa.schema([("id", pa.int64()), ("name", pa.string()), ("age", pa.int64())])
    with pytest.raises(SchemaError, match=r"column 'age' is not in table 'people'"):
        SparkSink(str(tmp_path / "b"), schema=extra, table="people", spark=spark)
    interval = T.StructType([T.StructField("gap", T.CalendarIntervalType())])
    with pytest.raises(SchemaError, match=r"column 'gap': Spark type interval has no Arrow"):
        SparkSink(str(tmp_path / "c"), schema=interval)
    clash = pa.schema([("id", pa.int64()), ("epoch", pa.int64())])
    with pytest.raises(SchemaError, match=r"has a column 'epoch'.*another epoch_column="):
        SparkSink(str(tmp_path / "c"), schema=clash, table="new_people", spark=spark)

    # no schema given: the existing table's is used, and records that do not fit it fail
    sink = SparkSink(str(tmp_path / "d"), table="people", spark=spark)
    assert sink.schema == pa.schema([("id", pa.int64()), ("name", pa.string())])
    flow = Dataflow("bad_people")
    handle = flow.new_input()
    handle.stream.sink(sink, name="people_out")
    handle.send([{"id": 2, "name": "b"}, {"id": "three", "name": "c"}])
    with pytest.raises(UserFunctionError, match=r"'people_out'.*column 'id': cannot convert"):
        flow.run(workers=1, backend="inline")

    # epoch 0 goes in beside the table's own epoch 5, which the sink leaves alone
    ok = SparkSink(str(tmp_path / "e"), table="people", spark=spark)
    flow = Dataflow("people")
    handle = flow.new_input()
    handle.stream.sink(ok)
    handle.send([{"id": 2, "name": "b"}])
    flow.run(workers=2, backend="inline")
    got = sorted(tuple(r) for r in spark.table("people").collect())
    assert got == [(1, "a", 5), (2, "b", 0)]


def test_sink_refuses_a_table_without_an_epoch_partition(spark: Any, tmp_path: Any) -> None:
    """A table made before (no epoch column, or not partitioned by it) is refused up front,
    with the fix, rather than appended to twice or overwritten whole."""
    spark.createDataFrame([(1, "a")], "id long, name string").write.saveAsTable("old_people")
    with pytest.raises(SchemaError, match=r"'old_people' has no column 'epoch'.*partitionBy"):
        SparkSink(str(tmp_path / "a"), table="old_people", spark=spark)
    flat = spark.createDataFrame([(1, 0)], "id long, epoch long")
    flat.write.saveAsTable("flat_people")
    with pytest.raises(SchemaError, match=r"'flat_people' is not partitioned by 'epoch'"):
        SparkSink(str(tmp_path / "b"), table="flat_people", spark=spark)
    spark.createDataFrame([(1, "x")], "id long, at string").write.partitionBy("at").saveAsTable(
        "text_epochs"
    )
    with pytest.raises(SchemaError, match=r"'at' of table 'text_epochs' is string, not an int"):
        SparkSink(str(tmp_path / "c"), table="text_epochs", spark=spark, epoch_column="at")
    assert spark.table("flat_people").count() == 1  # nothing written


def test_sink_dataframe_of_nothing_has_the_schema(spark: Any, tmp_path: Any) -> None:
    schema = pa.schema([("k", pa.string()), ("v", pa.float64())])
    sink = SparkSink(str(tmp_path / "none"), schema=schema)
    flow = Dataflow("nothing")
    flow.new_input().stream.sink(sink)
    flow.run(workers=1, backend="inline")
    df = sink.dataframe(spark, epoch_column="epoch")
    assert df.count() == 0
    assert df.columns == ["k", "v", "epoch"]


class DriverDied(BaseException):
    """The driver's death at an injected point: a BaseException, so nothing catches it."""


def numbered(epochs: int) -> tuple[Dataflow, Any]:
    """A dataflow sending ``(epoch, i)`` rows, 3 per epoch; the same graph every time."""
    flow = Dataflow("numbered")
    handle = flow.new_input("rows")
    for e in range(epochs):
        handle.advance_to(e)
        handle.send([(e, i) for i in range(3)])
    return flow, handle.stream


@pytest.mark.parametrize("dies", ["before the append", "before the marker", "after the marker"])
def test_a_resumed_run_leaves_every_epoch_in_the_table_once(
    spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, dies: str
) -> None:
    """The driver dies while publishing the second checkpoint's epochs to the table; the
    run resumed from the checkpoints publishes again, and no epoch is there twice."""
    import connectors.spark as spark_module

    table = "numbered_" + dies.replace(" ", "_")
    schema = pa.schema([("at", pa.int64()), ("i", pa.int64())])
    calls = 0

    def crash_on_the_second(original: Any, after: bool) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2 and not after:
                raise DriverDied(dies)
            out = original(*args, **kwargs)
            if calls == 2:
                raise DriverDied(dies)
            return out

        return wrapper

    if dies == "before the append":  # the rows to append are read first, then appended
        monkeypatch.setattr(SparkSink, "dataframe", crash_on_the_second(SparkSink.dataframe, False))
    else:
        after = dies == "after the marker"
        write = spark_module.write_marker
        monkeypatch.setattr(spark_module, "write_marker", crash_on_the_second(write, after))
    checkpoint = dict(checkpoint=str(tmp_path / "ckpt"), checkpoint_every=1)
    overwrite_mode = spark.conf.get("spark.sql.sources.partitionOverwriteMode")
    out = str(tmp_path / "out")
    flow, stream = numbered(4)
    stream.sink(SparkSink(out, schema=schema, table=table, spark=spark))
    with pytest.raises(DriverDied):
        flow.run(workers=2, backend="inline", **checkpoint)
    monkeypatch.undo()
    assert calls == 2

    flow, stream = numbered(6)  # the resumed run, with two more epochs
    stream.sink(SparkSink(out, schema=schema, table=table, spark=spark))
    flow.run(workers=2, backend="inline", **checkpoint)
    rows = spark.table(table).collect()
    assert Counter((r["at"], r["i"]) for r in rows) == Counter(
        (e, i) for e in range(6) for i in range(3)
    )
    assert all(r["epoch"] == r["at"] for r in rows)
    assert spark.conf.get("spark.sql.sources.partitionOverwriteMode") == overwrite_mode
