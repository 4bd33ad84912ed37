"""Graph algorithms in plain LINQ: reachability, connected components and PageRank.

No vertex of their own: each is ``iterate`` around a ``join`` (and an ``aggregate``),
written as one would write it on a static collection. Each epoch is an independent
graph. The graph's streams come from outside the loop, and each ``join`` inside the
body sees them at every round of their epoch (loop-invariant), indexed once per epoch.

- ``reachable(edges, roots)``: the nodes reached from ``roots``:
  ``until="fixpoint"`` sends round again only the nodes not reached before.
- ``components(edges)``: ``(node, least node of its component)`` by label propagation:
  ``until="fixpoint", min_by=(node, label)`` sends round again only a node's labels that
  beat its best so far, and keeps each node's least.
- ``pagerank(nodes, edges, n, iters)``: ``(node, rank)`` after ``iters`` rounds of the
  power iteration, with the rank of nodes without out-edges spread over all nodes (as
  networkx does). A rank carries its round; ``until`` stops it at round ``iters``.

    python examples/linq_graphs.py --backend inline --nodes 2000 --edges 3000
"""

from __future__ import annotations

import argparse
import operator
import time
from collections.abc import Sequence
from typing import Any

from _cli import add_run_flags, random_graph, run_options

import operators  # noqa: F401 - registers the LINQ stream methods
from timely import Dataflow, Stream

Edge = tuple[int, int]
BUCKETS = 64  # how many ways a round's dangling mass is fanned out to reach every node


# -- reachability ----------------------------------------------------------------------
def reachable(edges: Stream, roots: Stream) -> Stream:
    """Per epoch, each node reachable from a root along that epoch's directed edges
    (the roots included), once."""
    return roots.iterate(
        lambda reached: reached.join(edges, lambda n: n, lambda e: e[0], lambda n, e: e[1]),
        until="fixpoint",
    )


# -- connected components --------------------------------------------------------------
def components(edges: Stream) -> Stream:
    """Per epoch, ``(node, label)`` for each node with an edge: the least node of its
    (undirected) component."""
    both = edges.select_many(lambda e: [e, (e[1], e[0])])
    return both.select(lambda e: (e[0], e[0])).iterate(
        lambda labels: labels.join(
            both, lambda nl: nl[0], lambda e: e[0], lambda nl, e: (e[1], nl[1])
        ),
        until="fixpoint",
        min_by=(lambda nl: nl[0], lambda nl: nl[1]),
    )


# -- PageRank --------------------------------------------------------------------------
def pagerank(nodes: Stream, edges: Stream, n: int, iters: int, damping: float = 0.85) -> Stream:
    """Per epoch, ``(node, rank)`` for nodes ``0 .. n-1`` after ``iters`` rounds.

    Ranks start at ``1/n``; a round gives each node ``(1 - d)/n + d * dangling/n`` plus
    ``d * rank(u)/outdeg(u)`` for each edge ``u -> v`` into it, where ``dangling`` is the
    rank held by nodes with no out-edge. Ranks go round as ``(node, rank, outdeg, round)``.
    """
    if iters < 0:
        raise ValueError(f"iters must be >= 0, got {iters}")
    d = damping
    degree = (
        nodes.select(lambda v: (v, 0))
        .concat(edges.select(lambda e: (e[0], 1)))
        .aggregate(lambda x: x[0], int, lambda a, x: a + x[1], operator.add)
    )  # (node, out-degree), every node
    links = edges.join(degree, lambda e: e[0], lambda g: g[0], lambda e, g: (e[0], e[1], g[1]))

    def step(ranks: Stream) -> Stream:
        shares = ranks.join(
            links, lambda r: r[0], lambda lk: lk[0], lambda r, lk: (lk[1], d * r[1] / lk[2], r[3])
        )
        dangling = ranks.aggregate(  # (round, rank held by nodes without out-edges)
            lambda r: r[3], float, lambda a, r: a + (r[1] if r[2] == 0 else 0.0), operator.add
        )
        spread = dangling.select_many(
            lambda m: [(b, m[0], (1 - d) / n + d * m[1] / n) for b in range(BUCKETS)]
        ).join(nodes, lambda m: m[0], lambda v: v % BUCKETS, lambda m, v: (v, m[2], m[1]))
        summed = shares.concat(spread).aggregate(  # ((node, round), new rank)
            lambda s: (s[0], s[2]), float, lambda a, s: a + s[1], operator.add
        )
        return summed.join(
            degree, lambda s: s[0][0], lambda g: g[0], lambda s, g: (g[0], s[1], g[1], s[0][1] + 1)
        )

    start = degree.select(lambda g: (g[0], 1.0 / n, g[1], 0))
    done = start.iterate(step, until=lambda r: r[3] >= iters)
    return done.select(lambda r: (r[0], r[1]))


# -- running them ----------------------------------------------------------------------
def run(
    graphs: Sequence[list[Edge]],
    n: int,
    iters: int = 20,
    root: int = 0,
    workers: int = 2,
    backend: str = "ray",
    **options: Any,
) -> dict[str, dict[int, Any]]:
    """Per epoch (one per graph, on nodes ``0 .. n-1``): ``reach`` (the set reached from
    ``root``), ``cc`` (node -> label) and ``rank`` (node -> rank)."""
    flow = Dataflow("linq_graphs")
    edges = flow.new_input("edges")
    nodes = flow.new_input("nodes")
    roots = flow.new_input("roots")
    reachable(edges.stream, roots.stream).collect("reach")
    components(edges.stream).collect("cc")
    pagerank(nodes.stream, edges.stream, n, iters).collect("rank")
    for e, graph in enumerate(graphs):
        for handle in (edges, nodes, roots):
            handle.advance_to(e)
        edges.send(graph)
        nodes.send(range(n))
        roots.send([root])
    out = flow.run(workers=workers, backend=backend, **options)
    got: dict[str, dict[int, Any]] = {"reach": {}, "cc": {}, "rank": {}}
    for e in range(len(graphs)):
        got["reach"][e] = set()
        got["cc"][e] = {}
        got["rank"][e] = {}
    for e, v in out["reach"]:
        got["reach"][e].add(v)
    for name in ("cc", "rank"):
        for e, (v, x) in out[name]:
            got[name][e][v] = x
    return got


# -- plain-Python references (the tests check against networkx) -------------------------
def reference_reach(edges: list[Edge], root: int) -> set[int]:
    adj: dict[int, list[int]] = {}
    for u, v in edges:
        adj.setdefault(u, []).append(v)
    seen, stack = {root}, [root]
    while stack:
        for v in adj.get(stack.pop(), []):
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def reference_cc(edges: list[Edge]) -> dict[int, int]:
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]
        return x

    for u, v in edges:
        ru, rv = find(parent.setdefault(u, u)), find(parent.setdefault(v, v))
        parent[max(ru, rv)] = min(ru, rv)  # a root is its component's least node
    return {x: find(x) for x in parent}


def reference_rank(edges: list[Edge], n: int, iters: int, d: float = 0.85) -> dict[int, float]:
    outdeg = [0] * n
    for u, _ in edges:
        outdeg[u] += 1
    rank = [1.0 / n] * n
    for _ in range(iters):
        dangling = sum(rank[u] for u in range(n) if outdeg[u] == 0)
        new = [(1 - d) / n + d * dangling / n] * n
        for u, v in edges:
            new[v] += d * rank[u] / outdeg[u]
        rank = new
    return dict(enumerate(rank))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_flags(ap)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--edges", type=int, default=3000)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    graph = random_graph(args.nodes, args.edges, args.seed)
    start = time.perf_counter()
    got = run([graph], args.nodes, args.iters, 0, args.workers, args.backend, **run_options(args))
    elapsed = time.perf_counter() - start
    reach, cc, rank = got["reach"][0], got["cc"][0], got["rank"][0]
    assert reach == reference_reach(graph, 0), "reachability differs from a graph search"
    assert cc == reference_cc(graph), "components differ from union-find"
    want = reference_rank(graph, args.nodes, args.iters)
    worst = max(abs(rank[v] - want[v]) for v in range(args.nodes))
    assert worst < 1e-9, f"PageRank differs from the power iteration by {worst}"
    print(f"reachable from node 0: {len(reach)} nodes")
    print(f"components: {len(set(cc.values()))} over {len(cc)} nodes with an edge")
    top = sorted(rank.items(), key=lambda p: -p[1])[:3]
    print("top ranks: " + ", ".join(f"{v} {r:.5f}" for v, r in top))
    print(
        f"all three match their references ({args.edges} edges, {args.iters} PageRank rounds, "
        f"{args.workers} {args.backend} workers, {elapsed:.2f} s)"
    )


if __name__ == "__main__":
    main()
