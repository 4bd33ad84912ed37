"""Random dataflow graphs with loops and nested scopes, and a brute-force reachability oracle."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from hypothesis import strategies as st

from progress import Graph, GraphBuilder, Location, PathSummary, Timestamp, source, target
from progress.timestamp import less_equal


@dataclass
class _Draft:
    builder: GraphBuilder = field(default_factory=GraphBuilder)
    count: int = 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"


def _region(draw: st.DrawFn, d: _Draft, depth: int, entry: Location, max_depth: int) -> Location:
    """Append 1-3 blocks after ``entry`` at ``depth``; return the region's exit source."""
    b = d.builder
    current = entry
    for _ in range(draw(st.integers(1, 3))):
        kinds = ["op", "delay", "diamond", "fanout"] + (["loop"] if depth < max_depth else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "op":
            n = b.add_operator(d.name("op"), depth=depth)
            b.add_edge(current, target(n))
            current = source(n)
        elif kind == "delay":
            # An operator whose output is later than its input (e.g. a buffer to the next round).
            step = draw(st.integers(1, 2))
            n = b.add_node(d.name("delay"), [depth], [depth], {(0, 0): PathSummary(0, step, ())})
            b.add_edge(current, target(n))
            current = source(n)
        elif kind == "diamond":
            left = b.add_operator(d.name("left"), depth=depth)
            right = b.add_operator(d.name("right"), depth=depth)
            join = b.add_operator(d.name("join"), inputs=2, depth=depth)
            b.add_edge(current, target(left))
            b.add_edge(current, target(right))
            b.add_edge(source(left), target(join, 0))
            b.add_edge(source(right), target(join, 1))
            current = source(join)
        elif kind == "fanout":
            sink = b.add_operator(d.name("sink"), inputs=1, outputs=0, depth=depth)
            b.add_edge(current, target(sink))
        else:
            ingress = b.add_ingress(d.name("enter"), depth)
            merge = b.add_operator(d.name("merge"), inputs=2, depth=depth + 1)
            b.add_edge(current, target(ingress))
            b.add_edge(source(ingress), target(merge, 0))
            body_exit = _region(draw, d, depth + 1, source(merge), max_depth)
            feedback = b.add_feedback(d.name("feedback"), depth + 1, step=draw(st.integers(1, 2)))
            egress = b.add_egress(d.name("leave"), depth + 1)
            b.add_edge(body_exit, target(feedback))
            b.add_edge(source(feedback), target(merge, 1))
            b.add_edge(body_exit, target(egress))
            current = source(egress)
    return current


@st.composite
def graphs(draw: st.DrawFn, max_depth: int = 2) -> Graph:
    """A dataflow: an input, then blocks (operators, delays, diamonds, loops, nested loops)."""
    d = _Draft()
    inp = d.builder.add_operator("input", inputs=0, outputs=1)
    exit_ = _region(draw, d, 0, source(inp), max_depth)
    sink = d.builder.add_operator("output", inputs=1, outputs=0)
    d.builder.add_edge(exit_, target(sink))
    return d.builder.build()


def times_at(graph: Graph, loc: Location, max_coord: int = 3) -> st.SearchStrategy[Timestamp]:
    depth = graph.depth(loc)
    return st.tuples(*[st.integers(0, max_coord) for _ in range(depth + 1)])


@st.composite
def pointstamps(draw: st.DrawFn, graph: Graph, max_coord: int = 3) -> tuple[Location, Timestamp]:
    loc = draw(st.sampled_from(graph.locations))
    return loc, draw(times_at(graph, loc, max_coord))


def reachable_times(
    graph: Graph, live: list[tuple[Location, Timestamp]]
) -> dict[Location, set[Timestamp]]:
    """Brute force: every minimal concrete time each location can be reached at from ``live``.

    Walks the graph one step at a time with concrete timestamps (only each step's own
    ``results_in``, never composed summaries). A time reached at a location where a
    time ``<=`` it was already reached is not walked on: every step is monotone, so
    whatever it leads to is at or after what the smaller time leads to.
    """
    found: dict[Location, set[Timestamp]] = {loc: set() for loc in graph.locations}
    work: deque[tuple[Location, Timestamp]] = deque(live)
    while work:
        loc, t = work.popleft()
        here = found[loc]
        if any(less_equal(u, t) for u in here):
            continue
        for u in [u for u in here if less_equal(t, u)]:
            here.discard(u)
        here.add(t)
        for nxt, step in graph.successors(loc):
            r = step.results_in(t)
            if r is not None:
                work.append((nxt, r))
    return found
