"""ParquetSource and ParquetSink against plain-Python references, on real pyarrow files.

Random tables, split at random over files and row groups, read by 1-3 inline workers:
the records of each epoch equal what the rows say (the epoch column, or the row's
place in the files divided by the batch size); a replay from any recorded offset reads
the same batches; the sink's committed output equals the input, exactly once, whatever
sequence of writes, commits and aborts it saw.
"""

from __future__ import annotations

import itertools
import os
import pickle
import tempfile
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.arrow_records import SchemaError
from connectors.parquet import ParquetSink, ParquetSource, committed_epoch, read_committed
from timely import Dataflow, UserFunctionError

Row = tuple[int, str | None, float]
SCHEMA = pa.schema([("e", pa.int64()), ("name", pa.string()), ("x", pa.float64())])

rows_st = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.one_of(st.none(), st.text("abc", max_size=3)),
        st.floats(-1e6, 1e6, allow_nan=False),
    ),
    max_size=40,
)


def write_files(root: str, rows: list[Row], cuts: list[int], row_group: int) -> list[list[Row]]:
    """``rows`` split at ``cuts`` into files ``f0.parquet``, ``f1.parquet``, ... (in order)."""
    bounds = sorted({c % (len(rows) + 1) for c in cuts} | {0, len(rows)})
    files = [rows[a:b] for a, b in itertools.pairwise(bounds)] or [[]]
    for i, chunk in enumerate(files):
        cols = list(zip(*chunk)) if chunk else [[], [], []]
        arrays = [pa.array(c, t.type) for c, t in zip(cols, SCHEMA)]
        table = pa.Table.from_arrays(arrays, schema=SCHEMA)
        pq.write_table(table, os.path.join(root, f"f{i:02d}.parquet"), row_group_size=row_group)
    return files


def read_all(src: ParquetSource) -> list[list[tuple[int, list[Any], Any]]]:
    """Every partition's batches, in order, from a fresh copy (as a worker would get it)."""
    src = pickle.loads(pickle.dumps(src))
    out = []
    for p in range(src.partitions()):
        batches, offset = [], None
        while (got := src.read(p, offset)) is not None:
            batches.append(got)
            offset = got[2]
        out.append(batches)
    return out


@settings(deadline=None, max_examples=40)
@given(
    rows=rows_st,
    cuts=st.lists(st.integers(0, 40), max_size=3),
    row_group=st.integers(1, 7),
    batch_size=st.integers(1, 6),
    by_column=st.booleans(),
)
def test_batches_follow_the_rows_and_replay_from_any_offset(
    rows: list[Row], cuts: list[int], row_group: int, batch_size: int, by_column: bool
) -> None:
    if by_column:  # the column must not decrease within a file: sort each file's rows
        rows = sorted(rows, key=lambda r: r[0])
    with tempfile.TemporaryDirectory() as root:
        write_files(root, rows, cuts, row_group)
        src = ParquetSource(root, "e" if by_column else None, batch_size=batch_size)
        parts = read_all(src)
        got = [(e, r) for batches in parts for e, recs, _ in batches for r in recs]
        # the rows in file order, each with the epoch the reference says
        want = [(r[0] if by_column else i // batch_size, r) for i, r in enumerate(rows)]
        assert got == want
        for p, batches in enumerate(parts):
            assert all(1 <= len(recs) <= batch_size for _, recs, _ in batches)
            # a replay from each recorded offset reads the same batches again
            fresh = pickle.loads(pickle.dumps(src))
            for i, (_, _, offset) in enumerate(batches[:-1]):
                assert fresh.read(p, offset) == batches[i + 1]
            if batches:
                assert fresh.read(p, batches[-1][2]) is None


@settings(deadline=None, max_examples=25)
@given(
    rows=rows_st,
    cuts=st.lists(st.integers(0, 40), max_size=3),
    row_group=st.integers(1, 7),
    batch_size=st.integers(1, 8),
    workers=st.integers(1, 3),
    shape=st.sampled_from(["tuples", "dicts", "arrow"]),
    seed=st.integers(0, 2**16),
)
def test_source_to_sink_round_trip(
    rows: list[Row],
    cuts: list[int],
    row_group: int,
    batch_size: int,
    workers: int,
    shape: str,
    seed: int,
) -> None:
    rows = sorted(rows, key=lambda r: r[0])
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(f"{root}/in")
        write_files(f"{root}/in", rows, cuts, row_group)
        flow = Dataflow("parquet_round_trip")
        src = ParquetSource(f"{root}/in", "e", records=shape, batch_size=batch_size)
        stream = flow.source(src)
        stream.sink(ParquetSink(f"{root}/out", schema=SCHEMA if shape == "tuples" else None))
        flow.run(workers=workers, backend="inline", seed=seed)
        out = read_committed(f"file://{root}/out", schema=SCHEMA, epoch_column="epoch")
        got = Counter(zip(*(out.column(n).to_pylist() for n in [*SCHEMA.names, "epoch"])))
        assert got == Counter((*r, r[0]) for r in rows)
        assert committed_epoch(f"{root}/out") == (max(r[0] for r in rows) if rows else -1)


def test_columns_select_what_is_handed_over_and_the_epoch_column_is_still_read(
    tmp_path: Any,
) -> None:
    rows = [(0, "a", 1.0), (0, "b", 2.0), (1, "c", 3.0)]
    write_files(str(tmp_path), rows, [], 10)
    src = ParquetSource(str(tmp_path), "e", records="dicts", columns=["x"])
    assert read_all(src) == [[(0, [{"x": 1.0}, {"x": 2.0}], 2), (1, [{"x": 3.0}], 3)]]
    arrow = ParquetSource(str(tmp_path), "e", records="arrow", columns=["name"])
    (batch,) = read_all(arrow)[0][0][1]
    assert isinstance(batch, pa.RecordBatch)
    assert batch.to_pydict() == {"name": ["a", "b"]}


# -- the sink: exactly once under writes, commits, aborts and replays -----------------------

ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 2), st.integers(0, 5), st.integers(1, 4)),
        st.tuples(st.just("commit"), st.one_of(st.none(), st.integers(0, 5))),
        st.tuples(st.just("abort"), st.integers(-1, 5)),
    ),
    max_size=25,
)


@settings(deadline=None, max_examples=60)
@given(ops=ops_st)
def test_sink_commits_exactly_what_was_last_written_before_the_commit(ops: list[Any]) -> None:
    """A model: epochs' part files are staged until committed, aborted after a point,
    rewritten by a replay; read_committed equals the model's committed parts."""
    schema = pa.schema([("w", pa.int64()), ("e", pa.int64()), ("k", pa.int64())])
    with tempfile.TemporaryDirectory() as root:
        sink = ParquetSink(f"{root}/out", schema=schema)
        staged: dict[int, dict[int, list[tuple[int, int, int]]]] = {}
        committed: dict[int, dict[int, list[tuple[int, int, int]]]] = {}
        watermark = -1
        for op in ops:
            if op[0] == "write":
                _, w, e, n = op
                records = [(w, e, k) for k in range(n)]
                worker = pickle.loads(pickle.dumps(sink))  # as a worker process would get it
                if e <= watermark:
                    with pytest.raises(ValueError, match="already committed"):
                        worker.write(w, 3, e, records)
                    continue
                worker.write(w, 3, e, records)
                staged.setdefault(e, {})[w] = records
            elif op[0] == "commit":
                upto = op[1] if op[1] is not None else max(staged, default=watermark)
                sink.commit(op[1])
                if upto > watermark:
                    for e in [e for e in staged if e <= upto]:
                        committed[e] = staged.pop(e)
                    watermark = upto
            else:
                sink.abort_after(op[1])
                for e in [e for e in staged if e > max(op[1], watermark)]:
                    del staged[e]
        if os.path.exists(f"{root}/out"):
            got = read_committed(f"{root}/out", schema=schema).to_pylist()
        else:  # never written to nor committed: a reader is told, not given an empty table
            with pytest.raises(FileNotFoundError, match="does not exist"):
                read_committed(f"{root}/out")
            got = []
        want = [
            {"w": w, "e": e, "k": k}
            for e in sorted(committed)
            for w in sorted(committed[e])
            for (_, _, k) in committed[e][w]
        ]
        assert got == want
        leftovers = [n for _, _, names in os.walk(f"{root}/out") for n in names if ".tmp" in n]
        assert leftovers == []


def test_rewrite_replaces_a_part_and_abort_drops_uncommitted_epochs(tmp_path: Any) -> None:
    sink = ParquetSink(str(tmp_path / "out"))
    sink.write(0, 2, 0, [{"v": 1}])
    sink.write(0, 2, 0, [{"v": 2}])  # a replay of epoch 0 replaces the first write
    sink.write(1, 2, 1, [{"v": 3}])
    assert read_committed(str(tmp_path / "out")).num_rows == 0  # nothing committed yet
    sink.commit(0)
    assert read_committed(str(tmp_path / "out")).to_pylist() == [{"v": 2}]
    sink.abort_after(0)
    assert not (tmp_path / "out" / "epoch=1").exists()
    sink.write(1, 2, 1, [{"v": 4}])
    sink.commit(None)
    assert read_committed(str(tmp_path / "out")).to_pylist() == [{"v": 2}, {"v": 4}]


# -- clear errors ---------------------------------------------------------------------------


def test_missing_or_non_integer_epoch_column_is_refused_early(tmp_path: Any) -> None:
    write_files(str(tmp_path), [(0, "a", 1.0)], [], 4)
    with pytest.raises(SchemaError, match=r"epoch column 'ts' is not in .*\['e', 'name', 'x'\]"):
        ParquetSource(str(tmp_path), "ts")
    with pytest.raises(SchemaError, match=r"epoch column 'x' is double, not an integer"):
        ParquetSource(str(tmp_path), "x")
    with pytest.raises(SchemaError, match=r"column 'nope' is not in"):
        ParquetSource(str(tmp_path), columns=["nope"])


def test_unsorted_epochs_name_the_column_and_the_fix(tmp_path: Any) -> None:
    write_files(str(tmp_path), [(1, "a", 1.0), (0, "b", 2.0)], [], 4)
    src = ParquetSource(str(tmp_path), "e")
    with pytest.raises(SchemaError, match=r"epoch column 'e' is not sorted.*sortWithinPartitions"):
        read_all(src)


def test_files_with_different_schemas_name_the_column(tmp_path: Any) -> None:
    write_files(str(tmp_path), [(0, "a", 1.0)], [], 4)
    pq.write_table(pa.table({"e": [1], "name": [5], "x": [1.0]}), tmp_path / "f99.parquet")
    with pytest.raises(SchemaError, match=r"column 'name' is string in .* but int64 in .*f99"):
        ParquetSource(str(tmp_path))


def test_sink_errors_name_the_column_the_value_and_the_fix(tmp_path: Any) -> None:
    schema = pa.schema([("word", pa.string()), ("count", pa.int64())])
    sink = ParquetSink(str(tmp_path), schema=schema)
    with pytest.raises(SchemaError, match=r"column 'count': cannot convert 'many' \(str\)"):
        sink.write(0, 1, 0, [("a", 1), ("b", "many")])
    with pytest.raises(SchemaError, match=r"has column 'extra', which the schema"):
        sink.write(0, 1, 0, [{"word": "a", "count": 1, "extra": 0}])
    with pytest.raises(SchemaError, match=r"does not have the schema's 2 columns"):
        sink.write(0, 1, 0, [("a",)])
    with pytest.raises(SchemaError, match=r"tuples have no column names; give the sink a schema"):
        ParquetSink(str(tmp_path / "x")).write(0, 1, 0, [("a", 1)])
    strict = pa.schema([pa.field("word", pa.string(), nullable=False)])
    with pytest.raises(SchemaError, match=r"column 'word' is not nullable"):
        ParquetSink(str(tmp_path / "y"), schema=strict).write(0, 1, 0, [{"word": None}])
    with pytest.raises(SchemaError, match=r"column 'count': cannot cast string to the schema's"):
        sink.write(0, 1, 0, [pa.record_batch({"word": ["a"], "count": ["x"]})])
    with pytest.raises(SchemaError, match=r"column 'v': cannot convert .* to one Arrow type"):
        ParquetSink(str(tmp_path / "z")).write(0, 1, 0, [{"v": 1}, {"v": "one"}])


def test_a_sink_error_in_a_run_names_the_step_and_the_column(tmp_path: Any) -> None:
    flow = Dataflow("bad_sink")
    handle = flow.new_input()
    schema = pa.schema([("n", pa.int64())])
    handle.stream.sink(ParquetSink(str(tmp_path), schema=schema), name="to_parquet")
    handle.send([{"n": 1}, {"n": "x"}])
    with pytest.raises(UserFunctionError, match=r"'to_parquet'.*column 'n': cannot convert 'x'"):
        flow.run(workers=1, backend="inline")
