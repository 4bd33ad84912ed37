"""Text, CSV and JSON lines sources against the stdlib's own readers of the same files."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.collections import CollectingSink
from connectors.files import CsvSource, JsonLinesSource, TextSource
from tests.connectors.util import batches, records, worker_share
from timely import ConfigError, Dataflow, Source, UserFunctionError

# -- plain-Python references -----------------------------------------------------------


def ref_text_lines(path: str) -> list[str]:
    """Lines split at "\\n" only (newline="\\n"), without "\\n" or "\\r\\n"."""
    with open(path, encoding="utf-8", newline="\n") as f:
        return [
            line[:-2] if line.endswith("\r\n") else line[:-1] if line.endswith("\n") else line
            for line in f
        ]


def line_starts(data: bytes, begin: int = 0) -> list[int]:
    """Byte offsets where lines start, from ``begin`` on."""
    if begin >= len(data):
        return []
    return [begin] + [i + 1 for i in range(begin, len(data) - 1) if data[i] == 0x0A]


def ref_json(path: str) -> list[Any]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f.read().split("\n") if line.strip()]


def ref_csv(path: str, rows: str) -> list[Any]:
    with open(path, encoding="utf-8", newline="") as f:
        if rows == "dict":
            return list(csv.DictReader(f))
        return [tuple(r) for r in list(csv.reader(f))[1:] if r]


def canon(value: Any) -> str:
    """A hashable, order-free spelling of a record (dicts may have the key None)."""
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{k!r}:{canon(v)}" for k, v in value.items())) + "}"
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "[" + ",".join(canon(v) for v in value) + "]"
    return repr(value)


@contextmanager
def files(contents: list[bytes]) -> Iterator[tuple[str, list[str]]]:
    """A directory holding ``f0 .. fn`` with ``contents``; yields it and the file paths."""
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, data in enumerate(contents):
            p = os.path.join(d, f"f{i}")
            with open(p, "wb") as f:
                f.write(data)
            paths.append(p)
        yield d, paths


def run_collect(src: Source, workers: int, seed: int = 0) -> list[tuple[int, Any]]:
    flow = Dataflow("files")
    flow.source(src).collect("out")
    return list(flow.run(workers=workers, backend="inline", seed=seed)["out"])


# -- strategies --------------------------------------------------------------------------

chars = st.characters(blacklist_characters="\n", blacklist_categories=("Cs",))
line_st = st.text(chars, max_size=6)
text_file_st = st.builds(
    lambda lines, end: ("\n".join(lines) + end).encode("utf-8"),
    st.lists(line_st, max_size=8),
    st.sampled_from(["", "\n", "\r\n"]),
)
split_st = st.one_of(st.none(), st.integers(1, 40))
json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)
plain = st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",))
field = st.text(st.sampled_from('ab,"; é') | plain, max_size=4)
# Line breaks inside values; a bare "\r" is not a line end (only "\n" and "\r\n" are).
multiline_cell = st.lists(st.sampled_from(["a", ",", '"', "\n", "\r\n", " ", "é"]), max_size=5).map(
    "".join
)


# -- text ------------------------------------------------------------------------------


@given(
    contents=st.lists(text_file_st, min_size=1, max_size=3),
    split=split_st,
    batch_size=st.integers(1, 5),
    per_epoch=st.one_of(st.none(), st.integers(1, 4)),
)
def test_text_partitions_hold_the_lines_that_start_in_their_byte_range(
    contents: list[bytes], split: int | None, batch_size: int, per_epoch: int | None
) -> None:
    with files(contents) as (d, paths):
        src = TextSource(d, split_bytes=split, batch_size=batch_size, records_per_epoch=per_epoch)
        want = []
        for path, data in zip(paths, contents):
            lines, starts = ref_text_lines(path), line_starts(data)
            assert len(lines) == len(starts)
            step = split or max(len(data), 1)
            for s in range(0, len(data), step):
                want.append([x for x, at in zip(lines, starts) if s <= at < s + step])
        assert src.partitions() == len(want)
        for p, lines_p in enumerate(want):
            got = batches(src, p)
            assert [r for _, recs, _ in got for r in recs] == lines_p
            assert all(1 <= len(recs) <= batch_size for _, recs, _ in got)
            epochs = [e for e, recs, _ in got for _ in recs]
            assert epochs == [i // per_epoch if per_epoch else 0 for i in range(len(lines_p))]


@given(
    contents=st.lists(
        st.lists(
            st.text(
                st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=6
            ),
            max_size=8,
        ),
        min_size=1,
        max_size=3,
    ),
    split=split_st,
    workers=st.integers(1, 3),
    seed=st.integers(0, 9),
)
def test_text_through_a_dataflow_with_epochs_from_a_function(
    contents: list[list[str]], split: int | None, workers: int, seed: int
) -> None:
    # Each file sorted by length, so that epoch_of=len never decreases within a file.
    data = [("".join(x + "\n" for x in sorted(lines, key=len))).encode() for lines in contents]
    with files(data) as (d, paths):
        out = run_collect(TextSource(d, split_bytes=split, epoch_of=len), workers, seed)
        want = [(len(x), x) for p in paths for x in ref_text_lines(p)]
    assert Counter(out) == Counter(want)


# -- JSON lines ------------------------------------------------------------------------


@st.composite
def jsonl_file(draw: st.DrawFn) -> bytes:
    """Records {"t": epoch, "v": value} in epoch order, with blank lines here and there."""
    values = draw(st.lists(json_value, max_size=6))
    epochs = sorted(draw(st.lists(st.integers(0, 4), min_size=len(values), max_size=len(values))))
    out = []
    for t, v in zip(epochs, values):
        out.append(draw(st.sampled_from(["", " \n", "\n", "\t\r\n"])))
        out.append(json.dumps({"t": t, "v": v}, ensure_ascii=draw(st.booleans())) + "\n")
    return "".join(out).encode("utf-8")


@given(
    contents=st.lists(jsonl_file(), min_size=1, max_size=3),
    split=split_st,
    batch_size=st.integers(1, 4),
    workers=st.integers(1, 3),
)
def test_json_lines_round_trip_with_epochs_from_a_field(
    contents: list[bytes], split: int | None, batch_size: int, workers: int
) -> None:
    with files(contents) as (d, paths):
        src = JsonLinesSource(
            d, epoch_of=lambda r: r["t"], split_bytes=split, batch_size=batch_size
        )
        out = run_collect(src, workers)
        want = [(r["t"], canon(r)) for p in paths for r in ref_json(p)]
    assert Counter((e, canon(r)) for e, r in out) == Counter(want)


# -- CSV -------------------------------------------------------------------------------


@st.composite
def csv_file(draw: st.DrawFn, cell: st.SearchStrategy[str]) -> bytes:
    header = draw(
        st.lists(
            st.text(st.sampled_from('abc," '), min_size=1, max_size=3),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    rows = draw(st.lists(st.lists(cell, max_size=4), max_size=6))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator=draw(st.sampled_from(["\n", "\r\n"])))
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue().encode("utf-8")


@given(
    contents=st.lists(csv_file(field), min_size=1, max_size=3),
    rows=st.sampled_from(["dict", "tuple"]),
    split=split_st,
    batch_size=st.integers(1, 4),
    workers=st.integers(1, 3),
)
def test_csv_round_trip_against_the_csv_module(
    contents: list[bytes], rows: str, split: int | None, batch_size: int, workers: int
) -> None:
    with files(contents) as (d, paths):
        src = CsvSource(d, rows=rows, split_bytes=split, batch_size=batch_size)  # type: ignore[arg-type]
        out = run_collect(src, workers)
        want = [(0, canon(r)) for p in paths for r in ref_csv(p, rows)]
    assert Counter((e, canon(r)) for e, r in out) == Counter(want)


@given(
    contents=st.lists(csv_file(multiline_cell), max_size=3),
    batch_size=st.integers(1, 4),
)
def test_multiline_csv_reads_quoted_line_breaks_one_file_per_partition(
    contents: list[bytes], batch_size: int
) -> None:
    with files(contents) as (d, paths):
        src = CsvSource(d, multiline=True, split_bytes=3, batch_size=batch_size)
        assert src.partitions() <= len(contents)  # split_bytes is ignored: whole files
        parts = [[r for _, r in records(src, p)] for p in range(src.partitions())]
        want = [ref_csv(p, "dict") for p in paths]
        assert [x for x in parts if x] == [x for x in want if x]


def test_csv_header_options() -> None:
    with files([b"a,b\n1,2\n3\n4,5,6\n"]) as (d, _):
        assert [r for _, r in records(CsvSource(d), 0)] == [
            {"a": "1", "b": "2"},
            {"a": "3", "b": None},
            {"a": "4", "b": "5", None: ["6"]},
        ]
        renamed = CsvSource(d, fieldnames=["x", "y"])  # the header row is still skipped
        assert records(renamed, 0)[0] == (0, {"x": "1", "y": "2"})
        no_header = CsvSource(d, header=False, rows="tuple", delimiter=";")
        assert [r for _, r in records(no_header, 0)] == [("a,b",), ("1,2",), ("3",), ("4,5,6",)]


# -- determinism and resuming ------------------------------------------------------------


@given(
    contents=st.lists(text_file_st, min_size=1, max_size=3),
    split=split_st,
    workers=st.integers(1, 3),
)
def test_two_reads_give_each_worker_the_same_records(
    contents: list[bytes], split: int | None, workers: int
) -> None:
    with files(contents) as (d, paths):
        a = TextSource(d, split_bytes=split, batch_size=2)
        b = TextSource([*paths], split_bytes=split, batch_size=2)  # the same files, listed
        shares = [worker_share(a, w, workers) for w in range(workers)]
        assert shares == [worker_share(b, w, workers) for w in range(workers)]
        assert Counter(r for s in shares for _, r in s) == Counter(
            x for p in paths for x in ref_text_lines(p)
        )


@given(
    contents=st.lists(text_file_st, min_size=1, max_size=2),
    split=split_st,
    workers=st.integers(1, 3),
    seeds=st.tuples(st.integers(0, 99), st.integers(0, 99)),
)
def test_two_runs_give_each_worker_the_same_records(
    contents: list[bytes], split: int | None, workers: int, seeds: tuple[int, int]
) -> None:
    """Through the runtime: what each worker writes (no exchange) is the same in two runs."""
    shares = []
    with files(contents) as (d, _):
        for seed in seeds:
            sink = CollectingSink()
            flow = Dataflow("determinism")
            flow.source(TextSource(d, split_bytes=split, records_per_epoch=3)).sink(sink)
            flow.run(workers=workers, backend="inline", seed=seed)
            shares.append({k: Counter(v) for k, v in sink.staged.items()})
    assert shares[0] == shares[1]


def _sources(d: str, kind: str, batch_size: int, split: int | None) -> Source:
    if kind == "text":
        return TextSource(d, batch_size=batch_size, split_bytes=split, records_per_epoch=2)
    if kind == "json":
        return JsonLinesSource(
            d, batch_size=batch_size, split_bytes=split, epoch_of=lambda r: r["t"]
        )
    return CsvSource(d, batch_size=batch_size, split_bytes=split, records_per_epoch=3)


@given(
    data=st.data(),
    kind=st.sampled_from(["text", "json", "csv"]),
    split=split_st,
    batch_size=st.integers(1, 3),
    cut=st.integers(0, 10),
)
def test_reading_from_a_mid_offset_gives_exactly_the_rest(
    data: st.DataObject, kind: str, split: int | None, batch_size: int, cut: int
) -> None:
    gen = {"text": text_file_st, "json": jsonl_file(), "csv": csv_file(field)}[kind]
    contents = data.draw(st.lists(gen, min_size=1, max_size=2))
    with files(contents) as (d, _):
        src = _sources(d, kind, batch_size, split)
        for p in range(src.partitions()):
            full = batches(src, p)
            at = min(cut, len(full))
            offset = full[at - 1][2] if at else None
            offset = msgpack.unpackb(msgpack.packb(offset))  # as a checkpoint stores it
            fresh = _sources(d, kind, batch_size, split)  # a restored run makes a new source
            rest = [(e, canon(r)) for e, recs, _ in full[at:] for r in recs]
            assert [(e, canon(r)) for e, r in records(fresh, p, offset)] == rest


# -- locations and errors --------------------------------------------------------------


def test_file_uris_hidden_files_and_appended_bytes() -> None:
    with files([b"a\nb\n", b"c\n"]) as (d, paths):
        for hidden in ("_COMMITTED", ".part.tmp", "_tmp/x"):
            os.makedirs(os.path.dirname(os.path.join(d, hidden)), exist_ok=True)
            with open(os.path.join(d, hidden), "w") as f:
                f.write("hidden\n")
        src = TextSource("file://" + d)
        with open(paths[1], "a") as f:
            f.write("appended later\n")  # not listed when the source was made: not read
        assert [r for p in range(src.partitions()) for _, r in records(src, p)] == ["a", "b", "c"]


def test_bad_json_names_the_file_and_byte(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_bytes(b'{"a": 1}\n{"a": \n')
    with pytest.raises(ValueError, match=rf"{tmp_path}/e.jsonl: the line at byte 9 is not JSON"):
        records(JsonLinesSource(tmp_path), 0)


def test_decreasing_epochs_name_the_file_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_bytes(b"bb\na\n")
    with pytest.raises(ValueError, match=rf"{tmp_path}/t.txt: the record at byte 3 .* sort it"):
        records(TextSource(tmp_path, epoch_of=len), 0)


def test_a_failing_epoch_of_stops_the_run_with_its_location_and_record() -> None:
    with files([b'{"t": 0}\n{"x": 1}\n']) as (d, _):
        flow = Dataflow("bad-epoch")
        flow.source(JsonLinesSource(d, epoch_of=lambda r: r["t"]), name="events").collect("out")
        with pytest.raises(UserFunctionError) as info:
            flow.run(workers=1, backend="inline")
    msg = str(info.value)
    assert "'events'" in msg and "test_file_sources.py" in msg and "{'x': 1}" in msg
    assert "KeyError" in msg


def test_a_quoted_line_break_needs_multiline() -> None:
    with files([b'a,b\n1,"x\ny"\n']) as (d, _):
        with pytest.raises(ValueError, match="multiline=True"):
            records(CsvSource(d), 0)
        assert records(CsvSource(d, multiline=True), 0) == [(0, {"a": "1", "b": "x\ny"})]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda d: TextSource(d + "/missing"), "does not exist"),
        (lambda d: TextSource(d, epoch_of=len, records_per_epoch=2), "not both"),
        (lambda d: TextSource(d, split_bytes=0), "split_bytes"),
        (lambda d: TextSource(d, batch_size=-1), "batch_size"),
        (lambda d: CsvSource(d, header=False), "fieldnames"),
        (lambda d: CsvSource(d, rows="list"), "'dict' or 'tuple'"),  # type: ignore[arg-type]
        (lambda d: CsvSource(d, delimiter="::"), "delimiter"),
        (lambda d: TextSource("nosuchscheme://x/y"), "cannot open"),
        (lambda d: TextSource([]), "no files"),
    ],
)
def test_bad_configuration_fails_when_the_source_is_made(make: Any, match: str) -> None:
    with files([b"a\n"]) as (d, _), pytest.raises(ConfigError, match=match):
        make(d)


def test_invalid_utf8_names_the_line_and_byte(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_bytes(b"ok\nfine\nbad \xff here\n")
    with pytest.raises(ValueError, match=r"bad.txt: the line at byte 8 is not valid UTF-8 .* 12"):
        records(TextSource(tmp_path), 0)
