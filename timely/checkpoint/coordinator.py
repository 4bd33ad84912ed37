"""The checkpoint coordinator: the driver's side of checkpoints, held by the session.

It decides nothing about when a vertex is snapshotted (each worker does, see
:mod:`timely.worker.snapshots`); it commits a checkpoint once every worker's part is durable,
asks the workers for a checkpoint when ``checkpoint_interval`` says so (or, with
``checkpoint_every="auto"``, when the cadence's controller picks another interval: see
:mod:`timely.checkpoint.cadence`), keeps the driver's input commands that a restore would have to
replay, finds the checkpoint to restore from, and tells the sinks what is committed and
what to drop. The session calls it and stays a thin loop around the backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from time import thread_time_ns
from typing import Any, Literal

from timely.checkpoint.aimd import AIMD
from timely.checkpoint.cadence import AutoCadence, Request
from timely.checkpoint.config import CheckpointConfig
from timely.checkpoint.history import Recent
from timely.checkpoint.store import (
    RECYCLE_BYTES,
    CheckpointError,
    CheckpointStore,
    Share,
    home,
)
from timely.comm.messages import Advance, InputCommand, Send
from timely.routing.bins import DEFAULT_BINS
from timely.sinks import Sink, SinkLineage, display_location

Fate = Literal["retire", "drop", "sweep", "collect"]
"""What becomes of a checkpoint's files once no longer kept. ``retire``: its folder goes
whole, to be written over (:meth:`CheckpointStore.retire`). With links files
(:attr:`CheckpointStore.appends`), where a folder may hold later checkpoints' parts:
``drop``, its manifest goes at once (:meth:`CheckpointStore.drop_commit`); ``sweep``, a
commit in a log, hidden by a later commit's floor in that log (or, once the commits have
moved to another log, by the floor the store writes into it then): its bytes go with
their folder, at the collection asked for once that folder holds no kept checkpoint's
bytes, or at a sweep (every :data:`SWEEP_EVERY` collections). ``collect``: left to the
next collection, which decides soon (large parts, or links of an incremental chain)."""

Restore = tuple[int, list[Share]]
"""A checkpoint to start from: its epoch and each new worker's share of it (which the
worker reads itself)."""

_MAX_LOOKAHEAD = 1 << 20
"""Bounds the checkpoint request's lookahead (in epochs)."""

InputEntry = tuple[int, InputCommand, int]
"""A driver command logged: ``(input vertex, command, the input's epoch then)``."""

TRIM_AT = 64
"""The input log is trimmed once it is twice as long as after the last trim, and at
least twice this."""


def trim_inputs(log: list[InputEntry], upto: int) -> list[InputEntry]:
    """``log`` without what no restore from a checkpoint at ``upto`` or later replays
    differently: the sends at epochs up to ``upto`` (replayed from after the checkpoint),
    and each input's advances to epochs up to it but the last (replayed, they would
    only move the input through epochs with nothing sent in them)."""
    last: dict[int, int] = {}
    for i, (vertex, cmd, epoch) in enumerate(log):
        if type(cmd) is Advance and epoch <= upto:
            last[vertex] = i
    return [
        entry
        for i, entry in enumerate(log)
        if entry[2] > upto
        or (type(entry[1]) is not Send and (type(entry[1]) is not Advance or last[entry[0]] == i))
    ]


COLLECT_EVERY = 8
"""Old checkpoints are deleted once every this many commits (and when the store is to
be read, or the run ends): each collection lists the store and looks for every
checkpoint's manifest, so one per commit cost more than the deletions (issue 30). Up to
this many more checkpoints than ``keep_checkpoints`` stay on disk meanwhile; none of them
is needed, and a restore takes the newest usable one whatever is there."""


SWEEP_EVERY = 8
"""While commits see to every checkpoint they leave unkept themselves (retired whole,
``CheckpointStore.retire``; or, with links files, its manifest dropped or its log line
hidden by a floor), the collection (a listing of the store and a look for every
manifest, on a thread that takes the GIL from the loop) runs this many times less
often: it finds only what a superseded or failed attempt left, and, with links files,
is asked for sooner once a folder holds no kept checkpoint's bytes."""


class CheckpointCoordinator:
    """Commits, requests, the input log and restores for one run of dataflow ``name``."""

    def __init__(
        self,
        config: CheckpointConfig,
        name: str,
        fingerprint: str,
        workers: int,
        sinks: list[Sink],
        parallel: int | None = None,
    ) -> None:
        """``parallel``: how many workers run at once (``workers`` by default; the inline
        backend runs one at a time), for ``checkpoint_every="auto"``'s measurements."""
        self.config = config
        self.store = CheckpointStore(config.uri)
        self.name = name
        self.fingerprint = fingerprint
        self.workers = workers
        self.workers_at: Callable[[int], int] | None = None
        """How many workers take part in the checkpoint at an epoch, when workers join
        and leave the run live (the session sets it); None: ``workers``."""
        self.bins = DEFAULT_BINS
        """The run's bin count (the session sets it from the plan): restores re-partition
        keyed state over it when the worker count or the bin count changed."""
        self.sinks = sinks
        self.restored_epoch = -1
        """The epoch of the checkpoint the workers last started from (-1: none)."""
        self.committed: Recent[int] = Recent(config.keep + 1)  # (kept: the newest keep)
        """Epochs of the checkpoints committed in this run, in order: the latest
        :data:`~timely.checkpoint.history.HISTORY` or more (``.total``: how many)."""
        self.subsumed: Recent[int] = Recent()
        """Epochs of the checkpoints complete but not committed, a later one committed in
        their place (:meth:`parts_written`), in order: the latest ones (``.total``)."""
        self.commit_times: Recent[float] = Recent(config.keep + 1)
        """When each of ``committed`` was committed (``time.monotonic()``)."""
        self._parts: dict[int, dict[int, dict[str, Any]]] = {}
        self._trimmed = -1
        """The driver's inputs up to this epoch are no longer logged: no restore before it."""
        self._folders: dict[int, frozenset[int]] = {}
        """Per committed checkpoint kept, the folders its bytes are in (its parts' and
        their chains' links': :func:`~timely.checkpoint.store.home`), for the collection."""
        self._written: dict[tuple[int, int], dict[str, Any]] = {}
        """Per ``(epoch, worker)``, the part written, with the chain of parts it is a delta
        on (incremental checkpoints): kept until no committed chain needs it."""
        self._part_at: dict[int, float] = {}
        """Per epoch, when its latest part so far was durable."""
        self._input_log: list[InputEntry] = []
        """The driver's commands since the run began, less what :func:`trim_inputs`
        dropped: what a restore replays (:meth:`replay`)."""
        self._input_kept = TRIM_AT
        """The log's length when it was last trimmed (at least :data:`TRIM_AT`): trimmed
        again once it is twice that, so that a commit's share of the trimming stays the
        same however long the run (a pass over the whole log at every commit grew with
        the run, and its advances were never dropped)."""
        self._input_epoch: dict[int, int] = {}
        self._requested: int | None = None
        """Interval mode: the epoch every worker agreed to checkpoint after, until committed."""
        self._requested_at = 0.0
        self._floor = -1
        """The highest checkpoint floor a worker has answered (see ``Worker.checkpoint_floor``)."""
        self._lookahead = 1
        """How far past the floor the next checkpoint request asks."""
        self._next_request = time.monotonic() + (config.interval or 0.0)
        self._collector: _Collector | None = None
        """Deletes old checkpoints off the computing thread (made at the first commit)."""
        self._uncollected: tuple[list[int], dict[int, frozenset[int]]] | None = None
        """What the newest commit not yet collected keeps (see :data:`COLLECT_EVERY`)."""
        self._commits_uncollected = 0
        self._unretired = True
        """A checkpoint was left to the collection since the last one, or with links
        files a folder no longer holds a kept checkpoint's bytes (or none has run: the
        store may hold an earlier run's). Else the commits saw to every one they left
        unkept, and the collection waits :data:`SWEEP_EVERY` times longer."""
        self._kept_folders: frozenset[int] = frozenset()
        """The folders the kept checkpoints had bytes in at the last commit, with links
        files (:attr:`CheckpointStore.appends`)."""
        self._kept: list[int] = []
        """The checkpoints the last commit kept (the newest ``keep`` and a fallback)."""
        self._fates: dict[int, Fate] = {}
        """Per checkpoint committed and kept, what becomes of its files once no longer
        kept (:meth:`_fate`)."""
        # A fixed interval is measured as "auto"'s is (a controller pinned to it), so that
        # every run with checkpoint_every reports what checkpointing costs it.
        controller = (
            None
            if config.interval is not None
            else AIMD(config.every, min_interval=config.every, max_interval=config.every)
            if config.fraction is None
            else AIMD(config.every, *config.fraction)
        )
        self.cadence = (
            None
            if controller is None
            else AutoCadence(controller, workers if parallel is None else parallel)
        )
        """The checkpoint cost's measurements and, with ``checkpoint_every="auto"``, the
        adaptive interval (None with ``checkpoint_interval``)."""

    @property
    def every(self) -> int | None:
        """The workers' ``checkpoint_every`` (None: checkpoints on request); with
        ``"auto"``, the controller's interval, which new workers start with."""
        if self.cadence is not None:
            return self.cadence.interval
        return self.config.every if self.config.interval is None else None

    def sink_lineage(self) -> SinkLineage:
        """This run's lineage for its sinks: the checkpoint directory's (made on first use)."""
        lineage = self.store.lineage(self.name, self.fingerprint)
        return SinkLineage(self.name, self.fingerprint, lineage, display_location(self.config.uri))

    # -- the driver's inputs ------------------------------------------------------------------
    def log_input(self, vertex: int, cmd: InputCommand) -> bool:
        """Note a driver command for the replay; False when the checkpoint the run resumed
        from already reflects it (a ``Send`` at an epoch it covers): then drop it."""
        if isinstance(cmd, Advance):
            self._input_epoch[vertex] = cmd.epoch
        epoch = self._input_epoch.get(vertex, 0)
        if isinstance(cmd, Send) and epoch <= self.restored_epoch:
            return False
        self._input_log.append((vertex, cmd, epoch))
        return True

    def replay(self) -> list[tuple[int, InputCommand]]:
        """The logged commands new workers need after a restore, in order."""
        return [
            (vertex, cmd)
            for vertex, cmd, epoch in self._input_log
            if not (isinstance(cmd, Send) and epoch <= self.restored_epoch)
        ]

    # -- restoring ----------------------------------------------------------------------------
    def initial_restore(self) -> Restore | None:
        """The checkpoint to start from (None: from scratch, and sinks drop every epoch)."""
        if not self.config.resume:
            for sink in self.sinks:
                sink.abort_after(-1)  # a fresh run: output left by an earlier one goes
            return None
        return self.load_restore(initial=True)

    def load_restore(self, initial: bool = False) -> Restore | None:
        """The newest usable checkpoint, split over this run's workers; sinks drop what is
        after it (it is produced again). A recovery (not ``initial``) takes none newer
        than this run's last commit, or than the one it began from: a newer one in the
        store is another run's, which this one started over from (``resume=False``) or
        found damaged, and holds none of this run's inputs."""
        self.settle()  # no deletion under way while the store is read
        upto = None if initial else self.committed[-1] if self.committed else self.restored_epoch
        found = self.store.newest(self.fingerprint, self.name, upto=upto)
        epoch = -1 if found is None else found[0]
        if epoch < self._trimmed:
            raise CheckpointError(
                f"no usable checkpoint at or after epoch {self._trimmed} is left in "
                f"{self.config.uri!r} (the newest {epoch if epoch >= 0 else 'none'}), and the "
                f"driver's inputs up to epoch {self._trimmed} are no longer kept: the run "
                "cannot be recovered; keep more checkpoints (keep_checkpoints=) or check the store"
            )
        if initial and found is not None:
            # An earlier run's checkpoint: this run logs none of the inputs before it.
            self._trimmed = max(self._trimmed, epoch)
        for sink in self.sinks:
            sink.abort_after(epoch)
        self.restored_epoch = epoch
        # Those after it were found damaged, or are another run's: no fallback any more.
        self._kept = sorted({*(c for c in self._kept if c < epoch), *([epoch] * (epoch >= 0))})
        self._parts.clear()
        self._part_at.clear()
        self._requested = None
        if self.cadence is not None:
            self.cadence.restarted(epoch)
        if self.config.interval is not None:
            self._next_request = time.monotonic() + self.config.interval
        if found is None:
            return None
        parts = tuple(found[1]["parts"])
        return epoch, [
            Share(self.store, epoch, parts, w, self.workers, self.bins) for w in range(self.workers)
        ]

    # -- commits ------------------------------------------------------------------------------
    def part_written(self, epoch: int, info: dict[str, Any], handling: float = 0.0) -> None:
        """A worker wrote its part of the checkpoint at ``epoch``; commit once all have.

        ``info`` is what the manifest records of the part, and what the backend adds for
        ``checkpoint_every="auto"`` (taken out here): ``"work"``, the CPU seconds
        checkpointing cost the worker's loop and writer since its last part
        (:mod:`timely.checkpoint.cost`), ``"cpu"``, the CPU seconds its process used since
        then (a worker in a process of its own), and ``"at"``, when it was durable
        (seconds since the epoch). The driver's own CPU here, bookkeeping, commit and
        garbage collection, and ``handling``, the backend's before it (reading the
        report), are measured too: inline it is the loop's, and on Ray it takes a core
        from the workers; so is the driver's process CPU, for the run's total."""
        self.parts_written([(epoch, info)], handling)

    def parts_written(
        self, reports: list[tuple[int, dict[str, Any]]], handling: float = 0.0
    ) -> None:
        """Parts reported together (``(epoch, info)`` each, as :meth:`part_written` takes
        them; ``handling`` for them all): each is recorded, and of the checkpoints they
        complete only the newest is committed. The others are *subsumed*, as Flink's
        checkpoint coordinator subsumes a pending checkpoint once a later one completes:
        every part of theirs is written, but a restore would take the newer one anyway,
        and every sink's commit makes all the epochs up to it visible. A driver that
        falls behind its workers (on Ray it takes a core from them) thus writes one
        manifest for the several checkpoints it finds complete, not one each (issue 30:
        ~4 an intake, up to 20, in a word count checkpointed every epoch on 2 workers)."""
        started = time.thread_time()
        complete = [epoch for epoch, info in reports if self._record(epoch, info)]
        newest = max(complete, default=None)
        committed = None
        if newest is not None:
            older = {e: list(self._parts[e].values()) for e in sorted(set(complete)) if e < newest}
            committed = self._commit(newest)  # (first: the others go only once it is in)
            for epoch, parts in older.items():
                self._subsume(epoch, parts)
        cadence = self.cadence
        if cadence is not None:
            # The deletions' CPU too: off this thread, it still takes a core from the run.
            gc = 0.0 if self._collector is None else self._collector.take_cpu()
            cadence.driver(time.thread_time() - started + gc + handling)
            if newest is not None and committed is not None:
                cadence.committed(newest, committed, time.process_time())

    def _record(self, epoch: int, info: dict[str, Any]) -> bool:
        """Record a part written; returns whether it completed the checkpoint at
        ``epoch`` (every worker's part in, and restorable), to be committed."""
        info = dict(info)
        work = float(info.pop("work", 0.0))
        cpu = float(info.pop("cpu", 0.0))
        at = float(info.pop("at", 0.0)) or time.time()
        base = info.get("base")
        if base is not None:  # incremental: the parts it is a delta on, newest first
            prev = self._written.get((base, info["worker"]))
            if prev is None or prev["chain"] is None:
                info["chain"] = None  # a delta on a part that is not restorable: nor is it
            else:
                info["chain"] = [_link(base, prev), *prev["chain"]]
        else:
            info["chain"] = []
        self._written[(epoch, info["worker"])] = info
        stale = epoch <= self.restored_epoch or bool(self.committed and epoch <= self.committed[-1])
        if self.cadence is not None:
            self.cadence.part(epoch, work, cpu, committable=not stale)
        if stale:
            return False
        self._part_at[epoch] = max(self._part_at.get(epoch, 0.0), at)
        parts = self._parts.setdefault(epoch, {})
        parts[info["worker"]] = info
        workers = self.workers if self.workers_at is None else self.workers_at(epoch)
        if len(parts) < workers:
            return False
        if any(p["chain"] is None for p in parts.values()):
            # A delta on a part this driver never saw written: not restorable. The next
            # part of that worker is whole (the worker saw the part given up); with
            # checkpoint_interval, ask again rather than wait for this one.
            if self._requested == epoch:
                self._requested = None
            return False
        return True

    def _subsume(self, epoch: int, parts: list[dict[str, Any]]) -> None:
        """The checkpoint at ``epoch`` is complete, but a later one completed with it and
        is committed instead (see :meth:`parts_written`): its files go as an unkept
        commit's do (:meth:`_fate`)."""
        self.subsumed.append(epoch)
        if self.config.incremental:
            return  # (the collection runs every COLLECT_EVERY commits of a chain)
        fate = self._fate(parts)
        if fate == "collect" or (fate == "retire" and not self.store.retire(epoch, False)):
            self._unretired = True  # left to the collection: soon, not SWEEP_EVERY times later

    def _fate(self, parts: Iterable[dict[str, Any]], by_manifest: bool = False) -> Fate:
        """What becomes of a checkpoint's files once it is no longer kept (``by_manifest``:
        it was committed by a ``MANIFEST.json`` in its folder)."""
        if self.config.incremental or any(p["size"] > RECYCLE_BYTES for p in parts):
            return "collect"
        if not self.store.appends:
            return "retire"
        return "drop" if by_manifest else "sweep"

    def _commit(self, epoch: int) -> float:
        """Commit the complete checkpoint at ``epoch``; returns when it was complete."""
        parts = self._parts[epoch]
        workers = self.workers if self.workers_at is None else self.workers_at(epoch)
        at = self._part_at[epoch]  # the last part's: when the checkpoint was complete
        start = min([epoch, *(link["epoch"] for p in parts.values() for link in p["chain"])])
        # Keep the newest `keep` checkpoints and, with incremental ones, the newest one
        # before the newest chain began: a damaged link then still leaves a checkpoint to
        # fall back to (the checkpoints of a chain share its links).
        kept = [*self.committed[max(0, len(self.committed) + 1 - self.config.keep) :], epoch]
        if self.config.incremental:
            # The newest before the chain began of those the last commit kept: a commit
            # it left unkept may be a link now, no checkpoint (its manifest dropped).
            fallback = max((c for c in self._kept if c < start), default=None)
            if fallback is not None and fallback not in kept:
                kept.insert(0, fallback)
        try:
            by_manifest = self.store.commit(
                epoch, workers, self.fingerprint, self.name, list(parts.values()), floor=kept[0]
            )
        except OSError as e:
            raise CheckpointError(f"cannot commit the checkpoint at epoch {epoch}: {e}") from e
        self.committed.append(epoch)
        self.commit_times.append(time.monotonic())
        for done in [e for e in self._parts if e <= epoch]:
            del self._parts[done]
            self._part_at.pop(done, None)
        self._folders[epoch] = frozenset(home(e) for p in parts.values() for e in (p, *p["chain"]))
        self._written = {k: i for k, i in self._written.items() if k[0] >= start}
        self._folders = {c: f for c, f in self._folders.items() if c >= kept[0]}
        self._kept = kept
        if self.store.appends:
            folders = frozenset().union(*self._folders.values())
            self.store.kept(epoch, folders)
            if not self._kept_folders <= folders:
                # A folder holds no kept checkpoint's bytes now: collected soon, not
                # SWEEP_EVERY times later (small parts are left to the collection there).
                self._unretired = True
            self._kept_folders = folders
        # Keep the inputs after the oldest checkpoint still kept: a restore that finds the
        # newest damaged falls back to an older one and must replay from there.
        if self.committed.total > len(kept) and kept[0] > self._trimmed:
            self._trimmed = kept[0]
            if len(self._input_log) >= 2 * self._input_kept:
                self._input_log = trim_inputs(self._input_log, self._trimmed)
                self._input_kept = max(TRIM_AT, len(self._input_log))
        self._retire(epoch, parts, kept, by_manifest)
        for sink in self.sinks:
            sink.commit(epoch)
        self._uncollected = (kept, dict(self._folders))
        self._commits_uncollected += 1
        if self._commits_uncollected >= (
            COLLECT_EVERY
            if self._unretired or self.config.incremental
            else COLLECT_EVERY * SWEEP_EVERY
        ):
            self._collect()
        return at

    def _retire(
        self, epoch: int, parts: dict[int, dict[str, Any]], kept: list[int], by_manifest: bool
    ) -> None:
        """The checkpoint that this commit at ``epoch`` leaves unkept goes as its
        :meth:`_fate` says."""
        fates = self._fates
        fates[epoch] = self._fate(parts.values(), by_manifest)
        for old in [e for e in fates if e < kept[0]]:
            fate = fates.pop(old)
            if (fate == "retire" and self.store.retire(old)) or fate == "sweep":
                continue
            if fate == "drop":
                try:
                    self.store.drop_commit(old)
                    continue
                except OSError:
                    pass
            self._unretired = True  # left to the collection: soon

    def _collect(self) -> None:
        """Have the old checkpoints the commits so far left deleted (on the collector's
        thread)."""
        wanted, self._uncollected = self._uncollected, None
        self._commits_uncollected = 0
        self._unretired = False
        if wanted is None:
            return
        if self._collector is None:
            self._collector = _Collector(self.store, self.config.keep)
        self._collector.collect(*wanted)

    def settle(self) -> None:
        """Wait until the old checkpoints the commits so far left are deleted: before the
        store is read for a restore, and at the end of the run. A failure to delete is
        tried again at the next collection (as it always was)."""
        self._collect()
        if self._collector is not None:
            self._collector.settle()

    # -- interval mode ------------------------------------------------------------------------
    def request_soon(self) -> None:
        """Ask for a checkpoint as soon as one can be (interval mode: now, not after the
        interval; with ``checkpoint_every`` the next due epoch is as soon as it gets)."""
        if self.config.interval is not None and self._requested is None:
            self._next_request = time.monotonic()

    def maybe_request(self, request: Request) -> None:
        """With ``checkpoint_interval``: once it has passed since the last agreed request,
        ask every worker (through ``request(epoch) -> (all agreed, highest floor)``) for a
        checkpoint after an epoch none has passed. With ``checkpoint_every="auto"``: ask
        for the interval the controller chose, if the workers have not all agreed to it."""
        if self.cadence is not None:
            self.cadence.reschedule(request)
            return
        interval = self.config.interval
        if interval is None:
            return
        now = time.monotonic()
        if self._requested is not None:
            if not (self.committed and self.committed[-1] >= self._requested):
                return
            self._requested = None
            # Measured from the agreed request, not the commit: the gap between two
            # commits is then about the interval, not the interval plus a commit's latency.
            self._next_request = self._requested_at + interval
        if now < self._next_request:
            return
        # The floor moves on while the request travels: ask that far ahead of the last
        # floor heard, doubling the distance after each refusal and halving it after
        # each agreement, so it settles near how far the workers move in one round trip.
        epoch = max(self._floor, self.restored_epoch) + self._lookahead
        self._next_request = float("inf")  # no second request from inside this one
        agreed, floor = request(epoch)
        self._floor = max(self._floor, floor)
        if agreed:
            self._requested = epoch
            self._requested_at = now
            self._lookahead = max(1, self._lookahead // 2)
        else:
            self._lookahead = min(2 * self._lookahead, _MAX_LOOKAHEAD)
            self._next_request = now  # ask again, after the floor they answered


def _link(epoch: int, info: dict[str, Any]) -> dict[str, Any]:
    """A part as a link of an incremental chain: where it is and how to verify it."""
    link = {"epoch": epoch, "path": info["path"], "size": info["size"], "crc32": info["crc32"]}
    if "offset" in info:  # (in a links file)
        link["offset"] = info["offset"]
    return link


class _Collector:
    """Garbage collection of old checkpoints on a thread of its own (issue 30: deleting
    directories took ~2 ms of each commit, and inline the commit is on the computing
    thread). It deletes only checkpoints older than those kept, which no commit after it
    touches; only the newest request waiting is run (it subsumes the ones before). A
    failure is raised on the driver's thread at its next commit or :meth:`settle`, as
    it was when the driver collected itself. The thread ends after a second with
    nothing to do."""

    def __init__(self, store: CheckpointStore, keep: int) -> None:
        self.store = store
        self.keep = keep
        self._lock = threading.Condition()
        self._wanted: tuple[list[int], dict[int, frozenset[int]]] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._cpu = 0
        """The deletions' CPU time since :meth:`take_cpu` (ns)."""

    def collect(self, kept: list[int], folders: dict[int, frozenset[int]]) -> None:
        """Delete what the commits so far no longer need (``kept``, ``folders``: see
        :meth:`CheckpointStore.collect_garbage`), soon."""
        with self._lock:
            self._raise()
            self._wanted = (kept, folders)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="timely-checkpoint-gc", daemon=True
                )
                self._thread.start()
            self._lock.notify_all()

    def settle(self) -> None:
        """Wait until no deletion is waiting or under way."""
        with self._lock:
            while self._wanted is not None or self._busy:
                self._lock.wait()
            self._raise()

    def take_cpu(self) -> float:
        """Seconds of CPU the deletions took since the last call."""
        with self._lock:
            cpu, self._cpu = self._cpu, 0
        return cpu / 1e9

    def _raise(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._wanted is None:
                    self._lock.wait(1.0)
                if self._wanted is None:
                    self._thread = None
                    return
                kept, folders = self._wanted
                self._wanted, self._busy = None, True
            cpu = thread_time_ns()
            try:
                self.store.collect_garbage(self.keep, also=kept, folders=folders, upto=kept[-1])
            except BaseException as e:  # raised on the driver's thread
                with self._lock:
                    self._error = e
            finally:
                with self._lock:
                    self._cpu += thread_time_ns() - cpu
                    self._busy = False
                    self._lock.notify_all()
