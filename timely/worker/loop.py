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

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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
from timely.checkpoint.store import Share, merge_pieces
from timely.comm.coalesce import coalesce
from timely.comm.messages import InputCommand, Send, WorkerMessage
from timely.comm.serialization import PlainDataError
from timely.errors import (
    TimelyError,
    UserFunctionError,
    failing_record,
    failure_location,
)
from timely.eventlog import COMMAND, NOTIFY, PULL, RECV, START, EventLog, clock
from timely.graph.plan import EdgeSpec, Plan
from timely.graph.system import InputVertex, SourceVertex
from timely.routing.bins import Routing, Table, default_table
from timely.routing.channels import Broadcast, Exchange
from timely.routing.hashing import stable_hash
from timely.routing.members import Members
from timely.state.disk import StateStore
from timely.state.keyed import StatefulVertex
from timely.vertex import Capability, Vertex
from timely.worker.context import ProtocolError, VertexContext
from timely.worker.migration import Migration
from timely.worker.snapshots import Part, Snapshots


class EarlySend(Protocol):
    """A host's channels, as :meth:`Worker.route` sends a step's data early on them."""

    def ready(self, peer: int) -> bool:
        """Whether a frame to ``peer`` may go now (a credit left, the link up)."""

    def send(self, peer: int, message: WorkerMessage) -> None:
        """Encode and send ``message`` (data, no progress) to ``peer``, now."""


ROUNDS_AHEAD = 8
"""How many rounds a loop's records may run ahead of its oldest round not done yet (on
this worker's view), per outer time: see :meth:`Worker._next_rounds`."""

_KINDS = {"on_notify": NOTIFY, "command": COMMAND, "pull": PULL}
"""An activation's kind in the event log, by the method run (``on_recv`` has a port)."""


@dataclass
class Join:
    """What a worker added to a running dataflow starts from, made by its donor
    (:meth:`Worker.mint_join`): its end of the progress protocol (a copy of the donor's,
    owning the capabilities the donor minted for it), the routing tables known, who
    takes part from which epoch, the inputs it holds a capability of at ``epoch``, and
    the checkpoint schedule (``segments``, None: no checkpoints)."""

    epoch: int
    progress: WorkerProgress
    tables: list[tuple[int, Table]]
    members: Members
    roots: tuple[int, ...]
    segments: list[tuple[int, int | None]] | None = None


@dataclass(frozen=True)
class Handover:
    """Source partitions one worker gave another (:meth:`Worker.release_partitions`):
    where each is read on from, and the capabilities minted for them in the owner's
    progress batch ``after``, one per partition not read to its end."""

    vertex: int
    owner: int
    after: int
    partitions: dict[int, list[Any]]
    capabilities: tuple[Pointstamp, ...]


class Worker:
    """One worker of a dataflow: every vertex's instance for this shard, and the step loop."""

    def __init__(
        self,
        plan: Plan,
        index: int,
        peers: int,
        accumulate: bool = True,
        checkpoint_every: int | None = None,
        restore: tuple[int, Share] | None = None,
        checkpoint_on_request: bool = False,
        log: EventLog | None = None,
        checkpoint_incremental: int = 0,
        join: Join | None = None,
    ) -> None:
        """``join``: a worker added to a running dataflow starts from what its donor
        made (:meth:`mint_join`), with empty state; its bins come by migration.
        ``checkpoint_every=k`` snapshots the vertices after every epoch ``e`` with
        ``e % k == k - 1`` (see :meth:`take_parts`); ``checkpoint_on_request`` after the
        epochs the driver asks for (:meth:`request_checkpoint`) instead.
        ``restore=(e, snapshots)`` starts from a checkpoint at epoch ``e``: each vertex gets
        its snapshot and the roots start at ``e + 1``. With ``log``, the worker records its
        activations and steps there (:mod:`timely.eventlog`); its host records messages
        and waiting."""
        self.log = log
        self.records_out = 0
        """Records sent by vertices here so far (the event log's records out)."""
        self.plan = plan
        self.index = index
        self.peers = peers
        self.max_epoch = -1
        """The latest epoch any vertex here has received at, been notified at or held a
        capability at."""
        start = 0 if restore is None else restore[0] + 1
        graph = plan.graph
        self.tracker = Tracker(graph, check_times=False)
        if join is None:
            caps = plan.initial_capabilities(start)
            self.progress = WorkerProgress(index, peers, graph, caps, accumulate=accumulate)
            self.tracker.update_all((ps, peers) for ps in caps)
            self.members = Members(peers)
        else:
            start = join.epoch
            self.progress = join.progress
            self.tracker.update_all(join.progress.view.counts().items())
            self.members = join.members
        self.tracker.propagate_all()
        self._leaving: dict[int, int] = {}
        """Workers that left, and how many progress batches each sent: forgotten once
        every one of them is applied here."""
        self._updates: ChangeBatch[Pointstamp] = ChangeBatch()
        self._ins = [tuple(target(s.index, i) for i in range(s.inputs)) for s in plan.vertices]
        """Each vertex's input locations (made once: the loop counts at them per batch)."""
        self._outs = [tuple(source(s.index, o) for o in range(s.outputs)) for s in plan.vertices]
        """Each vertex's output locations."""
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
        self.store = None if plan.store is None else StateStore(plan.store, index)
        """The disk state backend's tables of this worker (None: state in memory)."""
        if self.store is not None:
            for v, vertex in enumerate(self.vertices):
                if isinstance(vertex, StatefulVertex):
                    vertex.use_store(self.store, v, f"step {plan.vertices[v].name!r}")
        self.inbox: list[deque[tuple[int, Timestamp, list[Any]]]] = [deque() for _ in plan.vertices]
        self._invariant: dict[
            int, dict[Timestamp, tuple[list[tuple[int, list[Any]]], set[Timestamp]]]
        ] = {}
        """Per vertex with loop-invariant inputs, per outer time: the invariant batches
        received, and the iteration times they were delivered at."""
        self._ready: deque[int] = deque()
        self._feedback = frozenset(s.index for s in plan.vertices if s.kind == "feedback")
        self._held_rounds: dict[int, list[tuple[int, Timestamp, list[Any]]]] = {}
        """Per feedback vertex, the batches fed back that wait for earlier rounds of their
        loop to be done (:meth:`_next_rounds`)."""
        self._round_check = False  # frontiers moved since held rounds were last checked
        self._out: dict[tuple[int, int, int, Timestamp], list[Any]] = {}
        self._seq = [0] * peers
        self.early: EarlySend | None = None
        """Where a step's Arrow data for a peer goes once ``plan.send_early`` bytes of it
        are routed, before the step ends (the host's channels; None: at the step's end
        only)."""
        self._early_at = plan.send_early
        self._early_bytes: dict[int, int] = {}
        """Per peer, the Arrow bytes routed to it in this step and not yet sent."""
        self._sent_early = False
        self._commands: dict[int, deque[InputCommand]] = {}
        self._notify_pending: set[int] = set()
        self._frontier_moved = True  # progress applied but not yet propagated
        self._notify_check = False  # frontiers changed since notifications were last checked
        self.emitted: list[tuple[str, int, list[Any]]] = []
        self.received_since_step = False
        self.routing = Routing(plan.bins, default_table(plan.bins, peers))
        """The routing table in force at each epoch (:mod:`timely.routing.bins`)."""
        if join is not None:
            self.routing.restore(join.tables)
        self.migration = Migration(self, start)
        """Configurations received, bins to ship and to install (:mod:`timely.worker.migration`)."""
        checkpointing = checkpoint_every is not None or checkpoint_on_request
        self.snapshots = (
            Snapshots(self, checkpoint_every, start, checkpoint_incremental)
            if checkpointing
            else None
        )
        self._touched: set[int] = set() if self.snapshots is None else self.snapshots.dirty
        """The vertices that ran, dropped a capability or took a batch from their inbox
        since the last scan: the ones it looks at (with those whose frontiers moved)."""
        if restore is not None:
            self._restore(*restore)
        if join is not None and self.snapshots is not None and join.segments is not None:
            self.snapshots.segments = list(join.segments)  # the donor's schedule, as agreed
        first = (start,)
        roots = plan.roots if join is None else join.roots
        for v in roots:  # roots hold their initial capability at the first epoch
            ctx = self.contexts[v]
            ctx.caps[first] += 1
            vertex = self.vertices[v]
            assert isinstance(vertex, InputVertex | SourceVertex)
            self._activate(v, -1, first, vertex.start, Capability(ctx, first))
        for v in set(plan.roots).difference(roots):  # a joiner's: closed before it joined
            vertex = self.vertices[v]
            if isinstance(vertex, SourceVertex):  # its partitions are handed to it
                vertex.start_empty()
            else:
                assert isinstance(vertex, InputVertex)
                vertex.cap = None
        self._sources = [v for v in plan.roots if plan.vertices[v].kind == "source"]
        self._handing: dict[tuple[int, int], int] = {}
        """``(source, partition)``: the worker it is to be handed to (:meth:`release_at`)."""
        self._bound_sources()
        self._follow = self.plan.live_control and bool(self._sources)
        self.source_state = (-1, False)
        """:meth:`sources_read` and whether the sources are done, as of the last step, in
        a reconfigurable run (read by a host's heartbeat thread, between steps or not)."""
        # Starting may have dropped capabilities (a source with no partitions here).
        self.progress.record(self._updates.drain())

    @property
    def checkpointing(self) -> bool:
        """Whether this worker takes checkpoints (every few epochs, or on request)."""
        return self.snapshots is not None

    # -- inbound ----------------------------------------------------------------------------
    def receive(self, message: WorkerMessage) -> None:
        """Accept a peer's message (in its per-sender order)."""
        for v, port, time, records in message.data:
            self.inbox[v].append((port, time, records))
            self._ready.append(v)
        if message.progress is not None:
            self.tracker.update_all(self.progress.receive(message.progress))
            self._frontier_moved = True
            if self._leaving:
                self._forget_left()
        if message.state:
            self.migration.arrived(message.state)
        self.received_since_step = True

    def command(self, vertex: int, cmd: InputCommand) -> None:
        """A driver command for input ``vertex`` (send, advance, close), in order."""
        self._commands.setdefault(vertex, deque()).append(cmd)

    # -- the step ---------------------------------------------------------------------------
    def has_work(self) -> bool:
        """Whether a step now would do anything (local work, or held progress to release)."""
        return (
            self._local_work()
            or (bool(self.progress.pending()) and self.progress.must_flush(idle=True))
            or (bool(self.migration.preparing) and self._nothing_due())
        )

    def _nothing_due(self) -> bool:
        """No notification here is due once the work in flight has landed: every request
        is at an epoch an input or source may still send at. Then a step may spend time
        on preparation without holding up an output."""
        if not self._notify_pending:
            return True
        tracker, plan = self.tracker, self.plan
        open_from = min(
            (
                f[0]
                for r in plan.roots
                for port in range(plan.vertices[r].outputs)
                for f in tracker.pointstamp_frontier(source(r, port))
            ),
            default=None,
        )
        return open_from is not None and not any(
            t[0] < open_from for v in self._notify_pending for t in self.contexts[v].requests
        )

    def _local_work(self, ongoing: bool = True) -> bool:
        """Whether a step now has something to do here; ``ongoing=False`` leaves out what
        may always have more: active sources (they read a batch a step) and a loop's next
        round (a loop that never ends always has one)."""
        return bool(
            self._ready
            or (ongoing and self._held_rounds and (self._round_check or self._frontier_moved))
            or self._commands
            or self.received_since_step
            or self.migration.busy()
            or (self._notify_pending and (self._notify_check or self._frontier_moved))
            or (ongoing and any(self.vertices[v].due() for v in self._sources))  # type: ignore[attr-defined]
        )

    def next_awake(self) -> float | None:
        """When a source paced to later may be read (``time.time()``; None: none waits),
        so that a host with nothing else to do waits until then, not longer."""
        times = [
            t
            for v in self._sources
            if (t := self.vertices[v].next_awake()) is not None  # type: ignore[attr-defined]
        ]
        return min(times) if times else None

    def step(self) -> list[tuple[int, WorkerMessage]]:
        """Run one step; return the messages for other workers ``(peer, message)``."""
        log = self.log
        if log is None:
            return self._step()
        t0 = clock()
        try:
            return self._step()
        finally:
            log.add(("t", t0, clock()))
            log.tick()

    def _step(self) -> list[tuple[int, WorkerMessage]]:
        if self.migration.preparing and not self._local_work() and self._nothing_due():
            self.migration.prepare()  # an idle step: room for bins to come (one vertex)
        self.received_since_step = False
        self._propagate()
        if self._held_rounds and self._round_check:
            self._round_check = False
            self._next_rounds()
        for v, queue in list(self._commands.items()):
            vertex = self.vertices[v]
            assert isinstance(vertex, InputVertex)
            while queue:
                self._activate(v, -1, None, vertex.command, queue.popleft())
            del self._commands[v]
            if v == self.plan.control:
                self._bound_sources()
        for v in self._sources:
            vertex = self.vertices[v]
            assert isinstance(vertex, SourceVertex)
            if vertex.due():
                self._activate(v, -1, None, vertex.pull)
        self._drain_inbox()
        self._migrate()
        if self._notify_pending and self._notify_check:
            self._notify_check = False
            self._notify()
            self._drain_inbox()
            # What the notifications made possible for migrations (bins whose earlier
            # epochs are now done) waits for the next step: their outputs go out first.
            self.migration.dirty = True
        if self._follow:
            self.source_state = (self.sources_read(), self._sources_done())
        return self._finish_step()

    def _migrate(self) -> None:
        """Move migrations on (held batches, bins to ship and install), then deliver what
        that released."""
        migration = self.migration
        if migration.active and migration.pending():
            migration.advance()
            self._drain_inbox()

    def _propagate(self) -> None:
        if self._frontier_moved:
            self._frontier_moved = False
            changes = self.tracker.propagate_all()
            if changes:
                if self.snapshots is not None:
                    self.snapshots.frontiers_moved(changes)
                self._notify_check = True
                self._round_check = True
                self.migration.dirty = True

    def _too_far(self, v: int, time: Timestamp) -> bool:
        """Whether a batch fed back to ``v`` at ``time`` is more than ``ROUNDS_AHEAD``
        rounds past a round of its outer time that is not done yet here (on this worker's
        view of the frontier at ``v``): it waits then (:meth:`_next_rounds`)."""
        n = time[-1] - ROUNDS_AHEAD
        return any(f[-1] < n and less_equal(f, time) for f in self.tracker.frontier(target(v, 0)))

    def _next_rounds(self) -> None:
        """Let the batches held at loops' feedback vertices go round as far as their
        loops' rounds now allow (see :meth:`_too_far`).

        Why a loop is held back: records can go round faster than rounds are done (a
        round's notifications wait for its progress to travel), and every round begun
        and not done keeps its per-time tables, notifications and pointstamps, so a
        loop that runs for ever would take ever more memory; and since a step delivers
        its local sends within itself, a loop whose records pass without a notification
        (a concat, a distinct) would run round after round in one step, which would
        never end. Held back, a step runs at most ``ROUNDS_AHEAD`` rounds of a loop past
        the frontier it began with, and a loop's memory stays flat however long it
        runs. A held batch holds nothing up: what it waits for comes from earlier
        rounds, which it cannot reach (unless a vertex keeps a capability at an early
        round until a later round's records come: it must move it on with the rounds)."""
        for v, held in list(self._held_rounds.items()):
            wait = []
            for batch in held:
                if self._too_far(v, batch[1]):
                    wait.append(batch)
                else:
                    self.inbox[v].append(batch)
                    self._ready.append(v)
            if wait:
                self._held_rounds[v] = wait
            else:
                del self._held_rounds[v]

    def queued(self, v: int) -> Iterator[Timestamp]:
        """The times of the batches here that wait for ``v``: in its inbox, or held back
        before its loop's next rounds."""
        for _, time, _ in self.inbox[v]:
            yield time
        for _, time, _ in self._held_rounds.get(v, ()):
            yield time

    def _drain_inbox(self) -> None:
        inbox, ready = self.inbox, self._ready
        while ready:
            v = ready.popleft()
            queue = inbox[v]
            if not queue:
                continue
            port, time, records = queue.popleft()
            self._touched.add(v)
            loc = self._ins[v][port]
            if time[0] > self.max_epoch:
                self.max_epoch = time[0]
            if not self.tracker.could_reach(loc, time):
                name = self.plan.vertices[v].name
                raise ProtocolError(
                    f"worker {self.index}: a batch at {time} reached {name!r} input {port}, "
                    f"whose frontier {self.tracker.frontier(loc)} has passed it"
                )
            self._updates.update((loc, time), -1)
            if port == self.plan.vertices[v].control_port:
                self.migration.configure(v, records, time)
                continue
            if v in self.plan.invariant:
                self._recv_in_loop(v, port, time, records)
                continue
            self._activate(v, port, time, self.vertices[v].on_recv, port, records, time)

    def _recv_in_loop(self, v: int, port: int, time: Timestamp, records: list[Any]) -> None:
        """Deliver a batch to a vertex with loop-invariant inputs (``Stream.enter``): the
        invariant records of an outer time are kept (once, here) and delivered again at
        every iteration time of it that had records on any worker (the marks, broadcast
        from the other inputs, say which), and those that arrive later go to the times
        already seen. Delivering at a later time than a batch's own is allowed: a vertex
        may send at any time at or after the one it holds."""
        kept = self._invariant.setdefault(v, {})
        outer = time[:-1]
        if outer not in kept:
            self._forget_invariant(v, outer)
            kept[outer] = ([], set())
        batches, seen = kept[outer]
        on_recv = self.vertices[v].on_recv
        if port in self.plan.invariant[v]:
            batches.append((port, records))
            for t in sorted(seen | {time}):  # at or after the batch's time: allowed
                self._activate(v, port, t, on_recv, port, records, t)
            seen.add(time)
            return
        if time not in seen:  # an iteration not seen yet: the invariant records first
            self._forget_rounds(v, seen)
            seen.add(time)
            for p, kept_records in batches:
                self._activate(v, port, time, on_recv, p, kept_records, time)
        if port not in self.plan.vertices[v].marks_ports:  # a mark: records somewhere
            self._activate(v, port, time, on_recv, port, records, time)

    def _forget_rounds(self, v: int, seen: set[Timestamp]) -> None:
        """Drop from ``seen`` the iteration times ``v`` is done with: nothing more can
        arrive at them, not even a late invariant batch (it would come at an earlier
        time, which the frontier would not have passed). Else a loop that runs long
        keeps one time per round of its epoch."""
        for t in [t for t in seen if self._ready_now(v, t)]:
            seen.discard(t)

    def _forget_invariant(self, v: int, current: Timestamp) -> None:
        """Drop the invariant records of the outer times the loop is done with at ``v``
        (no input of it can still receive a time of them)."""
        ports = range(len(self.plan.vertices[v].input_depths))
        kept = self._invariant[v]
        for outer in list(kept):
            if outer != current and not any(
                less_equal(f[:-1], outer) for p in ports for f in self.frontier(v, p)
            ):
                del kept[outer]

    def _ready_now(self, v: int, t: Timestamp) -> bool:
        """No input of ``v`` can still see a time ``<= t``, and none is waiting in its inbox."""
        could_reach = self.tracker.could_reach
        for loc in self._ins[v]:
            if could_reach(loc, t):
                return False
        if any(less_equal(p, t) for _, p, _ in self.inbox[v]):
            return False
        held = self._held_rounds.get(v)  # (a feedback vertex's: none is ever notified)
        return not held or not any(less_equal(p, t) for _, p, _ in held)

    def _notify(self) -> None:
        snapshots = self.snapshots
        for v in sorted(self._notify_pending):
            ctx = self.contexts[v]
            ready = sorted(t for t in ctx.requests if self._ready_now(v, t))
            delivered: set[Timestamp] = set()
            i = 0
            while i < len(ready):
                t = ready[i]
                i += 1
                if self.migration.waiting(v, t[0]):
                    break  # bins moving here at or before this epoch are not installed yet
                if snapshots is not None:
                    # State after the next checkpoint epoch may not change before the
                    # vertex's snapshot for it is taken.
                    if snapshots.hold_back(v, t[0]):
                        break
                    self.max_epoch = max(self.max_epoch, t[0])
                ctx.requests.discard(t)
                delivered.add(t)
                asked = len(ctx.requests)
                self._activate(v, -1, t, self.vertices[v].on_notify, t)
                ctx.hold(t, -1)
                if len(ctx.requests) > asked:
                    # It asked for another notification, which may be ready already and
                    # earlier than those still to come: notifications go in time order.
                    # (A time asked again in this pass waits for the next one, as before.)
                    ready = sorted(
                        u for u in ctx.requests if u not in delivered and self._ready_now(v, u)
                    )
                    i = 0
            if not ctx.requests:
                self._notify_pending.discard(v)

    def _activate(self, v: int, port: int, time: Timestamp | None, fn: Any, *args: Any) -> None:
        log = self.log
        if log is not None:
            t0, out0 = clock(), self.records_out
        timed = v in self.migration.migratable
        if timed:
            u0 = clock()
        ctx = self.contexts[v]
        ctx.now = None if time is None else (port, time)
        self._touched.add(v)
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
            if timed:
                self.migration.useful_ns += clock() - u0
            if self.store is not None:  # no value is held between activations
                try:
                    self.store.maybe_flush()
                except PlainDataError as e:
                    self.contexts[e.vertex if e.vertex >= 0 else v].user_error(e, None, e.key, None)
            if log is not None:
                if port >= 0:
                    kind, records_in = RECV, len(args[1])
                else:
                    kind, records_in = _KINDS.get(fn.__name__, START), 0
                    if kind == COMMAND and isinstance(args[0], Send):
                        records_in = len(args[0].records)
                log.add(("a", t0, clock(), v, kind, records_in, self.records_out - out0))

    # -- what vertex contexts call ------------------------------------------------------------
    def notification_requested(self, v: int, time: Timestamp) -> None:
        """``v`` asked to be notified at ``time`` (its context holds the request)."""
        self._notify_pending.add(v)
        if self._ready_now(v, time):
            self._notify_check = True  # asked for a time already passed

    def capability_changed(self, v: int, outputs: int, time: Timestamp, delta: int) -> None:
        """``v`` holds ``delta`` more capabilities at ``time``: count them at its outputs."""
        if delta > 0 and time[0] > self.max_epoch:
            self.max_epoch = time[0]
        elif delta < 0:
            self._touched.add(v)
        for loc in self._outs[v][:outputs]:
            self._updates.update((loc, time), delta)

    def recheck_notifications(self) -> None:
        """Notifications held back may go now (a snapshot was taken)."""
        self._notify_check = True

    def send_from(self, v: int, output: int, records: list[Any], time: Timestamp) -> None:
        """Route ``records`` from output ``output`` of ``v`` at ``time`` to their inboxes."""
        self.records_out += len(records)
        migration = self.migration
        for edge in self.plan.out_edges[v][output]:
            if migration.active and migration.must_hold(edge, time):
                # Counted at the output, as a capability would be: a receiver's -1 for
                # part of it, once released, may reach a third worker before the
                # release itself, and must not cancel the count that holds the frontier.
                migration.hold(edge, records, time)
                self._updates.update((self._outs[v][output], time), 1)
                continue
            self.route(v, edge, records, time)

    def release_held(self, edge: EdgeSpec, records: list[Any], time: Timestamp) -> None:
        """Send a batch the migration held (:meth:`send_from` counted it at its output),
        now that every configuration up to its epoch is known."""
        self._updates.update((source(edge.src, edge.src_port), time), -1)
        self.route(edge.src, edge, records, time)

    def route(self, v: int, edge: EdgeSpec, records: list[Any], time: Timestamp) -> None:
        """Send ``records`` from ``v`` at ``time`` along ``edge``, now."""
        channel = edge.channel
        if self.peers == 1:
            routed = {self.index: records}
        elif isinstance(channel, Broadcast):  # to the workers taking part at its epoch
            routed = dict.fromkeys(self.members.at(time[0]), records)
        else:
            try:
                if isinstance(channel, Exchange):
                    migration = self.migration
                    table = migration.table_for(edge.dst, time[0])
                    load = migration.load if edge.dst in migration.migratable else None
                    routed = channel.route_by(records, table, self.index, load)
                else:
                    routed = channel.route(records, self.peers, self.index)
            except Exception as e:
                ctx = self.contexts[v]
                bad = _first_unroutable(channel, records)
                ctx.user_error(e, time, bad, getattr(channel, "key", None))
        for dest, part in routed.items():
            if not part:
                continue
            if dest == self.index:
                # Local: straight into the inbox, delivered later in this same step; but
                # a loop's next round may have to wait for its earlier ones (_next_rounds).
                if edge.dst in self._feedback and self._too_far(edge.dst, time):
                    held = self._held_rounds.setdefault(edge.dst, [])
                    held.append((edge.dst_port, time, part))  # round a loop, later
                else:
                    self.inbox[edge.dst].append((edge.dst_port, time, part))
                    self._ready.append(edge.dst)
                self._updates.update((self._ins[edge.dst][edge.dst_port], time), 1)
            else:
                key = (dest, edge.dst, edge.dst_port, time)
                buf = self._out.get(key)
                if buf is None:
                    self._out[key] = buf = []
                    self._updates.update((self._ins[edge.dst][edge.dst_port], time), 1)
                buf.extend(part)
                if (
                    self.early is not None
                    and self._early_at
                    and type(part[0]).__name__ == "RecordBatch"
                ):
                    size = self._early_bytes.get(dest, 0) + sum(b.nbytes for b in part)
                    if size >= self._early_at and self._send_early(dest):
                        size = 0
                    self._early_bytes[dest] = size

    def _send_early(self, dest: int) -> bool:
        """Send what this step routed to ``dest`` so far, as a message without progress,
        if its channel takes a frame now (else it waits for the step's end, as all data
        does without ``early``). Each buffer sent was counted (+1) when it was begun, in
        this step's progress batch, which goes after it on the same FIFO channel; what
        is routed to the same place later in the step begins a buffer (and a count) of
        its own. The receiver may take the data in before that batch: the count of the
        input this step consumes (or the capability it sends at) holds every frontier
        at the data's time until the batch arrives, as in timely-dataflow, whose
        operators send as their buffers fill."""
        early = self.early
        assert early is not None
        if not early.ready(dest):
            return False
        rows = self.plan.coalesce_rows
        msg = WorkerMessage(self.index, self._seq[dest])
        for key in [k for k in self._out if k[0] == dest]:
            _, v, port, time = key
            msg.data.append((v, port, time, coalesce(self._out.pop(key), rows)))
        self._seq[dest] += 1
        self._sent_early = True
        early.send(dest, msg)
        return True

    def _finish_step(self) -> list[tuple[int, WorkerMessage]]:
        shipped = self.migration.take_shipped()
        if (
            not self._out
            and not shipped
            and self._updates.is_empty()
            and not self.progress.pending()
        ):
            self._propagate()
            if self.snapshots is not None:
                self.snapshots.scan()
            return []  # a step that changed nothing has nothing to say
        messages: dict[int, WorkerMessage] = {}
        rows = self.plan.coalesce_rows
        for (dest, v, port, time), records in self._out.items():
            msg = messages.get(dest)
            if msg is None:
                messages[dest] = msg = WorkerMessage(self.index, 0)
            # One buffer, counted once: merging the batches inside it keeps every count.
            msg.data.append((v, port, time, coalesce(records, rows)))
        self._out = {}
        for dest, bins in shipped.items():
            msg = messages.get(dest)
            if msg is None:
                messages[dest] = msg = WorkerMessage(self.index, 0)
            msg.state.extend(bins)
        self.progress.record(self._updates.drain())
        # Progress rides along with data that goes out anyway: holding it back would only
        # cost another message. Otherwise accumulation decides. A running source does not
        # count as more work in this round: it always has some, and its epochs would
        # otherwise complete for no one until it ends.
        # Data sent early in this step: its counts go now too, as they would have with it.
        force = bool(messages) or self._sent_early
        self._sent_early = False
        self._early_bytes.clear()
        batch = self.progress.flush(force=force, idle=not self._local_work(False))
        if batch is not None:
            self.tracker.update_all(self.progress.receive(batch))
            self._frontier_moved = True
            for peer in self._progress_peers():
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
        if self.snapshots is not None:
            self.snapshots.scan()
        return out

    # -- workers that join and leave (issue 29) ------------------------------------------------
    def mint_join(
        self, worker: int, epoch: int, roots: Sequence[int], first_seq: int = 0
    ) -> tuple[list[tuple[int, WorkerMessage]], Join]:
        """As the donor of ``worker``, joining at ``epoch``: a step of this worker's own
        that counts the joiner's capabilities at ``epoch``, at every output of ``roots``
        (the driver's inputs still open), and hands them over; then what the joiner starts
        from. Returns the step's messages (the minting batch, for every peer) and the
        :class:`Join`. This worker must hold a capability at or before ``epoch`` at each
        of them, as every worker holds its inputs' (the driver has not advanced past it).

        Every other worker then calls :meth:`add_peer`; the host delivers to the joiner,
        besides, every progress batch still on its way to this worker."""
        first = (epoch,)
        caps: list[Pointstamp] = []
        for r in roots:
            if not any(less_equal(t, first) for t in self.contexts[r].caps):
                name = self.plan.vertices[r].name
                raise ValueError(
                    f"worker {self.index} holds no capability of {name!r} at or before "
                    f"{first}: it cannot mint one there for worker {worker}"
                )
            caps.extend((source(r, o), first) for o in range(self.plan.vertices[r].outputs))
        self.progress.record(self._updates.drain())
        self.progress.record((ps, 1) for ps in caps)
        batch = self.progress.flush(force=True)
        assert batch is not None
        self.tracker.update_all(self.progress.receive(batch))
        self._frontier_moved = True
        out = self._progress_alone(batch)
        for ps in caps:
            self.progress.hand_over(ps)
        progress = WorkerProgress.joining(
            worker, self.progress, caps, after=batch.seq, first_seq=first_seq
        )
        members = self.members.copy()
        members.join(worker, epoch)
        segments = None if self.snapshots is None else list(self.snapshots.segments)
        join = Join(epoch, progress, self.routing.upto(epoch), members, tuple(roots), segments)
        if worker not in self.progress.senders():  # (a Ray donor counts it already)
            self.add_peer(worker, epoch, first_seq)
        return out, join

    def release_at(self, vertex: int, partitions: Sequence[int], to: int, epoch: int) -> None:
        """Hand ``partitions`` of source ``vertex`` to worker ``to`` at ``epoch``: this
        worker reads them up to that epoch, then :meth:`take_handovers` gives them."""
        src = self.vertices[vertex]
        if not isinstance(src, SourceVertex):
            raise ValueError(f"step {self.plan.vertices[vertex].name!r} is not a source")
        src.release_at(partitions, epoch)
        for p in partitions:
            self._handing[(vertex, p)] = to

    def take_handovers(self) -> tuple[list[tuple[int, WorkerMessage]], list[tuple[int, Handover]]]:
        """The partitions that reached the epoch they are handed over at, released in a
        step of this worker's own (:meth:`release_partitions`): its messages, and each
        :class:`Handover` with the worker it goes to. Call it between steps."""
        out: list[tuple[int, WorkerMessage]] = []
        handovers: list[tuple[int, Handover]] = []
        for v in self._sources:
            src = self.vertices[v]
            assert isinstance(src, SourceVertex)
            if not src.ready:
                continue
            by_worker: dict[int, list[int]] = {}
            for p in sorted(src.ready):
                by_worker.setdefault(self._handing.pop((v, p)), []).append(p)
            for to, parts in by_worker.items():
                messages, handover = self.release_partitions(v, parts)
                out.extend(messages)
                handovers.append((to, handover))
        return out, handovers

    def _bound_sources(self) -> None:
        """In a reconfigurable run, sources read nothing at or past the epoch the control
        input is at (their records would wait for it there, and a change of workers
        takes effect there): the driver moves it on as they read
        (:meth:`Session._follow_sources`)."""
        control = self.plan.control
        if control is None or not self._sources or not self.plan.live_control:
            return
        cap = self.vertices[control].cap  # type: ignore[attr-defined]
        bound = None if cap is None else cap.time[0]
        for v in self._sources:
            self.vertices[v].bound_to(bound)  # type: ignore[attr-defined]

    def handovers_ready(self) -> bool:
        """Whether source partitions reached the epoch they are handed over at."""
        return any(self.vertices[v].ready for v in self._sources)  # type: ignore[attr-defined]

    def handing_over(self) -> bool:
        """Whether partitions this worker reads are still to be handed over."""
        return bool(self._handing)

    def sources_read(self) -> int:
        """The latest epoch this worker's sources read, or hold a batch of at their
        bound (-1: none yet)."""
        return max(
            (
                max(self.vertices[v].highest, self.vertices[v].waiting)  # type: ignore[attr-defined]
                for v in self._sources
            ),
            default=-1,
        )

    def sources_done(self) -> bool:
        """Whether every source is read to its end, on every worker (as far as this
        worker's view knows: never before it is true)."""
        self._propagate()
        return self._sources_done()

    def _sources_done(self) -> bool:
        return all(not self.tracker.pointstamp_frontier(source(v, 0)) for v in self._sources)

    def release_partitions(
        self, vertex: int, partitions: Sequence[int]
    ) -> tuple[list[tuple[int, WorkerMessage]], Handover]:
        """As the owner of ``partitions`` of source ``vertex``, each at the epoch it is
        handed over at: a step of this worker's own that stops reading them and counts
        a capability for each (not read to its end) at that epoch, for the worker they
        go to; returns the step's messages (the minting batch, for every peer) and the
        :class:`Handover`. The new owner takes it with :meth:`adopt_partitions`; this
        worker's own capability follows the partitions it keeps, in the same batch."""
        src = self.vertices[vertex]
        if not isinstance(src, SourceVertex):
            raise ValueError(f"step {self.plan.vertices[vertex].name!r} is not a source")
        parts: dict[int, list[Any]] = {}
        self._activate(vertex, -1, None, lambda: parts.update(src.release(partitions)))
        outputs = self.plan.vertices[vertex].outputs
        caps = tuple(
            (source(vertex, o), (state[1],))
            for state in parts.values()
            if not state[2]
            for o in range(outputs)
        )
        self.progress.record(self._updates.drain())
        self.progress.record((ps, 1) for ps in caps)
        batch = self.progress.flush(force=True)
        out: list[tuple[int, WorkerMessage]] = []
        if batch is not None:
            self.tracker.update_all(self.progress.receive(batch))
            self._frontier_moved = True
            out = self._progress_alone(batch)
        for ps in caps:
            self.progress.hand_over(ps)
        after = self.progress.next_seq() - 1
        return out, Handover(vertex, self.index, after, parts, caps)

    def adopt_partitions(self, handover: Handover) -> None:
        """Read on the partitions another worker released (:meth:`release_partitions`),
        with the capabilities it minted for them; this worker's next progress batch is
        applied after the one that counted them, everywhere."""
        v = handover.vertex
        src = self.vertices[v]
        assert isinstance(src, SourceVertex)
        self.progress.adopt(handover.capabilities, handover.owner, handover.after)
        ctx = self.contexts[v]
        caps = []
        for loc, time in handover.capabilities:
            if loc.port == 0:  # one capability a partition, for every output at once
                ctx.caps[time] += 1
                caps.append(Capability(ctx, time))
        self._activate(v, -1, None, src.adopt, handover.partitions, caps)
        self.progress.record(self._updates.drain())

    def members_at(self, epoch: int) -> tuple[int, ...]:
        """The workers taking part at ``epoch`` (:class:`~timely.routing.members.Members`)."""
        return self.members.at(epoch)

    def add_peer(self, worker: int, epoch: int, first_seq: int = 0) -> None:
        """``worker`` joined the run at ``epoch``: its progress batches count here from
        now on, and it receives broadcasts at times from ``epoch`` on."""
        self.progress.add_peer(worker, first_seq)
        self.members.join(worker, epoch)
        self.peers += 1
        while len(self._seq) <= worker:
            self._seq.append(0)

    def leave_at(self, worker: int, epoch: int) -> None:
        """``worker`` leaves the run at ``epoch``: no broadcast at ``epoch`` or later
        goes to it (told to every worker before any such time exists)."""
        self.members.leave(worker, epoch)
        if worker == self.index and self.snapshots is not None:
            self.snapshots.until = epoch  # its parts: the checkpoints before it leaves

    def can_leave(self, epoch: int) -> bool:
        """As a worker leaving at ``epoch``: whether it may go now. It holds no
        capability, has nothing left to do or ship (bins, source partitions), and no data
        can reach it any more:
        its view has no pointstamp before ``epoch`` (safe: the true frontier is no
        earlier), and nothing at ``epoch`` or later is routed here; with checkpoints,
        its part of every checkpoint before ``epoch`` is complete (the host writes it)."""
        self._propagate()
        if self.snapshots is not None:
            self.snapshots.scan()
            if self.snapshots.parts:
                return False
        return (
            not any(ctx.caps or ctx.requests for ctx in self.contexts)
            and not self._ready
            and not any(self.inbox)
            and not self._held_rounds
            and not self._commands
            and not self._out
            and not self.migration.pending()
            and not self._handing
            and not any(t[0] < epoch for _, t in self.progress.view.live())
        )

    def leave(self) -> tuple[list[tuple[int, WorkerMessage]], int]:
        """As a leaving worker (:meth:`can_leave`): its last progress batch, for every
        peer, and how many batches it sent in all (each peer forgets it once it applied
        that many: :meth:`peer_left`)."""
        self.progress.record(self._updates.drain())
        out = []
        batch = self.progress.flush(force=True)
        if batch is not None:
            self.tracker.update_all(self.progress.receive(batch))
            out = self._progress_alone(batch)
        return out, self.progress.next_seq()

    def _progress_peers(self) -> list[int]:
        """The workers this one's progress batches go to: every peer but itself and
        those that left."""
        return [p for p in self.progress.senders() if p != self.index and p not in self._leaving]

    def _progress_alone(self, batch: ProgressBatch) -> list[tuple[int, WorkerMessage]]:
        """A step's messages that carry only ``batch`` (a join's mint, a leaver's last)."""
        out = []
        for peer in self._progress_peers():
            out.append((peer, WorkerMessage(self.index, self._seq[peer], progress=batch)))
            self._seq[peer] += 1
        return out

    def peer_left(self, worker: int, sent: int) -> None:
        """``worker`` left after sending ``sent`` progress batches: send it nothing more,
        and forget it once all of them are applied here."""
        self._leaving[worker] = sent
        self._forget_left()

    def _forget_left(self) -> None:
        for worker, sent in list(self._leaving.items()):
            if self.progress.applied_from(worker) == sent:
                self.progress.remove_peer(worker, sent)
                del self._leaving[worker]
                self.peers -= 1

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint_floor(self) -> int:
        """See :meth:`timely.worker.snapshots.Snapshots.floor` (-1 when not checkpointing)."""
        return -1 if self.snapshots is None else self.snapshots.floor()

    def request_checkpoint(
        self, epoch: int, every: int | None = None, fraction: float | None = None
    ) -> bool:
        """The driver asks for a checkpoint after ``epoch`` and, with ``every``, every
        ``every`` epochs after it; see :meth:`timely.worker.snapshots.Snapshots.request`.
        ``fraction``: the coordination fraction the driver measured that made it choose
        ``every`` (``checkpoint_every="auto"``), for the event log."""
        if self.snapshots is None:
            return False
        agreed = self.snapshots.request(epoch, every)
        log = self.log
        if agreed and every is not None and log is not None:
            now = clock()
            log.add(("k", now, now, epoch, every, fraction))
        return agreed

    def checkpoint_work(self) -> int:
        """Nanoseconds checkpointing has cost this loop since the last call (see
        :meth:`timely.worker.snapshots.Snapshots.take_work`)."""
        return 0 if self.snapshots is None else self.snapshots.take_work()

    def checkpoint_stalled(self) -> int:
        """Nanoseconds this loop has waited for input while a notification was held back,
        since it began (see :meth:`waited`)."""
        return 0 if self.snapshots is None else self.snapshots.cost.stalled_ns

    def checkpoint_section(self, t0: int, t1: int) -> None:
        """The host's loop spent ``[t0, t1]`` (ns of its thread's CPU time) on checkpoint
        work of its own (handing parts to its writer, reporting them): counted with the
        next part (see :mod:`timely.checkpoint.cost`)."""
        if self.snapshots is not None:
            self.snapshots.cost.section(t0, t1)

    def waited(self, t0: int, t1: int) -> None:
        """The host's loop waited for input over ``[t0, t1]`` (ns, ``clock``): a stall
        of checkpointing if a notification was held back meanwhile."""
        if self.snapshots is not None:
            self.snapshots.cost.idle(t0, t1)

    def take_parts(self) -> list[Part]:
        """Checkpoint parts completed since the last call, ``(epoch, part)`` in epoch order;
        each vertex's snapshot in a part is already encoded, or a copy already."""
        return [] if self.snapshots is None else self.snapshots.take_parts()

    def _restore(self, epoch: int, share: Share) -> None:
        """Restore every vertex from this worker's share of the checkpoint at ``epoch``,
        read one old part at a time: a keyed vertex's first piece restores it and later
        ones (a rescale) add their keys; a vertex with its own ``restore_at`` or
        ``restore`` gets its pieces merged, once; sources get every part's offsets."""
        started: dict[int, int] = {}
        merged: dict[int, list[Any]] = {}
        offsets: dict[int, dict[Any, Any]] = {}
        for piece in share.pieces():
            for v, snap in piece.items():
                vertex = self.vertices[v]
                if isinstance(snap, dict) and snap.get("kind") == "offsets":
                    offsets.setdefault(v, {}).update(snap["partitions"])
                elif not _piecewise(vertex):
                    merged.setdefault(v, []).append(snap)
                elif v not in started:
                    started[v] = 1
                    self._restore_vertices(epoch, {v: snap})
                else:
                    started[v] += 1
                    assert isinstance(vertex, StatefulVertex)
                    self._restore_vertices(epoch, {v: snap}, vertex.add_piece)
        self._restore_vertices(epoch, {v: merge_pieces(snaps) for v, snaps in merged.items()})
        self._restore_vertices(
            epoch, {v: {"kind": "offsets", "partitions": p} for v, p in offsets.items()}
        )
        for v, n in started.items():  # keys came from several parts: ask again for them all
            vertex = self.vertices[v]
            if n > 1 and isinstance(vertex, StatefulVertex):
                self._restore_vertices(epoch, {v: None}, lambda _, e, x=vertex: x.restored(e))

    def _restore_vertices(
        self, epoch: int, snapshots: dict[int, Any], how: Callable[..., None] | None = None
    ) -> None:
        for v, snap in snapshots.items():
            spec = self.plan.vertices[v]
            depth = (spec.output_depths or spec.input_depths or (0,))[0]
            ctx = self.contexts[v]
            ctx.now = (-1, (epoch + 1,) + (0,) * depth)
            fn = how or self.vertices[v].restore_at
            try:
                fn(snap, epoch)
            except Exception as e:
                ctx.user_error(e, (epoch,), None, fn)
            finally:
                ctx.now = None

    # -- state --------------------------------------------------------------------------------
    def close(self) -> None:
        """Let the worker go: the disk backend's tables and files are deleted."""
        if self.store is not None:
            self.store.close()

    def idle(self) -> bool:
        """Nothing left anywhere, as far as this worker knows: every frontier is empty."""
        self._propagate()
        return (
            self.tracker.is_idle()
            and not self.progress.pending()
            and not self._ready
            and not self._held_rounds
        )

    def frontier(self, vertex: int, port: int = 0) -> tuple[Timestamp, ...]:
        """This worker's view of the frontier at input ``port`` of ``vertex``."""
        self._propagate()
        return self.tracker.frontier(target(vertex, port))

    def loop_rounds(self) -> list[tuple[int, Timestamp]]:
        """Per feedback vertex that has sent anything, the time of the furthest round it
        sent to, ``(vertex, time)``: what the driver's ``loop_warning`` watches
        (:mod:`timely.session.loopwatch`). Safe to call from another thread (a heartbeat's)."""
        out = []
        for v in self._feedback:
            furthest = getattr(self.vertices[v], "furthest", None)
            if furthest is not None:
                out.append((v, furthest))
        return out

    def take_emitted(self) -> list[tuple[str, int, list[Any]]]:
        """Outputs for the driver produced since the last call: ``(key, epoch, records)``."""
        out, self.emitted = self.emitted, []
        return out


def _first_unroutable(channel: Any, records: list[Any]) -> Any:
    if not isinstance(channel, Exchange):
        return records[0] if records else None
    key = channel.key
    for r in records:
        try:
            stable_hash(r if key is None else key(r))
        except Exception:
            return r
    return None


def _piecewise(vertex: Vertex) -> bool:
    """Whether ``vertex`` restores piece by piece (the keyed state's own ``restore_at``
    and ``restore``, which :meth:`StatefulVertex.add_piece` continues)."""
    return (
        isinstance(vertex, StatefulVertex)
        and type(vertex).restore_at is StatefulVertex.restore_at
        and type(vertex).restore is StatefulVertex.restore
    )
