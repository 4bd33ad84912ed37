"""Reachability: build-time validation and could-result-in against brute force."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from progress import Graph, GraphBuilder, GraphError, PathSummary, source, target
from progress.timestamp import less_equal
from tests.progress.graphs import graphs, pointstamps, reachable_times


@given(st.data())
def test_could_result_in_matches_brute_force(data: st.DataObject) -> None:
    graph: Graph = data.draw(graphs())
    a = data.draw(pointstamps(graph))
    found = reachable_times(graph, [a])
    for _ in range(10):
        b = data.draw(pointstamps(graph, max_coord=6))
        expected = any(less_equal(t, b[1]) for t in found[b[0]])
        assert graph.could_result_in(a, b) == expected, (a, b, sorted(found[b[0]]))


@given(st.data())
def test_summaries_give_exactly_the_minimal_reachable_times(data: st.DataObject) -> None:
    graph: Graph = data.draw(graphs())
    loc, time = data.draw(pointstamps(graph))
    found = reachable_times(graph, [(loc, time)])
    for dst in graph.locations:
        via_summaries = {s.results_in(time) for s in graph.summaries(loc, dst)} - {None}
        minimal = {
            t for t in via_summaries if not any(u != t and less_equal(u, t) for u in via_summaries)
        }
        assert minimal == found[dst], (graph.describe(dst), minimal, found[dst])


@given(graphs())
def test_every_cycle_strictly_advances(graph: Graph) -> None:
    for loc in graph.locations:
        for s in graph.summaries(loc, loc):
            if s != PathSummary.identity():
                assert s.advances()
                t = tuple(range(graph.depth(loc) + 1))
                r = s.results_in(t)
                assert r is not None and not less_equal(r, t)


def _loop_without_feedback() -> GraphBuilder:
    b = GraphBuilder()
    inp = b.add_operator("input", inputs=0)
    enter = b.add_ingress("enter", 0)
    merge = b.add_operator("merge", inputs=2, depth=1)
    step = b.add_operator("step", depth=1)
    b.add_edge(source(inp), target(enter))
    b.add_edge(source(enter), target(merge, 0))
    b.add_edge(source(merge), target(step))
    b.add_edge(source(step), target(merge, 1))
    return b


def test_cycle_without_feedback_is_rejected_and_named() -> None:
    with pytest.raises(
        GraphError, match=r"cycle does not advance time: .*'merge'.*'step'.*feedback"
    ):
        _loop_without_feedback().build()


def test_cycle_through_outer_scope_without_feedback_is_rejected() -> None:
    # Leaving the loop and coming back in resets the counter: not an advance.
    b = GraphBuilder()
    enter = b.add_ingress("enter", 0)
    body = b.add_operator("body", depth=1)
    leave = b.add_egress("leave", 1)
    back = b.add_operator("back")
    b.add_edge(source(enter), target(body))
    b.add_edge(source(body), target(leave))
    b.add_edge(source(leave), target(back))
    b.add_edge(source(back), target(enter))
    with pytest.raises(GraphError, match=r"'enter'.*'body'.*'leave'.*'back'|'back'.*'enter'"):
        b.build()


def test_edge_between_depths_is_rejected() -> None:
    b = GraphBuilder()
    a = b.add_operator("a", depth=0)
    c = b.add_operator("c", depth=1)
    b.add_edge(source(a), target(c))
    with pytest.raises(GraphError, match=r"loop depth 0 to 1.*ingress/egress"):
        b.build()


def test_bad_ports_and_summaries_are_rejected() -> None:
    b = GraphBuilder()
    a = b.add_operator("a")
    b.add_edge(source(a, 3), target(a))
    with pytest.raises(GraphError, match="no output 3"):
        b.build()
    with pytest.raises(GraphError, match="maps input 0"):
        GraphBuilder().add_node("x", [0], [0], {(0, 0): PathSummary.ingress()})
    with pytest.raises(GraphError, match="egress needs a loop scope"):
        GraphBuilder().add_egress("x", 0)
    with pytest.raises(GraphError, match="differ in depth"):
        GraphBuilder().add_node("x", [0], [1])


def test_node_without_internal_path_blocks_reachability() -> None:
    b = GraphBuilder()
    a = b.add_node("a", [0], [0], {})
    c = b.add_operator("c")
    b.add_edge(source(a), target(c))
    g = b.build()
    assert not g.could_result_in((target(a), (0,)), (target(c), (9,)))
    assert g.could_result_in((source(a), (0,)), (target(c), (0,)))
    assert not g.could_result_in((source(a), (1,)), (target(c), (0,)))


def test_wrong_timestamp_depth_is_refused() -> None:
    b = GraphBuilder()
    a = b.add_operator("a", depth=1)
    g = b.build()
    with pytest.raises(ValueError, match="needs 2 coordinates"):
        g.check_time(target(a), (0,))
