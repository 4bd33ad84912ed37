"""Large runs of columnar state written to files and read back memory-mapped.

With the disk backend, a :class:`~timely.state.columnar.Spine` run of at least
:data:`SPILL_ROWS` rows is written once, as an uncompressed Arrow IPC file (its rows) and
a ``.npy`` file (its key hashes), in the worker's state directory, and read back through
``mmap``: the table and the hashes are views of the page cache, which the OS reads in
when a lookup touches them and drops under memory pressure, so a worker's anonymous
memory holds the small runs and one byte of live mask per row, not the state. A run is
never changed in place (the spine writes a new one and deletes the old), so a file is
written once and read many times, what ``mmap`` is good at.

Why not RocksDB, as the row path: a run is read by ``searchsorted`` over its hashes and
one ``take`` of the rows found, in C, with no per-key decoding; a key-value store would
put Python or a codec back on every key (see ``benchmarks/README.md``, "Columnar state
on disk"). A merge writes its output in slices of :data:`SLICE_ROWS` rows, so that it
never holds the merged run in memory.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

SPILL_ROWS = 65_536
"""Rows from which a run goes to a file (smaller runs stay in memory)."""
SLICE_ROWS = 65_536
"""Rows gathered and written at a time when a run is written."""


class RunFile:
    """A run's two files; :meth:`remove` deletes them (the mapped views stay readable
    until the last one is gone: the OS frees the pages then)."""

    __slots__ = ("paths",)

    def __init__(self, paths: tuple[str, str]) -> None:
        self.paths = paths

    def remove(self) -> None:
        for p in self.paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


class Spiller:
    """Where one state's runs go: files in ``directory`` (the worker's, made owner-only
    by the store), for runs of at least ``rows`` rows."""

    __slots__ = ("_prefix", "_seq", "directory", "rows")

    def __init__(self, directory: str, rows: int | None = None) -> None:
        self.directory = directory
        self.rows = SPILL_ROWS if rows is None else rows
        self._prefix = uuid.uuid4().hex[:12]
        self._seq = 0

    def wanted(self, n: int) -> bool:
        """Whether a run of ``n`` rows goes to a file."""
        return n >= self.rows

    def write(
        self, source: pa.Table, n: int, pieces: Iterable[tuple[np.ndarray[Any, Any], Any]]
    ) -> tuple[pa.Table, np.ndarray[Any, Any], RunFile]:
        """A run of ``n`` rows of ``source``, given in pieces (their positions in it and
        their hashes), written to a file a slice at a time and read back mapped: the
        table, the hashes and the files."""
        self._seq += 1
        base = os.path.join(self.directory, f"{self._prefix}-{self._seq}")
        arrow, npy = base + ".arrow", base + ".npy"
        run = RunFile((arrow, npy))
        try:
            _create(arrow)
            _create(npy)
            hashes = np.lib.format.open_memmap(npy, mode="w+", dtype=np.uint64, shape=(n,))
            at = 0
            with pa.OSFile(arrow, "wb") as sink, pa.ipc.new_file(sink, source.schema) as writer:
                for index, h in pieces:
                    hashes[at : at + len(h)] = h
                    at += len(h)
                    for lo in range(0, len(index), SLICE_ROWS):
                        writer.write_table(gather(source, index[lo : lo + SLICE_ROWS]))
            if at != n:
                raise ValueError(f"a run of {n} rows was given {at}")
            hashes.flush()
            del hashes
            with pa.memory_map(arrow) as mapped:
                table = pa.ipc.open_file(mapped).read_all()
            mapped_hashes: np.ndarray[Any, Any] = np.load(npy, mmap_mode="r")
        except BaseException:
            run.remove()
            raise
        return table, mapped_hashes, run


def _create(path: str) -> None:
    """A new empty file, readable and writable by its owner only."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def gather(table: pa.Table, index: np.ndarray[Any, Any]) -> pa.Table:
    """``table.take(index)`` as one chunk, taking from each of ``table``'s chunks on its
    own: Arrow's ``take`` on a table of many chunks (a mapped run has one per slice
    written) first concatenates them, which would read a whole run into memory to take
    a few rows of it."""
    batches = table.to_batches()
    if len(index) == 0:
        return table.schema.empty_table()
    if len(batches) <= 1:
        return table.take(pa.array(index, type=pa.int64())).combine_chunks()
    lengths = np.fromiter((b.num_rows for b in batches), dtype=np.int64, count=len(batches))
    starts = np.concatenate([[0], np.cumsum(lengths)])
    which = np.searchsorted(starts, index, side="right") - 1
    ordered = bool((np.diff(which) >= 0).all())
    order = np.arange(len(index)) if ordered else np.argsort(which, kind="stable")
    sw, si = which[order], np.asarray(index)[order]
    cuts = [0, *(np.flatnonzero(np.diff(sw)) + 1).tolist(), len(si)]
    parts = []
    for lo, hi in itertools.pairwise(cuts):
        b = int(sw[lo])
        parts.append(batches[b].take(pa.array(si[lo:hi] - starts[b], type=pa.int64())))
    got = pa.Table.from_batches(parts, schema=table.schema).combine_chunks()
    if ordered:
        return got
    back = np.empty(len(order), dtype=np.int64)
    back[order] = np.arange(len(order))
    return got.take(pa.array(back)).combine_chunks()
