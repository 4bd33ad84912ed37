"""CSV, JSON-lines and text table sources against plain readers, and tables into Parquet.

The partition property: the partitions of a source, read in order, hold exactly the
file's rows in order (each line read by the one range it starts in), whatever the chunk
and split sizes; a replay from any recorded offset gives exactly the rows after it. A
deliberately broken source (a range that also reads the line running into it) shows the
same check catches a line read twice.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.files.table import (
    LINE,
    CsvTableSource,
    JsonLinesTableSource,
    TextTableSource,
)
from connectors.parquet import ParquetSink, read_committed
from operators.table import col
from tests.connectors.util import batches
from timely import ConfigError, Dataflow, Source

SCHEMA = pa.schema([("n", pa.int64()), ("s", pa.string())])

# Values with commas, quotes and non-ASCII; no "\r" or "\n" (a CSV record is one line).
TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=8
) | st.sampled_from(["a,b", '"', '""x"', "é,ü", "  ", ","])
ROWS = st.lists(st.tuples(st.none() | st.integers(-(2**40), 2**40), TEXT), max_size=25)
SIZES = st.integers(1, 48)
SPLITS = st.none() | st.integers(1, 64)
FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def rows_of(src: Source) -> list[dict[str, Any]]:
    """Every partition read in order, its batches' rows in order."""
    out: list[dict[str, Any]] = []
    for p in range(src.partitions()):
        for _, recs, _ in batches(src, p):
            for batch in recs:
                assert batch.schema.equals(src.schema)  # type: ignore[attr-defined]
                out.extend(batch.to_pylist())
    return out


def check_replay(src: Source, pick: int) -> None:
    """From each partition's ``pick``-th recorded offset on: exactly the batches after it."""
    for p in range(src.partitions()):
        whole = batches(src, p)
        k = pick % (len(whole) + 1)
        offset = None if k == 0 else whole[k - 1][2]
        again = batches(src, p, offset)
        assert [(e, [b.to_pylist() for b in r], o) for e, r, o in again] == [
            (e, [b.to_pylist() for b in r], o) for e, r, o in whole[k:]
        ]


def write_csv(path: Path, rows: list[tuple[Any, str]], header: bool, crlf: bool, end: bool) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n" if crlf else "\n")
    if header:
        w.writerow(["n", "s"])
    w.writerows([("" if n is None else n, s) for n, s in rows])
    text = buf.getvalue()
    if not end:
        text = text.rstrip("\n").removesuffix("\r")
    path.write_bytes(text.encode())


def expected_csv(rows: list[tuple[Any, str]]) -> list[dict[str, Any]]:
    # pyarrow.csv: an empty field is null in int64, "" in a string column
    return [{"n": n, "s": s} for n, s in rows]


@FAST
@given(ROWS, SIZES, SPLITS, st.booleans(), st.booleans(), st.booleans(), st.integers(0, 99))
def test_csv_partitions_hold_the_rows_once(
    tmp_path: Path,
    rows: list[tuple[Any, str]],
    chunk: int,
    split: int | None,
    header: bool,
    crlf: bool,
    end: bool,
    pick: int,
) -> None:
    path = tmp_path / "a.csv"
    write_csv(path, rows, header, crlf, end)
    src = CsvTableSource(path, SCHEMA, header=header, chunk_bytes=chunk, split_bytes=split)
    got = rows_of(src)
    assert got == expected_csv(rows)
    if path.stat().st_size and (rows or not header):
        options = pacsv.ReadOptions(column_names=None if header else ["n", "s"])
        whole = pacsv.read_csv(
            path, read_options=options, convert_options=pacsv.ConvertOptions(column_types=SCHEMA)
        )
        assert got == whole.to_pylist()
    check_replay(src, pick)


@FAST
@given(
    st.lists(
        st.fixed_dictionaries(
            {}, optional={"n": st.none() | st.integers(-(2**40), 2**40), "s": st.text(max_size=8)}
        ),
        max_size=25,
    ),
    SIZES,
    SPLITS,
    st.lists(st.booleans(), max_size=25),
    st.booleans(),
    st.integers(0, 99),
)
def test_json_lines_partitions_hold_the_rows_once(
    tmp_path: Path,
    rows: list[dict[str, Any]],
    chunk: int,
    split: int | None,
    blanks: list[bool],
    end: bool,
    pick: int,
) -> None:
    lines = []
    for i, r in enumerate(rows):
        if i < len(blanks) and blanks[i]:
            lines.append("  ")
        lines.append(json.dumps(r, ensure_ascii=False))
    text = "\n".join(lines) + ("\n" if end and lines else "")
    path = tmp_path / "a.jsonl"
    path.write_bytes(text.encode())
    src = JsonLinesTableSource(path, SCHEMA, chunk_bytes=chunk, split_bytes=split)
    parsed = [json.loads(t) for t in text.split("\n") if t.strip()]
    assert rows_of(src) == [{"n": r.get("n"), "s": r.get("s")} for r in parsed]
    check_replay(src, pick)


@FAST
@given(st.lists(TEXT, max_size=25), SIZES, SPLITS, st.booleans(), st.integers(0, 99))
def test_text_partitions_hold_the_lines_once(
    tmp_path: Path, lines: list[str], chunk: int, split: int | None, end: bool, pick: int
) -> None:
    text = "\n".join(lines) + ("\n" if end and lines else "")
    path = tmp_path / "a.txt"
    path.write_bytes(text.encode())
    src = TextTableSource(path, chunk_bytes=chunk, split_bytes=split)
    want = text.split("\n")
    if want and want[-1] == "":
        want.pop()  # the last line end ends a line, it does not start one
    assert [r["line"] for r in rows_of(src)] == want
    check_replay(src, pick)


class LineTwice(CsvTableSource):
    """Broken on purpose: a range starts at the line running into it, which the range
    before it finishes too, so that line is read twice."""

    def _align(self, f: Any, start: int, data_start: int) -> int:
        if start <= data_start:
            return data_start
        f.seek(data_start)
        before: bytes = f.read(start - data_start)
        return data_start + before.rfind(b"\n") + 1


def test_the_partition_check_catches_a_line_read_twice(tmp_path: Path) -> None:
    rows = [(i, f"row{i}") for i in range(10)]
    path = tmp_path / "a.csv"
    write_csv(path, rows, True, False, True)
    assert rows_of(CsvTableSource(path, SCHEMA, split_bytes=5)) == expected_csv(rows)
    with pytest.raises(AssertionError):
        assert rows_of(LineTwice(path, SCHEMA, split_bytes=5)) == expected_csv(rows)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_dataflow_reads_csv_files_once_per_row(tmp_path: Path, workers: int) -> None:
    rows = [(i, f"v,{i}") for i in range(40)]
    write_csv(tmp_path / "a.csv", rows[:25], True, False, True)
    write_csv(tmp_path / "b.csv", rows[25:], True, True, False)
    (tmp_path / "c.csv").write_bytes(b"")
    src = CsvTableSource(tmp_path, SCHEMA, chunk_bytes=16, split_bytes=40, batches_per_epoch=2)
    flow = Dataflow("csv")
    flow.source(src).as_table(src.schema).where(col("n") >= 0).collect("out")
    out = flow.run(workers=workers, backend="inline")["out"]
    got = sorted(r for _, t in out for r in zip(t["n"].to_pylist(), t["s"].to_pylist()))
    assert got == rows


def test_schemas_are_inferred_from_the_head(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("x,y,z\n1,2.5,\n2,,q\n")
    assert CsvTableSource(tmp_path / "a.csv").schema == pa.schema(
        [("x", pa.int64()), ("y", pa.float64()), ("z", pa.string())]
    )
    (tmp_path / "b.csv").write_text("1,a\n")
    assert CsvTableSource(tmp_path / "b.csv", header=False).schema.names == ["f0", "f1"]
    (tmp_path / "a.jsonl").write_text('{"a": 1, "b": null}\n{"a": 2, "c": [1]}\n')
    assert JsonLinesTableSource(tmp_path / "a.jsonl").schema == pa.schema(
        [("a", pa.int64()), ("b", pa.string()), ("c", pa.list_(pa.int64()))]
    )


def test_a_schema_picks_and_orders_header_columns(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("s,x,n\nq,0,1\n")
    (tmp_path / "b.csv").write_text("n,s\n2,r\n")
    src = CsvTableSource(tmp_path, {"n": "int64", "s": "string"})
    assert rows_of(src) == [{"n": 1, "s": "q"}, {"n": 2, "s": "r"}]


def test_bad_configuration_fails_when_the_source_is_made(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("n,s\n1,a\n")
    with pytest.raises(ConfigError, match="chunk_bytes must be an int >= 1"):
        CsvTableSource(path, chunk_bytes=0)
    with pytest.raises(ConfigError, match="does not exist"):
        CsvTableSource(tmp_path / "missing.csv")
    with pytest.raises(ConfigError, match=r"has no column 'm'.*give a schema"):
        CsvTableSource(path, {"m": "int64"})
    with pytest.raises(ConfigError, match="delimiter must be one character"):
        CsvTableSource(path, delimiter="\n")
    with pytest.raises(ConfigError, match="Arrow types"):
        JsonLinesTableSource(path, 3)
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="no rows to infer a schema from; give a schema"):
        JsonLinesTableSource(tmp_path / "e.jsonl")


def test_bad_input_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("n,s\n1,a\n2,b\nx,c\n")
    with pytest.raises(ValueError, match=r"a\.csv: line 4 \(at byte 12\) is not a CSV record"):
        rows_of(CsvTableSource(path, SCHEMA))
    path.write_text('n,s\n1,a\n2,"b\nc"\n')
    with pytest.raises(ValueError, match=r"line 3 \(at byte 8\).*runs over several lines"):
        rows_of(CsvTableSource(path, SCHEMA))
    jpath = tmp_path / "a.jsonl"
    jpath.write_text('{"n": 1}\n{"n": 2} {"n": 3}\n')
    with pytest.raises(ValueError, match=r"line 2 \(at byte 9\) holds 2 JSON records"):
        rows_of(JsonLinesTableSource(jpath, SCHEMA))
    jpath.write_text('{"n": 1}\n\n{"n": "x"}\n')
    with pytest.raises(ValueError, match=r"line 3 \(at byte 10\) is not a JSON record"):
        rows_of(JsonLinesTableSource(jpath, SCHEMA))


def test_a_table_stream_round_trips_through_parquet(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    rows = [{"n": i, "s": f"é{i}"} for i in range(30)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    src = JsonLinesTableSource(path, SCHEMA, chunk_bytes=64, split_bytes=100, batches_per_epoch=1)
    flow = Dataflow("to-parquet")
    flow.source(src).as_table(src.schema).sink(ParquetSink(tmp_path / "out"))
    flow.run(workers=2, backend="inline")
    table = read_committed(tmp_path / "out", epoch_column="epoch")
    assert table.schema.remove(table.schema.get_field_index("epoch")).equals(SCHEMA)
    assert sorted(table.select(["n", "s"]).to_pylist(), key=lambda r: r["n"]) == rows
    assert set(table["epoch"].to_pylist()) == set(range(max(table["epoch"].to_pylist()) + 1))


def test_a_parquet_sink_with_another_schema_fails_when_the_graph_is_built(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("n,s\n1,a\n")
    flow = Dataflow("mismatch")
    table = flow.source(CsvTableSource(path, SCHEMA)).as_table(SCHEMA)
    with pytest.raises(ValueError, match="select the sink's columns first"):
        table.sink(ParquetSink(tmp_path / "out", pa.schema([("n", pa.int32())])))


def test_text_table_source_reads_lines(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\r\nb\n\nc")
    src = TextTableSource(tmp_path / "a.txt", chunk_bytes=2)
    assert src.schema == LINE
    assert [r["line"] for r in rows_of(src)] == ["a", "b", "", "c"]
