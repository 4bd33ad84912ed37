"""Streams from outside a loop, used inside its body, are loop-invariant.

Every iteration of an epoch sees them (``Stream.enter(loop, invariant=True)``; a stream of
an enclosing scope used by a step in the body is entered so by itself). Graph algorithms
then read as they are written in plain LINQ, checked here against plain-Python
references on random graphs, epochs, worker counts and delivery orders.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
import timely.worker
from tests.examples.test_connected_components import union_find_labels
from tests.operators.test_properties import counter_loop
from timely import Dataflow

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


def test_mutation_entered_records_seen_at_iteration_0_only_are_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the invariant delivery (entered records at round 0 only, as a plain
    ``enter`` gives them), the join misses the edges of later rounds: caught."""

    def round_0_only(self: Any, v: int, port: int, time: Any, records: list[Any]) -> None:
        if port not in self.plan.vertices[v].marks_ports:
            self._activate(v, port, time, self.vertices[v].on_recv, port, records, time)

    monkeypatch.setattr(timely.worker.Worker, "_recv_in_loop", round_0_only)
    chain = [[(0, 1), (1, 2), (2, 3)]]  # three rounds: the edges are needed at each
    assert reach_run(chain, 2, 0) != reach_reference(chain)
    assert reach_run(chain, 1, 0) != reach_reference(chain)


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


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 20), min_size=1, max_size=6),
    st.lists(st.integers(0, 20), max_size=6),
    workers,
    seeds,
)
def test_per_time_operators_in_a_loop_see_the_entered_stream_at_every_round(
    starts: list[int], table: list[int], w: int, seed: int
) -> None:
    """A counter goes round (x -> x + 1 until 6); each round, ``count_by`` counts the
    round's counters together with the table from outside (concatenated: present at
    every round); the reference counts the table at each round too."""
    flow = Dataflow("rounds")
    a = flow.new_input("starts")
    b = flow.new_input("table")
    head = counter_loop(flow, a.stream, 6)
    counted = head.concat(b.stream.enter(head.scope, invariant=True)).count_by(lambda x: x % 3)
    counted.leave().collect("counts")
    a.send(starts)
    b.send(table)
    out = flow.run(workers=w, backend="inline", seed=seed)
    want: list[Any] = []
    rounds = [[x + i for x in starts if x + i < 6 or i == 0] for i in range(7)]
    for here in rounds:
        if not here:
            break
        counts: dict[int, int] = {}
        for x in [*here, *table]:
            counts[x % 3] = counts.get(x % 3, 0) + 1
        want.extend(counts.items())
    assert sorted(r for _, r in out["counts"]) == sorted(want)


def test_the_entered_stream_is_kept_once_per_epoch_and_dropped_after() -> None:
    """Each worker keeps one copy of an epoch's entered records per vertex, and lets
    an epoch's copy go once the loop is done with it."""
    epochs = [[(0, 1), (1, 2), (2, 3)], [(0, 4), (4, 5)], [(0, 6)]]
    flow, edges = reach_flow()
    with flow.activate(workers=2, backend="inline") as session:
        for e, batch in enumerate(epochs):
            edges.advance_to(e)
            edges.send(batch)
        edges.close()
        out = session.join()
        kept = [
            outers
            for worker in session.worker_list  # type: ignore[attr-defined]
            for outers in worker._invariant.values()
        ]
    assert kept and all(len(outers) <= 1 for outers in kept)  # only the last epoch's
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
    ]


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
