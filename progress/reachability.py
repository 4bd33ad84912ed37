"""Reachability: which pointstamps could result in which.

A graph is nodes with target (input) and source (output) ports. Each node says, per
(input, output) pair, what its internal paths do to time (an antichain of path
summaries; none means the input cannot reach that output). Edges connect a source to
a target and leave time alone. Loop scopes are nodes too: ingress appends a loop
counter, egress drops it, feedback increments it. Every port has a loop depth (the
number of counters after the epoch) and an edge must join ports of equal depth.

``(l1, t1)`` *could result in* ``(l2, t2)`` iff some path summary ``s`` from ``l1`` to
``l2`` has ``s.results_in(t1) <= t2``. The graph keeps, per pair of locations, the
antichain of minimal summaries, computed lazily by a fixpoint that composes summaries
in normal form. Cycles that do not strictly advance time would let a vertex wait on
itself forever; ``GraphBuilder.build`` rejects them and names the cycle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from progress.antichain import Antichain
from progress.location import Location, Pointstamp, Port, source, target
from progress.summary import PathSummary
from progress.timestamp import Timestamp, less_equal

_Parents = dict[tuple[Location, PathSummary], tuple[Location, PathSummary | None]]
"""For each (location, summary) reached, the step it was reached from."""


def _insert(reach: dict[Location, Antichain[PathSummary]], loc: Location, s: PathSummary) -> bool:
    """Add ``s`` to ``loc``'s antichain in ``reach`` (made on first use); whether it
    was not dominated there."""
    found = reach.get(loc)
    if found is None:
        reach[loc] = Antichain.of(s)
        return True
    return found.insert(s)


class GraphError(ValueError):
    """Malformed graph: bad ports, mismatched depths, or a cycle that does not advance time."""


@dataclass(frozen=True)
class NodeSpec:
    """A node as the builder recorded it."""

    name: str
    input_depths: tuple[int, ...]
    output_depths: tuple[int, ...]
    internal: Mapping[tuple[int, int], tuple[PathSummary, ...]]


class GraphBuilder:
    """Collects nodes and edges; ``build()`` validates them into a :class:`Graph`."""

    def __init__(self) -> None:
        self._nodes: list[NodeSpec] = []
        self._edges: list[tuple[Location, Location]] = []

    def add_node(
        self,
        name: str,
        input_depths: Sequence[int],
        output_depths: Sequence[int],
        internal: Mapping[tuple[int, int], PathSummary | Iterable[PathSummary]] | None = None,
    ) -> int:
        """Add a node; return its index.

        ``internal`` maps ``(input, output)`` to the summaries of the node's paths
        between them. Without it, every input reaches every output unchanged (which
        needs equal depths).
        """
        ins, outs = tuple(input_depths), tuple(output_depths)
        if any(d < 0 for d in ins + outs):
            raise GraphError(f"node {name!r}: loop depths cannot be negative")
        table: dict[tuple[int, int], tuple[PathSummary, ...]] = {}
        if internal is None:
            for i, din in enumerate(ins):
                for o, dout in enumerate(outs):
                    if din != dout:
                        raise GraphError(
                            f"node {name!r}: input {i} (depth {din}) and output {o} "
                            f"(depth {dout}) differ in depth; pass `internal` summaries"
                        )
                    table[(i, o)] = (PathSummary.identity(),)
        else:
            for (i, o), summaries in internal.items():
                if not (0 <= i < len(ins) and 0 <= o < len(outs)):
                    raise GraphError(f"node {name!r}: no port pair ({i}, {o})")
                group = (summaries,) if isinstance(summaries, PathSummary) else tuple(summaries)
                chain: Antichain[PathSummary] = Antichain(group)
                for s in chain:
                    if s.output_depth(ins[i]) != outs[o] or ins[i] - s.pop < 0:
                        raise GraphError(
                            f"node {name!r}: summary {s!r} maps input {i} (depth {ins[i]}) "
                            f"to depth {s.output_depth(ins[i])}, but output {o} has depth "
                            f"{outs[o]}"
                        )
                if not chain.is_empty():
                    table[(i, o)] = chain.elements
        self._nodes.append(NodeSpec(name, ins, outs, table))
        return len(self._nodes) - 1

    def add_operator(self, name: str, inputs: int = 1, outputs: int = 1, depth: int = 0) -> int:
        """An ordinary operator: every input reaches every output with time unchanged."""
        return self.add_node(name, [depth] * inputs, [depth] * outputs)

    def add_ingress(self, name: str, depth: int) -> int:
        """Enter a loop scope: input at ``depth``, output at ``depth + 1``."""
        return self.add_node(name, [depth], [depth + 1], {(0, 0): PathSummary.ingress()})

    def add_egress(self, name: str, depth: int) -> int:
        """Leave a loop scope: input at ``depth`` (>= 1), output at ``depth - 1``."""
        if depth < 1:
            raise GraphError(f"node {name!r}: egress needs a loop scope (depth >= 1)")
        return self.add_node(name, [depth], [depth - 1], {(0, 0): PathSummary.egress()})

    def add_feedback(self, name: str, depth: int, step: int = 1) -> int:
        """Go round a loop: adds ``step`` to the innermost counter (``depth`` >= 1)."""
        if depth < 1:
            raise GraphError(f"node {name!r}: feedback needs a loop scope (depth >= 1)")
        return self.add_node(name, [depth], [depth], {(0, 0): PathSummary.feedback(step)})

    def add_edge(self, src: Location, dst: Location) -> None:
        """Connect output ``src`` to input ``dst``."""
        self._edges.append((src, dst))

    def build(self) -> Graph:
        """Validate ports, depths and cycles; return the immutable graph."""
        nodes = tuple(self._nodes)
        for src, dst in self._edges:
            if src.kind is not Port.SOURCE or dst.kind is not Port.TARGET:
                raise GraphError(f"an edge goes from a source to a target, not {src!r} -> {dst!r}")
            for loc in (src, dst):
                if not 0 <= loc.node < len(nodes):
                    raise GraphError(f"edge {src!r} -> {dst!r}: no node {loc.node}")
            sdepths = nodes[src.node].output_depths
            tdepths = nodes[dst.node].input_depths
            if not 0 <= src.port < len(sdepths):
                raise GraphError(f"node {nodes[src.node].name!r} has no output {src.port}")
            if not 0 <= dst.port < len(tdepths):
                raise GraphError(f"node {nodes[dst.node].name!r} has no input {dst.port}")
            if sdepths[src.port] != tdepths[dst.port]:
                raise GraphError(
                    f"edge {nodes[src.node].name!r}.out{src.port} -> "
                    f"{nodes[dst.node].name!r}.in{dst.port} joins loop depth "
                    f"{sdepths[src.port]} to {tdepths[dst.port]}; enter or leave the loop "
                    "scope through ingress/egress"
                )
        graph = Graph(nodes, tuple(self._edges))
        graph.check_cycles()
        return graph


class Graph:
    """An immutable dataflow graph with could-result-in queries."""

    def __init__(self, nodes: tuple[NodeSpec, ...], edges: tuple[tuple[Location, Location], ...]):
        self.nodes = nodes
        self.edges = edges
        locations: list[Location] = []
        depth: dict[Location, int] = {}
        for n, spec in enumerate(nodes):
            for p, d in enumerate(spec.input_depths):
                locations.append(target(n, p))
                depth[target(n, p)] = d
            for p, d in enumerate(spec.output_depths):
                locations.append(source(n, p))
                depth[source(n, p)] = d
        self.locations: tuple[Location, ...] = tuple(locations)
        self.index: dict[Location, int] = {loc: i for i, loc in enumerate(locations)}
        self._depth = depth
        succ: dict[Location, list[tuple[Location, PathSummary]]] = {loc: [] for loc in locations}
        for n, spec in enumerate(nodes):
            for (i, o), summaries in spec.internal.items():
                succ[target(n, i)].extend((source(n, o), s) for s in summaries)
        identity = PathSummary.identity()
        for src, dst in edges:
            succ[src].append((dst, identity))
        self._succ = {loc: tuple(v) for loc, v in succ.items()}
        self._reach: dict[Location, dict[Location, Antichain[PathSummary]]] = {}

    # -- structure ---------------------------------------------------------------
    def depth(self, loc: Location) -> int:
        """Loop depth of ``loc``: its timestamps have ``depth + 1`` coordinates."""
        return self._depth[loc]

    def successors(self, loc: Location) -> tuple[tuple[Location, PathSummary], ...]:
        """One-step moves from ``loc``: through its node (targets) or along edges (sources)."""
        return self._succ[loc]

    def describe(self, loc: Location) -> str:
        """A human name for a location, for error messages."""
        side = "output" if loc.is_source else "input"
        return f"{self.nodes[loc.node].name!r}.{side}[{loc.port}]"

    # -- could-result-in ----------------------------------------------------------
    def summaries(self, src: Location, dst: Location) -> Antichain[PathSummary]:
        """Minimal summaries of all paths from ``src`` to ``dst`` (identity when equal)."""
        found = self._paths_from(src).get(dst)
        result: Antichain[PathSummary] = Antichain(found if found is not None else ())
        if src == dst:
            result.insert(PathSummary.identity())
        return result

    def could_result_in(self, a: Pointstamp, b: Pointstamp) -> bool:
        """``a`` could result in ``b``: a message or capability at ``a`` could lead to ``b``."""
        (la, ta), (lb, tb) = a, b
        if la == lb and less_equal(ta, tb):
            return True
        for s in self._paths_from(la).get(lb, ()):
            t = s.results_in(ta)
            if t is not None and less_equal(t, tb):
                return True
        return False

    def _paths_from(
        self, start: Location, parents: _Parents | None = None
    ) -> dict[Location, Antichain[PathSummary]]:
        """Minimal summaries of the non-empty paths from ``start`` to every location."""
        cached = self._reach.get(start) if parents is None else None
        if cached is not None:
            return cached
        reach: dict[Location, Antichain[PathSummary]] = {}
        work: deque[tuple[Location, PathSummary]] = deque()
        for nxt, s in self._succ[start]:
            if _insert(reach, nxt, s):
                work.append((nxt, s))
                if parents is not None:
                    parents[(nxt, s)] = (start, None)
        succ = self._succ
        identity = PathSummary.identity()  # most steps (edges, most vertices): s itself
        while work:
            loc, s = work.popleft()
            if s not in reach[loc]:
                continue  # superseded by a smaller summary; its results are dominated
            for nxt, step in succ[loc]:
                s2 = s if step is identity else s.followed_by(step)
                if _insert(reach, nxt, s2):
                    work.append((nxt, s2))
                    if parents is not None:
                        parents[(nxt, s2)] = (loc, s)
        self._reach[start] = reach
        return reach

    # -- validation -----------------------------------------------------------------
    def check_cycles(self) -> None:
        """Raise :class:`GraphError` naming a cycle that does not strictly advance time."""
        for component in self._cyclic_components():
            for loc in component:
                if loc.is_source:
                    continue
                parents: _Parents = {}
                reach = self._paths_from(loc, parents)
                for s in reach.get(loc, ()):
                    if not s.advances():
                        raise GraphError(self._cycle_message(loc, s, parents))

    def _cycle_message(
        self,
        loc: Location,
        s: PathSummary,
        parents: _Parents,
    ) -> str:
        path = [loc]
        key = (loc, s)
        for _ in range(len(parents)):
            prev = parents.get(key)
            if prev is None:
                break
            ploc, ps = prev
            path.append(ploc)
            if ps is None:
                break
            key = (ploc, ps)
        path.reverse()
        names: list[str] = []
        for p in path:
            name = self.nodes[p.node].name
            if not names or names[-1] != name:
                names.append(name)
        return (
            "cycle does not advance time: "
            + " -> ".join(repr(n) for n in names)
            + f" (summary {s!r}); every loop must pass through a feedback node that "
            "increments its loop counter"
        )

    def _cyclic_components(self) -> list[list[Location]]:
        """Strongly connected components with a cycle (Tarjan, iterative)."""
        index: dict[Location, int] = {}
        low: dict[Location, int] = {}
        on_stack: set[Location] = set()
        stack: list[Location] = []
        result: list[list[Location]] = []
        counter = 0
        for root in self.locations:
            if root in index:
                continue
            frames: list[tuple[Location, int]] = [(root, 0)]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack.add(root)
            while frames:
                v, i = frames[-1]
                succ = self._succ[v]
                if i < len(succ):
                    frames[-1] = (v, i + 1)
                    w = succ[i][0]
                    if w not in index:
                        index[w] = low[w] = counter
                        counter += 1
                        stack.append(w)
                        on_stack.add(w)
                        frames.append((w, 0))
                    elif w in on_stack:
                        low[v] = min(low[v], index[w])
                    continue
                frames.pop()
                if frames:
                    u = frames[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    comp: list[Location] = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or any(n == v for n, _ in self._succ[v]):
                        result.append(comp)
        return result

    def check_time(self, loc: Location, time: Timestamp) -> None:
        """Raise ``ValueError`` unless ``time`` has the depth ``loc`` needs."""
        if len(time) != self._depth[loc] + 1:
            raise ValueError(
                f"timestamp {time!r} at {self.describe(loc)} needs {self._depth[loc] + 1} "
                f"coordinates (epoch plus {self._depth[loc]} loop counters)"
            )
