"""Source partitions handed over live (issue 29): a reconfigurable run over a source grows
and shrinks while its sources are read.

The driver keeps the control input a few epochs past what the sources read, and the
sources read nothing at or past it; a change of workers takes effect at the control
input's epoch ``T``. Each partition that moves is read by its old owner up to its first
batch at ``T`` or later, then handed over: the owner counts a capability at ``T`` for the
new owner in a step of its own, and the new owner reads on from that batch. A leaver
goes only once its partitions have gone. Random plans, partition counts and delivery
orders: the outputs equal a one-worker run's, epoch by epoch, every change live.
"""

from __future__ import annotations

import functools
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
import timely.worker.loop
from tests.checkpoint.pipelines import EpochSource
from tests.checkpoint.sweep import SCRATCH
from tests.conftest import exhaustive
from tests.runtime.test_live_rescale import recorder
from tests.runtime.test_migration import ON_DISK, PIPELINES
from timely import Dataflow
from timely.comm.messages import Advance, Send
from timely.graph.system import SourceVertex

# Live changes in LIVE_STEPS configurations, as the fluid steps are meant to be tested.
pytestmark = pytest.mark.usefixtures("eight_live_steps")

Plan = dict[int, int]
"""Before the driver's ``i``-th poll, rescale to ``plan[i]`` workers."""


def run(
    pipeline: str,
    epochs: list[list[int]],
    parts: int,
    workers: int,
    plan: Plan | None = None,
    seed: int = 1,
    stats: dict[str, int] | None = None,
    backend: str = "inline",
    **options: Any,
) -> tuple[dict[int, list[Any]], list[dict[str, Any]]]:
    """The output by epoch and the rescales of a run over ``EpochSource(epochs, parts)``;
    the driver polls between changes (each poll lets the sources read a few epochs on)."""
    flow = Dataflow(f"live-src-{pipeline}")
    out: dict[int, list[Any]] = {}
    PIPELINES[pipeline](flow.source(EpochSource(epochs, parts))).subscribe(recorder(out))
    if backend == "inline":
        options["seed"] = seed
    with flow.activate(workers=workers, backend=backend, reconfigurable=True, **options) as session:
        for i in range(max(plan or {}, default=-1) + 1):
            if plan and i in plan:
                session.rescale(plan[i])
                while backend == "ray" and session.rescale_pending() is not None:
                    session.poll(0.05)  # (a change asked for meanwhile would wait for it)
            session.poll(0.05 if backend == "ray" else 0.0)
        session.join()
    if stats is not None:
        stats |= {"events": getattr(session, "events", 0), "restarts": session.restarts}
    return out, session.rescales


epoch_data = st.lists(st.lists(st.integers(0, 22), max_size=6), min_size=6, max_size=30)
scale_plans = st.dictionaries(st.integers(0, 7), st.integers(1, 4), min_size=1, max_size=4)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(PIPELINES)),
    epoch_data,
    st.integers(1, 5),
    st.integers(1, 3),
    st.integers(0, 10_000),
    scale_plans,
)
def test_sources_handed_over_live_leave_every_epoch_as_without_them(
    pipeline: str, epochs: list[list[int]], parts: int, workers: int, seed: int, plan: Plan
) -> None:
    want, _ = run(pipeline, epochs, parts, 1)
    got, rescales = run(pipeline, epochs, parts, workers, plan, seed)
    assert got == want
    assert all(r["path"] == "live" for r in rescales)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ON_DISK), epoch_data, st.integers(1, 5), scale_plans)
def test_sources_handed_over_live_with_state_on_disk(
    pipeline: str, epochs: list[list[int]], parts: int, plan: Plan
) -> None:
    want, _ = run(pipeline, epochs, parts, 1)
    disk = {"state_backend": "disk", "state_dir": SCRATCH, "state_cache": 1}
    assert run(pipeline, epochs, parts, 2, plan, **disk)[0] == want


EPOCHS = [[(e * 7 + i * 5) % 23 for i in range(6)] for e in range(80)]
PLAN: Plan = {1: 2, 2: 3, 4: 1, 5: 4, 7: 2}


def test_partitions_move_mid_stream_and_joiners_read_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: partitions are handed over before their end, and workers that joined
    read batches of them."""
    moved: list[bool] = []
    read_by: dict[int, int] = {}
    adopt, read_one = SourceVertex.adopt, SourceVertex._read_one

    def adopting(self: SourceVertex, partitions: dict[int, list[Any]], caps: Any) -> None:
        moved.extend(not state[2] for state in partitions.values())
        adopt(self, partitions, caps)

    def reading(self: SourceVertex) -> int:
        n = read_one(self)
        read_by[self.worker] = read_by.get(self.worker, 0) + max(0, n)
        return n

    monkeypatch.setattr(SourceVertex, "adopt", adopting)
    monkeypatch.setattr(SourceVertex, "_read_one", reading)
    want, _ = run("running_reduce", EPOCHS, 4, 1)
    got, rescales = run("running_reduce", EPOCHS, 4, 1, PLAN)
    assert got == want and [r["path"] for r in rescales] == ["live"] * len(PLAN)
    assert any(moved), "every partition handed over was read to its end already"
    assert read_by.get(2, 0) > 0 and read_by.get(3, 0) > 0  # workers 2 and 3 joined


def crashed(n: int, every: int, d: str, plan: Plan = PLAN) -> tuple[Any, dict[str, int]]:
    stats: dict[str, int] = {}
    options = {"checkpoint": d, "checkpoint_every": every, "max_restarts": 3}
    got = run("running_reduce", EPOCHS, 4, 1, plan, 3, stats, crash_at=(n,), **options)
    return got, stats


SHARDS = 4 if exhaustive() else 1
"""CI's sweep (one event in 5) runs as this many tests, each a residue of the events it
crashes at: one test of it took minutes, as long as the rest of a process's share, and a
loaded machine pushed it past pytest-timeout's bound."""


@functools.cache
def events(every: int) -> int:
    """The scheduling events of a failure-free run with checkpoints every ``every``
    epochs (once per process: every shard sweeps the same run)."""
    stats: dict[str, int] = {}
    with tempfile.TemporaryDirectory(dir=SCRATCH) as d:
        options = {"checkpoint": d, "checkpoint_every": every}
        run("running_reduce", EPOCHS, 4, 1, PLAN, 3, stats, **options)
    return stats["events"]


def crash_points(every: int, shard: int = 0) -> range:
    """Shard ``shard`` of the events a sweep crashes at: one in 5 in CI's profile (split
    over :data:`SHARDS` tests), one in 97 in the quick one."""
    step = 5 if exhaustive() else 97
    return range(1 + step * shard, events(every), step * SHARDS)


@pytest.mark.parametrize("shard", range(SHARDS))
def test_a_crash_around_handovers_gives_the_failure_free_outputs(shard: int) -> None:
    """Checkpoints every other epoch while partitions move; every worker is lost at a
    scheduling event (one in 97 in the quick profile, one in 5 in CI's): the run
    restores (each partition read from the offset its checkpoint names, on the workers
    of the restore), goes on live, and its outputs equal a failure-free run's."""
    want, _ = run("running_reduce", EPOCHS, 4, 1)
    restarted = 0
    for n in crash_points(2, shard):
        with tempfile.TemporaryDirectory(dir=SCRATCH) as d:
            (got, rescales), stats = crashed(n, 2, d)
        assert got == want, f"crash at event {n}"
        assert all(r["path"] == "live" for r in rescales)
        restarted += stats["restarts"]
    assert restarted > 0


# -- mutation checks -----------------------------------------------------------------------


class _Worker:
    index = 0
    checkpointing = True

    def members_at(self, epoch: int) -> tuple[int, ...]:
        return (0, 1)


class _Context:
    worker = _Worker()


@pytest.mark.parametrize("forgets", [False, True])
def test_an_old_owner_names_what_it_handed_over_in_the_checkpoints_before(
    forgets: bool,
) -> None:
    """Worker 0 reads partition 1 to epoch 5 and hands it over at 6. Its checkpoints at
    epochs before 6 name the partition: at 3, from its first batch after 3 (the
    partition's new owner, if it snapshots 3 before it holds the partition, names
    nothing); at 5, from the batch the new owner reads first. At 6 and later the new
    owner names it. The mutant forgets it at the handover: a restore from 3 or 5 reads
    it again from its start."""
    vertex = SourceVertex(EpochSource([[e, e] for e in range(12)], parts=2))
    vertex._ctx = _Context()  # type: ignore[assignment]
    vertex.start_empty()
    vertex.adopt({1: [None, 0, False, [], None]}, [])
    for _ in range(6):  # epochs 0..5 of partition 1 (no capability: nothing is sent)
        got = vertex.source.read(1, vertex.offsets[1])
        assert got is not None
        epoch, _, nxt = got
        vertex.history[1].append((epoch, vertex.offsets[1]))
        vertex.offsets[1], vertex.epochs[1] = nxt, epoch
    vertex.release_at([1], 6)
    vertex.ready.add(1)  # its next batch is at 6
    handed = vertex.release([1])
    assert handed[1][:3] == [6, 6, False]
    if forgets:
        vertex.released.clear()
    named = {e: vertex.snapshot_at(e)["partitions"].get(1) for e in (3, 5, 6)}
    if forgets:
        assert named[3] is None and named[5] is None
    else:
        assert named == {3: [4, 4, False], 5: [6, 6, False], 6: None}


def test_mutation_a_leaver_that_goes_before_handing_over_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A leaver goes once it holds nothing, whether or not its partitions have gone."""
    can_leave = timely.worker.loop.Worker.can_leave

    def going(self: timely.worker.loop.Worker, epoch: int) -> bool:
        handing, self._handing = self._handing, {}
        try:
            return can_leave(self, epoch)
        finally:
            self._handing = handing

    monkeypatch.setattr(timely.worker.loop.Worker, "can_leave", going)
    # (a leaver reading a partition holds a capability until it hands it over: one read
    # to its end holds nothing, and is what goes missing)
    plan, epochs = {1: 3, 3: 1, 4: 3, 6: 1, 7: 3}, EPOCHS[:24]
    want, _ = run("running_reduce", epochs, 4, 1)
    for seed in range(30):
        try:
            got, _ = run("running_reduce", epochs, 4, 1, plan, seed)
        except Exception:
            return  # caught: a partition the driver deals is nowhere
        if got != want:
            return
    pytest.fail("a leaver that went before handing over went unnoticed in 30 schedules")


# A new owner that does not wait for the mint: tests/progress/test_membership.py
# (test_an_adopters_drop_waits_for_the_batch_that_minted_it), the schedule written out.


# -- on Ray ----------------------------------------------------------------------------------


@pytest.mark.ci  # 13 s on Ray; the quick profile keeps the inline handovers
@pytest.mark.usefixtures("ray_local")
def test_on_ray_sources_handed_over_live() -> None:
    """1 -> 2 -> 3 -> 1 -> 2 workers while a source is read, on Ray: every change live,
    the outputs those of one inline worker."""
    epochs = EPOCHS * 3
    want, _ = run("running_reduce", epochs, 4, 1)
    got, rescales = run(
        "running_reduce", epochs, 4, 1, {1: 2, 3: 3, 6: 1, 8: 2}, backend="ray", idle_timeout=0
    )
    assert got == want
    assert [(r["from"], r["to"], r["path"]) for r in rescales] == [
        (1, 2, "live"),
        (2, 3, "live"),
        (3, 1, "live"),
        (1, 2, "live"),
    ]


def over_a_source(name: str) -> tuple[Dataflow, dict[int, list[Any]], dict[int, list[Any]]]:
    """A running reduce over a 4-partition source of 12 epochs: the flow, where its
    outputs are recorded, and the outputs of a plain run of it."""
    epochs = EPOCHS[:12]
    want, _ = run("running_reduce", epochs, 4, 1)
    flow = Dataflow(name)
    out: dict[int, list[Any]] = {}
    PIPELINES["running_reduce"](flow.source(EpochSource(epochs, 4))).subscribe(recorder(out))
    return flow, out, want


def test_the_control_input_stays_open_while_a_change_sends_its_configurations() -> None:
    """On Ray, a command that waits for a credit runs the driver's checks, and a check
    moves the control input after the sources: once ``join`` waits and every source is
    read, it closes it. A live change sends its configurations one command each (fluid):
    a check between two of them must not close the control input, else a worker gets a
    configuration after its close and the run fails ("got Send ... after it was closed",
    seen in ``bench_autoscale``'s source-live runs). Here the check runs after every
    command to the control input, as if each waited, saying every source is read."""
    flow, out, want = over_a_source("live-src-closing")
    closes: list[bool] = []
    with flow.activate(workers=1, backend="inline", reconfigurable=True, seed=1) as session:
        send = session._send_command
        control = session.plan.control

        def checked(vertex: int, cmd: Any) -> None:
            send(vertex, cmd)
            if vertex == control and isinstance(cmd, Send):
                session._joining = True  # join() waits, and every source is read:
                session._follow_sources(session._control_epoch, True)
                closes.append(session._control_closed)

        session._send_command = checked  # type: ignore[method-assign]
        session.rescale(2)
        session._send_command = send  # type: ignore[method-assign]
        session.join()
    assert len(closes) > 1, "the change sent its configurations in one command"
    assert not any(closes)  # not closed mid-change
    assert out == want
    assert [r["path"] for r in session.rescales] == ["live"]


def test_a_change_asked_for_meanwhile_waits_for_the_control_inputs_move() -> None:
    """A live change asked for from another thread (the autoscaler's) is made on the
    driver's thread at its next input command or loop check. Not inside the command that
    moves the control input on: the driver has counted the new epoch, the workers have
    not got it, and a change made there took effect at an epoch the workers' control
    input was not at (on Ray a join then waited for ever, seen in ``bench_autoscale``'s
    source-live runs). Here the change is asked for right before the driver moves the
    control input after the sources; when it is made, the workers have every move."""
    flow, out, want = over_a_source("live-src-deferred")
    sent: list[int] = [0]
    seen: list[tuple[int, int]] = []
    with flow.activate(workers=1, backend="inline", reconfigurable=True, seed=1) as session:
        control = session.plan.control
        send, control_to, change = (
            session._send_command,
            session._control_to,
            session._change_live,
        )

        def sending(vertex: int, cmd: Any) -> None:
            if vertex == control and isinstance(cmd, Advance):
                sent.append(cmd.epoch)
            send(vertex, cmd)

        def moving(epoch: int) -> None:
            if not session.rescales and session._live_deferred is None:
                session._live_deferred = 2  # the autoscaler's thread asks, just now
            control_to(epoch)

        def changing(workers: int) -> None:
            seen.append((session._control_epoch, max(sent)))
            change(workers)

        session._send_command = sending  # type: ignore[method-assign]
        session._control_to = moving  # type: ignore[method-assign]
        session._change_live = changing  # type: ignore[method-assign]
        session.join()
    assert seen, "no change was made"
    assert all(counted == got for counted, got in seen), seen
    assert out == want
    assert [r["path"] for r in session.rescales] == ["live"]


def test_a_change_is_not_made_by_a_check_while_a_command_waits() -> None:
    """On Ray a command that waits for a credit runs the driver's loop check before its
    frame goes out, and the check makes a change asked for from another thread. Made
    there, inside a command to the control input, the change started at the epoch the
    driver had counted while the workers' control input was still before it: a joiner
    then missed the first configuration and got bins at an epoch it did not expect
    (``KeyError`` in the migration on Ray, under load). Here every control command runs
    the check before it is sent, with a change asked for: the change waits for a check
    outside any command, where the workers have every move."""
    flow, out, want = over_a_source("live-src-credit")
    sent: list[int] = [0]
    seen: list[tuple[int, int]] = []
    with flow.activate(workers=1, backend="inline", reconfigurable=True, seed=1) as session:
        control = session.plan.control
        send, change = session._send_command, session._change_live

        def waiting(vertex: int, cmd: Any) -> None:
            if vertex == control and isinstance(cmd, Advance):
                if not session.rescales and session._live_deferred is None:
                    session._live_deferred = 2  # the autoscaler's thread asks, just now
                session._apply_live()  # the check a credit wait makes, frame not yet out
                sent.append(cmd.epoch)
            send(vertex, cmd)

        def changing(workers: int) -> None:
            seen.append((session._control_epoch, max(sent)))
            change(workers)

        session._send_command = waiting  # type: ignore[method-assign]
        session._change_live = changing  # type: ignore[method-assign]
        session.join()
    assert seen, "no change was made"
    assert all(counted == got for counted, got in seen), seen
    assert out == want
    assert [r["path"] for r in session.rescales] == ["live"]


def test_the_control_input_holds_still_while_a_change_joins_a_worker() -> None:
    """On Ray the driver's checks run while a change waits for its joiner (the actor's
    start, the handshake), and a check moves the control input after the sources. A
    move there took the donor's control input past the epoch the change had read, and
    minting the joiner's capabilities at it failed ("worker 0 holds no capability of
    'reconfigure' at or before (6,)", seen in CI). Here a check runs inside the join,
    with the sources far ahead: the control input does not move until the change is
    made."""
    flow, out, want = over_a_source("live-src-joining")
    moved: list[int] = []
    with flow.activate(workers=1, backend="inline", reconfigurable=True, seed=1) as session:
        join = session._join_worker

        def joining(worker: int, epoch: int) -> None:
            before = session._control_epoch
            session._follow_sources(before + 5, False)  # a check while the joiner starts
            moved.append(session._control_epoch - before)
            join(worker, epoch)

        session._join_worker = joining  # type: ignore[method-assign]
        session.rescale(2)
        session._join_worker = join  # type: ignore[method-assign]
        session.join()
    assert moved == [0]
    assert out == want
    assert [r["path"] for r in session.rescales] == ["live"]
