"""``fixpoint``: iterate a body until it derives nothing new, per epoch.

Built from timely's loop scopes (``flow.loop()``, ``enter``, ``feedback``, ``leave``)::

    input ─enter─▶ head ─▶ NewOnly ─┬─▶ body ─▶ feedback ─▶ head (next round)
                                    └─leave─▶ result

``NewOnly`` is a distinct across the rounds of an epoch: records are exchanged by
value, and a record already seen at any round of the same epoch is dropped, so only
new records go round again and the loop stops once a round derives nothing new. The
result, per epoch, is the set of everything reached (each record once): the input's
records and all that the body derived from them. With ``max_iters``, a record that
arrives at an earlier round than it was first seen at goes round again from there, and
a per-epoch ``distinct`` after the loop keeps the result a set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from operators.state import StatefulVertex
from operators.stateless import Distinct, _identity
from progress import Timestamp, less_equal
from timely import GraphBuildError, Stream, exchange, stream_method
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
    time ``(e, 0)``, round 0. The table is
    dropped once the loop has finished the epoch (no time of it is left in the input's
    frontier), checked when the vertex next receives a batch: a loop has no time at
    which "the epoch is done" could be asked for with ``notify_at``.
    """

    def __init__(self, earliest: bool = False) -> None:
        super().__init__()
        self.earliest = earliest
        self.seen = self.keyed_state("seen")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        base = (*time[:-1], 0)
        seen = self.seen.get(base)
        if seen is None:
            seen = self.seen.table(base)
        if len(self.seen.times()) > 1:
            self._forget_finished(base)
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

    def _forget_finished(self, current: Timestamp) -> None:
        frontier = self._ctx.worker.frontier(self._ctx.index, 0)
        for t in self.seen.times():
            if t != current and not any(less_equal(f[:-1], t[:-1]) for f in frontier):
                self.seen.pop(t)


@stream_method
def fixpoint(
    stream: Stream,
    body: Callable[[Stream], Stream],
    max_iters: int | None = None,
    name: str = "fixpoint",
) -> Stream:
    """Per epoch, the set reached by applying ``body`` to new records until none is new.

    ``body`` gets a stream inside a loop scope carrying the records that are new in a
    round, and returns a stream (in that scope) of records derived from them; those not
    seen before in the epoch go round again. The result, at each epoch, holds each
    distinct record of the input and of everything derived once (a set, unordered).
    ``max_iters`` bounds the rounds: the result then holds what is reached within
    ``max_iters - 1`` applications of ``body`` (what the last round derives is dropped,
    as in ``iterate``). Records must be hashable with a stable hash (see
    ``timely.exchange``), as they are exchanged by value. A stream from outside the loop
    can be used inside ``body`` with ``s.enter(loop_stream.scope)`` -- but note it is
    only present at round 0.
    """
    if not callable(body):
        raise GraphBuildError(f"fixpoint: body must be a function of a stream, got {body!r}")
    if max_iters is not None and max_iters < 1:
        raise GraphBuildError(f"fixpoint: max_iters must be >= 1, got {max_iters}")
    flow = stream.flow
    loop = flow.loop(name=name, parent=stream.scope, max_iters=max_iters)
    handle, again = loop.feedback()
    head = stream.enter(loop).concat(again, name=f"{name}.head")
    bounded = max_iters is not None
    new = flow.vertex(
        [(head, exchange(_identity))],
        lambda: NewOnly(earliest=bounded),
        name=f"{name}.new",
        where=function_location(body),
    )[0]
    result = body(new)
    if not isinstance(result, Stream):
        raise GraphBuildError(f"fixpoint: the body must return a Stream, got {result!r}")
    handle.connect(result)
    out = new.leave()
    if bounded:
        # A record resent at an earlier round leaves twice: keep one per epoch. It is on
        # its owner worker already (``new`` exchanged by value), so no exchange is needed.
        out = flow.vertex([(out, None)], lambda: Distinct(_identity), name=f"{name}.set")[0]
    return out
