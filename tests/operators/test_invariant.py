"""Streams from outside a loop, used inside its body, are loop-invariant.

Every iteration of an epoch sees them (``Stream.enter(loop, invariant=True)``; a stream of
an enclosing scope used by a step in the body is entered so by itself). Graph algorithms
then read as they are written in plain LINQ, checked here against plain-Python
references on random graphs, epochs, worker counts and delivery orders.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
import timely.worker.loop
from operators.join import Join
from tests.examples.test_connected_components import union_find_labels
from tests.operators.test_properties import counter_loop
from timely import Dataflow, GraphBuildError, Stream

graphs = st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30)
workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)


def reachable(edges: list[tuple[int, int]], roots: set[int]) -> set[int]:
    adj: dict[int, list[int]] = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
    seen = set(roots)
    stack = list(roots)
    while stack:
        for m in adj.get(stack.pop(), []):
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen


def reach_flow() -> tuple[Dataflow, Any]:
    """Reachability from node 0 over each epoch's edges: the body joins each round's
    new nodes with the edges, which come from outside the loop."""
    flow = Dataflow("reach")
    edges = flow.new_input("edges")
    roots = edges.stream.where(lambda e: e[0] == 0).select(lambda e: 0).distinct()
    roots.iterate(
        lambda reached: reached.join(edges.stream, lambda x: x, lambda e: e[0], lambda x, e: e[1]),
        until="fixpoint",
    ).collect("reach")
    return flow, edges


def reach_run(epochs: list[list[tuple[int, int]]], w: int, seed: int) -> dict[int, set[int]]:
    """Per epoch, the nodes reachable from node 0 over that epoch's edges."""
    flow, edges = reach_flow()
    for e, batch in enumerate(epochs):
        edges.advance_to(e)
        edges.send(batch)
    out = flow.run(workers=w, backend="inline", seed=seed)
    got: dict[int, set[int]] = {}
    for e, node in out["reach"]:
        got.setdefault(e, set()).add(node)
    return got


def reach_reference(epochs: list[list[tuple[int, int]]]) -> dict[int, set[int]]:
    return {
        e: reachable(batch, {0}) for e, batch in enumerate(epochs) if any(a == 0 for a, _ in batch)
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(graphs, min_size=1, max_size=3), workers, seeds)
def test_reachability_in_plain_linq_equals_a_graph_search(
    epochs: list[list[tuple[int, int]]], w: int, seed: int
) -> None:
    """Each epoch's edges are seen at every round of that epoch's loop, and only there."""
    assert reach_run(epochs, w, seed) == reach_reference(epochs)


def test_mutation_a_join_that_indexes_the_outer_side_at_round_0_only_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the loop-invariant index (the outer side joined at round 0 only, as a
    plain ``enter`` gives it), the join misses the edges of later rounds: caught."""

    def per_time(self: Join, input: int, records: list[Any], time: Any) -> None:
        table = self.table_at(self.sides, time)
        tagged = [(input, r) for r in records]
        self.group_into(table, lambda r: self.keys[input](r[1]), tagged, time)

    def round_only(self: Join, time: Any) -> None:
        out = []
        for group in self.sides.pop(time).values():
            lefts = [r for i, r in group if i == 0]
            rights = [r for i, r in group if i == 1]
            out.extend(self.result(a, b) for a in lefts for b in rights)
        self.send_by(0, out, time)

    monkeypatch.setattr(Join, "on_recv", per_time)
    monkeypatch.setattr(Join, "_notify_arranged", round_only)
    chain = [[(0, 1), (1, 2), (2, 3)]]  # three rounds: the edges are needed at each
    assert reach_run(chain, 1, 0) == {0: {0, 1}}
    assert reach_run(chain, 2, 0) == {0: {0, 1}}


@settings(max_examples=100, deadline=None)
@given(graphs, workers, seeds)
def test_connected_components_by_label_propagation_in_plain_linq(
    edges: list[tuple[int, int]], w: int, seed: int
) -> None:
    """Each node's label is the least node it is connected to: labels go round, joined
    with the (undirected) edges from outside the loop, and the least one per node is
    kept (``min_by``) — no custom vertex."""
    flow = Dataflow("cc")
    inp = flow.new_input("edges")
    both = inp.stream.select_many(lambda e: [e, (e[1], e[0])])
    labels = both.select(lambda e: (e[0], e[0])).distinct()
    spread = labels.iterate(
        lambda ls: ls.join(both, lambda lb: lb[0], lambda e: e[0], lambda lb, e: (e[1], lb[1])),
        until="fixpoint",
    )
    spread.min_by(lambda lb: lb[0], lambda lb: lb[1]).collect("cc")
    inp.send(edges)
    out = flow.run(workers=w, backend="inline", seed=seed)
    assert dict(r for _, r in out["cc"]) == union_find_labels(edges)


def _counts(xs: list[int]) -> list[Any]:
    return list(Counter(x % 3 for x in xs).items())


def _groups(xs: list[int]) -> list[Any]:
    return [(k, sorted(x for x in xs if x % 3 == k)) for k in {x % 3 for x in xs}]


def _least(xs: list[int]) -> list[Any]:
    return [min(x for x in xs if x % 3 == k) for k in {x % 3 for x in xs}]


# Per-time operators over a round's counters and the table from outside the loop: how to
# build each in the loop, and what it gives for a round's counters ``xs`` and the table.
PER_TIME: dict[str, tuple[Callable[[Stream, Stream], Stream], Callable[..., list[Any]]]] = {
    "count_by": (
        lambda xs, t: xs.concat(t.enter(xs.scope, invariant=True)).count_by(lambda x: x % 3),
        lambda xs, t: _counts([*xs, *t]),
    ),
    "distinct": (
        lambda xs, t: xs.concat(t.enter(xs.scope, invariant=True)).distinct(),
        lambda xs, t: list({*xs, *t}),
    ),
    "group_by": (
        lambda xs, t: xs.concat(t.enter(xs.scope, invariant=True)).group_by(
            lambda x: x % 3, lambda k, vs: [(k, sorted(vs))]
        ),
        lambda xs, t: _groups([*xs, *t]),
    ),
    "min_by": (
        lambda xs, t: xs.concat(t.enter(xs.scope, invariant=True)).min_by(
            lambda x: x % 3, lambda x: x
        ),
        lambda xs, t: _least([*xs, *t]),
    ),
    "join, entered by hand": (
        lambda xs, t: xs.join(t.enter(xs.scope, invariant=True), lambda x: x % 3, lambda y: y % 3),
        lambda xs, t: [(x, y) for x in xs for y in t if x % 3 == y % 3],
    ),
    "join, entered for it": (
        lambda xs, t: xs.join(t, lambda x: x % 3, lambda y: y % 3),
        lambda xs, t: [(x, y) for x in xs for y in t if x % 3 == y % 3],
    ),
}


def per_time_run(op: str, starts: list[int], table: list[int], w: int, seed: int) -> list[Any]:
    """A counter goes round (x -> x + 1 until 6); each round, ``op`` combines the round's
    counters with the table from outside the loop."""
    flow = Dataflow("rounds")
    a = flow.new_input("starts")
    b = flow.new_input("table")
    head = counter_loop(flow, a.stream, 6)
    PER_TIME[op][0](head, b.stream).leave().collect("out")
    a.send(starts)
    b.send(table)
    out = flow.run(workers=w, backend="inline", seed=seed)
    return sorted(repr(r) for _, r in out["out"])


def per_time_reference(op: str, starts: list[int], table: list[int]) -> list[Any]:
    """The table combined with each round's counters, as if present at every round."""
    want: list[Any] = []
    for i in range(7):
        here = [x + i for x in starts if x + i < 6 or i == 0]
        if not here:
            break
        want.extend(PER_TIME[op][1](here, table))
    return sorted(repr(r) for r in want)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(sorted(PER_TIME)),
    st.lists(st.integers(0, 20), min_size=1, max_size=6),
    st.lists(st.integers(0, 20), max_size=6),
    workers,
    seeds,
)
def test_per_time_operators_in_a_loop_see_the_entered_stream_at_every_round(
    op: str, starts: list[int], table: list[int], w: int, seed: int
) -> None:
    """Each per-time operator over a round's records and an entered stream equals the
    reference that has the entered stream at every round."""
    assert per_time_run(op, starts, table, w, seed) == per_time_reference(op, starts, table)


def outer_indexes(session: Any) -> list[list[Any]]:
    """The outer times each worker's join (with an outer side) holds an index of."""
    return [
        vertex.arranged.times()
        for worker in session.worker_list
        for vertex in worker.vertices
        if isinstance(vertex, Join) and vertex.arranged is not None
    ]


def test_the_outer_side_of_a_join_is_indexed_once_per_epoch_and_dropped_after() -> None:
    """Each worker's join keeps one index of an epoch's outer records, and lets an
    epoch's index go once the loop is done with it (checked at its next notification,
    so the last epochs' may still be held when the run ends)."""
    epochs = [[(0, 1), (1, 2), (2, 3)], [(0, 4), (4, 5)], [(0, 6)], [(0, 7)], [(0, 8)]]
    flow, edges = reach_flow()
    with flow.activate(workers=2, backend="inline") as session:
        for e, batch in enumerate(epochs):
            edges.advance_to(e)
            edges.send(batch)
        edges.close()
        out = session.join()
        kept = outer_indexes(session)
    assert len(kept) == 2  # one join per worker, with an outer side
    assert any(kept)  # the index is used ...
    assert all(len(ts) <= 2 and all(t >= (3, 0) for t in ts) for ts in kept)  # ... let go
    assert sorted(out["reach"]) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 4),
        (1, 5),
        (2, 0),
        (2, 6),
        (3, 0),
        (3, 7),
        (4, 0),
        (4, 8),
    ]


def test_mutation_entered_records_seen_at_iteration_0_only_are_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker delivers an invariant stream at every round (``count_by`` over a
    concatenation): with the delivery at round 0 only, the counts of later rounds miss
    the table."""

    def round_0_only(self: Any, v: int, port: int, time: Any, records: list[Any]) -> None:
        if port not in self.plan.vertices[v].marks_ports:
            self._activate(v, port, time, self.vertices[v].on_recv, port, records, time)

    want = per_time_reference("count_by", [1, 2], [0, 3])
    assert per_time_run("count_by", [1, 2], [0, 3], 2, 0) == want
    monkeypatch.setattr(timely.worker.loop.Worker, "_recv_in_loop", round_0_only)
    assert per_time_run("count_by", [1, 2], [0, 3], 2, 0) != want


def test_join_streaming_in_a_loop_gets_an_outer_stream_once() -> None:
    """``join_streaming`` keeps every record across times itself: an outer stream is
    entered plainly for it (once, at round 0), so each pair comes out once."""
    flow = Dataflow("js")
    edges = flow.new_input("edges")
    starts = flow.new_input("starts")
    starts.stream.iterate(
        lambda reached: reached.join_streaming(
            edges.stream, lambda x: x, lambda e: e[0], lambda x, e: e[1]
        ),
        until="fixpoint",
    ).collect("reach")
    edges.send([(0, 1), (1, 2), (2, 3)])
    starts.send([0])
    out = flow.run(workers=2, backend="inline", seed=3)
    assert sorted(r for _, r in out["reach"]) == [0, 1, 2, 3]


def test_what_a_loop_cannot_see_at_every_iteration_is_refused_when_building() -> None:
    flow = Dataflow("refused")
    s = flow.new_input().stream
    outer = flow.loop("outer")
    inner = flow.loop("inner", parent=outer)
    deep = s.enter(outer).enter(inner)
    with pytest.raises(Exception, match="nested more than one loop deeper"):
        deep.concat(s)  # from two loops out: the outer loop's rounds would not see it
    entered = s.enter(outer, invariant=True)
    with pytest.raises(Exception, match="its inputs are all loop-invariant"):
        entered.select(lambda x: x)  # alone, it would be seen at round 0 only


def nested_reach(edges: list[tuple[int, int]], w: int, seed: int) -> set[int]:
    """Reachability as an outer fixpoint whose body is an inner loop of one hop, joined
    with the top-level edges: a node at distance k is found at the outer round k."""
    flow = Dataflow("nested")
    inp = flow.new_input("edges")
    roots = inp.stream.where(lambda e: e[0] == 0).select(lambda e: 0).distinct()
    roots.iterate(
        lambda outer: outer.iterate(
            lambda reached: reached.join(
                inp.stream, lambda x: x, lambda e: e[0], lambda x, e: e[1]
            ),
            until="fixpoint",
            max_iters=1,
        ),
        until="fixpoint",
    ).collect("reach")
    inp.send(edges)
    out = flow.run(workers=w, backend="inline", seed=seed)
    return {r for _, r in out["reach"]}


@settings(max_examples=60, deadline=None)
@given(graphs, workers, seeds)
def test_a_join_two_loops_in_sees_the_top_level_stream_at_every_round(
    edges: list[tuple[int, int]], w: int, seed: int
) -> None:
    """The join needs the edges, entered loop by loop and kept once per epoch, at every
    round of both loops."""
    assert nested_reach(edges, w, seed) == reach_reference([edges]).get(0, set())


def test_mutation_a_nested_join_keyed_by_the_inner_loop_only_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keeping the outer side per outer-loop round (as for a stream from just outside)
    loses it after the outer loop's round 0: caught."""
    chain = [(0, 1), (1, 2), (2, 3)]
    assert nested_reach(chain, 2, 0) == {0, 1, 2, 3}
    monkeypatch.setattr(Join, "_round_0", lambda self, time: (*time[:-1], 0))
    assert nested_reach(chain, 2, 0) == {0, 1}


def test_a_worker_with_no_rounds_lets_the_outer_indexes_go() -> None:
    """Roots only in the first two epochs, edges in all thirty: the loop has no round in
    most epochs, so no notification comes; each new epoch's edges let the finished
    epochs' indexes go all the same."""
    flow = Dataflow("idle")
    edges = flow.new_input("edges")
    roots = flow.new_input("roots")
    roots.stream.iterate(
        lambda reached: reached.join(edges.stream, lambda x: x, lambda e: e[0], lambda x, e: e[1]),
        until="fixpoint",
    ).collect("reach")
    with flow.activate(workers=2, backend="inline", seed=1) as session:
        for e in range(30):
            edges.advance_to(e)
            roots.advance_to(e)
            edges.send([(k, k + 1) for k in range(10)])
            if e < 2:
                roots.send([0])
        edges.close()
        roots.close()
        out = session.join()
        held = outer_indexes(session)
    assert sorted(out["reach"]) == [(e, n) for e in range(2) for n in range(11)]
    assert len(held) == 2 and all(len(times) <= 1 for times in held), held


def test_an_invariant_stream_cannot_enter_a_loop_again() -> None:
    """Entered into an inner loop, an outer loop's invariant stream would be seen at the
    outer loop's round 0 only: refused, with what to write instead."""
    flow = Dataflow("twice")
    table = flow.new_input("table").stream
    outer = flow.loop("outer")
    inner = flow.loop("inner", parent=outer)
    kept = table.enter(outer, invariant=True)
    with pytest.raises(GraphBuildError, match="join with the stream from outside both loops"):
        kept.enter(inner)
    with pytest.raises(GraphBuildError, match="join with the stream from outside both loops"):
        kept.enter(inner, invariant=True)
