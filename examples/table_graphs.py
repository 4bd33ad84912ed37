"""Graph algorithms on the table API, beside their row versions (``linq_graphs.py``).

The first two are ``Table.iterate(body, min_by=(key, value))`` around a ``join`` with
the edges from outside the loop: a round's rows are the nodes whose value improved, the
join proposes values to their neighbours, and only proposals that lower a node's value
go round again. The edges are arranged once per epoch (sorted by source); every step runs
on whole columns. Each epoch is an independent graph.

- ``hops(edges, roots)``: ``(node, hops)`` for each node reachable from a root, with
  its distance in edges: reachability, with the distance as the value to minimise.
- ``components(edges)``: ``(node, label)``, the least node of its (undirected)
  component, by label propagation.
- ``pagerank(nodes, edges, n, iters)``: ``(node, rank)`` after ``iters`` rounds of the
  power iteration (``iterate(step, rounds=iters)``), the rank of nodes without
  out-edges spread over all nodes (as networkx does).

The example runs both on a random graph, next to ``linq_graphs``'s row versions of the
same algorithms, and checks that they agree.

    python examples/table_graphs.py --backend inline --nodes 2000 --edges 3000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from _cli import add_run_flags, random_graph, run_options

import operators  # noqa: F401 - registers the LINQ stream methods
from operators.table import Table, col, count, lit, table_input, when
from timely import Dataflow

Edge = tuple[int, int]
EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
NODES = pa.schema([("node", pa.int64())])


def hops(edges: Table, roots: Table) -> Table:
    """Per epoch, ``(node, hops)``: each node reachable from a root along the epoch's
    directed edges, and the fewest edges to it (roots at 0)."""
    start = roots.select(node=col("node"), hops=col("node") * 0)
    return start.iterate(
        lambda reached: reached.join(edges, left_on="node", right_on="src").select(
            node=col("dst"), hops=col("hops") + 1
        ),
        min_by=("node", "hops"),
    )


def components(edges: Table) -> Table:
    """Per epoch, ``(node, label)`` for each node with an edge: the least node of its
    (undirected) component."""
    both = edges.concat(edges.select(src=col("dst"), dst=col("src")))
    return both.select(node=col("src"), label=col("src")).iterate(
        lambda labels: labels.join(both, left_on="node", right_on="src").select(
            node=col("dst"), label=col("label")
        ),
        min_by=("node", "label"),
    )


def pagerank(nodes: Table, edges: Table, n: int, iters: int, damping: float = 0.85) -> Table:
    """Per epoch, ``(node, rank)`` for nodes ``0 .. n-1`` after ``iters`` rounds.

    Ranks start at ``1/n``; a round gives each node ``(1 - d)/n + d * dangling/n`` plus
    ``d * rank(u)/outdeg(u)`` for each edge ``u -> v`` into it, where ``dangling`` is the
    rank held by nodes with no out-edge. Ranks go round as ``(node, rank, share)``, where
    ``share`` is ``d/outdeg`` (0 for a node without out-edges): each node's part of its
    rank sent along its edges, summed per node, joined to every node (``how="left"``:
    nothing for a node without in-edges), and the dangling mass, one row, added to all
    (``how="cross"``: on the ranks, while the shares are joined and summed, so a round
    waits for three per-time steps in a row, not four)."""
    d = damping
    outdeg = edges.group_by("src").agg(deg=count())
    start = nodes.join(outdeg, left_on="node", right_on="src", how="left").select(
        node=col("node"),
        rank=lit(1.0 / n),
        share=(d / col("deg").cast("float64")).fill_null(0.0),
    )

    def step(ranks: Table) -> Table:
        inflow = (
            ranks.select(node=col("node"), part=col("rank") * col("share"))
            .join(edges, left_on="node", right_on="src")
            .group_by("dst")
            .agg(inflow=col("part").sum())
        )
        dangling = ranks.group_by().agg(  # one row whatever the ranks: a sum without keys
            m=when(col("share") == 0.0).then(col("rank")).otherwise(0.0).sum()
        )
        return (
            ranks.join(dangling, how="cross")  # beside the shares' join and sum, not after
            .join(inflow, left_on="node", right_on="dst", how="left")
            .select(
                node=col("node"),
                rank=(1 - d) / n + col("m") * (d / n) + col("inflow").fill_null(0.0),
                share=col("share"),
            )
        )

    return start.iterate(step, rounds=iters).select(node=col("node"), rank=col("rank"))


def run(
    graphs: Sequence[list[Edge]],
    n: int,
    iters: int = 20,
    root: int = 0,
    workers: int = 2,
    backend: str = "ray",
    **options: Any,
) -> dict[str, dict[int, dict[int, Any]]]:
    """Per epoch (one per graph, on nodes ``0 .. n-1``): ``hops`` (node -> hops from
    ``root``), ``cc`` (node -> label) and ``rank`` (node -> rank)."""
    flow = Dataflow("table_graphs")
    edges = table_input(flow, EDGES, name="edges")
    roots = table_input(flow, NODES, name="roots")
    nodes = table_input(flow, NODES, name="nodes")
    hops(edges.table, roots.table).collect("hops")
    components(edges.table).collect("cc")
    pagerank(nodes.table, edges.table, n, iters).collect("rank")
    for e, graph in enumerate(graphs):
        for handle in (edges, roots, nodes):
            handle.advance_to(e)
        edges.send(pa.table({"src": [a for a, _ in graph], "dst": [b for _, b in graph]}, EDGES))
        roots.send(pa.table({"node": [root]}, NODES))
        nodes.send(pa.table({"node": range(n)}, NODES))
    out = flow.run(workers=workers, backend=backend, **options)
    got: dict[str, dict[int, dict[int, Any]]] = {
        name: {e: {} for e in range(len(graphs))} for name in ("hops", "cc", "rank")
    }
    for name in ("hops", "cc", "rank"):
        for e, table in out[name]:
            columns = [table.column(i).to_pylist() for i in range(2)]
            got[name][e].update(zip(*columns))
    return got


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
    import linq_graphs  # the row versions, beside this file

    graph = random_graph(args.nodes, args.edges, args.seed)
    options = run_options(args)
    start = time.perf_counter()
    got = run([graph], args.nodes, args.iters, 0, args.workers, args.backend, **options)
    table_s = time.perf_counter() - start
    start = time.perf_counter()
    rows = linq_graphs.run(
        [graph], args.nodes, args.iters, 0, args.workers, args.backend, **options
    )
    rows_s = time.perf_counter() - start
    reach, cc = got["hops"][0], got["cc"][0]
    assert set(reach) == rows["reach"][0], "reachability differs from the row version"
    assert cc == rows["cc"][0], "components differ from the row version"
    rank = got["rank"][0]
    worst = max(abs(rank[v] - rows["rank"][0][v]) for v in range(args.nodes))
    assert worst < 1e-9, f"PageRank differs from the row version by {worst}"
    print(f"reachable from node 0: {len(reach)} nodes, at most {max(reach.values())} hops")
    print(f"components: {len(set(cc.values()))} over {len(cc)} nodes with an edge")
    top = sorted(rank.items(), key=lambda p: -p[1])[:3]
    print("top ranks: " + ", ".join(f"{v} {r:.5f}" for v, r in top))
    print(
        f"all three match the row versions ({args.edges} edges, {args.iters} PageRank "
        f"rounds, {args.workers} {args.backend} workers; tables {table_s:.2f} s, rows "
        f"{rows_s:.2f} s)"
    )


if __name__ == "__main__":
    main()
