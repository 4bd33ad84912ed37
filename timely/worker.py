"""The worker: hosts one instance of every vertex and runs the single-threaded step loop.

One step: apply the progress received since the last one; run the inputs' commands,
the sources, every pending batch of data (local pipeline sends are delivered within
the same step) and the notifications whose time the frontier has passed; then hand
out the step's data per destination worker and its progress as one atomic batch.

Occurrence counts, per the progress protocol: a batch of records sent to input
``(v, i)`` at time ``t`` counts +1 at ``(target(v, i), t)`` when sent and -1 when its
receiver consumes it; a capability (held by ``retain``, ``notify_at`` or a root) counts
+1 at every output of its vertex. Both sides of a step go out in one batch.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from progress import (
    ChangeBatch,
    Pointstamp,
    ProgressBatch,
    Timestamp,
    Tracker,
    WorkerProgress,
    less_equal,
    source,
    target,
)
from timely.errors import (
    TimelyError,
    UserFunctionError,
    failing_record,
    failure_location,
    step_error,
)
from timely.plan import Plan, VertexSpec
from timely.system import InputVertex, SourceVertex
from timely.vertex import Capability, Vertex

DataBatch = tuple[int, int, Timestamp, list[Any]]
"""``(vertex, input port, time, records)``."""


PART_FORMAT = 2
"""A checkpoint part: ``{"format", "epoch", "worker", "workers", "vertices": {v: bytes}}``,
each vertex's snapshot encoded on its own (see :meth:`Worker._take`)."""

_encode: Any = None
"""``timely.serialization.encode``, imported on first use (it imports this module)."""


class ProtocolError(TimelyError):
    """An internal invariant of the progress protocol failed (a bug in timely)."""


@dataclass
class WorkerMessage:
    """Everything one worker sends one peer in one step: data batches and progress."""

    sender: int
    seq: int
    data: list[DataBatch] = field(default_factory=list)
    progress: ProgressBatch | None = None


class VertexContext:
    """What a vertex instance can do on this worker, and the checks that keep it honest."""

    def __init__(self, worker: Worker, spec: VertexSpec) -> None:
        self.worker = worker
        self.spec = spec
        self.index = spec.index
        self.internal = worker.plan.graph.nodes[spec.index].internal
        self.caps: Counter[Timestamp] = Counter()
        self.requests: set[Timestamp] = set()
        self.now: tuple[int, Timestamp] | None = None
        """``(input, time)`` while in ``on_recv`` (input -1 for ``on_notify``/roots)."""

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
            else (
                self.spec.output_depths[0]
                if self.spec.outputs
                else (self.spec.input_depths[0] if self.spec.inputs else 0)
            )
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
            self.worker._send(self.index, output, list(records), time)

    def notify_at(self, time: Timestamp) -> None:
        self._check_time("notify_at", time, None, None)
        if time not in self.requests:
            self.requests.add(time)
            self._hold(time, 1)
            self.worker._notify_pending.add(self.index)
            if self.worker._ready_now(self.index, time):
                self.worker._notify_check = True  # asked for a time already passed

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
        self._hold(time, 1)
        return Capability(self, time)

    def downgrade_capability(self, old: Timestamp, new: Timestamp) -> None:
        if not less_equal(old, new):
            raise ValueError(
                f"step {self.spec.name!r}: cannot downgrade a capability from {old} to {new}"
            )
        self._hold(new, 1)
        self._hold(old, -1)

    def drop_capability(self, time: Timestamp) -> None:
        self._hold(time, -1)

    def _hold(self, time: Timestamp, delta: int) -> None:
        if delta > 0 and time[0] > self.worker.max_epoch:
            self.worker.max_epoch = time[0]
        self.caps[time] += delta
        if self.caps[time] < 0:
            raise ProtocolError(f"step {self.spec.name!r}: capability at {time} dropped twice")
        if not self.caps[time]:
            del self.caps[time]
        for o in range(self.spec.outputs):
            self.worker._updates.update((source(self.index, o), time), delta)

    def emit(self, key: str, epoch: int, records: list[Any]) -> None:
        """Hand records to the driver (collect/subscribe)."""
        self.worker.emitted.append((key, epoch, records))

    def user_error(
        self, error: BaseException, time: Timestamp | None, record: Any, fn: Any
    ) -> None:
        """Stop the run with the step, the time, the record and the file:line that failed:
        the user function's, or timely's own for a bug in timely (``InternalError``)."""
        raise step_error(
            self.spec.name, error, time, record, fn, self.spec.where, self.worker.index
        ) from error


class Worker:
    """One worker of a dataflow: every vertex's instance for this shard, and the step loop."""

    def __init__(
        self,
        plan: Plan,
        index: int,
        peers: int,
        accumulate: bool = True,
        checkpoint_every: int | None = None,
        restore: tuple[int, dict[int, Any]] | None = None,
        checkpoint_on_request: bool = False,
    ) -> None:
        """``checkpoint_every=k`` snapshots the vertices after every epoch ``e`` with
        ``e % k == k - 1`` (see :meth:`take_parts`); ``checkpoint_on_request`` after the
        epochs the driver asks for (:meth:`request_checkpoint`) instead.
        ``restore=(e, snapshots)`` starts from a checkpoint at epoch ``e``: each vertex gets
        its snapshot and the roots start at ``e + 1``."""
        self.plan = plan
        self.index = index
        self.peers = peers
        self.checkpoint_every = checkpoint_every
        self.checkpointing = checkpoint_every is not None or checkpoint_on_request
        self._target: int | None = None
        """The epoch the driver asked for a checkpoint after (on-request mode)."""
        self.max_epoch = -1
        """The latest epoch any vertex here has received at, been notified at or held a
        capability at."""
        self._max_notified = -1
        start = 0 if restore is None else restore[0] + 1
        graph = plan.graph
        caps = plan.initial_capabilities(start)
        self.progress = WorkerProgress(index, peers, graph, caps, accumulate=accumulate)
        self.tracker = Tracker(graph, check_times=False)
        self.tracker.update_all((ps, peers) for ps in caps)
        self.tracker.propagate_all()
        self._updates: ChangeBatch[Pointstamp] = ChangeBatch()
        self.contexts = [VertexContext(self, spec) for spec in plan.vertices]
        self.vertices: list[Vertex] = []
        for spec, ctx in zip(plan.vertices, self.contexts):
            try:
                vertex = spec.factory()
            except Exception as e:
                where = failure_location(e.__traceback__, spec.where)
                raise UserFunctionError(spec.name, where, None, None, e, index) from e
            if not isinstance(vertex, Vertex):
                raise TypeError(f"step {spec.name!r}: the factory made {vertex!r}, not a Vertex")
            vertex._ctx = ctx
            self.vertices.append(vertex)
        self.inbox: list[deque[tuple[int, Timestamp, list[Any]]]] = [deque() for _ in plan.vertices]
        self._ready: deque[int] = deque()
        self._out: dict[tuple[int, int, int, Timestamp], list[Any]] = {}
        self._seq = [0] * peers
        self._commands: dict[int, deque[tuple[str, Any]]] = {}
        self._notify_pending: set[int] = set()
        self._frontier_moved = True  # progress applied but not yet propagated
        self._notify_check = False  # frontiers changed since notifications were last checked
        self.emitted: list[tuple[str, int, list[Any]]] = []
        self.received_since_step = False
        # Every vertex takes part in a checkpoint, stateful or not: the part for epoch e is
        # complete once each has passed e, so that outputs buffered for e (subscribe,
        # sinks) have left too. Stateless ones just have nothing to write.
        self._stateful = list(range(len(self.vertices)))
        self._snapped = {v: start - 1 for v in self._stateful}
        """Per vertex, the last epoch it was snapshotted after."""
        self._parts: dict[int, dict[int, Any]] = {}
        self._done_parts: list[tuple[int, dict[str, Any]]] = []
        if restore is not None:
            self._restore(*restore)
        first = (start,)
        for v in plan.roots:  # roots hold their initial capability at the first epoch
            ctx = self.contexts[v]
            ctx.caps[first] += 1
            vertex = self.vertices[v]
            assert isinstance(vertex, InputVertex | SourceVertex)
            self._activate(v, -1, first, vertex.start, Capability(ctx, first))
        self._sources = [v for v in plan.roots if plan.vertices[v].kind == "source"]
        # Starting may have dropped capabilities (a source with no partitions here).
        self.progress.record(self._updates.drain())

    # -- inbound ----------------------------------------------------------------------------
    def receive(self, message: WorkerMessage) -> None:
        """Accept a peer's message (in its per-sender order)."""
        for v, port, time, records in message.data:
            self.inbox[v].append((port, time, records))
            self._ready.append(v)
        if message.progress is not None:
            self.tracker.update_all(self.progress.receive(message.progress))
            self._frontier_moved = True
        self.received_since_step = True

    def command(self, vertex: int, cmd: tuple[str, Any]) -> None:
        """A driver command for input ``vertex`` (send, advance, close), in order."""
        self._commands.setdefault(vertex, deque()).append(cmd)

    # -- the step ---------------------------------------------------------------------------
    def has_work(self) -> bool:
        """Whether a step now would do anything (local work, or held progress to release)."""
        return self._local_work() or (
            bool(self.progress.pending()) and self.progress.must_flush(idle=True)
        )

    def _local_work(self, sources: bool = True) -> bool:
        """Whether a step now has something to do here; ``sources=False`` leaves out active
        sources, which always have (they read a batch a step)."""
        return bool(
            self._ready
            or self._commands
            or self.received_since_step
            or (self._notify_pending and (self._notify_check or self._frontier_moved))
            or (sources and any(self.vertices[v].active for v in self._sources))  # type: ignore[attr-defined]
        )

    def step(self) -> list[tuple[int, WorkerMessage]]:
        """Run one step; return the messages for other workers ``(peer, message)``."""
        self.received_since_step = False
        self._propagate()
        for v, queue in list(self._commands.items()):
            vertex = self.vertices[v]
            assert isinstance(vertex, InputVertex)
            while queue:
                self._activate(v, -1, None, vertex.command, queue.popleft())
            del self._commands[v]
        for v in self._sources:
            vertex = self.vertices[v]
            assert isinstance(vertex, SourceVertex)
            if vertex.active:
                self._activate(v, -1, None, vertex.pull)
        self._drain_inbox()
        if self._notify_pending and self._notify_check:
            self._notify_check = False
            self._notify()
            self._drain_inbox()
        return self._finish_step()

    def _propagate(self) -> None:
        if self._frontier_moved:
            self._frontier_moved = False
            if self.tracker.propagate_all():
                self._notify_check = True

    def _drain_inbox(self) -> None:
        inbox, ready = self.inbox, self._ready
        frontier = self.tracker.frontier
        while ready:
            v = ready.popleft()
            queue = inbox[v]
            if not queue:
                continue
            port, time, records = queue.popleft()
            loc = target(v, port)
            if time[0] > self.max_epoch:
                self.max_epoch = time[0]
            if not any(less_equal(f, time) for f in frontier(loc)):
                name = self.plan.vertices[v].name
                raise ProtocolError(
                    f"worker {self.index}: a batch at {time} reached {name!r} input {port}, "
                    f"whose frontier {frontier(loc)} has passed it"
                )
            self._updates.update((loc, time), -1)
            self._activate(v, port, time, self.vertices[v].on_recv, port, records, time)

    def _ready_now(self, v: int, t: Timestamp) -> bool:
        """No input of ``v`` can still see a time ``<= t``, and none is waiting in its inbox."""
        frontier = self.tracker.frontier
        spec = self.plan.vertices[v]
        for i in range(spec.inputs):
            if any(less_equal(f, t) for f in frontier(target(v, i))):
                return False
        return not any(less_equal(p, t) for _, p, _ in self.inbox[v])

    def _notify(self) -> None:
        checkpointing = self.checkpointing
        for v in sorted(self._notify_pending):
            ctx = self.contexts[v]
            for t in sorted(t for t in ctx.requests if self._ready_now(v, t)):
                if checkpointing:
                    # State after the next checkpoint epoch may not change before the
                    # vertex's snapshot for it is taken.
                    boundary = self._next_boundary(v)
                    if boundary is not None and t[0] > boundary:
                        self._snapshot(v)
                        boundary = self._next_boundary(v)
                        if boundary is not None and t[0] > boundary:
                            break
                    self._max_notified = max(self._max_notified, t[0])
                    self.max_epoch = max(self.max_epoch, t[0])
                ctx.requests.discard(t)
                self._activate(v, -1, t, self.vertices[v].on_notify, t)
                ctx._hold(t, -1)
            if not ctx.requests:
                self._notify_pending.discard(v)

    def _activate(self, v: int, port: int, time: Timestamp | None, fn: Any, *args: Any) -> None:
        ctx = self.contexts[v]
        ctx.now = None if time is None else (port, time)
        try:
            fn(*args)
        except TimelyError:
            raise
        except Exception as e:
            if port >= 0 and len(args) > 1:  # on_recv(input, records, time): find the record
                record = failing_record(e.__traceback__, args[1])
            else:
                record = args[0] if args else None
            ctx.user_error(e, time, record, None)
        finally:
            ctx.now = None

    def _send(self, v: int, output: int, records: list[Any], time: Timestamp) -> None:
        plan = self.plan
        for edge in plan.out_edges[v][output]:
            try:
                routed = edge.channel.route(records, self.peers, self.index)
            except Exception as e:
                ctx = self.contexts[v]
                bad = _first_unroutable(edge.channel, records)
                ctx.user_error(e, time, bad, getattr(edge.channel, "key", None))
            for dest, part in routed.items():
                if not part:
                    continue
                if dest == self.index:
                    # Local: straight into the inbox, delivered later in this same step.
                    self.inbox[edge.dst].append((edge.dst_port, time, part))
                    self._ready.append(edge.dst)
                    self._updates.update((target(edge.dst, edge.dst_port), time), 1)
                else:
                    key = (dest, edge.dst, edge.dst_port, time)
                    buf = self._out.get(key)
                    if buf is None:
                        self._out[key] = buf = []
                        self._updates.update((target(edge.dst, edge.dst_port), time), 1)
                    buf.extend(part)

    def _finish_step(self) -> list[tuple[int, WorkerMessage]]:
        if not self._out and self._updates.is_empty() and not self.progress.pending():
            self._propagate()
            if self.checkpointing:
                self._checkpoint_scan()
            return []  # a step that changed nothing has nothing to say
        messages: dict[int, WorkerMessage] = {}
        for (dest, v, port, time), records in self._out.items():
            msg = messages.get(dest)
            if msg is None:
                messages[dest] = msg = WorkerMessage(self.index, 0)
            msg.data.append((v, port, time, records))
        self._out = {}
        self.progress.record(self._updates.drain())
        # Progress rides along with data that goes out anyway: holding it back would only
        # cost another message. Otherwise accumulation decides. A running source does not
        # count as more work in this round: it always has some, and its epochs would
        # otherwise complete for no one until it ends.
        batch = self.progress.flush(force=bool(messages), idle=not self._local_work(False))
        if batch is not None:
            self.tracker.update_all(self.progress.receive(batch))
            self._frontier_moved = True
            for peer in range(self.peers):
                if peer != self.index:
                    msg = messages.get(peer)
                    if msg is None:
                        messages[peer] = msg = WorkerMessage(self.index, 0)
                    msg.progress = batch
        out = []
        for peer, msg in sorted(messages.items()):
            msg.seq = self._seq[peer]
            self._seq[peer] += 1
            out.append((peer, msg))
        self._propagate()
        if self.checkpointing:
            self._checkpoint_scan()
        return out

    # -- checkpoints --------------------------------------------------------------------------
    def _open_epoch(self, v: int) -> int | None:
        """The lowest epoch vertex ``v`` may still receive, be notified or send at (None:
        it is finished for good)."""
        epochs = [t[0] for _, t, _ in self.inbox[v]]
        ctx = self.contexts[v]
        epochs.extend(t[0] for t in ctx.requests)
        epochs.extend(t[0] for t in ctx.caps)
        frontier = self.tracker.frontier
        for i in range(self.plan.vertices[v].inputs):
            epochs.extend(t[0] for t in frontier(target(v, i)))
        return min(epochs) if epochs else None

    def _open_at(self, v: int, epoch: int) -> bool:
        """Whether ``v`` may still receive, be notified or send at ``epoch`` or earlier: the
        cheap form of ``_open_epoch(v) <= epoch``, stopping at the first witness."""
        frontier = self.tracker.frontier
        for i in range(self.plan.vertices[v].inputs):
            for t in frontier(target(v, i)):
                if t[0] <= epoch:
                    return True
        ctx = self.contexts[v]
        for t in ctx.requests:
            if t[0] <= epoch:
                return True
        for t in ctx.caps:
            if t[0] <= epoch:
                return True
        return any(t[0] <= epoch for _, t, _ in self.inbox[v])

    def _due(self, after: int, upto: int | None) -> range | list[int]:
        """The checkpoint epochs in ``(after, upto]`` (``upto=None``: the first one only).

        With ``checkpoint_every=k`` they are the epochs ``e`` with ``(e + 1) % k == 0``;
        on request, the epoch the driver asked for."""
        every = self.checkpoint_every
        if every is not None:
            first = ((after + 1) // every + 1) * every - 1
            return range(first, (first if upto is None else upto) + 1, every)
        target = self._target
        if target is not None and after < target and (upto is None or target <= upto):
            return [target]
        return []

    def _next_boundary(self, v: int) -> int | None:
        """The next checkpoint epoch ``v`` must be snapshotted after before a notification
        at a later epoch may change its state (None: none is due)."""
        due = self._due(self._snapped[v], None)
        return due[0] if due else None

    def _snapshot(self, v: int) -> None:
        """Snapshot ``v`` for every checkpoint epoch it has completely passed since its
        last snapshot: each of them, not only the latest, so that a vertex whose
        frontier jumps over several (a stateless step, a burst of epochs in one step)
        still has its share in every one of those checkpoints.

        One state serves them all: the hold-back in :meth:`_notify` keeps ``v`` from being
        notified after the first of them before this snapshot, and what it received
        after it sits in per-time tables that ``snapshot_at(e)`` leaves out."""
        boundary = self._next_boundary(v)
        if boundary is None or self._open_at(v, boundary):
            return  # the common case, checked at every step: nothing is due yet
        low = self._open_epoch(v)
        # A finished vertex's state is final: it serves every checkpoint epoch after its
        # last snapshot, up to the latest epoch this worker has seen.
        upto = self.max_epoch if low is None else low - 1
        for epoch in self._due(self._snapped[v], upto):
            self._take(v, epoch)

    def checkpoint_floor(self) -> int:
        """The latest epoch a checkpoint here can no longer be taken after: some vertex has
        been notified at it, or snapshotted after it. Any later epoch can, even one the
        sources have read past (they resume from their read history), so the driver asks
        for the one just after the highest floor: the checkpoint then completes as soon
        as the slowest worker's frontier passes it."""
        return max(self._max_notified, max(self._snapped.values(), default=-1))

    def request_checkpoint(self, epoch: int) -> bool:
        """The driver asks for a checkpoint after ``epoch`` (on-request mode). Refused when
        ``epoch`` is not after :meth:`checkpoint_floor`: the driver then asks for a later one."""
        if epoch <= self.checkpoint_floor():
            return False
        self._target = epoch
        self._notify_check = True
        return True

    def _take(self, v: int, epoch: int) -> None:
        """Snapshot ``v`` for the checkpoint at ``epoch``, encoded at once.

        Encoding here is what makes the snapshot a copy: the vertex may change its state
        in place (a ``[value, count]`` entry, a user's dict) as soon as it is notified of
        the next epoch, possibly later in this same step."""
        global _encode
        if _encode is None:
            from timely.serialization import encode as _encode
        ctx = self.contexts[v]
        ctx.now = None
        try:
            snap = self.vertices[v].snapshot_at(epoch)
            data = None if snap is None else _encode(snap)
        except Exception as e:
            ctx.user_error(e, (epoch,), None, type(self.vertices[v]).snapshot_at)
        part = self._parts.setdefault(epoch, {})
        part[v] = data  # None for a stateless vertex: left out of the written part
        self._snapped[v] = epoch
        self._notify_check = True  # notifications held back for this snapshot may go now

    def _checkpoint_scan(self) -> None:
        """Snapshot what is due; hand over every part that is complete, oldest first."""
        for v in self._stateful:
            self._snapshot(v)
        for epoch in sorted(self._parts):
            part = self._parts[epoch]
            missing = [v for v in self._stateful if v not in part]
            # A finished vertex's state is final and, by the hold-back in _notify, reflects
            # no epoch after the one following its last snapshot: valid for this part.
            if not all(self._open_epoch(v) is None and self._snapped[v] < epoch for v in missing):
                continue
            for v in missing:
                self._take(v, epoch)
            del self._parts[epoch]
            self._done_parts.append(
                (
                    epoch,
                    {
                        "format": PART_FORMAT,
                        "epoch": epoch,
                        "worker": self.index,
                        "workers": self.peers,
                        "vertices": {v: data for v, data in part.items() if data is not None},
                    },
                )
            )
            for older in [e for e in self._parts if e < epoch]:
                del self._parts[older]  # superseded (a target the driver gave up on)

    def take_parts(self) -> list[tuple[int, dict[str, Any]]]:
        """Checkpoint parts completed since the last call, ``(epoch, part)`` in epoch order.

        Each vertex's snapshot in a part is already encoded (bytes), so the part owes
        nothing to the live state and may be written at leisure."""
        out, self._done_parts = self._done_parts, []
        return out

    def _restore(self, epoch: int, snapshots: dict[int, Any]) -> None:
        for v, snap in snapshots.items():
            spec = self.plan.vertices[v]
            depth = (spec.output_depths or spec.input_depths or (0,))[0]
            ctx = self.contexts[v]
            ctx.now = (-1, (epoch + 1,) + (0,) * depth)
            try:
                self.vertices[v].restore_at(snap, epoch)
            except Exception as e:
                ctx.user_error(e, (epoch,), None, type(self.vertices[v]).restore_at)
            finally:
                ctx.now = None

    # -- state --------------------------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing left anywhere, as far as this worker knows: every frontier is empty."""
        self._propagate()
        return self.tracker.is_idle() and not self.progress.pending() and not self._ready

    def frontier(self, vertex: int, port: int = 0) -> tuple[Timestamp, ...]:
        """This worker's view of the frontier at input ``port`` of ``vertex``."""
        self._propagate()
        return self.tracker.frontier(target(vertex, port))

    def take_emitted(self) -> list[tuple[str, int, list[Any]]]:
        """Outputs for the driver produced since the last call: ``(key, epoch, records)``."""
        out, self.emitted = self.emitted, []
        return out


def _first_unroutable(channel: Any, records: list[Any]) -> Any:
    key = getattr(channel, "key", None)
    if key is None:
        return records[0] if records else None
    from timely.channels import stable_hash

    for r in records:
        try:
            stable_hash(key(r))
        except Exception:
            return r
    return None
