"""DS2's policy on synthetic operators that scale as a model says (``model.py``).

Properties: one decision reaches the analytic optimum (linear scaling); at a steady
rate and the optimum the decision stays; from above and from below, repeated
decisions move monotonically towards the optimum and never cross it (also when scaling
is sublinear, where DS2 may stop short of it but on the safe side). Each deliberately
broken variant of the policy must be caught by the same properties.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from fractions import Fraction
from itertools import pairwise

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import control.ds2
from control import Graph, Measurement, OperatorRates, Policy, decide, optimal_parallelism
from control.graph import Edge

from .model import LIMIT, Model, models

SUBLINEAR = (Fraction(0), Fraction(1, 10), Fraction(1, 4), Fraction(1, 2))


def _clamp(w: int, low: int, high: int) -> int:
    return min(max(w, low), high)


def _decide(model: Model, workers: int, low: int = 1, high: int = LIMIT) -> int:
    measured = model.measure(workers)
    d = decide(
        model.graph,
        measured.operators,
        model.targets,
        workers=workers,
        min_workers=low,
        max_workers=high,
    )
    return d.workers


# -- the properties --------------------------------------------------------------------


def one_decision_reaches_the_optimum(model: Model, workers: int) -> None:
    """Linear operators, measured at any parallelism: π_i and W* are the optimum."""
    measured = model.measure(workers)
    pi = optimal_parallelism(model.graph, measured.operators, model.targets)
    assert pi == dict(enumerate(model.optimal())), (workers, model)
    assert _decide(model, workers) == model.needed()


def stays_at_the_optimum(model: Model, rounds: int = 5) -> None:
    """At a steady rate and the optimum, every later decision is the same."""
    best = model.needed()
    workers = best
    for _ in range(rounds):
        workers = _decide(model, workers)
        assert workers == best, model


def converges_monotonically(model: Model, start: int, low: int, high: int) -> None:
    """From ``start``, decisions move towards the optimum, never past it; linear
    operators get there in one decision."""
    best = _clamp(model.needed(), low, high)
    seen = [start]
    for _ in range(6):
        seen.append(_decide(model, seen[-1], low, high))
    if start <= best:
        assert all(a <= b <= best for a, b in pairwise(seen)), (seen, best)
    else:
        assert all(a >= b >= best for a, b in pairwise(seen)), (seen, best)
    if model.alpha == 0:
        assert seen[1] == best, (seen, best)


@st.composite
def starts(
    draw: st.DrawFn, alphas: tuple[Fraction, ...] = (Fraction(0),)
) -> tuple[Model, int, int, int]:
    model = draw(models(alphas))
    low = draw(st.integers(1, 4))
    high = draw(st.integers(low, LIMIT))
    best = _clamp(model.needed(), low, high)
    below = draw(st.booleans())
    start = draw(st.integers(low, best) if below else st.integers(best, high))
    return model, start, low, high


@given(models(), st.integers(1, LIMIT))
def test_one_decision_reaches_the_optimum(model: Model, workers: int) -> None:
    one_decision_reaches_the_optimum(model, workers)


@given(models())
def test_no_oscillation_at_the_optimum(model: Model) -> None:
    stays_at_the_optimum(model)


@given(starts())
def test_linear_converges_in_one_decision_from_above_and_below(
    case: tuple[Model, int, int, int],
) -> None:
    converges_monotonically(*case)


@given(starts(SUBLINEAR))
def test_sublinear_scaling_never_overshoots_nor_undershoots(
    case: tuple[Model, int, int, int],
) -> None:
    converges_monotonically(*case)


@given(starts(), st.integers(0, 2), st.integers(1, 3))
def test_the_policy_converges_and_then_holds(
    case: tuple[Model, int, int, int], warm_up: int, activation: int
) -> None:
    """The stateful policy (θ = 0) over many intervals at a steady rate: it reaches the
    optimum monotonically and never moves again."""
    model, start, low, high = case
    best = _clamp(model.needed(), low, high)
    policy = Policy(
        model.graph,
        start,
        model.targets,
        warm_up=warm_up,
        activation=activation,
        threshold=0.0,
        min_workers=low,
        max_workers=high,
    )
    seen = [start]
    for _ in range(4 * (warm_up + activation) + 4):
        decision = policy.observe(model.measure(policy.workers))
        assert decision.workers == policy.workers
        seen.append(decision.workers)
    assert seen[-1] == best, (seen, best)
    steps = [b - a for a, b in pairwise(seen) if b != a]
    assert len(steps) <= 1, seen  # one rescale at most, straight to the optimum


# -- mutants: each must be caught by the same properties -------------------------------


@contextmanager
def _as_is() -> Iterator[None]:
    yield


@contextmanager
def _patched(name: str, value: object) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(control.ds2, name, value)
        yield


def _observed_rates() -> AbstractContextManager[None]:
    """Observed instead of true rates: records per second of the interval."""
    return _patched("_instance_rate", lambda r: r.observed_processing_rate / r.instances)


def _no_ceiling() -> AbstractContextManager[None]:
    """Rounds to the nearest instead of up."""
    return _patched("_ceil", round)


def _aggregate_rate() -> AbstractContextManager[None]:
    """Divides by all instances' rate, forgetting the / p_i."""
    return _patched("_instance_rate", lambda r: r.true_processing_rate)


def _no_selectivity() -> AbstractContextManager[None]:
    """Passes an operator's input rate downstream as its output rate."""
    return _patched("_selectivity", lambda r: 1.0)


def _observed_sources() -> AbstractContextManager[None]:
    """Ignores the target rates: sources at what they emit now."""
    return _patched("_targets", lambda graph, targets: {})


def _max_not_sum() -> AbstractContextManager[None]:
    """DS2's W* = max π_i: as if each operator had workers of its own (issue 29)."""
    return _patched("_combine", lambda loads: max(loads, default=0.0))


Patch = Callable[[], AbstractContextManager[None]]


def _one(case: tuple[Model, int, int, int]) -> None:
    model, start, _, _ = case
    one_decision_reaches_the_optimum(model, start)


def _converge(case: tuple[Model, int, int, int]) -> None:
    converges_monotonically(*case)


def _steady(case: tuple[Model, int, int, int]) -> None:
    stays_at_the_optimum(case[0])


Property = Callable[[tuple[Model, int, int, int]], None]
MUTANTS: list[tuple[str, Patch, Property]] = [
    ("observed rates, one decision", _observed_rates, _one),
    ("observed rates, convergence", _observed_rates, _converge),
    ("no ceiling, one decision", _no_ceiling, _one),
    ("no ceiling, steady", _no_ceiling, _steady),
    ("aggregate rate, one decision", _aggregate_rate, _one),
    ("aggregate rate, convergence", _aggregate_rate, _converge),
    ("no selectivity, one decision", _no_selectivity, _one),
    ("observed sources, convergence", _observed_sources, _converge),
    ("max instead of sum, one decision", _max_not_sum, _one),
    ("max instead of sum, convergence", _max_not_sum, _converge),
]


def _search(prop: Property) -> Callable[[], None]:
    """``prop`` over a fixed, reproducible search of 300 cases."""

    @settings(
        max_examples=300,
        phases=[Phase.generate],
        derandomize=True,
        report_multiple_bugs=False,
        print_blob=False,
        database=None,
    )
    @given(starts())
    def check(case: tuple[Model, int, int, int]) -> None:
        prop(case)

    return check


@pytest.mark.parametrize(("patch", "prop"), [m[1:] for m in MUTANTS], ids=[m[0] for m in MUTANTS])
def test_mutants_are_caught(patch: Patch, prop: Property) -> None:
    with patch(), pytest.raises(AssertionError):
        _search(prop)()


@pytest.mark.parametrize("prop", [_one, _converge, _steady])
def test_the_same_search_passes_the_real_thing(prop: Property) -> None:
    """The control: what catches the mutants is the bug, not the search."""
    _search(prop)()


@st.composite
def shared(draw: st.DrawFn) -> Model:
    """A random DAG whose operators each need at most one worker of their own but
    together more than one (DS2's max would say 1): loads drawn first, in thousandths of
    a worker, at a target of 1,000 records per second."""
    from hypothesis import assume

    n = draw(st.integers(2, 7))
    edges: list[tuple[int, int]] = []
    for v in range(1, n):
        ups = draw(st.lists(st.integers(0, v - 1), min_size=1, max_size=2, unique=True))
        edges += [(u, v) for u in ups]
    graph = Graph.of([f"op{v}" for v in range(n)], edges)
    shares = draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    probe = Model(graph, tuple([Fraction(1)] * n), tuple([Fraction(1)] * n), {0: 1000})
    demand = probe.demand()  # records per second each operator gets (selectivity 1)
    cost = tuple(Fraction(share, 1000) / demand[v] for v, share in enumerate(shares))
    model = Model(graph, cost, tuple([Fraction(1)] * n), {0: 1000})
    assume(model.needed() > 1)
    return model


@given(shared(), st.integers(1, 8))
def test_operators_that_each_need_less_than_a_worker_add_up(model: Model, workers: int) -> None:
    """Every worker runs every operator on one thread: W* is the ceiling of their loads'
    sum, more than any one operator's π (which stays in the report)."""
    measured = model.measure(workers)
    d = decide(model.graph, measured.operators, model.targets, workers=workers)
    assert d.workers == model.needed() > max(d.per_operator.values()) == 1
    assert "workers' time" in d.reason


# -- by hand ----------------------------------------------------------------------------


def _rates(v: int, processed: float, sent: float, useful: float, p: int = 2) -> OperatorRates:
    return OperatorRates(
        operator=v,
        instances=p,
        interval_s=1.0,
        processed=processed,
        sent=sent,
        activation_s=useful,
    )


def test_a_chain_by_hand() -> None:
    """src (target 1,000/s) -> split (×2, 400/s per instance) -> count (÷4, 900/s)."""
    graph = Graph.of(["src", "split", "count"], [(0, 1), (1, 2)])
    rates = {
        0: _rates(0, 500, 500, 0.01),  # 50,000/s per instance: one is plenty
        1: _rates(1, 500, 1000, 1.25),  # 400/s
        2: _rates(2, 1000, 250, 1000 / 900),  # 900/s
    }
    d = decide(graph, rates, {"src": 1000})
    assert d.per_operator == {0: 1, 1: 3, 2: 3}  # ⌈1000/400⌉, ⌈2000/900⌉
    assert d.by_name() == {"src": 1, "split": 3, "count": 3}
    assert d.estimates[2].input_rate == pytest.approx(2000)
    assert d.estimates[2].output_rate == pytest.approx(500)
    # 0.02 + 2.5 + 2.22 workers' time: every worker runs all three on one thread
    assert (d.workers, d.current, d.rescale) == (5, 2, True)
    assert "need 4.74 workers' time, so 5 workers" in d.reason


def test_min_and_max_workers_clamp() -> None:
    graph = Graph.of(["src", "op"], [(0, 1)])
    rates = {0: _rates(0, 10, 10, 0.001), 1: _rates(1, 10, 10, 1.0)}  # 10/s per instance
    assert decide(graph, rates, {0: 95}).workers == 10
    d = decide(graph, rates, {0: 95}, max_workers=4)
    assert d.workers == 4 and d.per_operator[1] == 10 and "clamped" in d.reason
    assert decide(graph, rates, {0: 1}, min_workers=3).workers == 3
    with pytest.raises(ValueError):
        decide(graph, rates, min_workers=3, max_workers=2)


def test_targets_default_to_the_observed_source_rate_and_must_name_roots() -> None:
    graph = Graph.of(["src", "op"], [(0, 1)])
    rates = {0: _rates(0, 30, 30, 0.001), 1: _rates(1, 30, 30, 3.0)}  # op: 10/s each
    assert decide(graph, rates).per_operator == {0: 1, 1: 3}
    with pytest.raises(ValueError, match="source or input"):
        decide(graph, rates, {"op": 5})
    with pytest.raises(KeyError):
        decide(graph, rates, {"nope": 5})


def test_an_idle_or_unmeasured_operator() -> None:
    """Nothing to do: 1. Work to do but no measurement: keep the parallelism."""
    graph = Graph.of(["src", "a", "b"], [(0, 1), (1, 2)])
    rates = {0: _rates(0, 10, 10, 0.001, p=5), 1: _rates(1, 0, 0, 0.0, p=5)}
    d = decide(graph, rates, {0: 10})
    assert d.per_operator[1] == 5 and "not measured" in d.estimates[1].note
    assert d.per_operator[2] == 5  # b: never measured at all
    assert decide(graph, rates, {0: 0}).per_operator == {0: 1, 1: 1, 2: 1}


def _loop_graph() -> Graph:
    """input -> enter -> head <- feedback <- body ; body -> leave -> collect (gathered)."""
    return Graph(
        ("in", "loop.enter", "head", "body", "loop.feedback", "loop.leave", "collect:out"),
        ("input", "ingress", "vertex", "vertex", "feedback", "egress", "vertex"),
        (
            Edge(0, 1),
            Edge(1, 2),
            Edge(4, 2),  # the back edge
            Edge(2, 3, "exchange"),
            Edge(3, 4),
            Edge(3, 5),
            Edge(5, 6, "gather"),
        ),
    )


def test_a_loop_is_ordered_without_its_back_edge() -> None:
    graph = _loop_graph()
    assert graph.back == frozenset({2})
    assert graph.order == (0, 1, 2, 3, 4, 5, 6)
    assert graph.pinned(6) and not graph.pinned(3)
    # A cycle without a feedback vertex is broken where the search from the roots closes it.
    cyclic = Graph.of(["a", "b", "c"], [(0, 1), (1, 2), (2, 1)])
    assert cyclic.back == frozenset({2}) and cyclic.order == (0, 1, 2)


def test_a_loop_head_sees_the_records_going_round() -> None:
    """Each record goes round three times on average: the head processes 4× what
    enters, so at twice the input rate it needs twice its measured load."""
    graph = _loop_graph()
    rates = {
        0: _rates(0, 100, 100, 0.001),
        1: _rates(1, 100, 100, 0.001),
        2: _rates(2, 400, 400, 1.0),  # 400/s per instance
        3: _rates(3, 400, 400, 0.5),
        4: _rates(4, 300, 300, 0.001),
        5: _rates(5, 400, 400, 0.001),
        6: _rates(6, 400, 0, 2.0),  # 200/s on its one worker
    }
    d = decide(graph, rates, {"in": 200})
    assert d.estimates[2].input_rate == pytest.approx(800)
    assert d.per_operator[2] == 2 and d.per_operator[3] == 1
    assert d.per_operator[6] == 4  # the gathered output needs 4 ...
    # ... but more workers would not help it: the head (2.0 workers' time), the body
    # (1.0) and the plumbing add up to 3.01 workers' time
    assert d.workers == 4
    assert "'collect:out' needs 4" in d.reason


def test_a_real_graph_from_describe() -> None:
    import operators  # noqa: F401
    from timely import Dataflow

    flow = Dataflow("g")
    source = flow.new_input("in").stream
    source.iterate(lambda s: s.select(lambda x: x // 2).where(lambda x: x > 0)).collect("out")
    graph = Graph.from_describe(flow.build().describe())
    kinds = dict(zip(graph.names, graph.kinds))
    assert "feedback" in kinds.values()
    assert all(graph.kinds[graph.edges[i].src] == "feedback" for i in graph.back)
    position = {v: i for i, v in enumerate(graph.order)}
    for i, e in enumerate(graph.edges):
        if i not in graph.back:
            assert position[e.src] < position[e.dst]
    assert [graph.names[v] for v in graph.roots] == ["in"]


# -- the policy's knobs, by hand ----------------------------------------------------------


def _chain(workers: int, source_rate: float, per_instance: float = 10.4) -> Measurement:
    """src -> op, op at ``per_instance`` records per useful second, src emitting
    ``source_rate`` (its own work, a sliver, adds to op's: the loads are not whole
    numbers of workers, where a sliver would cost one more)."""
    graph = Graph.of(["src", "op"], [(0, 1)])
    ops = {
        0: _rates(0, source_rate, source_rate, 0.0001, p=workers),
        1: _rates(1, source_rate, source_rate, source_rate / per_instance, p=workers),
    }
    return Measurement(0, 10**9, workers, graph, {}, ops)


def test_warm_up_ignores_the_first_intervals_after_every_rescale() -> None:
    m = _chain(2, 20)  # behind: the target is 50, op needs 5
    policy = Policy(m.graph, 2, {"src": 50}, warm_up=2, threshold=0.0)
    assert [policy.observe(m).workers for _ in range(2)] == [2, 2]
    d = policy.observe(m)
    assert d.rescale and d.workers == 5 and policy.workers == 5
    assert "warming up (1 of 2)" in policy.observe(_chain(5, 50)).reason


def test_a_measurement_at_another_worker_count_is_ignored() -> None:
    policy = Policy(_chain(2, 20).graph, 5, {"src": 50}, warm_up=0)
    d = policy.observe(_chain(2, 20))
    assert not d.rescale and "ignored" in d.reason


def test_activation_needs_consecutive_agreeing_intervals_and_takes_the_smallest_step() -> None:
    policy = Policy(_chain(2, 20).graph, 2, {"src": 80}, warm_up=0, activation=3, threshold=0.0)
    # op needs 8 at 10/s, 6 at 13.4/s, 7 at 11.5/s
    assert not policy.observe(_chain(2, 20, 10.4)).rescale
    assert not policy.observe(_chain(2, 20, 13.4)).rescale
    d = policy.observe(_chain(2, 20, 11.5))
    assert (d.workers, d.proposed) == (6, 7)
    # An interval that proposes nothing new starts the count again.
    policy = Policy(_chain(2, 20).graph, 2, {"src": 80}, warm_up=0, activation=2, threshold=0.0)
    assert not policy.observe(_chain(2, 20)).rescale
    assert not policy.observe(_chain(2, 20, 41.0)).rescale  # 2 suffice: at the optimum
    assert not policy.observe(_chain(2, 20)).rescale
    assert policy.observe(_chain(2, 20)).workers == 8


def test_threshold_holds_a_run_that_keeps_up_and_one_that_falls_behind() -> None:
    graph = _chain(1, 1).graph
    # Sources at 95% of target, θ = 10%: the model's +1 is not acted on.
    policy = Policy(graph, 9, {"src": 100}, warm_up=0, threshold=0.1)
    d = policy.observe(_chain(9, 95, 10.5))  # 100/10.5 -> 10
    assert d.proposed == 10 and not d.rescale and "within θ" in d.reason
    # At 80% the run is behind: scale up.
    assert policy.observe(_chain(9, 80, 10.5)).workers == 10
    # Behind, a proposal to shrink is not acted on.
    policy = Policy(graph, 9, {"src": 100}, warm_up=0, threshold=0.1)
    d = policy.observe(_chain(9, 50, 51.0))
    assert d.proposed == 2 and not d.rescale and "no scale-down" in d.reason
    # Keeping up with room to spare: shrink.
    assert policy.observe(_chain(9, 100, 51.0)).workers == 2


def test_without_targets_the_policy_only_sizes_down() -> None:
    policy = Policy(_chain(1, 1).graph, 4, warm_up=0, threshold=0.1)
    assert policy.observe(_chain(4, 10, 10.4)).workers == 1
    policy = Policy(_chain(1, 1).graph, 4, warm_up=0, threshold=0.1)
    assert not policy.observe(_chain(4, 45, 10.4)).rescale


def test_the_knobs_are_checked() -> None:
    graph = _chain(1, 1).graph
    for bad in ({"activation": 0}, {"threshold": 1.0}, {"warm_up": -1}, {"interval_s": 0}):
        with pytest.raises(ValueError):
            Policy(graph, 1, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Policy(graph, 1, min_workers=0)


def test_the_ceiling_forgives_float_rounding() -> None:
    assert control.ds2._ceil(3.0000000000004) == 3
    assert control.ds2._ceil(3.0001) == 4
    assert control.ds2._ceil(0.0) == 0
    assert math.isclose(control.ds2.EPSILON, 1e-12)
