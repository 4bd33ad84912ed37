"""Checkpoint scheduling on one worker: when each vertex is snapshotted, and which parts
are complete.

The part for epoch ``e`` is complete once each vertex it waits for has passed ``e``
(:func:`waited_for`): every vertex with state, every one with no output edge and every
one whose path summary is not the identity. A stateless vertex between them has passed
``e`` once the vertex it feeds has, so what it buffered for ``e`` has left too. A vertex
is snapshotted for every checkpoint epoch it has passed since its last snapshot, and the
worker's ``_notify`` asks :meth:`Snapshots.hold_back` before each notification, so that
no notification at a later epoch changes a vertex's state before its snapshot for the
checkpoint in between.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter, itemgetter
from time import thread_time_ns
from typing import Any

from progress import Location, source, target
from timely.checkpoint.config import COUNT_CHAIN
from timely.checkpoint.cost import LoopCost
from timely.checkpoint.writer import arrow_bytes
from timely.comm import serialization
from timely.eventlog import clock
from timely.graph.plan import Plan
from timely.state.columnar import is_columnar
from timely.state.keyed import StatefulVertex
from timely.vertex import Vertex
from timely.worker.ports import SnapshotHost

Part = tuple[int, dict[str, Any]]
"""``(epoch, part)``: one worker's share of the checkpoint at ``epoch``."""

PART_FORMAT = 2
"""A checkpoint part: ``{"format", "epoch", "worker", "workers", "base", "vertices": {v:
bytes}}``, each vertex's snapshot encoded on its own (see :meth:`Snapshots.take`);
``base``: the epoch of this worker's earlier part whose snapshots the deltas in this one
are on (None: every snapshot whole)."""

_encode = serialization.encode
_first = itemgetter(0)
_node = attrgetter("node")
_is_flat = serialization._is_flat
__all__ = ["PART_FORMAT", "Part", "Snapshots", "arrow_bytes", "frozen", "waited_for"]


def waited_for(plan: Plan, vertices: Sequence[Vertex]) -> list[int]:
    """The vertices a checkpoint waits for, in order: all but those that hold no state
    (``snapshot_at`` as :class:`~timely.vertex.Vertex` has it), leave time as it is (no
    ``internal`` path summary) and feed, through such vertices, one that it waits for.

    Such a vertex has passed ``e`` once the vertex it feeds has: that one's inputs'
    frontiers are past ``e`` only when nothing upstream (the first one's inbox, its
    capabilities, the batches it sent) is still at ``e`` or before. So it is neither
    scanned, snapshotted nor held back (issue 30: six of the eight vertices of a table
    word count, whose checks and empty snapshots were ~30% of its checkpoints' Python
    calls). A vertex with no output edge is always waited for: what it does with an
    epoch (a user's function with effects) is done before the checkpoint after it."""
    specs = plan.vertices
    stateless = {
        v
        for v, x in enumerate(vertices)
        if getattr(type(x), "snapshot_at", None) is Vertex.snapshot_at and specs[v].internal is None
    }
    if not stateless:
        return list(range(len(specs)))
    feeds: list[set[int]] = [set() for _ in specs]  # per vertex, the vertices feeding it
    waited: set[int] = set()
    for v in range(len(specs)):
        targets = {e.dst for out in plan.out_edges[v] for e in out}
        for w in targets:
            feeds[w].add(v)
        if v not in stateless or not targets:
            waited.add(v)
    skipped: set[int] = set()
    todo = list(waited)
    while todo:
        for u in feeds[todo.pop()]:
            if u in stateless and u not in waited and u not in skipped:
                skipped.add(u)
                todo.append(u)
    return [v for v in range(len(specs)) if v not in skipped]


def frozen(snap: dict[str, Any], rows: bool = True) -> bool:
    """Whether a keyed vertex's own snapshot (:meth:`StatefulVertex.snapshot_at`) shares
    nothing the vertex may change: its containers are made for it (tables, their times,
    the key and value columns), so it is a copy when every column holds only scalars and
    tuples of them. A value that is a list, a dict or anything else may be changed in
    place by the next notification: such a snapshot is encoded at once.

    A columnar table's snapshot (:class:`~timely.state.columnar.ColumnState`) is a copy
    by construction: fresh lists of Arrow tables, which nothing changes in place (an
    upsert makes new runs; a run's file, once replaced, stays mapped). ``rows=False``:
    only those count (a snapshot with a row table is encoded at once)."""
    tables = snap.get("tables")
    if type(tables) is not dict:
        return False
    for table in tables.values():
        if type(table) is not dict:
            return False
        if "columnar" in table:
            if not is_columnar(table):
                return False
            continue
        if not rows:
            return False
        for entries in (table.get("times", ()), table.get("patches", ())):
            for entry in entries:
                if type(entry) is not tuple:
                    return False
                for column in entry[1:]:
                    if type(column) is not list or not _is_flat(column):
                        return False
    return True


class Snapshots:
    """One worker's checkpoint schedule: ``every`` epochs, or the epochs the driver asks
    for (``every=None``); ``start`` is the first epoch of the run (after a restore, the
    one after the checkpoint).

    The schedule is a list of segments ``(first, every)``: the epochs ``first + i *
    every`` (``i >= 0``; ``first`` alone when ``every`` is None) up to the next segment's
    ``first``. ``checkpoint_every=k`` is one segment ``(k - 1, k)``. The driver changes it
    from an epoch on (:meth:`request`): one epoch (``checkpoint_interval``) or a new
    cadence (``checkpoint_every="auto"``)."""

    def __init__(
        self, worker: SnapshotHost, every: int | None, start: int, incremental: int = 0
    ) -> None:
        self.w = worker
        self._segments: list[tuple[int, int | None]] = [] if every is None else [(every - 1, every)]
        self._until: int | None = None
        self._boundaries: dict[int, tuple[int, int | None]] = {}
        """Per vertex, its next boundary and the last snapshot it was found after: asked of
        every vertex at every step, it changes only with a snapshot or a new schedule
        (which clears this)."""
        self.defer_columns = False
        """Leave a snapshot of columnar tables only as data (a copy already:
        :func:`frozen`), encoded when its part is written
        (:func:`~timely.checkpoint.writer.part_pieces`), for a large part on the host's
        writer thread: Arrow's IPC encoding releases the GIL, msgpack does not (a row
        snapshot encoded there held the loop up as long: issue 30)."""
        self.cost = LoopCost()
        """What checkpointing has cost the step loop since the last part was reported
        (see :mod:`timely.checkpoint.cost`): every span in this class's checks and
        snapshots, and the loop's waits while a notification is held back."""
        self.max_notified = -1
        """The latest epoch any vertex here has been notified at."""
        plan = worker.plan
        self.vertices = waited_for(plan, worker.vertices)
        """The vertices each part waits for (:func:`waited_for`)."""
        self._targets: dict[int, list[Location]] = {}
        """Per vertex, its inputs' locations (whose frontiers :meth:`open_at` reads), made
        on first use (:meth:`_inputs`)."""
        self._moving = (
            frozenset(v for v, spec in enumerate(plan.vertices) if spec.kind == "source")
            if plan.live_control
            else frozenset()
        )
        """Sources whose partitions may move between workers: one here is open while any
        worker holds a capability of it (one with none may be handed some)."""
        self.dirty: set[int] = set(self.vertices)
        """The vertices that may have passed their next checkpoint epoch since the last
        :meth:`scan` (issue 30: a scan of every vertex at every step cost ~0.2 ms a
        checkpoint). Whether ``v`` can still act at an epoch (:meth:`open_at`) changes
        only when a frontier at its inputs moves, a capability of its goes, it runs or a
        batch leaves its inbox, or its schedule changes; the host adds ``v`` for the
        first three (:meth:`frontiers_moved`; the worker adds the rest to this set as its
        own ``_touched``), this class for the last.
        (A vertex that is finished is taken into a part by the scan's second pass.)"""
        self.snapped = {v: start - 1 for v in self.vertices}
        """Per vertex, the last epoch it was snapshotted after."""
        self.parts: dict[int, dict[int, Any]] = {}
        self.moved: set[int] = set()
        """Epochs of parts whose sources' partitions are not where a restore on as many
        workers deals them (moved live): a restore then takes every part's offsets."""
        self.done: list[Part] = []
        self.incremental = incremental
        """Incremental checkpoints: a whole part after every ``incremental`` deltas (0: every
        part whole; negative, ``checkpoint_incremental=True``: by size, see
        :meth:`whole_next`)."""
        self.base: int | None = None
        """The epoch of the latest part begun, which the next part's deltas are on (None:
        the next part is whole). Every vertex is snapshotted for every part, in epoch
        order, so the part before is every vertex's previous snapshot."""
        self.deltas = 0
        """Parts begun since the last whole one."""
        self._whole_bytes: int | None = None
        """The size of the latest whole part completed (None: none yet, or not known)."""
        self._chain_bytes: int | None = 0
        """The sizes of the deltas completed since it, added up (None: one not known)."""
        self.bases: dict[int, int | None] = {}
        """Per part in progress, the base its deltas are on (None: whole), fixed at its
        first snapshot."""
        self.keyed = (
            [x for x in worker.vertices if isinstance(x, StatefulVertex)] if incremental else []
        )
        """With incremental checkpoints, the vertices whose tables can be written as deltas."""
        for vertex in self.keyed:
            vertex.keep_changes()

    @property
    def segments(self) -> list[tuple[int, int | None]]:
        """The schedule, in order of ``first`` (empty: no checkpoint until asked)."""
        return self._segments

    @segments.setter
    def segments(self, segments: list[tuple[int, int | None]]) -> None:
        self._segments = segments
        self._boundaries.clear()
        self.dirty.update(self.vertices)

    @property
    def until(self) -> int | None:
        """A leaving worker's: no checkpoint at this epoch or later has a part from it."""
        return self._until

    @until.setter
    def until(self, epoch: int | None) -> None:
        self._until = epoch
        self._boundaries.clear()
        self.dirty.update(self.vertices)

    def frontiers_moved(self, changes: Iterable[tuple[Location, Any, int]]) -> None:
        """The frontiers at these locations moved (``Tracker.propagate_all``'s changes):
        the next :meth:`scan` looks at their vertices."""
        self.dirty.update(map(_node, map(_first, changes)))

    def hold_back(self, v: int, epoch: int) -> bool:
        """Whether a notification of ``v`` at ``epoch`` must wait: the vertex's snapshot for
        a checkpoint before ``epoch`` is not taken yet (and cannot be, yet)."""
        if v not in self.snapped:
            return False  # no state, and not waited for (:func:`waited_for`)
        t0 = thread_time_ns()
        held = self._hold_back(v, epoch)
        cost = self.cost
        if held:
            cost.hold(v)
        else:
            cost.release(v)
        cost.section(t0, thread_time_ns())
        return held

    def _hold_back(self, v: int, epoch: int) -> bool:
        boundary = self.next_boundary(v)
        if boundary is not None and epoch > boundary:
            self.snapshot(v)
            boundary = self.next_boundary(v)
            if boundary is not None and epoch > boundary:
                return True
        if epoch > self.max_notified:
            self.max_notified = epoch
        return False

    def _open_epochs(self, v: int) -> Iterator[int]:
        """The epochs ``v`` may still receive, be notified or send at: its inputs'
        frontiers (most often the earliest), its notification requests, its capabilities
        and its inbox."""
        frontier = self.w.tracker.frontier
        targets = self._targets.get(v)
        for loc in self._inputs(v) if targets is None else targets:
            for t in frontier(loc):
                yield t[0]
        ctx = self.w.contexts[v]
        for t in ctx.requests:
            yield t[0]
        for t in ctx.caps:
            yield t[0]
        for t in self.w.queued(v):
            yield t[0]
        if v in self._moving:
            for t in self.w.tracker.pointstamp_frontier(source(v, 0)):
                yield t[0]

    def _inputs(self, v: int) -> list[Location]:
        locs = self._targets[v] = [target(v, i) for i in range(self.w.plan.vertices[v].inputs)]
        return locs

    def open_epoch(self, v: int) -> int | None:
        """The lowest epoch ``v`` may still receive, be notified or send at (None: it is
        finished for good)."""
        return min(self._open_epochs(v), default=None)

    def finished(self, v: int) -> bool:
        """``open_epoch(v) is None``, stopping at the first epoch found."""
        return next(self._open_epochs(v), None) is None

    def open_at(self, v: int, epoch: int) -> bool:
        """Whether ``v`` may still act at ``epoch`` or earlier: ``open_epoch(v) <= epoch``,
        stopping at the first witness (it is asked of every vertex at every step, so it
        is :meth:`_open_epochs` written out, without a generator)."""
        frontier = self.w.tracker.frontier
        targets = self._targets.get(v)
        for loc in self._inputs(v) if targets is None else targets:
            for t in frontier(loc):
                if t[0] <= epoch:
                    return True
        ctx = self.w.contexts[v]
        for t in ctx.requests:
            if t[0] <= epoch:
                return True
        for t in ctx.caps:
            if t[0] <= epoch:
                return True
        for t in self.w.queued(v):
            if t[0] <= epoch:
                return True
        if v in self._moving:
            for t in self.w.tracker.pointstamp_frontier(source(v, 0)):
                if t[0] <= epoch:
                    return True
        return False

    def due(self, after: int, upto: int | None) -> range | list[int]:
        """The checkpoint epochs in ``(after, upto]`` (``upto=None``: the first one only).

        With ``checkpoint_every=k`` they are the epochs ``e`` with ``(e + 1) % k == 0``;
        on request, the epoch the driver asked for (and, with a cadence, every ``every``
        epochs after it)."""
        if self.until is not None:  # a leaver: nothing at or after its leave
            bound = self.until - 1 if upto is None else min(upto, self.until - 1)
            return [e for e in self._due(after, bound) if e < self.until][
                : 1 if upto is None else None
            ]
        return self._due(after, upto)

    def _due(self, after: int, upto: int | None) -> range | list[int]:
        segments = self.segments
        if len(segments) == 1:  # the common case, asked of every vertex at every step
            return _grid(*segments[0], after, upto)
        out: list[int] = []
        for i, (first, every) in enumerate(segments):
            last = segments[i + 1][0] - 1 if i + 1 < len(segments) else None
            if last is not None and last <= after:
                continue
            bound = last if upto is None else upto if last is None else min(upto, last)
            epochs = _grid(first, every, after, bound)
            if upto is None and epochs:
                return [epochs[0]]
            out.extend(epochs)
        return out

    def next_boundary(self, v: int) -> int | None:
        """The next checkpoint epoch ``v`` must be snapshotted after before a notification
        at a later epoch may change its state (None: none is due)."""
        after = self.snapped[v]
        cached = self._boundaries.get(v)
        if cached is not None and cached[0] == after:
            return cached[1]
        segments = self._segments
        if len(segments) == 1 and self._until is None:  # _grid's first epoch, written out
            first, every = segments[0]
            boundary = (
                first
                if after < first
                else None
                if every is None
                else first + ((after - first) // every + 1) * every
            )
        else:
            due = self.due(after, None)
            boundary = due[0] if due else None
        self._boundaries[v] = (after, boundary)
        return boundary

    def snapshot(self, v: int) -> None:
        """Snapshot ``v`` for every checkpoint epoch it has completely passed since its
        last snapshot: each of them, not only the latest, so that a vertex whose
        frontier jumps over several (a stateless step, a burst of epochs in one step)
        still has its share in every one of those checkpoints.

        One state serves them all: :meth:`hold_back` keeps ``v`` from being notified
        after the first of them before this snapshot, and what it received
        after it sits in per-time tables that ``snapshot_at(e)`` leaves out."""
        boundary = self.next_boundary(v)
        if boundary is None or self.open_at(v, boundary):
            return  # the common case, checked at every step: nothing is due yet
        low = self.open_epoch(v)
        # A finished vertex's state is final: it serves every checkpoint epoch after its
        # last snapshot, up to the latest epoch this worker has seen.
        upto = self.w.max_epoch if low is None else low - 1
        for epoch in self.due(self.snapped[v], upto):
            self.take(v, epoch)

    def floor(self) -> int:
        """The latest epoch a checkpoint here can no longer be taken after: some vertex has
        been notified at it, or snapshotted after it. Any later epoch can, even one the
        sources have read past (they resume from their read history), so the driver asks
        for the one just after the highest floor: the checkpoint then completes as soon
        as the slowest worker's frontier passes it."""
        return max(self.max_notified, max(self.snapped.values(), default=-1))

    def request(self, epoch: int, every: int | None = None) -> bool:
        """The driver asks for a checkpoint after ``epoch``; refused when ``epoch`` is not
        after :meth:`floor` (the driver then asks for a later one).

        Without ``every`` (``checkpoint_interval``) that epoch is the whole schedule: an
        earlier one asked for was either committed or given up. With ``every``
        (``checkpoint_every="auto"``) the schedule from ``epoch`` on becomes every
        ``every`` epochs, and the one before ``epoch`` stays: its epochs this worker has
        not passed yet are still checkpointed, as the other workers' are.

        Any epoch after the floor will do, because no vertex here has yet been notified
        at it or snapshotted after it; workers that agree to the same request have the
        same checkpoint epochs from ``epoch`` on, and only epochs for which every worker
        wrote a part are committed."""
        if epoch <= self.floor():
            return False
        if every is None:
            self.segments = [(epoch, None)]
            if self.bases:
                # A part under way is given up (its epoch is no longer asked for): the
                # next part is whole, not a delta on a part that will never be written.
                self.base = None
        else:
            kept = [s for s in self.segments if s[0] < epoch]
            kept.append((epoch, every))
            # Segments that end before every vertex's last snapshot matter no more.
            low = min(self.snapped.values(), default=epoch)
            while len(kept) > 1 and kept[1][0] <= low + 1:
                del kept[0]
            self.segments = kept
        self.w.recheck_notifications()
        return True

    def whole_next(self) -> bool:
        """Whether the next part begun is whole: the first one, after ``incremental``
        deltas, or (``checkpoint_incremental=True``, ``BY_SIZE``) once the deltas
        completed since the last whole part add up to half its size, or after
        ``-incremental`` of them (``DEFAULT_CHAIN``). A chain costs a restore what its
        bytes do, so a whole part of 1M keys (~6 MB) need not be written again after
        ten 60 KB deltas. Where a part's size is unknown here (a snapshot left as data that
        is not all Arrow: none now), after :data:`COUNT_CHAIN` deltas."""
        if self.base is None:
            return True
        every = self.incremental
        if every > 0:
            return self.deltas >= every
        if self.deltas >= -every:
            return True
        whole, chain = self._whole_bytes, self._chain_bytes
        if whole is None or chain is None:
            return self.deltas >= COUNT_CHAIN
        return 2 * chain >= whole

    def _sized(self, base: int | None, vertices: dict[int, Any]) -> None:
        """A part is complete: count its size towards :meth:`whole_next`'s rule."""
        size: int | None = 0
        for data in vertices.values():
            if data is None:  # a stateless vertex: nothing written
                continue
            n = len(data) if type(data) is bytes else arrow_bytes(data)
            if n is None:
                size = None  # left as data, not all Arrow: not known here
                break
            size += n  # type: ignore[operator]
        if base is None:
            self._whole_bytes, self._chain_bytes = size, 0
        elif self._chain_bytes is not None:
            self._chain_bytes = None if size is None else self._chain_bytes + size

    def take(self, v: int, epoch: int) -> None:
        """Snapshot ``v`` for the checkpoint at ``epoch``, encoded at once.

        Encoding here is what makes the snapshot a copy: the vertex may change its state
        in place (a ``[value, count]`` entry, a user's dict) as soon as it is notified of
        the next epoch, possibly later in this same step."""
        ctx = self.w.contexts[v]
        ctx.now = None
        t0 = clock()
        if epoch not in self.bases:
            whole = self.whole_next()
            self.bases[epoch] = None if whole else self.base
            self.base = epoch
            self.deltas = 0 if whole else self.deltas + 1
        base = self.bases[epoch]
        vertex = self.w.vertices[v]
        snap: dict[str, Any] | None
        try:
            own = (
                isinstance(vertex, StatefulVertex)
                and type(vertex).snapshot_at is StatefulVertex.snapshot_at
            )
            if own and self.incremental:
                assert isinstance(vertex, StatefulVertex)
                snap = vertex.snapshot_at(epoch, base)
                vertex.snapshot_taken(epoch)
            else:
                snap = vertex.snapshot_at(epoch)
            data: bytes | dict[str, Any] | None
            if snap is None:
                data = None
            elif own and self.defer_columns and frozen(snap, rows=False):
                data = snap  # a copy already: encoded when its part is written (part_pieces)
            else:
                data = _encode(snap)
            if snap is not None and snap.get("moved"):  # partitions not where a restore deals them
                self.moved.add(epoch)
        except Exception as e:
            ctx.user_error(e, (epoch,), None, type(vertex).snapshot_at)
        t1 = clock()
        log = self.w.log
        if log is not None:
            log.add(("c", t0, t1, epoch, "snapshot", v))
        part = self.parts.setdefault(epoch, {})
        part[v] = data  # None for a stateless vertex: left out of the written part
        self.snapped[v] = epoch
        self.cost.release(v)
        self.w.recheck_notifications()  # notifications held back for this snapshot may go now

    def scan(self) -> None:
        """Snapshot what is due; hand over every part that is complete, oldest first."""
        if not (self.dirty or self.parts or self._moving):
            return  # nothing to look at (most steps): not worth the two clock reads
        t0 = thread_time_ns()
        try:
            self._scan()
        finally:
            self.cost.section(t0, thread_time_ns())

    def _scan(self) -> None:
        snapped, boundaries, dirty = self.snapped, self._boundaries, self.dirty
        if self._moving:
            dirty.update(self._moving)  # (a handover elsewhere may close one here)
        if dirty:
            todo = sorted(dirty)
            dirty.clear()
            for v in todo:
                # snapshot(v)'s first test, written out: this runs at every step.
                if v not in snapped:
                    continue  # not waited for (:func:`waited_for`)
                cached = boundaries.get(v)
                if (
                    cached is not None
                    and cached[0] == snapped[v]
                    and (cached[1] is None or self.open_at(v, cached[1]))
                ):
                    continue
                self.snapshot(v)
        if not self.parts:
            return
        for epoch in sorted(self.parts):
            part = self.parts[epoch]
            missing = [v for v in self.vertices if v not in part]
            # A finished vertex's state is final and, by hold_back, reflects
            # no epoch after the one following its last snapshot: valid for this part.
            if not all(snapped[v] < epoch and self.finished(v) for v in missing):
                continue
            for v in missing:
                self.take(v, epoch)
            del self.parts[epoch]
            base = self.bases.pop(epoch, None)
            moved = epoch in self.moved
            self.moved.discard(epoch)
            if self.incremental < 0:
                self._sized(base, part)
            self.done.append(
                (
                    epoch,
                    {
                        "format": PART_FORMAT,
                        "epoch": epoch,
                        "worker": self.w.index,
                        "workers": len(self.w.members_at(epoch)),
                        "base": base,
                        "vertices": {v: data for v, data in part.items() if data is not None},
                        "moved": moved,
                    },
                )
            )
            for older in [e for e in self.parts if e < epoch]:
                del self.parts[older]  # superseded (a target the driver gave up on)
                self.bases.pop(older, None)
                # Parts on it were written as deltas on a part that never will be: never
                # committed (the driver finds no such part); the next part is whole.
                self.base = None
            if self.incremental:
                self._handed_over()

    def _handed_over(self) -> None:
        """A part is complete: drop what only deltas on bases no part will use needed."""
        keep = min([e for e in (self.base, *self.bases.values()) if e is not None], default=None)
        if keep is None:
            return
        for vertex in self.keyed:
            vertex.forget_bases(keep)

    def take_work(self) -> int:
        """Nanoseconds checkpointing has cost the step loop since the last call (see
        :attr:`cost`): what a host reports with the next part it hands over (for
        ``checkpoint_every="auto"``). The cost of parts never completed (superseded) goes
        with the next one."""
        return self.cost.take()

    def take_parts(self) -> list[Part]:
        """Checkpoint parts completed since the last call, ``(epoch, part)`` in epoch order.

        Each vertex's snapshot in a part is already encoded (bytes) or a copy already
        (a columnar table's Arrow tables, :func:`frozen`), so the part owes nothing to
        the live state and may be written at leisure."""
        out, self.done = self.done, []
        return out


def _grid(first: int, every: int | None, after: int, upto: int | None) -> range | list[int]:
    """The epochs ``first + i * every`` (``i >= 0``; ``first`` alone when ``every`` is
    None) in ``(after, upto]`` (``upto=None``: the first one only)."""
    if after < first:
        start = first
    elif every is None:
        return []
    else:
        start = first + ((after - first) // every + 1) * every
    if every is None:
        return [start] if upto is None or start <= upto else []
    return range(start, (start if upto is None else upto) + 1, every)
