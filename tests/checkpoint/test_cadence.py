"""``checkpoint_every="auto"`` piece by piece: its options, a worker's schedule when the
driver changes the interval, and the driver's windows and requests on synthetic commits.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import timely.checkpoint.cadence
from tests.conftest import MUTANT_SEARCH
from timely.checkpoint.aimd import AIMD
from timely.checkpoint.cadence import AutoCadence
from timely.checkpoint.config import CheckpointConfig
from timely.errors import ConfigError
from timely.worker.snapshots import Snapshots

# -- options --------------------------------------------------------------------------------


def config(**options: Any) -> CheckpointConfig | None:
    return CheckpointConfig.from_options({"checkpoint": "ckpt", **options})


def test_auto_is_accepted_with_the_default_bounds() -> None:
    auto = config(checkpoint_every="auto")
    assert auto is not None and auto.fraction == (0.05, 0.10) and auto.every == 1
    wide = config(checkpoint_every="auto", checkpoint_fraction=[0.02, 0.2])
    assert wide is not None and wide.fraction == (0.02, 0.2)
    fixed = config(checkpoint_every=4)
    assert fixed is not None and fixed.fraction is None and fixed.every == 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"checkpoint_every": "fast"}, "positive integer or \"auto\", got 'fast'"),
        ({"checkpoint_every": 0}, 'checkpoint_every must be a positive integer or "auto"'),
        ({"checkpoint_every": True}, "positive integer"),
        ({"checkpoint_every": 2.5}, "positive integer"),
        ({"checkpoint_fraction": (0.05, 0.1)}, 'give checkpoint_every="auto"'),
        ({"checkpoint_every": 3, "checkpoint_fraction": (0.05, 0.1)}, 'checkpoint_every="auto"'),
        ({"checkpoint_every": "auto", "checkpoint_fraction": 0.1}, r"must be \(lo, hi\)"),
        ({"checkpoint_every": "auto", "checkpoint_fraction": (0.1, 0.05)}, "0 < lo < hi < 1"),
        ({"checkpoint_every": "auto", "checkpoint_fraction": (0.05, 0.09)}, "too narrow"),
        ({"checkpoint_every": "auto", "checkpoint_interval": 1.0}, "not both"),
    ],
)
def test_bad_options_fail_with_the_fix(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(**options)


def test_auto_needs_a_checkpoint_directory() -> None:
    with pytest.raises(ConfigError, match="need checkpoint="):
        CheckpointConfig.from_options({"checkpoint_every": "auto"})


# -- a worker's schedule --------------------------------------------------------------------


def schedule(every: int | None, vertices: int = 2, start: int = 0) -> Snapshots:
    """A worker's :class:`Snapshots` with nothing around it but what the schedule uses."""
    worker = SimpleNamespace(
        plan=SimpleNamespace(vertices=[None] * vertices, live_control=False),
        vertices=[None] * vertices,
        recheck_notifications=lambda: None,
    )
    return Snapshots(worker, every, start)  # type: ignore[arg-type]


def old_due(every: int, after: int, upto: int | None) -> list[int]:
    """``checkpoint_every``'s epochs as they were computed before schedules had segments."""
    first = ((after + 1) // every + 1) * every - 1
    return list(range(first, (first if upto is None else upto) + 1, every))


@given(every=st.integers(1, 9), after=st.integers(-1, 60), span=st.none() | st.integers(0, 40))
def test_a_fixed_interval_is_every_kth_epoch(every: int, after: int, span: int | None) -> None:
    upto = None if span is None else after + span
    assert list(schedule(every).due(after, upto)) == old_due(every, after, upto)


def test_a_new_interval_applies_from_its_epoch_and_the_old_one_before() -> None:
    s = schedule(2)  # 1, 3, 5, ...
    s.max_notified = 4
    assert s.request(8, 5)
    assert list(s.due(0, 30)) == [1, 3, 5, 7, 8, 13, 18, 23, 28]
    assert list(s.due(5, None)) == [7]
    assert list(s.due(7, None)) == [8]
    assert list(s.due(8, 12)) == []
    assert s.request(20, 3)  # a later change keeps the one before it up to its epoch
    assert list(s.due(4, 30)) == [5, 7, 8, 13, 18, 20, 23, 26, 29]


def test_a_request_at_or_before_the_floor_is_refused_and_changes_nothing() -> None:
    s = schedule(2)
    s.snapped = {0: 9, 1: 7}  # one vertex snapshotted after epoch 9: the floor is 9
    assert not s.request(9, 4)
    assert list(s.due(7, 15)) == [9, 11, 13, 15]
    assert s.request(10, 4)
    assert list(s.due(7, 18)) == [9, 10, 14, 18]


def test_segments_every_vertex_has_passed_are_dropped() -> None:
    s = schedule(1)
    s.snapped = {0: 5, 1: 4}  # vertex 1 may still be snapshotted at 5, on the first segment
    assert s.request(6, 2) and s.request(10, 3)
    assert s.segments == [(0, 1), (6, 2), (10, 3)]
    s.snapped = {0: 12, 1: 11}
    assert s.request(13, 4)
    assert s.segments == [(10, 3), (13, 4)]
    assert list(s.due(11, 21)) == [13, 17, 21]


def test_one_epoch_on_request_replaces_the_schedule() -> None:
    """``checkpoint_interval``: the earlier epoch asked for was committed or given up."""
    s = schedule(None)
    assert list(s.due(-1, 100)) == []
    assert s.request(5)
    assert list(s.due(-1, None)) == [5] and list(s.due(5, 100)) == []
    s.max_notified = 5
    assert s.request(9)
    assert list(s.due(-1, 100)) == [9]


# -- the driver's windows and requests ------------------------------------------------------


class Workers:
    """Stands for ``Session._request_checkpoint``: agrees when the epoch is past every
    worker's floor, and records what it was asked."""

    def __init__(self, floor: int = -1) -> None:
        self.floor = floor
        self.asked: list[tuple[int, int | None]] = []

    def __call__(
        self, epoch: int, every: int | None = None, fraction: float | None = None
    ) -> tuple[bool, int]:
        self.asked.append((epoch, every))
        return epoch > self.floor, self.floor


def cadence(interval: int = 1, parallel: int = 1, min_window: float = 0.0) -> AutoCadence:
    return AutoCadence(AIMD(interval), parallel, min_window)


def commit(c: AutoCadence, epoch: int, at: float, work: float = 0.0) -> Any:
    """Every part of ``epoch`` reported with ``work`` in all, then the commit at ``at``."""
    c.part(epoch, work)
    return c.committed(epoch, at)


def test_a_window_begins_at_a_commit_and_closes_k_epochs_later() -> None:
    c = cadence(interval=2)
    assert commit(c, 1, 0.0, work=5.0) is None  # begins the window: paid for before it
    assert commit(c, 2, 0.5, work=0.03) is None  # not k epochs yet (a part of the old grid)
    m = commit(c, 3, 1.0, work=0.04)
    assert m is c.measurements[-1]
    assert (m.first, m.last, m.interval, m.total) == (1, 3, 2, 1.0)
    assert m.work == pytest.approx(0.07) and m.fraction == pytest.approx(0.07)
    assert m.next_interval == 2 and c.pending() is None


def test_without_cpu_measured_the_wall_time_on_every_worker_stands_for_it() -> None:
    c = cadence(interval=1, parallel=2)
    commit(c, 0, 0.0)
    c.driver(0.01)
    commit(c, 1, 1.0, work=0.1)
    m = c.measurements[-1]
    assert m.work == pytest.approx(0.1) and m.driver == pytest.approx(0.01)
    assert m.cpu == 0 and m.spent == pytest.approx(2.0)
    assert m.fraction == pytest.approx(0.11 / 2.0)


# One window as the coordinator sees it: per worker, the parts of the epochs after the
# commit that began it, each with its work and its process's CPU since that worker's last
# part; the driver's checkpoint CPU; and the driver's process CPU at each commit.
Window = tuple[list[list[tuple[float, float]]], float, float]

windows = st.tuples(
    st.lists(  # workers
        st.lists(  # parts, one per epoch of the window
            st.tuples(st.floats(0.0, 0.5), st.floats(0.5, 5.0)), min_size=1, max_size=4
        ),
        min_size=1,
        max_size=3,
    ),
    st.floats(0.0, 0.2),  # the driver's checkpoint CPU
    st.floats(0.1, 5.0),  # the driver's process CPU over the window
)


def run_window(c: AutoCadence, window: Window) -> Any:
    """Feed ``window`` to ``c`` after a commit at epoch 0 (driver CPU 10 s then) and close
    it with the commit of its last epoch; returns the measurement."""
    workers, driver, driver_cpu = window
    c.part(0, 1.0, 1.0)  # paid for before the window
    assert c.committed(0, 0.0, 10.0) is None
    epochs = max(len(parts) for parts in workers)
    for parts in workers:
        # A worker may have parts of fewer of the window's epochs (the last ones): each
        # part reports what its worker spent since that worker's previous part.
        for e, (work, cpu) in enumerate(parts, start=epochs - len(parts) + 1):
            c.part(e, work, cpu)
    c.driver(driver)
    return c.committed(epochs, 1.0, 10.0 + driver_cpu)


def expected(window: Window) -> float:
    """The share of the run's CPU spent on checkpoints: every worker's work and the
    driver's, over every worker's process CPU and the driver's."""
    workers, driver, driver_cpu = window
    work = sum(w for parts in workers for w, _ in parts)
    cpu = sum(c for parts in workers for _, c in parts)
    return (work + driver) / (cpu + driver_cpu)


@given(windows)
def test_the_fraction_is_the_checkpoints_share_of_the_runs_cpu(window: Window) -> None:
    m = run_window(cadence(interval=1, parallel=2), window)
    assert m is not None and m.fraction == pytest.approx(expected(window), rel=1e-9)


class ForgetsTheDriver(AutoCadence):
    """Mutant: the driver's commits and reports are not the checkpoints' (issue 30's
    Ray run: the driver shares the cores with the workers)."""

    def driver(self, seconds: float) -> None:
        pass


class OnlyTheDriversCpu(AutoCadence):
    """Mutant: the run's CPU is the driver's process alone (the workers' processes
    forgotten: right inline, where they are the driver's, not on Ray)."""

    def part(self, epoch: int, work: float, cpu: float = 0.0, committable: bool = True) -> None:
        super().part(epoch, work, 0.0, committable)


class PerWorkerOfWallTime(AutoCadence):
    """Mutant: the measurement before this one, the workers' work divided by how many
    run at once, over the window's wall time (here 1 s) whatever CPU the run used."""

    def part(self, epoch: int, work: float, cpu: float = 0.0, committable: bool = True) -> None:
        super().part(epoch, work / self.parallel, 0.0, committable)

    def committed(self, epoch: int, at: float, cpu: float | None = None) -> Any:
        return super().committed(epoch, at, None)


@pytest.mark.parametrize("mutant", [ForgetsTheDriver, OnlyTheDriversCpu, PerWorkerOfWallTime])
def test_a_measurement_leaving_a_share_out_is_caught(mutant: type[AutoCadence]) -> None:
    @MUTANT_SEARCH
    @given(windows)
    def check(window: Window) -> None:
        m = run_window(mutant(AIMD(1), 2, 0.0), window)
        assert m is not None and m.fraction == pytest.approx(expected(window), rel=1e-9)

    with pytest.raises(AssertionError):
        check()


def test_a_window_lasts_at_least_min_window_seconds() -> None:
    c = cadence(interval=1, min_window=0.5)
    commit(c, 0, 0.0)
    for e, at in ((1, 0.1), (2, 0.2), (3, 0.3)):
        commit(c, e, at, work=0.01)
    assert c.measurements == []
    commit(c, 4, 0.6, work=0.01)
    (m,) = c.measurements
    assert (m.first, m.last) == (0, 4) and m.fraction == pytest.approx(0.04 / 0.6)


def test_a_change_is_asked_for_k_after_the_commit_that_chose_it() -> None:
    c = cadence(interval=2)
    commit(c, 1, 0.0)
    commit(c, 3, 1.0, work=0.5)  # fraction 0.5 > hi: double
    assert c.pending() == 4 and c.interval == 4
    workers = Workers(floor=4)
    c.reschedule(workers)
    assert workers.asked == [(7, 4)] and c.pending() is None
    # Commits before the new interval's first epoch belong to the old schedule.
    assert commit(c, 5, 2.0, work=0.5) is None
    commit(c, 7, 3.0, work=9.0)  # begins the new window
    commit(c, 11, 4.0, work=0.07)
    m = c.measurements[-1]
    assert (m.first, m.last, m.interval) == (7, 11, 4)
    assert m.fraction == pytest.approx(0.07)


def test_a_refused_change_is_asked_again_at_once_past_the_floor_on_the_same_grid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    monkeypatch.setattr(timely.checkpoint.cadence, "clock", lambda: now[0])
    c = cadence(interval=2)
    commit(c, 1, 0.0)
    commit(c, 3, 1.0, work=0.5)  # -> 4, chosen at 3
    workers = Workers(floor=12)
    seen = [workers.floor]

    def moving(epoch: int, every: int | None = None, fraction: float | None = None) -> Any:
        answer = workers(epoch, every, fraction)
        workers.floor += 1  # the workers move on while the driver asks
        seen.append(workers.floor)
        now[0] += 1.0  # each request takes a second of the fake clock
        return answer

    c.reschedule(moving)
    epochs = [e for e, _ in workers.asked]
    assert epochs[0] == 7 and all((e - 3) % 4 == 0 for e in epochs)
    assert epochs[-1] > seen[-2] and c.pending() is None
    assert c.request_seconds == len(workers.asked)  # every request's time, counted once


def test_a_restart_starts_afresh_at_the_controllers_interval() -> None:
    c = cadence(interval=1)
    commit(c, 0, 0.0)
    commit(c, 1, 1.0, work=0.5)  # -> 2, pending
    assert c.pending() == 2
    c.restarted(0)
    assert c.pending() is None and c.interval == 2
    assert commit(c, 1, 5.0, work=1.0) is None  # begins a window
    commit(c, 3, 6.0, work=0.07)
    assert c.measurements[-1].first == 1 and c.measurements[-1].total == pytest.approx(1.0)


def test_work_of_parts_never_committed_counts_in_the_window_it_arrives_in() -> None:
    c = cadence(interval=1)
    commit(c, 0, 0.0)
    c.part(0, 0.02, committable=False)  # a late part of a committed epoch
    c.part(1, 0.01)  # superseded: never committed, counted with the next commit
    commit(c, 2, 1.0, work=0.03)
    assert c.measurements[-1].work == pytest.approx(0.06)
