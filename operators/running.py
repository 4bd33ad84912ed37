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

from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from operators.state import StatefulVertex
from operators.stateless import _check, _identity
from operators.windows import _first, _top_level, pre_reduced
from progress import Timestamp
from timely import GraphBuildError, Stream, exchange, stream_method
from timely.errors import function_location

STATE_TIME: Timestamp = (0,)
"""The time the running state is kept at."""


class _Running(StatefulVertex):
    """Buffers per epoch; at an epoch's completion applies it to the running state."""

    def __init__(self) -> None:
        super().__init__()
        self.pending = self.keyed_state("pending")
        self.state = self.keyed_state("state", tracked=True, incremental=True)

    def _carried(self) -> MutableMapping[Any, Any]:
        """The running state of every key (on this worker)."""
        return self.state.table(STATE_TIME)


class RunningReduce(_Running):
    """``state[key] = f(state[key], partial)`` per epoch; sends ``(key, state)``."""

    def __init__(self, f: Callable[[Any, Any], Any]) -> None:
        super().__init__()
        self.f = f

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
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
                    s = state[k] = v
                    new.append(k)
                out.append((k, s))
        except Exception as e:
            self.fail(e, time, pair, f)
        self.state.added(STATE_TIME, new)
        self.state.changed(STATE_TIME, out)
        self.send_by(0, out, time)


@stream_method
def running_reduce(
    stream: Stream,
    key: Callable[[Any], Any],
    f: Callable[[Any, Any], Any],
    value: Callable[[Any], Any] | None = None,
    name: str = "running_reduce",
) -> Stream:
    """Per epoch, ``(key, running value)`` for each key that has records in the epoch.

    The running value is ``f`` over all of the key's values (``value(record)``, the
    record itself by default) from the first epoch up to and including this one. ``f``
    must be associative and commutative: each worker reduces each batch before the
    exchange by key. Sent at the epoch, once it is complete.
    """
    _top_level("running_reduce", stream)
    _check("running_reduce", "key", key)
    _check("running_reduce", "f", f)
    val = _identity if value is None else value
    _check("running_reduce", "value", val)
    partial = pre_reduced(stream, key, val, f, name)
    return stream.flow.vertex(
        [(partial, exchange(_first))],
        lambda: RunningReduce(f),
        name=name,
        where=function_location(f),
    )[0]


class MapWithState(_Running):
    """``update(key, value, state) -> (state, outputs)`` per record, epochs in order.

    ``state[key]`` is ``[state, last epoch with a record]``; the table is kept in the
    order of last use, so expiring keys pops from its front only.
    """

    def __init__(
        self,
        key: Callable[[Any], Any],
        initial: Callable[[], Any],
        update: Callable[[Any, Any, Any], tuple[Any, Iterable[Any]]],
        timeout: int | None,
    ) -> None:
        super().__init__()
        self.state.ordered = True  # expiry pops the front: the order is part of the state
        self.key = key
        self.initial = initial
        self.update = update
        self.timeout = timeout

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        self.group_into(self.table_at(self.pending, time), self.key, records, time)

    def on_notify(self, time: Timestamp) -> None:
        pending = self.pending.pop(time)
        state = self._carried()
        epoch = time[0]
        timeout = self.timeout
        if timeout is not None:  # forget the keys idle for more than `timeout` epochs
            expired = []
            while state:
                k = next(iter(state))
                if epoch - state[k][1] <= timeout:
                    break
                del state[k]
                expired.append(k)
            self.state.touched(STATE_TIME, expired)
        initial, update = self.initial, self.update
        out: list[Any] = []
        new: list[Any] = []
        record: Any = None
        try:
            for k, records in pending.items():
                entry = state.pop(k, None)
                if entry is None:
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
        self.send_by(0, out, time)


@stream_method
def map_with_state(
    stream: Stream,
    key: Callable[[Any], Any],
    initial: Callable[[], Any],
    update: Callable[[Any, Any, Any], tuple[Any, Iterable[Any]]],
    timeout: int | None = None,
    name: str = "map_with_state",
) -> Stream:
    """Per record, ``update(key, record, state) -> (new_state, outputs)``; sends the outputs.

    Like Spark's ``mapWithState``. Each key's state starts as ``initial()`` (a
    zero-argument function: ``int``, ``dict``, ``lambda: 0``) and is carried across
    epochs; epochs are applied in order, each once it is complete, and the outputs are
    sent at the record's epoch. With ``timeout``, a key whose last record was at epoch
    ``e`` is forgotten before epoch ``e + timeout + 1`` is applied: a record at
    ``e' > e + timeout`` starts again from ``initial()``.
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
    return stream.flow.vertex(
        [(stream, exchange(key))],
        lambda: MapWithState(key, initial, update, timeout),
        name=name,
        where=function_location(update),
    )[0]
