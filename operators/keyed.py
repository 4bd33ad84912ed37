"""Keyed, per-time operators: group_by, count_by, aggregate, min_by, max_by.

Each exchanges records by key, so that all the records of a key at a time meet on one
worker, buffers them in a :class:`~operators.state.KeyedState` and emits when the time
completes (``notify_at``). ``aggregate`` (and the operators built on it) first folds
each batch per key on the worker that produced it, so only one partial aggregate per
key per batch crosses the exchange.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from operators.state import StatefulVertex
from operators.stateless import _check, _incomparable
from progress import Timestamp
from timely import GraphBuildError, Stream, Vertex, exchange, stream_method
from timely.errors import function_location

A = TypeVar("A")


class GroupBy(StatefulVertex):
    """Buffers each key's records per time; at completion sends ``reduce(key, values)``."""

    def __init__(
        self, key: Callable[[Any], Any], reduce: Callable[[Any, list[Any]], Iterable[Any]]
    ) -> None:
        super().__init__()
        self.key = key
        self.reduce = reduce
        self.groups = self.keyed_state("groups")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        self.group_into(self.table_at(self.groups, time), self.key, records, time)

    def on_notify(self, time: Timestamp) -> None:
        reduce = self.reduce
        out: list[Any] = []
        group: Any = None
        try:
            for group in self.groups.pop(time).items():
                out.extend(reduce(*group))
        except Exception as e:
            self.fail(e, time, group, reduce)
        self.send_by(0, out, time)


class PreCombine(Vertex):
    """Folds each batch per key into one partial aggregate: sends ``(key, partial)``."""

    def __init__(
        self, key: Callable[[Any], Any], seed: Callable[[], Any], fold: Callable[[Any, Any], Any]
    ) -> None:
        self.key = key
        self.seed = seed
        self.fold = fold

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        key, seed, fold = self.key, self.seed, self.fold
        partial: dict[Any, Any] = {}
        record = None
        try:
            for record in records:
                k = key(record)
                partial[k] = fold(partial[k] if k in partial else seed(), record)
        except Exception as e:
            self.fail(e, time, record, fold)
        self.send_by(0, list(partial.items()), time)


class CountCombine(Vertex):
    """``count_by``'s pre-combine: counts a whole batch per key in C (``Counter``)."""

    def __init__(self, key: Callable[[Any], Any]) -> None:
        self.key = key

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        key = self.key
        try:
            counts = Counter(map(key, records))
        except Exception:
            # Find the record the key function fails on, to name it (keys must be pure).
            for record in records:
                try:
                    key(record)
                except Exception as e:
                    self.fail(e, time, record, key)
            raise
        self.send_by(0, list(counts.items()), time)


class Merge(StatefulVertex):
    """Merges the partial aggregates of each key per time; sends them when the time completes.

    Sends ``(key, value)``, or just ``value`` when ``values_only``.
    """

    def __init__(self, merge: Callable[[Any, Any], Any], values_only: bool = False) -> None:
        super().__init__()
        self.merge = merge
        self.values_only = values_only
        self.acc = self.keyed_state("acc")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        self.fold_pairs(self.table_at(self.acc, time), self.merge, records, time)

    def on_notify(self, time: Timestamp) -> None:
        acc = self.acc.pop(time)
        self.send_by(0, list(acc.values()) if self.values_only else list(acc.items()), time)


_first = operator.itemgetter(0)
"""A pair's key: an exchange's key function, called per record in C."""


def _aggregate(
    stream: Stream,
    key: Callable[[Any], Any],
    seed: Callable[[], Any],
    fold: Callable[[Any, Any], Any],
    merge: Callable[[Any, Any], Any],
    name: str,
    values_only: bool = False,
    where: str | None = None,
    combine: Callable[[], Vertex] | None = None,
) -> Stream:
    flow = stream.flow
    partial = flow.vertex(
        [(stream, None)],
        combine or (lambda: PreCombine(key, seed, fold)),
        name=f"{name}.combine",
        where=where or function_location(fold),
    )[0]
    return flow.vertex(
        [(partial, exchange(_first))],
        lambda: Merge(merge, values_only),
        name=name,
        where=where or function_location(merge),
    )[0]


@stream_method
def group_by(
    stream: Stream,
    key: Callable[[Any], Any],
    reduce: Callable[[Any, list[Any]], Iterable[Any]],
    name: str = "group_by",
) -> Stream:
    """Per time, ``reduce(key, records)`` for each key's records; sends what it returns.

    ``reduce`` returns an iterable of output records and runs once the time is complete,
    on the worker that owns the key; the records' order within a group is unspecified.
    """
    _check("group_by", "key", key)
    _check("group_by", "reduce", reduce)
    return stream.flow.vertex(
        [(stream, exchange(key))],
        lambda: GroupBy(key, reduce),
        name=name,
        where=function_location(reduce),
    )[0]


@stream_method
def aggregate(
    stream: Stream,
    key: Callable[[Any], Any],
    seed: Callable[[], A],
    fold: Callable[[A, Any], A],
    merge: Callable[[A, A], A],
    name: str = "aggregate",
) -> Stream:
    """Per time, ``(key, value)`` for each key: its records folded into one value.

    ``seed()`` makes a fresh accumulator (``int``, ``list``, ``lambda: 0``);
    ``fold(acc, record)`` adds a record to it (it may update ``acc`` in place and return
    it); ``merge(a, b)`` combines two accumulators of one key. Each worker folds each
    batch before the exchange, so ``merge`` must be associative and commutative, and
    agree with ``fold`` (folding ``xs + ys`` equals merging the folds of ``xs`` and ``ys``).
    """
    _check("aggregate", "key", key)
    if not callable(seed):
        raise GraphBuildError(
            f"aggregate: seed must be a zero-argument function making a fresh accumulator, "
            f"such as int or lambda: 0; got {seed!r}"
        )
    _check("aggregate", "fold", fold)
    _check("aggregate", "merge", merge)
    return _aggregate(stream, key, seed, fold, merge, name)


def _count(acc: int, record: Any) -> int:
    return acc + 1


@stream_method
def count_by(stream: Stream, key: Callable[[Any], Any], name: str = "count_by") -> Stream:
    """Per time, ``(key, n)``: how many records have each ``key(record)``."""
    _check("count_by", "key", key)
    return _aggregate(
        stream,
        key,
        int,
        _count,
        operator.add,
        name,
        where=function_location(key),
        combine=lambda: CountCombine(key),
    )


class _Empty:
    """The accumulator of a key that has no record yet; never leaves its worker."""


_EMPTY = _Empty()


def _extreme(
    op: str, stream: Stream, key: Callable[[Any], Any], value: Callable[[Any], Any], name: str
) -> Stream:
    _check(op, "key", key)
    _check(op, "value", value)
    better = operator.lt if op == "min_by" else operator.gt

    def fold(acc: Any, record: Any) -> Any:
        if acc is _EMPTY:
            return record
        x, y = value(record), value(acc)
        try:  # inline, not a helper: this runs once per record
            return record if better(x, y) else acc
        except TypeError as e:  # values that do not compare: value's fault
            raise _incomparable(op, x, y) from e

    def seed() -> Any:
        return _EMPTY

    # Merging two partials is folding one into the other: a record is an accumulator.
    return _aggregate(
        stream, key, seed, fold, fold, name, values_only=True, where=function_location(value)
    )


@stream_method
def min_by(
    stream: Stream, key: Callable[[Any], Any], value: Callable[[Any], Any], name: str = "min_by"
) -> Stream:
    """Per time and key, the record with the least ``value(record)`` (one of them, on ties)."""
    return _extreme("min_by", stream, key, value, name)


@stream_method
def max_by(
    stream: Stream, key: Callable[[Any], Any], value: Callable[[Any], Any], name: str = "max_by"
) -> Stream:
    """Per time and key, the record with the greatest ``value(record)`` (one of them, on ties)."""
    return _extreme("max_by", stream, key, value, name)
