"""Connected components next to its peers, in one run: union-find, networkx, timely.

Graph: ``--edges`` random edges (default 1,000,000) between ``--nodes`` nodes (default
500,000), drawn uniformly with a fixed seed. A node's component label is the least
node id in its component; only nodes that have an edge are labelled.

- **union-find**: single-threaded Python, path halving and union by size.
- **networkx**: ``nx.Graph(edges)`` then ``nx.connected_components`` (the graph's
  construction is inside the timing: it is part of what a user pays).
- **timely**: label propagation in a loop. A ``LabelProp`` vertex inside
  ``flow.loop()`` keeps each owned node's adjacency and best label across iterations;
  each round it sends the labels that improved to the neighbours (exchanged by node),
  and the loop ends when no label improves. Each vertex sends at most one proposal per
  neighbour per round (the least). Each improvement also leaves the loop, where
  ``LeastLabel`` keeps each node's least label per epoch (on the node's worker).

- **timely, plain LINQ**: the same label propagation with no vertex of its own
  (``examples/linq_graphs.py``'s ``components``): labels go round in
  ``iterate(until="fixpoint", min_by=(node, label))``, which lets through only a
  node's improvements, and each round ``join``s them with the edges from outside the
  loop (indexed once per epoch).

- **timely, union-find vertex**: the approach of timely-dataflow's ``unionfind``
  example. Each worker runs union-find in a vertex over the edges it reads and sends on
  only the edges that join two of its components (a spanning forest); those meet on
  worker 0 (``exchange`` by a constant), whose union-find labels every node when the
  epoch completes. Parallel in its first stage only.

Every system's labels are asserted equal to union-find's. Goal: timely inline within
3x of union-find.

    python -m benchmarks.bench_cc [--quick] [--edges N] [--nodes N] [--ray]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from typing import Any

import operators  # noqa: F401  (registers select_many on Stream)
from benchmarks._examples import example
from benchmarks.tables import markdown, timed, write_results
from timely import Dataflow, Source, Vertex, exchange

Edge = tuple[int, int]


def random_edges(nodes: int, edges: int, seed: int = 7) -> list[Edge]:
    rng = random.Random(seed)
    r = rng.randrange
    return [(r(nodes), r(nodes)) for _ in range(edges)]


# -- peers -----------------------------------------------------------------------------
def union_find(edges: list[Edge]) -> dict[int, int]:
    parent: dict[int, int] = {}
    size: dict[int, int] = {}

    def find(x: int) -> int:
        p = parent[x]
        while p != x:
            gp = parent[p]
            parent[x] = gp
            x, p = p, parent[gp]
        return x

    for u, v in edges:
        if u not in parent:
            parent[u] = u
            size[u] = 1
        if v not in parent:
            parent[v] = v
            size[v] = 1
        ru, rv = find(u), find(v)
        if ru != rv:
            if size[ru] < size[rv]:
                ru, rv = rv, ru
            parent[rv] = ru
            size[ru] += size[rv]
    least: dict[int, int] = {}
    for x in parent:
        r = find(x)
        if x < least.get(r, x + 1):
            least[r] = x
    return {x: least[find(x)] for x in parent}


def networkx_cc(edges: list[Edge]) -> dict[int, int]:
    import networkx as nx

    g = nx.Graph(edges)
    labels: dict[int, int] = {}
    for comp in nx.connected_components(g):
        m = min(comp)
        for x in comp:
            labels[x] = m
    return labels


# -- timely ----------------------------------------------------------------------------
class EdgeSource(Source):
    """``parts`` partitions of the edge list, each in batches of ``batch`` edges, epoch 0."""

    def __init__(self, edges: list[Edge], parts: int, batch: int = 50_000) -> None:
        self.edges, self.parts, self.batch = edges, parts, batch

    def partitions(self) -> int:
        return self.parts

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        share = self.edges[partition :: self.parts]
        i = 0 if offset is None else offset
        if i * self.batch >= len(share):
            return None
        return 0, share[i * self.batch : (i + 1) * self.batch], i + 1


def _both_ways(e: Edge) -> tuple[Edge, Edge]:
    return e, (e[1], e[0])


def _first(pair: tuple[int, int]) -> int:
    return pair[0]


class LabelProp(Vertex):
    """Input 0: directed edges ``(u, v)`` at ``(e, 0)``, by ``u``. Input 1: proposals
    ``(node, label)`` from the previous round, by node. Output 0: this round's
    proposals (fed back). Output 1: ``(node, label)`` for every improvement."""

    def __init__(self) -> None:
        self.adj: dict[int, list[int]] = {}
        self.best: dict[int, int] = {}
        self.loading: set[tuple[int, ...]] = set()
        self.changed: dict[tuple[int, ...], set[int]] = {}

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        if input == 0:
            if t not in self.loading:
                self.loading.add(t)
                self.notify_at(t)
            adj = self.adj
            for u, v in records:
                nbrs = adj.get(u)
                if nbrs is None:
                    adj[u] = [v]
                else:
                    nbrs.append(v)
            return
        changed = self.changed.get(t)
        if changed is None:
            changed = self.changed[t] = set()
            self.notify_at(t)
        best = self.best
        add = changed.add
        for n, label in records:
            if label < best.get(n, n):
                best[n] = label
                add(n)

    def on_notify(self, t: tuple[int, ...]) -> None:
        best, adj = self.best, self.adj
        if t in self.loading:  # all edges are in: every node proposes itself
            self.loading.discard(t)
            for u in adj:
                best.setdefault(u, u)
            nodes: Any = adj
            self.send_by(1, [(u, u) for u in adj], t)
        else:
            nodes = self.changed.pop(t, ())
            self.send_by(1, [(u, best[u]) for u in nodes], t)
        out: dict[int, int] = {}  # one proposal per neighbour: the least
        get = out.get
        for u in nodes:
            label = best[u]
            for v in adj[u]:
                if label < get(v, v):
                    out[v] = label
        self.send_by(0, list(out.items()), t)


class LeastLabel(Vertex):
    """Each node's least label per epoch. Pipeline: a node's improvements all come
    from the worker that owns it, so no exchange is needed."""

    def __init__(self) -> None:
        self.least: dict[tuple[int, ...], dict[int, int]] = {}

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        least = self.least.get(t)
        if least is None:
            least = self.least[t] = {}
            self.notify_at(t)
        get = least.get
        for n, label in records:
            if label < get(n, n + 1):
                least[n] = label

    def on_notify(self, t: tuple[int, ...]) -> None:
        self.send_by(0, list(self.least.pop(t).items()), t)


class Forest(Vertex):
    """Union-find over the edges of each time, in the vertex; sends on only the edges that
    join two components (a spanning forest, at most one edge per node). With
    ``labels=True`` it sends nothing per edge, and ``(node, least node of its
    component)`` for every node when the time completes."""

    def __init__(self, labels: bool = False) -> None:
        self.labels = labels
        self.parent: dict[tuple[int, ...], dict[int, int]] = {}

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        parent = self.parent.get(t)
        if parent is None:
            parent = self.parent[t] = {}
            self.notify_at(t)
        joined: list[Edge] = []
        for u, v in records:
            ru = parent.setdefault(u, u)
            while parent[ru] != ru:
                parent[ru] = ru = parent[parent[ru]]
            rv = parent.setdefault(v, v)
            while parent[rv] != rv:
                parent[rv] = rv = parent[parent[rv]]
            if ru != rv:
                # the smaller root wins, so a root is always its component's least node
                if ru < rv:
                    parent[rv] = ru
                else:
                    parent[ru] = rv
                joined.append((u, v))
        if not self.labels:
            self.send_by(0, joined, t)

    def on_notify(self, t: tuple[int, ...]) -> None:
        parent = self.parent.pop(t)
        if not self.labels:
            return
        out: list[Edge] = []
        for x in parent:
            r = x
            while parent[r] != r:
                r = parent[r]
            parent[x] = r
            out.append((x, r))
        self.send_by(0, out, t)


def _zero(edge: Edge) -> int:
    return 0


def timely_cc_forest(edges: list[Edge], workers: int, backend: str) -> dict[int, int]:
    """Per-worker union-find, then the forests' edges meet on one worker."""
    flow = Dataflow("cc_forest")
    (
        flow.source(EdgeSource(edges, max(2, workers)))
        .unary(Forest, name="local_forest")
        .unary(lambda: Forest(labels=True), name="global_forest", channel=exchange(_zero))
        .collect("labels")
    )
    result = flow.run(workers=workers, backend=backend)
    return dict(r for _, r in result["labels"])


def timely_cc(edges: list[Edge], workers: int, backend: str) -> dict[int, int]:
    flow = Dataflow("cc")
    directed = flow.source(EdgeSource(edges, max(2, workers))).select_many(_both_ways)
    loop = flow.loop("propagate")
    handle, proposals = loop.feedback()
    step, improved = flow.vertex(
        [(directed.enter(loop), exchange(_first)), (proposals, exchange(_first))],
        LabelProp,
        name="label_prop",
        outputs=2,
    )
    handle.connect(step)
    improved.leave().unary(LeastLabel, name="least_label").collect("labels")
    result = flow.run(workers=workers, backend=backend)
    return dict(r for _, r in result["labels"])


def timely_cc_linq(edges: list[Edge], workers: int, backend: str) -> dict[int, int]:
    components = example("linq_graphs").components
    flow = Dataflow("cc_linq")
    components(flow.source(EdgeSource(edges, max(2, workers)))).collect("labels")
    result = flow.run(workers=workers, backend=backend)
    return dict(r for _, r in result["labels"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="100k edges, one repetition")
    parser.add_argument("--edges", type=int, default=None)
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--ray", action="store_true", help="also timely on Ray, 2 workers")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    m = args.edges or (100_000 if args.quick else 1_000_000)
    n = args.nodes or m // 2
    repeat = args.repeat or (1 if args.quick else 3)
    load = os.getloadavg()
    started = time.perf_counter()
    edges = random_edges(n, m)

    rows: list[dict[str, Any]] = []

    def row(system: str, workers: int, wall: float) -> None:
        rows.append({"system": system, "workers": workers, "wall_s": wall})
        print(f"  {system} x{workers}: {wall:.3f} s", file=sys.stderr)

    wall, expected = timed(lambda: union_find(edges), repeat)
    row("union-find (Python)", 1, wall)
    try:
        wall, got = timed(lambda: networkx_cc(edges), repeat)
        assert got == expected, "networkx labels differ from union-find"
        row("networkx.connected_components", 1, wall)
    except ImportError:
        print("networkx is not installed; skipping (pip install -e '.[bench]')", file=sys.stderr)
    wall, got = timed(lambda: timely_cc(edges, 1, "inline"), repeat)
    assert got == expected, "timely labels differ from union-find"
    row("timely inline, label propagation", 1, wall)
    wall, got = timed(lambda: timely_cc_linq(edges, 1, "inline"), repeat)
    assert got == expected, "timely (LINQ) labels differ from union-find"
    row("timely inline, plain LINQ", 1, wall)
    wall, got = timed(lambda: timely_cc_forest(edges, 1, "inline"), repeat)
    assert got == expected, "timely (forest) labels differ from union-find"
    row("timely inline, union-find vertex", 1, wall)
    if args.ray:
        timed(lambda: timely_cc(edges[:10], 2, "ray"), 1)  # starts local Ray
        wall, got = timed(lambda: timely_cc(edges, 2, "ray"), repeat)
        assert got == expected, "timely Ray labels differ from union-find"
        row("timely ray, label propagation", 2, wall)
        wall, got = timed(lambda: timely_cc_linq(edges, 2, "ray"), repeat)
        assert got == expected, "timely Ray (LINQ) labels differ from union-find"
        row("timely ray, plain LINQ", 2, wall)
        wall, got = timed(lambda: timely_cc_forest(edges, 2, "ray"), repeat)
        assert got == expected, "timely Ray (forest) labels differ from union-find"
        row("timely ray, union-find vertex", 2, wall)
    total = time.perf_counter() - started

    base = rows[0]["wall_s"]
    components = len(set(expected.values()))
    print(
        f"## Connected components, {m:,} random edges on {n:,} nodes "
        f"({len(expected):,} with an edge, {components:,} components), median of {repeat}\n"
    )
    table = [
        [r["system"], r["workers"], f"{r['wall_s']:.3f}", f"{r['wall_s'] / base:.2f}x"]
        for r in rows
    ]
    print(markdown(["system", "workers", "wall s", "time / union-find"], table))
    print()
    for r in rows:
        if r["system"].startswith("timely inline"):
            x = r["wall_s"] / base
            print(
                f"goal: {r['system']} within 3x of union-find: {x:.2f}x, "
                f"{'met' if x <= 3 else 'missed'}"
            )
    print(
        f"\nload average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"run took {total:.0f} s"
    )

    write_results(
        "bench_cc",
        args.quick,
        {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": load,
            "edges": m,
            "nodes": n,
            "labelled_nodes": len(expected),
            "components": components,
            "repeat": repeat,
            "run_s": total,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
