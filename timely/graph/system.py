"""The vertices the framework places itself: inputs, sources, loop plumbing, outputs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

from progress import Timestamp
from timely.comm.messages import Advance, InputCommand, Send
from timely.sinks import Sink
from timely.sources import Source
from timely.vertex import Capability, Vertex


class Forward(Vertex):
    """Passes records on; ingress/egress/exchange use it, the time change is the framework's."""

    state_per_time = True  # it keeps nothing: an exchange into it follows each epoch's table

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        kind = self._ctx.spec.kind
        if kind == "ingress":
            time = (*time, 0)
        elif kind == "egress":
            time = time[:-1]
        if self._ctx.spec.outputs:
            self.send_by(0, records, time)


class Marks(Vertex):
    """One mark (``None``) per time it receives records at (a run of batches at one time
    sends one): what a step broadcasts so that every worker hears of the times that had
    records anywhere."""

    def __init__(self) -> None:
        self.last: Timestamp | None = None

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        if time != self.last:
            self.last = time
            self.send_by(0, [None], time)


class Concat(Vertex):
    """Merges its inputs into one output."""

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        self.send_by(0, records, time)


class FeedbackVertex(Vertex):
    """Moves records to the next iteration; drops them past the loop's ``max_iters``.

    ``furthest`` is the time of the furthest round it has sent records to (its last
    coordinate the loop's round, its first the epoch), for the driver's ``loop_warning``
    (:mod:`timely.session.loopwatch`): a loop that never ends is seen by the rounds it reaches.
    One tuple, replaced whole, so a heartbeat may read it from another thread."""

    def __init__(self, step: int, max_iters: int | None) -> None:
        self.step = step
        self.max_iters = max_iters
        self.furthest: Timestamp | None = None

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        nxt = time[-1] + self.step
        if self.max_iters is None or nxt < self.max_iters:
            to = (*time[:-1], nxt)
            furthest = self.furthest
            if furthest is None or nxt > furthest[-1]:
                self.furthest = to
            self.send_by(0, records, to)


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
            self.fail(e, time, record, f)
        self.send_by(0, records, time)


class TimeBuffer(Vertex):
    """Buffers each time's records and hands them to :meth:`complete` once the time is
    complete: the shape of every vertex where records leave the dataflow."""

    def __init__(self) -> None:
        self.pending: dict[Timestamp, list[Any]] = {}

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        buf = self.pending.get(time)
        if buf is None:
            self.pending[time] = buf = []
            self.notify_at(time)
        buf.extend(records)

    def on_notify(self, time: Timestamp) -> None:
        self.complete(time, self.pending.pop(time))

    def complete(self, time: Timestamp, records: list[Any]) -> None:
        """Every record at ``time`` has arrived: here they are."""
        raise NotImplementedError


class Gathered(TimeBuffer):
    """Buffers an epoch's records (all routed to worker 0) and emits them when it completes."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def complete(self, time: Timestamp, records: list[Any]) -> None:
        self._ctx.emit(self.key, time[0], records)


class SinkVertex(TimeBuffer):
    """Buffers each time's records and hands them to the sink when the time completes."""

    def __init__(self, sink: Sink) -> None:
        super().__init__()
        self.sink = sink

    def complete(self, time: Timestamp, records: list[Any]) -> None:
        try:
            self.sink.write(self.worker, self.workers, time[0], records)
        except Exception as e:
            self.fail(e, time, None, type(self.sink).write)


class InputVertex(Vertex):
    """The worker's end of a driver-fed input: sends at its epoch, advances, closes."""

    cap: Capability | None

    def start(self, cap: Capability) -> None:
        self.cap = cap

    def command(self, cmd: InputCommand) -> None:
        cap = self.cap
        if cap is None:
            raise RuntimeError(f"input {self.name!r} got {cmd!r} after it was closed")
        if isinstance(cmd, Send):
            if cmd.records:
                cap.send_by(0, cmd.records)
        elif isinstance(cmd, Advance):
            if cmd.epoch > cap.time[0]:  # a replay after a restore may repeat earlier advances
                cap.downgrade((cmd.epoch,))
        else:
            cap.drop()
            self.cap = None


class SourceVertex(Vertex):
    """Reads this worker's partitions of a :class:`Source`, one batch per activation.

    For checkpoints it remembers, per partition, the offset each batch was read from
    and its epoch, so that it can say where to resume after any epoch: at the first
    batch of a later epoch.
    """

    def __init__(self, source: Source) -> None:
        self.source = source
        self.cap: Capability | None = None
        self.offsets: dict[int, Any] = {}
        self.epochs: dict[int, int] = {}
        self.history: dict[int, list[tuple[int, Any]]] = {}
        """Per partition: ``(epoch, offset it was read from)`` of each batch since the last
        snapshot (kept only when checkpointing)."""
        self.done: set[int] = set()
        self.restored_from: dict[int, list[Any]] | None = None
        self.keep_history = False
        self._turn = 0
        self.awake: dict[int, float] = {}
        """Partitions not to be read before a time (``Source.next_awake``)."""
        self.handing: dict[int, int] = {}
        """Partitions to hand to another worker at an epoch (:meth:`release_at`): read
        here up to the first batch at or after it."""
        self.ready: set[int] = set()
        """Partitions of ``handing`` that reached their epoch (or their end): not read
        here any more, waiting to be released."""
        self.highest = -1
        """The latest epoch read here (the driver keeps its control input ahead of it)."""
        self.bound: int | None = None
        """No batch at this epoch or later is read (:meth:`bound_to`)."""
        self.blocked: set[int] = set()
        """Partitions whose next batch is at :attr:`bound` or later."""
        self.waiting = -1
        """The latest epoch of a batch held at the bound (the driver moves it past)."""
        self.unsent: dict[int, list[Sequence[Any]]] = {}
        """The batches a :meth:`pull` read, per epoch, not sent yet: a step's reads at one
        epoch go out as one batch (:meth:`_send`)."""
        self.released: dict[int, tuple[int, list[Any]]] = {}
        """Partitions handed to another worker (:meth:`release`), kept for the checkpoints
        before their handover's epoch: ``(epoch, [offset, epoch, done, history])``. Every
        batch before that epoch was read here, none after: this worker names them in
        those checkpoints, the new owner in the later ones."""

    def start_empty(self) -> None:
        """Start with no partition (a worker that joined a running dataflow): it reads
        those handed to it (:meth:`adopt`)."""
        self.keep_history = self._ctx.worker.checkpointing

    def start(self, cap: Capability) -> None:
        self.cap = cap
        self.keep_history = self._ctx.worker.checkpointing
        n = self.source.partitions()
        mine = [p for p in range(n) if p % self.workers == self.worker]
        self.offsets = {p: None for p in mine}
        self.epochs = {p: cap.time[0] for p in mine}
        if self.restored_from is not None:
            for p in mine:
                offset, epoch, done = self.restored_from.get(p, (None, cap.time[0], False))
                if done:
                    del self.offsets[p], self.epochs[p]
                    self.done.add(p)
                else:
                    self.offsets[p] = offset
                    self.epochs[p] = max(epoch, cap.time[0])
        self.history = {p: [] for p in self.offsets}
        for p, offset in self.offsets.items():
            self._schedule(p, offset)
        if not self.offsets:
            cap.drop()
            self.cap = None
        else:
            self._downgrade()

    @property
    def active(self) -> bool:
        return self.cap is not None

    def due(self) -> bool:
        """Whether a partition may be read now (active, not held at an epoch, and not
        paced to later)."""
        if self.cap is None:
            return False
        held = self.ready | self.blocked
        if held:
            now = time.time()
            return any(p not in held and self.awake.get(p, 0.0) <= now for p in self.offsets)
        if not self.awake:
            return True
        return len(self.awake) < len(self.offsets) or min(self.awake.values()) <= time.time()

    def bound_to(self, epoch: int | None) -> None:
        """Read no batch at ``epoch`` or later (None: no bound): a reconfigurable run's
        control input is there, and records would wait for it. A partition held at the
        bound is read again once it moves."""
        if epoch != self.bound:
            self.bound = epoch
            self.blocked.clear()

    def next_awake(self) -> float | None:
        """The earliest time a paced partition may be read (None: no partition waits)."""
        return min(self.awake.values()) if self.awake else None

    def _schedule(self, partition: int, offset: Any) -> None:
        at = self.source.next_awake(partition, offset)
        if at is None:
            self.awake.pop(partition, None)
        else:
            self.awake[partition] = at

    def pull(self) -> None:
        """Read batches from the partitions in turn, up to the source's
        ``batches_per_step``, ``records_per_step`` or ``seconds_per_step``, whichever
        comes first. What they hold at one epoch goes downstream as one batch: small
        batches (a few records a partition, a tick of a rate source) share the costs
        a batch has downstream (an activation per step it reaches, a routing)."""
        source = self.source
        limit, records = source.records_per_step, 0
        deadline = time.perf_counter() + source.seconds_per_step
        for _ in range(max(1, source.batches_per_step)):
            if self.cap is None:
                break
            n = self._read_one()
            if n < 0:
                break  # every partition waits for its time
            records += n
            if records >= limit or time.perf_counter() >= deadline:
                break
        self._send()

    def _send(self) -> None:
        """Send what was read and not sent yet, epoch by epoch (before the capability
        passes their epoch)."""
        if self.unsent:
            cap = self.cap
            assert cap is not None
            for epoch, parts in sorted(self.unsent.items()):
                cap.send_by(0, parts[0] if len(parts) == 1 else list(chain(*parts)), (epoch,))
            self.unsent.clear()

    def _read_one(self) -> int:
        """Read one batch from the next partition in turn that is due; returns how many
        records (-1: none is due)."""
        cap = self.cap
        assert cap is not None
        n = 0
        parts = sorted(self.offsets)
        held = self.ready | self.blocked  # at a handover's epoch, or at the bound
        if held:
            parts = [q for q in parts if q not in held]
            if not parts:
                return -1
        if self.awake:  # paced: only the partitions due now
            now = time.time()
            parts = [q for q in parts if self.awake.get(q, 0.0) <= now]
            if not parts:
                return -1
        p = parts[self._turn % len(parts)]
        self._turn += 1
        before = self.offsets[p]
        got = self.source.read(p, before)
        if got is None:
            del self.offsets[p]
            del self.epochs[p]
            self.awake.pop(p, None)
            self.done.add(p)
            if p in self.handing:
                self.ready.add(p)
        elif p in self.handing and got[0] >= self.handing[p]:
            self.ready.add(p)  # the new owner reads it again from ``before``
        elif self.bound is not None and got[0] >= self.bound:
            self.blocked.add(p)  # read again from ``before`` once the bound moves
            self.waiting = max(self.waiting, got[0])
        else:
            epoch, records, nxt = got
            self.highest = max(self.highest, epoch)
            if epoch < self.epochs[p]:
                raise ValueError(
                    f"source {self.name!r}: partition {p} went back from epoch "
                    f"{self.epochs[p]} to {epoch}; epochs must not decrease within a partition"
                )
            self.epochs[p] = epoch
            self.offsets[p] = nxt
            self._schedule(p, nxt)
            if self.keep_history:
                self.history[p].append((epoch, before))
            if records:
                self.unsent.setdefault(epoch, []).append(records)
                n = len(records)
        if not self.epochs:
            self._send()
            cap.drop()
            self.cap = None
            return n
        self._downgrade()
        return n

    def _downgrade(self) -> None:
        cap = self.cap
        assert cap is not None
        low = min(self.epochs.values())
        if low > cap.time[0]:
            self._send()
            cap.downgrade((low,))

    def owned(self) -> list[int]:
        """The partitions this worker reads, or read to their end."""
        return sorted(set(self.offsets) | self.done)

    def release_at(self, partitions: Sequence[int], epoch: int) -> None:
        """Hand ``partitions`` over at ``epoch``: read each up to its first batch at or
        after ``epoch`` (or its end), then it is :attr:`ready` to :meth:`release`. One
        read past ``epoch`` already goes at once, from where it is."""
        for p in partitions:
            if p not in self.offsets and p not in self.done:
                raise ValueError(f"source {self.name!r}: partition {p} is not read here")
            self.handing[p] = epoch
            if p in self.done or self.epochs[p] >= epoch:
                self.ready.add(p)

    def release(self, partitions: Sequence[int]) -> dict[int, list[Any]]:
        """Stop reading ``partitions`` (each :attr:`ready`) and give what their new owner
        resumes from, per partition ``[offset, epoch, done, history, awake]``: the next
        batch is at or after ``epoch``, the handover's (epochs never decrease within a
        partition). The capability follows the partitions left."""
        out: dict[int, list[Any]] = {}
        for p in partitions:
            if p not in self.ready:
                raise ValueError(f"source {self.name!r}: partition {p} is not ready to go")
            at = self.handing.pop(p)
            self.ready.discard(p)
            done = p in self.done
            history = self.history.pop(p, [])
            state: list[Any]
            if done:
                self.done.discard(p)
                state = [None, 0, True, history, None]
            else:
                epoch = max(at, self.epochs.pop(p))
                state = [self.offsets.pop(p), epoch, False, history, self.awake.pop(p, None)]
            if self.keep_history:
                self.released[p] = (at, state[:4])
            out[p] = state
        if self.cap is not None:
            if self.epochs:
                self._downgrade()
            else:
                self.cap.drop()
                self.cap = None
        return out

    def adopt(self, partitions: dict[int, list[Any]], caps: Sequence[Capability]) -> None:
        """Read on from where another worker released ``partitions`` (:meth:`release`); ``caps``:
        the capabilities it handed over with them, one per partition not yet done."""
        for p, (offset, epoch, done, history, awake) in partitions.items():
            if done:
                self.done.add(p)
            else:
                self.offsets[p], self.epochs[p] = offset, epoch
                self.source.resumed(p, offset, awake)
                if awake is not None:
                    self.awake[p] = awake
            if self.keep_history:
                self.history[p] = [(e, o) for e, o in history]
        held = [c for c in (self.cap, *caps) if c is not None]
        if not held:
            return
        keep = min(held, key=lambda c: c.time)
        for c in held:
            if c is not keep:
                c.drop()
        self.cap = keep
        if self.epochs:
            self._downgrade()
        else:
            keep.drop()
            self.cap = None

    def snapshot_at(self, epoch: int) -> dict[str, Any]:
        """Per partition ``[offset, epoch, done]``: where to read from after ``epoch``.

        A partition read past ``epoch`` (even to its end) resumes at its first batch of a
        later epoch, found in ``history``; the source may have run far ahead of the
        checkpoint, since reading is not held back for it.
        """
        parts: dict[int, list[Any]] = {}
        for p, (until, (offset, at, done, history)) in list(self.released.items()):
            if epoch >= until:  # its new owner names it from here on
                del self.released[p]
                continue
            later = [e_o for e_o in history if e_o[0] > epoch]
            parts[p] = [later[0][1], later[0][0], False] if later else [offset, at, done]
        for p in sorted(set(self.offsets) | self.done):
            history = self.history.get(p, [])
            later = [i for i, (e, _) in enumerate(history) if e > epoch]
            if later:  # the first batch after `epoch`: resume there
                e, offset = history[later[0]]
                del history[: later[0]]
                parts[p] = [offset, e, False]
            else:
                history.clear()
                if p in self.done:
                    parts[p] = [None, 0, True]
                else:
                    parts[p] = [self.offsets[p], self.epochs[p], False]
        out: dict[str, Any] = {"kind": "offsets", "partitions": parts}
        workers = self.workers_at((epoch,))
        if set(parts) != {p for p in range(self.source.partitions()) if p % workers == self.worker}:
            out["moved"] = True  # not where a restore on as many workers deals them
        return out

    def restore_at(self, snapshot: dict[str, Any], epoch: int) -> None:
        if snapshot.get("kind") != "offsets":
            raise ValueError(f"source {self.name!r}: not an offsets snapshot")
        self.restored_from = {int(p): list(v) for p, v in snapshot["partitions"].items()}
