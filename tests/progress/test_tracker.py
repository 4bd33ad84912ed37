"""The tracker against brute force, on random graphs with loops and nested scopes."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from progress import Graph, GraphBuilder, Location, Timestamp, Tracker, source, target
from tests.progress.graphs import graphs, pointstamps, reachable_times


def _oracle(
    graph: Graph, counts: Counter[tuple[Location, Timestamp]]
) -> dict[Location, set[Timestamp]]:
    live = [ps for ps, c in counts.items() if c > 0]
    return reachable_times(graph, live)


@given(st.data())
def test_frontiers_equal_brute_force_after_every_propagation(data: st.DataObject) -> None:
    graph: Graph = data.draw(graphs())
    tracker = Tracker(graph)
    counts: Counter[tuple[Location, Timestamp]] = Counter()
    previous: dict[Location, set[Timestamp]] = {loc: set() for loc in graph.locations}
    known = data.draw(st.lists(pointstamps(graph), min_size=1, max_size=6))
    for _ in range(data.draw(st.integers(1, 8))):
        batch = data.draw(
            st.lists(st.tuples(st.sampled_from(known), st.sampled_from([-1, 1, 1, 2])), max_size=5)
        )
        for (loc, time), delta in batch:
            tracker.update(loc, time, delta)
            counts[(loc, time)] += delta
        changes = tracker.propagate_all()
        expected = _oracle(graph, counts)
        for loc in graph.locations:
            assert set(tracker.frontier(loc)) == expected[loc], graph.describe(loc)
        # The reported changes are exactly the difference between consecutive frontiers.
        want = {(loc, t, -1) for loc in graph.locations for t in previous[loc] - expected[loc]}
        want |= {(loc, t, 1) for loc in graph.locations for t in expected[loc] - previous[loc]}
        assert set(changes) == want and len(changes) == len(want)
        assert tracker.is_idle() == (not any(c > 0 for c in counts.values()))
        previous = expected


@given(st.data())
def test_retracting_everything_empties_every_frontier(data: st.DataObject) -> None:
    graph: Graph = data.draw(graphs())
    stamps = data.draw(st.lists(pointstamps(graph), min_size=1, max_size=8))
    tracker = Tracker(graph)
    for loc, time in stamps:
        tracker.update(loc, time, 1)
    tracker.propagate_all()
    assert not tracker.is_idle()
    for loc, time in data.draw(st.permutations(stamps)):
        tracker.update(loc, time, -1)
        tracker.propagate_all()
    assert tracker.is_idle()
    assert all(tracker.frontier(loc) == () for loc in graph.locations)


def _chain(length: int) -> tuple[Graph, list[int]]:
    b = GraphBuilder()
    nodes = [b.add_operator("input", inputs=0)]
    for i in range(length):
        nodes.append(b.add_operator(f"op{i}"))
        b.add_edge(source(nodes[-2]), target(nodes[-1]))
    return b.build(), nodes


@pytest.mark.parametrize("length", [10, 100, 1000])
def test_work_grows_with_changes_not_with_graph(length: int) -> None:
    graph, nodes = _chain(length)
    tracker = Tracker(graph)
    tracker.update_source(nodes[0], 0, (0,), 1)
    tracker.propagate_all()
    # A message near the end of the chain, at a time the frontier already covers:
    tracker.worklist_pops = 0
    tracker.update_target(nodes[-1], 0, (5,), 1)
    changes = tracker.propagate_all()
    assert changes == []
    assert tracker.worklist_pops <= 2
    # Moving the input's capability moves every frontier: that work is the chain's length.
    tracker.worklist_pops = 0
    tracker.update_source(nodes[0], 0, (0,), -1)
    tracker.update_source(nodes[0], 0, (1,), 1)
    changes = tracker.propagate_all()
    assert tracker.frontier(target(nodes[-1])) == ((1,),)
    # Every location's frontier moved from (0,) to (1,): one -1 and one +1 each.
    assert sorted(changes) == sorted(
        [(loc, (0,), -1) for loc in graph.locations] + [(loc, (1,), 1) for loc in graph.locations]
    )
    assert tracker.worklist_pops >= len(graph.locations)
