"""``iterate(body, until=...)``: stops at a fixpoint, after ``max_iters``, or per record.

References: breadth-first search for the fixpoint (reachability on graphs with cycles,
which a plain ``iterate`` would go round for ever), and plain recursion for the
per-record predicate.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from tests.operators.test_fixpoint import adjacency, as_sets, bfs, graphs, node_feeds
from tests.operators.test_properties import Feed, by_epoch, feeds, per_epoch, send
from timely import Dataflow, GraphBuildError, UserFunctionError

workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)
bounds = st.one_of(st.none(), st.integers(1, 4))


@given(edges=graphs, feed=node_feeds, w=workers, seed=seeds, max_iters=bounds)
def test_until_fixpoint_stops_when_nothing_is_new(
    edges: list[tuple[int, int]], feed: Feed, w: int, seed: int, max_iters: int | None
) -> None:
    adj = adjacency(edges)
    flow = Dataflow("reach")
    inp = flow.new_input()
    step = lambda s: s.select_many(lambda n: adj[n])  # noqa: E731
    inp.stream.iterate(step, until="fixpoint").collect("reach")
    inp.stream.iterate(step, until="fixpoint", max_iters=max_iters).collect("bounded")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)
    data = by_epoch(feed)
    assert per_epoch(out["reach"]) == as_sets({e: bfs(adj, rs) for e, rs in data.items()})
    assert per_epoch(out["bounded"]) == as_sets(
        {e: bfs(adj, rs, max_iters) for e, rs in data.items()}
    )


def test_until_fixpoint_terminates_on_a_cycle() -> None:
    """A ring: every round derives a node, but none is new after a lap."""
    flow = Dataflow("ring")
    inp = flow.new_input()
    inp.stream.iterate(lambda s: s.select(lambda n: (n + 1) % 50), until="fixpoint").collect("o")
    inp.send([7])
    out = flow.run(workers=3, backend="inline")
    assert sorted(n for _, n in out["o"]) == list(range(50))


def test_until_fixpoint_applies_the_body_max_iters_times() -> None:
    """The body sees rounds 0 .. max_iters - 1 only; the last round's output still leaves."""
    entered: list[int] = []  # the inline backend runs the workers in this process
    flow = Dataflow("chain")
    inp = flow.new_input()
    inp.stream.iterate(
        lambda s: s.inspect(entered.append).select(lambda n: n + 1),
        until="fixpoint",
        max_iters=2,
    ).collect("o")
    inp.send([0])
    out = flow.run(workers=2, backend="inline")
    assert sorted(n for _, n in out["o"]) == [0, 1, 2]
    assert sorted(entered) == [0, 1]


def branches(x: int, limit: int, depth: int | None) -> list[int]:
    """Haskell's ``until (>= limit)`` over the body ``x -> [x + 1, 2 * x]`` (if x > 0)."""
    if x >= limit:
        return [x]
    if depth == 0:
        return []
    nxt = [x + 1, 2 * x] if x > 0 else [x + 1]
    return [y for n in nxt for y in branches(n, limit, None if depth is None else depth - 1)]


def collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _collatz(r: tuple[int, int, int]) -> tuple[int, int, int]:
    start, n, steps = r
    return (start, n // 2 if n % 2 == 0 else 3 * n + 1, steps + 1)


@given(feed=feeds(st.integers(0, 12)), w=workers, seed=seeds, max_iters=bounds)
def test_until_a_predicate_follows_each_record_until_it_holds(
    feed: Feed, w: int, seed: int, max_iters: int | None
) -> None:
    flow = Dataflow("until")
    inp = flow.new_input()
    s = inp.stream
    s.iterate(
        lambda t: t.select_many(lambda x: [x + 1, 2 * x] if x > 0 else [x + 1]),
        until=lambda x: x >= 10,
        max_iters=max_iters,
    ).collect("branches")
    s.where(lambda x: x > 0).select(lambda x: (x, x, 0)).iterate(
        lambda t: t.select(_collatz), until=lambda r: r[1] == 1, max_iters=max_iters
    ).collect("collatz")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)
    data = by_epoch(feed)

    def want(f: Any) -> dict[int, Counter[Any]]:
        got = {e: Counter(y for x in rs for y in f(x)) for e, rs in data.items()}
        return {e: c for e, c in got.items() if c}

    assert per_epoch(out["branches"]) == want(lambda x: branches(x, 10, max_iters))
    assert per_epoch(out["collatz"]) == want(
        lambda x: (
            [(x, 1, collatz_steps(x))]
            if x > 0 and (max_iters is None or collatz_steps(x) <= max_iters)
            else []
        )
    )


def test_until_none_is_the_plain_loop() -> None:
    flow = Dataflow("plain")
    inp = flow.new_input()
    halve = lambda s: s.select(lambda x: x // 2).where(lambda x: x > 0)  # noqa: E731
    inp.stream.iterate(halve).collect("all")
    inp.stream.iterate(halve, max_iters=2).collect("two")
    inp.send([12])
    out = flow.run(workers=2, backend="inline")
    assert sorted(x for _, x in out["all"]) == [1, 3, 6]
    assert sorted(x for _, x in out["two"]) == [3, 6]


def test_iterate_checks_until_and_max_iters() -> None:
    s = Dataflow("bad").new_input().stream
    with pytest.raises(GraphBuildError, match="pass max_iters=5 by keyword"):
        s.iterate(lambda t: t, 5)
    with pytest.raises(GraphBuildError, match="until must be None, 'fixpoint' or a predicate"):
        s.iterate(lambda t: t, until="converged")
    with pytest.raises(GraphBuildError, match="max_iters must be >= 1"):
        s.iterate(lambda t: t, until=bool, max_iters=0)
    with pytest.raises(GraphBuildError, match="must return a Stream"):
        s.iterate(lambda t: None, until=bool)


def test_a_failing_predicate_names_the_step_and_the_record() -> None:
    flow = Dataflow("fails")
    inp = flow.new_input()
    inp.stream.iterate(
        lambda t: t.select(lambda x: x - 1), until=lambda x: 10 // x > 100, name="countdown"
    ).collect("o")
    inp.send([2])
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=1, backend="inline")
    assert info.value.step == "countdown.until"
    assert info.value.record_repr == "0"
    assert "test_iterate.py" in str(info.value)
