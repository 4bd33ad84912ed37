"""The rate-controlled source: the records it promises, at the epochs it promises,
paced by ``next_awake`` (a worker waits for the next tick instead of spinning), and
exactly once across a restore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import connectors.rate
from connectors.rate import RateSource, rate_source
from timely import ConfigError, Dataflow, Vertex
from timely.eventlog import read_trace


def expected(source: RateSource) -> dict[int, list[int]]:
    """Every record by epoch, read straight from the source (no pacing involved)."""
    out: dict[int, list[int]] = {}
    for p in range(source.partitions()):
        offset = None
        while (got := source.read(p, offset)) is not None:
            epoch, records, offset = got
            out.setdefault(epoch, []).extend(records)
    return {e: sorted(r) for e, r in out.items()}


def by_epoch(pairs: list[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for e, r in pairs:
        out.setdefault(e, []).append(r)
    return {e: sorted(r) for e, r in out.items()}


def test_the_records_and_their_epochs() -> None:
    source = rate_source(1000, seconds=0.5, epoch_seconds=0.1, tick=0.01, partitions=3)
    got = expected(source)
    assert sorted(r for rs in got.values() for r in rs) == list(range(500))
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert all(len(rs) == 100 for rs in got.values())  # 1,000/s for 0.1 s an epoch
    counted = rate_source(10, count=7, make=lambda i: f"r{i}", tick=0.1, partitions=2)
    assert sorted(r for rs in expected(counted).values() for r in rs) == [f"r{i}" for i in range(7)]


class FakeTime:
    """A clock that moves only when the run sleeps, standing in for the ``time`` module of
    the modules that pace a source: the inline backend's wait for the next tick, the
    source vertex's check of which partitions are due, the rate source's schedule."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.slept = 0

    def time(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept += 1
        self.now += max(0.0, seconds)


def paced_run(backend: str, tmp_path: Path) -> tuple[RateSource, Any]:
    """0.6 s of records at 2,000/s over 2 workers, traced."""
    source = rate_source(2000, seconds=0.6, epoch_seconds=0.2, partitions=4)
    flow = Dataflow("paced")
    flow.source(source, name="rate").collect("out")
    return source, flow.run(workers=2, backend=backend, trace=str(tmp_path))


def steps_per_worker(trace: Path) -> list[int]:
    return [sum(1 for e in events if e[0] == "t") for _, events in read_trace(trace)]


def test_a_run_on_a_fixed_clock_lasts_what_the_rate_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a clock that moves only when the run waits, the run cannot finish before the
    last tick is due (0.59 s after the first), delivers every record at its epoch, and
    waits for each tick instead of spinning: a few steps per tick, and one wait per tick
    at most (60 ticks, and the one that finds the end)."""
    import timely.backends.inline
    import timely.graph.system

    clock = FakeTime()
    for module in (connectors.rate, timely.graph.system, timely.backends.inline):
        monkeypatch.setattr(module, "time", clock)
    start = clock.now
    source, results = paced_run("inline", tmp_path)
    # Due at 0.59 s, the last tick; its end shows at the next tick's time (0.60 s).
    assert 0.59 <= clock.now - start <= 0.6 + 1e-6
    assert 0 < clock.slept <= 61
    assert by_epoch(results["out"]) == expected(source)
    assert all(steps < 1000 for steps in steps_per_worker(tmp_path))


@pytest.mark.usefixtures("ray_local")
def test_a_run_on_ray_waits_between_ticks(tmp_path: Path) -> None:
    """On Ray (the real clock; counted, not timed): every record at its epoch, and the
    workers wait between ticks (a few steps per tick, not a spin)."""
    source, results = paced_run("ray", tmp_path)
    assert by_epoch(results["out"]) == expected(source)
    assert all(steps < 1000 for steps in steps_per_worker(tmp_path))


def test_a_restore_gives_the_failure_free_output(tmp_path: Path) -> None:
    source = rate_source(5000, seconds=0.3, epoch_seconds=0.05, partitions=4)
    flow = Dataflow("paced-restore")
    flow.source(source, name="rate").select(lambda x: x * 2).collect("out")
    results = flow.run(
        workers=2,
        backend="inline",
        checkpoint=str(tmp_path),
        checkpoint_every=1,
        crash_at=(60,),
        max_restarts=1,
    )
    want = {e: sorted(2 * r for r in rs) for e, rs in expected(source).items()}
    assert by_epoch(results["out"]) == want


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0, "seconds": 1}, "rate must be > 0"),
        ({"rate": 10}, "exactly one of seconds= "),
        ({"rate": 10, "seconds": 1, "count": 3}, "exactly one of seconds= "),
        ({"rate": 10, "count": -1}, "count must be an int >= 0"),
        ({"rate": 10, "seconds": 1, "tick": 2.0}, "need 0 < tick <= epoch_seconds"),
        ({"rate": 10, "seconds": 1, "partitions": 0}, "partitions must be an int >= 1"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        rate_source(**kwargs)  # type: ignore[arg-type]


def test_a_partition_handed_over_keeps_its_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition handed over live (``Source.resumed``) is due when it was due on its
    old owner: one that was behind catches up on the new owner. A first read without
    it (a restore's) is due now, as before. (A fixed clock.)"""
    monkeypatch.setattr(connectors.rate.time, "time", lambda: 1000.0)
    moved = rate_source(100, seconds=10, epoch_seconds=0.5, tick=0.1, partitions=2)
    restored = rate_source(100, seconds=10, epoch_seconds=0.5, tick=0.1, partitions=2)
    moved.resumed(1, 20, 995.0)  # five seconds behind on its old owner
    assert moved.next_awake(1, 21) == pytest.approx(995.1)  # at once: it catches up
    assert restored.next_awake(1, 21) == pytest.approx(1000.0)  # paced from now


class Costly(Vertex):
    """A step whose every batch costs the fake clock ``per_batch`` plus ``per_record`` a
    record (a fixed cost per activation, as an external call's or a step's), after a
    first one that stalls for ``stall`` (the worker falls behind the schedule)."""

    def __init__(self, clock: FakeTime, per_batch: float, per_record: float, stall: float):
        self.clock, self.per_batch, self.per_record, self.stall = (
            clock,
            per_batch,
            per_record,
            stall,
        )
        self.batches = 0

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        self.clock.now += self.stall + self.per_batch + self.per_record * len(records)
        self.stall = 0.0
        self.batches += 1
        self.send_by(0, records, time)


def behind_run(monkeypatch: pytest.MonkeyPatch) -> tuple[float, RateSource, Any, list[Costly]]:
    """1 s of records at 2,000/s (4 partitions, a tick of 5 records each every 10 ms) on
    one worker and a fake clock, into a step costing 3 ms a batch and 0.1 ms a record that
    stalls 0.3 s on its first batch. Read a tick a step, one batch each, it cannot keep up
    (3.5 ms of work per 2.5 ms of schedule); a step reading every due tick as one batch can
    (on schedule, 5 ms per 10 ms; behind, 7 ms per two ticks)."""
    import timely.backends.inline
    import timely.graph.system

    clock = FakeTime()
    for module in (connectors.rate, timely.graph.system, timely.backends.inline):
        monkeypatch.setattr(module, "time", clock)
    start = clock.now
    source = rate_source(2000, seconds=1.0, epoch_seconds=0.1, partitions=4)
    made: list[Costly] = []

    def make() -> Costly:
        made.append(Costly(clock, 0.003, 0.0001, 0.3))
        return made[-1]

    flow = Dataflow("behind")
    flow.source(source, name="rate").unary(make, name="costly").collect("out")
    results = flow.run(workers=1, backend="inline")
    return clock.now - start, source, results, made


def test_a_worker_behind_its_schedule_catches_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that fell 0.3 s behind reads every tick that is due, several a step, as
    one batch downstream, and is back on the schedule before the end: the run ends when
    the last tick is due (0.99 s) plus that tick's work, not 0.3 s late or later. Read one
    tick a step (the rate source's old ``batches_per_step = 1``), or each tick as a batch
    of its own downstream, it falls further behind instead: both fail here."""
    took, source, results, made = behind_run(monkeypatch)
    assert by_epoch(results["out"]) == expected(source)
    assert took <= 0.99 + 0.02, f"the run ended {took - 0.99:.3f} s after its last tick"
    ticks = 100 * source.partitions()
    assert made[0].batches < ticks / 2  # due ticks went downstream together


def test_the_catch_up_test_catches_a_tick_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: one tick's batch a step. The same run ends far behind its schedule."""
    monkeypatch.setattr(RateSource, "batches_per_step", 1)
    took, _, _, _ = behind_run(monkeypatch)
    assert took > 0.99 + 0.3


def test_the_catch_up_test_catches_a_batch_a_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: every tick read goes downstream as a batch of its own."""
    import timely.graph.system

    def send_each(self: Any) -> None:
        for epoch, parts in sorted(self.unsent.items()):
            for records in parts:
                self.cap.send_by(0, records, (epoch,))
        self.unsent.clear()

    monkeypatch.setattr(timely.graph.system.SourceVertex, "_send", send_each)
    took, _, _, _ = behind_run(monkeypatch)
    assert took > 0.99 + 0.3
