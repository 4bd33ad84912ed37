"""PageRank by power iteration inside ``iterate``, a fixed number of rounds.

Nodes are ``0 .. n-1``; each epoch is an independent graph of directed ``(u, v)`` edges.
Ranks start at ``1/n``; each round, with damping ``d`` (0.85 by default),

    rank'(v) = (1 - d) / n + d * (sum over u -> v of rank(u) / outdeg(u) + dangling / n)

where ``dangling`` is the total rank of the nodes with no out-edge: their rank is
spread uniformly over all nodes (as networkx does), so the ranks always sum to 1.
Duplicate edges count as many times as they appear.

The loop body is one two-input vertex, ``Step``, keyed by node: contributions go to
the worker owning their target node (``exchange``), and each worker's dangling mass
is ``broadcast`` to every worker, which is how every node learns the round's total.
A round is one loop iteration; the ranks leave the loop after ``--iters`` rounds.

    python examples/pagerank.py --workers 2 --backend ray --nodes 1000 --edges 5000 --iters 20
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from _cli import add_run_flags, random_graph, run_options

from timely import Dataflow, Stream, Vertex, broadcast, exchange

Time = tuple[int, ...]
NODE, EDGE, CONTRIB, DANGLING, RANK = "node", "edge", "contrib", "dangling", "rank"


class Step(Vertex):
    """One PageRank round per loop iteration for this worker's nodes.

    Input 0 (keyed by node): ``(NODE, n, None)`` and ``(EDGE, u, v)`` at iteration 0,
    ``(CONTRIB, v, x)`` later. Input 1 (broadcast): ``(DANGLING, worker, mass)``.
    Iteration 0 sets up the graph; round ``i`` (iteration ``i``) computes the ranks from
    the contributions of round ``i - 1``; round ``iters`` sends ``(RANK, n, r)``.
    """

    def __init__(self, nodes: int, damping: float, iters: int) -> None:
        self.n = nodes
        self.d = damping
        self.iters = iters
        self.out: dict[int, dict[int, list[int]]] = {}  # epoch -> node -> out-neighbours
        self.inbox: dict[Time, dict[int, float]] = {}  # time -> node -> contributions
        self.dangling: dict[Time, float] = {}  # time -> dangling mass heard of

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        if time not in self.inbox:
            self.inbox[time] = defaultdict(float)
            self.dangling[time] = 0.0
            self.notify_at(time)
        if input == 1:
            self.dangling[time] += sum(r[2] for r in records)
            return
        inbox = self.inbox[time]
        out = self.out.setdefault(time[0], {})
        for kind, a, b in records:
            if kind == CONTRIB:
                inbox[a] += b
            elif kind == EDGE:
                out.setdefault(a, []).append(b)
            elif kind == NODE:
                out.setdefault(a, [])

    def on_notify(self, time: Time) -> None:
        epoch, i = time[0], time[-1]
        inbox = self.inbox.pop(time)
        dangling = self.dangling.pop(time)
        out = self.out.get(epoch, {})
        if i == 0:
            ranks = {u: 1.0 / self.n for u in out}
        else:
            base = (1.0 - self.d) / self.n + self.d * dangling / self.n
            ranks = {u: base + self.d * inbox.get(u, 0.0) for u in out}
        if i >= self.iters:
            self.send_by(0, [(RANK, u, r) for u, r in ranks.items()], time)
            self.out.pop(epoch, None)
            return
        sends: list[tuple[str, int, float]] = []
        mass = 0.0
        for u, r in ranks.items():
            vs = out[u]
            if vs:
                share = r / len(vs)
                sends.extend((CONTRIB, v, share) for v in vs)
            else:
                mass += r
        # Every worker reports every round (even 0.0) so that every worker hears of
        # the round, and runs it for its nodes, even those no contribution reaches.
        sends.append((DANGLING, self.worker, mass))
        self.send_by(0, sends, time)


def _node(record: tuple[Any, ...]) -> Any:
    return record[1]


def _keyed(record: tuple[Any, ...]) -> bool:
    return record[0] != DANGLING


def _is_dangling(record: tuple[Any, ...]) -> bool:
    return record[0] == DANGLING


def _is_rank(record: tuple[Any, ...]) -> bool:
    return record[0] == RANK


def _pair(record: tuple[Any, ...]) -> tuple[Any, Any]:
    return (record[1], record[2])


def pagerank(graph: Stream, nodes: int, iters: int, damping: float = 0.85) -> Stream:
    """``(node, rank)`` per epoch after ``iters`` rounds; ``graph`` carries ``(NODE, n, None)``
    for every node and ``(EDGE, u, v)`` for every edge."""
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")

    def body(s: Stream) -> Stream:
        return s.where(_keyed).binary(
            s.where(_is_dangling),
            lambda: Step(nodes, damping, iters),
            name="pagerank.step",
            channels=(exchange(_node), broadcast()),
        )

    return graph.iterate(body, max_iters=iters + 1, name="pagerank").where(_is_rank).select(_pair)


def run(
    graphs: Sequence[list[tuple[int, int]]],
    nodes: int,
    iters: int,
    damping: float = 0.85,
    workers: int = 2,
    backend: str = "ray",
    **options: Any,
) -> dict[int, dict[int, float]]:
    """The ranks of nodes ``0 .. nodes-1`` of each graph (one per epoch)."""
    out: dict[int, dict[int, float]] = {}

    def on_epoch(epoch: int, pairs: list[tuple[int, float]]) -> None:
        out[epoch] = dict(pairs)

    flow = Dataflow("pagerank")
    graph = flow.new_input("graph")
    pagerank(graph.stream, nodes, iters, damping).subscribe(on_epoch)
    with flow.activate(workers=workers, backend=backend, **options) as session:
        for e, edges in enumerate(graphs):
            graph.advance_to(e)
            graph.send([(NODE, n, None) for n in range(nodes)])
            graph.send([(EDGE, u, v) for u, v in edges])
        graph.close()
        session.join()
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_flags(ap)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=5000)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--damping", type=float, default=0.85)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    edges = random_graph(args.nodes, args.edges, args.seed)
    options = run_options(args)
    start = time.perf_counter()
    ranks = run(
        [edges], args.nodes, args.iters, args.damping, args.workers, args.backend, **options
    )
    elapsed = time.perf_counter() - start
    got = ranks[0]
    top = sorted(got.items(), key=lambda p: -p[1])[:5]
    print("top nodes: " + ", ".join(f"{n} {r:.5f}" for n, r in top))
    print(f"sum of ranks {sum(got.values()):.6f} over {len(got)} nodes")
    print(
        f"{args.iters} rounds over {args.edges} edges on {args.workers} {args.backend} "
        f"workers in {elapsed:.2f} s"
    )


if __name__ == "__main__":
    main()
