"""``fixpoint``: reachability and transitive closure on small random graphs vs BFS; with
``min_by``, shortest distances vs Dijkstra."""

from __future__ import annotations

import heapq
from collections import Counter, deque
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from tests.operators.test_properties import Feed, by_epoch, per_epoch, send
from timely import Dataflow, GraphBuildError, UserFunctionError

N = 8
nodes = st.integers(0, N - 1)
graphs = st.lists(st.tuples(nodes, nodes), max_size=14)
workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)
node_feeds = st.lists(
    st.tuples(st.integers(0, 2), st.lists(nodes, max_size=3)), min_size=1, max_size=3
)
edge_feeds = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.tuples(nodes, nodes), max_size=3)),
    min_size=1,
    max_size=3,
)


def adjacency(edges: list[tuple[int, int]]) -> dict[int, list[int]]:
    adj: dict[int, list[int]] = {n: [] for n in range(N)}
    for a, b in edges:
        adj[a].append(b)
    return adj


def bfs(adj: dict[int, list[int]], sources: list[int], hops: int | None = None) -> set[int]:
    """Nodes reachable from ``sources`` in at most ``hops`` steps (any, by default)."""
    depth = {s: 0 for s in sources}
    queue = deque(sources)
    while queue:
        n = queue.popleft()
        if hops is not None and depth[n] >= hops:
            continue
        for m in adj[n]:
            if m not in depth:
                depth[m] = depth[n] + 1
                queue.append(m)
    return set(depth)


def as_sets(data: dict[int, set[Any]]) -> dict[int, Counter[Any]]:
    return {e: Counter(s) for e, s in data.items() if s}


# Round 0's two batches race: 2 is first seen at round 1 (from 0), then arrives at
# round 0, and must go round again from there for 1 to be within 1 hop.
@example(edges=[(0, 2), (2, 1)], feed=[(0, [0]), (0, [2])], w=1, seed=0, max_iters=1)
@given(
    edges=graphs,
    feed=node_feeds,
    w=workers,
    seed=seeds,
    max_iters=st.one_of(st.none(), st.integers(1, 4)),
)
def test_fixpoint_reachability_matches_bfs(
    edges: list[tuple[int, int]], feed: Feed, w: int, seed: int, max_iters: int | None
) -> None:
    adj = adjacency(edges)
    flow = Dataflow("reach")
    inp = flow.new_input()
    inp.stream.fixpoint(lambda s: s.select_many(lambda n: adj[n])).collect("reach")
    inp.stream.fixpoint(lambda s: s.select_many(lambda n: adj[n]), max_iters=max_iters).collect(
        "bounded"
    )
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)
    data = by_epoch(feed)
    # A set per epoch: every reachable node exactly once.
    assert per_epoch(out["reach"]) == as_sets({e: bfs(adj, rs) for e, rs in data.items()})
    # max_iters bounds the applications of the body: the nodes within that many hops.
    assert per_epoch(out["bounded"]) == as_sets(
        {e: bfs(adj, rs, max_iters) for e, rs in data.items()}
    )


@given(edges=graphs, feed=edge_feeds, w=workers, seed=seeds)
def test_fixpoint_transitive_closure_matches_bfs(
    edges: list[tuple[int, int]], feed: Feed, w: int, seed: int
) -> None:
    """Closes each epoch's pairs ``(a, b)`` over the graph: ``(a, c)`` for c reachable from b."""
    adj = adjacency(edges)
    flow = Dataflow("closure")
    inp = flow.new_input()
    inp.stream.fixpoint(lambda s: s.select_many(lambda p: [(p[0], c) for c in adj[p[1]]])).collect(
        "closure"
    )
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)
    want = {e: {(a, c) for a, b in rs for c in bfs(adj, [b])} for e, rs in by_epoch(feed).items()}
    assert per_epoch(out["closure"]) == as_sets(want)


def test_fixpoint_forgets_finished_epochs() -> None:
    """A round's seen-set is dropped once the loop is past its epoch."""
    flow = Dataflow("forget")
    inp = flow.new_input()
    inp.stream.fixpoint(lambda s: s.select(lambda n: (n + 1) % 5)).collect("out")
    for e in range(6):
        inp.advance_to(e)
        inp.send([e % 5])
    inp.close()
    with flow.activate(workers=2, backend="inline", seed=3) as session:
        result = session.join()
        held = [
            v.seen.times()
            for w in session.worker_list  # type: ignore[attr-defined]
            for v in w.vertices
            if hasattr(v, "seen")
        ]
    assert sorted(result["out"]) == [(e, n) for e in range(6) for n in range(5)]
    # Only the last epoch can be left over: nothing ran after the loop finished it.
    assert held and all(times in ([], [(5, 0)]) for times in held), held


def test_fixpoint_checks_its_arguments() -> None:
    s = Dataflow("bad").new_input().stream
    with pytest.raises(GraphBuildError, match="max_iters must be an int >= 1"):
        s.fixpoint(lambda t: t, max_iters=0)
    with pytest.raises(GraphBuildError, match="must return a Stream"):
        s.fixpoint(lambda t: None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(1, 5)), max_size=25),
    st.integers(1, 4),
    st.integers(0, 2**16),
)
def test_a_least_fixpoint_gives_shortest_distances(
    edges: list[tuple[int, int, int]], w: int, seed: int
) -> None:
    """``min_by=(node, distance)``: Bellman-Ford in plain LINQ, each node's least distance
    from node 0 over weighted edges, against Dijkstra."""
    flow = Dataflow("sssp")
    inp = flow.new_input("edges")
    start = inp.stream.where(lambda e: e[0] == 0).select(lambda e: (0, 0)).distinct()
    start.iterate(
        lambda ds: ds.join(
            inp.stream, lambda d: d[0], lambda e: e[0], lambda d, e: (e[1], d[1] + e[2])
        ),
        until="fixpoint",
        min_by=(lambda d: d[0], lambda d: d[1]),
    ).collect("dist")
    inp.send(edges)
    out = flow.run(workers=w, backend="inline", seed=seed)
    got = [r for _, r in out["dist"]]
    assert len(got) == len({n for n, _ in got})  # one per node
    want: dict[int, int] = {}
    if any(a == 0 for a, _, _ in edges):
        want, heap = {}, [(0, 0)]
        while heap:
            d, n = heapq.heappop(heap)
            if n in want:
                continue
            want[n] = d
            for a, b, c in edges:
                if a == n and b not in want:
                    heapq.heappush(heap, (d + c, b))
    assert dict(got) == want


def test_a_least_fixpoint_checks_its_arguments() -> None:
    s = Dataflow("bad").new_input().stream
    pair = (lambda r: r[0], lambda r: r[1])
    with pytest.raises(GraphBuildError, match="pass until='fixpoint' with it"):
        s.iterate(lambda t: t, min_by=pair)
    with pytest.raises(GraphBuildError, match="a pair of functions"):
        s.iterate(lambda t: t, until="fixpoint", min_by=lambda r: r)  # type: ignore[arg-type]
    with pytest.raises(GraphBuildError, match="cannot be bounded by max_iters"):
        s.iterate(lambda t: t, until="fixpoint", min_by=pair, max_iters=3)


def test_a_failing_value_function_names_the_record() -> None:
    flow = Dataflow("bad_value")
    inp = flow.new_input()
    inp.stream.iterate(
        lambda t: t, until="fixpoint", min_by=(lambda r: r[0], lambda r: 1 / r[1])
    ).collect("out")
    inp.send([(1, 2), (3, 0)])
    with pytest.raises(UserFunctionError, match=r"\(3, 0\)") as info:
        flow.run(workers=2, backend="inline")
    assert "test_fixpoint.py" in str(info.value)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_values_that_do_not_compare_are_the_value_functions_fault() -> None:
    flow = Dataflow("bad_order")
    inp = flow.new_input()
    inp.stream.iterate(
        lambda t: t, until="fixpoint", min_by=(lambda r: r[0], lambda r: r[1])
    ).collect("out")
    inp.send([(1, 2), (1, "x")])
    with pytest.raises(UserFunctionError, match=r"\(1, .x.\).*do not compare") as info:
        flow.run(workers=1, backend="inline")
    assert isinstance(info.value.__cause__, TypeError)


def test_min_by_values_that_do_not_compare_are_the_value_functions_fault() -> None:
    flow = Dataflow("bad_min")
    inp = flow.new_input()
    inp.stream.min_by(lambda r: r[0], lambda r: r[1]).collect("out")
    inp.send([(1, 2), (1, "x")])
    with pytest.raises(UserFunctionError, match="do not compare") as info:
        flow.run(workers=1, backend="inline")
    assert isinstance(info.value.__cause__, TypeError)
