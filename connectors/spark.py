"""PySpark in and out of a dataflow: DataFrames become a source, epochs go back as tables.

**Source: hand-over through Parquet, never a collect().** :func:`spark_source` has
Spark write the DataFrame as Parquet to a staging location, partition by partition,
and returns a :class:`~connectors.parquet.ParquetSource` over those files: each
worker reads its (file, row group) partitions straight from storage, so neither the
driver nor any one process holds the whole DataFrame. With ``deterministic=True``
(the default) the staged files do not depend on how Spark happened to partition or
order the DataFrame: rows are hash-partitioned on their values into ``partitions``
files and sorted within each (by the epoch column first), so staging the same data
twice gives every worker the same records in the same epochs, and a replay from
recorded offsets reads exactly what was read before. Epochs come from an integer
column or from the row order (see ``ParquetSource``).

**Sink: exactly once, then Spark.** :class:`SparkSink` is a
:class:`~connectors.parquet.ParquetSink` (per-epoch part files, committed with the
checkpoints) whose driver side turns committed epochs into a Spark DataFrame
(:meth:`SparkSink.dataframe`: Spark reads the committed files) and, given ``table``,
writes each newly committed range of epochs to a Spark table, also exactly once. The
table has an integer epoch column (``epoch_column``, default ``"epoch"``) and is
partitioned by it; each write replaces the partitions of the epochs it carries
(dynamic partition overwrite) instead of appending, so a driver that dies anywhere
between the commit and the ``_PUBLISHED`` marker that records the write only makes
the next run write those epochs again, not twice. ``_PUBLISHED`` just saves
re-writing epochs already there. The sink owns its epochs' partitions: rows others
put into the same epochs of the table are replaced (other epochs are left alone).

On a cluster, ``staging`` and the sink's path must be storage every Spark executor
and every timely worker can reach (``s3://...``, ``hdfs://...``); local paths work for
local Spark and local Ray.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connectors._storage import resolve
from connectors.arrow_records import SchemaError
from connectors.committed import committed_epoch, committed_files, read_marker, write_marker
from connectors.parquet import ParquetSink, ParquetSource
from timely.session.verbosity import resolve_verbose

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PUBLISHED = "_PUBLISHED"
_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType")
_OVERWRITE_MODE = "spark.sql.sources.partitionOverwriteMode"
_NOT_PARQUET = ("NullType", "CalendarIntervalType")
_UNORDERED = ("MapType", "VariantType")


def _pyspark() -> Any:
    try:
        import pyspark.sql
    except ImportError:
        raise ImportError(
            "the Spark connector needs pyspark: pip install 'timely[spark]' (and Java 17+)"
        ) from None
    return pyspark.sql


QUIET_LOG4J = Path(__file__).resolve().with_name("log4j2-quiet.properties")
"""The driver's log4j configuration for quiet runs: errors only."""


def spark_log_options(verbose: bool | None = None) -> dict[str, str]:
    """SparkSession settings that keep Spark's log lines off the terminal, unless
    ``verbose`` (default: ``TIMELY_VERBOSE``, see :mod:`timely.session.verbosity`).

    Why a JVM option and not only ``setLogLevel``: Spark prints its start-up WARN lines
    and its notes on the log4j profile before any session exists to call it on. The
    option points the driver's log4j at :data:`QUIET_LOG4J` (errors only); it takes effect
    when this process starts its JVM, i.e. on the first session. It replaces any
    ``spark.driver.extraJavaOptions`` of the builder's: give yours after these. Verbose:
    none, Spark's own defaults."""
    if resolve_verbose(verbose):
        return {}
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}"}


def spark_session(builder: Any, verbose: bool | None = None) -> SparkSession:
    """``builder.getOrCreate()`` quiet unless ``verbose`` (see :func:`spark_log_options`);
    a quiet session's log level is also set to ERROR, for a JVM that was already up."""
    verbose = resolve_verbose(verbose)
    for key, value in spark_log_options(verbose).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not verbose:
        session.sparkContext.setLogLevel("ERROR")
    return session  # type: ignore[no-any-return]


def active_spark(spark: SparkSession | None = None) -> SparkSession:
    """``spark``, else the active SparkSession, else a new local one (quiet unless
    ``TIMELY_VERBOSE``: :func:`spark_session`)."""
    if spark is not None:
        return spark
    sql = _pyspark()
    active = sql.SparkSession.getActiveSession()
    if active is not None:
        return active  # type: ignore[no-any-return]
    return spark_session(sql.SparkSession.builder)


def _as_dataframe(data: Any, spark: SparkSession | None, format: str) -> DataFrame:
    if hasattr(data, "sparkSession") and hasattr(data, "write"):
        return data  # type: ignore[no-any-return]
    if not isinstance(data, str):
        raise TypeError(
            f"spark_source reads a Spark DataFrame, a table name or a path, not "
            f"{type(data).__name__}"
        )
    session = active_spark(spark)
    from pyspark.errors import AnalysisException

    try:
        if "/" in data or "://" in data or os.path.exists(data):
            return session.read.format(format).load(data)
        return session.table(data)
    except AnalysisException as e:
        first = str(e).splitlines()[0]
        raise ValueError(
            f"Spark cannot read {data!r} ({first}); pass an existing table name, or a path "
            f"to {format} data (format= for another format)"
        ) from None


def _type_name(dt: Any) -> str:
    return type(dt).__name__


def _orderable(dt: Any) -> bool:
    """Whether Spark can sort and hash values of ``dt`` (maps and variants it cannot)."""
    name = _type_name(dt)
    if name in _UNORDERED:
        return False
    if name == "ArrayType":
        return _orderable(dt.elementType)
    if name == "StructType":
        return all(_orderable(f.dataType) for f in dt.fields)
    return True


def _check_types(df: DataFrame, epoch_column: str | None, columns: Sequence[str]) -> None:
    fields = {f.name: f.dataType for f in df.schema.fields}
    for name in [*columns, *([epoch_column] if epoch_column else [])]:
        if name not in fields:
            what = "epoch column" if name == epoch_column else "column"
            raise SchemaError(
                f"{what} {name!r} is not in the DataFrame (its columns: {list(fields)}); "
                "pass one of those"
            )
    if epoch_column is not None and _type_name(fields[epoch_column]) not in _INTEGRAL:
        raise SchemaError(
            f"epoch column {epoch_column!r} is {fields[epoch_column].simpleString()}, not an "
            f"integer type; derive an integer epoch, e.g. df.withColumn({epoch_column!r}, "
            f"F.col({epoch_column!r}).cast('long')) (for a timestamp: seconds since the start "
            "divided by the epoch length)"
        )
    for name in columns:
        if _type_name(fields[name]) in _NOT_PARQUET:
            raise SchemaError(
                f"column {name!r} has Spark type {fields[name].simpleString()}, which Parquet "
                f"cannot store; cast it, e.g. df.withColumn({name!r}, "
                f"F.col({name!r}).cast('string')), or leave it out with columns="
            )


class SparkSource(ParquetSource):
    """A :class:`ParquetSource` over a DataFrame's staged files; ``cleanup()`` deletes them."""

    staged: str
    _remove_own: weakref.finalize[Any, Any] | None = None
    """Removes the temporary directory :func:`spark_source` made for the staged files
    (no ``staging=`` given): at :meth:`cleanup`, when the source is garbage, or at exit,
    whichever comes first (a run of another process stages again, into a new one)."""

    def cleanup(self) -> None:
        """Delete the staged files (after the run; a restore would need them), and the
        temporary directory they were staged in when ``spark_source`` made it. Calling it
        again does nothing."""
        if self._remove_own is not None:
            self._remove_own()
            return
        fs, path = resolve(self.staged)
        with contextlib.suppress(FileNotFoundError):
            fs.delete_dir(path)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_remove_own", None)  # (the driver's copy removes the files, once)
        return state


def spark_source(
    data: DataFrame | str,
    spark: SparkSession | None = None,
    epoch_column: str | None = None,
    records: str = "tuples",
    staging: str | None = None,
    columns: Sequence[str] | None = None,
    batch_size: int = 65_536,
    partitions: int | None = None,
    deterministic: bool = True,
    format: str = "parquet",
) -> SparkSource:
    """A dataflow source over a Spark DataFrame, a table name, or a path Spark reads.

    Spark writes the rows as Parquet under ``staging`` (a new directory in it; default:
    a local temp directory) and the workers read those files. ``partitions`` is the
    number of staged files with ``deterministic=True`` (default: Spark's
    ``spark.sql.shuffle.partitions``); ``deterministic=False`` keeps Spark's own
    partitioning and skips the shuffle, for DataFrames whose partitioning is already
    stable. ``records``, ``columns``, ``batch_size``: as for ``ParquetSource``.
    """
    df = _as_dataframe(data, spark, format)
    wanted = list(columns) if columns is not None else list(df.columns)
    _check_types(df, epoch_column, wanted)
    keep = wanted + ([epoch_column] if epoch_column and epoch_column not in wanted else [])
    df = df.select(*keep)
    if deterministic:
        fields = df.schema.fields
        ordered = [f.name for f in fields if _orderable(f.dataType)]
        n = partitions or int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 1)
        if n < 1:
            raise ValueError(f"partitions must be >= 1, got {n}")
        df = df.repartition(n, *ordered) if ordered else df.coalesce(1)
        first = [epoch_column] if epoch_column else []
        df = df.sortWithinPartitions(*first, *[c for c in ordered if c != epoch_column])
    elif epoch_column is not None:
        df = df.sortWithinPartitions(epoch_column)  # epochs must not decrease within a file
    own = staging is None  # (a temporary directory of the source's own)
    root = tempfile.mkdtemp(prefix="timely-spark-") if staging is None else staging
    target = _staging_uri(root)
    try:
        df.write.mode("errorifexists").parquet(target)
        src = SparkSource(
            target,
            epoch_column=epoch_column,
            records=records,
            batch_size=batch_size,
            columns=wanted,
        )
    except BaseException:
        if own:
            shutil.rmtree(root, ignore_errors=True)
        raise
    src.staged = target
    if own:
        src._remove_own = weakref.finalize(src, shutil.rmtree, root, True)
    return src


def _staging_uri(staging: str) -> str:
    """A new directory under ``staging`` as a URI Spark and pyarrow agree on."""
    name = f"timely-stage-{uuid.uuid4().hex[:12]}"
    if "://" in staging:
        return f"{staging.rstrip('/')}/{name}"
    return "file://" + os.path.join(os.path.abspath(staging), name)


def arrow_schema_of(schema: Any) -> pa.Schema:
    """A ``pyarrow.Schema`` from one, or from a Spark ``StructType`` (field by field, so a
    type Arrow cannot hold is named)."""
    if schema is None or isinstance(schema, pa.Schema):
        return schema
    if _type_name(schema) != "StructType":
        raise TypeError(
            f"schema must be a pyarrow.Schema or a Spark StructType, got {type(schema).__name__}"
        )
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for f in schema.fields:
        try:
            typ = to_arrow_type(f.dataType)
        except Exception:
            raise SchemaError(
                f"column {f.name!r}: Spark type {f.dataType.simpleString()} has no Arrow "
                "equivalent; use another type for it (e.g. a string or a long)"
            ) from None
        fields.append(pa.field(f.name, typ, nullable=f.nullable))
    return pa.schema(fields)


def _check_table_schema(table: str, ours: pa.Schema, theirs: pa.Schema) -> None:
    for field in ours:
        i = theirs.get_field_index(field.name)
        if i < 0:
            raise SchemaError(
                f"column {field.name!r} is not in table {table!r} (its columns: "
                f"{theirs.names}); drop it from the output or add it to the table"
            )
        if theirs.field(i).type != field.type:
            raise SchemaError(
                f"column {field.name!r} is {field.type} in the sink's schema but "
                f"{theirs.field(i).type} in table {table!r}; make the sink's schema say "
                f"{theirs.field(i).type} (convert the values in the dataflow)"
            )
    missing = [n for n in theirs.names if ours.get_field_index(n) < 0]
    if missing:
        raise SchemaError(
            f"table {table!r} has column {missing[0]!r}, which the sink's schema lacks; add "
            "it to the schema (and the records)"
        )


def _table_schema(session: SparkSession, table: str, epoch_column: str) -> pa.Schema | None:
    """The existing ``table``'s columns other than ``epoch_column`` (``None``: no such
    table), after checking that ``epoch_column`` is an integer partition column: without
    one, re-writing an epoch could not replace it (it would append it twice, or with a
    plain overwrite replace the whole table)."""
    if not session.catalog.tableExists(table):
        return None
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = session.table(table).schema
    fields = {f.name: f.dataType for f in schema.fields}
    partitions = [c.name for c in session.catalog.listColumns(table) if c.isPartition]
    e = repr(epoch_column)
    other = (
        "; or write to a new table (SparkSink creates it so), or pass epoch_column= naming "
        "the table's integer partition column for the epoch"
    )
    if epoch_column not in fields:
        raise SchemaError(
            f"table {table!r} has no column {e}, which SparkSink needs to replace an epoch's "
            f"rows after a crash instead of appending them twice; copy the table into one "
            f"partitioned by it, e.g. spark.table({table!r}).withColumn({e}, "
            f"F.lit(-1).cast('long')).write.partitionBy({e}).saveAsTable(<new name>){other}"
        )
    if _type_name(fields[epoch_column]) not in _INTEGRAL:
        raise SchemaError(
            f"column {e} of table {table!r} is {fields[epoch_column].simpleString()}, not an "
            f"integer type, so it cannot hold the epoch; copy the table with it cast, e.g. "
            f"spark.table({table!r}).withColumn({e}, F.col({e}).cast('long'))"
            f".write.partitionBy({e}).saveAsTable(<new name>){other}"
        )
    if epoch_column not in partitions:
        raise SchemaError(
            f"table {table!r} is not partitioned by {e} (partitions: {partitions}), so "
            f"re-writing an epoch cannot replace just that epoch; copy it into one that is, "
            f"e.g. spark.table({table!r}).write.partitionBy({e}).saveAsTable(<new name>){other}"
        )
    rest = [f for f in schema.fields if f.name != epoch_column]
    return to_arrow_schema(type(schema)(rest))


def _replace_epochs(df: DataFrame, table: str) -> None:
    """Insert ``df`` into ``table``, replacing the partitions (epochs) ``df`` has rows for
    and leaving the others. The mode is the session's setting, set for this write only:
    ``insertInto`` ignores the writer option of the same name."""
    session = df.sparkSession
    columns = session.table(table).columns  # insertInto matches columns by position
    before = session.conf.get(_OVERWRITE_MODE)
    session.conf.set(_OVERWRITE_MODE, "dynamic")
    try:
        df.select(*columns).write.insertInto(table, overwrite=True)
    finally:
        if before is None:
            session.conf.unset(_OVERWRITE_MODE)
        else:
            session.conf.set(_OVERWRITE_MODE, before)


class SparkSink(ParquetSink):
    """Dataflow output to Parquet under ``path`` (exactly once), then to Spark.

    Partitioning and delivery of the files: as :class:`~connectors.parquet.ParquetSink`'s
    (each worker writes what it holds; readers of committed epochs see each once).

    ``schema``: a ``pyarrow.Schema`` or a Spark ``StructType``; when ``table`` names an
    existing Spark table and no schema is given, the table's schema (less the epoch
    column) is used, and a given schema must match it (checked here, before anything
    runs). ``table``: write each newly committed range of epochs to it, each row with
    its epoch in ``epoch_column``, replacing those epochs' partitions so that a re-run
    after a crash writes no epoch twice. On first use the table is created partitioned
    by ``epoch_column``; an existing table must have it as an integer partition column.
    """

    def __init__(
        self,
        path: str,
        schema: Any = None,
        table: str | None = None,
        spark: SparkSession | None = None,
        epoch_column: str = "epoch",
    ) -> None:
        arrow = arrow_schema_of(schema)
        self.table = table
        self.epoch_column = epoch_column
        self._spark = spark
        if table is not None:
            _check_no_epoch_column(arrow, epoch_column)
            existing = _table_schema(active_spark(spark), table, epoch_column)
            if existing is not None:
                if arrow is None:
                    arrow = existing
                else:
                    _check_table_schema(table, arrow, existing)
        super().__init__(path, arrow)

    def bind_schema(self, schema: pa.Schema) -> None:
        """A table stream's schema, when ``table.sink(self)`` builds the graph: as
        :meth:`ParquetSink.bind_schema` (taken if none was given or found in the table,
        else checked against it), and it must not use the epoch column's name."""
        if self.table is not None:
            _check_no_epoch_column(schema, self.epoch_column, "table's")
        super().bind_schema(schema)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_spark"] = None  # workers never touch Spark
        return state

    def commit(self, epoch: int | None) -> None:
        super().commit(epoch)
        if self.table is not None:
            self._publish()

    def _publish(self) -> None:
        """Write the committed epochs after ``_PUBLISHED`` to the table, then move the
        marker. Idempotent per epoch: dying before the marker only means the next call
        writes the same epochs again, and they replace what the first write left."""
        assert self.table is not None
        fs, root = resolve(self.location)
        found = read_marker(fs, f"{root}/{PUBLISHED}")
        published = -1 if found is None else found
        last = committed_epoch(self.location)
        if last <= published:
            return
        session = active_spark(self._spark)
        df = self.dataframe(session, epoch_column=self.epoch_column, after=published)
        existing = _table_schema(session, self.table, self.epoch_column)
        if existing is not None:
            if self.schema is not None:
                _check_table_schema(self.table, self.schema, existing)
            _replace_epochs(df, self.table)
        elif df.columns != [self.epoch_column]:  # with no columns yet, create it later
            df.write.partitionBy(self.epoch_column).saveAsTable(self.table)
        write_marker(fs, f"{root}/{PUBLISHED}", last)

    def dataframe(
        self,
        spark: SparkSession | None = None,
        epoch_column: str | None = None,
        after: int = -1,
    ) -> DataFrame:
        """The committed epochs ``> after`` as a Spark DataFrame (Spark reads the files).

        ``epoch_column`` adds each row's epoch under that name.
        """
        session = active_spark(spark or self._spark)
        files = [(e, f) for e, f in committed_files(self.location) if e > after]
        schema = self.schema
        if schema is None and files:
            import pyarrow.parquet as pq

            schema = pq.read_schema(files[0][1], filesystem=resolve(self.location)[0])
        spark_schema = _spark_schema(schema) if schema is not None else None
        if epoch_column is not None and schema is not None and epoch_column in schema.names:
            raise SchemaError(
                f"the data already has a column {epoch_column!r}; pass another epoch_column "
                "name, or None"
            )
        if not files:
            empty = spark_schema if spark_schema is not None else _pyspark().types.StructType()
            df = session.createDataFrame([], empty)
            if epoch_column is not None:
                from pyspark.sql import functions as F

                df = df.withColumn(epoch_column, F.lit(None).cast("long"))
            return df
        reader = session.read
        if spark_schema is not None:
            reader = reader.schema(spark_schema)
        df = reader.parquet(*[self._uri(f) for _, f in files])
        if epoch_column is None:
            return df
        from pyspark.sql import functions as F

        where = F.col("_metadata.file_path")  # .../epoch=<e>/part-...: the epoch is in the path
        epoch = F.regexp_extract(where, r"/epoch=(\d+)/[^/]*$", 1).cast("long")
        return df.withColumn(epoch_column, epoch)

    def _uri(self, fs_path: str) -> str:
        if "://" in self.location:
            return f"{self.location.split('://', 1)[0]}://{fs_path}"
        return "file://" + fs_path


def _check_no_epoch_column(
    schema: pa.Schema | None, epoch_column: str, whose: str = "sink's"
) -> None:
    if schema is not None and epoch_column in schema.names:
        raise SchemaError(
            f"the {whose} schema has a column {epoch_column!r}, the name the Spark table's "
            "epoch column gets; pass another epoch_column= name, or rename that column"
        )


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def spark_sink(
    path: str,
    schema: Any = None,
    table: str | None = None,
    spark: SparkSession | None = None,
    epoch_column: str = "epoch",
) -> SparkSink:
    """A :class:`SparkSink`: ``stream.sink(spark_sink(path, schema, table=...))``."""
    return SparkSink(path, schema=schema, table=table, spark=spark, epoch_column=epoch_column)
