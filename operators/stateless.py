"""Record-at-a-time operators: select, where, select_many; and distinct (per time).

Each processes a batch in one loop under one ``try``: a failing user function stops
the run through ``user_error`` with the record the loop was on, at no per-record cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from operators.state import StatefulVertex
from progress import Timestamp
from timely import GraphBuildError, Stream, Vertex, exchange, stream_method
from timely.errors import function_location


def _check(op: str, what: str, fn: Any) -> None:
    if not callable(fn):
        raise GraphBuildError(f"{op}: {what} must be a function, got {fn!r}")


def _incomparable(op: str, a: Any, b: Any) -> TypeError:
    """The error for values of one key that ``<`` cannot order: the user's ``value``
    gave them (raised by the operator on purpose, so it is reported as the user's)."""
    return TypeError(
        f"{op}: value() gave {a!r} and {b!r} for one key, which do not compare; "
        "make it return values of one ordered type (numbers, strings, tuples of them)"
    )


def _identity(record: Any) -> Any:
    return record


class Select(Vertex):
    """Sends ``f(record)`` for every record."""

    def __init__(self, f: Callable[[Any], Any]) -> None:
        self.f = f

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        f = self.f
        out: list[Any] = []
        append = out.append
        record = None
        try:
            for record in records:
                append(f(record))
        except Exception as e:
            self.fail(e, time, record, f)
        self.send_by(0, out, time)


class Where(Vertex):
    """Sends the records for which ``pred(record)`` is true."""

    def __init__(self, pred: Callable[[Any], Any]) -> None:
        self.pred = pred

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        pred = self.pred
        out: list[Any] = []
        append = out.append
        record = None
        try:
            for record in records:
                if pred(record):
                    append(record)
        except Exception as e:
            self.fail(e, time, record, pred)
        self.send_by(0, out, time)


class SelectMany(Vertex):
    """Sends every item of ``f(record)`` for every record."""

    def __init__(self, f: Callable[[Any], Iterable[Any]]) -> None:
        self.f = f

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        f = self.f
        out: list[Any] = []
        extend = out.extend
        record = None
        try:
            for record in records:
                extend(f(record))
        except Exception as e:
            self.fail(e, time, record, f)
        self.send_by(0, out, time)


class Distinct(StatefulVertex):
    """Sends the first record of each key at each time; forgets the time when it completes."""

    def __init__(self, key: Callable[[Any], Any]) -> None:
        super().__init__()
        self.key = key
        self.seen = self.keyed_state("seen")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        seen = self.table_at(self.seen, time)
        key = self.key
        out: list[Any] = []
        record = None
        try:
            for record in records:
                k = key(record)
                if k not in seen:
                    seen[k] = None
                    out.append(record)
        except Exception as e:
            self.fail(e, time, record, key)
        self.send_by(0, out, time)

    def on_notify(self, time: Timestamp) -> None:
        self.seen.pop(time)


@stream_method
def select(stream: Stream, f: Callable[[Any], Any], name: str = "select") -> Stream:
    """``f(record)`` for every record, at the record's time (LINQ's Select, a map)."""
    _check("select", "f", f)
    return stream.flow.vertex(
        [(stream, None)], lambda: Select(f), name=name, where=function_location(f)
    )[0]


@stream_method
def where(stream: Stream, pred: Callable[[Any], Any], name: str = "where") -> Stream:
    """The records for which ``pred(record)`` is true (LINQ's Where, a filter)."""
    _check("where", "pred", pred)
    return stream.flow.vertex(
        [(stream, None)], lambda: Where(pred), name=name, where=function_location(pred)
    )[0]


@stream_method
def select_many(
    stream: Stream, f: Callable[[Any], Iterable[Any]], name: str = "select_many"
) -> Stream:
    """Every item of the iterable ``f(record)``, for every record (a flat map)."""
    _check("select_many", "f", f)
    return stream.flow.vertex(
        [(stream, None)], lambda: SelectMany(f), name=name, where=function_location(f)
    )[0]


@stream_method
def distinct(
    stream: Stream, key: Callable[[Any], Any] | None = None, name: str = "distinct"
) -> Stream:
    """One record per distinct ``key(record)`` (the record itself by default) per time.

    Records are exchanged by key so that duplicates meet; the first to arrive is sent
    at once, the others dropped. Keys must have a stable hash (see ``timely.exchange``).
    """
    k = _identity if key is None else key
    _check("distinct", "key", k)
    return stream.flow.vertex(
        [(stream, exchange(k))],
        lambda: Distinct(k),
        name=name,
        where=function_location(key) if key is not None else "distinct",
    )[0]
