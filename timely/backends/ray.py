"""The Ray backend: one async actor per worker; workers talk over their own sockets.

Each actor hosts a :class:`~timely.worker.loop.Worker` and runs its step loop as an async
method the driver starts; commands, queries and the connections' reader tasks are
served between steps. Heartbeats are served by a concurrency group of their own
(another thread), so a worker busy in a long user function still answers them.

Start: the driver makes the run's secret (``secrets.token_bytes(32)``) and hands it
to every actor's ``start``, which builds the worker and listens
(:class:`~timely.comm.Allocator`: a Unix socket, 0600 in a 0700 directory; on a
multi-node cluster also TCP on the node's IP). The driver gathers the addresses and
starts every actor's ``run`` with them: each first dials the lower indices (Unix on its
own node, TCP across nodes), accepts the higher ones and the driver, every connection
proving the secret before anything else is read, then steps (one Ray call after the
start, not a ``connect`` to wait for and then a ``run``). A relaunch makes new actors,
a new secret and new sockets.

Transport (see DESIGN.md, Execution): after a step the worker writes one frame per
peer carrying that step's :class:`~timely.comm.messages.WorkerMessage` (data and
progress), encoded by :mod:`timely.comm.serialization`; a reader task per connection
queues what arrives and the loop applies it between steps. A connection is FIFO, so
no reordering is needed. Credits bound each direction: a sender has at most
``max_inflight`` frames per peer that the peer's worker has not applied, and waits
for credit otherwise. While it waits it keeps applying what arrives, so workers
sending to each other never deadlock, but at most ``max_inflight`` frames per peer
for the step being sent, so a worker held back by a slow consumer holds its own
producers back in turn and no inbox grows without bound (end to end; and since every
step that sends data also sends its progress to every peer, a slow worker holds
every producer back directly too).

The driver is one more endpoint on the same sockets (:mod:`timely.comm.driver`, index
``workers``, same handshake and secret): it dials every actor once their runs are
started (each run's connecting waits for it too). Input commands (send, advance,
close) go out as frames on the driver's thread (FIFO per worker, so no sequence
numbers; at most ``max_inflight`` per worker not yet applied, so a fast driver waits
for credit), and each step's outputs (``collect``/``subscribe``), each checkpoint
part written and a last "ended" report come back as frames. A reader thread per
connection only queues them; they are delivered on the driver's thread, in each
worker's order, whenever it calls into the session: ``poll(timeout)``, input
commands, probes and ``join`` (as on the inline backend, callbacks never run
concurrently with the driver's code). Ray calls remain for the rare things: ``start``,
``run`` (``connect`` for a worker joining), ``request_checkpoint``, frontier probes,
heartbeats and stats.

The driver watches every worker's loop and heartbeat while it waits: a user error
anywhere is raised as is; a dead or silent actor becomes
:class:`~timely.errors.WorkerDied` naming the worker, and so does the driver's
connection to it ending (then a relaunch connects the driver to the new actors), and a
connection between workers that ends (EOF, reset, a failed handshake: the actor's
``run`` raises it, naming both ends) or whose reader stops (frames unread while the
receiver waits for work, seen from the heartbeats); a run whose inputs are all closed
but whose workers all wait without progress is reported as a stall.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import os
import pickle
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray
from ray import cloudpickle
from ray.exceptions import RayActorError, RaySystemError, RayTaskError

from timely.backends.ray_pool import POOL, kill, read_calls
from timely.checkpoint.config import CheckpointConfig
from timely.checkpoint.coordinator import Restore
from timely.checkpoint.store import CheckpointStore, Share
from timely.checkpoint.writer import is_large, write_encoded
from timely.comm import serialization, sockdir
from timely.comm.allocator import DRIVER, Address, Allocator, Channel, PeerLost
from timely.comm.driver import DriverLinks
from timely.comm.messages import (
    InputCommand,
    Send,
    WorkerMessage,
    command_from_wire,
    command_to_wire,
)
from timely.errors import ConfigError, TimelyError, WorkerDied
from timely.eventlog import EventLog, clock, message_event
from timely.graph.plan import Plan
from timely.graph.spec import RunSpec
from timely.session.base import Session, merge_frontiers
from timely.session.membership import Membership, driver_inputs
from timely.session.verbosity import resolve_verbose
from timely.worker.loop import Handover, Join, Worker
from timely.worker.migration import BinLoad
from timely.worker.profiling import WorkerProfile

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

Outputs = list[tuple[str, int, list[Any]]]
Ping = tuple[int, bool, list[int], list[int], float, list[tuple[int, tuple[int, ...]]], int, bool]
"""A heartbeat's answer: see ``WorkerActor.ping``."""

_WAKE = 1.0
"""How long a waiting worker sleeps between checks when nothing arrives."""
_TICK = 0.1
"""How often the blocked driver checks the workers' loops and heartbeats."""
_FOLLOW_EVERY = 0.05
"""How often workers are asked how far their sources read, in a reconfigurable run over
sources (their control input follows)."""
_CHECK_EVERY = 0.01
"""The least time between two checks of the workers from ``poll``."""
_START_TIMEOUT = 60.0
"""How long the driver waits for the cluster to place every worker."""
_INLINE_PLAN = 64 * 1024
"""A pickled plan up to this size goes to each worker inside its ``start`` call; a larger
one through Ray's object store, put once (a put and each worker's fetch from the store
cost a small plan's start more than the bytes themselves: ~2 ms of ~4 for two workers)."""

BATCH = -1
"""The vertex a driver frame names when it carries several commands ``[[vertex, wire], ...]``."""
BATCH_BYTES = 16 << 20
"""A frame of held commands goes once its records weigh about this much (see
:func:`_weight`): a frame's length is a u32, and a worker decodes a whole frame at once."""


def _weight(cmd: InputCommand) -> int:
    """About how many bytes ``cmd`` takes on the wire, cheaply: Arrow data's own size, and
    64 bytes a record otherwise (rows are not walked)."""
    if not isinstance(cmd, Send):
        return 16
    records = cmd.records
    if not records:
        return 0
    first = getattr(records[0], "nbytes", None)  # read once: an Arrow table sums its buffers
    if first is None:
        return 64 * len(records)
    return int(first) + sum(int(getattr(r, "nbytes", 64)) for r in records[1:])


class _EarlySend:
    """A worker actor's channels for its worker's early sends (the worker loop's
    ``EarlySend``): a frame goes only if its channel has a credit now, never waiting
    inside the step."""

    __slots__ = ("actor",)

    def __init__(self, actor: WorkerActor) -> None:
        self.actor = actor

    def ready(self, peer: int) -> bool:
        return self.actor.comm.channel(peer).usable()

    def send(self, peer: int, message: WorkerMessage) -> None:
        actor = self.actor
        actor.comm.channel(peer).send_nowait(actor.encode(peer, message))
        actor.sent += 1
        actor.early_frames += 1


class WorkerActor:
    """One worker in a Ray actor (made async by ``ray.remote``: see ``RemoteWorker``)."""

    def __init__(self) -> None:
        self.writer: concurrent.futures.ThreadPoolExecutor | None = None
        self.log: EventLog | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        """The calls of a run still going here (``connect``, ``run``): a reset stops them."""
        self._begin(0, 1, True, 8)

    async def warm(self, plan: Plan) -> int:
        """Make a standby ready: Ray has unpickled ``plan`` (and so imported what its vertices
        and functions come from) to call this; returns the process id. A recovery then
        hands the actor a worker to host without starting a process or importing."""
        return os.getpid()

    def _track(self) -> asyncio.Task[Any] | None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        return task

    def _begin(self, index: int, peers: int, accumulate: bool, window: int) -> None:
        """Counters and settings of a new run (an actor may host one run after another:
        see :mod:`timely.backends.ray_pool`)."""
        self.index = index
        self.npeers = peers
        self.accumulate = accumulate
        self.window = window
        self.steps = 0
        self.sent = 0
        self.applied = 0
        self.waiting = False
        self.finished = False
        self.free_since: float | None = None
        """When the loop's current wait began (None: not waiting)."""
        self.last_free = -math.inf
        """When the loop last stopped waiting."""
        self.max_inbox = 0
        """The most batches ever waiting in the worker's inboxes right after taking in."""
        self.credit_waits = 0
        self.early_frames = 0
        """Frames of data sent before their step's end (:class:`_EarlySend`)."""
        self.leave_epoch: int | None = None
        """This worker leaves the run at this epoch (None: it stays)."""
        self.left_after: int | None = None
        """Once it left: how many progress batches it sent in all."""
        self._part_cpu = time.process_time_ns()
        """This process's CPU time when its last checkpoint part was written (ns)."""
        self._writer_cpu = 0
        """The writer thread's CPU time when it last wrote a part (ns; a new writer's
        thread starts at 0)."""
        self._part_stalled = 0
        """The loop's stalls (:meth:`~timely.worker.loop.Worker.checkpoint_stalled`) when
        its last checkpoint part was handed over (ns)."""
        self._written: list[tuple[int, dict[str, Any]]] = []
        """Parts written on the loop in this step, reported with its outputs."""
        self._on_thread = 0
        """Parts handed to the writer thread and not reported yet: the next part follows
        them there (parts are reported in order)."""

    async def start(
        self,
        index: int,
        peers: int,
        accumulate: bool,
        window: int,
        plan: Plan | bytes,
        secret: bytes,
        tcp: bool,
        store: CheckpointStore | None = None,
        every: int | None = None,
        restore: tuple[int, Share] | None = None,
        trace: tuple[str, int] | None = None,
        incremental: int = 0,
        nice: int | None = None,
    ) -> tuple[str, int, Address]:
        """Build worker ``index`` of ``peers`` (the vertices' factories run here) and listen
        for the peers (a Unix socket; with ``tcp``, also TCP on this node's IP, for peers on
        other nodes); with ``store``, checkpoint every ``every`` epochs; with ``restore``,
        start from it; with ``trace=(directory, attempt)``, keep an event log there; with
        ``nice``, step at that niceness (the driver's: see :func:`_match_niceness`). An
        actor that hosted a run before is reset first.

        ``plan``: the plan, or the driver's pickle of it (a small plan: see ``_INLINE_PLAN``).

        Returns the node id, the process id and the address the peers connect to.
        """
        if isinstance(plan, bytes):
            plan = _load_plan(plan)
        _match_niceness(nice)
        await self.reset()
        self._begin(index, peers, accumulate, window)
        self.worker = Worker(
            plan,
            self.index,
            self.npeers,
            self.accumulate,
            checkpoint_every=every,
            restore=restore,
            checkpoint_on_request=store is not None and every is None,
            log=None
            if trace is None
            else EventLog.for_plan(trace[0], plan, index, peers, trace[1]),
            checkpoint_incremental=incremental,
        )
        self.log = self.worker.log
        self.store = store
        self.writer = concurrent.futures.ThreadPoolExecutor(1) if store else None
        self._defer_encoding()
        self.worker.early = _EarlySend(self)
        self.loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        self.comm = Allocator(
            self.index, self.npeers, secret, self.window, self.wake.set, driver=True
        )
        self.pending_writes: list[concurrent.futures.Future[None]] = []
        node: str = ray.get_runtime_context().get_node_id()
        host = ray.util.get_node_ip_address() if tcp else None  # type: ignore[no-untyped-call]
        address = await self.comm.listen(node, host)
        return node, os.getpid(), address

    async def reset(self) -> None:
        """Forget the last run: stop its loop and a connect still waiting (a recovery
        resets the workers that survived a peer's death while their calls still run),
        close its connections and listeners, stop its writer and drop its worker (and so
        its state), leaving the actor ready to host another."""
        me = asyncio.current_task()
        running = [t for t in self._tasks if t is not me and not t.done()]
        self._tasks.clear()
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(BaseException):
                await task
        log, self.log = self.log, None
        if log is not None:
            log.close()
        comm: Allocator | None = getattr(self, "comm", None)
        if comm is not None:
            await comm.close()  # the attribute stays: a late heartbeat still reads it
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.shutdown(wait=True)
        store = self.__dict__.get("store")
        if store is not None:
            store.close()  # its links files (the next run's store opens its own)
        worker = self.__dict__.get("worker")
        if worker is not None:
            worker.close()  # the disk backend's tables (the driver removes their directory)
        for name in ("worker", "store", "pending_writes"):
            self.__dict__.pop(name, None)

    async def connect(self, table: list[Address]) -> dict[int, str]:
        """Connect to every peer (``table``: every worker's address, from ``start``) and
        wait for the driver's connection; returns how each peer is reached (``"unix"`` or
        ``"tcp"``)."""
        task = self._track()
        try:
            await self._connect(table)
        finally:
            self._tasks.discard(task)
        return self.comm.kinds()

    async def _connect(self, table: list[Address]) -> None:
        """Connect to every peer and take the driver's connection, each proving this
        run's secret; a peer lost meanwhile surfaces as the worker it was."""
        try:
            await self.comm.connect([Address(*a) for a in table])
        except PeerLost as e:
            raise self._lost(e) from None

    def _lost(self, error: PeerLost) -> WorkerDied:
        if error.peer == DRIVER:
            return WorkerDied(f"worker {self.index} lost the driver: the connection {error.reason}")
        return WorkerDied(
            f"worker {self.index} lost worker {error.peer}: {error} (a process died, or a "
            "node or the connection between them failed); with checkpoint= the run restores "
            "from its last checkpoint, otherwise run it again"
        )

    # -- inbound (event loop) ------------------------------------------------------------------
    def _apply(self, budget: list[int] | None = None) -> None:
        """Hand what arrived to the worker (between steps): the peers' frames, at most
        ``budget[peer]`` of each peer's if given, and then, without a budget, the driver's
        commands. Raises PeerLost."""
        comm = self.comm
        comm.check()
        frames = comm.recv_nowait(budget)
        if frames:
            worker = self.worker
            log = self.log
            for peer, payload in frames:
                if log is None:
                    worker.receive(serialization.decode_message(payload))
                else:
                    t0 = clock()
                    message = serialization.decode_message(payload)
                    worker.receive(message)
                    log.add(message_event("r", t0, clock(), peer, message, len(payload)))
                comm.applied(peer)
            self.applied += len(frames)
            inbox = sum(map(len, worker.inbox))
            if inbox > self.max_inbox:
                self.max_inbox = inbox
        if budget is not None:
            return  # commands wait: the driver's credits bound them
        for payload in comm.driver_commands():
            try:
                vertex, wire = serialization.decode(payload)
                for v, w in wire if vertex == BATCH else [(vertex, wire)]:
                    self.worker.command(v, command_from_wire(w))
                self.applied += 1
            finally:  # credit it even if applying failed: the driver may wait on it
                comm.applied(DRIVER)

    def _report(self, outputs: Outputs, parts: list[tuple[int, dict[str, Any]]], end: bool) -> None:
        """Send outputs emitted and checkpoint parts written (``(epoch, what the manifest
        records of it)``) to the driver, one frame; ``end``: nothing more will come (and
        the frame carries the furthest round of each loop, ``Worker.loop_rounds``, so that
        a loop that ended between two heartbeats is seen by ``loop_warning`` too)."""
        loops = self.worker.loop_rounds() if end else []
        self.comm.send_driver(serialization.encode([outputs, parts, end, loops]))

    async def _wait(self, timeout: float | None = None) -> None:
        """Wait for something to arrive: a frame, a credit, a command, a lost peer. The
        credit of every frame applied goes back first: a peer may wait on it (one that
        leaves the run waits for every frame it sent to be applied)."""
        self.comm.flush_credits()
        self.wake.clear()
        self.free_since = time.monotonic()
        log = self.log
        if log is not None:
            log.flush()  # a live reader sees everything before a wait
        t0 = clock()
        try:
            if timeout is None:
                await self.wake.wait()
            else:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout)
        finally:
            self.free_since = None
            self.last_free = time.monotonic()
            t1 = clock()
            self.worker.waited(t0, t1)  # a stall if a notification is held back
            if log is not None:
                log.add(("w", t0, t1))

    # -- the loop ------------------------------------------------------------------------------
    async def run(self, table: list[Address] | None = None) -> int:
        """Step while there is work, wait for messages otherwise, until the worker is idle
        (it sees every frontier empty: all inputs closed, all work done everywhere).
        Given ``table`` (every worker's address, from ``start``), connect to the peers
        and the driver first, as :meth:`connect` does: a launch then waits for no call
        between the start and the run.

        Returns the number of steps taken.
        """
        task = self._track()
        try:
            if table is not None:
                await self._connect(table)
            return await self._profiled()
        finally:
            self._tasks.discard(task)

    async def kinds(self) -> dict[int, str]:
        """How each peer is reached (``"unix"`` or ``"tcp"``), once every peer is
        connected (a run given its table connects as it starts)."""
        await self.comm.connected()
        return self.comm.kinds()

    async def _profiled(self) -> int:
        """The loop, under a cProfile with the run option ``profile_dir``."""
        directory = self.worker.plan.profile_dir
        if directory is None:
            return await self._run()
        # The event loop's thread: the step, the codec, the writes, the reader tasks.
        profile = WorkerProfile(directory, self.index)
        try:
            with profile.running():
                return await self._run()
        finally:
            profile.dump()

    async def _run(self) -> int:
        worker = self.worker
        comm = self.comm
        try:
            try:
                while True:
                    self._apply()
                    if worker.has_work():
                        out, emitted = self._step()
                        written = self._take_written()
                        if emitted or written:
                            self._report(emitted, written, False)
                        await self._send(out)
                        # Let the handlers run: a worker that always has work (a source) must
                        # still take messages in and hand its outputs over.
                        await asyncio.sleep(0)
                        continue
                    if worker.idle():
                        break
                    if self.leave_epoch is not None and worker.can_leave(self.leave_epoch):
                        last, self.left_after = worker.leave()
                        self._write_parts()  # its parts of the checkpoints before it left
                        if written := self._take_written():
                            self._report([], written, False)
                        await self._send(
                            [(p, serialization.encode_message_parts(m)) for p, m in last]
                        )
                        break
                    if comm.waiting():
                        continue
                    self.waiting = True
                    awake = worker.next_awake()  # a paced source's next batch
                    timeout = _WAKE if awake is None else min(_WAKE, awake - time.time())
                    await self._wait(max(0.0, timeout))
                    self.waiting = False
            finally:
                self.waiting = False
                self._finish()
            while not comm.all_credited():  # every frame sent reaches its peer's worker
                comm.check()
                await self._wait(_WAKE)
        except PeerLost as e:
            raise self._lost(e) from None
        # A part the last scan completed (one in ``can_leave``, say) goes out with the end.
        self._write_parts()
        for fut in self.pending_writes:  # a failed write fails the run
            await asyncio.wrap_future(fut)
        # Every part's report went before (its callback ran before its future completed).
        if self.log is not None:
            self.log.flush()
        self._report([], self._take_written(), True)
        comm.close_listeners()
        return self.steps

    def _step(self) -> tuple[list[tuple[int, list[Any]]], Outputs]:
        """One step and the encoding of its messages.

        It runs on the event loop itself: handing each step to a thread cost about a
        quarter of the epoch latency, and the heartbeat has its own thread anyway.
        """
        worker = self.worker
        messages = worker.step()
        self.steps += 1
        emitted = worker.take_emitted()
        self._write_parts()
        return [(p, self.encode(p, m)) for p, m in messages], emitted

    def encode(self, peer: int, message: WorkerMessage) -> list[Any]:
        """``message`` to ``peer`` as a frame's payload, logged as sent when there is an
        event log (a step's messages and its early sends alike)."""
        log = self.log
        if log is None:
            return serialization.encode_message_parts(message)
        t0 = clock()
        payload = serialization.encode_message_parts(message)
        size = sum(memoryview(part).nbytes for part in payload)
        log.add(message_event("s", t0, clock(), peer, message, size))
        return payload

    def _defer_encoding(self) -> None:
        """A columnar table's snapshot (a copy already) is left as data, encoded when its
        part is written; a row table's is encoded at once, on the loop. msgpack holds the
        GIL: on the writer thread the encoding held the loop up as long, and the two
        threads' hand-overs cost more (issue 30: the rows word count on Ray x2, every
        epoch, +13 to +22% with parts written on the loop against +24 to +31% on the
        thread, in three sets of interleaved pairs)."""
        snapshots = self.worker.snapshots
        if snapshots is not None and self.writer is not None:
            snapshots.defer_columns = True

    def _write_parts(self) -> None:
        """Have the checkpoint parts completed written: a small one here on the loop, as
        inline (a few short system calls, which a thread would make the loop wait on the
        GIL for), a large one (:func:`~timely.checkpoint.writer.is_large`: its encoding,
        write and checksum release the GIL for long) and any after one still under way
        on the writer thread."""
        pending = self.pending_writes
        while pending and pending[0].done():
            pending.pop(0).result()  # a write that failed on the thread fails the run now
        worker = self.worker
        parts = worker.take_parts()
        if not parts:
            return
        for epoch, part in parts:
            work, stalled = worker.checkpoint_work(), worker.checkpoint_stalled()
            t0 = time.thread_time_ns()
            if self._on_thread or is_large(part):
                self._write_part(epoch, part, work, stalled)
                worker.checkpoint_section(t0, time.thread_time_ns())  # with the next part
            else:
                self._write_now(epoch, part, work, stalled, t0)

    def _write_now(
        self, epoch: int, part: dict[str, Any], work: int, stalled: int, t0: int
    ) -> None:
        """Encode and write a checkpoint part here, on the loop, to be reported in the
        step's frame to the driver after its outputs (:meth:`_take_written`: a frame of
        its own costs both processes a send, a wake-up and a read, issue 30), with what
        checkpointing cost (``work`` and this thread's CPU since ``t0``, the choice of
        where to write it included) and when it was durable."""
        store = self.store
        assert store is not None
        workers = part["workers"] or self.npeers
        info, t1 = write_encoded(store, epoch, self.index, part, self.log, workers)
        info["work"] = (work + time.thread_time_ns() - t0) / 1e9
        info["at"] = t1 / 1e9
        self._process_cpu(info, stalled)
        self._written.append((epoch, info))

    def _take_written(self) -> list[tuple[int, dict[str, Any]]]:
        """The parts written on the loop since the last call, for the next report."""
        written, self._written = self._written, []
        return written

    def _process_cpu(self, info: dict[str, Any], stalled: int) -> None:
        """Add to a part's report the CPU this process used since its last part (the
        run's, which the driver measures the checkpoints' share of; parts are written in
        order)."""
        now = time.process_time_ns()
        info["cpu"] = (now - self._part_cpu + stalled - self._part_stalled) / 1e9
        self._part_cpu, self._part_stalled = now, stalled

    def _write_part(self, epoch: int, part: dict[str, Any], work: int, stalled: int) -> None:
        """Encode and write a checkpoint part on the writer thread (off the step loop);
        report it to the driver once it is durable (after the outputs of its epoch: they
        went first), with what checkpointing cost (``work``: ns on the loop, see
        :mod:`timely.checkpoint.cost`; and the writer's CPU time, the GIL it took from the
        loop) and when it was durable (this node's clock); ``stalled``: the loop's stalls
        so far (ns), which count as CPU the run spent as well as in ``work``."""
        store, writer = self.store, self.writer
        assert store is not None and writer is not None

        log = self.log

        def write() -> None:
            workers = part["workers"] or self.npeers
            info, t1 = write_encoded(store, epoch, self.index, part, log, workers)
            # Off the step loop, a write costs the worker the CPU it takes, not the time it
            # waits on the store (or on the loop for the GIL): all of the writer thread's
            # since its last part (taking the job in too), its only thread.
            cpu = time.thread_time_ns()
            info["work"] = (work + cpu - self._writer_cpu) / 1e9
            self._writer_cpu = cpu
            info["at"] = t1 / 1e9
            self._process_cpu(info, stalled)
            self.loop.call_soon_threadsafe(self._part_done, epoch, info)

        self._on_thread += 1
        self.pending_writes.append(writer.submit(write))

    def _part_done(self, epoch: int, info: dict[str, Any]) -> None:
        """A part from the writer thread is written: report it (in a frame of its own)."""
        t0 = time.thread_time_ns()
        if self._on_thread:  # (0: a write of the run before a reset, reported late)
            self._on_thread -= 1
        self._report([], [(epoch, info)], False)
        worker = self.__dict__.get("worker")  # gone if a reset came first
        if worker is not None:
            worker.checkpoint_section(t0, time.thread_time_ns())  # with the next part

    async def _send(self, out: list[tuple[int, list[Any]]]) -> None:
        """Send a step's messages, one frame per peer, each once its channel has a credit."""
        comm = self.comm
        budget: list[int] | None = None
        for peer, payload in out:
            channel = comm.channel(peer)
            if not channel.ready():
                if budget is None:
                    budget = [self.window] * comm.peers
                    self.credit_waits += 1
                await self._credit_wait(channel, budget)
            channel.send_nowait(payload)
            self.sent += 1

    async def _credit_wait(self, channel: Channel, budget: list[int]) -> None:
        """Wait for a credit from ``channel``'s peer, taking in what arrives meanwhile.

        At most ``window`` frames per peer while one step's messages go out (``budget``):
        enough to give back the credit any peer waiting on this worker needs, so workers
        sending to each other never deadlock; no more, so a worker held back by a slow
        consumer holds its own producers back in turn and its inboxes stay bounded (end
        to end, not per hop). Credits go back before waiting: a peer may wait on them.
        """
        comm = self.comm
        while True:
            self._apply(budget)
            if channel.ready():
                return
            comm.flush_credits()
            if not comm.waiting(budget):
                await self._wait()

    def _finish(self) -> None:
        """Stop taking messages in and release everyone waiting on this worker."""
        self.finished = True
        self.comm.discard()

    # -- joining and leaving a running dataflow ------------------------------------------------
    async def start_joining(
        self,
        index: int,
        accumulate: bool,
        window: int,
        plan: Plan,
        secret: bytes,
        tcp: bool,
        trace: tuple[str, int] | None = None,
        store: CheckpointStore | None = None,
        every: int | None = None,
        incremental: int = 0,
        nice: int | None = None,
    ) -> tuple[str, int, Address]:
        """Listen as worker ``index``, joining a running dataflow (the next index): its
        worker is built by :meth:`join` from what a donor made; it steps at ``nice`` as
        :meth:`start`'s workers do. Returns as :meth:`start`."""
        _match_niceness(nice)
        await self.reset()
        self._begin(index, index + 1, accumulate, window)
        self.plan, self.trace = plan, trace
        self.every, self.incremental = every, incremental
        self.store = store
        self.writer = concurrent.futures.ThreadPoolExecutor(1) if store else None
        self.loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        self.comm = Allocator(index, index + 1, secret, window, self.wake.set, driver=True)
        self.pending_writes = []
        node: str = ray.get_runtime_context().get_node_id()
        host = ray.util.get_node_ip_address() if tcp else None  # type: ignore[no-untyped-call]
        return node, os.getpid(), await self.comm.listen(node, host)

    async def expect_peer(self, peer: int) -> None:
        """Admit worker ``peer``'s connection: it joins the run."""
        self.comm.expect_peer(peer)
        self.npeers = self.comm.peers

    async def add_peer(self, peer: int, epoch: int, first_seq: int = 0) -> int:
        """Worker ``peer`` (connected) joins at ``epoch``: from now on this worker's
        progress goes to it too. Returns the seq of the first batch it gets from here."""
        task = self._track()
        try:
            await self.comm.wait_peer(peer)
        except PeerLost as e:
            raise self._lost(e) from None
        finally:
            self._tasks.discard(task)
        self.worker.add_peer(peer, epoch, first_seq)
        seq: int = self.worker.progress.next_seq()
        return seq

    async def mint_join(
        self,
        peer: int,
        epoch: int,
        roots: tuple[int, ...],
        seqs: dict[int, int],
        first_seq: int = 0,
    ) -> Join:
        """As the donor of ``peer``: once every batch each worker sent before it counted
        the joiner (``seqs``: the first one it sends the joiner) is applied here, so that
        the joiner's copy of this view misses none, mint the joiner's capabilities in a
        step of this worker's own (:meth:`Worker.mint_join`) and return its start."""
        worker = self.worker
        task = self._track()
        try:
            while any(worker.progress.applied_from(w) < seq for w, seq in seqs.items()):
                self._apply()  # between steps: the loop may be waiting
                if any(worker.progress.applied_from(w) < seq for w, seq in seqs.items()):
                    await self._wait(0.05)
            out, join = worker.mint_join(peer, epoch, roots, first_seq)
            await self._send([(p, serialization.encode_message_parts(m)) for p, m in out])
        except PeerLost as e:
            raise self._lost(e) from None
        finally:
            self._tasks.discard(task)
        self.wake.set()  # the loop: the mint changed the frontier
        return join

    async def join(self, join: Join) -> None:
        """Build this joiner's worker from its donor's ``join``; :meth:`run` follows."""
        plan, trace = self.plan, self.trace
        self.worker = Worker(
            plan,
            self.index,
            self.npeers,
            self.accumulate,
            checkpoint_every=self.every,
            checkpoint_on_request=self.store is not None and self.every is None,
            log=None
            if trace is None
            else EventLog.for_plan(trace[0], plan, self.index, self.npeers, trace[1]),
            checkpoint_incremental=self.incremental,
            join=join,
        )
        self.log = self.worker.log
        self._defer_encoding()
        self.worker.early = _EarlySend(self)

    async def leave_at(self, peer: int, epoch: int) -> None:
        """Worker ``peer`` leaves the run at ``epoch`` (this one, if it is ``self.index``:
        its loop ends once it holds nothing, :meth:`Worker.can_leave`)."""
        self.worker.leave_at(peer, epoch)
        if peer == self.index:
            self.leave_epoch = epoch
            self.wake.set()

    async def peer_left(self, peer: int, sent: int) -> None:
        """Worker ``peer`` left after sending ``sent`` progress batches; every frame it
        sent is in (its loop ended only once each was credited)."""
        self.worker.peer_left(peer, sent)
        self.comm.depart(peer)
        self.wake.set()

    async def release_at(self, vertex: int, partitions: list[int], to: int, epoch: int) -> None:
        """Hand ``partitions`` of source ``vertex`` to worker ``to`` at ``epoch``
        (:meth:`Worker.release_at`); :meth:`take_handovers` gives them once ready."""
        self.worker.release_at(vertex, partitions, to, epoch)
        self.wake.set()

    async def take_handovers(self) -> tuple[list[tuple[int, Handover]], bool]:
        """The source partitions ready to go, released in a step of this worker's own
        whose batch is sent before they are returned; and whether more are to go."""
        task = self._track()
        try:
            out, handovers = self.worker.take_handovers()
            if out:
                await self._send([(p, serialization.encode_message_parts(m)) for p, m in out])
        except PeerLost as e:
            raise self._lost(e) from None
        finally:
            self._tasks.discard(task)
        if handovers:
            self.wake.set()  # the loop: the release changed the frontier
        return handovers, self.worker.handing_over()

    async def adopt(self, handover: Handover) -> None:
        """Read on the source partitions another worker released."""
        self.worker.adopt_partitions(handover)
        self.wake.set()

    async def left(self) -> int | None:
        """As a worker that left: how many progress batches it sent in all (None: its
        loop ended with the run's end instead)."""
        return self.left_after

    async def migratable(self) -> list[int]:
        """The keyed steps whose keys may move live (their state moves with their bins,
        or they keep none across times)."""
        return sorted(self.worker.migration.follows)

    # -- queries -------------------------------------------------------------------------------
    async def request_checkpoint(
        self, epoch: int, every: int | None = None, fraction: float | None = None
    ) -> tuple[bool, int]:
        """The driver asks for a checkpoint after ``epoch`` (and every ``every`` epochs
        after it), between steps; see :meth:`timely.worker.loop.Worker.request_checkpoint`."""
        agreed = self.worker.request_checkpoint(epoch, every, fraction)
        return agreed, self.worker.checkpoint_floor()

    async def keys_held(self) -> int:
        """How many keys this worker's migratable steps hold (between steps)."""
        return self.worker.migration.keys_held()

    async def take_load(self) -> BinLoad:
        """Records routed per bin and useful time since the last call (``Session.rebalance``)."""
        return self.worker.migration.take_load()

    async def frontier(self, vertex: int) -> tuple[tuple[int, ...], ...]:
        """This worker's view of the frontier at ``vertex``'s first input (between steps)."""
        return self.worker.frontier(vertex)

    @ray.method(concurrency_group="heartbeat")
    async def ping(self) -> Ping:
        """A heartbeat, answered on its own thread even while a step runs: a progress
        counter (steps and messages taken in), whether the loop waits with nothing to do,
        and for the driver's check of stuck connections the frames sent to and read from
        each peer and how long ago the loop last waited (0.0: it waits now); and the
        furthest round each loop's feedback reached (``Worker.loop_rounds``, for the
        driver's ``loop_warning``); the latest epoch its sources read and whether every
        source is read to its end (for a reconfigurable run's control input)."""
        free = self.free_since
        since = 0.0 if free is not None else time.monotonic() - self.last_free
        sent, read = self.comm.counts()
        worker = getattr(self, "worker", None)
        loops = [] if worker is None else worker.loop_rounds()
        busy = self.waiting and not self.finished
        sources = (-1, False) if worker is None else worker.source_state
        return self.steps + self.applied, busy, sent, read, since, loops, *sources

    async def stats(self) -> dict[str, Any]:
        """Counters for benchmarks, tests and debugging."""
        return {
            "cpu": time.process_time(),  # this actor's process, since it started
            "steps": self.steps,
            "messages_sent": self.sent,
            "taken_in": self.applied,
            "max_inbox": self.max_inbox,
            "max_queued": self.comm.max_queued,
            "max_commands": self.comm.max_commands,
            "credit_waits": self.credit_waits,
            "early_frames": self.early_frames,
            "refused": self.comm.refused,
            "links": self.comm.kinds(),
            "nice": _niceness(),  # the loop's thread: this one
        }

    async def inject_fault(self, fault: str, peer: int) -> None:
        """For tests: ``"reset"`` shuts the connection to ``peer`` down both ways (as a
        network fault would); ``"stall"`` stops reading it (a stuck reader)."""
        if fault == "reset":
            self.comm.abort(peer)
        elif fault == "stall":
            self.comm.pause(peer)
        else:
            raise ValueError(f"unknown fault {fault!r}: 'reset' or 'stall'")


RemoteWorker: Any = ray.remote(  # type: ignore[call-overload]
    concurrency_groups={"heartbeat": 1}
)(WorkerActor)


class RaySession(Session):
    """Workers in Ray actors: local Ray by default, ``address=`` for a cluster.

    ``num_cpus_per_worker`` defaults to an equal share of the cluster's CPUs, at most
    one each, so more workers than cores still fit. ``heartbeat_timeout`` bounds how
    long a worker may stay silent, leave a peer's frames unread while it waits for
    work, or (its inputs all closed) make no progress, before the run fails.
    ``max_inflight`` is the credit window: frames a worker may have sent a peer and
    the peer not yet applied, and driver commands in flight per worker.
    ``idle_timeout``: after a clean end the actors are kept, reset, this many seconds
    for the next run of this driver (see :mod:`timely.backends.ray_pool`); 0 kills them.
    ``standbys`` (default: 1 with checkpoints, else 0): started actors, warmed with the
    plan and reserving no CPU, that wait to take the place of workers that die. A
    recovery resets the workers that outlived the failure and hands them the restored
    workers, and a standby (else a new actor) replaces each one that died, so that a
    single death starts no process while the run waits; the standbys are made up again
    in the background.
    ``verbose`` (default: ``TIMELY_VERBOSE``, else False) matters when this session
    starts or joins Ray: False keeps Ray's banner, its token notice and the workers'
    forwarded output off the driver's terminal (see ``_connect``); True leaves Ray's own
    defaults. Errors reach the driver either way.
    """

    def __init__(
        self,
        spec: RunSpec,
        workers: int,
        address: str | None = None,
        accumulate: bool = True,
        num_cpus_per_worker: float | None = None,
        max_inflight: int = 8,
        heartbeat_timeout: float = 10.0,
        idle_timeout: float = 30.0,
        standbys: int | None = None,
        checkpoint: CheckpointConfig | None = None,
        trace: str | None = None,
        verbose: bool | None = None,
    ) -> None:
        verbose = resolve_verbose(verbose)
        if standbys is not None and (
            isinstance(standbys, bool) or not isinstance(standbys, int) or standbys < 0
        ):
            raise ConfigError(
                f"standbys must be an integer >= 0, got {standbys!r}; it is how many "
                "started actors wait to replace a worker that dies (0: none)"
            )
        if not isinstance(max_inflight, int) or max_inflight < 1:
            raise ConfigError(f"max_inflight must be an integer >= 1, got {max_inflight!r}")
        if not heartbeat_timeout > 0:
            raise ConfigError(f"heartbeat_timeout must be > 0 seconds, got {heartbeat_timeout!r}")
        if not (isinstance(idle_timeout, (int, float)) and idle_timeout >= 0):
            raise ConfigError(
                f"idle_timeout must be >= 0 seconds, got {idle_timeout!r}; 0 stops the "
                "workers when the run ends instead of keeping them for the next"
            )
        if num_cpus_per_worker is not None and not num_cpus_per_worker > 0:
            raise ConfigError(
                f"num_cpus_per_worker must be > 0, got {num_cpus_per_worker!r}; "
                "leave it out to share the cluster's CPUs among the workers"
            )
        super().__init__(spec, workers, checkpoint, trace)
        self.max_inflight = max_inflight
        self.heartbeat_timeout = heartbeat_timeout
        self.idle_timeout = float(idle_timeout)
        self.actors: list[Any] = []
        self._departed: set[int] = set()
        """The actors (``id``) of workers that left a running dataflow: back in the pool
        already (or killed), so never reset, kept, reused or killed again by this session
        (a live scale-down then its end gave one actor to the pool twice)."""
        self.reused = 0
        """How many of the actors came warm from an earlier run (the last launch)."""
        self._clean = False
        """Every loop ended and every last report arrived: the actors may be kept."""
        self.nodes: list[str] = []
        """Each worker's Ray node id."""
        self.pids: list[int] = []
        """Each worker's process id."""
        self.addresses: list[Address] = []
        """Where each worker listens for its peers."""
        self._kinds: list[dict[int, str] | None] = []
        """How each worker reaches each peer (None: not asked yet; see ``links``)."""
        self.standbys = (1 if checkpoint is not None else 0) if standbys is None else standbys
        """How many warm actors wait to replace workers that die (with checkpoints: 1)."""
        self._standbys: list[Any] = []
        self._cpus_of: dict[int, float] = {}
        """The CPUs each actor (by ``id``) reserves: the workers' share, or 0 for a
        standby that took a dead worker's place."""
        self.cold_starts = 0
        """How many actors the last launch had to start (none kept, no standby left)."""
        self.lost = 0
        """How many actors the last relaunch found dead (or silent) and replaced."""
        self._stopped = False
        self._abandoned: list[Any] = []
        """Loop results of actors a relaunch killed, to be read (see ``_reap``)."""
        self._last_check = 0.0
        self._forget_workers()

        self.started_ray = _connect(address, verbose)
        self._cpus_option = num_cpus_per_worker
        cluster = _Cluster.now()  # one GCS query for the start: the CPUs, the fit, TCP
        self.cpus = num_cpus_per_worker or _share_cpus(workers, cluster)
        self._cluster = address is not None or bool(os.environ.get("RAY_ADDRESS"))
        if not self._cluster:
            _check_fits(self.cpus, workers, cluster)
        self.accumulate = accumulate
        try:
            pickled = cloudpickle.dumps(self.plan)  # type: ignore[no-untyped-call]
        except Exception as e:
            raise ConfigError(
                f"dataflow {self.plan.name!r} cannot be shipped to Ray workers ({e}); every "
                "vertex, key function and source in the graph must be picklable by cloudpickle"
            ) from e
        self._plan_bytes = pickled if len(pickled) <= _INLINE_PLAN else None
        """The pickled plan each ``start`` carries (None: too large, ``plan_ref`` instead)."""
        self._plan_ref: Any = None
        try:
            self._launch(self._initial_restore(), cluster=cluster)
        except BaseException:
            self._stop()
            raise

    @property
    def plan_ref(self) -> Any:
        """The plan in Ray's object store, put on first use (a large plan's start, a
        standby's warming, a join)."""
        if self._plan_ref is None:
            self._plan_ref = ray.put(self.plan)
        return self._plan_ref

    def _forget_workers(self) -> None:
        """The driver's bookkeeping of a set of actors, empty: their loops, heartbeats,
        output polls and numbered commands. Set at the start and before a relaunch."""
        self._runs: dict[int, Any] = {}
        self._run_worker: dict[Any, int] = {}
        self._pings: dict[int, tuple[Any, float]] = {}
        self._last_ping: dict[int, float] = {}
        self._progress: dict[int, Ping] = {}
        self._answered_at: dict[int, float] = {}
        self._behind: dict[tuple[int, int], tuple[int, float]] = {}
        """``(sender, receiver) -> (frames sent, when seen)``: frames the receiver's
        reader had not read at the sender's last heartbeat."""
        self._last_change = time.monotonic()
        self._links: DriverLinks | None = None
        """The driver's connections to this set of actors (commands out, reports in)."""
        self._held: dict[int, list[Any]] = {}
        """Per worker, commands held for one frame
        (:meth:`~timely.session.base.Session._batched`)."""
        self._held_bytes: dict[int, int] = {}
        """Per worker, the held commands' :func:`_weight`."""
        self._ended: set[int] = set()
        """Workers whose last report has arrived: nothing more comes from them."""
        self._delivering = False
        self._rr = 0

    def _launch(
        self,
        restore: Restore | None,
        survivors: Sequence[Any] = (),
        cluster: _Cluster | None = None,
    ) -> None:
        """Start one actor per worker (from ``restore`` if given), connect them to each
        other (a fresh secret and fresh sockets every time), and start their loops.
        ``cluster``: the cluster's nodes as the session's start read them (else they are
        read here: a relaunch may find a node gone).

        The actors are, in this order: ``survivors`` (a recovery's workers that outlived
        the failure, reset), kept actors of this shape from an earlier run, standbys (a
        recovery's replacements: started and warmed beforehand, so that no process
        starts while the run waits), and new ones."""
        workers = self.workers
        shape = self._shape()
        actors, cpus = list(survivors), [self._cpus_of.get(id(a), self.cpus) for a in survivors]
        warm = POOL.take(workers - len(actors), shape)
        actors += warm
        cpus += [self.cpus] * len(warm)
        standby = self._standbys[: workers - len(actors)]
        self._standbys = self._standbys[len(standby) :]
        actors += standby
        cpus += [0.0] * len(standby)
        cold = workers - len(actors)
        actors += [self._new_actor(self.cpus) for _ in range(cold)]
        cpus += [self.cpus] * cold
        self.reused = len(actors) - cold
        self.cold_starts = cold
        self.actors = actors
        self.addresses = []  # (this launch's, once started: never the last launch's)
        self._departed = set()
        self._cpus_of = {id(a): c for a, c in zip(actors, cpus)}
        every = self._every
        secret = self._secret = secrets.token_bytes(32)
        tcp = (cluster or _Cluster.now()).nodes > 1
        nice = _driver_niceness()
        self.membership = Membership(workers, 0 if restore is None else restore[0] + 1)
        self._handing: set[int] = set()
        """Workers with source partitions to hand over (:meth:`_hand_over`)."""
        starts = [
            a.start.remote(
                i,
                workers,
                self.accumulate,
                self.max_inflight,
                self._plan_bytes or self.plan_ref,
                secret,
                tcp,
                None if self.coordinator is None else self.coordinator.store,
                every,
                None if restore is None else (restore[0], restore[1][i]),
                None if self.trace is None else (self.trace, self.attempt),
                self._incremental,
                nice,
            )
            for i, a in enumerate(self.actors)
        ]
        try:
            placed = self._started(starts, self.cpus)
        except WorkerDied:
            if not warm or survivors:
                raise  # a recovery's actor died while it started: another recovery
            # A kept actor died while idle (its node went, say): start afresh, cold.
            self._kill_actors()
            POOL.release()
            self._launch(restore)  # the cluster read again: the idle actor's node may be gone
            return
        self.nodes = [node for node, _, _ in placed]
        self.pids = [pid for _, pid, _ in placed]
        self.addresses = [address for _, _, address in placed]
        self._kinds = [None] * workers
        # Each run connects first (to its peers and the driver), then steps: no call to
        # wait for between the start and the run. A failed connection fails the run,
        # which the driver watches from here on (and reads: see _check).
        self._runs = {i: a.run.remote(self.addresses) for i, a in enumerate(self.actors)}
        self._run_worker = {ref: i for i, ref in self._runs.items()}
        self._links = DriverLinks(workers, secret, self.max_inflight)
        try:  # the workers' connect waits for the driver too
            self._links.connect(self.addresses, ray.get_runtime_context().get_node_id())
        except PeerLost as e:
            self._check()  # a worker's own failure says more than the driver's dial
            raise WorkerDied(f"worker {e.peer} {e.reason}") from None
        self._replenish()

    @property
    def links(self) -> list[dict[int, str]]:
        """How each worker reaches each peer: ``"unix"`` or ``"tcp"`` (asked of the workers
        on first use: each answers once it is connected)."""
        missing = [w for w, k in enumerate(self._kinds) if k is None]
        if missing:
            got = self._wait_for([self.actors[w].kinds.remote() for w in missing], missing)
            for w, kinds in zip(missing, got, strict=True):
                self._kinds[w] = kinds
        return [k or {} for k in self._kinds]

    @property
    def standby_actors(self) -> list[Any]:
        """The warm actors waiting to replace workers that die (see ``standbys``)."""
        return list(self._standbys)

    def _new_actor(self, cpus: float) -> Any:
        return RemoteWorker.options(
            num_cpus=cpus,
            max_concurrency=self._shape()[1],
            scheduling_strategy="SPREAD",  # over the cluster's nodes, not packed
        ).remote()

    def _replenish(self) -> None:
        """Bring the standbys up to ``standbys``: kept ones of an earlier run first, else
        new ones, each warmed with the plan. Nothing waits for them: a recovery before a
        standby is ready waits for it as it would for a new actor.

        A standby reserves no CPU (``num_cpus=0``): the workers hold the cluster's CPUs,
        and a standby computes nothing until it takes the place of a worker that died,
        whose CPU Ray has then freed. A standby that became a worker keeps that shape
        and is kept as a standby again after the run."""
        missing = self.standbys - len(self._standbys)
        if missing <= 0:
            return
        shape = self._standby_shape()
        fresh = POOL.take(missing, shape)
        fresh += [self._new_actor(0.0) for _ in range(missing - len(fresh))]
        # Read by _reap (a standby killed while warming fails its call: not an error).
        self._abandoned.extend(actor.warm.remote(self.plan_ref) for actor in fresh)
        self._standbys += fresh

    def _shape(self) -> tuple[float, int]:
        """What an actor is made with (``num_cpus``, ``max_concurrency``): the pool's key."""
        return self.cpus, max(256, 2 * self.max_inflight + 64)

    def _standby_shape(self) -> tuple[float, int]:
        return 0.0, self._shape()[1]

    def _keep_actors(self) -> None:
        """Reset the actors of a run that ended cleanly and hand them to the pool, each
        under its own shape (a standby that became a worker has none of the CPUs), with
        the standbys. The run does not wait for the resets (unless its state is on disk):
        the pool's ``take`` reads each before it hands the actor out, and kills one that
        failed or did not answer within ``heartbeat_timeout`` instead."""
        if self._links is not None:
            self._links.close()
        hosting = self._hosting()
        actors = hosting + self._standbys
        shapes = [(self._cpus_of.get(id(a), self.cpus), self._shape()[1]) for a in hosting]
        shapes += [self._standby_shape()] * len(self._standbys)
        self._standbys = []
        calls = [a.reset.remote() for a in actors]
        if self.plan.store is not None:
            # The session removes the run's state directory once this returns: every
            # worker's disk tables must be closed first (else a closing store writes
            # into the directory being removed, which stays). These resets are waited
            # for, and an actor whose reset fails or does not answer is killed.
            ok = read_calls(calls, self.heartbeat_timeout)
            for actor, fine in zip(actors, ok, strict=True):
                if not fine:
                    kill(actor)
            kept_ones = [(a, s, None) for a, s, f in zip(actors, shapes, ok, strict=True) if f]
        else:
            kept_ones = list(zip(actors, shapes, calls, strict=True))
        kept: dict[tuple[float, int], tuple[list[Any], list[Any]]] = {}
        for actor, shape, call in kept_ones:
            group, resets = kept.setdefault(shape, ([], []))
            group.append(actor)
            resets.append(call)
        for shape, (group, resets) in kept.items():
            POOL.give_back(group, shape, self.idle_timeout, resets, self.heartbeat_timeout)

    def _kill_actors(self, standbys: bool = False) -> None:
        if self._links is not None:
            self._links.close()
        for actor in self._hosting():
            kill(actor)
        if standbys:
            for actor in self._standbys:
                kill(actor)
            self._standbys = []
        self._remove_sockets(self.actors)

    def _remove_sockets(self, actors: list[Any]) -> None:
        """Remove the socket directories of these actors of the launch (killed, or found
        dead) on this machine: a killed process leaves its own behind, where a normal end
        removes it (the test suite left ~30 a run while a relaunch dropped the dead
        actors without theirs)."""
        where = {id(a): address for a, address in zip(self.actors, self.addresses)}
        for actor in actors:
            address = where.get(id(actor))
            if address is None:
                continue
            folder = os.path.dirname(address.path)
            if os.path.basename(folder).startswith(sockdir.PREFIX):  # socket_dir's
                shutil.rmtree(folder, ignore_errors=True)

    def _set_workers(self, workers: int) -> None:
        cluster = _Cluster.now()
        cpus = self._cpus_option or _share_cpus(workers, cluster)
        if not self._cluster:
            _check_fits(cpus, workers, cluster)
        super()._set_workers(workers)
        self.cpus = cpus

    def _relaunch(self, restore: Restore | None) -> None:
        """Start the workers again: the actors that are still alive are reset and host
        the new workers (no process to start), and a standby or a new actor takes the
        place of each one that died or did not answer."""
        if self._links is not None:
            self._links.close()
        self._abandoned.extend(self._runs.values())
        survivors = self._survivors()
        self._forget_workers()
        self._launch(restore, survivors)

    def _survivors(self) -> list[Any]:
        """Reset every actor of the failed launch; the ones that answered, for the next.

        A dead actor's reset fails as soon as Ray knows it died (a kill, a process exit):
        no timeout is waited for. One that does not answer within ``heartbeat_timeout``
        (a stopped process) is killed. Survivors beyond the worker count (a rescale down)
        go to the pool; so do all of them when the shape changed (a rescale)."""
        old = self._hosting()  # replaced by the launch (watchers see one list, then the next)
        answered = read_calls([a.reset.remote() for a in old], self.heartbeat_timeout)
        alive, dead = [], []
        for actor, fine in zip(old, answered, strict=True):
            if fine:
                alive.append(actor)
            else:
                kill(actor)
                dead.append(actor)
        self._remove_sockets(dead)
        self.lost = len(old) - len(alive)
        fits = [a for a in alive if self._cpus_of.get(id(a)) in (self.cpus, 0.0)]
        spare = [a for a in alive if a not in fits] + fits[self.workers :]
        for actor in spare:
            shape = (self._cpus_of.get(id(actor), self.cpus), self._shape()[1])
            POOL.give_back([actor], shape, self.idle_timeout)
        return fits[: self.workers]

    def _reap(self) -> None:
        """Read the failures of the loops of actors killed by a relaunch: Ray logs an
        "unhandled error" for every failed result nobody reads."""
        if not self._abandoned:
            return
        ready, self._abandoned = ray.wait(
            self._abandoned, num_returns=len(self._abandoned), timeout=0
        )
        for ref in ready:
            with contextlib.suppress(Exception):
                ray.get(ref)

    def _started(self, refs: list[Any], cpus: float) -> list[tuple[str, int, Address]]:
        """Wait for every worker to be placed and built; raise the first failure."""
        deadline = time.monotonic() + _START_TIMEOUT
        pending = list(refs)
        try:
            self._wait_started(refs, pending, cpus, deadline)
        except BaseException:
            # Read later (``_reap``), or Ray prints each one's failure as unhandled.
            self._abandoned.extend(r for r in refs if r not in self._abandoned)
            raise
        return [self._get(ref, i) for i, ref in enumerate(refs)]

    def _wait_started(
        self, refs: list[Any], pending: list[Any], cpus: float, deadline: float
    ) -> None:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=_TICK)
            for ref in ready:
                try:
                    self._get(ref, refs.index(ref))
                except RayTaskError as e:
                    if not isinstance(e.cause, (RaySystemError, _PlanNotLoaded)):
                        raise
                    inner = e.cause.args[0] if e.cause.args else e.cause
                    raise ConfigError(
                        f"the Ray workers could not load dataflow {self.plan.name!r}: {inner!r}; "
                        "the modules its vertices and functions come from must be importable "
                        "there (start from the project directory, install the package, or give "
                        "ray.init a runtime_env), or define them in the driver script"
                    ) from None
            if pending and time.monotonic() > deadline:
                waiting = sorted(refs.index(r) for r in pending)
                free = ray.available_resources().get("CPU", 0)  # type: ignore[no-untyped-call]
                raise ConfigError(
                    f"Ray did not place workers {waiting} within {_START_TIMEOUT:g}s; each asks "
                    f"for {cpus:g} CPUs and the cluster has {free:g} free: use fewer workers "
                    "or a smaller num_cpus_per_worker"
                )

    # -- driver side ------------------------------------------------------------------------
    def _send_command(self, vertex: int, cmd: InputCommand) -> None:
        for w, part in self.membership.route(vertex, cmd, self._rr):
            self._command(w, vertex, part)
        self._rr = (self._rr + 1) % self.workers
        # A failed worker drops commands: say so now, not at join. Not for a command held
        # in a batch: it reaches no worker before the batch's frames go, and sending them
        # watches the workers (a run's first commands would otherwise pay for a check,
        # heartbeats included, while the workers wait for them).
        if not self._batching and time.monotonic() - self._last_check >= _CHECK_EVERY:
            self._check()
        self._collect(0)

    def _command(self, w: int, vertex: int, cmd: InputCommand) -> None:
        """One frame on the driver's connection to worker ``w`` (FIFO), once it has a
        credit; meanwhile the workers are watched (a dead one raises WorkerDied). Within
        :meth:`_batched`, held for one frame per worker at the end."""
        if self._batching:
            held = self._held.setdefault(w, [])
            held.append([vertex, command_to_wire(cmd)])
            weight = self._held_bytes.get(w, 0) + _weight(cmd)
            self._held_bytes[w] = weight
            if weight >= BATCH_BYTES:
                del self._held[w], self._held_bytes[w]
                self._frame(w, serialization.encode([BATCH, held]))
            return
        self._frame(w, serialization.encode([vertex, command_to_wire(cmd)]))

    def _flush_commands(self) -> None:
        held, self._held = self._held, {}
        self._held_bytes = {}
        for w, commands in sorted(held.items()):
            self._frame(w, serialization.encode([BATCH, commands]))

    def _frame(self, w: int, payload: bytes) -> None:
        links = self._links
        assert links is not None
        try:
            links.send(w, payload, self._check)
        except PeerLost as e:
            self._check()  # a worker's own failure says more than a closed connection
            raise WorkerDied(f"worker {w} died: {e.reason}") from None

    # -- workers that join and leave -------------------------------------------------------------
    live_backend = True

    def _migratable(self) -> set[int]:
        steps: list[int] = self._get(self.actors[0].migratable.remote(), 0)
        return set(steps)

    def _join_worker(self, worker: int, epoch: int) -> None:
        links = self._links
        assert links is not None
        # Workers that left: their actors are the pool's now (the pool may hand one back
        # to this very join), no longer this launch's to leave out.
        self._departed.difference_update(id(a) for a in self.actors[worker:])
        for name in ("actors", "nodes", "pids", "addresses", "_kinds"):
            del getattr(self, name)[worker:]
        cpus = self.cpus
        if not self._cluster:  # what the running workers leave of this machine's CPUs
            used = sum(self._cpus_of.get(id(a), self.cpus) for a in self.actors)
            total = float(ray.cluster_resources().get("CPU", 0))  # type: ignore[no-untyped-call]
            cpus = max(0.0, min(self.cpus, total - used))
        # A standby is warm already: no process to start while the run waits. None is
        # started again here: a process starting beside the running workers takes their
        # CPU (on 2 cores it stalled epochs for ~1 s); the next launch makes it up.
        if self._standbys:
            actor, cpus = self._standbys.pop(0), 0.0
        else:
            actor = (POOL.take(1, (cpus, self._shape()[1])) or [self._new_actor(cpus)])[0]
        trace = None if self.trace is None else (self.trace, self.attempt)
        start = actor.start_joining.remote(
            worker,
            self.accumulate,
            self.max_inflight,
            self.plan_ref,
            self._secret,
            _nodes() > 1,
            trace,
            None if self.coordinator is None else self.coordinator.store,
            self._every,
            self._incremental,
            _driver_niceness(),
        )
        node, pid, address = self._started([start], cpus)[0]
        alive = list(self.membership.alive)
        self._wait_for([self.actors[w].expect_peer.remote(worker) for w in alive], alive)
        connect = actor.connect.remote(self.addresses + [address])
        try:
            links.add(worker, address, ray.get_runtime_context().get_node_id())
        except PeerLost as e:
            self._abandoned.append(connect)
            raise WorkerDied(f"worker {e.peer} {e.reason}") from None
        kinds = self._get(connect, worker)
        first = self.membership.sent.get(worker, 0)
        seqs = self._wait_for(
            [self.actors[w].add_peer.remote(worker, epoch, first) for w in alive], alive
        )
        roots = self.membership.open_inputs(driver_inputs(self.plan))
        mint = self.actors[0].mint_join.remote(worker, epoch, roots, dict(zip(alive, seqs)), first)
        join = self._wait_for([mint], [0])[0]
        self._get(actor.join.remote(join), worker)
        self.actors.append(actor)
        self.nodes.append(node)
        self.pids.append(pid)
        self.addresses.append(address)
        self._kinds.append(kinds)
        self._cpus_of[id(actor)] = cpus
        ref = actor.run.remote()
        self._runs[worker] = ref
        self._run_worker[ref] = worker
        self.membership.join(worker, epoch)
        self.workers += 1
        self._workers_changed()

    def _release_at(
        self, vertex: int, owner: int, partitions: list[int], to: int, epoch: int
    ) -> None:
        self._get(self.actors[owner].release_at.remote(vertex, partitions, to, epoch), owner)
        self._handing.add(owner)

    def _moving_sources(self) -> bool:
        return bool(self._handing)

    def _source_lead(self) -> int:
        # The driver looks at the sources every _FOLLOW_EVERY: a lead in time, not epochs.
        return self._lead.epochs()

    def _hand_over(self) -> None:
        """Give the source partitions that reached their handover's epoch to their new
        owners."""
        owners = sorted(self._handing)
        answers = self._wait_for([self.actors[w].take_handovers.remote() for w in owners], owners)
        for owner, (handovers, more) in zip(owners, answers, strict=True):
            if handovers:
                targets = [to for to, _ in handovers]
                refs = [self.actors[to].adopt.remote(h) for to, h in handovers]
                self._wait_for(refs, targets)
            if not more:
                self._handing.discard(owner)

    def _leave_worker(self, worker: int, epoch: int) -> None:
        alive = list(self.membership.alive)
        self._wait_for([self.actors[w].leave_at.remote(worker, epoch) for w in alive], alive)
        for w, vertex, cmd in self.membership.leave(worker, epoch, driver_inputs(self.plan)):
            self._command(w, vertex, cmd)

    def _gone(self, worker: int) -> None:
        """Worker ``worker``'s loop ended as it left: every other worker forgets it, and
        its actor goes back to the pool."""
        actor = self.actors[worker]
        sent = self._get(actor.left.remote(), worker)
        if sent is None:
            return  # the run ended everywhere before it could leave: a normal end
        others = [w for w in self.membership.alive if w != worker]
        self._wait_for([self.actors[w].peer_left.remote(worker, sent) for w in others], others)
        assert self._links is not None
        self._links.depart(worker)
        self.membership.gone(worker, sent)
        self._ended.discard(worker)
        self._last_ping.pop(worker, None)
        self._behind = {k: v for k, v in self._behind.items() if worker not in k}
        self.workers -= 1
        self._workers_changed()
        self._departed.add(id(actor))
        try:
            self._get(actor.reset.remote(), worker)
            shape = (self._cpus_of.get(id(actor), self.cpus), self._shape()[1])
            POOL.give_back([actor], shape, self.idle_timeout)
        except WorkerDied:
            kill(actor)
            self._remove_sockets([actor])

    def _hosting(self) -> list[Any]:
        """The actors of this launch but those of workers that left (:meth:`_gone`)."""
        departed = self._departed
        return [a for a in self.actors if id(a) not in departed] if departed else self.actors

    def _request_checkpoint(
        self, epoch: int, every: int | None = None, fraction: float | None = None
    ) -> tuple[bool, int]:
        alive = self.membership.alive
        refs = [self.actors[w].request_checkpoint.remote(epoch, every, fraction) for w in alive]
        answers = self._wait_for(refs, list(alive))
        return all(ok for ok, _ in answers), max(seen for _, seen in answers)

    def _keys_held(self) -> int | None:
        alive = self.membership.alive
        refs = [self.actors[w].keys_held.remote() for w in alive]
        held: list[int] = self._wait_for(refs, list(alive))
        return sum(held)

    def _bin_loads(self) -> list[BinLoad]:
        alive = self.membership.alive
        refs = [self.actors[w].take_load.remote() for w in alive]
        loads: list[BinLoad] = self._wait_for(refs, list(alive))
        return loads

    def _probe(self, vertex: int) -> list[tuple[int, ...]]:
        alive = self.membership.alive
        refs = [self.actors[w].frontier.remote(vertex) for w in alive]
        frontier = merge_frontiers(self._wait_for(refs, list(alive)))
        self._collect(0)
        return frontier

    def _poll(self, timeout: float) -> None:
        """Deliver the outputs that have arrived (subscribe callbacks run here), waiting up
        to ``timeout`` seconds for some; raise a worker's failure."""
        if self._delivering:
            return  # called from a callback: the rest follows once it returns
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() - self._last_check >= _CHECK_EVERY:  # a spinning poll stays cheap
                self._check()
            left = deadline - time.monotonic()
            if self._collect(min(max(left, 0.0), _TICK)) or not self._more():
                return  # delivered, or nothing more will come
            if left <= 0:
                # Nothing yet: let Ray's threads have the GIL, else a driver spinning on
                # poll() holds back the very answers it waits for.
                time.sleep(0)
                return

    def _wait(self) -> None:
        self._last_change = time.monotonic()
        while self._runs:
            if self._more():
                # A killed worker's connection ends: that arrives here too.
                self._collect(_TICK)
            if not self._more():  # every last report is in
                if self._ran_out():
                    break
                # A leaver's loop may still be ending.
                ray.wait(list(self._runs.values()), num_returns=1, timeout=_TICK)
            self._check(closed=True)
        # Every loop has ended, each after sending its last report: they are on their way.
        deadline = time.monotonic() + self.heartbeat_timeout
        while self._more() and not self._delivering:
            self._collect(_TICK)
            if time.monotonic() > deadline:
                missing = sorted(set(range(self.workers)) - self._ended)
                raise WorkerDied(
                    f"workers {missing} ended their loops but their last outputs did not reach "
                    f"the driver within {self.heartbeat_timeout:g}s"
                )
        self._clean = not self._more()

    def _ran_out(self) -> bool:
        """Whether every loop has ended, known without waiting for the ``run`` calls to
        return (a round trip through Ray): every worker's last report is in, and a loop
        sends it last, after its frames are credited and its writes done, with nothing
        left that could fail (then its call returns in the same turn of the actor's
        event loop). Not with workers leaving (their end is read from their calls, see
        ``_check``) nor with ``profile_dir`` (a loop writes its profile after its report,
        and the files must be there when the run returns)."""
        if self.membership.leaving or self.plan.profile_dir is not None:
            return False
        self._runs.clear()  # returned or returning; nothing fails there: left unread
        self._run_worker.clear()
        return True

    # -- outputs ----------------------------------------------------------------------------
    def _more(self) -> bool:
        """Whether reports may still come (some worker has not sent its last)."""
        return self._links is not None and len(self._ended) < self.workers

    def _collect(self, timeout: float) -> bool:
        """Deliver the reports that have arrived on the driver's connections, in each
        worker's order (outputs to the callbacks, checkpoint parts to the coordinator);
        wait up to ``timeout`` for one first. Returns whether an output was delivered."""
        links = self._links
        if self._delivering or links is None:
            return False  # a callback fed an input: its outputs come after it returns
        frames = links.frames
        if not frames and timeout > 0:
            links.arrived.wait(timeout)
        links.arrived.clear()
        delivered = False
        # The parts of every frame taken in now are reported together, after the frames'
        # outputs: of the checkpoints they complete, only the newest is committed
        # (``CheckpointCoordinator.parts_written``; a driver behind its workers finds
        # several complete at once).
        reports: list[tuple[int, dict[str, Any]]] = []
        handling = 0.0
        self._delivering = True
        try:
            while frames:
                w, payload = frames.popleft()
                if payload is None:
                    self._check()  # a worker's own failure says more than a closed connection
                    raise WorkerDied(
                        f"worker {w} died: its connection to the driver {links.lost(w)}"
                    )
                cpu = time.thread_time()
                outputs, parts, end, loops = serialization.decode(payload)
                for key, epoch, records in outputs:
                    self._deliver(key, epoch, records)
                    delivered = True
                # A part's report in a frame of its own (from a worker's writer thread):
                # reading it is checkpoint work of the driver's too (issue 30).
                if parts and not outputs:
                    handling += time.thread_time() - cpu
                reports.extend(parts)
                if end and w in self.membership.alive:
                    self._ended.add(w)
                    self.loop_watch.observe((v, tuple(t)) for v, t in loops)
        except BaseException:
            # A worker lost, or a callback that raised: the parts taken in before are
            # written, and a restore (or a caller that goes on) may start from them.
            if reports:
                with contextlib.suppress(Exception):  # (the first error is the one to see)
                    self._parts_reported(reports, handling)
            raise
        else:
            if reports:
                self._parts_reported(reports, handling)
        finally:
            self._delivering = False
        return delivered

    # -- watching the workers ---------------------------------------------------------------
    def _get(self, ref: Any, worker: int) -> Any:
        """``ray.get`` with worker failures translated (see ``_translate``)."""
        try:
            return ray.get(ref)
        except (RayTaskError, RayActorError) as e:
            error = _translate(e, worker)
            raise error from error.__cause__  # see _translate

    def _wait_for(self, refs: list[Any], workers: list[int]) -> list[Any]:
        """The results of ``refs`` (calls to ``workers``), watching every worker meanwhile.

        A call that fails is raised as soon as it is in, not once every other call is: a
        worker whose handshake failed leaves its peers waiting for it in ``connect``
        until the connect timeout (30 s), and a recovery must not wait that out."""
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=len(pending), timeout=_TICK)
                for ref in ready:
                    self._get(ref, workers[refs.index(ref)])  # raises a failed call at once
                if pending:
                    self._check()
        except BaseException:
            # Read later (``_reap``), or Ray prints each one's failure as unhandled.
            self._abandoned.extend(pending)
            raise
        return [self._get(ref, w) for ref, w in zip(refs, workers)]

    def _check(self, closed: bool = False) -> None:
        """Raise the first failure among the workers' loops and heartbeats; with every
        input ``closed``, also a stall (every worker waiting, no progress anywhere)."""
        self._last_check = time.monotonic()
        self._reap()
        if self._live_deferred is not None:  # a controller's live change, made here
            self._apply_live()
        if self._runs and len(self._runs) == self.workers:
            self._maybe_request_checkpoint()
        if not self._runs:
            return
        ready, _ = ray.wait(list(self._runs.values()), num_returns=len(self._runs), timeout=0)
        for ref in ready:
            w = self._run_worker[ref]
            self._get(ref, w)
            del self._runs[w]
            self._pings.pop(w, None)
            self._progress.pop(w, None)
            if w in self.membership.leaving:
                self._gone(w)
        if self._handing:
            self._hand_over()
        now = time.monotonic()
        interval = min(0.5, self.heartbeat_timeout / 4)
        if self._has_sources:  # the control input follows the sources' reading
            interval = min(interval, _FOLLOW_EVERY)
            states = [p[6:] for w, p in self._progress.items() if w in self._runs]
            if states:
                self._follow_sources(max(r for r, _ in states), any(d for _, d in states))
        for w in self._runs:
            ping = self._pings.get(w)
            if ping is not None:
                ref, sent = ping
                answered, _ = ray.wait([ref], timeout=0)
                if answered:
                    progress: Ping = self._get(ref, w)
                    last = self._progress.get(w)
                    if last is None or progress[0] != last[0]:
                        self._last_change = now
                    self._progress[w] = progress
                    del self._pings[w]
                    self.loop_watch.observe(progress[5])
                    self._check_reader(w, sent)
                elif now - sent > self.heartbeat_timeout:
                    raise WorkerDied(
                        f"worker {w} did not answer a heartbeat for {self.heartbeat_timeout:g}s "
                        "(its process is stuck or its node is unreachable)"
                    )
            if w not in self._pings and now - self._last_ping.get(w, 0.0) >= interval:
                self._pings[w] = (self.actors[w].ping.remote(), now)
                self._last_ping[w] = now
        if closed and self._runs and now - self._last_change > self.heartbeat_timeout:
            waiting = [w for w in self._runs if w in self._progress and self._progress[w][1]]
            if len(waiting) == len(self._runs):
                for (s, p), (frames, seen) in self._behind.items():
                    theirs = self._progress.get(p)
                    if theirs is not None and s < len(theirs[3]) and theirs[3][s] < frames:
                        raise WorkerDied(  # not the dataflow: a connection nobody reads
                            f"worker {p} stopped reading its connection from worker {s}: "
                            f"frames sent {now - seen:.1f}s ago are unread and every worker "
                            "waits (its reader is stuck); with checkpoint= the run restores "
                            "from its last checkpoint, otherwise run it again"
                        )
                raise RuntimeError(
                    f"the dataflow stalled: every input is closed but workers {sorted(waiting)} "
                    f"still see live work and nothing moved for {self.heartbeat_timeout:g}s"
                )

    def _check_reader(self, w: int, at: float) -> None:
        """Raise WorkerDied if worker ``w`` (which answered a heartbeat sent at ``at``) has
        left a peer's frames unread for ``heartbeat_timeout`` although its loop waited for
        work well after they were sent: its connection's reader is stuck. A worker busy in
        a long step reads nothing either, but does not wait, so it is not suspected."""
        timeout = self.heartbeat_timeout
        _, _, sent, read, since, *_ = self._progress[w]
        behind = self._behind
        for p, theirs in self._progress.items():
            if p == w:
                continue
            if w >= len(theirs[3]) or p >= len(sent) or p >= len(read):
                continue  # joined since one of the two heartbeats
            if sent[p] > theirs[3][w]:  # as the sender: note what p has yet to read
                behind.setdefault((w, p), (sent[p], at))
            entry = behind.get((p, w))  # as the receiver
            if entry is None:
                continue
            frames, seen = entry
            if read[p] >= frames:
                del behind[(p, w)]
            elif at - seen >= timeout and at - since >= seen + timeout / 2:
                raise WorkerDied(
                    f"worker {w} stopped reading its connection from worker {p}: frames sent "
                    f"{at - seen:.1f}s ago are unread although worker {w} has been waiting "
                    "for work since (its reader is stuck); with checkpoint= the run restores "
                    "from its last checkpoint, otherwise run it again"
                )

    def _stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._clean and self.idle_timeout > 0:
            self._keep_actors()
        else:
            self._kill_actors(standbys=True)


def _connect(address: str | None, verbose: bool = False) -> bool:
    """Make sure Ray is up: reuse it if initialised, join ``address`` (or RAY_ADDRESS), or
    start it locally. Returns whether this call started it (it is then left running for
    later sessions in this process; Ray shuts it down at exit).

    ``verbose`` chooses what Ray may print here (see :func:`_init_logging`); it has no
    effect on a Ray this process had already initialised."""
    if ray.is_initialized():
        return False
    if address is None and not os.environ.get("RAY_ADDRESS"):
        with _quiet_token_notice(not verbose):
            ray.init(
                address="local",
                include_dashboard=False,
                ignore_reinit_error=True,
                **local_ray_options(),
                **_init_logging(verbose),
            )
        return True
    try:
        with _quiet_token_notice(not verbose):
            ray.init(address=address, ignore_reinit_error=True, **_init_logging(verbose))
    except (ConnectionError, ValueError, RuntimeError) as e:
        where = address or f"RAY_ADDRESS={os.environ.get('RAY_ADDRESS')}"
        raise ConfigError(
            f"cannot connect to the Ray cluster at {where}: {e}; check the address "
            "('auto', 'host:port' or 'ray://host:port') and that the cluster is up"
        ) from e
    return False


_RAY_NICENESS_VAR = "RAY_worker_niceness"
"""Ray's own setting (an environment variable read when its node starts)."""
WORKER_NICENESS = 0
"""The niceness a local Ray that timely starts gives its worker processes (Ray's own
default is 15: see :func:`local_ray_options`)."""


def local_ray_options() -> dict[str, Any]:
    """What ``ray.init`` is given, besides its address and logging, when timely starts a
    local Ray (a test's or a benchmark's own local start passes the same).

    Ray starts every worker process at niceness 15, and a timely worker is the run's
    compute: at 15 it gets the CPU only when no process at 0 wants it. Its loop thread
    lowers itself to the driver's niceness at ``start`` (:func:`_match_niceness`) only
    where the process may lower a niceness (root, ``CAP_SYS_NICE``); elsewhere, with one
    busy process beside it on 2 cores, a Ray x2 run took 4x an unloaded one. A local Ray
    timely starts has its workers at :data:`WORKER_NICENESS` from the start instead
    (raising a niceness, which Ray does, needs no privilege; leaving it at 0 needs none).
    A ``RAY_worker_niceness`` the user set wins; a cluster timely joins keeps its own."""
    if _RAY_NICENESS_VAR in os.environ:
        return {}
    return {"_system_config": {"worker_niceness": WORKER_NICENESS}}


def start_ray(address: str | None = None, verbose: bool | None = None) -> bool:
    """Start (or join) Ray now, as a session on the ray backend would when it starts: a
    driver with other work before its dataflow (Spark preparing the input) can overlap
    Ray's start with it, and the session then finds Ray up. Returns whether this call
    started it. ``verbose``: as for a session (default ``TIMELY_VERBOSE``). Call it on
    the main thread: Ray sets its SIGTERM handler only there."""
    return _connect(address, resolve_verbose(verbose))


def _init_logging(verbose: bool) -> dict[str, Any]:
    """``ray.init``'s logging options. Quiet: the driver's ``ray`` logger at WARNING, so
    no "Started a local Ray instance." banner (INFO), and ``log_to_driver=False``, so
    nothing the actors' processes write reaches this terminal as ``(WorkerActor pid=...)``
    lines (asyncio's "Task was destroyed but it is pending!" when a run's actors are
    killed, Ray's own worker warnings, and a vertex's ``print``; they stay in the
    session's log files under Ray's temp dir). A worker's failure still comes back as
    the error of its ``run`` call. Verbose: Ray's defaults (INFO, forwarded output).
    ``RAY_LOG_TO_DRIVER``, when set, is the user's explicit choice and wins."""
    options: dict[str, Any] = {"logging_level": logging.INFO if verbose else logging.WARNING}
    if "RAY_LOG_TO_DRIVER" not in os.environ:
        options["log_to_driver"] = verbose
    return options


_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"


class _DropTokenNotice(logging.Filter):
    """Drops Ray's notice that token authentication is on (and how to opt out), which
    every local ``ray.init`` logs at WARNING; authentication itself stays on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_TOKEN_NOTICE)


@contextlib.contextmanager
def _quiet_token_notice(quiet: bool) -> Iterator[None]:
    """While ``ray.init`` runs, filter the token notice out of the Ray module's logger.

    Not by its own switch: setting ``RAY_AUTH_MODE=token`` silences it too, but only if
    set before Ray is imported; set later it needs a refresh of Ray's private config, and
    without one the local GCS is started with token mode but no token and never comes up
    (tried: "Timed out waiting for file .../gcs_server_port"). A filter changes nothing
    but the log line, and if Ray renames the logger the notice merely shows again."""
    if not quiet:
        yield
        return
    logger = logging.getLogger(_TOKEN_LOGGER)
    drop = _DropTokenNotice()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


@dataclass(frozen=True)
class _Cluster:
    """The CPUs of each live node (None: the node has no ``CPU`` resource), read by one
    GCS query: a session's start needs them three times (each worker's share, whether
    the workers fit, whether they talk over TCP) and asked Ray three times."""

    cpus: tuple[float | None, ...]

    @staticmethod
    def now() -> _Cluster:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        return _Cluster(
            tuple(
                None if "CPU" not in (r := n.get("Resources") or {}) else float(r["CPU"])
                for n in nodes
                if n.get("Alive")
            )
        )

    @property
    def nodes(self) -> int:
        """How many live nodes (workers on different nodes talk over TCP)."""
        return len(self.cpus)

    def sizes(self) -> list[float]:
        return [c or 0.0 for c in self.cpus]

    def total(self) -> float:
        """The cluster's CPUs as ``ray.cluster_resources()`` counts them (1 if none says)."""
        known = [c for c in self.cpus if c is not None]
        return sum(known) if known else 1.0


def _nodes() -> int:
    """How many live nodes the cluster has (workers on different nodes talk over TCP)."""
    return _Cluster.now().nodes


def _share_cpus(workers: int, cluster: _Cluster) -> float:
    """Each worker's CPU share: at most one, so more workers than CPUs still fit."""
    total = cluster.total()
    return max(0.0001, math.floor(min(1.0, total / workers) * 10_000) / 10_000)


def _check_fits(cpus: float, workers: int, cluster: _Cluster) -> None:
    """Fail at once, not after a timeout, when the (local, fixed-size) cluster could never
    host the workers."""
    sizes = cluster.sizes()
    biggest = max(sizes, default=0.0)
    if cpus > biggest:
        raise ConfigError(
            f"num_cpus_per_worker={cpus:g} but the largest Ray node has {biggest:g} CPUs; "
            "lower it (fractions are fine) or leave it out"
        )
    if cpus * workers > sum(sizes) + 1e-9:
        raise ConfigError(
            f"{workers} workers with num_cpus_per_worker={cpus:g} need {cpus * workers:g} "
            f"CPUs but Ray has {sum(sizes):g}; lower num_cpus_per_worker or leave it out"
        )


class _PlanNotLoaded(Exception):
    """A worker could not unpickle the plan (the driver says so as a ``ConfigError``)."""


def _niceness() -> int | None:
    """The calling thread's niceness (None where the system has none)."""
    if not hasattr(os, "getpriority"):
        return None
    return os.getpriority(os.PRIO_PROCESS, 0)


def _driver_niceness() -> int | None:
    """What the workers' loops step at: the driver's niceness, but never ahead of Ray's
    own daemons (at 0) even when the driver is (a root driver at ``nice -n -5``)."""
    nice = _niceness()
    return None if nice is None else max(nice, 0)


def _match_niceness(nice: int | None) -> None:
    """Give the calling thread (an actor's event loop: its steps) the niceness ``nice``.

    Ray starts every worker process at niceness 15 (``RAY_worker_niceness``) to keep its
    own daemons ahead of user code, and the driver stays at its own (0 by default). A
    timely worker is the run's compute: at 15 it loses the CPU to any process of the
    node at 0, its own driver included, so on a shared machine a Ray run slowed down
    where an inline run (the driver's thread) did not (word count, 2M words, 2 cores, one
    busy with a loop at 0: Ray x2 1.17 s at 15, 0.29 s at 0). The loop's thread steps at the
    driver's niceness instead; lowering a niceness needs the privilege to (root,
    ``CAP_SYS_NICE`` or ``RLIMIT_NICE``), and without it the thread stays as Ray made
    it. On Linux a niceness is a thread's: Ray's own threads in the process keep 15, and
    the threads the loop starts from now on (the checkpoint writer) inherit the loop's.
    Elsewhere it would be the whole process's: nothing is changed there."""
    if nice is None or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):
        if _niceness() != nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)


def _load_plan(pickled: bytes) -> Plan:
    """Unpickle the plan the driver pickled (on a worker: its vertices' modules are
    imported here). A failure is reported as Ray's own unpickling of a plan from the
    object store is: ``RaySession._wait_started`` makes it a ``ConfigError``."""
    try:
        plan: Plan = pickle.loads(pickled)
    except Exception as e:
        raise _PlanNotLoaded(repr(e)) from None
    return plan


def _translate(error: BaseException, worker: int) -> BaseException:
    """What the driver raises for a failed call to ``worker``: timely's own errors (a user
    function's failure, say) as they were raised, an actor's death as ``WorkerDied``.

    Raise it ``from`` its own ``__cause__``: that keeps the user's exception as the cause
    of a ``UserFunctionError`` and leaves Ray's wrapper out of the chain."""
    if isinstance(error, RayTaskError):
        cause = error.cause
        if isinstance(cause, TimelyError):
            return cause
        if isinstance(cause, RayActorError):
            return _died(worker, cause)
    elif isinstance(error, RayActorError):
        return _died(worker, error)
    return error


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def _died(worker: int, error: BaseException) -> WorkerDied:
    return WorkerDied(f"worker {worker} died: {_first_line(error)}")
