"""Megaphone's live migration: outputs equal the run without it, epoch by epoch.

Random dataflows with every stateful operator, random inputs, 1-4 workers, random
delivery orders (the inline scheduler's seed) and random migration plans: bins moved
all at once or a few per epoch, moved twice, moved back, moved while windows are open.
The mutation checks put back the two mistakes the protocol exists to avoid (shipping a
bin before the frontier has passed the configuration's epoch, routing by a new table
before its epoch) and show that the property catches each.
"""

from __future__ import annotations

import contextlib
import operator
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
import timely.routing.bins
import timely.state.keyed
import timely.worker.migration
from tests.checkpoint import pipelines
from tests.checkpoint.pipelines import EpochSource, build
from tests.checkpoint.sweep import SCRATCH
from tests.conftest import crash_points
from timely import ConfigError, Dataflow, Stream, TimelyError
from timely.routing.bins import Routing, balance, drain, move, resolve, steps


def _update(key: Any, pair: Any, state: int) -> tuple[int, list[Any]]:
    return state + pair[1], [(key, state + pair[1])]


PIPELINES: dict[str, Callable[[Stream], Stream]] = {
    "count_by": lambda s: s.count_by(lambda x: x % 5),
    "group_by": lambda s: s.group_by(lambda x: x % 4, lambda k, xs: [(k, sorted(xs))]),
    "min_by": lambda s: s.min_by(lambda x: x % 3, lambda x: -x),
    "distinct": lambda s: s.distinct(),
    "running_reduce": lambda s: s.running_reduce(lambda x: x % 4, operator.add),
    "map_with_state": lambda s: s.count_by(lambda x: x % 3).map_with_state(
        lambda pair: pair[0], lambda: 0, _update, timeout=2
    ),
    "sliding_inverse": lambda s: s.reduce_by_window(
        lambda x: x % 3, operator.add, 3, 1, inverse=operator.sub
    ),
    "tumbling": lambda s: s.reduce_by_window(lambda x: x % 6, operator.add, 3),
    "window_count": lambda s: s.window(2).count_by(lambda x: x % 2),
    "join": lambda s: s.join(s.select(lambda x: (x % 5, x)), lambda x: x % 5, lambda p: p[0]),
    "join_streaming": lambda s: s.join_streaming(
        s.select(lambda x: x + 1), lambda x: x % 4, lambda y: y % 4
    ),
    "table_running": pipelines.table_running,
    "table_joined": pipelines.table_joined,
    "table_windowed": pipelines.table_windowed,
    "join_within": lambda s: s.join_streaming(
        s.select(lambda x: x * 2), lambda x: x % 3, lambda y: y % 3, within=2
    ),
}


def run(
    pipeline: str,
    epochs: list[list[int]],
    workers: int,
    seed: int,
    source: bool = False,
    **options: Any,
) -> dict[int, list[Any]]:
    """A run fed by a source (which may run ahead of the configurations) or by a bursty
    driver (every epoch queued before the workers start); the output by epoch."""
    flow, out = build(pipeline, epochs, source, builders=PIPELINES, close=True, name="migrate")
    flow.activate(workers=workers, backend="inline", seed=seed, **options).join()
    return out


epoch_data = st.lists(st.lists(st.integers(0, 22), max_size=8), min_size=3, max_size=9)


@st.composite
def plans(draw: st.DrawFn, workers: int, bins: int, epochs: int) -> list[tuple[Any, ...]]:
    """Configurations at increasing epochs, each moving some bins (all at once, or one or
    two per epoch); bins may move twice and move back."""
    plan: list[tuple[Any, ...]] = []
    epoch = draw(st.integers(0, 2))
    for _ in range(draw(st.integers(1, 3))):
        moves = draw(
            st.dictionaries(st.integers(0, bins - 1), st.integers(0, workers - 1), min_size=1)
        )
        per_step = draw(st.sampled_from([None, 1, 2]))
        plan.append((epoch, moves) if per_step is None else (epoch, moves, per_step))
        epoch += (len(moves) if per_step else 1) + draw(st.integers(0, 2))
        if epoch > epochs + 2:
            break
    return plan


Case = tuple[str, list[list[int]], int, int, int, bool, list[tuple[Any, ...]]]
"""pipeline, epochs, workers, bins, seed, fed by a source, plan"""


@st.composite
def cases(draw: st.DrawFn) -> Case:
    pipeline = draw(st.sampled_from(sorted(PIPELINES)))
    epochs = draw(epoch_data)
    workers = draw(st.integers(1, 4))
    bins = draw(st.sampled_from([2, 4, 8, 256]))
    seed = draw(st.integers(0, 10_000))
    source = draw(st.booleans())
    return pipeline, epochs, workers, bins, seed, source, draw(plans(workers, bins, len(epochs)))


def differs(case: Case) -> bool:
    pipeline, epochs, workers, bins, seed, source, plan = case
    expected = run(pipeline, epochs, workers, seed, source)
    return run(pipeline, epochs, workers, seed, source, bins=bins, reconfigure=plan) != expected


def caught(case: Case) -> bool:
    """A broken variant is caught when the outputs differ or the run fails (a bin
    installed where its keys already are)."""
    try:
        return differs(case)
    except TimelyError:
        return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_migration_leaves_every_epoch_as_without_it(case: Case) -> None:
    assert not differs(case)


ON_DISK = ["running_reduce", "map_with_state", "join_streaming", "join_within"]
"""The pipelines whose tables the disk backend holds."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from(ON_DISK))
def test_migration_on_disk_leaves_every_epoch_as_without_it(case: Case, pipeline: str) -> None:
    """The same with the state on disk, written back after every activation: bins leave
    a worker's store as ranges of it and arrive in another's (``DiskTable.take_bins``)."""
    _, epochs, workers, bins, seed, source, plan = case
    expected = run(pipeline, epochs, workers, seed, source)
    disk = {"state_backend": "disk", "state_dir": SCRATCH, "state_cache": 1}
    assert run(pipeline, epochs, workers, seed, source, bins=bins, reconfigure=plan, **disk) == (
        expected
    )


@pytest.mark.parametrize("pipeline", ON_DISK)
def test_a_migration_on_disk_takes_its_bins_out_of_the_store(
    monkeypatch: pytest.MonkeyPatch, pipeline: str
) -> None:
    """Not vacuous: the bins leave as ranges of the store, keys and all."""
    import timely.state.disk

    taken: list[int] = []
    take = timely.state.disk.DiskTable.take_bins

    def counted(self: Any, bins: Any) -> Any:
        out = take(self, bins)
        taken.append(len(out[0]))
        return out

    monkeypatch.setattr(timely.state.disk.DiskTable, "take_bins", counted)
    epochs = [[i * 3 + j for j in range(8)] for i in range(8)]
    plan = [(2, {b: 1 - b // 4 for b in range(8)}, 2)]
    expected = run(pipeline, epochs, 2, 1)
    got = run(pipeline, epochs, 2, 1, bins=8, reconfigure=plan, state_backend="disk")
    assert got == expected
    assert sum(taken) > 0


def test_every_pipeline_really_moves_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property is not vacuous: for every operator, a plan that moves every bin
    twice ships keys, and the outputs still match."""
    shipped: dict[str, int] = {}
    take = timely.worker.migration.Migration.take_shipped
    current = [""]

    def spy(self: timely.worker.migration.Migration) -> Any:
        out = take(self)
        for shipments in out.values():
            for _, _, _, tables in shipments:
                keys = sum(_moved(t) for t in tables.values())
                shipped[current[0]] = shipped.get(current[0], 0) + keys
        return out

    monkeypatch.setattr(timely.worker.migration.Migration, "take_shipped", spy)
    epochs = [[(e * 7 + i * 5) % 23 for i in range(6)] for e in range(8)]
    plan = [(2, move(range(8), 1)), (4, move(range(8), 0), 3)]
    for pipeline in PIPELINES:
        current[0] = pipeline
        assert run(pipeline, epochs, 2, 3, bins=8, reconfigure=plan) == run(
            pipeline, epochs, 2, 3
        ), pipeline
    carried = {"running_reduce", "map_with_state", "sliding_inverse", "tumbling"}
    carried |= {"join_streaming", "join_within", "table_running", "table_windowed"}
    carried |= {"table_joined"}
    assert {p for p in carried if shipped.get(p, 0) == 0} == set()


def _moved(table: dict[str, Any]) -> int:
    """How many keys a table taken out for a migration holds (rows of a columnar one)."""
    if table.get("columnar"):
        return sum(rows.num_rows for _, rows in table["times"])
    return sum(len(keys) for _, keys, _ in table["times"])


# -- mutation checks -------------------------------------------------------------------------

MUTATION_CASES: list[Case] = [
    (pipeline, [[(e * 7 + i * 5) % 23 for i in range(6)] for e in range(8)], 3, 8, seed, src, plan)
    for pipeline in ("running_reduce", "sliding_inverse", "join_streaming")
    for seed in range(3)
    for src in (False, True)
    for plan in ([(3, move(range(8), 2))], [(2, drain(0), 1)])
]
"""Sources run ahead of the configurations (a worker may route epochs past one it has not
received yet); bursty drivers send every configuration before any data."""


def test_the_mutation_cases_pass_as_built() -> None:
    assert not any(differs(case) for case in MUTATION_CASES)


def test_mutation_shipping_before_the_frontier_passed_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old owner ships a bin as soon as the configuration is active, while records
    of earlier epochs may still reach it: they change a state that has left."""
    monkeypatch.setattr(timely.worker.migration.Migration, "ready", lambda self, v, epoch: True)
    assert any(caught(case) for case in MUTATION_CASES)


def test_mutation_routing_by_the_new_table_too_early_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The epoch before a configuration is routed by its table: the new owner handles
    it before the old owner's state has come."""
    array_at = Routing.array_at
    monkeypatch.setattr(Routing, "array_at", lambda self, epoch: array_at(self, epoch + 1))
    assert any(caught(case) for case in MUTATION_CASES)


def test_mutation_routing_before_the_configuration_is_known_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker routes a batch without waiting for the configurations up to its epoch
    (a source ahead of them): the batch goes by an old table to a worker that gave the
    bin away."""
    monkeypatch.setattr(
        timely.worker.migration.Migration, "must_hold", lambda self, edge, time: False
    )
    assert any(caught(case) for case in MUTATION_CASES)


# -- a streaming session ---------------------------------------------------------------------


def streaming(workers: int, backend: str, moves: list[tuple[int, Any, str]]) -> Any:
    """Word counts per epoch and running, fed epoch by epoch, reconfigured between sends."""
    flow = Dataflow("reconfigure")
    handle = flow.new_input("words")
    handle.stream.running_reduce(lambda w: w, operator.add, value=lambda w: 1).collect("running")
    handle.stream.count_by(lambda w: w).collect("counts")
    words = [f"w{i % 41}" for i in range(600)]
    asked: list[list[int]] = []
    with flow.activate(workers=workers, backend=backend, reconfigurable=True) as session:
        for e in range(10):
            handle.send(words[e * 60 : e * 60 + 30])
            for at, assignment, strategy in moves:
                if at == e:
                    asked.append(session.reconfigure(assignment, strategy=strategy))
            handle.send(words[e * 60 + 30 : (e + 1) * 60])
            handle.advance_to(e + 1)
        handle.close()
        results = session.join()
    return sorted(results["running"]), sorted(results["counts"]), asked, session.migrations


MOVES = [(2, move(range(0, 256, 2), 0), "fluid"), (5, drain(0), "all-at-once")]


def test_a_streaming_session_reconfigures_between_sends() -> None:
    running, counts, asked, migrations = streaming(3, "inline", MOVES)
    base_running, base_counts, _, _ = streaming(3, "inline", [])
    assert (running, counts) == (base_running, base_counts)
    # Fluid: 8 bins an epoch from the next epoch on; all at once: one epoch.
    assert asked[0] == list(range(3, 3 + len(asked[0]))) and len(asked[0]) > 1
    assert len(asked[1]) == 1 and asked[1][0] > asked[0][-1]
    assert [m["strategy"] for m in migrations] == ["fluid", "all-at-once"]


def test_mutation_routing_early_in_a_streaming_session_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = streaming(3, "inline", [])[:2]
    monkeypatch.setattr(Routing, "array_at", lambda self, epoch: self.arrays[-1])
    with contextlib.suppress(TimelyError):  # caught too: a bin installed twice
        assert streaming(3, "inline", MOVES)[:2] != base


@pytest.mark.usefixtures("ray_local")
def test_on_ray_a_session_migrates_fluidly_and_all_at_once() -> None:
    running, counts, asked, _ = streaming(2, "ray", MOVES)
    base_running, base_counts, _, _ = streaming(2, "inline", [])
    assert (running, counts) == (base_running, base_counts)
    assert len(asked) == 2


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("pipeline", ["sliding_inverse", "join_streaming", "map_with_state"])
def test_on_ray_a_batch_run_migrates_with_a_schedule(pipeline: str) -> None:
    epochs = [[(e * 7 + i * 5) % 23 for i in range(6)] for e in range(8)]
    plan = [(2, move(range(8), 1)), (4, move(range(8), 0), 3)]
    flow = Dataflow(f"ray-{pipeline}")
    handle = flow.new_input()
    PIPELINES[pipeline](handle.stream).collect("out")
    for e, records in enumerate(epochs):
        handle.advance_to(e)
        handle.send(records)
    got = flow.run(workers=2, backend="ray", bins=8, reconfigure=plan)["out"]
    assert sorted(got, key=repr) == sorted(
        ((e, r) for e, rs in run(pipeline, epochs, 2, 0).items() for r in rs), key=repr
    )


# -- the routing table's plans ---------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=40),
    st.dictionaries(st.integers(0, 39), st.integers(0, 3)),
    st.one_of(st.none(), st.integers(1, 5)),
)
def test_steps_move_each_bin_once_and_end_at_the_target(
    current: list[int], moves: dict[int, int], per_step: int | None
) -> None:
    moves = {b: w for b, w in moves.items() if b < len(current)}
    new = resolve(moves, tuple(current), 4)
    path = steps(tuple(current), new, per_step)
    if new == tuple(current):
        assert path == []
        return
    assert path[-1] == new
    before = tuple(current)
    for table in path:
        changed = [b for b in range(len(table)) if table[b] != before[b]]
        assert changed and (per_step is None or len(changed) <= per_step)
        assert all(table[b] == new[b] for b in changed)
        before = table


def test_drain_empties_a_worker_and_move_names_bins() -> None:
    table = timely.routing.bins.default_table(12, 3)
    drained = resolve(drain(1), table, 3)
    assert 1 not in drained and sorted(set(drained)) == [0, 2]
    assert resolve(move([0, 1], 2), table, 3)[:2] == (2, 2)


def test_bad_configuration_fails_before_anything_starts() -> None:
    flow = Dataflow("bad")
    flow.new_input().stream.count_by(lambda x: x).collect("c")
    with pytest.raises(ConfigError, match="bins must be an int"):
        flow.run(workers=2, backend="inline", bins=0)
    with pytest.raises(ConfigError, match=r"this run has 0\.\.1"):
        flow.run(workers=2, backend="inline", reconfigure=[(1, {0: 5})])
    with pytest.raises(ConfigError, match="increasing order"):
        flow.run(workers=2, backend="inline", reconfigure=[(3, {0: 1}), (2, {0: 0})])
    with pytest.raises(ConfigError, match="bin 999 does not exist"):
        flow.run(workers=2, backend="inline", reconfigure=[(1, {999: 0})])
    sourced = Dataflow("sourced")  # its control input follows the source (no error)
    sourced.source(EpochSource([[1, 2], [3]])).count_by(lambda x: x).collect("c")
    plain = sourced.run(workers=2, backend="inline")["c"]
    assert sorted(sourced.run(workers=2, backend="inline", reconfigurable=True)["c"]) == sorted(
        plain
    )
    with (
        flow.activate(workers=2, backend="inline") as session,
        pytest.raises(ConfigError, match="reconfigurable=True"),
    ):
        session.reconfigure({0: 1})
    with flow.activate(workers=2, backend="inline", reconfigurable=True) as session:
        with pytest.raises(ConfigError, match="strategy must be"):
            session.reconfigure({0: 1}, strategy="slowly")
        with pytest.raises(ConfigError, match="bins_per_step"):
            session.reconfigure({0: 1}, bins_per_step=0)
        assert session.reconfigure({0: 0}) == []  # bin 0 is on worker 0 already


# -- checkpoints and failures ----------------------------------------------------------------

SWEPT = ["running_reduce", "sliding_inverse", "join_within", "map_with_state"]


@pytest.mark.parametrize("pipeline", SWEPT)
def test_a_crash_at_any_point_of_a_migration_gives_the_failure_free_outputs(
    pipeline: str,
) -> None:
    """Every worker is lost at each scheduling event in turn (before, during and after
    the bins move; one in nine in the quick profile, every one in CI's); the run
    restores from its last checkpoint, with the routing tables it had, and replays the
    configurations after it: the outputs are those of a run with neither crash nor
    migration."""
    epochs = [[(e * 7 + i * 5) % 23 for i in range(4 + e % 3)] for e in range(7)]
    plan = [(2, move(range(4), 1)), (4, move(range(8), 0), 3)]
    expected = run(pipeline, epochs, 2, 1, True)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as d:
        flow, _ = build(pipeline, epochs, True, builders=PIPELINES, close=True, name="m")
        session = flow.activate(
            workers=2, backend="inline", seed=1, checkpoint=d, bins=8, reconfigure=plan
        )
        session.join()
    events = session.events
    wrong = []
    for n in crash_points(events, f"migration-{pipeline}"):
        with tempfile.TemporaryDirectory(dir=SCRATCH) as d:
            got = run(
                pipeline,
                epochs,
                2,
                1,
                True,
                checkpoint=d,
                checkpoint_every=1,
                crash_at=(n,),
                max_restarts=1,
                bins=8,
                reconfigure=plan,
            )
        if got != expected:
            wrong.append(n)
    assert events > 40
    assert wrong == [], f"{len(wrong)} crash points of {events} events give other outputs: {wrong}"


def test_a_checkpoint_keeps_where_the_bins_are(tmp_path: Path) -> None:
    """A run that stops after its bins moved resumes with them where they were: each
    worker's restored tables hold exactly the keys its routing table gives it."""
    epochs = [[(e * 7 + i * 5) % 23 for i in range(6)] for e in range(6)]
    plan = [(1, move(range(8), 1))]
    flow, _ = build("running_reduce", epochs, False, builders=PIPELINES, close=True, name="k")
    session = flow.activate(
        workers=2,
        backend="inline",
        checkpoint=str(tmp_path),
        checkpoint_every=1,
        bins=8,
        reconfigure=plan,
    )
    session.join()
    assert session.coordinator is not None
    restore = session.coordinator.load_restore()
    assert restore is not None
    epoch, shares = restore
    assert epoch == len(epochs) - 1
    keyed = [
        (w, snap)
        for w, share in enumerate(shares)
        for piece in share.pieces()  # what the worker reads: its own part
        for snap in piece.values()
        if snap.get("kind") == "keyed" and snap["tables"].get("state", {}).get("times")
    ]
    assert keyed, "the running state is in the checkpoint"
    for w, snap in keyed:
        routing = Routing(8, tuple(snap["routing"][0][1]))
        routing.restore([(e, tuple(t)) for e, t in snap["routing"]])
        for _, keys, _ in snap["tables"]["state"]["times"]:
            assert all(routing.owner(k, epoch) == w for k in keys)
    assert {w for w, _ in keyed} == {1}  # every bin went to worker 1


# -- load balancing --------------------------------------------------------------------------


Balancer = Callable[[list[int], tuple[int, ...], int, float], dict[int, int]]


def check_balance(fn: Balancer, workers: int, table: list[int], loads: list[int]) -> None:
    """The property of a balancer: never a higher peak; within the tolerance whenever no
    bin is heavier than 0.2 of the mean; only bins that change owner."""
    moves = fn(loads, tuple(table), workers, 1.2)
    before = [sum(n for b, n in enumerate(loads) if table[b] == w) for w in range(workers)]
    after_table = [moves.get(b, w) for b, w in enumerate(table)]
    after = [sum(n for b, n in enumerate(loads) if after_table[b] == w) for w in range(workers)]
    assert max(after) <= max(before)
    mean = sum(loads) / workers
    if max(loads) <= 0.2 * mean:
        assert max(after) <= 1.2 * mean + 1e-9
    assert all(table[b] != w for b, w in moves.items())


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda w: st.tuples(
            st.just(w),
            st.lists(st.integers(0, w - 1), min_size=1, max_size=64),
        )
    ),
    st.data(),
)
def test_balance_never_makes_it_worse_and_reaches_the_tolerance_when_it_can(
    shape: tuple[int, list[int]], data: st.DataObject
) -> None:
    workers, table = shape
    loads = data.draw(st.lists(st.integers(0, 1000), min_size=len(table), max_size=len(table)))
    check_balance(balance, workers, table, loads)


def test_mutation_a_balance_that_stops_after_one_move_is_caught() -> None:
    """A balancer that moves one bin and stops leaves the peak above the tolerance
    where no bin is hot; the property sees it."""

    def one_move(loads: list[int], table: tuple[int, ...], workers: int, tol: float) -> Any:
        return dict(list(balance(loads, table, workers, tol).items())[:1])

    table = [0] * 10 + [1] * 10
    loads = [5] * 10 + [1] * 10  # 50 against 10: three bins must move
    check_balance(balance, 2, table, loads)
    with pytest.raises(AssertionError):
        check_balance(one_move, 2, table, loads)


def skewed(
    workers: int, rebalance_at: int | None, backend: str = "inline", by: str = "records"
) -> tuple[Any, list[int], dict[str, Any]]:
    """Counts over keys that land mostly in worker 0's bins (four in five records, the
    same keys every epoch), fed epoch by epoch; with ``rebalance_at``, ``rebalance()``
    once that epoch is done.
    Returns the outputs, the records each worker received after the rebalance (by bin,
    through the routing table then in force) and what ``rebalance`` reported."""
    from timely.routing.bins import bin_of, default_table

    table = default_table(timely.routing.bins.DEFAULT_BINS, workers)
    keys = list(range(4000))
    hot = [k for k in keys if table[bin_of(k, timely.routing.bins.DEFAULT_BINS)] == 0]
    cold = sorted(set(keys) - set(hot))
    flow = Dataflow("skewed")
    handle = flow.new_input("events")
    counts = handle.stream.running_reduce(lambda k: k, operator.add, value=lambda k: 1)
    counts.collect("c")
    probe = counts.probe()
    report: dict[str, Any] = {}
    with flow.activate(workers=workers, backend=backend, reconfigurable=True) as session:

        def done(epoch: int) -> None:  # on Ray the workers run behind the driver
            while not probe.done(epoch):
                session.poll(0.01)

        measure_from = None
        for e in range(10):
            if e == measure_from:
                done(e - 1)
                session._bin_loads()  # count from the new table's first epoch on
            handle.send(hot[:400] * 2)  # the same keys every epoch: a steady skew
            handle.send(cold[:200])
            handle.advance_to(e + 1)
            if e == rebalance_at:
                done(e)
                report = session.rebalance(strategy="all-at-once", by=by)
                measure_from = report["epochs"][-1] if report["epochs"] else e + 1
        done(9)
        per_bin = [sum(n) for n in zip(*(load["records"] for load in session._bin_loads()))]
        received = [0] * workers
        for b, n in enumerate(per_bin):
            received[session.routing_table[b]] += n
        handle.close()
        results = session.join()
    return sorted(results["c"]), received, report


def test_rebalance_evens_out_a_skewed_workload() -> None:
    base, before, _ = skewed(2, None)
    counts, after, report = skewed(2, 3)
    assert counts == base  # the same outputs
    assert max(before) > 1.5 * sum(before) / 2  # without it the skew stays
    mean = sum(report["loads"]) / 2
    assert max(report["loads"]) > 1.5 * mean  # it measured the skew
    assert report["moves"] and max(report["expected"]) <= 1.2 * mean
    # The epochs after the moves, by the records each worker received.
    assert max(after) <= 1.2 * sum(after) / 2


def test_rebalance_by_useful_time_weighs_records_by_their_owners_cost() -> None:
    """By default a bin weighs its records times its owner's useful time per record:
    every record sent is counted, every worker's keyed steps took time, and the moves
    bring the busiest worker within the tolerance by those weights."""
    base, _, _ = skewed(2, None)
    counts, _, report = skewed(2, 3, by="useful")
    assert counts == base
    assert sum(report["records"]) == 4 * (800 + 200)  # epochs 0..3, every record
    assert all(u > 0 for u in report["useful_s"])
    assert sum(report["loads"]) == pytest.approx(sum(report["useful_s"]))
    mean = sum(report["loads"]) / 2
    assert max(report["expected"]) <= 1.2 * mean or not report["moves"]


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda w: st.tuples(
            st.lists(st.integers(0, w - 1), min_size=8, max_size=8),
            st.lists(st.integers(0, 50), min_size=8, max_size=8),
            st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=w, max_size=w),
        )
    )
)
def test_useful_per_bin_splits_each_owners_time_by_records(case: Any) -> None:
    """Per owner, its bins' weights add up to its useful time (each bin by its share of
    the owner's records); an owner with records but no time measured is costed at the
    mean cost of those measured; with nothing measured the records are the weights."""
    from timely.routing.bins import useful_per_bin

    table, records, useful = case
    weights = useful_per_bin(records, useful, tuple(table))
    received = [sum(n for b, n in enumerate(records) if table[b] == w) for w in range(len(useful))]
    if sum(useful) == 0 or sum(received) == 0:
        assert weights == [float(n) for n in records]
        return
    mean = sum(useful) / sum(received)
    for w, u in enumerate(useful):
        mine = sum(x for b, x in enumerate(weights) if table[b] == w)
        assert mine == pytest.approx(u if u > 0 and received[w] else received[w] * mean)


@pytest.mark.usefixtures("ray_local")
def test_on_ray_rebalance_measures_every_worker_and_evens_out() -> None:
    counts, after, report = skewed(2, 3, "ray")
    assert counts == skewed(2, None)[0]
    assert max(report["loads"]) > 1.5 * sum(report["loads"]) / 2
    assert max(after) <= 1.2 * sum(after) / 2


def test_rebalance_refuses_an_unknown_measure() -> None:
    flow = Dataflow("measure")
    flow.new_input().stream.count_by(lambda x: x).collect("c")
    with (
        flow.activate(workers=2, backend="inline", reconfigurable=True) as session,
        pytest.raises(ConfigError, match="by must be 'useful' or 'records'"),
    ):
        session.rebalance(by="bytes")


def test_rebalance_needs_a_reconfigurable_run() -> None:
    flow = Dataflow("plain")
    flow.new_input().stream.count_by(lambda x: x).collect("c")
    with (
        flow.activate(workers=2, backend="inline") as session,
        pytest.raises(ConfigError, match="reconfigurable=True"),
    ):
        session.rebalance()


def killed_mid_migration(backend: str, marker: Path | None, checkpoint: str | None) -> Any:
    """A streaming session that drains worker 0 over eight epochs (16 bins an epoch);
    with ``marker``, the worker that sees the record ``"die"`` (sent in the third step's
    epoch) ends its process once."""
    flow = Dataflow("killed")
    handle = flow.new_input("words")

    def die(word: str) -> None:
        if marker is not None and word == "die" and not marker.exists():
            marker.write_text("exited")
            os._exit(1)

    words = handle.stream.inspect(die)
    words.running_reduce(lambda w: w, operator.add, value=lambda w: 1).collect("running")
    words.count_by(lambda w: w).collect("counts")
    options: dict[str, Any] = {"reconfigurable": True}
    if checkpoint is not None:
        options |= {"checkpoint": checkpoint, "checkpoint_every": 1}
    with flow.activate(workers=2, backend=backend, **options) as session:
        for e in range(14):
            handle.send([f"w{(e * 13 + i) % 53}" for i in range(40)])
            if e == 3:
                session.reconfigure(drain(0), bins_per_step=16)
            if e == 6:
                handle.send(["die"])
            handle.advance_to(e + 1)
        handle.close()
        results = session.join()
        restarts = session.restarts
    return sorted(results["running"]), sorted(results["counts"]), restarts


@pytest.mark.usefixtures("ray_local")
def test_on_ray_a_worker_killed_during_a_migration_recovers_the_same_outputs(
    tmp_path: Path,
) -> None:
    expected = killed_mid_migration("inline", None, None)[:2]
    running, counts, restarts = killed_mid_migration(
        "ray", tmp_path / "marker", str(tmp_path / "ckpt")
    )
    assert restarts == 1 and (tmp_path / "marker").exists()
    assert (running, counts) == expected


# -- a tracked table's bin index ---------------------------------------------------------------


def tracked_state(keys: list[int], unreported: list[int]) -> Any:
    from timely.state.keyed import KeyedState

    state: KeyedState[int] = KeyedState(tracked=True)
    state.keep_bin_index(8)
    table = state.table((0,))
    for k in keys:
        table[k] = k
    state.added((0,), keys)
    for k in unreported:
        table[k] = k  # added without telling the index
    return state


def check_index(keys: list[int], unreported: list[int], deleted: list[int], bins: set[int]) -> None:
    state = tracked_state(keys, unreported)
    table = state.table((0,))
    for k in deleted:
        table.pop(k, None)  # removals need no report
    expected = sorted(k for k in table if timely.routing.bins.bin_of(k, 8) in bins)
    got = state.extract(bins, 8)
    assert sorted(k for _, ks, _ in got["times"] for k in ks) == expected
    assert all(timely.routing.bins.bin_of(k, 8) not in bins for k in state.table((0,)))
    # The new owner indexes what arrives (by the runs shipped with it, or by hashing):
    # taking the bins out of it again finds every key, with its value.
    other = tracked_state([], [])
    other.install(got)
    again = other.extract(bins, 8)
    assert sorted((k, v) for _, ks, vs in again["times"] for k, v in zip(ks, vs)) == [
        (k, k) for k in expected
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 500), unique=True, max_size=80),
    st.lists(st.integers(0, 500), max_size=10),
    st.sets(st.integers(0, 7), min_size=1),
)
def test_a_bin_index_extracts_what_hashing_every_key_would(
    keys: list[int], deleted: list[int], bins: set[int]
) -> None:
    """Keys reported as added, some removed since (removals need no report)."""
    check_index(keys, [], deleted, bins)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 500), unique=True, max_size=80),
    st.lists(st.integers(501, 600), unique=True, min_size=1, max_size=5),
    st.sets(st.integers(0, 7), min_size=1),
)
def test_keys_added_unreported_make_it_hash_every_key(
    keys: list[int], unreported: list[int], bins: set[int]
) -> None:
    """A vertex that breaks the contract (adds keys without reporting them) is caught by
    the count: the index holds fewer keys than the table, and every key is hashed."""
    check_index(keys, unreported, [], bins)


def test_a_bin_index_is_used_when_it_is_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    state = tracked_state(list(range(200)), [])
    monkeypatch.setattr(
        timely.state.keyed, "keys_in_bins", lambda *a: pytest.fail("hashed every key")
    )
    got = state.extract({3}, 8)
    assert got["times"] and all(timely.routing.bins.bin_of(k, 8) == 3 for k in got["times"][0][1])


def test_mutation_indexing_shipped_runs_under_the_wrong_bin_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keys that arrive grouped by bin are indexed by their runs, unhashed: a variant
    that files a run under the next bin strands those keys at the new owner."""
    index_runs = timely.state.keyed.KeyedState._index_runs

    def shifted(self: Any, time: Any, keys: list[Any], runs: list[Any]) -> None:
        index_runs(self, time, keys, [((b + 1) % 8, n) for b, n in runs])

    monkeypatch.setattr(timely.state.keyed.KeyedState, "_index_runs", shifted)
    with pytest.raises(AssertionError):
        check_index(list(range(100)), [], [], {1})


def test_installing_a_key_that_is_there_is_refused() -> None:
    state = tracked_state(list(range(20)), [])
    shipped = state.extract({0, 1, 2, 3}, 8)
    other = tracked_state(list(range(20)), [])  # holds the same keys already
    with pytest.raises(ValueError, match="were there already: not keyed state"):
        other.install(shipped)


def test_reserve_grows_a_large_table_once_and_keeps_its_contents() -> None:
    """Room for keys to come is made by growing the dict now (placeholders in and out):
    the table holds what it held, a user's NaN key included, and is larger in memory;
    asked again before anything changed, it does nothing."""
    import sys

    state = tracked_state(list(range(70_000)), [])
    table = state.table((0,))
    nan = float("nan")
    table[nan] = -1
    state.added((0,), [nan])
    before, size = dict(table), sys.getsizeof(table)
    state.reserve(0.5)
    grown = sys.getsizeof(table)
    assert grown > size and table == before and table[nan] == -1
    assert list(table) == list(before)  # the order too: placeholders left no trace
    state.reserve(0.5)
    assert sys.getsizeof(table) == grown
    small = tracked_state(list(range(1000)), [])
    size = sys.getsizeof(small.table((0,)))
    small.reserve(0.5)  # small tables grow fast enough on their own
    assert sys.getsizeof(small.table((0,))) == size


def test_room_is_made_for_arriving_bins_before_they_are_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that bins will move to grows its large tables for them ahead of the
    first install, by the share of keys coming; the outputs stay those of a run where
    nothing moves."""
    events: list[tuple[str, int, Any]] = []
    reserve = timely.state.keyed.KeyedState.reserve
    install = timely.state.keyed.StatefulVertex.install_bins

    def reserving(self: Any, share: float) -> None:
        events.append(("reserve", id(self), share))
        reserve(self, share)

    def installing(self: Any, tables: Any, epoch: int) -> None:
        events.append(("install", id(self._states["state"]), epoch))
        install(self, tables, epoch)

    monkeypatch.setattr(timely.state.keyed.KeyedState, "reserve", reserving)
    monkeypatch.setattr(timely.state.keyed.StatefulVertex, "install_bins", installing)

    def go(moves: bool) -> list[Any]:
        flow = Dataflow("room")
        handle = flow.new_input("keys")
        handle.stream.running_reduce(lambda k: k, operator.add, value=lambda k: 1).collect("r")
        with flow.activate(workers=2, backend="inline", reconfigurable=True) as session:
            handle.send(list(range(150_000)))
            handle.advance_to(1)
            if moves:
                session.reconfigure(move(range(64), 1), bins_per_step=16)
            for e in range(1, 7):
                handle.send(list(range(e * 1000)))
                handle.advance_to(e + 1)
            handle.close()
            return sorted(session.join()["r"])

    expected = go(False)
    events.clear()
    assert go(True) == expected
    states = [s for kind, s, _ in events if kind == "install"]
    assert states and len(set(states)) == 1  # bins only arrive at worker 1
    (target,) = set(states)
    reserves = [(i, share) for i, (kind, _, share) in enumerate(events) if kind == "reserve"]
    mine = [(i, share) for i, share in reserves if events[i][1] == target]
    first_install = next(i for i, (kind, _, _) in enumerate(events) if kind == "install")
    # Worker 1 holds 128 of 256 bins; the 32 of bins 0..63 it does not hold come in two
    # steps of 16 (the share asked is those coming over those held when it is asked).
    assert mine and mine[0][0] < first_install
    assert all(share in (16 / 128, 16 / 144, 32 / 128) for _, share in mine)


def test_mutation_trusting_an_incomplete_index_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the check that the index counts at least the table's keys, a key added
    unreported stays behind when its bin moves; the property above sees it."""
    monkeypatch.setattr(timely.state.keyed, "len", lambda table: 0, raising=False)
    with pytest.raises(AssertionError):
        check_index(list(range(50)), [501, 502, 503, 504, 505], [], set(range(8)))


def rescaled_mid_migration(tmp_path: Path) -> tuple[Any, Any]:
    """Bins moving, and the session rescales from 2 to 3 workers meanwhile: the
    checkpoint's state is re-partitioned over the new default table, configurations
    after it (for 2 workers) are dropped, and a later reconfiguration works on 3."""

    def go(moves: bool) -> Any:
        flow = Dataflow("rescaled")
        handle = flow.new_input("words")
        handle.stream.running_reduce(lambda w: w, operator.add, value=lambda w: 1).collect("r")
        options: dict[str, Any] = {"reconfigurable": True}
        if moves:
            options |= {"checkpoint": str(tmp_path), "checkpoint_every": 1}
        with flow.activate(workers=2, backend="inline", **options) as session:
            for e in range(12):
                if e not in (3, 4):  # quiet epochs: nothing there to notify delays a ship
                    handle.send([f"w{(e * 7 + i) % 31}" for i in range(30)])
                if moves and e == 2:
                    session.reconfigure(drain(1), bins_per_step=32)
                if moves and e == 5:
                    session.rescale(3, live=False)
                if moves and e == 8:
                    assert session.workers == 3 and session.routing_table == tuple(
                        b % 3 for b in range(256)
                    )
                    session.reconfigure(drain(2), strategy="all-at-once")
                handle.advance_to(e + 1)
            handle.close()
            out = sorted(session.join()["r"])
        return out, session.rescales

    expected, _ = go(False)
    got, rescales = go(True)
    assert len(rescales) == 1 and rescales[0]["to"] == 3
    return got, expected


def test_a_rescale_during_a_migration_deals_the_bins_out_afresh(tmp_path: Path) -> None:
    got, expected = rescaled_mid_migration(tmp_path)
    assert got == expected


def test_mutation_shipping_before_the_checkpoint_snapshot_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bins that leave after a checkpoint's epoch but before the old owner's snapshot
    for it are in neither worker's part: the restore loses them."""
    monkeypatch.setattr(timely.worker.migration.Migration, "snapshotted", lambda self, v, e: True)
    got, expected = rescaled_mid_migration(tmp_path)
    assert got != expected
