"""The commit protocol, the same for every committed-epoch sink: a JSON-lines file sink
and ParquetSink run the same checks. Each test is a point where the two used to differ."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import connectors.files as files
import connectors.parquet as parquet
from connectors.committed import (
    CommittedEpochSink,
    Digest,
    committed_epoch,
    committed_files,
    digest,
)
from tests.connectors.test_file_sinks import layout
from tests.connectors.test_file_sources import json_value
from timely import ConfigError


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    return [(e, r["v"]) for e, r in files.read_committed(path)]


def _read_parquet(path: Path) -> list[tuple[int, Any]]:
    table = parquet.read_committed(path, epoch_column="epoch")
    return [(r["epoch"], r["v"]) for r in table.to_pylist()]


KINDS = {
    "jsonl": (files.JsonLinesSink, _read_jsonl),
    "parquet": (parquet.ParquetSink, _read_parquet),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(kind: str, path: Path) -> CommittedEpochSink:
    sink: CommittedEpochSink = KINDS[kind][0](path)
    return sink


def read(kind: str, path: Path) -> list[tuple[int, Any]]:
    return KINDS[kind][1](path)


def write_epochs(sink: CommittedEpochSink, epochs: range, workers: int = 1) -> None:
    for e in epochs:
        for w in reversed(range(workers)):
            sink.write(w, workers, e, [{"v": 10 * e + w}])


def test_the_marker_only_moves_forward(kind: str, tmp_path: Path) -> None:
    sink = make(kind, tmp_path)
    write_epochs(sink, range(4))
    sink.commit(2)
    sink.commit(1)
    assert committed_epoch(tmp_path) == sink.committed_epoch() == 2
    sink.abort_after(0)  # committed epochs are kept whatever the restore point
    sink.commit(None)  # only epochs <= 2 are left: nothing to move forward to
    assert committed_epoch(tmp_path) == 2
    assert read(kind, tmp_path) == [(0, 0), (1, 10), (2, 20)]


def test_abort_after_removes_uncommitted_epochs_and_temp_files(kind: str, tmp_path: Path) -> None:
    sink = make(kind, tmp_path)
    write_epochs(sink, range(4), workers=2)
    sink.commit(0)
    ext = sink.extension
    for junk in [
        f"epoch=1/.part-0-of-2.{ext}.dead.tmp",  # a write that died, in a kept epoch
        f"epoch=3/.part-1-of-2.{ext}.beef.tmp",  # ... in an aborted one
        "._COMMITTED.cafe.tmp",  # a marker write that died
    ]:
        (tmp_path / junk).write_bytes(b"junk")
    sink.abort_after(1)
    assert layout(str(tmp_path)) == [
        "_COMMITTED",
        *[f"epoch={e}/part-{w}-of-2.{ext}" for e in (0, 1) for w in (0, 1)],
    ]
    fresh = make(kind, tmp_path / "fresh")
    write_epochs(fresh, range(2))
    fresh.abort_after(-1)  # -1: every uncommitted epoch
    assert layout(str(tmp_path / "fresh")) == []


def test_committed_epoch_of_a_missing_or_empty_directory(kind: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert committed_epoch(missing) == make(kind, missing).committed_epoch() == -1
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read(kind, missing)  # a mistyped path is not an empty output
    (tmp_path / "empty").mkdir()
    assert committed_epoch(tmp_path / "empty") == -1
    assert read(kind, tmp_path / "empty") == []
    make(kind, missing).commit(None)  # a run that wrote nothing
    assert committed_epoch(missing) == -1
    assert read(kind, missing) == [] and layout(str(missing)) == ["_COMMITTED"]


def test_read_committed_ignores_uncommitted_epochs_and_other_files(
    kind: str, tmp_path: Path
) -> None:
    sink = make(kind, tmp_path)
    write_epochs(sink, range(3), workers=2)
    sink.commit(1)
    for stray in ["epoch=0/notes.txt", "epoch=x/part-0-of-1.bin", "epoch=+0/part-0-of-1.bin"]:
        (tmp_path / stray).parent.mkdir(exist_ok=True)
        (tmp_path / stray).write_bytes(b"")
    assert read(kind, tmp_path) == [(0, 0), (0, 1), (1, 10), (1, 11)]
    assert [(e, p.rsplit("/", 2)[-1]) for e, p in committed_files(tmp_path)] == [
        (e, f"part-{w}-of-2.{sink.extension}") for e in (0, 1) for w in (0, 1)
    ]


def test_writing_a_committed_epoch_is_refused(kind: str, tmp_path: Path) -> None:
    write_epochs(make(kind, tmp_path), range(2))
    make(kind, tmp_path).commit(None)
    second = make(kind, tmp_path)  # a second job, or a worker process, on the same directory
    with pytest.raises(ValueError, match=r"epoch 1 is already committed .* through 1\)"):
        second.write(0, 1, 1, [{"v": -1}])
    second.write(0, 1, 2, [{"v": 20}])
    assert read(kind, tmp_path) == [(0, 0), (1, 10)]


def test_a_file_is_not_a_directory_to_write_into(kind: str, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is a file"):
        make(kind, tmp_path / "f")


# -- the digest a replay is compared by ------------------------------------------------------
_text = st.text(
    st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=5
)
_cell = st.text(st.sampled_from('ab,"\r\n é'), max_size=4)  # CSV quoting and line breaks
DIGESTED: dict[str, tuple[Callable[[str], CommittedEpochSink], st.SearchStrategy[Any]]] = {
    "text": (files.TextSink, _text),
    "jsonl": (files.JsonLinesSink, json_value),
    "csv": (
        lambda p: files.CsvSink(p, fieldnames=["k", "v"]),
        st.fixed_dictionaries({"k": _cell, "v": _cell}),
    ),
    "parquet": (
        lambda p: parquet.ParquetSink(p, schema=pa.schema([("k", pa.string()), ("v", pa.int64())])),
        st.fixed_dictionaries(
            {"k": st.none() | _text, "v": st.none() | st.integers(-(2**63), 2**63 - 1)}
        ),
    ),
}


def _split(records: list[Any], cuts: list[int]) -> list[list[Any]]:
    """``records`` cut into parts at ``cuts`` (empty parts dropped: a worker writes none)."""
    bounds = [0, *sorted(c % (len(records) + 1) for c in cuts), len(records)]
    return [records[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(deadline=None, max_examples=60)
@given(data=st.data(), kind=st.sampled_from(sorted(DIGESTED)))
def test_an_epochs_digest_is_the_same_however_its_rows_are_ordered_or_split(
    data: st.DataObject, kind: str
) -> None:
    """The decision for rescaled replays: parts' digests add up to the epoch's, the same
    for any order of the rows and any split over workers (a replay on other workers),
    and one changed, added or dropped row changes it."""
    make, record = DIGESTED[kind]
    sink = make(tempfile.mkdtemp())
    records = data.draw(st.lists(record, min_size=1, max_size=12))
    one = data.draw(st.lists(st.integers(0, 20), max_size=3))
    other = data.draw(st.lists(st.integers(0, 20), max_size=3))
    shuffled = data.draw(st.permutations(records))

    def epoch(parts: list[list[Any]]) -> Digest:
        total = Digest()
        for part in parts:
            total += digest(sink.row_bytes(sink.encode(part)))
        return total

    whole = epoch(_split(records, one))
    assert whole.rows == len(records)
    assert epoch(_split(shuffled, other)) == whole
    changed = data.draw(record.filter(lambda r: r not in records))
    assert epoch(_split([*records, changed], one)) != whole
    assert epoch(_split(records[1:], one)) != whole if records[1:] else True
    assert epoch(_split([changed, *records[1:]], other)) != whole
