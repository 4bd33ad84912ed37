"""The pool of kept actors on a fake clock and fake timers: idle actors go at their own
``idle_timeout``, whatever was kept before them, and a release disarms the timer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from timely.backends.ray_pool import ActorPool


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Timers:
    """``threading.Timer``'s stand-in: records each timer, fires it when told."""

    def __init__(self) -> None:
        self.armed: list[FakeTimer] = []

    def __call__(self, delay: float, action: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(delay, action)
        self.armed.append(timer)
        return timer

    def live(self) -> list[FakeTimer]:
        return [t for t in self.armed if t.started and not (t.cancelled or t.fired)]


class FakeTimer:
    def __init__(self, delay: float, action: Callable[[], None]) -> None:
        self.delay, self.action = delay, action
        self.daemon = False
        self.started = self.cancelled = self.fired = False

    def fire(self) -> None:
        self.fired = True
        self.action()

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.cancelled = True


def pool() -> tuple[ActorPool, Clock, Timers]:
    clock, timers = Clock(), Timers()
    return ActorPool(clock=clock, timer=timers), clock, timers


def test_a_short_idle_timeout_is_not_held_up_by_a_longer_one_before_it() -> None:
    p, clock, timers = pool()
    a: list[Any] = [object(), object()]
    b: list[Any] = [object(), object()]
    p.give_back(a, "shape", 30.0)
    assert [t.delay for t in timers.live()] == [30.0]
    p.give_back(b, "shape", 0.2)
    # the 30 s timer is replaced by one for the sooner expiry
    assert [t.delay for t in timers.live()] == [0.2]
    clock.now += 0.2
    timers.live()[0].fire()
    assert len(p) == 2  # b went, a stays
    assert [t.delay for t in timers.live()] == [pytest.approx(29.8)]  # a's expiry, armed again


def test_a_release_disarms_the_timer() -> None:
    """Before the fix, a release left the timer of the released actors armed, and actors
    kept afterwards with a shorter idle_timeout waited for it (30 s in the suite)."""
    p, clock, timers = pool()
    p.give_back([object(), object()], "shape", 30.0)
    assert p.release() == 2
    assert timers.live() == []
    p.give_back([object()], "shape", 0.2)
    assert [t.delay for t in timers.live()] == [0.2]
    clock.now += 0.2
    timers.live()[0].fire()
    assert len(p) == 0 and timers.live() == []


def test_a_later_expiry_keeps_the_armed_timer() -> None:
    p, _, timers = pool()
    p.give_back([object()], "shape", 0.5)
    p.give_back([object()], "shape", 30.0)
    assert [t.delay for t in timers.live()] == [0.5]


def test_taking_for_workers_kills_other_shapes_that_hold_cpus_but_not_standbys() -> None:
    p, _, _ = pool()
    old, standby, mine = object(), object(), object()
    p.give_back([old], (0.5, 256), 30.0)  # workers of another run's shape: in the way
    p.give_back([standby], (0.0, 256), 30.0)  # a standby: reserves no CPU
    p.give_back([mine], (1.0, 256), 30.0)
    assert p.take(2, (1.0, 256)) == [mine]
    assert len(p) == 1  # the other shape's worker was killed, the standby kept
    assert p.take(1, (0.0, 256)) == [standby]


def test_taking_standbys_makes_no_room() -> None:
    p, _, _ = pool()
    worker = object()
    p.give_back([worker], (1.0, 256), 30.0)
    assert p.take(1, (0.0, 256)) == []
    assert p.take(1, (1.0, 256)) == [worker]  # still there
