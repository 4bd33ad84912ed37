"""Exactly once, at every crash point: snapshots hold epoch ``e`` and nothing later, and
a checkpoint is committed at every epoch the configuration asks for.

The sweeps crash an inline run at every scheduling event in turn (in CI's profile; one in
six in the quick profile, :func:`tests.conftest.crash_points`), for every stateful
operator and for user vertices whose state is changed in place, fed by a source or by a
bursty driver; the outputs must equal the failure-free run's. The cadence tests check
the commits themselves, inline and on Ray. The mutation tests put back each of the two
defects these tests exist for and show that they are caught.
"""

from __future__ import annotations

import operator
import time
from pathlib import Path
from typing import Any

import pytest

import timely.checkpoint.writer
import timely.state.keyed
import timely.state.spill
import timely.worker.snapshots
from tests.checkpoint.sweep import ALL, SCRATCH, build, epochs_for, sweep
from timely import Dataflow, Source
from timely.worker.snapshots import Snapshots

EPOCHS = epochs_for(10, 3)
LOOPS = {"reach", "loop_and_running", "labels"}
"""Their runs have many more scheduling events (every round of the loop): fewer epochs."""
SHORT = {"labels": 3}
"""Label propagation has the most rounds per epoch: fewer still."""


@pytest.mark.parametrize("pipeline", sorted(ALL))
@pytest.mark.parametrize(
    ("source", "workers", "seed"), [(True, 3, 1), (False, 2, 0)], ids=["source", "bursty"]
)
def test_every_crash_point_gives_the_failure_free_outputs(
    pipeline: str, source: bool, workers: int, seed: int
) -> None:
    epochs = EPOCHS[: SHORT.get(pipeline, 5)] if pipeline in LOOPS else EPOCHS
    events, wrong = sweep(pipeline, epochs, source, workers=workers, seed=seed)
    assert events > 20  # the sweep really crashed the run at many points
    assert wrong == [], (
        f"{len(wrong)} crash points of {events} events give other outputs: {wrong[:10]}"
    )


INCREMENTAL = [
    "running",
    "sessions",
    "session_ends",
    "dict_state",
    "joined",
    "loop_and_running",
    "windowed",
    "table_running",
    "table_windowed",
    "table_joined",
]
"""Every operator whose state is kept incrementally (running_reduce, map_with_state with
expiry, join_streaming), in a loop's company, and one whose tables go whole."""


# table_running in CI's profile (6 s; the quick profile sweeps table_windowed and
# table_joined, the same column state).
@pytest.mark.parametrize(
    "pipeline",
    [pytest.param(p, marks=pytest.mark.ci) if p == "table_running" else p for p in INCREMENTAL],
)
def test_every_crash_point_with_incremental_checkpoints(pipeline: str) -> None:
    """Parts are deltas on the part before, a whole one after every two: a restore
    applies the chain and gives the failure-free outputs at every crash point."""
    epochs = EPOCHS[:5] if pipeline in LOOPS else EPOCHS
    events, wrong = sweep(pipeline, epochs, True, workers=3, seed=1, checkpoint_incremental=2)
    assert events > 20
    assert wrong == [], (
        f"{len(wrong)} crash points of {events} events give other outputs: {wrong[:10]}"
    )


@pytest.mark.parametrize("pipeline", ["table_windowed", "running"])
def test_every_crash_point_with_parts_on_the_writer_thread(
    pipeline: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part written on the inline backend's writer thread (as a part of 1 MiB or
    more is), reported between scheduling events: a crash loses the parts not yet
    reported (the relaunch waits for their writes and drops them), and the outputs are
    the failure-free ones at every crash point, whole and incremental."""
    monkeypatch.setattr(timely.checkpoint.writer, "LARGE", 0)
    for incremental in (False, 2):
        events, wrong = sweep(
            pipeline, EPOCHS, True, workers=2, seed=1, checkpoint_incremental=incremental
        )
        assert events > 20
        assert wrong == [], (
            f"{len(wrong)} crash points of {events} events give other outputs: {wrong[:10]}"
        )


# table_running in CI's profile (6 s; the quick profile sweeps the other tables on disk).
@pytest.mark.parametrize(
    "pipeline",
    [
        pytest.param(p, marks=pytest.mark.ci) if p == "table_running" else p
        for p in INCREMENTAL
        if p not in ("windowed", "loop_and_running")
    ],
)
def test_every_crash_point_with_state_on_disk(
    pipeline: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same sweep with the tables kept across epochs in the disk backend, written
    back after every activation: each restart's workers start from empty stores, restore
    the chain into them and give the failure-free outputs. Columnar tables put every run
    of 2 rows or more in a file (so the table pipelines' runs really are in files).
    (Not the pipelines whose disk tables the others already cover: windows keep none,
    the loop's is running's.)"""
    monkeypatch.setattr(timely.state.spill, "SPILL_ROWS", 2)
    epochs = EPOCHS[:5] if pipeline in LOOPS else EPOCHS
    events, wrong = sweep(
        pipeline,
        epochs,
        True,
        workers=3,
        seed=1,
        checkpoint_incremental=2,
        state_backend="disk",
        state_dir=SCRATCH,
        state_cache=1,
    )
    assert events > 20
    assert wrong == [], (
        f"{len(wrong)} crash points of {events} events give other outputs: {wrong[:10]}"
    )


@pytest.mark.ci  # (6-7 s: in CI's profile, to keep the README's command within 6 min)
def test_mutation_session_ends_not_asked_for_again_after_a_restore_are_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restored map_with_state must ask again for the notifications at which its held
    sessions end: without, sessions pending at a checkpoint never end after a restore."""
    from operators.running import MapWithState

    monkeypatch.setattr(MapWithState, "restored", lambda self, epoch: None)
    _, wrong = sweep("session_ends", EPOCHS, True, workers=3, seed=1, first_wrong=True)
    assert wrong


@pytest.mark.ci  # (5-6 s: in CI's profile, to keep the README's command within 6 min)
def test_mutation_changes_left_unreported_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table whose changes are not reported (an operator breaking the contract, or a
    delta taken from the wrong record of them) writes stale deltas: a restore loses
    the running values, and the sweep sees it."""
    monkeypatch.setattr(
        timely.state.keyed.KeyedState, "changed", lambda self, time, pairs, distinct=False: None
    )
    _, wrong = sweep(
        "running", EPOCHS, True, workers=3, seed=1, first_wrong=True, checkpoint_incremental=2
    )
    assert wrong, "a delta without the changed keys went unnoticed"


def test_mutation_a_snapshot_sharing_the_live_state_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Encode the snapshots at the end of the step instead of when taken, as before the
    fix: state changed in place after the snapshot leaks into the checkpoint."""
    monkeypatch.setattr(timely.worker.snapshots, "_encode", lambda snapshot: snapshot)
    _, wrong = sweep("user_vertex", EPOCHS, True, workers=3, seed=1, first_wrong=True)
    assert wrong, "a snapshot that shares objects with the live state went unnoticed"


def due_epochs(every: int, last: int) -> list[int]:
    """The epochs ``checkpoint_every=every`` must commit in a run of epochs ``0..last``."""
    return list(range(every - 1, last + 1, every))


CADENCE = ["loop_and_running", "counts", "user_vertex", "joined"]
"""An iterate with stateless steps around it, a per-time count, a user's vertex, a join."""


@pytest.mark.parametrize("pipeline", CADENCE)
@pytest.mark.parametrize("source", [False, True], ids=["bursty", "source"])
@pytest.mark.parametrize("every", [1, 3])
def test_checkpoint_every_k_commits_every_kth_epoch(
    tmp_path: Path, pipeline: str, source: bool, every: int
) -> None:
    epochs = epochs_for(14, 3)
    flow, _ = build(pipeline, epochs, source)
    session = flow.activate(
        workers=2, backend="inline", checkpoint=str(tmp_path), checkpoint_every=every
    )
    session.join()
    assert session.committed == due_epochs(every, len(epochs) - 1)


def test_mutation_a_worker_that_skips_parts_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshot a vertex only for the latest checkpoint epoch it has passed, as before
    the fix: a step whose frontier jumps leaves its share out of the others."""
    due = Snapshots.due

    def latest_only(self: Snapshots, after: int, upto: int | None) -> Any:
        epochs = due(self, after, upto)
        return epochs if upto is None else epochs[-1:]

    monkeypatch.setattr(Snapshots, "due", latest_only)
    epochs = epochs_for(14, 3)
    flow, _ = build("loop_and_running", epochs, True)
    session = flow.activate(workers=2, backend="inline", checkpoint=str(tmp_path))
    session.join()
    assert session.committed != due_epochs(1, len(epochs) - 1)


# -- on Ray ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("pipeline", ["loop_and_running", "sliding_values"])
def test_on_ray_a_burst_of_epochs_checkpoints_every_one(tmp_path: Path, pipeline: str) -> None:
    """The driver sends 40 epochs before it waits for anything: every epoch's checkpoint
    is complete, each committed or subsumed by a later one committed with it (the driver
    finds several complete at once), the last committed."""
    epochs = epochs_for(40, 3)
    expected: dict[int, list[Any]] = {}
    flow, expected = build(pipeline, epochs, False)
    flow.run(workers=2, backend="inline")
    flow, got = build(pipeline, epochs, False)
    session = flow.activate(workers=2, backend="ray", checkpoint=str(tmp_path))
    session.join()
    assert got == expected
    due = due_epochs(1, len(epochs) - 1)
    assert sorted(session.committed + session.subsumed) == due
    assert session.committed[-1] == due[-1]


class Paced(Source):
    """``epochs`` epochs over 4 partitions, one batch per read, each read taking ``pause``
    seconds (a source waiting on its input): the run lasts about
    ``epochs * pause * 4 / workers`` seconds."""

    def __init__(self, epochs: int, pause: float) -> None:
        self.epochs = epochs
        self.pause = pause

    def partitions(self) -> int:
        return 4

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        e = 0 if offset is None else offset
        if e >= self.epochs:
            return None
        time.sleep(self.pause)
        return e, [partition, e], e + 1


INTERVAL = 0.1
PACE = 0.004
EPOCHS_PACED = 250


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
def test_on_ray_checkpoint_interval_commits_while_a_source_keeps_the_run_busy(
    tmp_path: Path,
) -> None:
    """A run over a paced source lasts at least ``EPOCHS_PACED * 4 * PACE / 2`` = 2 s (the
    reads' sleeps alone, on two workers): twenty intervals. Counted, not timed, with a
    margin of 10x: it commits at least twice, in epoch order, and the last commit is past
    the run's first tenth. Before the fix that made requests reach a source that moves on
    faster than they travel, such a run committed once or twice in 8 s."""
    flow = Dataflow("paced")
    seen: list[int] = []
    (
        flow.source(Paced(EPOCHS_PACED, PACE))
        .running_reduce(lambda x: x % 4, operator.add)
        .subscribe(lambda e, _: seen.append(e))
    )
    session = flow.activate(
        workers=2, backend="ray", checkpoint=str(tmp_path), checkpoint_interval=INTERVAL
    )
    session.join()
    minimum = EPOCHS_PACED * 4 * PACE / 2 / INTERVAL / 10
    assert len(session.committed) >= minimum, session.committed
    assert session.committed == sorted(set(session.committed))
    assert session.committed[-1] >= EPOCHS_PACED // 10, session.committed
    assert seen == sorted(set(seen)) and len(seen) == EPOCHS_PACED
