"""A resume never refuses its own outputs; sinks know their lineage (issue 26, item 2).

A run restores from the newest *usable* checkpoint, which may be older than what its
sinks committed: the newest was damaged (8 bytes flipped in a part), every checkpoint
was, the driver died between the two commits, or the last run ended past its last
checkpoint. The replay then writes epochs the sink committed. The same lineage (plan
fingerprint and checkpoint directory) skips them, checking they are the same rows;
anyone else is refused. Real files throughout, inline unless the test says Ray.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import operators  # noqa: F401 - registers the Stream methods
from connectors.committed import (
    CommittedEpochSink,
    OutputConflict,
    ReplayMismatch,
    committed_epoch,
)
from connectors.files import CsvSink, JsonLinesSink, TextSink, read_committed
from connectors.parquet import ParquetSink
from connectors.parquet import read_committed as read_parquet
from tests.checkpoint.layout import committed, damage, uncommit
from timely import Dataflow, UserFunctionError

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])


class Salt:
    """Added to every output value: a user function whose result a test changes
    between runs stands for one that is not deterministic."""

    value = 0


def _row(kv: tuple[int, int]) -> dict[str, int]:
    return {"k": kv[0], "v": kv[1] + Salt.value}


def epochs_of(n: int) -> list[list[int]]:
    return [[(e * 7 + i) % 23 for i in range(5)] for e in range(n)]


def running(sink: CommittedEpochSink, n: int, name: str = "lineage") -> Dataflow:
    """Running sums per key, one row per key and epoch with records: stateful, so a
    restore from a checkpoint matters, and deterministic."""
    flow = Dataflow(name)
    handle = flow.new_input()
    handle.stream.running_reduce(lambda x: x % 4, lambda a, b: a + b).select(_row).sink(sink)
    for e, records in enumerate(epochs_of(n)):
        handle.advance_to(e)
        handle.send(records)
    handle.close()  # so that activate(...).join() ends too
    return flow


def other_dataflow(sink: CommittedEpochSink, n: int) -> Dataflow:
    """Another graph (counts, not sums) under the same name: another fingerprint."""
    flow = Dataflow("lineage")
    handle = flow.new_input()
    handle.stream.count_by(lambda x: x % 4).select(_row).sink(sink)
    for e, records in enumerate(epochs_of(n)):
        handle.advance_to(e)
        handle.send(records)
    return flow


def jsonl_rows(path: str) -> list[tuple[int, Any]]:
    return sorted((e, r["k"], r["v"]) for e, r in read_committed(path))


def parquet_rows(path: str) -> list[tuple[int, Any]]:
    table = read_parquet(path, schema=SCHEMA, epoch_column="epoch")
    return sorted((r["epoch"], r["k"], r["v"]) for r in table.to_pylist())


def reference(tmp_path: Path, n: int, workers: int = 2) -> list[tuple[int, Any]]:
    """The output of one run of ``n`` epochs without a failure or a checkpoint."""
    out = str(tmp_path / f"reference-{n}")
    running(JsonLinesSink(out), n).run(workers=workers, backend="inline")
    return jsonl_rows(out)


def inodes(out: str) -> dict[str, int]:
    """Each part file and its inode: a part written again (renamed over) gets a new one."""
    return {p: os.stat(p).st_ino for p in glob.glob(f"{out}/epoch=*/part-*")}


def leftovers(out: str) -> list[str]:
    return glob.glob(f"{out}/epoch=*/_replay-*") + glob.glob(f"{out}/**/.*.tmp", recursive=True)


def compared(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The epochs the driver compares with what was committed, in order, from now on."""
    seen: list[int] = []
    original = CommittedEpochSink._check_epoch

    def spy(self: CommittedEpochSink, fs: Any, epoch: int, *args: Any) -> None:
        seen.append(epoch)
        original(self, fs, epoch, *args)

    monkeypatch.setattr(CommittedEpochSink, "_check_epoch", spy)
    return seen


def first_run(out: str, ckpt: str, n: int = 8) -> None:
    """``n`` epochs with a checkpoint after each: the sink is committed through ``n - 1``."""
    running(JsonLinesSink(out), n).run(workers=2, backend="inline", checkpoint=ckpt)
    assert committed_epoch(out) == n - 1
    assert committed(ckpt) == [n - 3, n - 2, n - 1]  # keep_checkpoints=3


# -- resumes of the same lineage ------------------------------------------------------------
def test_a_resume_past_a_damaged_newest_checkpoint_skips_what_it_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume falls back to the checkpoint at 6, replays epoch 7 (committed): it is
    not written again (the committed part keeps its inode), no refusal, and the output
    with the new epochs is that of a run without a failure, each epoch once."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    damage(ckpt, 7)
    before = inodes(out)
    checked = compared(monkeypatch)
    session = running(JsonLinesSink(out), 11).activate(workers=2, backend="inline", checkpoint=ckpt)
    session.join()
    assert session.restored_epoch == 6 and checked == [7]
    assert jsonl_rows(out) == reference(tmp_path, 11)
    assert {p: i for p, i in inodes(out).items() if p in before} == before
    assert leftovers(out) == []


@pytest.mark.parametrize("why", ["every checkpoint damaged", "resume=False"])
def test_a_run_that_starts_over_in_its_lineage_skips_everything_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    """No usable checkpoint (or resume=False, which uses none): the run starts from
    scratch in the same lineage (the checkpoint directory's) and computes every
    committed epoch again, on 3 workers where 2 wrote them: the parts differ by worker,
    the epoch's rows do not (the comparison is per epoch)."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    if why == "resume=False":
        options: dict[str, Any] = {"resume": False}
    else:
        options = {}
        for epoch in committed(ckpt):
            damage(ckpt, epoch)
    before = inodes(out)
    checked = compared(monkeypatch)
    flow = running(JsonLinesSink(out), 10)
    flow.run(workers=3, backend="inline", checkpoint=ckpt, **options)
    assert checked == list(range(8))
    assert jsonl_rows(out) == reference(tmp_path, 10)
    assert {p: i for p, i in inodes(out).items() if p in before} == before
    written = {int(Path(p).parent.name[6:]): Path(p).name for p in inodes(out)}
    assert all(name.endswith("-of-2.jsonl") for e, name in written.items() if e <= 7)
    assert all(name.endswith("-of-3.jsonl") for e, name in written.items() if e > 7)
    assert leftovers(out) == []


def test_a_run_that_ended_past_its_last_checkpoint_resumes_without_refusal(
    tmp_path: Path,
) -> None:
    """checkpoint_every=3 over 8 epochs: checkpoints at 2 and 5, and the run's end
    commits the sink through 7. Running the job again resumes from 5 and computes 6
    and 7 again: skipped."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    running(JsonLinesSink(out), 8).run(
        workers=2, backend="inline", checkpoint=ckpt, checkpoint_every=3
    )
    assert committed(ckpt) == [2, 5] and committed_epoch(out) == 7
    running(JsonLinesSink(out), 8).run(
        workers=2, backend="inline", checkpoint=ckpt, checkpoint_every=3
    )
    assert jsonl_rows(out) == reference(tmp_path, 8)
    assert leftovers(out) == []


class DriverDied(BaseException):
    """Stands for the driver process dying: nothing after it runs (no close either)."""


@pytest.mark.parametrize("after", ["the checkpoint's commit", "the sink's commit"])
def test_a_resume_after_the_driver_died_between_the_two_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """The coordinator commits the checkpoint, then the sinks. The driver dies at the
    third checkpoint (epoch 2):

    - after the checkpoint's commit, before the sink's: the sink is behind (through 1),
      the checkpoint at 2 restores, epoch 2's parts are kept and committed later;
    - after the sink's commit, and that checkpoint's manifest is lost (the other order
      of the two commits, or a store that lost the write): the sink is ahead (through
      2), the resume restores the checkpoint at 1 and computes epoch 2 again: skipped.

    Either way the output is each epoch once."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    original = CommittedEpochSink.commit
    calls = 0

    def dies_at_the_third(self: CommittedEpochSink, epoch: int | None) -> None:
        nonlocal calls
        calls += 1
        if calls == 3 and after == "the checkpoint's commit":
            raise DriverDied
        original(self, epoch)
        if calls == 3:
            raise DriverDied

    monkeypatch.setattr(CommittedEpochSink, "commit", dies_at_the_third)
    with pytest.raises(DriverDied):
        running(JsonLinesSink(out), 8).run(workers=2, backend="inline", checkpoint=ckpt)
    monkeypatch.undo()
    if after == "the sink's commit":
        assert committed_epoch(out) == 2
        uncommit(ckpt, 2)
    else:
        assert committed_epoch(out) == 1 and 2 in committed(ckpt)
    session = running(JsonLinesSink(out), 8).activate(workers=2, backend="inline", checkpoint=ckpt)
    session.join()
    assert session.restored_epoch == (1 if after == "the sink's commit" else 2)
    assert jsonl_rows(out) == reference(tmp_path, 8)
    assert leftovers(out) == []


def test_a_resume_on_ray_past_a_damaged_newest_checkpoint(ray_local: Any, tmp_path: Path) -> None:
    """The same on Ray: the workers decide to skip from the marker they read (their sink
    is a copy), the driver compares."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    damage(ckpt, 7)
    running(JsonLinesSink(out), 10).run(workers=2, backend="ray", checkpoint=ckpt)
    assert jsonl_rows(out) == reference(tmp_path, 10)
    assert leftovers(out) == []


# -- a replay that differs --------------------------------------------------------------------
def test_a_replay_that_differs_from_the_commit_stops_the_run_naming_the_epoch(
    tmp_path: Path,
) -> None:
    """The resume computes epoch 7 again with another result (the salt stands for a
    user function that is not deterministic): a ReplayMismatch names the epoch and the
    directory, and the committed output is left as it was. A later resume stops again
    (the replay's digests stay until they match)."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    committed = jsonl_rows(out)
    damage(ckpt, 7)
    Salt.value = 100
    try:
        with pytest.raises(ReplayMismatch, match=rf"epoch 7 in '{out}'.*checkpoint at epoch 6"):
            running(JsonLinesSink(out), 8).run(workers=2, backend="inline", checkpoint=ckpt)
        assert jsonl_rows(out) == committed and committed_epoch(out) == 7
        with pytest.raises(ReplayMismatch, match="epoch 7"):
            running(JsonLinesSink(out), 8).run(workers=2, backend="inline", checkpoint=ckpt)
    finally:
        Salt.value = 0
    assert jsonl_rows(out) == committed


def test_a_replay_digest_that_differs_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check with the replay's digest changed under it (one row more)."""
    import connectors.committed as committed_module

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    for epoch in committed(ckpt):
        damage(ckpt, epoch)
    original = committed_module.digest

    def one_row_more(rows: Any) -> Any:
        d = original(rows)
        return committed_module.Digest(d.rows + 1, d.sum)

    monkeypatch.setattr(CommittedEpochSink, "_write_replay", _with_digest(one_row_more))
    with pytest.raises(ReplayMismatch, match=r"epoch 0 in .*started over.*rows committed"):
        running(JsonLinesSink(out), 8).run(workers=2, backend="inline", checkpoint=ckpt)


def _with_digest(fn: Callable[[Any], Any]) -> Callable[..., None]:
    """``_write_replay`` with ``digest`` replaced by ``fn`` (the worker side only)."""
    import connectors.committed as committed_module

    original = CommittedEpochSink._write_replay

    def patched(self: CommittedEpochSink, *args: Any) -> None:
        saved = committed_module.digest
        committed_module.digest = fn
        try:
            original(self, *args)
        finally:
            committed_module.digest = saved

    return patched


# -- other jobs -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "who", ["another dataflow", "a fresh checkpoint directory", "no checkpoints"]
)
def test_another_job_writing_into_the_directory_is_refused(tmp_path: Path, who: str) -> None:
    """Refused on the driver before any worker starts, naming who committed the output
    and the fix; the committed output is untouched."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    committed = jsonl_rows(out)
    options: dict[str, Any] = {"checkpoint": ckpt}
    flow = running(JsonLinesSink(out), 8)
    fix = "write to a new directory or delete the old output"
    if who == "another dataflow":
        flow, fix = other_dataflow(JsonLinesSink(out), 8), "another dataflow: " + fix
        options["checkpoint"] = str(tmp_path / "other-ckpt")
    elif who == "a fresh checkpoint directory":
        options["checkpoint"] = str(tmp_path / "fresh-ckpt")
        fix = f"resume with checkpoint={ckpt!r} to continue that output, or {fix}"
    else:
        options = {}
    with pytest.raises(OutputConflict) as info:
        flow.run(workers=2, backend="inline", **options)
    message = str(info.value)
    assert f"{out!r} holds epochs committed through 7 by dataflow 'lineage'" in message
    assert fix in message
    assert jsonl_rows(out) == committed


def test_another_dataflow_in_the_same_lineage_is_refused(tmp_path: Path) -> None:
    """Every checkpoint damaged, so the checkpoints cannot say the graph changed: the
    lineage is the same, the fingerprint is not, and the sink refuses."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    for epoch in committed(ckpt):
        damage(ckpt, epoch)
    with pytest.raises(OutputConflict, match="another dataflow"):
        other_dataflow(JsonLinesSink(out), 8).run(workers=2, backend="inline", checkpoint=ckpt)


# -- every committing sink --------------------------------------------------------------------
SINKS: dict[str, Callable[[str], CommittedEpochSink]] = {
    "text": TextSink,
    "csv": lambda path: CsvSink(path, fieldnames=["k", "v"]),
    "jsonl": JsonLinesSink,
    "parquet": lambda path: ParquetSink(path, schema=SCHEMA),
}


def _text_row(kv: tuple[int, int]) -> str:
    return f"{kv[0]}:{kv[1] + Salt.value}"


def any_sink(make: Callable[[str], CommittedEpochSink], out: str, n: int) -> Dataflow:
    if make is TextSink:  # str records
        flow = Dataflow("lineage")
        handle = flow.new_input()
        sums = handle.stream.running_reduce(lambda x: x % 4, lambda a, b: a + b)
        sums.select(_text_row).sink(make(out))
        for e, records in enumerate(epochs_of(n)):
            handle.advance_to(e)
            handle.send(records)
        return flow
    return running(make(out), n)


def read_any(kind: str, out: str) -> list[Any]:
    if kind == "parquet":
        return parquet_rows(out)
    return sorted(repr(r) for r in read_committed(out))


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_every_committing_sink_resumes_past_damage_and_catches_a_changed_replay(
    tmp_path: Path, kind: str
) -> None:
    """Text, CSV (header per part, left out of the comparison), JSON lines and Parquet
    (rows read back): the damaged-newest resume completes exactly once on other workers,
    and a replay with other values is caught."""
    make = SINKS[kind]
    out, ckpt, ref = (str(tmp_path / d) for d in ("out", "ckpt", "ref"))
    any_sink(make, ref, 10).run(workers=2, backend="inline")
    any_sink(make, out, 8).run(workers=2, backend="inline", checkpoint=ckpt)
    damage(ckpt, 7)
    any_sink(make, out, 10).run(workers=3, backend="inline", checkpoint=ckpt)
    assert read_any(kind, out) == read_any(kind, ref)
    assert leftovers(out) == []
    damage(ckpt, 9)
    Salt.value = 1
    try:
        with pytest.raises(ReplayMismatch, match="epoch 9"):
            any_sink(make, out, 10).run(workers=1, backend="inline", checkpoint=ckpt)
    finally:
        Salt.value = 0
    assert read_any(kind, out) == read_any(kind, ref)


@pytest.mark.ci  # 13 s with Spark; the quick profile keeps the file sinks' cases
def test_spark_sink_resumes_past_a_damaged_newest_checkpoint(spark: Any, tmp_path: Path) -> None:
    """SparkSink is a ParquetSink: its files resume as Parquet's do, and the table it
    publishes to holds every epoch once."""
    from connectors.spark import SparkSink

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    table = "lineage_resume"

    def sink() -> SparkSink:
        return SparkSink(out, schema=SCHEMA, table=table, spark=spark)

    options = {"checkpoint": ckpt, "checkpoint_every": 2}  # fewer commits: fewer Spark jobs
    running(sink(), 6).run(workers=2, backend="inline", **options)
    assert committed(ckpt) == [1, 3, 5]
    damage(ckpt, 5)
    running(sink(), 8).run(workers=2, backend="inline", **options)
    expected = reference(tmp_path, 8)
    assert parquet_rows(out) == expected
    rows = spark.table(table).collect()
    assert sorted((r["epoch"], r["k"], r["v"]) for r in rows) == expected
    assert leftovers(out) == []


# -- the mutation check -----------------------------------------------------------------------
def test_mutation_without_the_skip_the_damaged_resume_is_refused_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the skip disabled the resume past a damaged checkpoint fails as it did
    before issue 26: the tests above can fail."""
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    damage(ckpt, 7)
    monkeypatch.setattr(CommittedEpochSink, "_skips_replays", lambda self: False)
    with pytest.raises(UserFunctionError, match=r"epoch 7 is already committed .*through 7\)"):
        running(JsonLinesSink(out), 8).run(workers=2, backend="inline", checkpoint=ckpt)


# -- the checkpoint directory's lineage ------------------------------------------------------
def test_the_lineage_is_written_once_and_a_damaged_one_stops_the_run(tmp_path: Path) -> None:
    """Every run with the same checkpoint= is one lineage (the id does not change from
    run to run); an unreadable lineage file is an error naming it, not a new lineage."""
    import json

    from timely.checkpoint.store import LINEAGE, CheckpointError

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    first_run(out, ckpt)
    lineage = json.loads((Path(ckpt) / LINEAGE).read_text())["lineage"]
    assert json.loads((Path(out) / "_COMMITTED").read_text()) == {
        "epoch": 7,
        "dataflow": "lineage",
        "fingerprint": running(JsonLinesSink(str(tmp_path / "x")), 1).build().fingerprint(),
        "lineage": lineage,
        "checkpoint": ckpt,
    }
    running(JsonLinesSink(out), 9).run(workers=2, backend="inline", checkpoint=ckpt)
    assert json.loads((Path(ckpt) / LINEAGE).read_text())["lineage"] == lineage
    (Path(ckpt) / LINEAGE).write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match=rf"{LINEAGE}.*delete it to start a new lineage"):
        running(JsonLinesSink(out), 9).run(workers=2, backend="inline", checkpoint=ckpt)


def test_a_lineage_records_where_its_checkpoints_are_without_credentials() -> None:
    from timely.sinks import display_location

    assert display_location("s3://key:secret@bucket/ckpt?region=x") == "s3://bucket/ckpt"
    assert display_location("hdfs://user@namenode:8020/ckpt") == "hdfs://namenode:8020/ckpt"
    assert display_location("relative/ckpt") == os.path.abspath("relative/ckpt")
