"""The dataflow's logical graph as the scaling policy reads it.

DS2 walks the graph from the sources in topological order, so that each operator's
input rate is known before its parallelism is chosen. A timely graph may have loops;
every cycle passes through a ``feedback`` vertex, so the edges out of feedback vertices
are the back edges, and any cycle left (a graph made by hand) is broken where a
depth-first search from the roots closes it. What remains is a DAG, ordered.

The graph comes from :meth:`timely.graph.plan.Plan.describe` (every event log's header has
it): ``vertices`` as ``[name, kind]`` and ``edges`` as ``[src, dst, channel]``, where
vertices are named by their index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ROOT_KINDS = frozenset({"input", "source"})
"""Vertices whose records come from outside the dataflow (the driver, a source)."""
SYSTEM_KINDS = frozenset({"ingress", "egress", "feedback"})
"""The loop plumbing: forwards that carry records into, out of and around a loop."""


@dataclass(frozen=True)
class Edge:
    """Records from ``src`` reach ``dst`` through a channel of kind ``channel``."""

    src: int
    dst: int
    channel: str = "pipeline"


@dataclass(frozen=True)
class Graph:
    """Vertices (by index: names and kinds) and the edges between them."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    edges: tuple[Edge, ...]
    back: frozenset[int] = field(init=False)
    """Indices into ``edges`` of the back edges (ignored by the order)."""
    order: tuple[int, ...] = field(init=False)
    """Every vertex, each after all its upstreams along the forward edges."""
    _producers: dict[tuple[int, bool], list[int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.names) != len(self.kinds):
            raise ValueError("a graph needs one kind per vertex name")
        n = len(self.names)
        for e in self.edges:
            if not (0 <= e.src < n and 0 <= e.dst < n):
                raise ValueError(f"edge {e} names a vertex that is not in the graph")
        back = self._back_edges()
        object.__setattr__(self, "back", back)
        object.__setattr__(self, "order", self._topological(back))
        producers: dict[tuple[int, bool], set[int]] = {}
        for e in self.edges:  # asked once per message of a live log: worked out here
            producers.setdefault((e.dst, False), set()).add(e.src)
            if e.channel != "pipeline":
                producers.setdefault((e.dst, True), set()).add(e.src)
        object.__setattr__(
            self, "_producers", {key: sorted(found) for key, found in producers.items()}
        )

    @classmethod
    def from_describe(cls, described: Mapping[str, Any]) -> Graph:
        """The graph that :meth:`~timely.graph.plan.Plan.describe` gives (or a log header's)."""
        vertices = described["vertices"]
        return cls(
            tuple(str(name) for name, _ in vertices),
            tuple(str(kind) for _, kind in vertices),
            tuple(Edge(int(s), int(d), str(c)) for s, d, c in described["edges"]),
        )

    @classmethod
    def of(cls, names: Sequence[str], edges: Sequence[tuple[int, int]] = ()) -> Graph:
        """A graph by hand: user vertices, pipeline edges; those without inputs are roots."""
        fed = {d for _, d in edges}
        kinds = tuple("vertex" if v in fed else "input" for v in range(len(names)))
        return cls(tuple(names), kinds, tuple(Edge(s, d) for s, d in edges))

    # -- questions the policy asks ---------------------------------------------------------
    def index(self, vertex: int | str) -> int:
        """A vertex named by index or by its (unique) name."""
        if isinstance(vertex, int):
            if not 0 <= vertex < len(self.names):
                raise KeyError(f"no vertex {vertex} in a graph of {len(self.names)}")
            return vertex
        found = [i for i, name in enumerate(self.names) if name == vertex]
        if len(found) != 1:
            what = "no vertex" if not found else f"{len(found)} vertices"
            raise KeyError(f"{what} named {vertex!r}; name it by index instead")
        return found[0]

    def is_root(self, v: int) -> bool:
        """Whether ``v``'s records come from outside (an input, a source, or no in-edges)."""
        return self.kinds[v] in ROOT_KINDS or not any(e.dst == v for e in self.edges)

    @property
    def roots(self) -> tuple[int, ...]:
        return tuple(v for v in range(len(self.names)) if self.is_root(v))

    def inputs(self, v: int) -> list[tuple[int, bool]]:
        """``(upstream, is_back_edge)`` for each edge into ``v`` (one per edge: a vertex
        fed twice by the same upstream processes its records twice)."""
        return [(e.src, i in self.back) for i, e in enumerate(self.edges) if e.dst == v]

    def producers(self, v: int, wire: bool = False) -> list[int]:
        """The distinct vertices whose records reach ``v``; ``wire``: only those whose
        records may cross to another worker (a pipeline stays on its worker)."""
        return list(self._producers.get((v, wire), ()))

    def pinned(self, v: int) -> bool:
        """Whether every record ``v`` gets is gathered onto one worker (the runtime's
        outputs): more workers cannot share its work."""
        channels = [e.channel for e in self.edges if e.dst == v]
        return bool(channels) and all(c == "gather" for c in channels)

    # -- construction ----------------------------------------------------------------------
    def _back_edges(self) -> frozenset[int]:
        back = {i for i, e in enumerate(self.edges) if self.kinds[e.src] == "feedback"}
        out: dict[int, list[tuple[int, int]]] = {}
        for i, e in enumerate(self.edges):
            if i not in back:
                out.setdefault(e.src, []).append((i, e.dst))
        n = len(self.names)
        state = [0] * n  # 0 unseen, 1 on the stack, 2 done
        starts = [v for v in range(n) if self.is_root(v)] + list(range(n))
        for start in starts:
            if state[start]:
                continue
            state[start] = 1
            stack = [(start, iter(out.get(start, [])))]
            while stack:
                v, it = stack[-1]
                for i, w in it:
                    if state[w] == 1:
                        back.add(i)  # closes a cycle: w is an ancestor of v
                    elif state[w] == 0:
                        state[w] = 1
                        stack.append((w, iter(out.get(w, []))))
                        break
                else:
                    state[v] = 2
                    stack.pop()
        return frozenset(back)

    def _topological(self, back: frozenset[int]) -> tuple[int, ...]:
        n = len(self.names)
        indegree = [0] * n
        for i, e in enumerate(self.edges):
            if i not in back:
                indegree[e.dst] += 1
        ready = [v for v in range(n) if indegree[v] == 0]
        order: list[int] = []
        while ready:
            ready.sort(reverse=True)
            v = ready.pop()  # the lowest index first: a stable order for reports
            order.append(v)
            for i, e in enumerate(self.edges):
                if e.src == v and i not in back:
                    indegree[e.dst] -= 1
                    if indegree[e.dst] == 0:
                        ready.append(e.dst)
        assert len(order) == n, "the forward edges form a cycle"
        return tuple(order)
