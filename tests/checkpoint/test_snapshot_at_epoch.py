"""A checkpoint's snapshot is the state at its epoch, whatever the vertex does after.

A user's vertex keeps a dict of lists and appends to them in place at each epoch's
notification (the hardest case for a snapshot: nothing in the state is new, so a
snapshot that shares it sees every later change). A source reads up to four epochs a
step, so that one step notifies several epochs in turn. Every committed checkpoint's
part must hold exactly the state after its epoch, computed here in plain Python. Two
broken variants must be caught: a snapshot that is not copied when taken (encoded later,
as the part is written), and one taken late (the next epoch's notification let through
first).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import timely.worker.snapshots
from timely import Dataflow, Source, Vertex, pipeline
from timely.checkpoint.store import CheckpointStore
from timely.worker.snapshots import Snapshots

Epochs = list[list[tuple[int, int]]]
"""Per epoch, the ``(key, value)`` records the driver sends."""


class InPlace(Vertex):
    """Appends each epoch's values to its keys' lists, in place, when notified."""

    def __init__(self) -> None:
        self.state: dict[int, list[int]] = {}
        self.pending: dict[Any, list[tuple[int, int]]] = {}

    def on_recv(self, input: int, records: list[Any], time: Any) -> None:
        if time not in self.pending:
            self.pending[time] = []
            self.notify_at(time)
        self.pending[time].extend(records)

    def on_notify(self, time: Any) -> None:
        for key, value in self.pending.pop(time, []):
            self.state.setdefault(key, []).append(value)
        self.send_by(0, [len(self.state)], time)

    def snapshot_at(self, epoch: int) -> dict[str, Any] | None:
        return {"kind": "in-place", "state": self.state}  # the runtime makes the copy

    def restore_at(self, snapshot: dict[str, Any], epoch: int) -> None:
        self.state = snapshot["state"]


def states_after(epochs: Epochs) -> list[dict[int, list[int]]]:
    """The reference: the state after each epoch."""
    state: dict[int, list[int]] = {}
    out = []
    for records in epochs:
        for key, value in records:
            state.setdefault(key, []).append(value)
        out.append({k: list(v) for k, v in state.items()})
    return out


def snapshots(root: Path) -> dict[int, dict[int, list[int]]]:
    """Per committed checkpoint, the vertex's snapshot in it."""
    store = CheckpointStore(str(root))
    out = {}
    for epoch, info in store.manifests().items():
        (part,) = info["parts"]
        vertices = store.whole_part(epoch, part)["vertices"]
        (snap,) = [s for s in vertices.values() if s.get("kind") == "in-place"]
        out[epoch] = {int(k): v for k, v in snap["state"].items()}
    return out


class Bursts(Source):
    """One partition holding ``epochs``, ``per_step`` epochs read a step (a burst: one
    step notifies several epochs in turn)."""

    def __init__(self, epochs: Epochs, per_step: int) -> None:
        self.epochs = epochs
        self.batches_per_step = per_step

    def partitions(self) -> int:
        return 1

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        e = 0 if offset is None else offset
        return None if e >= len(self.epochs) else (e, self.epochs[e], e + 1)


def run(root: Path, epochs: Epochs, per_step: int, seed: int) -> dict[int, dict[int, list[int]]]:
    flow = Dataflow("in-place")
    stream = flow.source(Bursts(epochs, per_step))
    flow.vertex([(stream, pipeline())], InPlace)
    session = flow.activate(
        workers=1,
        backend="inline",
        seed=seed,
        checkpoint=str(root),
        keep_checkpoints=len(epochs) + 2,
    )
    session.join()
    return snapshots(root)


records = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 99)), max_size=4)


def check_snapshots_hold_their_epoch() -> Callable[..., None]:
    counter = iter(range(10**9))

    @settings(
        max_examples=15,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        st.lists(records, min_size=2, max_size=8),
        st.integers(1, 4),
        st.integers(0, 3),
    )
    @example(epochs=[[(0, 1)], [(0, 2)], [(1, 3)], [(0, 4)]], per_step=4, seed=0)
    def check(tmp: Path, epochs: Epochs, per_step: int, seed: int) -> None:
        root = tmp / str(next(counter))
        got = run(root, epochs, per_step, seed)
        expected = states_after(epochs)
        # Every epoch checkpointed (and, once the input closed, the one after the last).
        assert set(range(len(epochs))) <= set(got)
        for epoch, state in got.items():
            assert state == expected[min(epoch, len(epochs) - 1)], epoch

    return check


def test_every_snapshot_is_the_state_at_its_epoch(tmp_path: Path) -> None:
    check_snapshots_hold_their_epoch()(tmp_path)


def test_a_snapshot_not_copied_when_taken_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot left as the live objects: encoded only when the part is written,
    after later notifications changed the lists in place."""
    monkeypatch.setattr(timely.worker.snapshots, "_encode", lambda snapshot: snapshot)
    with pytest.raises(AssertionError):
        check_snapshots_hold_their_epoch()(tmp_path)


def test_a_snapshot_taken_late_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Notifications never held back for a snapshot: the next epoch's may run first."""
    monkeypatch.setattr(Snapshots, "hold_back", lambda self, v, epoch: False)
    with pytest.raises(AssertionError):
        check_snapshots_hold_their_epoch()(tmp_path)
