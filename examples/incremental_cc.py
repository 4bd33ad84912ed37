"""Connected components kept up to date as epochs of edges arrive.

A batch job would recompute the components from every edge seen so far, each time. A
timely dataflow keeps state in its vertices across epochs and is told, through
notifications, when an epoch is complete; so each epoch costs what its new edges
change, and the output is a stream of changes: ``(node, label)`` for every node that
is new or whose component's label (its least node) went down in that epoch.

Two vertices:

- ``LocalForest`` runs on every worker over that worker's share of an epoch's edges
  and keeps only those that join two of its trees (a spanning forest of the share), so
  at most ``nodes - 1`` edges per worker per epoch go on;
- ``Components`` (on one worker: every forest edge is exchanged there) holds a
  union-find over every edge seen so far, with each root's members and least node. It
  buffers each epoch's edges and applies them when the epoch is complete; epochs are
  notified in order, so epoch ``e`` sees exactly the edges of epochs ``<= e``.

The driver keeps a ``node -> label`` table by applying the changes; after every epoch
it equals the components of all the edges so far (checked against a from-scratch
union-find).

    python examples/incremental_cc.py --workers 2 --backend ray --epochs 20 --edges 500
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

from _cli import add_run_flags, run_options

from timely import Dataflow, StatefulVertex, Stream, Vertex, exchange

Time = tuple[int, ...]


class LocalForest(Vertex):
    """Per epoch, sends the edges of this worker's share that join two of its trees."""

    def __init__(self) -> None:
        self.parent: dict[Time, dict[Any, Any]] = {}
        self.kept: dict[Time, list[tuple[Any, Any]]] = {}

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        parent = self.parent.get(time)
        if parent is None:
            parent = self.parent[time] = {}
            self.kept[time] = []
            self.notify_at(time)
        kept = self.kept[time]
        for u, v in records:
            ru, rv = _find(parent, u), _find(parent, v)
            if ru != rv:
                parent[ru] = rv
                kept.append((u, v))
            elif u == v:
                kept.append((u, v))  # a node with only a self-loop still exists

    def on_notify(self, time: Time) -> None:
        del self.parent[time]
        self.send_by(0, self.kept.pop(time), time)


def _find(parent: dict[Any, Any], x: Any) -> Any:
    root = parent.setdefault(x, x)
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:  # path compression
        parent[x], x = root, parent[x]
    return root


class Components(StatefulVertex):
    """A union-find over every edge so far; per epoch, sends the ``(node, label)`` changes.

    Its state is checkpointable: the forest lives in one keyed table at epoch 0, under
    the one key every edge is exchanged by (so a rescale moves it whole to that key's
    owner), and changes only in ``on_notify``; each epoch's edges wait in a per-time table.
    """

    def __init__(self) -> None:
        super().__init__()
        self.forest = self.keyed_state("forest")
        self.pending = self.keyed_state("pending")

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        # epochs are notified in order: the forest moves epoch by epoch
        self.table_at(self.pending, time).setdefault(0, []).extend(records)

    def on_notify(self, time: Time) -> None:
        forest = self.forest.table((0,)).setdefault(0, {"parent": {}, "members": {}, "label": {}})
        parent, members, label = forest["parent"], forest["members"], forest["label"]
        before: dict[Any, Any] = {}  # label at the start of the epoch (None: a new node)
        for u, v in self.pending.pop(time).get(0, []):
            for x in (u, v):
                if x not in parent:
                    parent[x] = x
                    members[x] = [x]
                    label[x] = x
                    before[x] = None
            ru, rv = _find(parent, u), _find(parent, v)
            if ru == rv:
                continue
            if len(members[ru]) < len(members[rv]):
                ru, rv = rv, ru  # rv, the smaller component, goes under ru
            lu, lv = label[ru], label[rv]
            if lv < lu:
                relabel, new = members[ru], lv
            else:
                relabel, new = members[rv], lu
            for x in relabel:
                before.setdefault(x, label[x])
                label[x] = new
            parent[rv] = ru
            members[ru].extend(members.pop(rv))
        self.send_by(0, [(x, label[x]) for x, old in before.items() if label[x] != old], time)


def _everything_to_one(edge: tuple[Any, Any]) -> int:
    return 0


def component_changes(edges: Stream) -> Stream:
    """``(node, label)`` for each node that is new or relabelled, at each epoch."""
    return edges.unary(LocalForest, name="local_forest").unary(
        Components, name="components", channel=exchange(_everything_to_one)
    )


def run(
    epochs: Sequence[list[tuple[Any, Any]]], workers: int = 2, backend: str = "ray", **options: Any
) -> dict[int, list[tuple[Any, Any]]]:
    """Feed one batch of edges per epoch; return each epoch's ``(node, label)`` changes."""
    changes: dict[int, list[tuple[Any, Any]]] = {}

    def on_epoch(epoch: int, records: list[tuple[Any, Any]]) -> None:
        changes[epoch] = records

    flow = Dataflow("incremental_cc")
    edges = flow.new_input("edges")
    component_changes(edges.stream).subscribe(on_epoch)
    with flow.activate(workers=workers, backend=backend, **options) as session:
        for e, batch in enumerate(epochs):
            edges.advance_to(e)
            edges.send(batch)
            session.poll()
        edges.close()
        session.join()
    return changes


def from_scratch(edges: Sequence[tuple[Any, Any]]) -> dict[Any, Any]:
    """Each endpoint's least component member, by union-find over ``edges``."""
    parent: dict[Any, Any] = {}
    for u, v in edges:
        ru, rv = _find(parent, u), _find(parent, v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return {x: _find(parent, x) for x in parent}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_flags(ap)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--edges", type=int, default=500, help="new edges per epoch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = random.Random(args.seed)
    epochs = [
        [(rng.randrange(args.nodes), rng.randrange(args.nodes)) for _ in range(args.edges)]
        for _ in range(args.epochs)
    ]
    options = run_options(args)
    start = time.perf_counter()
    changes = run(epochs, args.workers, args.backend, **options)
    elapsed = time.perf_counter() - start

    labels: dict[Any, Any] = {}
    seen: list[tuple[Any, Any]] = []
    for e, batch in enumerate(epochs):
        labels.update(changes.get(e, []))
        seen.extend(batch)
        assert labels == from_scratch(seen), f"epoch {e}: labels differ from a union-find"
        print(
            f"epoch {e:3d}: {len(batch):5d} new edges, {len(changes.get(e, [])):6d} label "
            f"changes; {len(labels)} nodes in {len(set(labels.values()))} components"
        )
    print(
        f"{args.epochs} epochs on {args.workers} {args.backend} workers in {elapsed:.2f} s; "
        "after every epoch the labels match a from-scratch union-find"
    )


if __name__ == "__main__":
    main()
