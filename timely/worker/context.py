"""The vertex context: what one vertex instance may do on its worker, and the checks that
keep it honest (times it may act at, capabilities it holds, notifications it asked for).

A :class:`~timely.vertex.Vertex` reaches the runtime only through its context; the
context reaches the worker only through the worker's narrow interface
(:class:`~timely.worker.ports.VertexHost`: ``send_from``, ``notification_requested``,
``capability_changed``, ``emitted``), in the
spirit of timely-dataflow's ``operate.rs``: an operator fills progress buffers, the
worker decides what they mean.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NoReturn

from progress import Timestamp, less_equal
from timely.errors import TimelyError, WorkerDied, step_error
from timely.graph.plan import VertexSpec
from timely.vertex import Capability
from timely.worker.ports import VertexHost


class ProtocolError(TimelyError):
    """An internal invariant of the progress protocol failed (a bug in timely)."""


class VertexContext:
    """What a vertex instance can do on this worker, and the checks that keep it honest."""

    def __init__(self, worker: VertexHost, spec: VertexSpec) -> None:
        self.worker = worker
        self.spec = spec
        self.index = spec.index
        self.internal = worker.plan.graph.nodes[spec.index].internal
        self.caps: Counter[Timestamp] = Counter()
        self.requests: set[Timestamp] = set()
        self.now: tuple[int, Timestamp] | None = None
        """``(input, time)`` while in ``on_recv`` (input -1 for ``on_notify``/roots)."""
        self._depth = (
            spec.output_depths[0] if spec.outputs else (spec.input_depths[0] if spec.inputs else 0)
        )
        """The loop depth of the times this vertex acts at, unless an output says otherwise."""

    # -- time checks --------------------------------------------------------------------
    def _may_act_at(self, time: Timestamp, output: int | None, held: Timestamp | None) -> bool:
        if held is not None:
            return self.caps[held] > 0 and less_equal(held, time)
        now = self.now
        if now is not None:
            port, t = now
            if port < 0 or not self.spec.outputs:
                if len(t) == len(time) and less_equal(t, time):
                    return True
            else:
                outs = range(self.spec.outputs) if output is None else (output,)
                for o in outs:
                    for s in self.internal.get((port, o), ()):
                        r = s.results_in(t)
                        if r is not None and less_equal(r, time):
                            return True
        return any(c > 0 and less_equal(h, time) for h, c in self.caps.items())

    def _check_time(
        self, what: str, time: Timestamp, output: int | None, held: Timestamp | None
    ) -> None:
        depth = (
            self.spec.output_depths[output]
            if output is not None and self.spec.outputs
            else self._depth
        )
        if not isinstance(time, tuple) or len(time) != depth + 1:
            raise ValueError(
                f"step {self.spec.name!r}: {what} at {time!r}, but times here are tuples of "
                f"{depth + 1} ints (epoch plus {depth} loop counters)"
            )
        if not self._may_act_at(time, output, held):
            now = f"the current time {self.now[1]}" if self.now else "no current time"
            raise ValueError(
                f"step {self.spec.name!r}: cannot {what} at {time}: it holds no capability "
                f"<= {time} ({now}); retain() a capability to act later"
            )

    # -- offered to the vertex ----------------------------------------------------------
    def send(self, output: int, records: Any, time: Timestamp, held: Timestamp | None) -> None:
        if not 0 <= output < self.spec.outputs:
            raise ValueError(f"step {self.spec.name!r} has no output {output}")
        self._check_time("send", time, output, held)
        now = self.now
        if self.worker.checkpointing and now is not None and time[0] > now[1][0]:
            raise ValueError(
                f"step {self.spec.name!r}: sends at epoch {time[0]} while handling "
                f"{now[1]}; with checkpoints a step may only send at its current epoch: keep "
                "the records in its state and send them from on_notify at the later time"
            )
        if records:
            self.worker.send_from(self.index, output, list(records), time)

    def notify_at(self, time: Timestamp) -> None:
        self._check_time("notify_at", time, None, None)
        if time not in self.requests:
            self.requests.add(time)
            self.hold(time, 1)
            self.worker.notification_requested(self.index, time)

    def retain(self, time: Timestamp | None) -> Capability:
        if time is None:
            if self.now is None:
                raise ValueError(
                    f"step {self.spec.name!r}: retain() outside on_recv/on_notify needs a time"
                )
            time = self.now[1]
            if self.now[0] >= 0 and self.spec.outputs:
                # The earliest time the current message may send at on any output.
                outs = [
                    r
                    for o in range(self.spec.outputs)
                    for s in self.internal.get((self.now[0], o), ())
                    if (r := s.results_in(time)) is not None
                ]
                time = min(outs) if outs else time
        self._check_time("retain", time, None, None)
        self.hold(time, 1)
        return Capability(self, time)

    def downgrade_capability(self, old: Timestamp, new: Timestamp) -> None:
        if not less_equal(old, new):
            raise ValueError(
                f"step {self.spec.name!r}: cannot downgrade a capability from {old} to {new}"
            )
        self.hold(new, 1)
        self.hold(old, -1)

    def drop_capability(self, time: Timestamp) -> None:
        self.hold(time, -1)

    def hold(self, time: Timestamp, delta: int) -> None:
        self.caps[time] += delta
        if self.caps[time] < 0:
            raise ProtocolError(f"step {self.spec.name!r}: capability at {time} dropped twice")
        if not self.caps[time]:
            del self.caps[time]
        self.worker.capability_changed(self.index, self.spec.outputs, time, delta)

    def emit(self, key: str, epoch: int, records: list[Any]) -> None:
        """Hand records to the driver (collect/subscribe)."""
        self.worker.emitted.append((key, epoch, records))

    def user_error(
        self, error: BaseException, time: Timestamp | None, record: Any, fn: Any
    ) -> NoReturn:
        """Stop the run with the step, the time, the record and the file:line that failed:
        the user function's, or timely's own for a bug in timely (``InternalError``). A
        worker's loss (a failed state store, :class:`WorkerDied`) caught by a step's
        ``except`` clause stays what it is."""
        if isinstance(error, WorkerDied):
            raise error
        raise step_error(
            self.spec.name, error, time, record, fn, self.spec.where, self.worker.index
        ) from error
