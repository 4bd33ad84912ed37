"""Loops that stop by themselves: ``iterate(body, until=...)`` and ``fixpoint``.

``Stream.iterate`` (in ``timely``) runs a plain loop; with ``until`` it hands over to
:func:`_iterate_until` here, found through the operator registry. Two ways to stop:

**At a fixpoint** (``until="fixpoint"``, or :func:`fixpoint`), built from timely's loop
scopes (``flow.loop()``, ``enter``, ``feedback``, ``leave``)::

    input ─enter─▶ head ─▶ NewOnly ─┬─▶ body ─▶ feedback ─▶ head (next round)
                                    └─leave─▶ result

``NewOnly`` is a distinct across the rounds of an epoch: records are exchanged by
value, and a record already seen at any round of the same epoch is dropped, so only
new records go round again and the loop stops once a round derives nothing new. The
result, per epoch, is the set of everything reached (each record once): the input's
records and all that the body derived from them. With ``max_iters``, a record that
arrives at an earlier round than it was first seen at goes round again from there, and
a per-epoch ``distinct`` after the loop keeps the result a set.

**When a predicate holds** (``until=pred``), per record, as Haskell's ``until``::

    input ─Until─┬─(done)──────────────────────────────────────▶ result
                 └─(not yet)─enter─▶ head ─▶ body ─▶ Until ─┬─(done)─leave─▶ result
                                      ▲                     └─(not yet)─▶ feedback ─┐
                                      └─────────────────────────────────────────────────┘
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from operators.state import KeyedState, StatefulVertex
from operators.stateless import Distinct, _identity, _incomparable
from progress import Timestamp, less_equal
from timely import GraphBuildError, Stream, Vertex, exchange, stream_method
from timely.errors import function_location


class NewOnly(StatefulVertex):
    """Sends the records not seen yet in the epoch, at any round.

    ``seen`` maps each record to the round it was sent at. With ``earliest`` (a bounded
    loop), a record seen before is sent again if it now arrives at an earlier round than
    before: batches of different rounds race, and a bounded loop must derive from each
    record at its earliest round (its distance from the input) to reach everything
    within the bound. The unbounded loop needs no resending: it reaches the same
    closure either way.

    ``seen`` holds one table per epoch ``e`` (per outer time, in nested loops), at the
    time ``(e, 0)``, round 0, dropped once the loop has finished the epoch
    (:func:`epoch_table`).
    """

    def __init__(self, earliest: bool = False) -> None:
        super().__init__()
        self.earliest = earliest
        self.seen = self.keyed_state("seen")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        seen = epoch_table(self, self.seen, time)
        out: list[Any] = []
        append = out.append
        r = time[-1]
        if self.earliest:
            for record in records:
                first = seen.get(record)
                if first is None or r < first:
                    seen[record] = r
                    append(record)
        else:
            for record in records:
                if record not in seen:
                    seen[record] = r
                    append(record)
        self.send_by(0, out, time)


def epoch_table(
    vertex: Vertex, state: KeyedState[Any], time: Timestamp
) -> MutableMapping[Any, Any]:
    """The table of ``state`` that a loop vertex keeps for all the rounds of ``time``'s
    epoch (outer time), at its round 0, made if new. Tables of epochs the loop has
    finished are dropped here, when another epoch's is in use: a loop has no time at
    which "the epoch is done" could be asked for with ``notify_at``."""
    base = (*time[:-1], 0)
    table = state.get(base)
    if table is None:
        table = state.table(base)
    if len(state.times()) > 1:
        for t in state.times():
            if t != base and loop_finished(vertex, t[:-1]):
                state.pop(t)
    return table


def loop_finished(vertex: Vertex, outer: Timestamp, input: int = 0) -> bool:
    """Whether the loop around ``vertex`` is done with the outer time ``outer`` (an epoch,
    in a top-level loop): no record at any round of it can reach ``input`` any more.

    Per-epoch state inside a loop cannot be freed from ``on_notify``: no round is known
    to be the last, so there is no time to ``notify_at``. A vertex asks this instead,
    from a later call, about the epochs it still holds (see ``NewOnly`` and
    ``examples/connected_components.py``).
    """
    frontier = vertex.frontier(input)
    k = len(outer)
    return not any(less_equal(f[:k], outer) for f in frontier)


@stream_method
def fixpoint(
    stream: Stream,
    body: Callable[[Stream], Stream],
    max_iters: int | None = None,
    name: str = "fixpoint",
    min_by: tuple[Callable[[Any], Any], Callable[[Any], Any]] | None = None,
) -> Stream:
    """Per epoch, the set reached by applying ``body`` to new records until none is new.

    The same as ``stream.iterate(body, until="fixpoint", max_iters=...)``.
    ``body`` gets a stream inside a loop scope carrying the records that are new in a
    round, and returns a stream (in that scope) of records derived from them; those not
    seen before in the epoch go round again. With ``min_by=(key, value)``, only those
    whose ``value`` is less than every earlier one of their ``key`` in the epoch go round
    again, and the result holds each key's least record (a min-monotone fixpoint, as
    Datalog's ``min`` aggregates: label propagation, shortest paths); records need not be
    hashable then, their keys must. The result, at each epoch, holds each
    distinct record of the input and of everything derived once (a set, unordered): the
    least fixpoint of ``X = input | body(X)`` when ``body`` works record by record.
    ``max_iters`` bounds the applications of ``body``: the result then holds what is
    reached within ``max_iters`` of them. Records must be hashable with a stable hash
    (see ``timely.exchange``), as they are exchanged by value. A stream from outside the
    loop can be used inside ``body`` as it is: it is entered for you, loop-invariant (every
    round of its epoch sees it).
    """
    if not callable(body):
        raise GraphBuildError(f"fixpoint: body must be a function of a stream, got {body!r}")
    _check_max_iters("fixpoint", max_iters)
    if min_by is not None:
        return _least_fixpoint(stream, body, max_iters, name, min_by)
    flow = stream.flow
    # One round more than applications: round ``max_iters`` only lets the records that
    # the last application derived leave (``BelowRound`` keeps them from ``body``).
    rounds = None if max_iters is None else max_iters + 1
    loop = flow.loop(name=name, parent=stream.scope, max_iters=rounds)
    handle, again = loop.feedback()
    head = stream.enter(loop).concat(again, name=f"{name}.head")
    bounded = max_iters is not None
    new = flow.vertex(
        [(head, exchange(_identity))],
        lambda: NewOnly(earliest=bounded),
        name=f"{name}.new",
        where=function_location(body),
    )[0]
    into_body = new
    if max_iters is not None:
        limit = max_iters
        into_body = new.unary(lambda: BelowRound(limit), name=f"{name}.rounds")
    result = body(into_body)
    if not isinstance(result, Stream):
        raise GraphBuildError(f"fixpoint: the body must return a Stream, got {result!r}")
    handle.connect(result)
    out = new.leave()
    if bounded:
        # A record resent at an earlier round leaves twice: keep one per epoch. It is on
        # its owner worker already (``new`` exchanged by value), so no exchange is needed.
        out = flow.vertex([(out, None)], lambda: Distinct(_identity), name=f"{name}.set")[0]
    return out


class LeastOnly(StatefulVertex):
    """Sends the records that improve on their key's least value so far in the epoch.

    Exchanged by key; ``best`` holds one table per epoch (outer time), at round 0,
    mapping each key to its least value, dropped once the loop is done with the epoch
    (as :class:`NewOnly`'s). Of a batch, each improved key's least record is sent.
    """

    def __init__(self, key: Callable[[Any], Any], value: Callable[[Any], Any]) -> None:
        super().__init__()
        self.key = key
        self.value = value
        self.best = self.keyed_state("best")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        best = epoch_table(self, self.best, time)
        key, value = self.key, self.value
        chosen: dict[Any, Any] = {}  # each improved key's best record of the batch
        get = best.get
        record: Any = None
        fn: Any = key
        try:
            for record in records:
                k = key(record)
                was = get(k)
                fn = value
                v = value(record)
                try:
                    better = was is None or v < was
                except TypeError as e:
                    raise _incomparable(self.name, v, was) from e
                if better:
                    best[k] = v
                    chosen[k] = record
                fn = key
        except Exception as e:
            self.fail(e, time, record, fn)
        self.send_by(0, list(chosen.values()), time)


def _least_fixpoint(
    stream: Stream,
    body: Callable[[Stream], Stream],
    max_iters: int | None,
    name: str,
    min_by: tuple[Callable[[Any], Any], Callable[[Any], Any]],
) -> Stream:
    """``fixpoint`` keeping each key's least record (see its docstring)::

    input ─enter─▶ head ─▶ LeastOnly ─┬─▶ body ─▶ feedback ─▶ head
                                      └─leave─▶ LeastPerTime (per epoch) ─▶ result
    """
    if not (isinstance(min_by, tuple) and len(min_by) == 2 and all(map(callable, min_by))):
        raise GraphBuildError(
            f"{name}: min_by must be a pair of functions (key, value), as Stream.min_by "
            f"takes, for example min_by=(lambda r: r[0], lambda r: r[1]); got {min_by!r}"
        )
    if max_iters is not None:
        raise GraphBuildError(
            f"{name}: min_by cannot be bounded by max_iters (a bounded loop must follow "
            "every record from its earliest round, and min_by drops those that do not "
            "improve); drop max_iters, or bound the rounds in the records themselves"
        )
    key, value = min_by
    flow = stream.flow
    loop = flow.loop(name=name, parent=stream.scope)
    handle, again = loop.feedback()
    head = stream.enter(loop).concat(again, name=f"{name}.head")
    least = flow.vertex(
        [(head, exchange(key))],
        lambda: LeastOnly(key, value),
        name=f"{name}.least",
        where=function_location(value),
    )[0]
    result = body(least)
    if not isinstance(result, Stream):
        raise GraphBuildError(f"{name}: the body must return a Stream, got {result!r}")
    handle.connect(result)
    return flow.vertex(
        [(least.leave(), exchange(key))],
        lambda: LeastPerTime(key, value),
        name=f"{name}.least_of_epoch",
        where=function_location(value),
    )[0]


class LeastPerTime(StatefulVertex):
    """Per time, each key's record of least value (what :func:`min_by` sends, without
    its fold before the exchange: the records come from :class:`LeastOnly`, one per key
    per batch already)."""

    def __init__(self, key: Callable[[Any], Any], value: Callable[[Any], Any]) -> None:
        super().__init__()
        self.key = key
        self.value = value
        self.least = self.keyed_state("least")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        least = self.table_at(self.least, time)
        get = least.get
        key, value = self.key, self.value
        record: Any = None
        try:
            for record in records:  # both ran on these records in LeastOnly already
                k = key(record)
                v = value(record)
                was = get(k)
                if was is None:
                    least[k] = (v, record)
                    continue
                try:
                    better = v < was[0]
                except TypeError as e:
                    raise _incomparable(self.name, v, was[0]) from e
                if better:
                    least[k] = (v, record)
        except Exception as e:
            self.fail(e, time, record, value)

    def on_notify(self, time: Timestamp) -> None:
        self.send_by(0, [record for _, record in self.least.pop(time).values()], time)


class BelowRound(Vertex):
    """Passes on the batches of rounds before ``limit``; drops the others."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        if time[-1] < self.limit:
            self.send_by(0, records, time)


class Until(Vertex):
    """Sends the records for which ``pred`` holds on output 0, the others on output 1."""

    def __init__(self, pred: Callable[[Any], bool]) -> None:
        self.pred = pred

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        pred = self.pred
        done: list[Any] = []
        more: list[Any] = []
        record = None
        try:
            for record in records:
                (done if pred(record) else more).append(record)
        except Exception as e:
            self.fail(e, time, record, pred)
        if done:
            self.send_by(0, done, time)
        if more:
            self.send_by(1, more, time)


def _check_max_iters(op: str, max_iters: int | None) -> None:
    if max_iters is not None and (
        not isinstance(max_iters, int) or isinstance(max_iters, bool) or max_iters < 1
    ):
        raise GraphBuildError(f"{op}: max_iters must be an int >= 1 or None, got {max_iters!r}")


def until_holds(
    stream: Stream,
    body: Callable[[Stream], Stream],
    pred: Callable[[Any], bool],
    max_iters: int | None = None,
    name: str = "iterate",
) -> Stream:
    """Per record ``x``, the first of ``x, body(x), body(body(x)), ...`` where ``pred`` holds.

    A record for which ``pred`` holds leaves (input records too, before any round);
    the others go round again. ``body`` may emit any number of records per record: each
    is followed on its own, and one for which ``body`` emits nothing ends there, not in
    the result. With ``max_iters``, what still fails ``pred`` after that many
    applications is dropped; without it, a record that never satisfies ``pred`` keeps
    the loop (and its epoch) going for ever. Sent at the input record's epoch.
    """
    _check_max_iters(name, max_iters)
    flow = stream.flow
    where = function_location(pred)
    done, todo = flow.vertex(
        [(stream, None)], lambda: Until(pred), name=f"{name}.until", outputs=2, where=where
    )
    loop = flow.loop(name=name, parent=stream.scope, max_iters=max_iters)
    handle, again = loop.feedback()
    result = body(todo.enter(loop).concat(again, name=f"{name}.head"))
    if not isinstance(result, Stream):
        raise GraphBuildError(f"{name}: the body must return a Stream, got {result!r}")
    finished, more = flow.vertex(
        [(result, None)], lambda: Until(pred), name=f"{name}.until", outputs=2, where=where
    )
    handle.connect(more)
    return done.concat(finished.leave(), name=f"{name}.done")


@stream_method
def _iterate_until(
    stream: Stream,
    body: Callable[[Stream], Stream],
    until: Any,
    max_iters: int | None,
    name: str,
    min_by: tuple[Callable[[Any], Any], Callable[[Any], Any]] | None = None,
) -> Stream:
    """What ``Stream.iterate`` calls when given ``until`` (see its docstring)."""
    if not callable(body):
        raise GraphBuildError(f"{name}: body must be a function of a stream, got {body!r}")
    if until == "fixpoint":
        reached: Stream = fixpoint(stream, body, max_iters=max_iters, name=name, min_by=min_by)
        return reached
    if isinstance(until, str) or not callable(until):
        raise GraphBuildError(
            f"{name}: until must be None, 'fixpoint' or a predicate on records, got {until!r}"
        )
    return until_holds(stream, body, until, max_iters=max_iters, name=name)
