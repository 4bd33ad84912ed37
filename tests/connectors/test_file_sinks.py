"""File sinks: per-epoch parts, idempotent writes, commit and abort, read back exactly once."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.collections import from_collection
from connectors.files import (
    CsvSink,
    JsonLinesSink,
    JsonLinesSource,
    TextSink,
    TextSource,
    committed_epoch,
    read_committed,
)
from tests.connectors.test_file_sources import canon, json_value
from timely import ConfigError, Dataflow, UserFunctionError

no_surrogates = st.characters(blacklist_categories=("Cs",))
text_record = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)))
text_record = text_record.filter(lambda s: not s.endswith("\r"))
csv_record = st.fixed_dictionaries(
    {"k": st.text(no_surrogates, max_size=4), "v": st.text(no_surrogates, max_size=4)}
)

FORMATS: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "text": (TextSink, text_record),
    "jsonl": (JsonLinesSink, json_value),
    "csv": (lambda d: CsvSink(d, fieldnames=["k", "v"]), csv_record),
}


def layout(root: str) -> list[str]:
    """Every file under ``root``, relative, sorted."""
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
    )


@given(
    data=st.data(),
    kind=st.sampled_from(sorted(FORMATS)),
    n_epochs=st.integers(1, 4),
    workers=st.integers(1, 3),
    seed=st.integers(0, 9),
)
def test_round_trip_through_a_dataflow(
    data: st.DataObject, kind: str, n_epochs: int, workers: int, seed: int
) -> None:
    make, record = FORMATS[kind]
    epochs = [data.draw(st.lists(record, max_size=6)) for _ in range(n_epochs)]
    items = [(e, r) for e, recs in enumerate(epochs) for r in recs]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        flow = Dataflow("sink")
        stream = flow.source(from_collection(items, epoch_of=lambda t: t[0], partitions=3))
        stream.exchange(lambda t: canon(t[1])).select(lambda t: t[1]).sink(make(out))
        flow.run(workers=workers, backend="inline", seed=seed)
        got = read_committed(out)
        files = layout(out)
        committed = committed_epoch(out)
    assert Counter((e, canon(r)) for e, r in got) == Counter((e, canon(r)) for e, r in items)
    assert [e for e, _ in got] == sorted(e for e, _ in got)
    written = {e for e, recs in enumerate(epochs) if recs}
    assert committed == max(written, default=-1)
    # one part per worker that held records of an epoch; nothing hidden or temporary is left
    ext = {"text": "txt"}.get(kind, kind)
    part = re.compile(rf"epoch=(\d+)/part-(\d+)-of-{workers}\.{ext}")
    matches = [part.fullmatch(f) for f in files if f != "_COMMITTED"]
    assert all(m is not None and int(m.group(2)) < workers for m in matches), files
    assert {int(m.group(1)) for m in matches if m} == written
    assert "_COMMITTED" in files


def test_a_second_write_of_a_part_replaces_the_first(tmp_path: Path) -> None:
    sink = JsonLinesSink(tmp_path)
    sink.write(0, 2, 5, [1, 2, 3])
    sink.write(0, 2, 5, [4])  # a replay of the same worker's epoch
    sink.write(1, 2, 5, [9])
    assert layout(str(tmp_path)) == ["epoch=5/part-0-of-2.jsonl", "epoch=5/part-1-of-2.jsonl"]
    assert (tmp_path / "epoch=5/part-0-of-2.jsonl").read_text() == "4\n"
    sink.commit(None)
    assert read_committed(tmp_path) == [(5, 4), (5, 9)]


def test_nothing_is_visible_before_a_commit_and_commits_only_move_forward(tmp_path: Path) -> None:
    sink = TextSink(tmp_path)
    for e in range(4):
        sink.write(0, 1, e, [f"e{e}"])
    assert committed_epoch(tmp_path) == -1 and read_committed(tmp_path) == []
    sink.commit(1)
    assert read_committed(tmp_path) == [(0, "e0"), (1, "e1")]
    sink.commit(0)
    assert committed_epoch(tmp_path) == 1
    sink.commit(None)
    assert read_committed(tmp_path) == [(e, f"e{e}") for e in range(4)]
    assert json.loads((tmp_path / "_COMMITTED").read_text()) == {"epoch": 3}


def test_commit_none_with_no_output_marks_the_run_done(tmp_path: Path) -> None:
    TextSink(tmp_path / "empty").commit(None)
    assert committed_epoch(tmp_path / "empty") == -1
    assert read_committed(tmp_path / "empty") == []


def test_abort_after_then_replay_gives_each_epoch_once(tmp_path: Path) -> None:
    """A run with 2 workers fails after a checkpoint at epoch 1; a restore on 3 replays 2..4."""
    sink = JsonLinesSink(tmp_path)
    want = {e: [e * 10 + i for i in range(5)] for e in range(5)}
    for e in range(5):
        for w in range(2):
            sink.write(w, 2, e, want[e][w::2])
    sink.commit(1)
    # a failed write left a temporary file behind in a committed epoch
    (tmp_path / "epoch=1" / ".part-0-of-2.jsonl.deadbeef.tmp").write_text("[junk\n")
    sink.abort_after(1)
    assert layout(str(tmp_path)) == [
        "_COMMITTED",
        "epoch=0/part-0-of-2.jsonl",
        "epoch=0/part-1-of-2.jsonl",
        "epoch=1/part-0-of-2.jsonl",
        "epoch=1/part-1-of-2.jsonl",
    ]
    for e in range(2, 5):
        for w in range(3):
            sink.write(w, 3, e, want[e][w::3])
    sink.commit(None)
    got = read_committed(tmp_path)
    assert sorted(got) == sorted((e, r) for e, rs in want.items() for r in rs)


def test_abort_after_keeps_committed_epochs(tmp_path: Path) -> None:
    sink = TextSink(tmp_path)
    for e in range(3):
        sink.write(0, 1, e, ["x"])
    sink.commit(1)
    sink.abort_after(-1)  # -1: every uncommitted epoch
    assert layout(str(tmp_path)) == [
        "_COMMITTED",
        "epoch=0/part-0-of-1.txt",
        "epoch=1/part-0-of-1.txt",
    ]
    fresh = TextSink(tmp_path / "fresh")
    fresh.write(0, 1, 0, ["y"])
    fresh.abort_after(-1)
    assert layout(str(tmp_path / "fresh")) == []


def test_csv_sink_rows_and_header(tmp_path: Path) -> None:
    dicts = CsvSink(tmp_path / "d")
    dicts.write(0, 1, 0, [{"a": "1", "b": "x,\r\ny"}, {"a": None, "b": '"'}])
    dicts.commit(None)
    assert (tmp_path / "d/epoch=0/part-0-of-1.csv").read_bytes().startswith(b"a,b\r\n")
    assert dicts.read_committed() == [(0, {"a": "1", "b": "x,\r\ny"}), (0, {"a": "", "b": '"'})]
    tuples = CsvSink(tmp_path / "t", header=False, rows="tuple")
    tuples.write(0, 1, 0, [("1", 2), ["3", None]])
    tuples.commit(None)
    assert tuples.read_committed() == [(0, ("1", "2")), (0, ("3", ""))]
    with pytest.raises(ValueError, match="fieldnames"):
        CsvSink(tmp_path / "x").write(0, 1, 0, [("1", "2")])
    with pytest.raises(ValueError, match=r"fields \['c'\]"):
        CsvSink(tmp_path / "x", fieldnames=["a"]).write(0, 1, 0, [{"a": 1, "c": 2}])


def test_a_bad_record_stops_the_run_naming_the_sink_and_epoch(tmp_path: Path) -> None:
    flow = Dataflow("bad")
    flow.source(from_collection(["ok", 7], epoch_of=lambda r: 2 if r == 7 else 0)).sink(
        TextSink(tmp_path), name="lines-out"
    )
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=1, backend="inline")
    msg = str(info.value)
    assert "'lines-out'" in msg and "(2,)" in msg and "7" in msg and ".select(str)" in msg
    assert committed_epoch(tmp_path) == -1  # a failed run commits nothing


def test_sink_locations(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is a file"):
        TextSink(tmp_path / "f")
    uri = JsonLinesSink("file://" + str(tmp_path / "u"))
    uri.write(0, 1, 0, [{"a": [1, 2]}])
    uri.commit(None)
    assert read_committed(tmp_path / "u") == [(0, {"a": [1, 2]})]
    # a sink's folder reads back with a source too: markers and temp files are skipped
    assert [r for _, r in _read_all(JsonLinesSource(tmp_path / "u"))] == [{"a": [1, 2]}]


def test_unknown_extensions_need_a_format(tmp_path: Path) -> None:
    (tmp_path / "epoch=0").mkdir()
    (tmp_path / "epoch=0" / "part-0-of-1.bin").write_bytes(b"\x00")
    (tmp_path / "_COMMITTED").write_text('{"epoch": 0}')
    with pytest.raises(ValueError, match=r"no format for '\.bin'"):
        read_committed(tmp_path)


def _read_all(src: Any) -> list[tuple[int, Any]]:
    from tests.connectors.util import records

    return [pair for p in range(src.partitions()) for pair in records(src, p)]


def test_text_source_to_sink_on_ray(ray_local: Any, tmp_path: Path) -> None:
    """Real Ray actors: the sources and sinks are pickled to them and resolve paths there."""
    words = [f"w{i % 7}" for i in range(200)]
    (tmp_path / "in.txt").write_text("\n".join(words) + "\n")
    flow = Dataflow("ray-files")
    src = TextSource(tmp_path / "in.txt", split_bytes=97, records_per_epoch=40)
    flow.source(src).select(str.upper).sink(TextSink(tmp_path / "out"))
    flow.run(workers=2, backend="ray")
    got = read_committed(tmp_path / "out")
    assert Counter(r for _, r in got) == Counter(w.upper() for w in words)
    ref = [(e, r.lower()) for e, r in got]
    assert Counter(ref) == Counter(_read_all(src))  # same epochs as a read on the driver
    assert any(p.endswith("part-1-of-2.txt") for p in layout(str(tmp_path / "out")))
