"""Connected components on the table API next to scipy, numpy and union-find, in one
run: the graph workload of issue 28.

Graph: ``--edges`` random edges (default 1,000,000) on ``--nodes`` nodes (default
500,000), seeded. A node's label is the least node id of its component; only nodes
with an edge are labelled.

- **scipy** ``csgraph.connected_components`` (compiled; the reference), relabelled to
  least ids with numpy.
- **numpy label propagation**: each round every edge proposes the lesser label to
  both ends (``np.minimum.at``), until nothing changes: the same algorithm as timely's,
  vectorised, on one core.
- **union-find**: single-threaded Python (``benchmarks/bench_cc.py``'s).
- **timely table API**: ``labels.iterate(step, min_by=("node", "label"))`` where
  ``step`` joins a round's improved labels with the edges from outside the loop
  (arranged once per epoch: sorted by ``src``, probed by index), inline on 1 and 2
  workers (one thread), and on Ray with 2 (warm: actors kept from a first run; the
  edges sent from the driver are inside the timing).

Every result is checked equal to union-find's. Rounds interleaved; medians of
``--rounds``, as seconds and as ratios to union-find and to scipy.

    python -m benchmarks.bench_table_cc [--quick] [--edges N] [--nodes N] [--rounds N]
        [--skip-ray]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

import operators  # noqa: F401 - registers the stream methods
from benchmarks.bench_cc import union_find
from benchmarks.tables import markdown, write_results
from operators.table import col, table_input
from timely import Dataflow

EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])


def random_edges(nodes: int, edges: int, seed: int = 7) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, nodes, size=(edges, 2), dtype=np.int64)


def scipy_cc(edges: np.ndarray[Any, Any], nodes: int) -> dict[int, int]:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    m = coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(nodes, nodes))
    _, comp = connected_components(m, directed=False)
    least = np.full(comp.max() + 1, nodes)
    np.minimum.at(least, comp, np.arange(nodes))
    used = np.unique(edges)
    return dict(zip(used.tolist(), least[comp[used]].tolist()))


def numpy_cc(edges: np.ndarray[Any, Any], nodes: int) -> dict[int, int]:
    label = np.arange(nodes)
    a, b = edges[:, 0], edges[:, 1]
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        if np.array_equal(new, label):
            break
        label = new
    used = np.unique(edges)
    return dict(zip(used.tolist(), label[used].tolist()))


def timely_table_cc(
    edges: np.ndarray[Any, Any], workers: int, backend: str = "inline"
) -> dict[int, int]:
    flow = Dataflow("cc")
    inp = table_input(flow, EDGES)
    e = inp.table
    both = e.concat(e.select(src=col("dst"), dst=col("src")))
    labels = both.select(node=col("src"), label=col("src"))
    labels.iterate(
        lambda t: t.join(both, left_on="node", right_on="src").select(
            node=col("dst"), label=col("label")
        ),
        min_by=("node", "label"),
    ).collect("out")
    inp.advance_to(0)
    for part in np.array_split(edges, max(1, len(edges) // 100_000)):
        inp.send(pa.table({"src": part[:, 0], "dst": part[:, 1]}, schema=EDGES))
    out = flow.run(workers=workers, backend=backend)
    got: dict[int, int] = {}
    for _, table in out["out"]:
        got.update(zip(table.column("node").to_pylist(), table.column("label").to_pylist()))
    return got


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k edges on 50k nodes, 1 round")
    ap.add_argument("--edges", type=int, default=None)
    ap.add_argument("--nodes", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--skip-ray", action="store_true", help="without timely on Ray x2")
    args = ap.parse_args(argv)
    n_edges = args.edges or (100_000 if args.quick else 1_000_000)
    n_nodes = args.nodes or n_edges // 2
    rounds = args.rounds or (1 if args.quick else 3)
    edges = random_edges(n_nodes, n_edges)
    pairs = [(int(a), int(b)) for a, b in edges]

    systems: dict[str, Callable[[], dict[int, int]]] = {
        "scipy csgraph": lambda: scipy_cc(edges, n_nodes),
        "numpy label propagation": lambda: numpy_cc(edges, n_nodes),
        "Python union-find": lambda: union_find(pairs),
        "timely table API, inline x1": lambda: timely_table_cc(edges, 1),
        "timely table API, inline x2": lambda: timely_table_cc(edges, 2),
    }
    if not args.skip_ray:
        import logging

        import ray

        from timely.backends.ray import local_ray_options

        ray.init(
            num_cpus=2,
            include_dashboard=False,
            logging_level=logging.WARNING,
            **local_ray_options(),
        )
        timely_table_cc(random_edges(50, 100), 2, "ray")  # the actors start, and are kept
        systems["timely table API, Ray x2 (warm)"] = lambda: timely_table_cc(edges, 2, "ray")
    want = union_find(pairs)
    tiny = random_edges(50, 100)
    for warm in (scipy_cc, lambda e, _n: timely_table_cc(e, 1)):
        warm(tiny, 50)  # imports and first calls outside the timing
    times: dict[str, list[float]] = {name: [] for name in systems}
    for r in range(rounds):
        for name, run in systems.items():
            t0 = time.perf_counter()
            got = run()
            times[name].append(time.perf_counter() - t0)
            assert got == want, f"{name}: labels differ from union-find's"
        print(f"round {r + 1}/{rounds} done", flush=True)

    medians = {name: statistics.median(ts) for name, ts in times.items()}
    uf, sp = medians["Python union-find"], medians["scipy csgraph"]
    rows = [[name, f"{s:.3f}", f"{s / uf:.2f}x", f"{s / sp:.1f}x"] for name, s in medians.items()]
    header = ["system", "seconds (median)", "vs union-find", "vs scipy"]
    print(f"\n{n_edges:,} edges on {n_nodes:,} nodes, median of {rounds}\n")
    print(markdown(header, rows))
    write_results(
        "table_cc",
        args.quick,
        {
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "load_average": os.getloadavg(),
            "edges": n_edges,
            "nodes": n_nodes,
            "rounds": rounds,
            "seconds": times,
            "median_s": medians,
        },
    )


if __name__ == "__main__":
    main()
