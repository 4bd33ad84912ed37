"""The per-step scan of due vertices (``Snapshots.scan``): each part is handed over in
the step in which its last vertex passes the epoch, not later and not before.

A late part keeps state right (every crash test passes with one) but holds its commit,
and so the sinks' output, back by an epoch or more; an early one would miss what a
vertex still had to do. Here a run is driven one driver command at a time and every
part handed over is counted at the command that made it, on one worker and on two; and
the scan's contract with a host is checked alone: a vertex with a batch waiting in its
inbox at the epoch is not done with it, whatever its input frontier says. Mutation
checks: a scan that snapshots one epoch late, and one that skips the inbox.
"""

from __future__ import annotations

import operator
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from timely import Dataflow
from timely.worker.snapshots import Snapshots

EPOCHS = 6


def expected(workers: int) -> list[tuple[str, list[int]]]:
    """Part ``e`` of every worker is handed over within the command that closes epoch
    ``e`` (the advance to ``e + 1``), and none before it; the close hands over the
    last epoch's (the input's epoch when it closed, which every worker passes then)."""
    out = []
    for e in range(EPOCHS):
        out.append((f"send at {e}", sorted(list(range(e)) * workers)))
        out.append((f"advance to {e + 1}", sorted(list(range(e + 1)) * workers)))
    out.append(("close", sorted(list(range(EPOCHS + 1)) * workers)))
    return out


def check_handed_over(monkeypatch: pytest.MonkeyPatch, workers: int, tmp: str) -> None:
    """A running sum per key, checkpointed every epoch, its input fed one command at a
    time: after each command (its pump runs until nothing can happen without the
    driver), the epochs of the parts every worker's scan handed over by then are
    :func:`expected`'s."""
    seen: list[int] = []
    take_parts = Snapshots.take_parts

    def counted(self: Snapshots) -> list[Any]:
        parts = take_parts(self)
        seen.extend(e for e, _ in parts)
        return parts

    monkeypatch.setattr(Snapshots, "take_parts", counted)
    want = iter(expected(workers))
    flow = Dataflow("scan")
    handle = flow.new_input()
    handle.stream.running_reduce(lambda x: x % 3, operator.add).subscribe(lambda e, rs: None)
    with flow.activate(workers=workers, backend="inline", checkpoint=tmp) as session:
        for e in range(EPOCHS):
            handle.send(list(range(e, e + 5)))
            assert (f"send at {e}", sorted(seen)) == next(want)
            handle.advance_to(e + 1)
            assert (f"advance to {e + 1}", sorted(seen)) == next(want)
        handle.close()
        session.join()
    assert ("close", sorted(seen)) == next(want)


@pytest.mark.parametrize("workers", [1, 2])
def test_each_part_is_handed_over_in_the_step_its_epoch_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, workers: int
) -> None:
    check_handed_over(monkeypatch, workers, str(tmp_path))


def one_epoch_late(self: Snapshots, v: int) -> None:
    """The mutant: a vertex is snapshotted only once it has passed the epoch after the
    checkpoint's."""
    boundary = self.next_boundary(v)
    if boundary is None or self.open_at(v, boundary + 1):
        return
    low = self.open_epoch(v)
    upto = self.w.max_epoch if low is None else low - 1
    for epoch in self.due(self.snapped[v], upto):
        self.take(v, epoch)


def test_a_scan_one_epoch_late_is_caught(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setattr(Snapshots, "snapshot", one_epoch_late)
    with pytest.raises(AssertionError):
        test_each_part_is_handed_over_in_the_step_its_epoch_passes(monkeypatch, tmp_path, 1)


# -- the scan's contract with its host, alone ----------------------------------------------


class Host:
    """One stateless vertex with one input; the frontier at it and its inbox are set by
    the test."""

    def __init__(self) -> None:
        self.frontier: list[tuple[int, ...]] = [(0,)]
        self.inbox: list[tuple[int, ...]] = []
        self.plan = SimpleNamespace(vertices=[SimpleNamespace(inputs=1)], live_control=False)
        self.vertices = [SimpleNamespace(snapshot_at=lambda epoch: None)]
        self.contexts = [SimpleNamespace(now=None, requests=set(), caps=set())]
        self.tracker = SimpleNamespace(frontier=lambda _target: self.frontier)
        self.index, self.max_epoch, self.log = 0, 0, None

    def members_at(self, epoch: int) -> tuple[int, ...]:
        return (0,)

    def queued(self, v: int) -> list[tuple[int, ...]]:
        return self.inbox

    def recheck_notifications(self) -> None:
        pass


def inbox_run() -> list[list[int]]:
    """The frontier passes epoch 0 while a batch at epoch 0 still waits in the inbox
    (taken in, not yet run); then it is run. The parts handed over after each scan."""
    host = Host()
    snaps = Snapshots(host, every=1, start=0)  # type: ignore[arg-type]
    out = []
    host.frontier, host.inbox = [(1,)], [(0,)]
    snaps.scan()
    out.append([e for e, _ in snaps.take_parts()])
    host.inbox = []
    snaps.dirty.add(0)  # (the host says so: the batch left the inbox)
    snaps.scan()
    out.append([e for e, _ in snaps.take_parts()])
    return out


def test_a_batch_waiting_in_the_inbox_holds_its_epoch_open() -> None:
    assert inbox_run() == [[], [0]]


def test_a_scan_that_skips_the_inbox_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: the scan's checks (``open_at``, ``open_epoch``, ``finished``) do not
    look at the inbox (a host whose ``queued`` is empty is the same as one not asked)."""
    monkeypatch.setattr(Host, "queued", lambda self, v: [])
    with pytest.raises(AssertionError):
        test_a_batch_waiting_in_the_inbox_holds_its_epoch_open()


@given(
    first=st.integers(0, 50),
    every=st.none() | st.integers(1, 7),
    after=st.integers(-1, 80),
)
def test_the_next_boundary_is_the_first_epoch_due(
    first: int, every: int | None, after: int
) -> None:
    """``next_boundary`` computes a one-segment schedule's next epoch itself (it is asked
    at every step): the same as the first of ``due``."""
    snaps = Snapshots(Host(), every=1, start=0)  # type: ignore[arg-type]
    snaps.segments = [(first, every)]
    snaps.snapped[0] = after
    due = list(snaps.due(after, None))
    assert snaps.next_boundary(0) == (due[0] if due else None)
