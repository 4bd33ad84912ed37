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
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from progress import Timestamp
from timely.routing.columns import ColumnHasher, key_hashes

COLUMNAR = 1
"""The value of ``"columnar"`` in a snapshot of this format."""

Hashes = np.ndarray[Any, Any]


class Arranged:
    """One time's rows: keys unique, sorted by key hash, the hashes beside them."""

    __slots__ = ("hashes", "keys", "table")

    def __init__(self, table: pa.Table, hashes: Hashes, keys: tuple[str, ...]) -> None:
        self.table = table
        self.hashes = hashes
        self.keys = keys

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
        pos = np.searchsorted(self.hashes, h)
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
        return Arranged(_take(self.table, kept), self.hashes[kept], self.keys)

    def _merged(self, keep: Hashes, rows: pa.Table, h: Hashes) -> Arranged:
        """The kept rows and ``rows``, in hash order: one ``take`` of both."""
        kept = np.flatnonzero(keep)
        kh = self.hashes[kept]
        if len(rows) == 0:
            if len(kept) == len(self.hashes):
                return self
            return Arranged(_take(self.table, kept), kh, self.keys)
        order = np.argsort(h, kind="stable")
        rh = h[order]
        # Where each new row lands among the kept ones, then one index per output row.
        slots = np.searchsorted(kh, rh, side="right") + np.arange(len(rh))
        n = len(kh) + len(rh)
        from_new = np.zeros(n, dtype=bool)
        from_new[slots] = True
        index = np.empty(n, dtype=np.intp)
        index[~from_new] = kept
        index[slots] = len(self.hashes) + order
        hashes = np.empty(n, dtype=np.uint64)
        hashes[~from_new] = kh
        hashes[slots] = rh
        rows = rows.select(self.table.column_names)
        both = pa.concat_tables([self.table, rows.cast(self.table.schema)])
        return Arranged(_take(both, index), hashes, self.keys)

    def rows_at(self, positions: np.ndarray[Any, Any]) -> pa.Table:
        return _take(self.table, positions)

    def in_bins(self, bins: Iterable[int], nbins: int) -> np.ndarray[Any, Any]:
        """Per row, whether its key's bin is in ``bins``."""
        wanted = np.zeros(nbins, dtype=bool)
        wanted[list(bins)] = True
        mask: np.ndarray[Any, Any] = wanted[(self.hashes % np.uint64(nbins)).astype(np.intp)]
        return mask

    def split(self, mask: np.ndarray[Any, Any]) -> tuple[pa.Table, Arranged]:
        """The rows of ``mask`` (a plain table) and this table without them."""
        taken = np.flatnonzero(mask)
        left = np.flatnonzero(~mask)
        return _take(self.table, taken), Arranged(
            _take(self.table, left), self.hashes[left], self.keys
        )


def _take(table: pa.Table, index: np.ndarray[Any, Any]) -> pa.Table:
    if len(index) == table.num_rows and (len(index) == 0 or bool((np.diff(index) == 1).all())):
        return table.combine_chunks()
    return table.take(pa.array(index, type=pa.int64())).combine_chunks()


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
    ta = pa.array(ia, type=pa.int64())
    tb = pa.array(ib, type=pa.int64())
    for k in keys:
        x = a.column(k).take(ta)
        y = b.column(k).take(tb)
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
        "_times",
        "incremental",
        "keys",
        "ordered",
        "replicated",
        "schema",
        "tracked",
    )

    def __init__(
        self,
        keys: Sequence[str],
        schema: pa.Schema,
        replicated: bool = False,
        incremental: bool = False,
    ) -> None:
        self.keys = tuple(keys)
        self.schema = schema
        """The rows' schema, keys first or not: what an empty time reads as."""
        self.replicated = replicated
        self.incremental = incremental
        self.ordered = False
        self.tracked = False
        self._hashers = [ColumnHasher() for _ in self.keys]
        self._times: dict[Timestamp, Arranged] = {}
        self._changes: dict[Timestamp, list[pa.Table]] | None = None
        """With incremental checkpoints, per time, the keys changed since the last
        snapshot (tables of the key columns, not yet unique)."""
        self._generations: list[tuple[int, dict[Timestamp, list[pa.Table]]]] = []
        self._present: dict[int, frozenset[Timestamp]] = {}

    # -- the operator's view ------------------------------------------------------------
    def hashes(self, rows: pa.Table | pa.RecordBatch) -> Hashes:
        """Per row, the key's ``stable_hash`` (what every lookup here takes)."""
        return key_hashes(rows, self.keys, self._hashers)

    def get(self, time: Timestamp) -> pa.Table | None:
        """The rows of ``time``, or None when nothing is kept for it."""
        a = self._times.get(time)
        return None if a is None else a.table

    def arranged(self, time: Timestamp) -> Arranged:
        """The arranged rows of ``time`` (empty if none)."""
        a = self._times.get(time)
        if a is None:
            empty = self.schema.empty_table()
            a = Arranged(empty, np.zeros(0, dtype=np.uint64), self.keys)
        return a

    def upsert(self, time: Timestamp, rows: pa.Table, h: Hashes | None = None) -> None:
        """Put ``rows`` (keys unique among them) into ``time``'s table, replacing the rows
        of keys already there."""
        if rows.num_rows == 0:
            return
        h = self.hashes(rows) if h is None else h
        self._times[time] = self.arranged(time).upsert(rows, h)
        self._touched(time, rows)

    def remove(self, time: Timestamp, rows: pa.Table, h: Hashes | None = None) -> None:
        """Take the keys of ``rows`` out of ``time``'s table."""
        a = self._times.get(time)
        if a is None or rows.num_rows == 0:
            return
        h = self.hashes(rows) if h is None else h
        a = a.remove(rows, h)
        if len(a):
            self._times[time] = a
        else:
            del self._times[time]
        self._touched(time, rows)

    def pop(self, time: Timestamp) -> pa.Table | None:
        """Take ``time``'s rows out (None if there were none)."""
        a = self._times.pop(time, None)
        if a is None:
            return None
        self._touched(time, a.table)
        return a.table

    def times(self) -> list[Timestamp]:
        return sorted(self._times)

    def __len__(self) -> int:
        return sum(len(a) for a in self._times.values())

    def _touched(self, time: Timestamp, rows: pa.Table) -> None:
        if self._changes is not None:
            self._changes.setdefault(time, []).append(rows.select(list(self.keys)))

    # -- what checkpoints and migrations call (as on KeyedState) -------------------------
    def keep_bin_index(self, nbins: int) -> None:
        """Nothing to keep: a row's bin is its kept hash modulo the bins."""

    def on_disk(self, store: Any) -> None:
        """The disk backend keeps these tables in memory: as Arrow columns they take a
        few bytes per key beside the row path's Python objects."""

    def reserve(self, share: float) -> None:
        """Nothing to reserve: an install is one ``take`` into a new table."""

    def keep_changes(self) -> None:
        if self._changes is None:
            self._changes = {}

    def snapshot(self, upto: int | None = None) -> Snapshot:
        return {
            "columnar": COLUMNAR,
            "keys": list(self.keys),
            "replicated": self.replicated,
            "times": [
                (time, a.table)
                for time, a in sorted(self._times.items())
                if upto is None or time[0] <= upto
            ],
        }

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
        changed: dict[Timestamp, list[pa.Table]] = {}
        for e, changes in [*self._generations, (math.inf, self._changes or {})]:
            if e > base:
                for t, parts in changes.items():
                    changed.setdefault(t, []).extend(parts)
        whole: list[tuple[Timestamp, pa.Table]] = []
        patches: list[tuple[Timestamp, pa.Table, pa.Table]] = []
        for time, a in sorted(self._times.items()):
            if time[0] > upto:
                continue
            got = changed.get(time)
            if time not in present:
                whole.append((time, a.table))
                continue
            if not got:
                continue
            keys = _unique_keys(got, self.keys, self._hashers)
            if 2 * keys.num_rows >= len(a):  # half or more changed: whole is as small
                whole.append((time, a.table))
                continue
            pos = a.find(keys, self.hashes(keys))
            rows = a.rows_at(pos[pos >= 0])
            gone = _take(keys, np.flatnonzero(pos < 0))
            patches.append((time, rows, gone))
        return {
            "columnar": COLUMNAR,
            "keys": list(self.keys),
            "replicated": self.replicated,
            "delta": True,
            "times": whole,
            "patches": patches,
            "dropped": sorted(t for t in present if t not in self._times),
        }

    def restore(self, snapshot: Snapshot) -> None:
        self._times = {}
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
            a = self._times[time]
            mask = a.in_bins(bins, nbins)
            if not mask.any():
                continue
            moving, rest = a.split(mask)
            times.append((time, moving))
            self._touched(time, moving)
            if len(rest):
                self._times[time] = rest
            else:
                del self._times[time]
        return {
            "columnar": COLUMNAR,
            "keys": list(self.keys),
            "replicated": self.replicated,
            "times": times,
        }

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
            a = self._times.get(t)
            if a is None:
                self._times[t] = Arranged.build(table, self.keys, self._hashers)
            else:
                h = self.hashes(table)
                if (a.find(table, h) >= 0).any():
                    raise ValueError(f"keys installed at {t} were there already: not keyed state")
                self._times[t] = a.upsert(table, h)
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
            times.append((t, _take(table, np.flatnonzero(mine))))
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
