"""``checkpoint_every="auto"`` in real runs: the interval follows a load whose epochs
shrink tenfold midway and the coordination fraction settles within its bounds; outputs
are those of a fixed interval, also across crashes; every worker switches at the same
epoch.

The costs are modelled: a step that does ``per_record`` units of work for each record
and a vertex whose snapshot takes ``per_snapshot`` units (state that is costly to
serialise). Where the test checks what the controller settles on, a unit is a
millisecond of a fake clock, the one every measurement of the checkpoint's cost reads
(the workers' snapshot and write times, the commits' times, the driver's own work): the
fractions are then exactly the model's, whatever else the machine does, and the
runtime's own costs are nil. Elsewhere a unit is real work (hashing 256 KiB) on the
real clock. The run is fed by the driver one epoch at a time, so the inline backend
finishes each epoch before the next arrives and its commits are evenly spaced.
"""

from __future__ import annotations

import hashlib
import operator
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

import operators  # noqa: F401 - registers the stream methods
import timely.checkpoint.cadence
from tests.checkpoint.sweep import SCRATCH, epochs_for, run, sweep
from timely import Dataflow, Source, Vertex, pipeline
from timely.eventlog import read_trace

BLOCK = bytes(256 * 1024)

UNIT_NS = 1_000_000
"""A unit of modelled work on the fake clock: a millisecond."""


class FakeClock:
    """The time every checkpoint-cost measurement of an inline run reads, moved only by
    :func:`work`: the event log's nanosecond ``clock`` of the workers and the inline
    backend, the loop's CPU clock, and the ``time`` module of the coordinator and the
    cadence (seconds: wall, the driver's CPU and its process's alike, one timeline)."""

    def __init__(self) -> None:
        self.ns = 1_000_000_000_000

    def __call__(self) -> int:
        return self.ns

    def perf_counter(self) -> float:
        return self.ns / 1e9

    monotonic = time = thread_time = process_time = perf_counter

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import timely.backends.inline
        import timely.checkpoint.coordinator
        import timely.checkpoint.writer
        import timely.worker.loop
        import timely.worker.snapshots

        for module in (
            timely.worker.snapshots,
            timely.worker.loop,
            timely.backends.inline,
            timely.checkpoint.writer,
        ):
            monkeypatch.setattr(module, "clock", self)
        # The loop's checkpoint code is timed in its thread's CPU time: on one timeline,
        # the same as the fake clock's.
        monkeypatch.setattr(timely.worker.snapshots, "thread_time_ns", self)
        for module in (timely.checkpoint.coordinator, timely.checkpoint.cadence):
            monkeypatch.setattr(module, "time", self)
        # The garbage collector's and the part writer's CPU time: nil, as the runtime's
        # own costs (the parts of these runs are small, written on the loop, at no cost
        # on the fake clock).
        for module in (timely.checkpoint.coordinator, timely.checkpoint.writer):
            monkeypatch.setattr(module, "thread_time_ns", lambda: 0)
        monkeypatch.setattr(sys.modules[__name__], "CLOCK", self)


CLOCK: FakeClock | None = None
"""Set while a test runs on the fake clock: :func:`work` moves it instead of working."""


def work(units: int) -> None:
    if CLOCK is not None:
        CLOCK.ns += units * UNIT_NS
        return
    for _ in range(units):
        hashlib.sha256(BLOCK).digest()


class Costly(Vertex):
    """Passes its records on after ``per_record`` units of work each; its snapshot takes
    ``per_snapshot`` units."""

    def __init__(self, per_record: int, per_snapshot: int) -> None:
        super().__init__()
        self.per_record = per_record
        self.per_snapshot = per_snapshot

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        work(len(records) * self.per_record)
        self.send_by(0, records, time)

    def snapshot_at(self, epoch: int) -> dict[str, Any] | None:
        work(self.per_snapshot)
        return {"kind": "costly"}

    def restore_at(self, snapshot: dict[str, Any], epoch: int) -> None:
        pass


def records(epoch: int, size: int) -> list[int]:
    return [(epoch * 7 + i) % 50 for i in range(size)]


def shrinking(
    sizes: list[int], per_record: int, per_snapshot: int, **options: Any
) -> tuple[dict[int, Any], Any]:
    """Run the costly step and a running sum per key over epochs of ``sizes`` records,
    fed one epoch at a time; return the outputs per epoch and the session."""
    flow = Dataflow("shrinking")
    out: dict[int, Any] = {}
    handle = flow.new_input()
    step = flow.vertex([(handle.stream, pipeline())], lambda: Costly(per_record, per_snapshot))
    step[0].running_reduce(lambda x: x % 4, operator.add).subscribe(
        lambda e, rs: out.__setitem__(e, sorted(rs))
    )
    session = flow.activate(workers=2, backend="inline", **options)
    for epoch, size in enumerate(sizes):
        handle.advance_to(epoch)
        handle.send(records(epoch, size))
    handle.close()
    session.join()
    return out, session


BIG, SMALL = 20, 2
SWITCH = 16
"""The first epoch of ten times fewer records."""
SIZES = [BIG] * SWITCH + [SMALL] * 220
PER_RECORD = 30
PER_SNAPSHOT = 55
"""With two workers stepped in turn, a checkpoint costs c = 110 units, an epoch p = 600
units, then 60. A window of checkpoints every k epochs measures a fraction of
c / (c + k p) (the runtime's own costs are nil on the fake clock): 0.155 at k = 1, 0.084
at k = 2 (within the default bounds, 5-10 %), then, with small epochs, 0.48 at k = 2,
down to 0.103 at
k = 16 and 0.054 at k = 32 (within). So the interval must settle at 1-2 epochs while
the epochs are big and at 18-36 once they are small (see :mod:`timely.checkpoint.aimd`)."""


def test_epochs_ten_times_smaller_lengthen_the_interval_within_the_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeClock().install(monkeypatch)
    got, session = shrinking(
        SIZES, PER_RECORD, PER_SNAPSHOT, checkpoint=str(tmp_path), checkpoint_every="auto"
    )
    lo, hi = 0.05, 0.10  # checkpoint_fraction's default
    windows = session.cadence
    report = "\n".join(
        f"({m.first}, {m.last}] k={m.interval} fraction {m.fraction:.3f} -> {m.next_interval}"
        for m in windows
    )
    for m in windows:
        # A window within one size of epochs measured exactly what the model says (one
        # across the switch holds some of each, in a proportion that depends on when the
        # commits fell between the epochs).
        if m.last < SWITCH or m.first >= SWITCH + 1:
            p = PER_RECORD * (BIG if m.last < SWITCH else SMALL)
            c = 2 * PER_SNAPSHOT * (m.last - m.first) // m.interval  # its checkpoints' cost
            model = c / (c + (m.last - m.first) * p)
            assert m.fraction == pytest.approx(model, rel=1e-9), report
    before = [m for m in windows if m.last < SWITCH]
    after = [m for m in windows if m.first >= SWITCH]
    assert before and after, report
    # Settled: from the first window of the small epochs inside the bounds on, the
    # interval stays where the fraction is within the bounds, and so does every window.
    first_in = next(i for i, m in enumerate(after) if lo <= m.fraction <= hi)
    settled = after[first_in:]
    assert len(settled) >= 3, report
    assert all(lo <= m.fraction <= hi for m in settled), report
    assert all(18 <= m.interval <= 36 and 18 <= m.next_interval <= 36 for m in settled), report
    # Ten times smaller epochs make a checkpoint ten times dearer: a longer interval.
    assert before[-1].next_interval <= 2 and settled[0].interval >= 9 * before[-1].next_interval
    # Exactly once is unchanged: the outputs of a fixed interval.
    expected, _ = shrinking(SIZES, 0, 0, checkpoint=str(tmp_path / "fixed"), checkpoint_every=3)
    assert got == expected


@pytest.mark.parametrize(
    ("pipeline_", "source", "workers"),
    [("user_vertex", True, 3), ("running", False, 2), ("sliding", True, 2)],
)
def test_every_crash_point_with_auto_gives_the_failure_free_outputs(
    pipeline_: str, source: bool, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no shortest window the interval changes every few epochs (the runtime's own
    costs are all there is to measure), so crashes land before, during and after
    changes, and restores start the new workers at the controller's interval."""
    monkeypatch.setattr(timely.checkpoint.cadence, "MIN_WINDOW", 0.0)
    epochs = epochs_for(20, 3)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as d:
        _, session = run(
            pipeline_, epochs, source, workers, 1, checkpoint=d, checkpoint_every="auto"
        )
    assert any(m.next_interval != m.interval for m in session.cadence), session.cadence
    events, wrong = sweep(pipeline_, epochs, source, workers=workers, every="auto", seed=1)
    assert events > 20
    assert wrong == [], f"{len(wrong)} crash points of {events} events give other outputs: {wrong}"


def test_every_worker_logs_the_same_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change reaches the event log as ``("k", t, t, epoch, every, fraction)``, the same
    on every worker, and the run's view shows the latest interval and fraction."""
    monkeypatch.setattr(timely.checkpoint.cadence, "MIN_WINDOW", 0.0)
    trace = tmp_path / "trace"
    _, session = shrinking(
        [4] * 40,
        0,
        15,
        checkpoint=str(tmp_path / "c"),
        checkpoint_every="auto",
        trace=str(trace),
    )
    changes = [m for m in session.cadence if m.next_interval != m.interval]
    assert changes
    logged = {}
    for header, events in read_trace(trace):
        logged[header["worker"]] = [e[3:] for e in events if e[0] == "k"]
    assert logged[0] == logged[1] and len(logged[0]) == len(changes)
    for (epoch, every, fraction), m in zip(logged[0], changes):
        assert every == m.next_interval and fraction == pytest.approx(m.fraction)
        assert epoch > m.last
    view = session.view.snapshot()
    assert view["checkpoint_interval"] == session.cadence[-1].next_interval
    assert view["coordination_fraction"] == pytest.approx(session.cadence[-1].fraction)


# -- on Ray --------------------------------------------------------------------------------


class Sized(Source):
    """``sizes[e]`` records at epoch ``e``, over two partitions, one batch a read."""

    batches_per_step = 1

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def partitions(self) -> int:
        return 2

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        e = 0 if offset is None else offset
        if e >= len(self.sizes):
            return None
        return e, records(e, self.sizes[e])[partition::2], e + 1


def from_source(sizes: list[int], per_snapshot: int, backend: str, **options: Any) -> Any:
    flow = Dataflow("sized")
    out: dict[int, Any] = {}
    s = flow.source(Sized(sizes))
    step = flow.vertex([(s, pipeline())], lambda: Costly(0, per_snapshot))
    step[0].running_reduce(lambda x: x % 4, operator.add).subscribe(
        lambda e, rs: out.__setitem__(e, sorted(rs))
    )
    session = flow.activate(workers=2, backend=backend, **options)
    session.join()
    return out, session


@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
def test_on_ray_workers_switch_together_and_outputs_are_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timely.checkpoint.cadence, "MIN_WINDOW", 0.05)
    sizes = [8] * 300
    expected, _ = from_source(sizes, 0, "inline")
    trace = tmp_path / "trace"
    got, session = from_source(
        sizes,
        20,
        "ray",
        checkpoint=str(tmp_path / "c"),
        checkpoint_every="auto",
        trace=str(trace),
    )
    assert got == expected
    assert any(m.next_interval != m.interval for m in session.cadence), session.cadence
    logged = [{tuple(e[3:5]) for e in ev if e[0] == "k"} for _, ev in read_trace(trace)]
    # A worker may have agreed to an epoch another refused; then all agreed to a later one.
    common = sorted(set.intersection(*logged))
    assert len(logged) == 2 and common and common[0][0] <= session.committed[-1]
    # From each epoch every worker agreed to, until the next, commits follow its interval.
    bounds = [e for e, _ in common[1:]] + [len(sizes)]
    for (epoch, every), end in zip(common, bounds):
        inside = [e for e in session.committed if epoch <= e < end]
        assert all((e - epoch) % every == 0 for e in inside), (epoch, every, inside)
