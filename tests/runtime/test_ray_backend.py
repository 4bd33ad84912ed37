"""The ray backend on a real local Ray: results equal plain-Python references, outputs
arrive in epoch order while the session runs, and failures surface as the right errors.

One local Ray (2 CPUs) serves the whole module through the ``ray_local`` fixture; the
two-node cluster test runs in a subprocess with a Ray of its own.
"""

from __future__ import annotations

import os
import random
import resource
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError

from tests.runtime.test_ray_pool import Clock, Timers
from timely import (
    ConfigError,
    Dataflow,
    Session,
    UserFunctionError,
    Vertex,
    WorkerDied,
    exchange,
)
from timely.backends.ray import WORKER_NICENESS, RaySession
from timely.backends.ray_pool import POOL, release_workers

pytestmark = pytest.mark.usefixtures("ray_local")

ROOT = Path(__file__).resolve().parents[2]


# -- vertices (module level: the workers import them by reference) --------------------------------
class Split(Vertex):
    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        self.send_by(0, [w for line in records for w in line.split()], time)


class Count(Vertex):
    """Counts words per time and sends the counts once the time is complete."""

    def __init__(self) -> None:
        self.counts: dict[tuple[int, ...], Counter[str]] = {}

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        counts = self.counts.get(time)
        if counts is None:
            self.counts[time] = counts = Counter()
            self.notify_at(time)
        counts.update(records)

    def on_notify(self, time: tuple[int, ...]) -> None:
        self.send_by(0, sorted(self.counts.pop(time).items()), time)


class Halve(Vertex):
    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        out = [x // 2 for x in records if x > 1]
        if out:
            self.send_by(0, out, time)


class TagWorker(Vertex):
    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        self.send_by(0, [(x, self.worker) for x in records], time)


class Double(Vertex):
    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        self.send_by(0, [2 * x for x in records], time)


class Fragile(Vertex):
    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        for r in records:
            if r == 13:
                raise ZeroDivisionError("unlucky record")
        self.send_by(0, records, time)


class Busy(Vertex):
    """Holds the interpreter (no sleeping, no I/O) on its first batch for twice the
    heartbeat timeout the test runs with."""

    def __init__(self) -> None:
        self.first = True

    def on_recv(self, input: int, records: list[Any], time_: tuple[int, ...]) -> None:
        if self.first:
            self.first = False
            end = time.monotonic() + 4.0
            while time.monotonic() < end:
                pass
        self.send_by(0, records, time_)


class Hoarder(Vertex):
    """Keeps a capability and never drops it: the run can never finish."""

    def on_recv(self, input: int, records: list[Any], time_: tuple[int, ...]) -> None:
        self.kept = self.retain()


FRAGILE_LINE = Fragile.on_recv.__code__.co_firstlineno + 3


# -- helpers ----------------------------------------------------------------------------------
def wait_until(session: Session, condition: Callable[[], bool]) -> None:
    """Poll the session (outputs are delivered there) until ``condition`` holds; a run
    that never gets there fails under pytest-timeout's bound, with a stack trace."""
    while not condition():
        session.poll(0.05)


def wait_for_exit(pid: int) -> None:
    """Block until process ``pid`` (not a child of ours) has ended: its pidfd turns
    readable then (Linux 5.3+). A process that never ends fails under pytest-timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def lines_by_epoch(seed: int, epochs: int = 3, lines: int = 300) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    return [
        [" ".join(rng.choice(vocab) for _ in range(rng.randrange(1, 8))) for _ in range(lines)]
        for _ in range(epochs)
    ]


def wordcount(data: list[list[str]]) -> Dataflow:
    flow = Dataflow("wordcount")
    lines = flow.new_input("lines")
    lines.stream.unary(Split).unary(Count, channel=exchange(lambda w: w)).collect("counts")
    for epoch, batch in enumerate(data):
        lines.advance_to(epoch)
        lines.send(batch)
    return flow


def mixed(data: list[list[int]], max_iters: int) -> Dataflow:
    """Exchange, broadcast, and a loop that exchanges inside."""
    flow = Dataflow("mixed")
    nums = flow.new_input("nums")
    by_mod = nums.stream.exchange(lambda x: x % 7, name="by_mod")
    by_mod.iterate(
        lambda s: s.exchange(lambda x: x, name="by_value").unary(Halve, name="halve"),
        max_iters=max_iters,
    ).collect("halvings")
    by_mod.broadcast().unary(TagWorker, name="tag").collect("tagged")
    for epoch, batch in enumerate(data):
        nums.advance_to(epoch)
        nums.send(batch)
    return flow


# -- results ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("workers", "options"),
    [(2, {}), (4, {}), (2, {"accumulate": False, "max_inflight": 1})],
)
def test_wordcount_matches_counter(workers: int, options: dict[str, Any]) -> None:
    data = lines_by_epoch(seed=workers)
    expected = {
        (epoch, word): n
        for epoch, batch in enumerate(data)
        for word, n in Counter(w for line in batch for w in line.split()).items()
    }
    results = wordcount(data).run(workers=workers, backend="ray", **options)
    got = [(epoch, word, n) for epoch, (word, n) in results["counts"]]
    assert {(e, w): n for e, w, n in got} == expected
    assert len(got) == len(expected)  # each (epoch, word) once
    assert [e for e, _, _ in got] == sorted(e for e, _, _ in got)


@pytest.mark.parametrize("workers", [2, 4])
def test_exchange_broadcast_and_loop_match_reference(workers: int) -> None:
    rng = random.Random(workers)
    data = [[rng.randrange(1, 10**6) for _ in range(150)] for _ in range(3)]
    max_iters = 6
    halvings = []
    for epoch, batch in enumerate(data):
        for x in batch:
            current = [x]
            for _ in range(max_iters):
                current = [y // 2 for y in current if y > 1]
                halvings += [(epoch, y) for y in current]
    tagged = [(e, (x, w)) for e, batch in enumerate(data) for x in batch for w in range(workers)]

    results = mixed(data, max_iters).run(workers=workers, backend="ray")
    assert sorted(results["halvings"]) == sorted(halvings)
    assert sorted(results["tagged"]) == sorted(tagged)
    assert all(isinstance(r, tuple) for r in results.records("tagged"))


def test_subscribe_sees_each_epoch_once_in_order() -> None:
    flow = Dataflow("subscribe")
    nums = flow.new_input("nums")
    seen: list[tuple[int, list[int]]] = []
    threads: set[str] = set()

    def callback(epoch: int, records: list[int]) -> None:
        threads.add(threading.current_thread().name)
        seen.append((epoch, sorted(records)))

    nums.stream.exchange(lambda x: x).unary(Double).subscribe(callback)
    for epoch in range(6):
        nums.advance_to(epoch)
        nums.send(range(10 * epoch, 10 * epoch + 10))
    flow.run(workers=3, backend="ray")
    assert seen == [(e, [2 * x for x in range(10 * e, 10 * e + 10)]) for e in range(6)]
    assert threads == {threading.main_thread().name}  # on the driver's thread, as inline


def test_streaming_session_delivers_while_running() -> None:
    flow = Dataflow("streaming")
    nums = flow.new_input("nums")
    seen: list[tuple[int, list[int]]] = []
    doubled = nums.stream.exchange(lambda x: x % 5).unary(Double)
    doubled.subscribe(lambda epoch, records: seen.append((epoch, sorted(records))))
    probe = doubled.probe()
    session = flow.activate(workers=2, backend="ray")
    try:
        assert isinstance(session, RaySession)
        for epoch in range(4):
            nums.send(range(epoch * 10, epoch * 10 + 10))
            nums.advance_to(epoch + 1)
            wait_until(session, lambda e=epoch: len(seen) == e + 1)  # type: ignore[misc]
            wait_until(session, lambda e=epoch: probe.done(e))  # type: ignore[misc]
            assert not probe.done(epoch + 1)
        nums.close()
        session.join()
    finally:
        session.close()
    assert seen == [(e, [2 * x for x in range(e * 10, e * 10 + 10)]) for e in range(4)]


# -- failures ---------------------------------------------------------------------------------
def test_user_function_error_names_step_place_time_and_record() -> None:
    flow = Dataflow("fragile")
    nums = flow.new_input("nums")
    nums.stream.exchange(lambda x: x).unary(Fragile, name="fragile").collect("out")
    nums.send(range(20))
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=2, backend="ray")
    error = info.value
    assert error.step == "fragile"
    assert error.where == f"{__file__}:{FRAGILE_LINE}"
    assert error.time == (0,)
    # A vertex's on_recv gets a batch, so the worker reports the batch holding the record.
    assert "13" in error.record_repr
    assert "ZeroDivisionError: unlucky record" in str(error)


def _reject_13(x: int) -> int:
    if x == 13:
        raise ValueError(f"bad record {x}")  # reject-13
    return x


def test_user_exception_arrives_at_the_driver_with_its_own_type() -> None:
    flow = Dataflow("typed")
    nums = flow.new_input("nums")
    nums.stream.exchange(lambda x: x).select(_reject_13, name="check").collect("out")
    nums.send(range(20))
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=2, backend="ray")
    error = info.value
    assert type(error.__cause__) is ValueError  # ``except``-able as what the user raised
    assert str(error.__cause__) == "bad record 13"
    assert error.step == "check" and error.time == (0,) and error.record_repr == "13"
    line = _reject_13.__code__.co_firstlineno + 2
    assert error.where == f"{__file__}:{line}"
    assert f"step 'check' failed at {__file__}:{line} on worker " in str(error)
    assert str(error).endswith("time (0,), record 13: ValueError: bad record 13")


class NeedsTwo(Exception):
    """Pickles, but does not unpickle: ``args`` holds the message, ``__init__`` wants two."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a} and {b}")


def test_a_user_exception_class_of_the_users_own_arrives_as_itself() -> None:
    class Local(Exception):
        """Defined in a function: Ray's cloudpickle carries it by value and back."""

    def reject(x: int) -> int:
        if x == 13:
            raise Local("unlucky")
        return x

    flow = Dataflow("local")
    nums = flow.new_input("nums")
    nums.stream.select(reject, name="check").collect("out")
    nums.send(range(20))
    with pytest.raises(UserFunctionError, match=r"record 13: Local: unlucky$") as info:
        flow.run(workers=2, backend="ray")
    assert type(info.value.__cause__) is Local


def test_a_user_exception_that_cannot_be_rebuilt_arrives_as_its_type_name_and_message() -> None:
    def reject(x: int) -> int:
        if x == 13:
            raise NeedsTwo(1, 2)
        return x

    flow = Dataflow("odd")
    nums = flow.new_input("nums")
    nums.stream.select(reject, name="check").collect("out")
    nums.send(range(20))
    with pytest.raises(UserFunctionError, match=r"record 13: NeedsTwo: 1 and 2$") as info:
        flow.run(workers=2, backend="ray")
    assert type(info.value.__cause__) is RuntimeError
    assert str(info.value.__cause__) == "NeedsTwo: 1 and 2"


def test_killed_worker_surfaces_as_worker_died() -> None:
    flow = Dataflow("killed")
    nums = flow.new_input("nums")
    seen: list[int] = []
    nums.stream.exchange(lambda x: x).unary(Double).subscribe(lambda e, r: seen.append(e))
    # A heartbeat that would take an hour: the death must be seen on the sockets (a
    # connection that ends), not by a timeout of timely's own.
    session = flow.activate(workers=2, backend="ray", heartbeat_timeout=3600)
    assert isinstance(session, RaySession)
    import ray

    try:
        nums.send(range(100))
        nums.advance_to(1)
        wait_until(session, lambda: seen == [0])  # the run is under way
        pid = session.pids[1]
        ray.kill(session.actors[1])
        # ray.kill only asks Ray to kill it: wait for the process to end, or on a loaded
        # machine the run could finish before the worker is gone, and rightly not fail.
        wait_for_exit(pid)
        with pytest.raises(WorkerDied, match="worker 1"):
            nums.send(range(100))
            nums.advance_to(2)
            nums.close()
            session.join()
    finally:
        session.close()


def test_stuck_worker_surfaces_as_worker_died_after_heartbeat_timeout() -> None:
    flow = Dataflow("stuck")
    nums = flow.new_input("nums")
    nums.stream.exchange(lambda x: x).unary(Double).collect("out")
    session = flow.activate(workers=2, backend="ray", heartbeat_timeout=1.5)
    assert isinstance(session, RaySession)
    pid = session.pids[1]
    os.kill(pid, signal.SIGSTOP)  # alive to Ray, but silent
    try:
        with pytest.raises(WorkerDied, match="worker 1 did not answer"):
            nums.send(range(10))
            nums.close()
            session.join()
    finally:
        os.kill(pid, signal.SIGCONT)
        session.close()


def test_a_long_step_is_not_a_dead_worker() -> None:
    flow = Dataflow("busy")
    nums = flow.new_input("nums")
    nums.stream.unary(Busy).collect("out")
    nums.send(range(10))
    # (2 s, not 1: a heartbeat that a loaded machine delays by a second is no failure)
    results = flow.run(workers=2, backend="ray", heartbeat_timeout=2.0)
    assert sorted(results.records("out")) == list(range(10))


def test_a_run_that_cannot_finish_is_reported_as_a_stall() -> None:
    flow = Dataflow("hoard")
    nums = flow.new_input("nums")
    nums.stream.exchange(lambda x: x).unary(Hoarder).collect("out")
    nums.send(range(10))
    with pytest.raises(RuntimeError, match="stalled"):
        flow.run(workers=2, backend="ray", heartbeat_timeout=2.0)


ONLY_ON_THE_DRIVER = """
from timely import Vertex


class Echo(Vertex):
    def on_recv(self, input, records, time):
        self.send_by(0, records, time)
"""


def test_a_plan_the_workers_cannot_load_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vertex from a module the workers cannot import (on this driver's path only,
    added after Ray started): the start fails with the fix in the message, whether the
    plan went inside the start calls or through the object store. Caught: a worker's
    failure to unpickle a plan it was handed as bytes raised as Ray's wrapper."""
    (tmp_path / "timely_only_on_the_driver.py").write_text(ONLY_ON_THE_DRIVER)
    monkeypatch.syspath_prepend(str(tmp_path))
    import timely_only_on_the_driver as module

    for padding in (0, 100_000):  # inline, then through the object store
        flow = Dataflow("unloadable")
        nums = flow.new_input("nums")
        nums.stream.unary(module.Echo).select(lambda x, pad=b"x" * padding: x).collect("out")
        nums.send([1])
        with pytest.raises(ConfigError, match="could not load dataflow 'unloadable'"):
            flow.run(workers=2, backend="ray")


def test_a_large_plan_goes_through_the_object_store() -> None:
    """A plan pickled larger than ``_INLINE_PLAN`` is put once and each worker fetches it;
    a small one travels inside the start calls."""
    big = list(range(40_000))
    for values, inline in ((big, False), ([1], True)):
        flow = Dataflow("plan-size")
        nums = flow.new_input("nums")
        nums.stream.select(lambda x, v=values: x + len(v)).collect("out")
        session = flow.activate(workers=2, backend="ray")
        assert isinstance(session, RaySession)
        assert (session._plan_bytes is not None) == inline
        assert (session._plan_ref is None) == inline
        nums.send([1, 2])
        nums.close()
        assert sorted(session.join().records("out")) == [1 + len(values), 2 + len(values)]


def test_unknown_and_bad_options_fail_before_starting() -> None:
    flow = Dataflow("config")
    flow.new_input("nums").stream.collect("out")
    with pytest.raises(ConfigError, match="seed"):
        flow.run(workers=2, backend="ray", seed=3)
    with pytest.raises(ConfigError, match="max_inflight"):
        flow.run(workers=2, backend="ray", max_inflight=0)
    with pytest.raises(ConfigError, match="idle_timeout must be >= 0"):
        flow.run(workers=2, backend="ray", idle_timeout=-1)
    with pytest.raises(ConfigError, match="largest Ray node has 2 CPUs"):
        flow.run(workers=2, backend="ray", num_cpus_per_worker=64)
    with pytest.raises(ConfigError, match="need 3 CPUs but Ray has 2"):
        flow.run(workers=3, backend="ray", num_cpus_per_worker=1)


# -- warm actors between runs ------------------------------------------------------------------
def _activate_and_join(flow: Dataflow, **options: Any) -> tuple[RaySession, Any]:
    session = flow.activate(workers=2, backend="ray", **options)
    assert isinstance(session, RaySession)
    for handle in flow._inputs:
        handle.close()
    return session, session.join()


def test_a_clean_run_leaves_its_actors_reset_for_the_next_one() -> None:
    release_workers()
    data = lines_by_epoch(seed=11)
    expected = sorted(wordcount(data).run(workers=1, backend="inline")["counts"])
    first, got1 = _activate_and_join(wordcount(data))
    second, got2 = _activate_and_join(wordcount(data))
    assert (first.reused, second.reused) == (0, 2)
    assert sorted(second.pids) == sorted(first.pids)  # the same processes
    # The second run starts from nothing: state of the first (the counts) did not leak.
    assert sorted(got1["counts"]) == sorted(got2["counts"]) == expected
    assert len(POOL) == 2


def test_a_kept_actor_that_died_while_idle_is_replaced() -> None:
    """The run that ends does not wait for its actors' resets: the next run's take reads
    them. An actor killed while it waits in the pool (its reset done, or still under way)
    is replaced by a new one, and the run's results are right."""
    release_workers()
    data = lines_by_epoch(seed=12)
    expected = sorted(wordcount(data).run(workers=1, backend="inline")["counts"])
    first, _ = _activate_and_join(wordcount(data))
    assert len(POOL) == 2
    victim = POOL._idle[0]
    ray.kill(victim.actor, no_restart=True)
    while True:  # until this driver knows it died (else a call may still reach it)
        try:
            ray.get(victim.actor.left.remote(), timeout=30)
        except RayActorError:
            break
        time.sleep(0.01)
    dead = first.pids[first.actors.index(victim.actor)]
    second, got = _activate_and_join(wordcount(data))
    assert sorted(got["counts"]) == expected
    assert dead not in second.pids and second.cold_starts >= 1
    assert len(POOL) == 2


def _may_lower_niceness_to(nice: int) -> bool:
    """Whether this process may set a thread's niceness down to ``nice`` (root, or a
    ``RLIMIT_NICE`` that allows it); actors run as the same user."""
    if os.geteuid() == 0:
        return True
    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return bool(soft == resource.RLIM_INFINITY or 20 - soft <= nice)


def _process_niceness(pids: list[int]) -> list[int]:
    """Each process's niceness as Ray made it (its main thread's, from ``/proc``)."""
    return [int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[16]) for p in pids]


def _started_niceness() -> int:
    """The niceness this test process's Ray gives its worker processes: what the
    conftest's ``ray_local`` started it with."""
    return int(os.environ.get("RAY_worker_niceness", WORKER_NICENESS))  # noqa: SIM112


def test_workers_step_at_the_drivers_niceness_not_rays() -> None:
    """A timely worker's loop (its steps) runs at the driver's niceness, so that on a
    busy machine a Ray run is not starved by every process at 0, its own driver
    included, where an inline run is not; the process keeps the niceness Ray was told.
    Where the driver's niceness is the workers' processes' already (0 and 0, as the
    test fixture starts Ray), this run cannot tell whether the loop was given it: the
    next test, at 17, catches the driver's niceness not passed to ``start`` or not given
    to the loop's thread."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if not _may_lower_niceness_to(nice):
        pytest.skip("this user may not lower a niceness (no root, RLIMIT_NICE too low)")
    flow = wordcount(lines_by_epoch(seed=17))
    session = flow.activate(workers=2, backend="ray")
    assert isinstance(session, RaySession)
    stats = ray.get([a.stats.remote() for a in session.actors])
    rays = _process_niceness(session.pids)
    for handle in flow._inputs:
        handle.close()
    session.join()
    assert [s["nice"] for s in stats] == [nice, nice]
    # What the loop would have run at: what this process's Ray was started with.
    assert rays == [_started_niceness()] * 2


def test_a_local_ray_timely_starts_has_its_workers_at_niceness_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray starts worker processes at niceness 15, where a busy process at 0 beside a run
    takes the CPU from every thread of the workers (the loop's too, where the process may
    not lower a thread's niceness). A local Ray that timely starts passes Ray's
    ``worker_niceness`` as 0; a ``RAY_worker_niceness`` the user set is left to Ray. The
    real Ray of this test process was started with the same options: its worker
    processes run at 0. Caught: the option not passed by ``_connect``; the user's
    setting overridden."""
    import timely.backends.ray as ray_backend

    expected = _started_niceness()  # (read before the environment is changed below)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(ray_backend.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_backend.ray, "init", lambda **kw: seen.append(kw))
    assert ray_backend._connect(None) is True
    monkeypatch.setenv("RAY_worker_niceness", "5")
    ray_backend._connect(None)
    monkeypatch.undo()
    assert seen[0]["_system_config"] == {"worker_niceness": 0}
    assert "_system_config" not in seen[1]
    session, _ = _activate_and_join(wordcount(lines_by_epoch(seed=23)))
    assert _process_niceness(session.pids) == [expected, expected]


def test_workers_step_at_whatever_niceness_the_driver_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same with the driver's niceness read as 17, which any user may raise a
    thread to: this check runs without privileges, and cannot pass because the driver
    happens to sit at Ray's 15 already. The actors, left at 17, are killed after."""
    import timely.backends.ray as ray_backend

    monkeypatch.setattr(ray_backend, "_driver_niceness", lambda: 17)
    flow = wordcount(lines_by_epoch(seed=19))
    session = flow.activate(workers=2, backend="ray")
    try:
        assert isinstance(session, RaySession)
        stats = ray.get([a.stats.remote() for a in session.actors])
        for handle in flow._inputs:
            handle.close()
        session.join()
    finally:
        release_workers()
    assert [s["nice"] for s in stats] == [17, 17]


def test_a_session_start_asks_the_cluster_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start on warm actors reads the cluster's nodes once (each worker's CPU share,
    whether they fit, whether they talk over TCP), where it asked Ray three times.
    Caught: the TCP question asked again in ``_launch``."""
    _activate_and_join(wordcount(lines_by_epoch(seed=13)))  # the actors are warm
    calls: Counter[str] = Counter()
    for name in ("nodes", "cluster_resources"):
        real = getattr(ray, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(ray, name, counted)
    session, _ = _activate_and_join(wordcount(lines_by_epoch(seed=14)))
    assert session.reused == 2
    assert calls == {"nodes": 1}


def test_a_launch_starts_each_run_with_the_addresses_and_no_connect_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A launch on warm actors makes two calls per worker, ``start`` and a ``run`` given
    every worker's address, which connects (to the peers and the driver) before it
    steps: no ``connect`` call to wait for in between. The workers themselves say how
    they reached each other (``links``, asked once they are connected). Caught: the
    ``connect`` round trip put back."""
    _activate_and_join(wordcount(lines_by_epoch(seed=15)))  # the actors are warm
    calls: list[tuple[str, int]] = []
    real = ray.actor.ActorMethod.remote

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((self._method_name, len(args)))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ray.actor.ActorMethod, "remote", counted)
    data = lines_by_epoch(seed=16)
    expected = sorted(wordcount(data).run(workers=1, backend="inline")["counts"])
    flow = wordcount(data)
    session = flow.activate(workers=2, backend="ray")
    assert isinstance(session, RaySession) and session.reused == 2
    launch = [(name, n) for name, n in calls if name in ("start", "connect", "run")]
    assert launch == [("start", 13), ("start", 13), ("run", 1), ("run", 1)], launch
    assert session.links == [{1: "unix"}, {0: "unix"}]
    for handle in flow._inputs:
        handle.close()
    assert sorted(session.join()["counts"]) == expected
    assert "connect" not in {name for name, _ in calls}


def test_a_run_ends_once_every_last_report_is_in_without_waiting_for_its_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker sends its last report when its loop has nothing left that could fail, so
    the driver ends the run once every last report is in: it does not wait for the
    ``run`` calls to return through Ray (a round trip). The actors are kept, reset, and
    host the next run. Caught: the wait for the calls put back."""
    release_workers()  # (an earlier test's idle actors would be counted in the pool too)
    _activate_and_join(wordcount(lines_by_epoch(seed=17)))  # the actors are warm
    data = lines_by_epoch(seed=18)
    expected = sorted(wordcount(data).run(workers=1, backend="inline")["counts"])
    flow = wordcount(data)
    session = flow.activate(workers=2, backend="ray")
    assert isinstance(session, RaySession)
    runs = set(session._runs.values())
    late: list[Any] = []
    real = ray.wait

    def watched(refs: Any, *args: Any, **kwargs: Any) -> Any:
        if len(session._ended) == session.workers and runs & set(refs):
            late.append(refs)  # the run calls waited for after every last report
        return real(refs, *args, **kwargs)

    monkeypatch.setattr(ray, "wait", watched)
    for handle in flow._inputs:
        handle.close()
    assert sorted(session.join()["counts"]) == expected
    assert late == []
    assert session._clean and len(POOL) == 2
    _, got = _activate_and_join(wordcount(data))
    assert sorted(got["counts"]) == expected


def test_actors_of_a_failed_run_are_not_kept() -> None:
    release_workers()
    flow = Dataflow("fragile")
    nums = flow.new_input("nums")
    nums.stream.exchange(lambda x: x).unary(Fragile, name="fragile").collect("out")
    nums.send(range(20))
    with pytest.raises(UserFunctionError):
        flow.run(workers=2, backend="ray")
    assert len(POOL) == 0
    session, _ = _activate_and_join(wordcount(lines_by_epoch(seed=1)))
    assert session.reused == 0


def test_idle_actors_go_after_idle_timeout_or_at_once_with_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool's clock and timer are fakes here: with a real 0.2 s timer, a machine that
    stalls the driver for 0.2 s between the run's end and the count saw none kept."""
    clock, timers = Clock(), Timers()
    release_workers()
    monkeypatch.setattr(POOL, "_clock", clock)
    monkeypatch.setattr(POOL, "_make_timer", timers)
    try:
        _activate_and_join(wordcount(lines_by_epoch(seed=2)), idle_timeout=0)
        assert len(POOL) == 0 and not timers.live()
        _activate_and_join(wordcount(lines_by_epoch(seed=3)), idle_timeout=0.2)
        assert len(POOL) == 2
        [timer] = timers.live()
        assert timer.delay == pytest.approx(0.2)
        clock.now += 0.2
        timer.fire()  # the pool's timer kills them
        assert len(POOL) == 0 and not timers.live()
        session, _ = _activate_and_join(wordcount(lines_by_epoch(seed=4)))
        assert session.reused == 0
    finally:
        release_workers()  # (nothing kept with an expiry on the fake clock, nor its timer)


def test_a_run_of_another_shape_replaces_the_idle_actors() -> None:
    release_workers()
    _activate_and_join(wordcount(lines_by_epoch(seed=5)))
    assert len(POOL) == 2  # 2 x 1 CPU: all of this Ray's CPUs
    data = lines_by_epoch(seed=6)
    expected = sorted(wordcount(data).run(workers=1, backend="inline")["counts"])
    assert sorted(wordcount(data).run(workers=4, backend="ray")["counts"]) == expected
    assert len(POOL) == 4  # the 1-CPU actors were killed to make room for 4 x 0.5


# -- a cluster --------------------------------------------------------------------------------
CLUSTER_SCRIPT = textwrap.dedent(
    """
    import logging
    from collections import Counter

    import ray
    from ray.cluster_utils import Cluster

    from timely import Dataflow, Vertex, exchange


    class Split(Vertex):
        def on_recv(self, input, records, time):
            self.send_by(0, [w for line in records for w in line.split()], time)


    class Count(Vertex):
        def __init__(self):
            self.counts = {}

        def on_recv(self, input, records, time):
            c = self.counts.setdefault(time, Counter())
            if not c:
                self.notify_at(time)
            c.update(records)

        def on_notify(self, time):
            self.send_by(0, sorted(self.counts.pop(time).items()), time)


    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        flow = Dataflow("wc")
        lines = flow.new_input("lines")
        lines.stream.unary(Split).unary(Count, channel=exchange(lambda w: w)).collect("c")
        text = ["a b a", "c a b", "d"] * 50
        lines.send(text)
        session = flow.activate(workers=2, backend="ray", address=cluster.address)
        nodes = set(session.nodes)
        # Workers on two nodes talk over TCP, on each node's own IP, never a wildcard.
        assert session.links == [{1: "tcp"}, {0: "tcp"}], session.links
        for a in session.addresses:
            assert a.host == ray.util.get_node_ip_address() and a.port, session.addresses
        lines.close()
        results = session.join()
        expected = Counter(w for line in text for w in line.split())
        assert dict(results.records("c")) == dict(expected), results
        assert len(nodes) == 2, nodes  # one CPU per node, one worker per CPU
        print("CLUSTER OK", len(nodes))
    finally:
        ray.shutdown()
        cluster.shutdown()
    """
)


LOCAL_SCRIPT = textwrap.dedent(
    """
    import time

    import ray

    from timely import Dataflow, Vertex
    from timely.backends.ray_pool import release_workers


    class Double(Vertex):
        def on_recv(self, input, records, time):
            self.send_by(0, [2 * x for x in records], time)


    def run(workers):
        flow = Dataflow("local")
        nums = flow.new_input("nums")
        nums.stream.unary(Double).collect("out")
        nums.send(range(10))
        session = flow.activate(workers=workers)  # the default backend: ray
        nums.close()
        results = session.join()
        assert sorted(results.records("out")) == [2 * x for x in range(10)], results
        return session


    assert not ray.is_initialized()
    assert run(2).started_ray  # no Ray yet: the session starts a local one
    assert not run(3).started_ray  # and the next session reuses it
    total = ray.cluster_resources()["CPU"]
    assert ray.available_resources().get("CPU", 0) < total  # 3 actors kept for the next run
    assert release_workers() == 3
    while ray.available_resources().get("CPU", 0) < total:  # the actors were killed
        time.sleep(0.05)  # Ray frees them when they are gone; the run's timeout bounds it
    print("LOCAL OK")
    """
)


def run_script(tmp_path: Path, name: str, text: str) -> str:
    """Run ``text`` as a script in a fresh interpreter (with a Ray of its own)."""
    script = tmp_path / name
    script.write_text(text)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.ci
def test_starts_local_ray_when_none_runs_and_reuses_it(tmp_path: Path) -> None:
    """In CI's profile: a script of its own lets ``run()`` start Ray from nothing (10 s).
    The quick profile's Ray tests share the Ray their process's fixture started."""
    assert "LOCAL OK" in run_script(tmp_path, "local_run.py", LOCAL_SCRIPT)


@pytest.mark.ci
def test_two_node_cluster_in_a_subprocess(tmp_path: Path) -> None:
    """Two Ray nodes in one machine (a cluster started by the script): workers on both,
    connected over TCP. In CI's profile: it starts a cluster of its own (8 s)."""
    assert "CLUSTER OK 2" in run_script(tmp_path, "cluster_run.py", CLUSTER_SCRIPT)
