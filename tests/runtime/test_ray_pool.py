"""The pool of kept actors on a fake clock and fake timers: idle actors go at their own
``idle_timeout``, whatever was kept before them, and a release disarms the timer."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from timely.backends import ray_pool
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


# -- resets read when an actor is taken, not when it is given back -----------------------------
class Settle:
    """``ActorPool``'s reader of resets, faked: records each call; a reset named in
    ``failed`` failed (its actor died, say)."""

    def __init__(self, failed: tuple[Any, ...] = ()) -> None:
        self.calls: list[tuple[list[Any], float]] = []
        self.failed = failed

    def __call__(self, refs: list[Any], timeout: float) -> list[bool]:
        self.calls.append((list(refs), timeout))
        return [ref not in self.failed for ref in refs]


def settling_pool(settle: Settle) -> ActorPool:
    return ActorPool(clock=Clock(), timer=Timers(), settle=settle)


def test_a_run_gives_its_actors_back_without_waiting_for_their_resets() -> None:
    """The run that ends waits for nothing; the next take reads the resets, once. Caught:
    a pool that reads them as they are given back (the run's end waits again), and one
    that hands the actors out without reading them."""
    settle = Settle()
    p = settling_pool(settle)
    a, b = object(), object()
    p.give_back([a, b], "shape", 30.0, resets=["reset-a", "reset-b"], patience=10.0)
    assert settle.calls == []
    assert p.take(2, "shape") == [b, a]
    assert settle.calls == [(["reset-b", "reset-a"], 10.0)]
    p.give_back([a, b], "shape", 30.0)  # reset already (a leaver's, say): nothing to read
    assert p.take(2, "shape") == [b, a]
    assert len(settle.calls) == 1


def test_an_actor_whose_reset_failed_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """An actor that died while its reset ran (or whose reset did not answer in time) is
    killed and left out: the run starts a new actor in its place. Caught: a take that
    reads the resets but hands out every actor anyway."""
    killed: list[Any] = []
    monkeypatch.setattr(ray_pool, "kill", killed.append)
    settle = Settle(failed=("reset-a",))
    p = settling_pool(settle)
    a, b = object(), object()
    p.give_back([a, b], "shape", 30.0, resets=["reset-a", "reset-b"], patience=10.0)
    assert p.take(2, "shape") == [b]
    assert killed == [a]
    assert len(p) == 0  # not kept either


class _Remote:
    def __init__(self, name: str) -> None:
        self.name = name

    def remote(self) -> str:
        return self.name


class FakeActor:
    """An actor handle whose ``reset.remote()`` returns a name for the call."""

    def __init__(self, name: str) -> None:
        self.reset = _Remote(f"reset-{name}")


def test_the_end_of_a_clean_run_starts_the_resets_and_waits_for_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RaySession._keep_actors`` hands every actor to the pool with its reset under way,
    the standby under its own shape; it reads no Ray result. Caught: the old end of a run,
    which waited for every reset (``ray.wait``) before giving the actors back."""
    from timely.backends import ray as backend

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the end of a run waited on Ray")

    monkeypatch.setattr(backend.ray, "wait", forbidden)
    monkeypatch.setattr(backend.ray, "get", forbidden)
    settle = Settle()
    p = settling_pool(settle)
    monkeypatch.setattr(backend, "POOL", p)
    session = backend.RaySession.__new__(backend.RaySession)
    w0, w1, standby = FakeActor("w0"), FakeActor("w1"), FakeActor("s")
    session.plan = SimpleNamespace(store=None)  # type: ignore[assignment]
    session._links = None
    session._departed = set()
    session.actors, session._standbys = [w0, w1], [standby]
    session._cpus_of, session.cpus, session.max_inflight = {}, 1.0, 8
    session.idle_timeout, session.heartbeat_timeout = 30.0, 7.0
    session._keep_actors()
    assert len(p) == 3 and settle.calls == [] and session._standbys == []
    monkeypatch.undo()
    assert p.take(2, session._shape()) == [w1, w0]
    assert settle.calls == [(["reset-w1", "reset-w0"], 7.0)]
    assert p.take(1, session._standby_shape()) == [standby]


def test_a_run_with_state_on_disk_waits_for_its_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session removes the run's state directory once the actors are given back: each
    worker's disk tables must be closed by then, so these resets are waited for, and an
    actor whose reset failed is killed, not kept. Caught: the end of such a run not
    waiting (the directory stayed, written into by a store closing while it was removed:
    ``test_ray_kills_with_state_on_disk``)."""
    from timely.backends import ray as backend

    killed: list[Any] = []
    monkeypatch.setattr(backend, "kill", killed.append)
    waited = Settle(failed=("reset-w1",))
    monkeypatch.setattr(backend, "read_calls", waited)
    settle = Settle()
    p = settling_pool(settle)
    monkeypatch.setattr(backend, "POOL", p)
    session = backend.RaySession.__new__(backend.RaySession)
    w0, w1 = FakeActor("w0"), FakeActor("w1")
    session.plan = SimpleNamespace(store=object())  # type: ignore[assignment]
    session._links = None
    session._departed = set()
    session.actors, session._standbys = [w0, w1], []
    session._cpus_of, session.cpus, session.max_inflight = {}, 1.0, 8
    session.idle_timeout, session.heartbeat_timeout = 30.0, 7.0
    session._keep_actors()
    assert waited.calls == [(["reset-w0", "reset-w1"], 7.0)]
    assert killed == [w1]
    assert p.take(2, session._shape()) == [w0]
    assert settle.calls == []  # read already: nothing left for the take
