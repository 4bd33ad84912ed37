"""PageRank next to its peers, in one run: plain Python, numpy, timely's vertex and LINQ.

Graph: ``--edges`` random directed edges (default 200,000) on ``--nodes`` nodes
(default 50,000), drawn uniformly with a fixed seed; ``--iters`` rounds (default 10)
of the power iteration with damping 0.85, the rank of nodes without out-edges spread
over all nodes (as networkx does).

- **Python**: the power iteration over lists, single-threaded: the reference.
- **numpy**: the same iteration vectorised (``np.bincount`` per round): the limit of
  one core, with no per-record Python at all.
- **timely, vertex**: ``examples/pagerank.py``: one hand-written ``Step`` vertex in the
  loop body, run every round, keeps each worker's nodes and out-edges.
- **timely, plain LINQ**: ``examples/linq_graphs.py``'s ``pagerank``: ``iterate``
  around ``join`` and ``aggregate`` with no vertex of its own; the edges and degrees
  come from outside the loop and each join keeps them indexed once per epoch.
- **timely, table API**: ``examples/table_graphs.py``'s ``pagerank``: the same
  algorithm as table expressions, ``iterate(step, rounds=iters)`` around a join with
  the edges (arranged once per epoch), ``group_by().agg(sum)`` per node, a left join
  from every node and a cross join with the dangling mass (one row); every step on
  whole Arrow columns.

Every system's ranks are asserted equal to the Python reference's within 1e-9. The
repetitions are interleaved (every system once, then every system in reverse order...),
so that the machine's slow minutes fall on all of them.

    python -m benchmarks.bench_pagerank [--quick] [--ray] [--edges N] [--nodes N] [--iters K]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks._examples import example
from benchmarks.tables import markdown, timed, write_results
from operators.table import table_input
from timely import Dataflow

Edge = tuple[int, int]
D = 0.85


def random_edges(nodes: int, edges: int, seed: int = 11) -> list[Edge]:
    rng = random.Random(seed)
    r = rng.randrange
    return [(r(nodes), r(nodes)) for _ in range(edges)]


def python_ranks(n: int, edges: list[Edge], iters: int) -> list[float]:
    outdeg = [0] * n
    for u, _ in edges:
        outdeg[u] += 1
    dangling_nodes = [u for u in range(n) if outdeg[u] == 0]
    rank = [1.0 / n] * n
    for _ in range(iters):
        dangling = sum(rank[u] for u in dangling_nodes)
        new = [(1 - D) / n + D * dangling / n] * n
        for u, v in edges:
            new[v] += D * rank[u] / outdeg[u]
        rank = new
    return rank


def numpy_ranks(n: int, edges: list[Edge], iters: int) -> list[float]:
    src = np.fromiter((u for u, _ in edges), dtype=np.int64, count=len(edges))
    dst = np.fromiter((v for _, v in edges), dtype=np.int64, count=len(edges))
    outdeg = np.bincount(src, minlength=n).astype(np.float64)
    dangling = outdeg == 0
    inv = np.divide(1.0, outdeg, out=np.zeros(n), where=~dangling)
    rank = np.full(n, 1.0 / n)
    for _ in range(iters):
        share = np.bincount(dst, weights=(rank * inv)[src], minlength=n)
        rank = (1 - D) / n + D * rank[dangling].sum() / n + D * share
    out: list[float] = rank.tolist()
    return out


def timely_vertex(n: int, edges: list[Edge], iters: int, workers: int, backend: str) -> list[float]:
    got: dict[int, dict[int, float]] = example("pagerank").run(
        [edges], n, iters, D, workers=workers, backend=backend
    )
    return [got[0][v] for v in range(n)]


def timely_linq(n: int, edges: list[Edge], iters: int, workers: int, backend: str) -> list[float]:
    linq = example("linq_graphs")
    flow = Dataflow("pagerank_linq")
    e_in = flow.new_input("edges")
    n_in = flow.new_input("nodes")
    linq.pagerank(n_in.stream, e_in.stream, n, iters, D).collect("rank")
    e_in.send(edges)
    n_in.send(range(n))
    out = flow.run(workers=workers, backend=backend)
    ranks = dict(r for _, r in out["rank"])
    return [ranks[v] for v in range(n)]


def timely_table(n: int, edges: list[Edge], iters: int, workers: int, backend: str) -> list[float]:
    import pyarrow as pa

    tables = example("table_graphs")
    flow = Dataflow("pagerank_table")
    e_in = table_input(flow, tables.EDGES, name="edges")
    n_in = table_input(flow, tables.NODES, name="nodes")
    tables.pagerank(n_in.table, e_in.table, n, iters, D).collect("rank")
    m = len(edges)  # the edge list to columns as numpy_ranks does it
    src = np.fromiter((u for u, _ in edges), dtype=np.int64, count=m)
    dst = np.fromiter((v for _, v in edges), dtype=np.int64, count=m)
    e_in.send(pa.table({"src": src, "dst": dst}))
    n_in.send(pa.table({"node": np.arange(n)}))
    out = flow.run(workers=workers, backend=backend)
    ranks = np.zeros(n)
    for _, table in out["rank"]:
        ranks[table.column("node").to_numpy()] = table.column("rank").to_numpy()
    return ranks.tolist()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="20k edges, one repetition")
    parser.add_argument("--edges", type=int, default=None)
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--ray", action="store_true", help="also timely on Ray, 2 workers")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    m = args.edges or (20_000 if args.quick else 200_000)
    n = args.nodes or m // 4
    repeat = args.repeat or (1 if args.quick else 3)
    k = args.iters
    load = os.getloadavg()
    started = time.perf_counter()
    edges = random_edges(n, m)
    rows: list[dict[str, Any]] = []

    systems: list[tuple[str, int, Callable[[], list[float]]]] = [
        ("Python power iteration", 1, lambda: python_ranks(n, edges, k)),
        ("numpy power iteration", 1, lambda: numpy_ranks(n, edges, k)),
        ("timely inline, vertex", 1, lambda: timely_vertex(n, edges, k, 1, "inline")),
        ("timely inline, plain LINQ", 1, lambda: timely_linq(n, edges, k, 1, "inline")),
        ("timely inline, table API", 1, lambda: timely_table(n, edges, k, 1, "inline")),
    ]
    if args.ray:
        timely_vertex(10, edges[:10], 1, 2, "ray")  # starts local Ray
        systems += [
            ("timely ray, vertex", 2, lambda: timely_vertex(n, edges, k, 2, "ray")),
            ("timely ray, plain LINQ", 2, lambda: timely_linq(n, edges, k, 2, "ray")),
            ("timely ray, table API", 2, lambda: timely_table(n, edges, k, 2, "ray")),
        ]
    want = python_ranks(n, edges, k)
    walls: dict[str, list[float]] = {name: [] for name, _, _ in systems}
    for rep in range(repeat):  # interleaved: a slow minute of the machine hits every system
        for system, _, fn in systems if rep % 2 == 0 else systems[::-1]:
            wall, got = timed(fn, 1)
            worst = max(abs(a - b) for a, b in zip(got, want, strict=True))
            assert worst < 1e-9, f"{system}: ranks differ from Python's by {worst}"
            walls[system].append(wall)
            print(f"  rep {rep + 1}/{repeat} {system}: {wall:.3f} s", file=sys.stderr)
    for system, workers, _ in systems:
        wall = statistics.median(walls[system])
        rows.append({"system": system, "workers": workers, "wall_s": wall, "walls": walls[system]})
    total = time.perf_counter() - started

    base = rows[0]["wall_s"]
    numpy_s = rows[1]["wall_s"]
    vertex = next(r["wall_s"] for r in rows if r["system"] == "timely inline, vertex")
    print(
        f"## PageRank, {k} rounds over {m:,} random edges on {n:,} nodes, median of "
        f"{repeat} interleaved\n"
    )
    table = [
        [
            r["system"],
            r["workers"],
            f"{r['wall_s']:.3f}",
            f"{r['wall_s'] / base:.2f}x",
            f"{r['wall_s'] / vertex:.2f}x",
            f"{r['wall_s'] / numpy_s:.1f}x",
        ]
        for r in rows
    ]
    headers = ["system", "workers", "wall s", "time / Python", "time / vertex", "time / numpy"]
    print(markdown(headers, table))
    print(
        f"\nload average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"run took {total:.0f} s"
    )
    write_results(
        "bench_pagerank",
        args.quick,
        {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": load,
            "edges": m,
            "nodes": n,
            "iters": k,
            "repeat": repeat,
            "run_s": total,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
