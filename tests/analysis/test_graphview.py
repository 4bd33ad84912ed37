"""The graph's layout and drawing: every edge but a loop's feedback goes down a layer or
more, each vertex on the layer of its longest path; loops (nested too) and arbitrary
cycles lay out; the SVG is well-formed with the ids a live page relies on."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import operators  # noqa: F401  (select, where, count_by, join, iterate until=)
from analysis.graphview import Graph, Layout, back_edges, layout, shade, svg
from timely import Dataflow

SVG = "{http://www.w3.org/2000/svg}"


def _loop() -> Dataflow:
    flow = Dataflow("loop")
    nums = flow.new_input("nums")
    looped = nums.stream.select(abs, name="abs").iterate(
        lambda s: s.select(lambda x: x - 1, name="dec").where(lambda x: x > 0, name="pos"),
        max_iters=5,
    )
    looped.count_by(lambda x: x % 3).collect("out")
    return flow


def _nested() -> Dataflow:
    flow = Dataflow("nested")
    nums = flow.new_input("nums")
    nums.stream.iterate(
        lambda s: s.iterate(lambda t: t.select(lambda x: x + 1, name="inc"), max_iters=3).exchange(
            lambda x: x, name="spread"
        ),
        max_iters=2,
    ).collect("out")
    return flow


def _fixpoint() -> Dataflow:
    flow = Dataflow("fixpoint")
    nums = flow.new_input("nums")
    nums.stream.iterate(
        lambda s: s.select(lambda x: x // 2, name="half"), until="fixpoint"
    ).collect("out")
    return flow


def _join() -> Dataflow:
    flow = Dataflow("join")
    left = flow.new_input("left")
    right = flow.new_input("right")
    lk = left.stream.select(abs, name="left abs")
    rk = right.stream.select(abs, name="right abs")
    lk.join(rk, abs, lambda x: x % 5, name="joined").select(str, name="show").collect("out")
    return flow


DATAFLOWS = {"loop": _loop, "nested": _nested, "fixpoint": _fixpoint, "join": _join}


def _graph(name: str) -> Graph:
    return Graph.parse(DATAFLOWS[name]().build().describe())


def _check(g: Graph, lay: Layout) -> None:
    """The layout's promises, checked from their definitions."""
    n = len(g.names)
    assert sorted(v for vs in lay.layers for v in vs) == list(range(n))
    for k, vs in enumerate(lay.layers):
        assert vs and all(lay.layer[v] == k for v in vs)
    forward = [(s, d) for j, (s, d, _) in enumerate(g.edges) if j not in lay.back]
    for s, d in forward:
        assert lay.layer[s] < lay.layer[d], (g.names[s], g.names[d])
    for v in range(n):  # longest path from the roots
        below = [lay.layer[s] + 1 for s, d in forward if d == v]
        assert lay.layer[v] == max(below, default=0)
    for j in lay.back:  # a back edge closes a cycle: its target reaches its source
        s, d, _ = g.edges[j]
        assert s in _reachable(g, d)


def _reachable(g: Graph, start: int) -> set[int]:
    seen, todo = {start}, [start]
    while todo:
        v = todo.pop()
        for s, d, _ in g.edges:
            if s == v and d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


@pytest.mark.parametrize("name", sorted(DATAFLOWS))
def test_real_dataflows_lay_out_downwards_but_for_feedback(name: str) -> None:
    g = _graph(name)
    lay = layout(g)
    _check(g, lay)
    loops = sum(kind == "feedback" for kind in g.kinds)
    assert len(lay.back) == loops  # one edge closes each loop: into its head


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    """Any directed graph: cycles, self-loops, parallel edges, islands."""
    n = draw(st.integers(1, 9))
    pairs = st.tuples(
        st.integers(0, n - 1), st.integers(0, n - 1), st.sampled_from(["pipeline", "exchange"])
    )
    edges = draw(st.lists(pairs, max_size=20))
    kinds = draw(st.lists(st.sampled_from(["vertex", "input", "feedback"]), min_size=n, max_size=n))
    return Graph(tuple(f"v{i}" for i in range(n)), tuple(kinds), tuple(edges))


UNEVEN = Graph(
    ("short", "long", "step", "merge"),
    ("input", "input", "vertex", "vertex"),
    ((1, 2, "pipeline"), (2, 3, "pipeline"), (0, 3, "exchange")),
)
"""Two branches of different lengths meet: the longer one sets the layer, whichever
branch is laid out last."""


@given(graphs())
@example(UNEVEN)
def test_any_graph_lays_out_downwards_but_for_edges_that_close_cycles(g: Graph) -> None:
    _check(g, layout(g))
    _ids(svg(g))


def test_an_acyclic_graph_has_no_back_edges() -> None:
    g = _graph("join")
    assert back_edges(g) == frozenset()


def _crossings(g: Graph, lay: Layout) -> int:
    """Crossings between edges joining adjacent layers."""
    pos = {v: i for vs in lay.layers for i, v in enumerate(vs)}
    short = [(s, d) for s, d, _ in g.edges if lay.layer[d] == lay.layer[s] + 1]
    return sum(
        1
        for (a, b), (c, d) in itertools.combinations(short, 2)
        if lay.layer[a] == lay.layer[c] and (pos[a] - pos[c]) * (pos[b] - pos[d]) < 0
    )


def test_barycentre_sweeps_uncross_what_index_order_crosses() -> None:
    # a -> d, b -> c: in index order layer 1 reads [c, d] and the two edges cross.
    g = Graph(
        ("a", "b", "c", "d"),
        ("input",) * 2 + ("vertex",) * 2,
        ((0, 3, "pipeline"), (1, 2, "pipeline")),
    )
    assert _crossings(g, layout(g, sweeps=0)) == 1
    assert _crossings(g, layout(g)) == 0


def _ids(text: str) -> dict[str, ET.Element]:
    root = ET.fromstring(text)  # well-formed XML
    ids = [e.get("id") for e in root.iter() if e.get("id")]
    assert len(ids) == len(set(ids)), "ids must be unique"
    return {str(e.get("id")): e for e in root.iter() if e.get("id")}


def test_the_svg_has_a_group_box_and_label_per_vertex_and_a_group_per_edge() -> None:
    g = _graph("loop")
    labels = {v: f"CP 0.{v}" for v in range(len(g.names)) if v % 2}
    ids = _ids(svg(g, labels=labels, values={0: 1.0}))
    for v, name in enumerate(g.names):
        group = ids[f"v-{v}"]
        assert group.tag == SVG + "g" and group.get("data-name") == name
        assert f"v-{v}-box" in ids and ids[f"v-{v}-box"].tag == SVG + "rect"
        label = ids[f"v-{v}-label"]  # there to be updated even when empty
        assert label.tag == SVG + "text" and (label.text or "") == labels.get(v, "")
        assert any(t.text == name for t in group.iter(SVG + "text"))
    assert ids["v-0-box"].get("fill") == shade(1.0)
    for j, (_, _, channel) in enumerate(g.edges):
        texts = [t.text for t in ids[f"e-{j}"].iter(SVG + "text")]
        assert texts == ([] if channel == "pipeline" else [channel])
    back = {j for j in range(len(g.edges)) if "back" in (ids[f"e-{j}"].get("class") or "")}
    assert back == set(layout(g).back)


def test_system_vertices_are_marked_and_names_escaped() -> None:
    g = Graph(("<in> & out", "loop.enter"), ("input", "ingress"), ((0, 1, "pipeline"),))
    ids = _ids(svg(g))
    assert ids["v-0"].get("data-name") == "<in> & out"
    assert "system" not in (ids["v-0"].get("class") or "")
    assert "system" in (ids["v-1"].get("class") or "")


def test_shade_runs_white_to_orange_and_clips() -> None:
    assert shade(None) == shade(0.0) == shade(-1.0) == "#ffffff"
    assert shade(1.0) == shade(7.0) != shade(0.5) != shade(0.0)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"vertices": [["a", "input"]], "edges": [[0, 1, "pipeline"]]},
        {"vertices": [["a"]], "edges": []},
    ],
)
def test_parse_refuses_what_is_not_a_graph(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Graph.parse(data)
