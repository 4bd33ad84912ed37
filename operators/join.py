"""join: per-time equi-join of two streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from operators.state import StatefulVertex
from operators.stateless import _check
from progress import Timestamp
from timely import Stream, exchange, stream_method
from timely.errors import function_location


def _pair(left: Any, right: Any) -> tuple[Any, Any]:
    return (left, right)


class Join(StatefulVertex):
    """Buffers both sides by key per time; at completion sends ``result(l, r)`` per match.

    The table's value for a key is ``(lefts, rights)``; one table, so that a key's two
    sides move together when state is re-partitioned.
    """

    def __init__(
        self,
        left_key: Callable[[Any], Any],
        right_key: Callable[[Any], Any],
        result: Callable[[Any, Any], Any],
    ) -> None:
        super().__init__()
        self.keys = (left_key, right_key)
        self.result = result
        self.sides = self.keyed_state("sides")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
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
            self._ctx.user_error(e, time, record, key)

    def on_notify(self, time: Timestamp) -> None:
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
            self._ctx.user_error(e, time, pair, result)
        self.send_by(0, out, time)


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
    """
    _check("join", "left_key", left_key)
    _check("join", "right_key", right_key)
    _check("join", "result", result)
    return stream.flow.vertex(
        [(stream, exchange(left_key)), (other, exchange(right_key))],
        lambda: Join(left_key, right_key, result),
        name=name,
        where=function_location(result),
    )[0]
