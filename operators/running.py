"""Keyed running state across epochs: ``running_reduce`` and ``map_with_state``.

Unlike the per-time operators, these carry each key's state from epoch to epoch
(Spark Streaming's ``updateStateByKey``/``mapWithState``). Records are exchanged by key,
buffered per epoch, and applied only when their epoch is complete (``notify_at``), and
notifications come in timestamp order, so each key sees its epochs in order whatever
order the batches arrived in. Within one epoch the order of a key's records is
unspecified (as for ``group_by``).

State lives in :class:`~operators.state.KeyedState` tables, so checkpointing snapshots,
restores and re-partitions it like every other operator's: ``pending`` holds the
records of open epochs (one table per epoch), and ``state`` holds every key's running
state in one table stamped ``(0,)``, the first epoch, as it holds from the start (one
fixed time, so the tables of several workers merge on a re-partition). A restorer's
notification at ``(0,)`` finds nothing pending once epoch 0 is complete: harmless.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

from operators.state import StatefulVertex
from operators.stateless import _check, _identity
from operators.windows import _first, _top_level, pre_reduced
from progress import Timestamp
from timely import GraphBuildError, Marks, Stream, broadcast, exchange, pipeline, stream_method
from timely.errors import function_location

STATE_TIME: Timestamp = (0,)
"""The time the running state is kept at."""
_NONE = object()
"""No initial state given for a key."""


class _Running(StatefulVertex):
    """Buffers per epoch; at an epoch's completion applies it to the running state."""

    def __init__(self, initial_state: dict[Any, Any] | None = None) -> None:
        super().__init__()
        self.pending = self.keyed_state("pending")
        self.state = self.keyed_state("state", tracked=True, incremental=True)
        self.initial_state = initial_state
        """Per key, the state it starts from (a deep copy each time: the user's dict is
        shared by every worker and every restart)."""

    def _carried(self) -> MutableMapping[Any, Any]:
        """The running state of every key (on this worker)."""
        return self.state.table(STATE_TIME)

    def _start(self, key: Any) -> Any:
        """A fresh copy of ``key``'s given initial state, or ``_NONE``."""
        given = self.initial_state
        if given is None or key not in given:
            return _NONE
        return copy.deepcopy(given[key])


class RunningReduce(_Running):
    """``state[key] = f(state[key], partial)`` per epoch; sends ``(key, state)`` for the
    keys of the epoch, or (``every_key``) for every key held, at every epoch the stream
    has records on any worker (a second input, broadcast, marks those epochs)."""

    def __init__(
        self,
        f: Callable[[Any, Any], Any],
        initial_state: dict[Any, Any] | None = None,
        every_key: bool = False,
    ) -> None:
        super().__init__(initial_state)
        self.f = f
        self.every_key = every_key

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        if input == 1:  # an epoch with records somewhere: every key is sent at it
            self.notify_at(time)
            return
        self.fold_pairs(self.table_at(self.pending, time), self.f, records, time)

    def on_notify(self, time: Timestamp) -> None:
        pending = self.pending.pop(time)
        state = self._carried()
        f = self.f
        out: list[Any] = []
        new: list[Any] = []
        pair: Any = None
        try:
            for pair in pending.items():
                k, v = pair
                if k in state:
                    s = state[k] = f(state[k], v)
                else:
                    start = self._start(k)
                    s = state[k] = v if start is _NONE else f(start, v)
                    new.append(k)
                out.append((k, s))
        except Exception as e:
            self.fail(e, time, pair, f)
        self.state.added(STATE_TIME, new)
        self.state.changed(STATE_TIME, out, distinct=True)  # (one pair per key of pending)
        if self.every_key:
            out = list(state.items())
        self.send_by(0, out, time)


@stream_method
def running_reduce(
    stream: Stream,
    key: Callable[[Any], Any],
    f: Callable[[Any, Any], Any],
    value: Callable[[Any], Any] | None = None,
    name: str = "running_reduce",
    initial_state: Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None = None,
    every_key: bool = False,
) -> Stream:
    """Per epoch, ``(key, running value)`` for each key that has records in the epoch.

    The running value is ``f`` over all of the key's values (``value(record)``, the
    record itself by default) from the first epoch up to and including this one. ``f``
    must be associative and commutative: each worker reduces each batch before the
    exchange by key. Sent at the epoch, once it is complete.

    ``initial_state`` (``{key: value}`` or pairs; Spark's ``initialState``): a key's
    running value starts from it (``f(initial, first values)``). ``every_key=True``
    (Spark's ``updateStateByKey``): at every epoch with records, every key's running
    value is sent, not only those of the keys seen.
    """
    _top_level("running_reduce", stream)
    _check("running_reduce", "key", key)
    _check("running_reduce", "f", f)
    val = _identity if value is None else value
    _check("running_reduce", "value", val)
    given = _initial_states("running_reduce", initial_state)
    if not isinstance(every_key, bool):
        raise GraphBuildError(f"running_reduce: every_key must be True or False, got {every_key!r}")
    partial = pre_reduced(stream, key, val, f, name)
    inputs: list[tuple[Stream, Any]] = [(partial, exchange(_first))]
    if every_key:
        inputs.append(
            (
                stream.flow.vertex([(stream, pipeline())], Marks, name=f"{name}:epochs")[0],
                broadcast(),
            )
        )
    return stream.flow.vertex(
        inputs,
        lambda: RunningReduce(f, given, every_key),
        name=name,
        where=function_location(f),
    )[0]


def _initial_states(op: str, given: Any) -> dict[Any, Any] | None:
    """``initial_state`` as a dict, checked when building."""
    if given is None:
        return None
    try:
        states = dict(given)
    except (TypeError, ValueError):
        raise GraphBuildError(
            f"{op}: initial_state must be a dict of key -> initial state, or (key, state) "
            f"pairs; got {given!r}"
        ) from None
    return states


class MapWithState(_Running):
    """``update(key, value, state) -> (state, outputs)`` per record, epochs in order.

    ``state[key]`` is ``[state, last epoch with a record]``; the table is kept in the
    order of last use, so expiring keys pops from its front only. With ``on_timeout``,
    a key's expiry is due at a known epoch (its last one + ``timeout`` + 1): the vertex
    asks for a notification there, so each session's final record is sent at that epoch
    even when nothing else happens at it, and once; a restore asks again
    (:meth:`restored`).
    """

    def __init__(
        self,
        key: Callable[[Any], Any],
        initial: Callable[[], Any],
        update: Callable[[Any, Any, Any], tuple[Any, Iterable[Any]]],
        timeout: int | None,
        on_timeout: Callable[[Any, Any], Iterable[Any]] | None = None,
        initial_state: dict[Any, Any] | None = None,
    ) -> None:
        super().__init__(initial_state)
        self.state.ordered = True  # expiry pops the front: the order is part of the state
        self.key = key
        self.initial = initial
        self.update = update
        self.timeout = timeout
        self.on_timeout = on_timeout

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        self.group_into(self.table_at(self.pending, time), self.key, records, time)

    def on_notify(self, time: Timestamp) -> None:
        pending = self.pending.pop(time)
        state = self._carried()
        epoch = time[0]
        timeout = self.timeout
        out: list[Any] = []
        if timeout is not None:  # forget the keys idle for more than `timeout` epochs
            expired = []
            ended = []
            while state:
                k = next(iter(state))
                entry = state[k]
                if epoch - entry[1] <= timeout:
                    break
                del state[k]
                expired.append(k)
                ended.append((k, entry[0]))
            self.state.touched(STATE_TIME, expired)
            if self.on_timeout is not None:
                self._ended(ended, out, time)
        initial, update = self.initial, self.update
        new: list[Any] = []
        record: Any = None
        try:
            for k, records in pending.items():
                entry = state.pop(k, None)
                if entry is None:
                    s = self._start(k)
                    if s is _NONE:
                        s = initial()
                    new.append(k)
                else:
                    s = entry[0]
                for record in records:
                    s, outputs = update(k, record, s)
                    out.extend(outputs)
                state[k] = [s, epoch]  # re-inserted: the table stays in order of last use
        except Exception as e:
            self.fail(e, time, record, update)
        self.state.added(STATE_TIME, new)
        self.state.touched(STATE_TIME, pending)
        if self.on_timeout is not None and pending:
            assert timeout is not None
            self._due_at(epoch + timeout + 1)
        self.send_by(0, out, time)

    def _ended(self, ended: list[tuple[Any, Any]], out: list[Any], time: Timestamp) -> None:
        """Each timed-out key's final records, from ``on_timeout(key, state)``."""
        on_timeout = self.on_timeout
        assert on_timeout is not None
        pair: Any = None
        try:
            for pair in ended:
                out.extend(on_timeout(*pair))
        except Exception as e:
            self.fail(e, time, pair, on_timeout)

    def _due_at(self, epoch: int) -> None:
        """Expiries are due at ``epoch``: a notification there (asking twice is once)."""
        self.notify_at((epoch,))

    def restored(self, epoch: int) -> None:
        """After a restore from a checkpoint at ``epoch``, or keys installed by a
        migration: put the table back in order of last use (keys that came from several
        workers' parts, or bins moved in, were added at its end, and expiry pops only the
        front), and ask again for the notifications at the epochs the keys expire at."""
        if self.timeout is None:
            return
        table = self.state.get(STATE_TIME)
        if table is None:
            return
        lasts: set[int] = set()
        in_order, before = True, -1
        for entry in table.values():  # one pass; the table is read whole only to sort it
            last = entry[1]
            lasts.add(last)
            in_order = in_order and last >= before
            before = last
        if not in_order:
            entries = sorted(table.items(), key=lambda kv: kv[1][1])  # stable: ties keep order
            table.clear()
            table.update(entries)
            self.state.touched(STATE_TIME, [k for k, _ in entries])
        if self.on_timeout is not None:
            for last in lasts:
                self._due_at(max(last + self.timeout + 1, epoch + 1))


@stream_method
def map_with_state(
    stream: Stream,
    key: Callable[[Any], Any],
    initial: Callable[[], Any],
    update: Callable[[Any, Any, Any], tuple[Any, Iterable[Any]]],
    timeout: int | None = None,
    name: str = "map_with_state",
    on_timeout: Callable[[Any, Any], Iterable[Any]] | None = None,
    initial_state: Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None = None,
) -> Stream:
    """Per record, ``update(key, record, state) -> (new_state, outputs)``; sends the outputs.

    Like Spark's ``mapWithState``. Each key's state starts as ``initial()`` (a
    zero-argument function: ``int``, ``dict``, ``lambda: 0``) and is carried across
    epochs; epochs are applied in order, each once it is complete, and the outputs are
    sent at the record's epoch. With ``timeout``, a key whose last record was at epoch
    ``e`` is forgotten before epoch ``e + timeout + 1`` is applied: a record at
    ``e' > e + timeout`` starts again from ``initial()``.

    ``on_timeout(key, state) -> outputs`` (with ``timeout``; Spark's ``StateSpec.timeout``
    with its final call): called once for each key that times out, at the epoch it times
    out at (its last epoch + ``timeout`` + 1, whether or not anything else happens then;
    at the end of the input, every key still held times out at its epoch), its outputs
    sent at that epoch: how a session's summary is emitted when the session ends.
    ``initial_state`` (``{key: state}`` or pairs; Spark's ``initialState``): a key's
    first state, instead of ``initial()``.
    """
    _top_level("map_with_state", stream)
    _check("map_with_state", "key", key)
    if not callable(initial):
        raise GraphBuildError(
            "map_with_state: initial must be a zero-argument function making a key's first "
            f"state, such as int or lambda: 0; got {initial!r}"
        )
    _check("map_with_state", "update", update)
    if timeout is not None and (
        not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0
    ):
        raise GraphBuildError(
            f"map_with_state: timeout must be an int >= 0 (epochs), got {timeout!r}"
        )
    if on_timeout is not None:
        _check("map_with_state", "on_timeout", on_timeout)
        if timeout is None:
            raise GraphBuildError(
                "map_with_state: on_timeout is called when a key times out; give timeout= "
                "(epochs) too"
            )
    given = _initial_states("map_with_state", initial_state)
    return stream.flow.vertex(
        [(stream, exchange(key))],
        lambda: MapWithState(key, initial, update, timeout, on_timeout, given),
        name=name,
        where=function_location(update),
    )[0]
