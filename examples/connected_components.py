"""Connected components by label propagation inside ``iterate``.

Every node starts with its own id as label; each round, a node whose label went down
tells its neighbours, and each node keeps the least label it has heard of. The loop
stops by itself when a round changes no label (``iterate`` with no ``max_iters``):
then every node's label is the least node id of its component.

Each epoch is an independent graph (a batch of edges; a node is any endpoint). Inside
the loop one vertex, ``Propagate``, keyed by node (an ``exchange`` channel), holds for
its share of the nodes their adjacency and their current label, per epoch; each round
is one loop iteration, and a round's proposals are folded when the round is complete
(``notify_at``), so a node improves at most once per round. An epoch's graph and
labels are dropped once the loop is done with the epoch. Outside the loop ``min_by``
keeps each node's final (least) label.

    python examples/connected_components.py --workers 2 --backend ray --nodes 2000 --edges 1500
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from _cli import add_run_flags, random_graph, run_options

from operators.loops import loop_finished
from timely import Dataflow, Stream, Vertex, exchange

Time = tuple[int, ...]
EDGE, PROP, LABEL = "edge", "prop", "label"


def _node(record: tuple[Any, ...]) -> Any:
    return record[1]


class Propagate(Vertex):
    """One round of label propagation per loop iteration, for this worker's nodes.

    Records are ``(EDGE, u, v)`` (iteration 0: ``u``'s neighbour ``v``), ``(PROP, n, l)``
    (``l`` is a label ``n`` may take) and ``(LABEL, n, l)`` (an output fed back: ignored).
    When a round completes, each node whose least proposal beats its label takes it,
    sends ``(LABEL, n, l)`` and proposes ``l`` to its neighbours for the next round.
    """

    def __init__(self) -> None:
        self.adj: dict[int, dict[Any, list[Any]]] = {}  # epoch -> node -> neighbours
        self.label: dict[int, dict[Any, Any]] = {}  # epoch -> node -> label
        self.best: dict[Time, dict[Any, Any]] = {}  # time -> node -> least proposal

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        best = self.best.get(time)
        if best is None:
            best = self.best[time] = {}
            self.notify_at(time)
        adj = self.adj.get(time[0])
        if adj is None:
            adj = self.adj[time[0]] = defaultdict(list)
            if len(self.adj) > 1:
                self._forget_finished(time[0])
        for kind, n, x in records:
            if kind == PROP:
                if n not in best or x < best[n]:
                    best[n] = x
            elif kind == EDGE:
                adj[n].append(x)
                if n not in best or n < best[n]:
                    best[n] = n  # a node first proposes itself

    def _forget_finished(self, current: int) -> None:
        """Drop the graphs and labels of the epochs the loop is done with.

        They are kept across the rounds of an epoch, and no round is known to be the
        last, so they cannot be dropped in ``on_notify``; a new epoch's first batch
        looks back instead, and the run holds at most the epochs still in the loop
        plus the last one finished.
        """
        for e in list(self.adj):
            if e != current and loop_finished(self, (e,)):
                del self.adj[e]
                self.label.pop(e, None)

    def on_notify(self, time: Time) -> None:
        epoch = time[0]
        label = self.label.setdefault(epoch, {})
        adj = self.adj[epoch]
        out: list[tuple[str, Any, Any]] = []
        for n, x in self.best.pop(time).items():
            old = label.get(n)
            if old is None or x < old:
                label[n] = x
                out.append((LABEL, n, x))
                out.extend((PROP, m, x) for m in adj[n])
        self.send_by(0, out, time)


def _is_label(record: tuple[Any, ...]) -> bool:
    return record[0] == LABEL


def _label(record: tuple[Any, ...]) -> Any:
    return record[2]


def _pair(record: tuple[Any, ...]) -> tuple[Any, Any]:
    return (record[1], record[2])


def _both_ways(edge: tuple[Any, Any]) -> list[tuple[str, Any, Any]]:
    u, v = edge
    return [(EDGE, u, v), (EDGE, v, u)]


def components(edges: Stream, max_iters: int | None = None) -> Stream:
    """``(node, label)`` per epoch for the graph of that epoch's ``(u, v)`` edges."""

    def body(s: Stream) -> Stream:
        return s.unary(Propagate, name="propagate", channel=exchange(_node))

    return (
        edges.select_many(_both_ways)
        .iterate(body, max_iters=max_iters, name="cc")
        .where(_is_label)
        .min_by(_node, _label)
        .select(_pair)
    )


def run(
    graphs: Sequence[list[tuple[Any, Any]]],
    workers: int = 2,
    backend: str = "ray",
    **options: Any,
) -> dict[int, dict[Any, Any]]:
    """The label of every node of each graph (one graph per epoch): ``{epoch: {node: label}}``."""
    out: dict[int, dict[Any, Any]] = {}

    def on_epoch(epoch: int, pairs: list[tuple[Any, Any]]) -> None:
        out[epoch] = dict(pairs)

    flow = Dataflow("connected_components")
    edges = flow.new_input("edges")
    components(edges.stream).subscribe(on_epoch)
    with flow.activate(workers=workers, backend=backend, **options) as session:
        for e, graph in enumerate(graphs):
            edges.advance_to(e)
            edges.send(graph)
        edges.close()
        session.join()
    return out


def least_member(edges: Sequence[tuple[Any, Any]]) -> dict[Any, Any]:
    """The check: each endpoint's least component member, by a sequential union-find."""
    parent: dict[Any, Any] = {}

    def find(x: Any) -> Any:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return {x: find(x) for x in parent}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_flags(ap)
    ap.add_argument("--graphs", type=int, default=3, help="graphs, one per epoch")
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--edges", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    graphs = [random_graph(args.nodes, args.edges, args.seed + g) for g in range(args.graphs)]
    options = run_options(args)
    start = time.perf_counter()
    labels = run(graphs, args.workers, args.backend, **options)
    elapsed = time.perf_counter() - start
    for e in range(args.graphs):
        got = labels.get(e, {})
        assert got == least_member(graphs[e]), f"graph {e}: labels differ from a union-find"
        sizes = sorted(
            ((sum(1 for x in got.values() if x == c)) for c in set(got.values())), reverse=True
        )
        print(f"graph {e}: {len(got)} nodes in {len(sizes)} components; largest {sizes[:3]}")
    print(
        f"{args.graphs} graphs on {args.workers} {args.backend} workers in {elapsed:.2f} s; "
        "every label matches a union-find"
    )


if __name__ == "__main__":
    main()
