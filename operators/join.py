"""Equi-joins of two streams: per time (``join``) and across times (``join_streaming``)."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from operators.loops import loop_finished
from operators.state import StatefulVertex
from operators.stateless import _check
from progress import Timestamp
from progress import join as lub
from timely import GraphBuildError, Stream, exchange, stream_method
from timely.errors import function_location


def _pair(left: Any, right: Any) -> tuple[Any, Any]:
    return (left, right)


class Join(StatefulVertex):
    """Buffers both sides by key per time; at completion sends ``result(l, r)`` per match.

    The table's value for a key is ``(lefts, rights)``; one table, so that a key's two
    sides move together when state is re-partitioned. With an outer side (below), it
    holds the round's records of the key, one list.

    In a loop, a side from outside it (``outer``, its port) is loop-invariant: every
    round of its outer time ``o`` (its own timestamp, of ``depth`` coordinates: an
    epoch, for a stream of the top level) joins with it. It comes in once, at round 0
    (``(*o, 0)``; ``(*o, 0, 0)`` two loops in), and is kept indexed by key in
    ``arranged``, in one table at that time, instead of being delivered and indexed
    again every round; the table goes once the loop is done with ``o`` on both inputs,
    which is checked when a round is notified and when another outer time's first
    records come (a finished outer time's index waits for the next such event).
    A round ``(*o, i)`` is notified only after its inputs' frontiers pass it, so after
    every record of ``(*o, 0)``: the index is complete then.
    """

    def __init__(
        self,
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        result: Callable[[Any, Any], Any],
        outer: int | None = None,
        depth: int = 1,
    ) -> None:
        super().__init__()
        self.keys = (left_key, right_key)
        self.result = result
        self.sides = self.keyed_state("sides")
        self.outer = outer
        self.depth = depth
        self.arranged = self.keyed_state("arranged") if outer is not None else None

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        if self.arranged is not None:  # a loop-invariant side: one list per key, per side
            if input != self.outer:
                table = self.table_at(self.sides, time)
            else:
                base = self._round_0(time)
                if self.arranged.get(base) is None:  # a new outer time: let go of the
                    self._forget_arranged(base)  # indexes of those the loop is done with
                table = self.arranged.table(base)
            self.group_into(table, self.keys[input], records, time)
            return
        sides = self.table_at(self.sides, time)
        key = self.keys[input]
        record = None
        try:
            for record in records:
                k = key(record)
                both = sides.get(k)
                if both is None:
                    sides[k] = both = ([], [])
                both[input].append(record)
        except Exception as e:
            self.fail(e, time, record, key)

    def on_notify(self, time: Timestamp) -> None:
        if self.outer is not None:
            self._notify_arranged(time)
            return
        result = self.result
        out: list[Any] = []
        append = out.append
        pair: Any = None
        try:
            for lefts, rights in self.sides.pop(time).values():
                for left in lefts:
                    for right in rights:
                        pair = (left, right)
                        append(result(left, right))
        except Exception as e:
            self.fail(e, time, pair, result)
        self.send_by(0, out, time)

    def _notify_arranged(self, time: Timestamp) -> None:
        """A round's records joined with the loop-invariant side's index."""
        assert self.arranged is not None
        base = self._round_0(time)
        index = self.arranged.get(base) or {}
        result = self.result
        out: list[Any] = []
        append = out.append
        a: Any = None
        b: Any = None
        try:
            if self.outer == 1:  # this round's records on the left
                for k, lefts in self.sides.pop(time).items():
                    rights = index.get(k)
                    if rights:
                        for a in lefts:
                            for b in rights:
                                append(result(a, b))
            else:
                for k, rights in self.sides.pop(time).items():
                    lefts = index.get(k)
                    if lefts:
                        for b in rights:
                            for a in lefts:
                                append(result(a, b))
        except Exception as e:
            self.fail(e, time, (a, b), result)
        self.send_by(0, out, time)
        self._forget_arranged(base)

    def _round_0(self, time: Timestamp) -> Timestamp:
        """The time the outer side's records of ``time``'s outer time came at."""
        d = self.depth
        return (*time[:d], *(0,) * (len(time) - d))

    def _forget_arranged(self, current: Timestamp) -> None:
        """Drop the index of each outer time the loop is done with: no record of it can
        come on either input, and no round of it waits for its notification (rounds of
        two epochs are incomparable, so one may be notified after a later epoch's)."""
        assert self.arranged is not None
        d = self.depth
        waiting = {t[:d] for t in self.sides.times()}
        for t in self.arranged.times():
            outer = t[:d]
            done = t != current and outer not in waiting
            if done and all(loop_finished(self, outer, p) for p in (0, 1)):
                self.arranged.pop(t)


@stream_method
def join(
    stream: Stream,
    other: Stream,
    left_key: Callable[[Any], Any],
    right_key: Callable[[Any], Any],
    result: Callable[[Any, Any], Any] = _pair,
    name: str = "join",
) -> Stream:
    """Per time, ``result(l, r)`` for every ``l`` of this stream and ``r`` of ``other``
    at that time with ``left_key(l) == right_key(r)`` (``(l, r)`` by default).

    Both inputs are exchanged by key; the matches are sent once the time is complete.
    Inside a loop, a stream from outside it is loop-invariant (joined at every round
    of its epoch, or of its outer loop's iteration) and indexed once for all of them,
    not once per round.
    """
    _check("join", "left_key", left_key)
    _check("join", "right_key", right_key)
    _check("join", "result", result)
    outer: int | None = None
    depth = 1
    if stream.scope.depth != other.scope.depth and stream.flow is other.flow:
        outer = 1 if other.scope.depth < stream.scope.depth else 0
        depth = 1 + (stream, other)[outer].scope.depth  # its timestamps' length
    return stream.flow.vertex(
        [(stream, exchange(left_key)), (other, exchange(right_key))],
        lambda: Join(left_key, right_key, result, outer, depth),
        name=name,
        where=function_location(result),
        loop_invariant=outer is None,  # the outer side comes once; Join keeps it per epoch
    )[0]


class StreamingJoin(Join):
    """Matches each time's records with everything the other side had at earlier times.

    ``sides`` (inherited) buffers a time's records per key until the time completes.
    ``stored`` is the cross-time table: one table at the scope's first time ``(0, ...)``
    mapping each key to ``(lefts, rights)``, each a list of ``(time, records)`` groups in
    the order their times were notified. With ``within``, ``arrived`` indexes, per epoch,
    the keys that stored records at it, so that eviction visits only those keys. Both
    change only in ``on_notify``: a snapshot at a completed epoch is then consistent.
    """

    def __init__(
        self,
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        result: Callable[[Any, Any], Any],
        within: int | None,
    ) -> None:
        super().__init__(left_key, right_key, result)
        self.within = within
        self.stored = self.keyed_state("stored", tracked=True, incremental=True)
        self.arrived = self.keyed_state("arrived") if within is not None else None

    def on_notify(self, time: Timestamp) -> None:
        fresh = self.sides.pop(time)
        stored = self.stored.table((0,) * len(time))
        if self.within is not None:
            self._evict(stored, time[0] - self.within)
        result = self.result
        outs: dict[Timestamp, list[Any]] = {time: []}
        pair: Any = None
        try:
            for k, (lefts, rights) in fresh.items():
                here = outs[time]
                for left in lefts:
                    for right in rights:
                        pair = (left, right)
                        here.append(result(left, right))
                entry = stored.get(k)
                if entry is None:
                    continue
                old_lefts, old_rights = entry
                if lefts:
                    for s, olds in old_rights:
                        out = _bucket(outs, time, s)
                        for left in lefts:
                            for right in olds:
                                pair = (left, right)
                                out.append(result(left, right))
                if rights:
                    for s, olds in old_lefts:
                        out = _bucket(outs, time, s)
                        for left in olds:
                            for right in rights:
                                pair = (left, right)
                                out.append(result(left, right))
        except Exception as e:
            self.fail(e, time, pair, result)
        self._store(stored, fresh, time)
        for at, records in outs.items():
            if records:
                self.send_by(0, records, at)

    def _store(
        self, stored: MutableMapping[Any, Any], fresh: MutableMapping[Any, Any], time: Timestamp
    ) -> None:
        """Fold a completed time's records into the cross-time table."""
        new: list[Any] = []
        for k, (lefts, rights) in fresh.items():
            entry: tuple[list[Any], list[Any]] | None = stored.get(k)
            if entry is None:
                stored[k] = entry = ([], [])
                new.append(k)
            if lefts:
                entry[0].append((time, lefts))
            if rights:
                entry[1].append((time, rights))
        self.stored.added((0,) * len(time), new)
        self.stored.touched((0,) * len(time), fresh)
        if self.arrived is not None and fresh:
            self.arrived.table(time).update(dict.fromkeys(fresh))

    def _evict(self, stored: MutableMapping[Any, Any], horizon: int) -> None:
        """Forget the records of epochs before ``horizon``; only the keys they had are visited."""
        assert self.arrived is not None
        for t in self.arrived.times():
            if t[0] >= horizon:
                break
            keys = self.arrived.pop(t)
            self.stored.touched((0,) * len(t), keys)
            for k in keys:
                entry = stored.get(k)
                if entry is None:
                    continue
                for groups in entry:
                    n = 0
                    while n < len(groups) and groups[n][0][0] < horizon:
                        n += 1
                    del groups[:n]
                if not entry[0] and not entry[1]:
                    del stored[k]


def _bucket(outs: dict[Timestamp, list[Any]], time: Timestamp, earlier: Any) -> list[Any]:
    """The output list for a match of ``time`` with a record of ``earlier``: at their join.

    For epochs that is ``time`` itself; in a loop two times may be incomparable, and the
    match then belongs at their least upper bound (coordinate-wise max), which is still
    at or after ``time`` and so may be sent from ``on_notify(time)``.
    """
    at = time if len(time) == 1 else lub(time, tuple(earlier))
    out = outs.get(at)
    if out is None:
        outs[at] = out = []
    return out


@stream_method
def join_streaming(
    stream: Stream,
    other: Stream,
    left_key: Callable[[Any], Any],
    right_key: Callable[[Any], Any],
    result: Callable[[Any, Any], Any] = _pair,
    within: int | None = None,
    name: str = "join_streaming",
) -> Stream:
    """``result(l, r)`` once for every pair with ``left_key(l) == right_key(r)``, across times.

    Unlike :func:`join`, a record also matches the records of the other side that came
    at earlier times: each matching pair is sent exactly once, at the later of the two
    times (their least upper bound, for loop timestamps), once that time is complete.
    A static table sent at epoch 0 thus joins with every later epoch of a stream.

    State grows with everything seen. ``within=w`` (epochs, top-level streams only)
    bounds it: only pairs whose epochs differ by at most ``w`` match, and a record is
    forgotten once the epoch ``w`` after its own is complete (``within=0`` is the
    per-epoch :func:`join`). Both inputs are exchanged by key.
    """
    _check("join_streaming", "left_key", left_key)
    _check("join_streaming", "right_key", right_key)
    _check("join_streaming", "result", result)
    if within is not None:
        if not isinstance(within, int) or isinstance(within, bool) or within < 0:
            raise GraphBuildError(
                f"join_streaming: within must be an int >= 0 (epochs) or None, got {within!r}"
            )
        if stream.scope.depth:
            raise GraphBuildError(
                f"join_streaming: within counts epochs; call .leave() to bring {stream.name!r} "
                f"out of loop {stream.scope.name!r} first, or drop within"
            )
    return stream.flow.vertex(
        [(stream, exchange(left_key)), (other, exchange(right_key))],
        lambda: StreamingJoin(left_key, right_key, result, within),
        name=name,
        where=function_location(result),
        loop_invariant=False,  # it keeps every record across times itself
    )[0]
