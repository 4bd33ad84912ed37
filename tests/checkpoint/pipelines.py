"""Dataflows with state carried across epochs, shared by the checkpoint tests.

Each builder takes a stream of small ints and returns the stream whose epochs the tests
compare; ``build`` wires one to an input (or a source) and records each epoch delivered.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count
from timely import Dataflow, Source, Stream


def counts(s: Stream) -> Stream:
    return s.count_by(lambda x: x % 5)


def running(s: Stream) -> Stream:
    return s.running_reduce(lambda x: x % 4, operator.add)


def sessions(s: Stream) -> Stream:
    # One record per key and epoch (the counts), so the output does not depend on the
    # order records arrive in; the state forgets keys idle for 2 epochs.
    def update(key: Any, pair: Any, state: int) -> tuple[int, list[Any]]:
        return state + pair[1], [(key, state + pair[1])]

    return s.count_by(lambda x: x % 3).map_with_state(
        lambda pair: pair[0], lambda: 0, update, timeout=2
    )


def session_ends(s: Stream) -> Stream:
    # Each key's session (records no more than one epoch apart) ends one idle epoch after
    # its last record: its count is sent then, once, across restores too.
    return s.map_with_state(
        lambda x: x % 4,
        int,
        lambda key, x, n: (n + 1, []),
        timeout=1,
        on_timeout=lambda key, n: [(key, n)],
        initial_state={0: 100},
    )


def every_key(s: Stream) -> Stream:
    return s.running_reduce(lambda x: x % 5, operator.add, every_key=True, initial_state={1: 50})


def sliding(s: Stream) -> Stream:
    return s.reduce_by_window(lambda x: x % 3, operator.add, 3, 1, inverse=operator.sub)


def windowed(s: Stream) -> Stream:
    return s.window(2).count_by(lambda x: x % 2)


TABLE = pa.schema([("k", pa.int64()), ("tag", pa.string()), ("v", pa.int64())])


def table_running(s: Stream) -> Stream:
    # The table API's running aggregates: state as Arrow columns (timely.ColumnState),
    # keyed by two columns, carried across epochs.
    rows = s.select(lambda x: (x % 11, "ab"[x % 2], x if x % 5 else None))
    return (
        rows.to_table(TABLE)
        .group_by("k", "tag")
        .running_agg(n=count(), s=col("v").sum(), lo=col("v").min(), m=col("v").mean())
        .to_rows(tuples=True)
    )


def table_windowed(s: Stream) -> Stream:
    # The table API's sliding windows: each epoch's partials as Arrow columns at the
    # epoch (timely.ColumnState), kept until no later window covers it.
    rows = s.select(lambda x: (x % 11, "ab"[x % 2], x if x % 5 else None))
    return (
        rows.to_table(TABLE)
        .group_by("k", "tag")
        .window_agg(3, n=count(), s=col("v").sum(), hi=col("v").max(), m=col("v").mean(), slide=1)
        .to_rows(tuples=True)
    )


SIDE = pa.schema([("k", pa.int64()), ("v", pa.int64())])


def table_joined(s: Stream) -> Stream:
    # The table API's join across epochs, within 2 epochs: both sides kept as Arrow bags
    # (timely.ColumnState with unique=False), forgotten 2 epochs after their own.
    left = s.select(lambda x: (x % 6, x)).to_table(SIDE)
    right = s.where(lambda x: x % 3 == 0).select(lambda x: (x % 6, 10 * x)).to_table(SIDE)
    return left.join_streaming(right, on="k", within=2).to_rows(tuples=True)


def reach(s: Stream) -> Stream:
    # The numbers reachable from each input by x -> 2x % 23, a fixpoint per epoch.
    return s.fixpoint(lambda inner: inner.select(lambda x: 2 * x % 23))


def labels(s: Stream) -> Stream:
    # Per epoch, each node's component label by label propagation in plain LINQ: the
    # loop joins each round's labels with the epoch's edges, which come from outside it
    # (indexed once per epoch), and keeps each node's least label (a least fixpoint).
    both = s.select_many(lambda x: [(x % 7, x // 7), (x // 7, x % 7)])
    return both.select(lambda e: (e[0], e[0])).iterate(
        lambda ls: ls.join(both, lambda nl: nl[0], lambda e: e[0], lambda nl, e: (e[1], nl[1])),
        until="fixpoint",
        min_by=(lambda nl: nl[0], lambda nl: nl[1]),
    )


PIPELINES: dict[str, Callable[[Stream], Stream]] = {
    "counts": counts,
    "running": running,
    "sessions": sessions,
    "session_ends": session_ends,
    "every_key": every_key,
    "sliding": sliding,
    "windowed": windowed,
    "table_running": table_running,
    "table_joined": table_joined,
    "table_windowed": table_windowed,
    "reach": reach,
    "labels": labels,
}


class EpochSource(Source):
    """``parts`` partitions; partition ``p`` holds ``epochs[e][p::parts]`` at epoch ``e``,
    one batch per epoch, read by the epoch index as offset; one batch a step, so the
    epochs come at the pace the kill schedules and cadence checks were made for."""

    batches_per_step = 1

    def __init__(self, epochs: list[list[int]], parts: int = 3) -> None:
        self.epochs = epochs
        self.parts = parts

    def partitions(self) -> int:
        return self.parts

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        e = 0 if offset is None else offset
        if e >= len(self.epochs):
            return None
        return e, self.epochs[e][partition :: self.parts], e + 1


def build(
    pipeline: str,
    epochs: list[list[int]],
    use_source: bool = False,
    builders: dict[str, Callable[[Stream], Stream]] = PIPELINES,
    close: bool = False,
    name: str = "ckpt",
) -> tuple[Dataflow, dict[int, list[Any]]]:
    """The dataflow and the dict its output epochs land in (each epoch exactly once).

    Fed from a source, or by a driver that sends every epoch before the workers start
    (a burst; ``close`` closes the input too)."""
    flow = Dataflow(f"{name}-{pipeline}")
    out: dict[int, list[Any]] = {}

    def record(epoch: int, records: list[Any]) -> None:
        assert epoch not in out, f"epoch {epoch} delivered twice"
        out[epoch] = sorted(records, key=repr)

    if use_source:
        stream = flow.source(EpochSource(epochs))
    else:
        handle = flow.new_input()
        stream = handle.stream
        for e, records in enumerate(epochs):
            handle.advance_to(e)
            handle.send(records)
        if close:
            handle.close()
    builders[pipeline](stream).subscribe(record)
    return flow, out
