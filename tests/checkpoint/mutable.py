"""Dataflows whose state is changed in place, for the exactly-once sweeps.

A snapshot that shares objects with the live state reaches the checkpoint with changes
made after its epoch; these dataflows make that visible. Each builder takes a stream of
small ints, like those of :mod:`tests.checkpoint.pipelines`, which it extends.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import operators  # noqa: F401 - registers the stream methods
from tests.examples import load_example
from timely import StatefulVertex, Stream, exchange

icc = load_example("incremental_cc")


def dict_state(s: Stream) -> Stream:
    """``map_with_state`` whose state is a dict the update changes and returns."""

    def update(key: Any, x: int, seen: dict[int, int]) -> tuple[dict[int, int], list[Any]]:
        # (key, x, how many x so far): the same multiset whatever the order within an epoch
        seen[x] = seen.get(x, 0) + 1
        return seen, [(key, x, seen[x])]

    return s.map_with_state(lambda x: x % 3, dict, update)


class Tally(StatefulVertex):
    """A user's vertex: per key, a list of every value so far, appended to in place at
    each epoch's notification; sends each key's total and length."""

    def __init__(self) -> None:
        super().__init__()
        self.pending = self.keyed_state("pending")
        self.lists = self.keyed_state("lists")

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        self.table_at(self.pending, time).setdefault(0, []).extend(records)

    def on_notify(self, time: tuple[int, ...]) -> None:
        table = self.lists.table((0,))
        out = []
        for x in sorted(self.pending.pop(time).get(0, [])):
            values = table.setdefault(x % 4, [])
            values.append(x)
            out.append((x % 4, sum(values), len(values)))
        self.send_by(0, out, time)


def user_vertex(s: Stream) -> Stream:
    return s.flow.vertex([(s, exchange(lambda x: x % 4))], Tally, name="tally")[0]


def sliding_values(s: Stream) -> Stream:
    """Sliding windows with an inverse over values that are not the keys."""
    return s.reduce_by_window(
        lambda x: x % 2, operator.add, 5, 1, inverse=operator.sub, value=lambda x: x + 1
    )


def joined(s: Stream) -> Stream:
    """Each value joined with every earlier or equal value of the same residue."""
    return s.join_streaming(s.select(lambda x: x * 10), lambda x: x % 3, lambda y: y // 10 % 3)


def components(s: Stream) -> Stream:
    """Incremental connected components (a union-find changed in place) over edges."""
    return icc.component_changes(s.select(lambda x: (x % 7, x // 7)))


def loop_and_running(s: Stream) -> Stream:
    """A fixpoint per epoch beside a running reduce: loops and stateless steps."""
    reached = s.iterate(lambda r: r.select(lambda x: 3 * x % 29), until="fixpoint")
    return reached.concat(s.running_reduce(lambda x: x % 2, operator.add))


MUTABLE: dict[str, Callable[[Stream], Stream]] = {
    "dict_state": dict_state,
    "user_vertex": user_vertex,
    "sliding_values": sliding_values,
    "joined": joined,
    "components": components,
    "loop_and_running": loop_and_running,
}
