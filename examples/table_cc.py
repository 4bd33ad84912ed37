"""Connected components kept up to date on Arrow batches: ``incremental_cc`` in columns.

The row version (``examples/incremental_cc.py`` with ``ComponentSizes`` of
``examples/pipeline.py``) walks a union-find in Python, edge by edge. Here one vertex
takes each epoch's new edges as Arrow batches and keeps, as two numpy arrays, every node
seen so far (sorted) and each node's component (the position of its least node). An
epoch's edges are merged with a few whole-array steps and no Python per edge or node:

1. new endpoints are inserted among the nodes (the labels move with them);
2. each edge becomes the pair of its endpoints' components (one ``searchsorted``, one
   ``take``), and pairs within a component are dropped;
3. the remaining pairs form a small contracted graph, solved by :func:`contracted`
   (hook each root under the least root it touches, then pointer jumping);
4. every node is relabelled through the contracted graph's answer (one ``take``), and
   the sizes are one ``bincount``.

After every epoch up to ``last`` it reports ``(component, users)`` for each component of
the graph so far, named by its least node: the row version's output.

The state is one row of a :class:`~timely.ColumnState` at epoch 0, under the key every
edge batch is exchanged by (so a rescale moves it whole to that key's owner); its list
columns hold the two arrays (no copy either way). It changes only in ``on_notify``, so
checkpoints, restores and migrations see exactly the epochs completed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from timely import StatefulVertex, exchange

Time = tuple[int, ...]
Ints = np.ndarray[Any, np.dtype[np.int64]]

SIZES = pa.schema([("component", pa.int64()), ("users", pa.int64())])
"""What the vertex sends: each component (its least node) and how many nodes it has."""

STATE = pa.schema(
    [("part", pa.int64()), ("nodes", pa.list_(pa.int64())), ("labels", pa.list_(pa.int64()))]
)
"""The state's one row: the key (0), the nodes sorted, and each node's component."""


def contracted(k: int, a: Ints, b: Ints) -> Ints:
    """Per node ``0 .. k-1`` of the graph of edges ``a[i] - b[i]``, the least node of its
    component. Each round hooks every root under the least root an edge joins it to, then
    jumps pointers until every node points at a root; a round that hooks nothing ends it
    (hooks only go down, so no cycle forms, and a component's least node stays a root)."""
    parent = np.arange(k, dtype=np.int64)
    while True:
        ra, rb = parent[a], parent[b]
        lo, hi = np.minimum(ra, rb), np.maximum(ra, rb)
        joins = lo != hi
        if not joins.any():
            return parent
        np.minimum.at(parent, hi[joins], lo[joins])
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped


def merge(nodes: Ints, labels: Ints, src: Ints, dst: Ints) -> tuple[Ints, Ints]:
    """The nodes (sorted) and labels (each node's least node's position) once the edges
    ``src[i] - dst[i]`` are added to those of ``nodes`` and ``labels``."""
    ends, which = np.unique(np.concatenate([src, dst]), return_inverse=True)
    at = np.searchsorted(nodes, ends)  # needles in order: one walk through the nodes
    known = at < len(nodes)
    known[known] = nodes[at[known]] == ends[known]
    new = ends[~known]
    if new.size:
        # The new nodes' places among the old ones, then the old ones' (one pass, no
        # search per node); each label moves with its node, a new node is its own.
        slots = np.searchsorted(nodes, new) + np.arange(len(new))
        fresh = np.zeros(len(nodes) + len(new), dtype=bool)
        fresh[slots] = True
        moved = np.flatnonzero(~fresh)
        grown = np.empty(len(fresh), dtype=np.int64)
        grown[moved] = nodes
        grown[slots] = new
        out = np.arange(len(grown), dtype=np.int64)
        out[moved] = moved[labels]
        nodes, labels = grown, out
        at = np.searchsorted(nodes, ends)
    ca, cb = labels[at[which[: len(src)]]], labels[at[which[len(src) :]]]
    across = ca != cb
    if not across.any():
        return nodes, labels
    ca, cb = ca[across], cb[across]
    comps, index = np.unique(np.concatenate([ca, cb]), return_inverse=True)
    least = contracted(len(comps), index[: len(ca)], index[len(ca) :])
    to = np.arange(len(nodes), dtype=np.int64)
    to[comps] = comps[least]  # component labels are positions, ordered as their nodes
    return nodes, to[labels]


def sizes(nodes: Ints, labels: Ints) -> pa.RecordBatch:
    """``(component, users)`` per component: its least node and its size."""
    counts = np.bincount(labels, minlength=len(nodes))
    comps = np.flatnonzero(counts)
    return pa.RecordBatch.from_arrays(
        [pa.array(nodes[comps]), pa.array(counts[comps])], schema=SIZES
    )


def _column(table: pa.Table, name: str) -> Ints:
    values: Ints = table.column(name).combine_chunks().flatten().to_numpy()
    return values


class EveryEpoch(StatefulVertex):
    """A vertex that reports after every epoch from its first input up to ``last``,
    those with no input too: it asks for each of those notifications once its first
    input (or a restore) says where they start."""

    def __init__(self, last: int) -> None:
        super().__init__()
        self.last = last
        self.first: int | None = None  # notifications are asked at epochs first..last

    def _ask_from(self, epoch: int) -> None:
        upto = self.last if self.first is None else self.first - 1
        for e in range(epoch, upto + 1):
            self.notify_at((e,))
        if self.first is None or epoch < self.first:
            self.first = epoch


class ComponentTable(EveryEpoch):
    """After every epoch from its first edge up to ``last``: ``(component, users)`` for
    each component of the ``(src, dst)`` edges so far, as one Arrow batch (see the
    module). Each epoch's batches wait until the epoch completes; epochs are notified in
    order, and one with no new edge still reports every component."""

    def __init__(self, last: int, src: str = "src", dst: str = "dst") -> None:
        super().__init__(last)
        self.ends = (src, dst)
        self.graph = self.column_state("graph", ["part"], STATE)
        self.pending: dict[Time, list[pa.RecordBatch]] = {}

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        self._ask_from(time[0])
        self.notify_at(time)  # also past ``last``, should such an epoch ever come
        self.pending.setdefault(time, []).extend(records)

    def restored(self, epoch: int) -> None:
        if self.graph.get((0,)) is not None:
            self._ask_from(epoch + 1)

    def on_notify(self, time: Time) -> None:
        held = self.graph.get((0,))
        if held is None or held.num_rows == 0:
            nodes, labels = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        else:
            nodes, labels = _column(held, "nodes"), _column(held, "labels")
        batches = [b for b in self.pending.pop(time, []) if b.num_rows]
        if batches:
            edges = pa.Table.from_batches(batches)
            src = edges.column(self.ends[0]).to_numpy().astype(np.int64, copy=False)
            dst = edges.column(self.ends[1]).to_numpy().astype(np.int64, copy=False)
            nodes, labels = merge(nodes, labels, src, dst)
            row = pa.Table.from_arrays(
                [
                    pa.array([0], pa.int64()),
                    pa.ListArray.from_arrays(
                        pa.array([0, len(nodes)], pa.int32()), pa.array(nodes)
                    ),
                    pa.ListArray.from_arrays(
                        pa.array([0, len(nodes)], pa.int32()), pa.array(labels)
                    ),
                ],
                schema=STATE,
            )
            self.graph.upsert((0,), row)
        if len(nodes):
            self.send_by(0, [sizes(nodes, labels)], time)


def _to_one(batch: Any) -> int:
    return 0


def component_sizes(edges: Any, last: int, name: str = "component_sizes") -> Any:
    """A table ``(component, users)`` from a table of ``(src, dst)`` edges: each
    component of the edges up to each epoch up to ``last``, kept up to date from each
    epoch's new edges (every batch goes to one worker, the owner of key 0)."""
    out = edges.flow.vertex(
        [(edges.stream, exchange(_to_one))], lambda: ComponentTable(last), name=name
    )[0]
    return out.as_table(SIZES)
