"""The inline backend: every worker in this process, deliveries ordered by a seeded scheduler.

The scheduler picks, at random among what can happen next, a worker to step, a
message to deliver (keeping each sender's order per receiver) or a driver command to
hand over. Different seeds give different interleavings; the property tests use that
to check that results and progress invariants hold under every order.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from timely.checkpoint.config import CheckpointConfig
from timely.checkpoint.coordinator import Restore
from timely.checkpoint.writer import PartWriter, is_large
from timely.comm.messages import InputCommand, WorkerMessage
from timely.errors import ConfigError, WorkerDied
from timely.eventlog import clock, message_event
from timely.graph.spec import RunSpec
from timely.session.base import Session, merge_frontiers
from timely.session.membership import Membership, driver_inputs
from timely.worker.loop import Worker
from timely.worker.migration import BinLoad
from timely.worker.profiling import WorkerProfile

if TYPE_CHECKING:
    pass


class _EarlySend:
    """Worker ``index``'s early sends (the worker loop's ``EarlySend``): onto its FIFO
    queue to the peer at once, as the step's end would put them."""

    __slots__ = ("index", "session")

    def __init__(self, session: InlineSession, index: int) -> None:
        self.session = session
        self.index = index

    def ready(self, peer: int) -> bool:
        return True

    def send(self, peer: int, message: WorkerMessage) -> None:
        self.session._queue(self.index, [(peer, message)])


class InlineSession(Session):
    """All workers in one process."""

    concurrent = False
    live_backend = True

    def __init__(
        self,
        spec: RunSpec,
        workers: int,
        seed: int = 0,
        accumulate: bool = True,
        max_events: int = 50_000_000,
        checkpoint: CheckpointConfig | None = None,
        crash_at: tuple[int, ...] = (),
        trace: str | None = None,
    ) -> None:
        """``crash_at``: fault injection for tests: at each of these scheduling events every
        worker is lost (as if its process died) and the session recovers as on Ray."""
        super().__init__(spec, workers, checkpoint, trace)
        if max_events < 1:
            raise ConfigError(f"max_events must be >= 1, got {max_events}")
        self.rng = random.Random(seed)
        self.max_events = max_events
        self.accumulate = accumulate
        self.crash_at = set(crash_at)
        self.events = 0
        self._ahead = 0
        self._handing = False
        """Source partitions wait to be handed over (:meth:`_hand_over`)."""
        self._profiles: dict[int, WorkerProfile] = {}
        """Each worker's profiler, with ``profile_dir`` (:mod:`timely.worker.profiling`)."""
        self.writer = None if self.coordinator is None else PartWriter(self.coordinator.store)
        """Encodes, writes and hashes the workers' checkpoint parts: small ones at once,
        large ones off this thread (see :mod:`timely.checkpoint.writer`)."""
        self._relaunch(self._initial_restore())

    def _relaunch(self, restore: Restore | None) -> None:
        if self.writer is not None:
            self.writer.drain()  # the lost attempt's parts: never reported
            self.writer.store.close()  # its links files: the next deltas follow new parts
        self._close_workers()  # the last attempt's
        self.worker_list = [
            Worker(
                self.plan,
                i,
                self.workers,
                self.accumulate,
                checkpoint_every=self._every,
                checkpoint_on_request=self._every is None and self.checkpoint is not None,
                restore=None if restore is None else (restore[0], restore[1][i]),
                log=self._event_log(i),
                checkpoint_incremental=self._incremental,
            )
            for i in range(self.workers)
        ]
        for worker in self.worker_list:
            worker.early = _EarlySend(self, worker.index)
            self._defer_columns(worker)
        self.channels: dict[tuple[int, int], deque[WorkerMessage]] = {}
        self.commands: list[deque[tuple[int, InputCommand]]] = [
            deque() for _ in range(self.workers)
        ]
        self._rr = 0
        self.membership = Membership(self.workers, 0 if restore is None else restore[0] + 1)
        self._handing = False

    def _defer_columns(self, worker: Worker) -> None:
        """Columnar snapshots are encoded on the writer thread (Arrow IPC releases the
        GIL; msgpack, which a row snapshot takes, would hold it there too)."""
        if worker.snapshots is not None and self.writer is not None:
            worker.snapshots.defer_columns = True

    def _alive(self) -> list[Worker]:
        return [self.worker_list[w] for w in self.membership.alive]

    # -- workers that join and leave ----------------------------------------------------------
    def _keys_held(self) -> int | None:
        return sum(w.migration.keys_held() for w in self._alive())

    def _migratable(self) -> set[int]:
        return set(self.worker_list[0].migration.follows)

    def _join_worker(self, worker: int, epoch: int) -> None:
        self._pump()  # what workers that left still sent is applied everywhere first
        del self.worker_list[worker:], self.commands[worker:]  # workers that left
        for pair in [p for p in self.channels if worker in p]:
            assert not self.channels[pair]
            del self.channels[pair]
        donor = self.worker_list[0]
        roots = self.membership.open_inputs(driver_inputs(self.plan))
        first = self.membership.sent.get(worker, 0)
        messages, join = donor.mint_join(worker, epoch, roots, first)
        self._queue(0, messages)
        new = Worker(
            self.plan,
            worker,
            worker + 1,
            self.accumulate,
            checkpoint_every=self._every,
            checkpoint_on_request=self._every is None and self.checkpoint is not None,
            log=self._event_log(worker),
            checkpoint_incremental=self._incremental,
            join=join,
        )
        new.early = _EarlySend(self, worker)
        self._defer_columns(new)
        for w in self._alive():
            if w is not donor:
                w.add_peer(worker, epoch, first)
        # The joiner's view is the donor's: what is still on its way to the donor comes to
        # it too (the progress of it; the data is the donor's).
        for (s, r), queue in list(self.channels.items()):
            if r == 0 and s != worker:
                for msg in queue:
                    if msg.progress is not None:
                        copy = WorkerMessage(s, msg.seq, progress=msg.progress)
                        self.channels.setdefault((s, worker), deque()).append(copy)
        self.worker_list.append(new)
        self.commands.append(deque())
        self.membership.join(worker, epoch)
        self.workers += 1
        self._workers_changed()

    def _leave_worker(self, worker: int, epoch: int) -> None:
        for other in self._alive():
            other.leave_at(worker, epoch)
        for w, vertex, cmd in self.membership.leave(worker, epoch, driver_inputs(self.plan)):
            self.commands[w].append((vertex, cmd))
        self._pump()

    def _leave_ready(self) -> None:
        """Let go the leavers that hold nothing any more."""
        for worker, epoch in list(self.membership.leaving.items()):
            leaver = self.worker_list[worker]
            if self.commands[worker] or not leaver.can_leave(epoch):
                continue
            messages, sent = leaver.leave()
            self._queue(worker, messages)
            self._write_parts(worker)  # its parts of the checkpoints before it left
            self.membership.gone(worker, sent)
            for w in self._alive():
                w.peer_left(worker, sent)
            leaver.close()
            if leaver.log is not None:
                leaver.log.close()
            self.workers -= 1
            self._workers_changed()

    def _release_at(
        self, vertex: int, owner: int, partitions: list[int], to: int, epoch: int
    ) -> None:
        self.worker_list[owner].release_at(vertex, partitions, to, epoch)
        self._handing = True

    def _moving_sources(self) -> bool:
        return self._handing

    def _hand_over(self, owner: int) -> None:
        """Give the source partitions of worker ``owner`` that reached their handover's
        epoch to their new owners (an event of its own, as a Ray host's between steps)."""
        messages, handovers = self.worker_list[owner].take_handovers()
        self._queue(owner, messages)
        for to, handover in handovers:
            self.worker_list[to].adopt_partitions(handover)
        self._handing = any(w.handing_over() for w in self._alive())

    def _follow(self) -> bool:
        """Move the control input on past what the sources read (:meth:`_follow_sources`),
        queued, not run; whether anything was sent. A live change asked for from another
        thread is made here first (the driver's loop check, as on Ray)."""
        if not self._has_sources or self._control_closed:
            return False
        before = (self._control_epoch, self._control_closed)
        if self._live_deferred is not None:
            self._guarded(self._apply_live, retry=False)
        alive = self._alive()
        self._ahead += 1
        try:
            self._follow_sources(max(w.sources_read() for w in alive), alive[0].sources_done())
        finally:
            self._ahead -= 1
        return (self._control_epoch, self._control_closed) != before

    def _queue(self, sender: int, messages: list[tuple[int, WorkerMessage]]) -> None:
        log = self.worker_list[sender].log
        for peer, msg in messages:
            self.channels.setdefault((sender, peer), deque()).append(msg)
            if log is not None:
                now = clock()
                log.add(message_event("s", now, now, peer, msg, 0))

    # -- driver side ------------------------------------------------------------------------
    def _send_command(self, vertex: int, cmd: InputCommand) -> None:
        for w, part in self.membership.route(vertex, cmd, self._rr):
            self.commands[w].append((vertex, part))
        self._rr = (self._rr + 1) % max(1, self.workers)
        if not self._ahead:
            self._pump()

    @contextlib.contextmanager
    def running_ahead(self) -> Iterator[None]:
        """Within the block the driver's commands queue without being run (a driver that
        runs ahead of its workers, as on Ray); they run when it ends."""
        self._ahead += 1
        try:
            yield
        finally:
            self._ahead -= 1
        if not self._ahead:
            self._guarded(self._pump, retry=False)

    def _poll(self, timeout: float) -> None:
        self._follow()
        self._pump()  # the driver's thread is every worker: run what can run

    def _request_checkpoint(
        self, epoch: int, every: int | None = None, fraction: float | None = None
    ) -> tuple[bool, int]:
        alive = self._alive()
        agreed = [w.request_checkpoint(epoch, every, fraction) for w in alive]
        return all(agreed), max(w.checkpoint_floor() for w in alive)

    def _bin_loads(self) -> list[BinLoad]:
        return [w.migration.take_load() for w in self._alive()]

    def _probe(self, vertex: int) -> list[tuple[int, ...]]:
        return merge_frontiers([w.frontier(vertex) for w in self._alive()])

    # -- scheduling -------------------------------------------------------------------------
    def _pump(self, finish: bool = False) -> None:
        """Run until nothing can happen without the driver; ``finish``: and until every
        checkpoint part handed to the writer is written and reported (the run's end)."""
        rng = self.rng
        workers = self.worker_list
        alive = self.membership.alive
        before = 0 if self.writer is None else self.writer.submitted
        while True:
            if self.membership.leaving:
                self._leave_ready()
            options: list[tuple[int, int, int]] = []
            for (s, r), q in self.channels.items():
                if q:
                    if r not in alive:  # progress for a worker that left: nobody reads it
                        q.clear()
                        continue
                    options.append((0, s, r))
            for w in alive:
                if self.commands[w]:
                    options.append((1, w, 0))
                if workers[w].has_work():
                    options.append((2, w, 0))
                if self._handing and workers[w].handovers_ready():
                    options.append((3, w, 0))
            writer = self.writer
            if writer is not None and writer.pending:
                self._parts_written(writer.ready())
            if not options:
                if writer is not None and (writer.owes(before) or (finish and writer.pending)):
                    # Parts on the writer thread handed over before this pump began (at
                    # the run's end: all) are reported before it returns: their writes had
                    # a pump to overlap, and commits lag by a pump at most, as the cadence
                    # (whose next request they may make) and the sinks expect.
                    self._parts_written(writer.wait(None if finish else before))
                    continue
                for worker in self._alive():  # as a Ray worker does before it waits
                    if worker.log is not None:
                        worker.log.flush()
                awake = [t for w in self._alive() if (t := w.next_awake()) is not None]
                if not awake:
                    self._maybe_request_checkpoint()  # a rescale waiting for a commit
                    self.loop_watch.observe(r for w in self._alive() for r in w.loop_rounds())
                    return
                # a paced source's next batch: this thread is every worker, so it waits
                time.sleep(max(0.0, min(awake) - time.time()))
                continue
            self.events += 1
            if self.events % 64 == 0:
                self._maybe_request_checkpoint()
                self.loop_watch.observe(r for w in self._alive() for r in w.loop_rounds())
            if self.events in self.crash_at:
                raise WorkerDied(f"injected crash at scheduling event {self.events}")
            if self.events > self.max_events:
                raise RuntimeError(f"no end after {self.max_events} scheduling events")
            kind, a, b = options[rng.randrange(len(options))]
            profile = self._profile(b if kind == 0 else a)
            if profile is None:
                self._event(kind, a, b)
            else:
                with profile.running():
                    self._event(kind, a, b)

    def _event(self, kind: int, a: int, b: int) -> None:
        """One scheduling event: a message from ``a`` taken in by ``b`` (0), a driver
        command for ``a`` (1), a step of ``a`` (2), or ``a`` handing source partitions
        over (3)."""
        workers = self.worker_list
        if kind == 0:
            message = self.channels[(a, b)].popleft()
            log = workers[b].log
            t0 = clock() if log is not None else 0
            workers[b].receive(message)
            if log is not None:
                log.add(message_event("r", t0, clock(), a, message, 0))
        elif kind == 1:
            vertex, cmd = self.commands[a].popleft()
            workers[a].command(vertex, cmd)
        elif kind == 2:
            self._step(a)
        else:
            self._hand_over(a)

    def _profile(self, w: int) -> WorkerProfile | None:
        """Worker ``w``'s profiler, with ``profile_dir`` (kept across relaunches)."""
        directory = self.plan.profile_dir
        if directory is None:
            return None
        profile = self._profiles.get(w)
        if profile is None:
            profile = self._profiles[w] = WorkerProfile(directory, w)
        return profile

    def _stop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self._close_workers()
        for profile in self._profiles.values():
            profile.dump()

    def _close_workers(self) -> None:
        """Close the workers of the last attempt: their logs and disk tables."""
        for worker in getattr(self, "worker_list", []):
            if worker.index not in self.membership.alive:
                continue  # left, and closed then
            worker.close()
            if worker.log is not None:
                worker.log.close()

    def _step(self, w: int) -> None:
        worker = self.worker_list[w]
        self._queue(w, worker.step())
        for key, epoch, records in worker.take_emitted():
            self._deliver(key, epoch, records)
        self._write_parts(w)

    def _write_parts(self, w: int) -> None:
        """Write worker ``w``'s completed checkpoint parts (a large one, or any while one
        is on the writer thread, there) and report those written."""
        worker = self.worker_list[w]
        writer = self.writer
        for epoch, part in worker.take_parts():
            assert writer is not None
            # (A size not known is small: inline leaves only Arrow to encode.)
            if writer.pending or is_large(part):
                writer.submit(epoch, w, part, worker.checkpoint_work(), clock(), worker.log)
            else:
                report = writer.write_now(epoch, w, part, worker.checkpoint_work(), worker.log)
                self._parts_written([report])

    def _parts_written(self, reports: list[tuple[int, dict[str, Any]]]) -> None:
        """Report the parts the writer has written, in order (once durable)."""
        for epoch, info in reports:
            self._part_written(epoch, info)

    def _wait(self) -> None:
        self._pump(finish=True)
        while self._follow():  # sources: the control input follows them to their end
            self._pump(finish=True)
        # Quiet: nothing can happen without the driver. With every input closed, every
        # worker must now see every frontier empty; anything else is a liveness bug (for
        # example accumulation holding back an update that someone waits for).
        stuck = [w.index for w in self._alive() if not w.idle()]
        if stuck:
            raise RuntimeError(f"the dataflow stalled: workers {stuck} still see live work")
