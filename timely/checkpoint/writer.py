"""Checkpoint parts encoded, written and hashed: at once, or on a thread of their own.

Inline, the step loop is every worker's and the driver's thread, and a part's encoding,
file and checksum are on it. A thread helps only where the work releases the GIL for
long: Arrow's IPC encoding, the write and the hash of a large part (a whole part of a
table of 1M keys: ~16 MB, ~50 ms of hashing alone). A small part's write is a handful of
short system calls, each of which hands the GIL over and back: measured on a loaded
2-core machine (issue 30), a writer thread for 60-100 KB parts cut the loop's CPU a
little and added more to the process's (+52% against +25% for the table word count) and
to its wall time. So a part of :data:`LARGE` bytes or more goes to the thread
(:meth:`PartWriter.submit`), and a small one is written at once (:meth:`write_now`),
unless parts are still waiting on the thread (parts are reported in order).

A part is reported only once its file is written: the coordinator commits a checkpoint
only when every part is durable. A Ray worker has its own writer thread in its actor
(:mod:`timely.backends.ray`) and the same rule (:func:`is_large`): its loop hands the
GIL over as often (measured there too: the rows word count on Ray x2, +13 to +22% with
small parts on the loop against +24 to +31% on the thread).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from time import thread_time_ns
from typing import Any

from timely.checkpoint.store import CheckpointStore
from timely.comm import serialization
from timely.eventlog import EventLog, clock
from timely.state.columnar import is_columnar

_encode = serialization.encode
AsBin = serialization.AsBin
Embedded = serialization.Embedded
PIECE = serialization.PIECE
encode_pieces = serialization.encode_pieces

LARGE = 1 << 20
"""Parts of at least this many bytes (as far as the loop knows them: :func:`part_bytes`)
are written on the writer thread."""

Report = tuple[int, dict[str, Any]]
"""``(epoch, info)``: a part written, with what the manifest records of it and what the
coordinator measures (``"work"``, ``"at"``: see ``CheckpointCoordinator.part_written``)."""


def encode_part(part: dict[str, Any]) -> bytes:
    """A part's bytes as written, in one piece: each vertex's snapshot encoded on its own
    (those the loop left as data, ``Snapshots.defer_columns``), then the part. The reference
    :func:`part_pieces` (what hosts write) must equal, joined."""
    vertices = part["vertices"]
    if any(type(s) is not bytes for s in vertices.values()):
        part = {
            **part,
            "vertices": {v: s if type(s) is bytes else _encode(s) for v, s in vertices.items()},
        }
    return _encode(part)


def part_pieces(part: dict[str, Any]) -> list[Any]:
    """:func:`encode_part`'s bytes as pieces that join into them
    (:func:`~timely.comm.serialization.encode_pieces`), written and hashed as they are:
    an Arrow table's IPC stream and an encoded snapshot of ``PIECE`` bytes or more are
    not copied into the rest; a snapshot left as data is encoded in the same pass as
    the part (``AsBin``: the ``bin`` of its own encoding, as :func:`encode_part` has it).
    A part whose snapshots are all encoded already (rows) is packed whole:
    one copy of its bytes costs less than looking through it for pieces."""
    snaps = part["vertices"]
    if all(type(s) is bytes for s in snaps.values()):
        return [_encode(part)]
    vertices = {
        v: AsBin(s) if type(s) is not bytes else Embedded([s]) if len(s) >= PIECE else s
        for v, s in snaps.items()
    }
    return encode_pieces({**part, "vertices": vertices})


def write_encoded(
    store: CheckpointStore,
    epoch: int,
    worker: int,
    part: dict[str, Any],
    log: EventLog | None,
    workers: int | None = None,
) -> tuple[dict[str, Any], int]:
    """Encode ``part`` and write it as ``worker``'s (of ``workers``, else the part's
    own count), logging the write: what the manifest records of it, and when the write
    ended (``clock`` ns). Every host writes parts so."""
    t0 = clock()
    data = part_pieces(part)
    info = store.write_part(
        epoch,
        worker,
        workers or part["workers"],
        data,
        part.get("base"),
        part.get("moved", False),
    )
    t1 = clock()
    if log is not None:
        log.add(("c", t0, t1, epoch, "write"))
    return info, t1


def arrow_bytes(snap: dict[str, Any], bound: bool = False) -> int | None:
    """The bytes of the Arrow tables in a keyed snapshot left as data (what its IPC
    encoding writes, to within its headers); None when it holds anything else (its size
    is known only once encoded). With ``bound``, the whole buffers the tables refer to
    (~0.2 us a table, against ~5 us warm and ~14 us in a run for the bytes a slice
    uses, which Arrow finds by a pass over every buffer): at least that, unless two
    columns or chunks share a buffer, which it counts once (a ``ColumnState``'s tables,
    made by ``take`` and ``concat``, share none; a sum per chunk costs as much as the
    exact size)."""
    tables = snap.get("tables")
    if type(tables) is not dict:
        return None
    size = 0
    for table in tables.values():
        if not is_columnar(table):
            return None
        for entry in (*table["times"], *table.get("patches", ())):
            if bound:
                size += sum(t.get_total_buffer_size() for t in entry[1:])
            else:
                size += sum(t.nbytes for t in entry[1:])
    return size


def part_bytes(part: dict[str, Any], bound: bool = False) -> int | None:
    """A part's size as the loop knows it: its encoded snapshots' bytes and its Arrow
    tables' (None: a snapshot left as data that is not all Arrow); with ``bound``, at
    least that (:func:`arrow_bytes`)."""
    size = 0
    for data in part["vertices"].values():
        n = len(data) if type(data) is bytes else arrow_bytes(data, bound)
        if n is None:
            return None
        size += n
    return size


def is_large(part: dict[str, Any]) -> bool:
    """Whether a part is :data:`LARGE` as the loop knows it (a size not known is not):
    the bound first, the exact size only when the bound is large (a slice of a larger
    table, whose buffers it shares). Which thread writes a part is all it decides: a
    large part taken for small (buffers shared between columns) is written on the
    loop, as correctly, only slower."""
    bound = part_bytes(part, bound=True)
    if bound is None or bound < LARGE:
        return False
    size = part_bytes(part)
    return size is not None and size >= LARGE


class PartWriter:
    """Writes parts handed over (:meth:`submit`) one after another on its thread; the
    host takes the reports of those written (:meth:`ready`, :meth:`wait`) on its own
    thread, in the order they were handed over. A write that failed raises there."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        """What :meth:`write_now` writes with: the host's (the coordinator's, on the same
        thread: one list of recycled files, not two that take the same files)."""
        self._thread_store = store.sibling()
        """The thread's own: a store's list of recycled files is one thread's (two stores
        take the same recycled file apart by renames, as two workers' do); the links
        files the same (a worker's delta goes after its base, written by either)."""
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="timely-checkpoint-writer")
        self._pending: deque[Future[Report]] = deque()
        self.submitted = 0
        """Parts handed over so far (:meth:`wait` waits for the first ``n`` of them)."""

    def submit(
        self,
        epoch: int,
        worker: int,
        part: dict[str, Any],
        work: int,
        at: int,
        log: EventLog | None = None,
    ) -> None:
        """Have worker ``worker``'s ``part`` of the checkpoint at ``epoch`` written;
        ``work``: the nanoseconds checkpointing cost the worker's loop since its last part
        (the writer adds its own CPU time, which is GIL time it may take from the loop);
        ``at``: when the part was complete, on the loop's clock (ns), which the
        coordinator's cadence measures its windows by (the write follows at once; read
        on the loop, it is the loop's timeline whatever the writer thread waits for)."""
        self._pending.append(
            self._pool.submit(self._write, self._thread_store, epoch, worker, part, work, at, log)
        )
        self.submitted += 1

    def write_now(
        self, epoch: int, worker: int, part: dict[str, Any], work: int, log: EventLog | None
    ) -> Report:
        """Write ``part`` on this thread (the loop's), as :meth:`submit` would on its
        own: the encoding and the write are the loop's cost then, in its CPU time."""
        return self._write(self.store, epoch, worker, part, work, None, log)

    @staticmethod
    def _write(
        store: CheckpointStore,
        epoch: int,
        worker: int,
        part: dict[str, Any],
        work: int,
        at: int | None,
        log: EventLog | None,
    ) -> Report:
        """Write ``part`` through ``store`` on this thread, adding its CPU time to
        ``work``; complete ``at`` (ns), or when written (None: on the loop)."""
        cpu = thread_time_ns()
        info, t1 = write_encoded(store, epoch, worker, part, log)
        info["work"] = (work + thread_time_ns() - cpu) / 1e9
        info["at"] = (t1 if at is None else at) / 1e9
        return epoch, info

    @property
    def pending(self) -> bool:
        """Whether a part handed over has not been reported yet."""
        return bool(self._pending)

    def ready(self) -> list[Report]:
        """The reports of the parts written since the last call, oldest first, up to the
        first one still being written (a later part is never reported before it)."""
        pending = self._pending
        out = []
        while pending and pending[0].done():
            out.append(pending.popleft().result())
        return out

    def owes(self, upto: int) -> bool:
        """Whether one of the first ``upto`` parts handed over is not reported yet."""
        return upto > self.submitted - len(self._pending)

    def wait(self, upto: int | None = None) -> list[Report]:
        """:meth:`ready`, after waiting for the oldest part still being written (``upto``:
        for every one of the first ``upto`` parts handed over)."""
        pending = self._pending
        if upto is None:
            if pending:
                wait_for([pending[0]])
        else:
            owed = upto - (self.submitted - len(pending))
            if owed > 0:
                wait_for([pending[i] for i in range(owed)])
        return self.ready()

    def drain(self) -> None:
        """Wait for every write handed over and drop their reports and failures: the
        workers that handed them over are lost, and a restore is about to read the store
        (their files must not land after it, on the new workers' own)."""
        pending, self._pending = self._pending, deque()
        wait_for(pending)

    def close(self) -> None:
        """:meth:`drain`, end the thread and close the files its store kept open."""
        self.drain()
        self._pool.shutdown(wait=True)
        self._thread_store.close()
