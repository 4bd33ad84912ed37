"""The vertices the framework places itself: inputs, sources, loop plumbing, outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from progress import Timestamp
from timely.sources import Source
from timely.vertex import Capability, Vertex


class Forward(Vertex):
    """Passes records on; ingress/egress/exchange use it, the time change is the framework's."""

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        kind = self._ctx.spec.kind
        if kind == "ingress":
            time = (*time, 0)
        elif kind == "egress":
            time = time[:-1]
        if self._ctx.spec.outputs:
            self.send_by(0, records, time)


class Concat(Vertex):
    """Merges its inputs into one output."""

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        self.send_by(0, records, time)


class FeedbackVertex(Vertex):
    """Moves records to the next iteration; drops them past the loop's ``max_iters``."""

    def __init__(self, step: int, max_iters: int | None) -> None:
        self.step = step
        self.max_iters = max_iters

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        nxt = time[-1] + self.step
        if self.max_iters is None or nxt < self.max_iters:
            self.send_by(0, records, (*time[:-1], nxt))


class Inspect(Vertex):
    """Calls a function on every record, for its side effects."""

    def __init__(self, f: Callable[[Any], Any]) -> None:
        self.f = f

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        f = self.f
        record = None
        try:
            for record in records:
                f(record)
        except Exception as e:
            self._ctx.user_error(e, time, record, f)
        self.send_by(0, records, time)


class Gathered(Vertex):
    """Buffers an epoch's records (all routed to worker 0) and emits them when it completes."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.pending: dict[Timestamp, list[Any]] = {}

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        buf = self.pending.get(time)
        if buf is None:
            self.pending[time] = buf = []
            self.notify_at(time)
        buf.extend(records)

    def on_notify(self, time: Timestamp) -> None:
        self._ctx.emit(self.key, time[0], self.pending.pop(time))


class InputVertex(Vertex):
    """The worker's end of a driver-fed input: sends at its epoch, advances, closes."""

    cap: Capability | None

    def start(self, cap: Capability) -> None:
        self.cap = cap

    def command(self, cmd: tuple[str, Any]) -> None:
        op, arg = cmd
        cap = self.cap
        if cap is None:
            raise RuntimeError(f"input {self.name!r} got {op!r} after it was closed")
        if op == "send":
            if arg:
                cap.send_by(0, arg)
        elif op == "advance":
            cap.downgrade((arg,))
        elif op == "close":
            cap.drop()
            self.cap = None
        else:
            raise ValueError(f"unknown input command {op!r}")


class SourceVertex(Vertex):
    """Reads this worker's partitions of a :class:`Source`, one batch per activation."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.cap: Capability | None = None
        self.offsets: dict[int, Any] = {}
        self.epochs: dict[int, int] = {}
        self._turn = 0

    def start(self, cap: Capability) -> None:
        self.cap = cap
        n = self.source.partitions()
        mine = [p for p in range(n) if p % self.workers == self.worker]
        self.offsets = {p: None for p in mine}
        self.epochs = {p: 0 for p in mine}
        if not mine:
            cap.drop()
            self.cap = None

    @property
    def active(self) -> bool:
        return self.cap is not None

    def pull(self) -> None:
        """Read one batch from the next partition in turn."""
        cap = self.cap
        if cap is None:
            return
        parts = sorted(self.offsets)
        p = parts[self._turn % len(parts)]
        self._turn += 1
        got = self.source.read(p, self.offsets[p])
        if got is None:
            del self.offsets[p]
            del self.epochs[p]
        else:
            epoch, records, nxt = got
            if epoch < self.epochs[p]:
                raise ValueError(
                    f"source {self.name!r}: partition {p} went back from epoch "
                    f"{self.epochs[p]} to {epoch}; epochs must not decrease within a partition"
                )
            self.epochs[p] = epoch
            self.offsets[p] = nxt
            if records:
                cap.send_by(0, records, (epoch,))
        if not self.epochs:
            cap.drop()
            self.cap = None
            return
        low = min(self.epochs.values())
        if (low,) != cap.time:
            cap.downgrade((low,))
