"""Keyed state held as columns: per time, one Arrow table with one row per key.

The table API's stateful operators (running aggregates, windows) keep what they carry
across epochs here instead of in a ``{key: value}`` dict, so no Python runs per key:

- a time's rows are an :class:`Arranged` table, sorted by the key's ``stable_hash``
  (computed by :func:`~timely.routing.columns.key_hashes`, the same hash the exchange
  routes by), with the hashes kept beside it as a numpy array. Finding a batch of keys
  is one ``searchsorted``; an upsert is one ``take`` of the kept rows and the new ones
  in hash order (differential dataflow's arrangement, with one batch per time where it
  keeps a spine of them);
- a key's bin is its hash modulo the bins, so a migration or a rescale selects a bin's
  rows with one numpy mask, and they land in the same bins as the row path's keys
  (the brief's invariant 8);
- snapshots carry the tables as they are (``timely.comm.serialization`` writes Arrow
  IPC, no per-row encoding). Arrow arrays are immutable, so a snapshot never needs a
  copy, and no state ever shares a buffer a user could still change;
- incremental checkpoints carry, per time, the rows of the keys changed since the base
  and the keys removed, as Arrow tables (:func:`apply_deltas` applies a chain).

:class:`ColumnState` answers the same calls as :class:`~timely.state.keyed.KeyedState`
(snapshot, restore, extract, install, delta ...), so a
:class:`~timely.state.keyed.StatefulVertex` holds either kind and checkpoints,
migrations and rescales treat both alike. A snapshot says which it is with
``"columnar": 1``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from progress import Timestamp
from timely.routing.columns import ColumnHasher, key_hashes
from timely.state.spill import RunFile, Spiller, gather

COLUMNAR = 1
"""The value of ``"columnar"`` in a snapshot of this format."""

Hashes = np.ndarray[Any, Any]

Change = tuple[pa.Table, bool]
"""A change to one time's table, for an incremental checkpoint's delta: ``(rows, True)``
the rows an upsert put (keys unique; what those keys hold until they change again),
``(keys, False)`` the key columns of rows any other change touched."""
PIECE_ROWS = 1 << 20
"""Rows of a run merged at a time (what a merge's plan holds at once)."""


class ColumnsRoom(Protocol):
    """What the disk backend's store gives columnar state: a directory of the worker's
    own for run files (:meth:`~timely.state.disk.StateStore.columns_dir`)."""

    def columns_dir(self) -> str: ...


class Arranged:
    """One time's rows: keys unique, sorted by key hash, the hashes beside them."""

    __slots__ = ("file", "hashes", "keys", "table")

    def __init__(
        self,
        table: pa.Table,
        hashes: Hashes,
        keys: tuple[str, ...],
        file: RunFile | None = None,
    ) -> None:
        self.table = table
        self.hashes = hashes
        self.keys = keys
        self.file = file
        """The files ``table`` and ``hashes`` are mapped from (None: in memory)."""

    @classmethod
    def build(
        cls, table: pa.Table, keys: tuple[str, ...], hashers: Sequence[ColumnHasher]
    ) -> Arranged:
        """``table`` (keys unique) arranged: sorted by key hash."""
        h = key_hashes(table, keys, list(hashers))
        order = np.argsort(h, kind="stable")
        return cls(_take(table, order), h[order], keys)

    def __len__(self) -> int:
        return len(self.hashes)

    def find(self, rows: pa.Table, h: Hashes) -> np.ndarray[Any, Any]:
        """Per row of ``rows`` (hashes ``h``), the position of its key here, or -1."""
        n = len(self.hashes)
        if n == 0 or len(h) == 0:
            return np.full(len(h), -1, dtype=np.intp)
        # Needles in order: searchsorted then walks the table once instead of jumping
        # around it (3-10x faster for many keys in a large table).
        order = np.argsort(h, kind="stable")
        pos = np.empty(len(h), dtype=np.intp)
        pos[order] = np.searchsorted(self.hashes, h[order])
        at = np.minimum(pos, n - 1)
        hit = self.hashes[at] == h
        cand = np.flatnonzero(hit)
        out = np.full(len(h), -1, dtype=np.intp)
        if cand.size:
            same = _same_keys(self.table, at[cand], rows, cand, self.keys)
            out[cand[same]] = at[cand[same]]
            for i in cand[~same].tolist():  # another key of the same hash: rare
                out[i] = self._scan(rows, i, int(h[i]), int(pos[i]))
        return out

    def _scan(self, rows: pa.Table, i: int, h: int, start: int) -> int:
        want = _key_at(rows, i, self.keys)
        j = start
        while j < len(self.hashes) and int(self.hashes[j]) == h:
            if _equal_keys(_key_at(self.table, j, self.keys), want):
                return j
            j += 1
        return -1

    def upsert(self, rows: pa.Table, h: Hashes) -> Arranged:
        """This table with ``rows`` (keys unique among them) put in: a row whose key is
        here replaces it, the others are added."""
        pos = self.find(rows, h)
        keep = np.ones(len(self.hashes), dtype=bool)
        keep[pos[pos >= 0]] = False
        return self._merged(keep, rows, h)

    def remove(self, rows: pa.Table, h: Hashes) -> Arranged:
        """This table without the keys of ``rows``."""
        pos = self.find(rows, h)
        keep = np.ones(len(self.hashes), dtype=bool)
        keep[pos[pos >= 0]] = False
        kept = np.flatnonzero(keep)
        return Arranged(
            _take(self.table, kept, mapped=self.file is not None), self.hashes[kept], self.keys
        )

    def _merged(self, keep: Hashes, rows: pa.Table, h: Hashes) -> Arranged:
        """The kept rows and ``rows``, in hash order: one ``take`` of both."""
        if len(rows) == 0 and bool(keep.all()):
            return self
        source, pieces = self.merge_plan(keep, rows, np.arange(len(rows)), h)
        index, hashes = _joined(pieces)
        mapped = self.file is not None
        return Arranged(_take(source, index, mapped=mapped), hashes, self.keys)

    def merge_plan(
        self, keep: Hashes, other: pa.Table, at: Hashes, h: Hashes
    ) -> tuple[pa.Table, Iterator[tuple[Hashes, Hashes]]]:
        """The kept rows and the rows ``at`` of ``other`` (hashes ``h``) in hash order:
        a table of both, and pieces of the merged run in order, each the positions of its
        rows in that table and their hashes. A piece covers :data:`PIECE_ROWS` rows of
        this run, so that a merge into a run in a file never holds a plan for all of it."""
        order = np.argsort(h, kind="stable")
        rh = h[order]
        new_at = self.table.num_rows + np.asarray(at)[order]
        source = self.table
        if len(at):
            other = other.select(self.table.column_names).cast(self.table.schema)
            source = pa.concat_tables([self.table, other])
        # Each new row goes after the old rows of hashes up to its own: its place among
        # all old rows says which piece it lands in (piece c: places in (lo, hi]).
        place = np.searchsorted(self.hashes, rh, side="right")
        n_old = len(self.hashes)

        def pieces() -> Iterator[tuple[Hashes, Hashes]]:
            for lo in range(0, max(n_old, 1), PIECE_ROWS):
                hi = min(lo + PIECE_ROWS, n_old)
                a = 0 if lo == 0 else int(np.searchsorted(place, lo, side="right"))
                b = len(place) if hi >= n_old else int(np.searchsorted(place, hi, side="right"))
                kept = np.flatnonzero(keep[lo:hi]) + lo
                kh = np.asarray(self.hashes[kept])
                nh = rh[a:b]
                if len(nh) == 0:
                    yield kept, kh
                    continue
                slots = np.searchsorted(kh, nh, side="right") + np.arange(len(nh))
                n = len(kh) + len(nh)
                from_new = np.zeros(n, dtype=bool)
                from_new[slots] = True
                index = np.empty(n, dtype=np.intp)
                index[~from_new] = kept
                index[slots] = new_at[a:b]
                hashes = np.empty(n, dtype=np.uint64)
                hashes[~from_new] = kh
                hashes[slots] = nh
                yield index, hashes

        return source, pieces()

    def rows_at(self, positions: np.ndarray[Any, Any]) -> pa.Table:
        return _take(self.table, positions, mapped=self.file is not None)

    def in_bins(self, bins: Iterable[int], nbins: int) -> np.ndarray[Any, Any]:
        """Per row, whether its key's bin is in ``bins``."""
        wanted = np.zeros(nbins, dtype=bool)
        wanted[list(bins)] = True
        mask: np.ndarray[Any, Any] = wanted[(self.hashes % np.uint64(nbins)).astype(np.intp)]
        return mask


class Found:
    """A lookup's answer: which rows of a table have a key held (``index``, ascending),
    what is held for each (``held``, row for row), and where (per run, its live mask and
    the positions):
    an upsert of the same keys right after kills them there without looking them up
    again. Ignored (the keys looked up again) once the spine changes, or when the rows
    upserted are not as many as those looked up with the same sum of key hashes (another
    set of keys, or the lookup's keys repeated)."""

    __slots__ = ("checksum", "count", "held", "index", "spine", "version", "where")

    def __init__(
        self,
        index: np.ndarray[Any, Any],
        held: pa.Table,
        spine: Spine | None,
        where: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
        h: Hashes | None = None,
    ) -> None:
        self.index = index
        self.held = held
        self.spine = spine
        self.version = -1 if spine is None else spine._version
        self.where = where
        self.count = -1 if h is None else len(h)
        self.checksum = _hash_sum(h)

    def covers(self, spine: Spine, h: Hashes) -> bool:
        """Whether an upsert of rows with key hashes ``h`` into ``spine`` may trust it."""
        return (
            self.spine is spine
            and self.version == spine._version
            and self.count == len(h)
            and self.checksum == _hash_sum(h)
        )


def _hash_sum(h: Hashes | None) -> int:
    """The hashes added up (wrapping): a set of keys' fingerprint, in one pass."""
    return -1 if h is None else int(np.add.reduce(h, dtype=np.uint64))


class Spine:
    """One time's rows as a few :class:`Arranged` runs, newest last, each key in one run
    only (differential dataflow's spine of batches, LSM-style): an upsert marks the old
    rows of its keys dead and adds its rows as a new run, and runs merge when the newest
    grows to half the one before it. An epoch that touches 1% of a large table then costs
    what it touches plus, amortised, a few merges, instead of rewriting the table.

    With a :class:`~timely.state.spill.Spiller` (the disk backend), a run as large as it
    asks is written to a file and mapped back; its file goes when the run does (a
    merge, a compaction, :meth:`drop`)."""

    __slots__ = ("_live", "_table", "_version", "keys", "runs", "schema", "spill")

    def __init__(
        self, schema: pa.Schema, keys: tuple[str, ...], spill: Spiller | None = None
    ) -> None:
        self.schema = schema
        self.keys = keys
        self.spill = spill
        self.runs: list[tuple[Arranged, np.ndarray[Any, Any]]] = []
        """Each run and its live rows (a mask this spine owns: never a user's buffer)."""
        self._table: pa.Table | None = None
        self._live = 0
        """The live rows, counted as they change (a checkpoint's delta asks at every
        checkpoint; a pass over the masks of a table of 1M rows took ~0.1 ms)."""
        self._version = 0
        """Counts the changes to the runs: a :class:`Found` of another version is stale."""

    def __len__(self) -> int:
        return self._live

    @property
    def table(self) -> pa.Table:
        """The live rows of every run, as one table (kept until the next change). Runs in
        files stay mapped: their part of the table is a view of the file, not a copy."""
        if self._table is None:
            parts = [
                a.table
                if live.all()
                else _take(a.table, np.flatnonzero(live), mapped=a.file is not None)
                for a, live in self.runs
            ]
            parts = [p for p in parts if p.num_rows] or [self.schema.empty_table()]
            if len(parts) == 1:
                self._table = parts[0]
            elif any(a.file is not None for a, _ in self.runs):
                self._table = pa.concat_tables(parts)
            else:
                self._table = pa.concat_tables(parts).combine_chunks()
        return self._table

    def spilled(self) -> list[RunFile]:
        """The files of the runs held in files."""
        return [a.file for a, _ in self.runs if a.file is not None]

    def _arranged(
        self, source: pa.Table, n: int, pieces: Iterable[tuple[Hashes, Hashes]]
    ) -> Arranged:
        """A run of ``n`` rows of ``source``, given in pieces (their positions in it, and
        their hashes): in a file if the spiller wants so many rows, else in memory."""
        if self.spill is not None and self.spill.wanted(n):
            table, mapped, file = self.spill.write(source, n, pieces)
            return Arranged(table, mapped, self.keys, file)
        index, hashes = _joined(pieces)
        # (No spiller: no run is in a file, so neither is any part of ``source``.)
        return Arranged(_take(source, index, mapped=self.spill is not None), hashes, self.keys)

    def _merge(
        self, old: Arranged, live: Hashes, other: pa.Table, at: Hashes, h: Hashes
    ) -> tuple[Arranged, np.ndarray[Any, Any]]:
        """The live rows of ``old`` and the rows ``at`` of ``other`` (hashes ``h``) as one
        run, every row live (``old``'s file, if any, is the caller's to delete)."""
        source, pieces = old.merge_plan(live, other, at, h)
        merged = self._arranged(source, int(live.sum()) + len(at), pieces)
        return merged, np.ones(len(merged), dtype=bool)

    def drop(self) -> None:
        """Delete the files of this spine's runs (it is no longer held)."""
        for a, _ in self.runs:
            if a.file is not None:
                a.file.remove()
        self.runs = []
        self._table = None
        self._live = 0
        self._version += 1

    def lookup(self, rows: pa.Table, h: Hashes) -> Found:
        """The rows of ``rows`` whose key is here (their indices, ascending) and, row for
        row, what is held for those keys; and where they are, for an upsert of the same
        keys to replace without looking them up again (:meth:`upsert`'s ``found``)."""
        found: list[np.ndarray[Any, Any]] = []
        held: list[pa.Table] = []
        where: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        for a, live in self.runs:
            pos = a.find(rows, h)
            hit = pos >= 0
            hit[hit] = live[pos[hit]]
            if hit.any():
                found.append(np.flatnonzero(hit))
                at = pos[hit]
                held.append(a.rows_at(at))
                where.append((live, at))
        if not found:
            return Found(np.zeros(0, dtype=np.intp), self.schema.empty_table(), self, [], h)
        if len(found) == 1:  # one run: its indices are ascending already (flatnonzero)
            return Found(found[0], held[0], self, where, h)
        index = np.concatenate(found)
        order = np.argsort(index, kind="stable")
        table = pa.concat_tables(held).combine_chunks()
        return Found(index[order], _take(table, order), self, where, h)

    def _kill(self, rows: pa.Table, h: Hashes, found: Found | None = None) -> int:
        """Mark the rows of ``rows``' keys dead; how many there were. ``found``: where
        they are, from a :meth:`lookup` of them since which nothing changed here."""
        if found is not None and found.covers(self, h):
            places = found.where  # (the masks are this spine's: its version is unchanged)
        else:
            places = []
            for a, live in self.runs:
                pos = a.find(rows, h)
                places.append((live, pos[pos >= 0]))
        killed = 0
        for live, pos in places:
            killed += int(live[pos].sum())
            live[pos] = False
        if killed:
            self._table = None
            self._live -= killed
        return killed

    def upsert(self, rows: pa.Table, h: Hashes, found: Found | None = None) -> None:
        """Put ``rows`` (keys unique among them) in, replacing what their keys held.
        ``found``: a :meth:`lookup` of the same keys since the last change (else ignored,
        :meth:`Found.covers`: the keys are looked up again)."""
        self._kill(rows, h, found)
        self.append(rows, h)

    def append(self, rows: pa.Table, h: Hashes) -> None:
        """Add ``rows`` as they are (a bag: keys may repeat, nothing is replaced)."""
        self._version += 1
        rows = rows.select(self.schema.names).cast(self.schema)
        if self.runs and 2 * len(rows) >= int(self.runs[-1][1].sum()):
            # The new run would be merged into the last one at once: merge the rows as
            # they are (one ``take`` of both), without arranging them first.
            old, old_live = self.runs[-1]
            self.runs[-1] = self._merge(old, old_live, rows, np.arange(len(rows)), h)
            _gone(old)  # (after: a merge that fails, a full disk, leaves the run held)
            self._live += len(rows)
        else:
            order = np.argsort(h, kind="stable")
            run = self._arranged(rows, len(order), [(order, h[order])])
            self.runs.append((run, np.ones(len(run), dtype=bool)))
            self._live += len(run)
        self._table = None
        self._compact()

    def remove(self, rows: pa.Table, h: Hashes) -> None:
        self._kill(rows, h)
        self._compact()

    def holds_any(self, rows: pa.Table, h: Hashes) -> bool:
        return any(
            bool(((pos := a.find(rows, h)) >= 0).any() and live[pos[pos >= 0]].any())
            for a, live in self.runs
        )

    def take_bins(self, bins: Iterable[int], nbins: int) -> pa.Table | None:
        """Take out the live rows whose key's bin is in ``bins``."""
        taken = []
        for a, live in self.runs:
            mask = a.in_bins(bins, nbins) & live
            if mask.any():
                index = np.flatnonzero(mask)
                taken.append(_take(a.table, index, mapped=a.file is not None))
                live[mask] = False
                self._live -= len(index)
        if not taken:
            return None
        self._table = None
        self._compact()
        return taken[0] if len(taken) == 1 else pa.concat_tables(taken).combine_chunks()

    def _compact(self) -> None:
        """Drop runs with nothing live, merge the newest run into the one before while it
        is at least half that one's size, then rebuild one mostly dead (a run replaced
        has its file deleted)."""
        self._version += 1
        runs = []
        for a, live in self.runs:
            if not live.any():
                _gone(a)
                continue
            runs.append((a, live))
        # Merges first: a run merged takes only its live rows, so it needs no rebuild.
        while len(runs) > 1 and 2 * int(runs[-1][1].sum()) >= int(runs[-2][1].sum()):
            (old, old_live), (new, new_live) = runs[-2], runs.pop()
            idx = np.flatnonzero(new_live)
            runs[-1] = self._merge(old, old_live, new.table, idx, new.hashes[idx])
            _gone(old)
            _gone(new)
        for i, (a, live) in enumerate(runs):
            n = int(live.sum())
            if 2 * n < len(live):
                rebuilt = self._arranged(a.table, n, _live_pieces(a, live))
                _gone(a)
                runs[i] = (rebuilt, np.ones(n, dtype=bool))
        self.runs = runs


def _live_pieces(a: Arranged, live: Hashes) -> Iterator[tuple[Hashes, Hashes]]:
    """The live rows of ``a``, in pieces of positions and hashes."""
    for lo in range(0, len(live), PIECE_ROWS):
        kept = np.flatnonzero(live[lo : lo + PIECE_ROWS]) + lo
        yield kept, np.asarray(a.hashes[kept])


def _joined(pieces: Iterable[tuple[Hashes, Hashes]]) -> tuple[Hashes, Hashes]:
    """The pieces of a run as one array of positions and one of hashes."""
    parts = list(pieces)
    if not parts:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.uint64)
    return (
        np.concatenate([p for p, _ in parts]),
        np.concatenate([h for _, h in parts]).astype(np.uint64, copy=False),
    )


def _gone(a: Arranged) -> None:
    """A run no longer held: its files deleted (its mapped views stay readable)."""
    if a.file is not None:
        a.file.remove()


def _take(table: pa.Table, index: np.ndarray[Any, Any], mapped: bool = False) -> pa.Table:
    """``table``'s rows at ``index``, as one chunk. ``mapped``: ``table`` may be (partly)
    a view of a run's file, so it is taken from chunk by chunk (:func:`gather`) rather
    than read whole; a table in memory is joined into one chunk first and taken from
    once (5,000 rows of two chunks: 50 us against 285 us, 500,000 rows 14 against 42 ms)."""
    if len(index) == table.num_rows and (len(index) == 0 or bool((np.diff(index) == 1).all())):
        return table.combine_chunks()
    if mapped or table.num_columns == 0 or len(index) == 0:
        return gather(table, index)
    return table.combine_chunks().take(pa.array(index, type=pa.int64()))


def _same_keys(
    a: pa.Table,
    ia: np.ndarray[Any, Any],
    b: pa.Table,
    ib: np.ndarray[Any, Any],
    keys: Sequence[str],
) -> np.ndarray[Any, Any]:
    """Per pair ``(a[ia[k]], b[ib[k]])``, whether the keys are the same (nulls and NaNs
    equal to themselves, as ``stable_hash`` treats them)."""
    same = np.ones(len(ia), dtype=bool)
    xs = gather(a.select(list(keys)), ia)
    ys = gather(b.select(list(keys)), ib)
    for k in keys:
        x = xs.column(k)
        y = ys.column(k)
        eq = pc.fill_null(pc.equal(x, y), False)
        both_null = pc.and_(pc.is_null(x), pc.is_null(y))
        eq = pc.or_(eq, both_null)
        if pa.types.is_floating(x.type):
            eq = pc.or_(eq, pc.fill_null(pc.and_(pc.is_nan(x), pc.is_nan(y)), False))
        same &= np.asarray(eq.to_numpy(zero_copy_only=False), dtype=bool)
    return same


def _key_at(table: pa.Table, i: int, keys: Sequence[str]) -> tuple[Any, ...]:
    return tuple(table.column(k)[i].as_py() for k in keys)


def _equal_keys(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return all(
        x == y
        or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        for x, y in zip(a, b)
    )


Snapshot = dict[str, Any]
"""``{"columnar": 1, "keys": [...], "replicated": bool, "times": [(time, table), ...]}``;
a delta adds ``"delta": True``, ``"patches": [(time, rows, gone_keys), ...]`` and
``"dropped": [time, ...]``."""


class ColumnState:
    """Per-time keyed Arrow tables of one operator on one worker (see the module
    docstring). ``upsert``/``remove`` change a time's rows; ``get`` reads them."""

    __slots__ = (
        "_changes",
        "_generations",
        "_hashers",
        "_present",
        "_spill",
        "_times",
        "incremental",
        "keys",
        "ordered",
        "replicated",
        "schema",
        "tracked",
        "unique",
    )

    def __init__(
        self,
        keys: Sequence[str],
        schema: pa.Schema,
        replicated: bool = False,
        incremental: bool = False,
        unique: bool = True,
    ) -> None:
        self.keys = tuple(keys)
        self.unique = unique
        """One row per key (a table: ``upsert``, ``lookup``, ``remove``); else a bag of
        rows whose keys may repeat (``append``): a join's side."""
        self.schema = schema
        """The rows' schema, keys first or not: what an empty time reads as."""
        self.replicated = replicated
        self.incremental = incremental
        self.ordered = False
        self.tracked = False
        self._hashers = [ColumnHasher() for _ in self.keys]
        self._times: dict[Timestamp, Spine] = {}
        self._changes: dict[Timestamp, list[Change]] | None = None
        """With incremental checkpoints, per time, what changed since the last snapshot:
        the rows of each upsert, the keys of any other change (see :data:`Change`)."""
        self._generations: list[tuple[int, dict[Timestamp, list[Change]]]] = []
        self._present: dict[int, frozenset[Timestamp]] = {}
        self._spill: Spiller | None = None
        """With the disk backend, where large runs go (:meth:`on_disk`)."""

    def _spine(self, time: Timestamp) -> Spine:
        sp = self._times.get(time)
        if sp is None:
            sp = self._times[time] = Spine(self.schema, self.keys, self._spill)
        return sp

    # -- the operator's view ------------------------------------------------------------
    def hashes(self, rows: pa.Table | pa.RecordBatch) -> Hashes:
        """Per row, the key's ``stable_hash`` (what every lookup here takes)."""
        return key_hashes(rows, self.keys, self._hashers)

    def get(self, time: Timestamp) -> pa.Table | None:
        """The rows of ``time``, or None when nothing is kept for it."""
        sp = self._times.get(time)
        return None if sp is None else sp.table

    def lookup(
        self, time: Timestamp, rows: pa.Table, h: Hashes | None = None
    ) -> tuple[np.ndarray[Any, Any], pa.Table]:
        """Which rows of ``rows`` have a key held at ``time`` (their indices, ascending),
        and what is held for each of them, row for row."""
        found = self.find(time, rows, h)
        return found.index, found.held

    def find(self, time: Timestamp, rows: pa.Table, h: Hashes | None = None) -> Found:
        """:meth:`lookup`'s answer, and where the keys found are: an :meth:`upsert` of
        the same keys right after (a fold: the keys found, changed, and new keys) hands
        it on as ``found`` to skip looking them up again."""
        if not self.unique:
            raise TypeError("lookup is for a table of unique keys, not a bag")
        sp = self._times.get(time)
        if sp is None:
            return Found(np.zeros(0, dtype=np.intp), self.schema.empty_table(), None, [])
        return sp.lookup(rows, self.hashes(rows) if h is None else h)

    def append(self, time: Timestamp, rows: pa.Table, h: Hashes | None = None) -> None:
        """Add ``rows`` to ``time``'s bag (a state made with ``unique=False``)."""
        if self.unique:
            raise TypeError("append is for a bag (unique=False); a table takes upsert")
        if rows.num_rows == 0:
            return
        sp = self._spine(time)
        sp.append(rows, self.hashes(rows) if h is None else h)
        self._touched(time, rows)

    def upsert(
        self,
        time: Timestamp,
        rows: pa.Table,
        h: Hashes | None = None,
        found: Found | None = None,
    ) -> None:
        """Put ``rows`` (keys unique among them) into ``time``'s table, replacing the rows
        of keys already there (``h``: their hashes, if known). ``found``: a :meth:`find`
        at ``time`` of the same keys (a fold: the keys found, changed, and the new ones),
        since which nothing changed; otherwise it is ignored (:meth:`Found.covers`)."""
        if not self.unique:
            raise TypeError("upsert is for a table of unique keys; a bag takes append")
        if rows.num_rows == 0:
            return
        sp = self._spine(time)
        sp.upsert(rows, self.hashes(rows) if h is None else h, found)
        self._touched(time, rows, put=True)

    def remove(self, time: Timestamp, rows: pa.Table, h: Hashes | None = None) -> None:
        """Take the keys of ``rows`` out of ``time``'s table."""
        if not self.unique:
            raise TypeError("remove is for a table of unique keys; a bag drops whole times (pop)")
        sp = self._times.get(time)
        if sp is None or rows.num_rows == 0:
            return
        sp.remove(rows, self.hashes(rows) if h is None else h)
        if not sp.runs:
            del self._times[time]
            sp.drop()
        self._touched(time, rows)

    def pop(self, time: Timestamp) -> pa.Table | None:
        """Take ``time``'s rows out (None if there were none)."""
        sp = self._times.pop(time, None)
        if sp is None:
            return None
        table = sp.table
        sp.drop()
        self._touched(time, table)
        return table

    def times(self) -> list[Timestamp]:
        return sorted(self._times)

    def __len__(self) -> int:
        return sum(len(a) for a in self._times.values())

    def _touched(self, time: Timestamp, rows: pa.Table, put: bool = False) -> None:
        if self._changes is not None:
            change = (rows, True) if put else (rows.select(list(self.keys)), False)
            self._changes.setdefault(time, []).append(change)

    # -- what checkpoints and migrations call (as on KeyedState) -------------------------
    def keep_bin_index(self, nbins: int) -> None:
        """Nothing to keep: a row's bin is its kept hash modulo the bins."""

    def on_disk(self, store: ColumnsRoom, rows: int | None = None) -> None:
        """The disk backend: runs of at least ``rows`` rows (default
        :data:`~timely.state.spill.SPILL_ROWS`) go to files in the store's
        :meth:`~ColumnsRoom.columns_dir`, mapped back (:mod:`timely.state.spill`); smaller
        ones, and the live masks, stay in memory. Before any row is held."""
        self._spill = Spiller(store.columns_dir(), rows)

    def spilled(self) -> list[RunFile]:
        """The files of the runs held in files, at every time."""
        return [f for sp in self._times.values() for f in sp.spilled()]

    def drop(self) -> None:
        """Drop every time's rows (their files deleted)."""
        for sp in self._times.values():
            sp.drop()
        self._times = {}

    def reserve(self, share: float) -> None:
        """Nothing to reserve: an install is one ``take`` into a new table."""

    def keep_changes(self) -> None:
        if self._changes is None:
            self._changes = {}

    def _snapshot(self, times: list[Any], **more: Any) -> Snapshot:
        """A snapshot of this state's kind (what ``install`` checks) holding ``times``."""
        return {
            "columnar": COLUMNAR,
            "keys": list(self.keys),
            "replicated": self.replicated,
            "times": times,
            **more,
        }

    def snapshot(self, upto: int | None = None) -> Snapshot:
        return self._snapshot(
            [
                (time, sp.table)
                for time, sp in sorted(self._times.items())
                if upto is None or time[0] <= upto
            ]
        )

    def taken(self, epoch: int) -> None:
        if self._changes is None:
            return
        self._generations.append((epoch, self._changes))
        self._changes = {}
        self._present[epoch] = frozenset(t for t in self._times if t[0] <= epoch)

    def forget(self, before: int) -> None:
        self._generations = [g for g in self._generations if g[0] > before]
        self._present = {e: p for e, p in self._present.items() if e >= before}

    def has_base(self, epoch: int) -> bool:
        return epoch in self._present

    def delta(self, upto: int, base: int) -> Snapshot:
        """Per time, the rows of keys changed since the snapshot for ``base`` and the keys
        gone, or the whole table where most of it changed."""
        present = self._present.get(base)
        if present is None:
            raise ValueError(f"no snapshot for epoch {base} to take a delta on")
        changed: dict[Timestamp, list[Change]] = {}
        for e, changes in [*self._generations, (math.inf, self._changes or {})]:
            if e > base:
                for t, parts in changes.items():
                    changed.setdefault(t, []).extend(parts)
        whole: list[tuple[Timestamp, pa.Table]] = []
        patches: list[tuple[Timestamp, pa.Table, pa.Table]] = []
        for time, sp in sorted(self._times.items()):
            if time[0] > upto:
                continue
            got = changed.get(time)
            if time not in present:
                whole.append((time, sp.table))
                continue
            if not got:
                continue
            if len(got) == 1 and got[0][1] and self.unique:
                # One upsert since the base (every checkpoint of a running aggregate): its
                # rows are what its keys hold now, as they are: no lookup (issue 30).
                rows = got[0][0].select(self.schema.names).cast(self.schema)
                if 2 * rows.num_rows < len(sp):
                    patches.append((time, rows, rows.select(list(self.keys)).slice(0, 0)))
                    continue
            keys = _unique_keys(
                [t.select(list(self.keys)) if put else t for t, put in got],
                self.keys,
                self._hashers,
            )
            # A bag changed, or half the table or more: whole (as small, for the latter).
            if not self.unique or 2 * keys.num_rows >= len(sp):
                whole.append((time, sp.table))
                continue
            held = sp.lookup(keys, self.hashes(keys))
            kept = np.ones(keys.num_rows, dtype=bool)
            kept[held.index] = False
            patches.append((time, held.held, _take(keys, np.flatnonzero(kept))))
        dropped = sorted(t for t in present if t not in self._times)
        return self._snapshot(whole, delta=True, patches=patches, dropped=dropped)

    def restore(self, snapshot: Snapshot) -> None:
        self.drop()
        self._generations, self._present = [], {}
        self.install(snapshot)
        if self._changes is not None:
            self._changes = {}  # the next snapshot after a restore is whole

    def extract(
        self, bins: set[int] | frozenset[int], nbins: int, before: int | None = None
    ) -> Snapshot:
        """Take out the rows whose key's bin is in ``bins`` (at the times of epochs before
        ``before`` if given), as a snapshot :meth:`install` puts into another worker's
        state (a migration)."""
        times = []
        for time in sorted(self._times):
            if before is not None and time[0] >= before:
                break
            sp = self._times[time]
            moving = sp.take_bins(bins, nbins)
            if moving is None:
                continue
            times.append((time, moving))
            self._touched(time, moving)
            if not sp.runs:
                del self._times[time]
                sp.drop()
        return self._snapshot(times)

    def install(self, snapshot: Snapshot) -> list[Timestamp]:
        """Add ``snapshot``'s rows (keys not held yet) to the tables; returns its times."""
        _check(snapshot, self.keys)
        times = []
        for time, table in snapshot["times"]:
            t = tuple(time)
            times.append(t)
            table = _as_table(table)
            if table.num_rows == 0:
                continue
            h = self.hashes(table)
            sp = self._spine(t)
            if not self.unique:
                sp.append(table, h)
            elif sp.holds_any(table, h):
                raise ValueError(f"keys installed at {t} were there already: not keyed state")
            else:
                sp.upsert(table, h)
            self._touched(t, table)
        return times


def _check(snapshot: Snapshot, keys: tuple[str, ...]) -> None:
    if snapshot.get("columnar") != COLUMNAR:
        raise ValueError(
            "state snapshot is not a columnar one of this version "
            f"(columnar={snapshot.get('columnar')!r}, format={snapshot.get('format')!r})"
        )
    if tuple(snapshot.get("keys", ())) != keys:
        raise ValueError(f"state snapshot keyed by {snapshot.get('keys')!r}, not {list(keys)!r}")


def _as_table(data: pa.Table | pa.RecordBatch) -> pa.Table:
    return pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data


def _unique_keys(
    parts: list[pa.Table], keys: tuple[str, ...], hashers: Sequence[ColumnHasher]
) -> pa.Table:
    """The distinct keys of ``parts`` (tables of the key columns)."""
    table = pa.concat_tables(parts).combine_chunks()
    return Arranged.build(_distinct(table, keys), keys, hashers).table


def _distinct(table: pa.Table, keys: tuple[str, ...]) -> pa.Table:
    return table.group_by(list(keys), use_threads=False).aggregate([]).select(list(keys))


def is_columnar(snapshot: Any) -> bool:
    """Whether a table's snapshot is a :class:`ColumnState`'s."""
    return isinstance(snapshot, dict) and snapshot.get("columnar") == COLUMNAR


def apply_deltas(base: Snapshot, deltas: list[Snapshot]) -> Snapshot:
    """``base`` with each of ``deltas`` applied in turn (a chain, oldest first)."""
    keys = tuple(base["keys"])
    hashers = [ColumnHasher() for _ in keys]
    tables: dict[Timestamp, Arranged] = {}

    def whole(snap: Snapshot) -> None:
        for t, table in snap["times"]:
            tables[tuple(t)] = Arranged.build(_as_table(table), keys, hashers)

    whole(base)
    current = base
    for delta in deltas:
        if not delta.get("delta"):
            tables.clear()
            whole(delta)
            current = delta
            continue
        for t in delta["dropped"]:
            tables.pop(tuple(t), None)
        whole(delta)
        for t, rows, gone in delta["patches"]:
            t = tuple(t)
            rows, gone = _as_table(rows), _as_table(gone)
            a = tables.get(t)
            if a is None:
                a = tables[t] = Arranged.build(rows.schema.empty_table(), keys, hashers)
            if gone.num_rows:
                a = a.remove(gone, key_hashes(gone, keys, hashers))
            if rows.num_rows:
                a = a.upsert(rows, key_hashes(rows, keys, hashers))
            tables[t] = a
        current = delta
    return {
        "columnar": COLUMNAR,
        "keys": list(keys),
        "replicated": current["replicated"],
        "times": [(t, a.table) for t, a in sorted(tables.items()) if len(a)],
    }


def share_of(snapshot: Snapshot, wanted: np.ndarray[Any, Any], nbins: int) -> Snapshot:
    """The rows of ``snapshot`` whose key's bin is marked in ``wanted`` (one bool per
    bin): a worker's share of an old part on a rescale."""
    keys = tuple(snapshot["keys"])
    hashers = [ColumnHasher() for _ in keys]
    times = []
    for t, table in snapshot["times"]:
        table = _as_table(table)
        h = key_hashes(table, keys, hashers)
        mine = wanted[(h % np.uint64(nbins)).astype(np.intp)]
        if mine.any():
            times.append((t, _take(table, np.flatnonzero(mine), mapped=True)))
    return {**snapshot, "times": times}


def merge_snapshots(snaps: list[Snapshot]) -> Snapshot:
    """Several workers' pieces of one table (disjoint keys) as one snapshot."""
    by_time: dict[Timestamp, list[pa.Table]] = {}
    for snap in snaps:
        for t, table in snap["times"]:
            by_time.setdefault(tuple(t), []).append(_as_table(table))
    return {
        **snaps[0],
        "times": [(t, pa.concat_tables(ts).combine_chunks()) for t, ts in sorted(by_time.items())],
    }
