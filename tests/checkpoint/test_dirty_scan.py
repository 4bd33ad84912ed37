"""The per-step scan looks only at the vertices that may have passed their next
checkpoint epoch (``Snapshots.dirty``): those that ran, dropped a capability or took a
batch from their inbox, and those whose input frontiers moved (issue 30: a look at every
vertex at every step cost ~0.2 ms a checkpoint).

The invariant: after every scan, no vertex is left that a look at every vertex would
snapshot. It is checked after every scan of runs of every checkpointed pipeline (loops,
windows, joins, tables, user state), fed by a source or by a bursty driver, on one to
three workers under random schedules; mutation checks leave out each of the host's
reports in turn and show the check catches it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.checkpoint.sweep import ALL, SCRATCH, build, epochs_for
from timely.worker.loop import Worker
from timely.worker.snapshots import Snapshots

EPOCHS = epochs_for(6, 3)


def left_due(snaps: Snapshots) -> list[int]:
    """The vertices a look at every vertex would snapshot now (``Snapshots.snapshot``'s
    tests, without taking anything), but for finished ones: a finished vertex is due
    again whenever the worker sees a later epoch, with no change of its own, and the
    scan's second pass takes it into each part (its state is final)."""
    out = []
    for v in snaps.vertices:
        boundary = snaps.next_boundary(v)
        if boundary is None or snaps.open_at(v, boundary):
            continue
        low = snaps.open_epoch(v)
        if low is not None and list(snaps.due(snaps.snapped[v], low - 1)):
            out.append(v)
    return out


def checked_run(
    monkeypatch: pytest.MonkeyPatch, tmp: str, pipeline: str, source: bool, workers: int, seed: int
) -> list[list[int]]:
    """One checkpointed run; after every scan, the vertices it left due (none, if the
    scan saw every change)."""
    missed: list[list[int]] = []
    scan = Snapshots.scan

    def checked(self: Snapshots) -> None:
        scan(self)
        left = left_due(self)
        if left:
            missed.append(left)

    monkeypatch.setattr(Snapshots, "scan", checked)
    epochs = EPOCHS[:3] if pipeline in {"reach", "loop_and_running", "labels"} else EPOCHS
    flow, _ = build(pipeline, epochs, source)
    with flow.activate(
        workers=workers, backend="inline", seed=seed, checkpoint=tmp, checkpoint_every=1
    ) as session:
        session.join()
    return missed


@pytest.mark.parametrize("pipeline", sorted(ALL))
def test_no_vertex_is_left_due_after_a_scan(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, pipeline: str
) -> None:
    for i, (source, workers) in enumerate([(True, 3), (False, 2), (False, 1)]):
        path = tmp_path / str(i)
        assert checked_run(monkeypatch, str(path), pipeline, source, workers, seed=i) == []


@given(
    pipeline=st.sampled_from(sorted(ALL)),
    source=st.booleans(),
    workers=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_no_vertex_is_left_due_under_any_schedule(
    pipeline: str, source: bool, workers: int, seed: int
) -> None:
    import tempfile

    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory(dir=SCRATCH) as d:
        assert checked_run(mp, d, pipeline, source, workers, seed) == []


# -- the mutants: each report the host makes, left out --------------------------------------


def caught(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> bool:
    """Whether some run of the pipelines leaves a vertex due after a scan."""
    for i, pipeline in enumerate(["running", "windowed", "reach", "table_running"]):
        for source, workers in [(True, 2), (False, 1)]:
            path = tmp_path / f"{i}-{source}-{workers}"
            if checked_run(monkeypatch, str(path), pipeline, source, workers, seed=0):
                return True
    return False


def test_frontier_moves_not_reported_are_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(Snapshots, "frontiers_moved", lambda self, changes: None)
    assert caught(monkeypatch, tmp_path)


def test_activations_not_reported_are_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The worker's reports of vertices run, capabilities dropped and inboxes drained all
    go to one set (``Worker._touched``): a worker whose set is not the scan's."""
    init = Worker.__init__

    def detached(self: Worker, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._touched = set()

    monkeypatch.setattr(Worker, "__init__", detached)
    assert caught(monkeypatch, tmp_path)
