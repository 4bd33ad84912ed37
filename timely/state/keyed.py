"""The one state interface of stateful vertices: per-time, per-key tables.

Every stateful operator (``distinct``, ``group_by``, ``count_by``, ``aggregate``,
``join``) keeps what it buffers for a time in a :class:`KeyedState`, and every such
vertex is a :class:`StatefulVertex` that lists its tables by name. Why one interface:
checkpointing (a later issue) must snapshot and restore every operator the same way,
without knowing what each one computes, and rescaling must move state between workers
without knowing it either.

It lives in ``timely`` (not ``operators``) because the checkpoint coordinator reads it.

Why keyed, and keyed by what: each of these operators exchanges its input by a key
before it keeps anything, so a worker only ever holds the keys whose bin
(``stable_hash(key) % bins``, :mod:`timely.routing.bins`) the routing table gives it. A table
keyed by that same key is therefore partitioned exactly like the channel that feeds it:
on a change of worker count, :func:`repartition` moves each key to its new owner, and a
live migration moves a bin's keys (:meth:`KeyedState.extract`, :meth:`KeyedState.install`)
where the routing table sends them from then on.

Why per time: the operators' semantics are per time (the output at ``t`` reflects only
the input at ``t``), so a time's table is dropped as soon as the time completes. State
carried across epochs lives in a table at a fixed early time (``running_reduce``) or at
the epochs it came from (windows). A checkpoint at epoch ``e`` keeps the tables of times
whose epoch is ``<= e`` and leaves out later ones: those are rebuilt by the replay.
That is only sound if state carried across epochs changes in ``on_notify`` alone (never
in ``on_recv`` of a later time), which every operator here follows.

Snapshots are plain data (dicts, lists, tuples, ints, str and the operators' own keys
and values) so that ``timely.comm.serialization`` (msgpack) carries them and a snapshot
taken on one machine restores on another.
"""

from __future__ import annotations

import functools
import itertools
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import pyarrow as pa

from progress import Timestamp
from timely.routing.bins import DEFAULT_BINS, bins_of, default_table, keys_in_bins
from timely.state.columnar import ColumnsRoom, ColumnState, is_columnar
from timely.state.columnar import apply_deltas as columnar_deltas
from timely.vertex import Vertex

V = TypeVar("V")

Snapshot = dict[str, Any]
"""``{"format": 2, "replicated": bool, "times": [(time, [key, ...], [value, ...]), ...]}``.

Keys and values travel as two lists rather than a list of pairs: msgpack packs a list
of scalars in one pass, which makes a snapshot about 7x cheaper to encode."""

FORMAT = 2


def owner(key: Any, workers: int, bins: int = DEFAULT_BINS) -> int:
    """The worker that holds ``key`` under the default routing table: the one the
    ``exchange`` channel routes it to when no bin has moved."""
    return bins_of([key], bins)[0] % workers


class Store(ColumnsRoom, Protocol):
    """The disk backend's store of a worker, as stateful vertices use it
    (:class:`~timely.state.disk.StateStore`)."""

    def table(
        self, name: str, ordered: bool, nbins: int = 0, vertex: int = -1
    ) -> MutableMapping[Any, Any]: ...


class KeyedState(Generic[V]):
    """Per-time, per-key values of one operator on one worker.

    ``table(time)`` is the time's ``{key: value}`` dict, to read and write in place;
    ``pop(time)`` takes it out when the time completes.
    """

    __slots__ = (
        "_changes",
        "_generations",
        "_grown",
        "_index",
        "_nbins",
        "_present",
        "_store",
        "_times",
        "_unvalued",
        "incremental",
        "ordered",
        "replicated",
        "tracked",
    )

    def __init__(
        self, replicated: bool = False, tracked: bool = False, incremental: bool = False
    ) -> None:
        self._times: dict[Timestamp, MutableMapping[Any, V]] = {}
        self._store: Callable[[bool, int], MutableMapping[Any, Any]] | None = None
        """With the disk backend (:meth:`on_disk`), what makes this table's tables."""
        self.replicated = replicated
        """Every worker holds the same table (fed by a broadcast): a rescale copies it."""
        self.incremental = incremental
        """The operator reports every key it adds, changes or removes (:meth:`touched`),
        so that an incremental checkpoint writes only those keys of the table."""
        self.ordered = False
        """The table's order matters (kept in order of use): a delta keeps the order of
        the changes, which costs a little more to record."""
        self.tracked = tracked
        """The operator reports every key it adds (:meth:`added`), so that in a
        reconfigurable run each key's bin is known without hashing the whole table."""
        self._nbins = 0
        self._index: dict[Timestamp, dict[int, dict[Any, None]]] = {}
        """Per time, per bin, the keys added (some may be gone since): a bin's keys in a
        migration step cost what they are, not what the table is (Megaphone's bins)."""
        self._grown: dict[Timestamp, int] = {}
        """Per time, the table's size in memory when :meth:`reserve` last grew it."""
        self._changes: dict[Timestamp, _Changes] | None = None
        """With incremental checkpoints (:meth:`keep_changes`), the keys of tracked tables
        added, changed or removed since the last snapshot, per time."""
        self._unvalued: set[Timestamp] = set()
        """The times whose changes since the last snapshot include keys reported without
        their values (:meth:`touched`): a delta looks those up."""
        self._generations: list[tuple[int, dict[Timestamp, _Changes], set[Timestamp]]] = []
        """Per snapshot taken (its epoch), the changes made before it and after the one
        before: a delta on an older base merges those after the base."""
        self._present: dict[int, frozenset[Timestamp]] = {}
        """Per snapshot taken (its epoch), the times it held."""

    def keep_bin_index(self, nbins: int) -> None:
        """Keep each key's bin from now on (a tracked table of a vertex whose bins may
        move); the keys already there are indexed at once."""
        if not self.tracked:
            return
        self._nbins = nbins
        self._index = {}
        for time, table in self._times.items():
            self.added(time, list(table))

    def added(self, time: Timestamp, keys: list[Any]) -> None:
        """The operator has put ``keys``, new ones, into the table of ``time`` (a tracked
        table must report every key it adds; removals need no report)."""
        if not self._nbins or not keys or self._store is not None:
            return  # (on disk a table groups its keys by bin itself)
        index = self._index.get(time)
        if index is None:
            self._index[time] = index = {}
        key_bins = bins_of(keys, self._nbins)
        if len(keys) < 1024:
            for k, b in zip(keys, key_bins):
                group = index.get(b)
                if group is None:
                    index[b] = group = {}
                group[k] = None
            return
        # Many keys (a bin installed, a restore, a load): grouped by bin in numpy, each
        # group added in one C-level update.
        order = np.argsort(np.asarray(key_bins), kind="stable")
        ordered = [keys[i] for i in order.tolist()]
        sorted_bins = np.asarray(key_bins)[order]
        starts = np.flatnonzero(np.diff(sorted_bins)) + 1
        bounds = [0, *starts.tolist(), len(ordered)]
        for lo, hi in itertools.pairwise(bounds):
            b = int(sorted_bins[lo])
            group = index.get(b)
            if group is None:
                index[b] = group = {}
            group.update(dict.fromkeys(ordered[lo:hi]))

    def on_disk(self, store: Callable[[bool, int], MutableMapping[Any, Any]]) -> None:
        """Keep the tables in what ``store(ordered, nbins)`` makes (the disk backend's
        :class:`~timely.state.disk.DiskTable`) instead of dicts; before any is made. With
        a bin index (``nbins``), such a table keeps its keys grouped by bin itself."""
        self._store = store

    def _new(self) -> MutableMapping[Any, V]:
        return {} if self._store is None else self._store(self.ordered, self._nbins)

    def keep_changes(self) -> None:
        """Record from now on which keys of a tracked table change (incremental
        checkpoints): the operator reports them with :meth:`touched`."""
        if self._changes is None:
            self._changes = {}

    def touched(self, time: Timestamp, keys: Iterable[Any]) -> None:
        """The operator has added, changed or removed ``keys`` in the table of ``time``
        (a tracked table must report every such key when changes are kept)."""
        if self._changes is None:
            return
        self._unvalued.add(time)
        self.changed(time, ((k, _LOOK_UP) for k in keys))

    def changed(
        self, time: Timestamp, pairs: Iterable[tuple[Any, Any]], distinct: bool = False
    ) -> None:
        """The operator has set each ``(key, value)`` of ``pairs`` in the table of ``time``:
        :meth:`touched` with the values, which a delta then takes from here instead of
        looking each key up again in a large table. ``distinct``: ``pairs`` is a list with
        no key twice; the first such list since the last snapshot is kept as a list (a
        copy), and a delta takes its columns from it, not from a dict built of it (for
        10,000 pairs ~0.2 ms against ~0.5 ms, every epoch of an incremental run)."""
        changes = self._changes
        if changes is None:
            return
        kept = changes.get(time)
        if kept is None and distinct and isinstance(pairs, list):
            changes[time] = _Pairs(pairs)  # (a copy: the caller may send its list on)
            return
        seen = kept if type(kept) is dict else {} if kept is None else dict(kept)
        if seen is not kept:
            changes[time] = seen
        self._merge(seen, pairs)

    def _merge(self, into: dict[Any, Any], pairs: Iterable[tuple[Any, Any]]) -> None:
        """Record ``pairs`` of changes in ``into``, the later over the earlier; in order of
        last change where the table's order is state (a key changed again moves to the
        end, as it does in a table kept in order of use)."""
        if not self.ordered:
            into.update(pairs)
            return
        pop = into.pop
        for k, v in pairs:
            pop(k, None)
            into[k] = v

    def get(self, time: Timestamp) -> MutableMapping[Any, V] | None:
        """The table of ``time``, or None when nothing was kept for it."""
        return self._times.get(time)

    def table(self, time: Timestamp) -> MutableMapping[Any, V]:
        """The table of ``time``, made empty if it does not exist yet."""
        t = self._times.get(time)
        if t is None:
            self._times[time] = t = self._new()
        return t

    def pop(self, time: Timestamp) -> MutableMapping[Any, V]:
        """Take the table of ``time`` out (empty if there was none)."""
        if self._index:
            self._index.pop(time, None)
        if self._grown:
            self._grown.pop(time, None)
        t = self._times.pop(time, {})
        if type(t) is not dict:  # on disk: its contents, then its files go
            contents = dict(t.items())
            _drop(t)
            return contents
        return t

    def times(self) -> list[Timestamp]:
        """The open times, in timestamp order (a restorer re-requests their notifications)."""
        return sorted(self._times)

    def __len__(self) -> int:
        return sum(len(t) for t in self._times.values())

    def items(self) -> Iterator[tuple[Timestamp, Any, V]]:
        """Every ``(time, key, value)`` held."""
        for time, t in self._times.items():
            for key, value in t.items():
                yield time, key, value

    def snapshot(self, upto: int | None = None) -> Snapshot:
        """Plain data for a checkpoint: every table, or those of epochs ``<= upto``.

        Values are not copied, so encode the snapshot before mutating the state.
        """
        return {
            "format": FORMAT,
            "replicated": self.replicated,
            "times": [
                (time, *_columns(t))
                for time, t in sorted(self._times.items())
                if upto is None or time[0] <= upto
            ],
        }

    def taken(self, epoch: int) -> None:
        """A snapshot for the checkpoint at ``epoch`` (of the times up to it) was just
        taken: changes from now on belong to the next one."""
        if self._changes is None:
            return
        self._generations.append((epoch, self._changes, self._unvalued))
        self._changes, self._unvalued = {}, set()
        self._present[epoch] = frozenset(t for t in self._times if t[0] <= epoch)

    def forget(self, before: int) -> None:
        """No delta will be taken on a base before ``before`` any more: drop what only
        those needed."""
        self._generations = [g for g in self._generations if g[0] > before]
        self._present = {e: p for e, p in self._present.items() if e >= before}

    def has_base(self, epoch: int) -> bool:
        """Whether a delta on the snapshot for ``epoch`` can be taken."""
        return epoch in self._present

    def delta(self, upto: int, base: int) -> Snapshot:
        """What changed since the snapshot for ``base``, as of the times up to ``upto``:
        the changed keys of each tracked table that ``base`` held (and those removed),
        whole tables otherwise, and the times ``base`` held that are gone.
        :func:`apply_delta` turns ``base``'s snapshot into this one's."""
        present = self._present.get(base)
        if present is None:
            raise ValueError(f"no snapshot for epoch {base} to take a delta on")
        later = [(c, u) for e, c, u in self._generations if e > base]
        later.append((self._changes or {}, self._unvalued))
        unvalued = set().union(*(u for _, u in later))
        changed: dict[Timestamp, _Changes]
        if len(later) == 1:
            # A delta on the last snapshot (every one, in a chain): its changes as they
            # are, only read here (a copy cost ~0.1 ms for 2,000 keys, every epoch).
            changed = later[0][0]
        else:
            merged: dict[Timestamp, dict[Any, Any]] = {}
            for changes, _ in later:
                for t, keys in changes.items():
                    self._merge(merged.setdefault(t, {}), keys.items())
            changed = dict(merged)  # (a few times)
        whole: list[tuple[Timestamp, list[Any], list[Any]]] = []
        patches: list[tuple[Timestamp, list[Any], list[Any], list[Any]]] = []
        for time, table in sorted(self._times.items()):
            if time[0] > upto:
                continue
            keys = changed.get(time, {})
            # Half the table changed or more: whole is as small, and cheaper to make.
            if not (self.incremental and time in present and 2 * len(keys) < len(table)):
                whole.append((time, *_columns(table)))
            elif time not in unvalued:  # every value reported: no look-up, no loop
                if isinstance(keys, _Pairs):
                    if keys:
                        patches.append((time, *keys.columns(), []))
                elif keys:
                    patches.append((time, list(keys), list(keys.values()), []))
            else:
                kept, values, gone = [], [], []
                get = table.get
                for k, v in keys.items():  # a look-up only where no value was reported
                    if v is _LOOK_UP:
                        v = get(k, _GONE)
                    if v is _GONE:
                        gone.append(k)
                    else:
                        kept.append(k)
                        values.append(v)
                if kept or gone:
                    patches.append((time, kept, values, gone))
        return {
            "format": FORMAT,
            "replicated": self.replicated,
            "delta": True,
            "times": whole,
            "patches": patches,
            "dropped": sorted(t for t in present if t not in self._times),
        }

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the contents with ``snapshot``'s (as made by :meth:`snapshot`)."""
        for t in self._times.values():
            _drop(t)
        self._times = {}
        self._index = {}
        self._grown = {}
        self._generations, self._present, self._unvalued = [], {}, set()
        self.install(snapshot)
        if self._changes is not None:
            self._changes = {}  # the next snapshot after a restore is whole

    def extract(
        self, bins: set[int] | frozenset[int], nbins: int, before: int | None = None
    ) -> Snapshot:
        """Take out every key whose bin is in ``bins`` (at every time, or at the times of
        epochs before ``before``), as a snapshot that :meth:`install` puts into another
        worker's table (a migration). Keys found through the bin index go out grouped by
        bin, with their ``(bin, count)`` runs, so the new owner indexes them unhashed."""
        times = []
        runs_by_time: list[list[tuple[int, int]] | None] = []
        rebuild = False
        for time in sorted(self._times):
            if before is not None and time[0] >= before:
                break
            table = self._times[time]
            take = getattr(table, "take_bins", None)
            if take is not None and getattr(table, "nbins", 0) == nbins:
                taken, values, ranges = take(bins)  # on disk: a range per bin
                if taken:
                    times.append((time, taken, values))
                    self.touched(time, taken)
                    runs_by_time.append(ranges)
                if not table:
                    _drop(self._times.pop(time))
                continue
            index = self._index.get(time) if self._nbins == nbins else None
            indexed = sum(map(len, index.values())) if index is not None else 0
            if index is not None and len(table) > indexed:
                # Keys were added unreported: hash every key, and index them again after.
                del self._index[time]
                index, rebuild = None, True
            runs: list[tuple[int, int]] | None = None
            # A large share of the table: one numpy pass over every key is faster.
            if index is not None and 4 * sum(len(index.get(b, ())) for b in bins) <= len(table):
                # Every key added was reported, so the index holds the table's keys and
                # those removed since; when the sizes agree, none was removed.
                exact = len(table) == indexed
                moving: list[Any] = []
                runs = []
                for b in sorted(bins):
                    group = index.pop(b, None)
                    if group:
                        keys = list(group) if exact else [k for k in group if k in table]
                        if keys:
                            moving.extend(keys)
                            runs.append((b, len(keys)))
            else:
                moving = keys_in_bins(list(table), nbins, bins)
                if index is not None:
                    for b in bins:
                        index.pop(b, None)
            if moving:
                times.append((time, moving, list(map(table.pop, moving))))
                self.touched(time, moving)
                runs_by_time.append(runs)
                if not table:
                    _drop(self._times.pop(time))
                    self._index.pop(time, None)
        if rebuild:
            self.keep_bin_index(self._nbins)
        return {
            "format": FORMAT,
            "replicated": self.replicated,
            "times": times,
            "nbins": nbins,
            "runs": runs_by_time,
        }

    def reserve(self, share: float) -> None:
        """Make room now in every large table for about ``share`` times its size in keys
        to come (bins arriving by a migration).

        A dict grows by copying itself whole when an insert finds it full: for a table of
        500,000 keys that is ~35 ms, which an install would otherwise pay inside the
        epoch it must finish. Called when a configuration becomes known, ahead of the
        installs, so the copy falls in the epochs before the migration."""
        for time, table in self._times.items():
            if type(table) is not dict or len(table) < _RESERVE_MIN or share * len(table) < 1024:
                continue
            size = sys.getsizeof(table)
            if self._grown.get(time) == size:
                continue  # grown here before and not since: the room made then is there
            self._grown[time] = _grow(table)

    def install(self, snapshot: Snapshot) -> list[Timestamp]:
        """Add ``snapshot``'s keys (as made by :meth:`snapshot` or :meth:`extract`) to the
        tables; returns the times it had."""
        if snapshot.get("format") != FORMAT:
            raise ValueError(
                f"state snapshot has format {snapshot.get('format')!r}; this version reads "
                f"format {FORMAT}"
            )
        runs_by_time = snapshot.get("runs")
        if snapshot.get("nbins") != self._nbins or not runs_by_time:
            runs_by_time = [None] * len(snapshot["times"])
        times = []
        for (time, keys, values), runs in zip(snapshot["times"], runs_by_time):
            t = tuple(time)
            times.append(t)
            table = self._times.get(t)
            if table is None:
                self._times[t] = table = self._new()
            keys = _keys(keys)
            size = len(table)
            table.update(zip(keys, values))
            if len(table) != size + len(keys):
                raise ValueError(
                    f"{size + len(keys) - len(table)} of {len(keys)} keys installed at {t} "
                    "were there already: not keyed state"
                )
            if runs:
                self._index_runs(t, keys, runs)
            else:
                self.added(t, keys)
            self.touched(t, keys)
        return times

    def _index_runs(self, time: Timestamp, keys: list[Any], runs: list[Any]) -> None:
        """Index keys that arrive grouped by bin, ``runs`` giving ``(bin, count)``."""
        if self._store is not None:
            return  # on disk a table groups its keys by bin itself
        index = self._index.get(time)
        if index is None:
            self._index[time] = index = {}
        lo = 0
        for b, n in runs:
            group = index.get(b)
            if group is None:
                index[b] = group = {}
            group.update(dict.fromkeys(keys[lo : lo + n]))
            lo += n


class _Pairs(list[tuple[Any, Any]]):
    """The changes to one table as the operator reported them at once, ``(key, value)``
    pairs with no key twice (:meth:`KeyedState.changed`), read as a dict's items."""

    __slots__ = ()

    def items(self) -> _Pairs:
        return self

    def columns(self) -> tuple[list[Any], list[Any]]:
        """The keys and the values, in order."""
        return list(map(_first, self)), list(map(_second, self))


_first, _second = operator.itemgetter(0), operator.itemgetter(1)
_Changes = dict[Any, Any] | _Pairs
"""One time's changes since a snapshot: a dict of them, or one list reported at once."""

_GONE = object()
"""A key's value when the key is not in the table (values may be None)."""
_LOOK_UP = object()
"""A changed key whose value was not reported: the delta looks it up."""
_NANS = np.full(8192, np.nan)
_RESERVE_MIN = 1 << 16
"""Tables smaller than this grow fast enough (a copy under ~3 ms) to leave alone."""


def _columns(table: MutableMapping[Any, Any]) -> tuple[list[Any], list[Any]]:
    """A table's keys and values as two lists, in its order."""
    if type(table) is dict:
        return list(table.keys()), list(table.values())
    return table.columns()  # type: ignore[attr-defined,no-any-return]


def _drop(table: MutableMapping[Any, Any]) -> None:
    """Let a table go: a disk table's files are deleted."""
    if type(table) is not dict:
        table.drop()  # type: ignore[attr-defined]


def _grow(table: dict[Any, Any]) -> int:
    """Make ``table`` grow now (CPython copies a dict into one with room for about three
    times its keys when it fills) and return its new size in memory: add placeholder
    keys until that size changes, then take them out. The placeholders are NaNs, each a
    new float: equal to nothing (a user's NaN key included) and untracked by the garbage
    collector, so neither the table nor a collection notices them. Where a dict's size
    does not show its room, this stops after as many placeholders as keys."""
    size, limit = sys.getsizeof(table), len(table)
    added: list[float] = []
    while sys.getsizeof(table) == size and len(added) < limit:
        chunk = _NANS.tolist()  # distinct float objects
        table.update(dict.fromkeys(chunk))
        added.extend(chunk)
    for p in added:
        del table[p]
    return sys.getsizeof(table)


def apply_delta(base: Snapshot, delta: Snapshot) -> Snapshot:
    """``base`` (a whole snapshot, as :meth:`KeyedState.snapshot` makes) with ``delta``
    (:meth:`KeyedState.delta` on it) applied: the whole snapshot the delta stands for."""
    return apply_deltas(base, [delta])


def apply_deltas(base: Snapshot, deltas: list[Snapshot]) -> Snapshot:
    """``base`` with each of ``deltas`` applied in turn (a chain, oldest first): the tables
    are built once for the whole chain, not once per delta. A snapshot in ``deltas`` that
    is whole replaces what came before it."""
    if is_columnar(base):
        return columnar_deltas(base, deltas)
    tables: dict[Timestamp, dict[Any, Any]] | None = None
    replicated = base["replicated"]
    current = base
    for delta in deltas:
        replicated = delta["replicated"]
        if not delta.get("delta"):
            current, tables = delta, None
            continue
        if tables is None:
            tables = {tuple(t): dict(zip(_keys(k), v, strict=True)) for t, k, v in current["times"]}
        for t in delta["dropped"]:
            tables.pop(tuple(t), None)
        for t, keys, values in delta["times"]:
            tables[tuple(t)] = dict(zip(_keys(keys), values, strict=True))
        for t, keys, values, gone in delta["patches"]:
            table = tables.setdefault(tuple(t), {})
            for k in _keys(gone):
                table.pop(k, None)
            pop = table.pop
            for k, v in zip(_keys(keys), values, strict=True):
                pop(k, None)  # to the end, in order of last change, as the table had it
                table[k] = v
    if tables is None:
        return current
    return {
        "format": FORMAT,
        "replicated": replicated,
        "times": [(t, list(tb.keys()), list(tb.values())) for t, tb in sorted(tables.items())],
    }


def _keys(keys: list[Any]) -> list[Any]:
    """Keys as they were: tuples that a plain msgpack carrier turned into lists."""
    return [_key(k) for k in keys] if list in set(map(type, keys)) else keys


def _key(k: Any) -> Any:
    # A carrier that turns tuples into lists (plain msgpack) must not make keys unhashable.
    return tuple(_key(x) for x in k) if isinstance(k, list) else k


def repartition(
    snapshots: Iterable[Snapshot], workers: int, bins: int = DEFAULT_BINS
) -> list[Snapshot]:
    """Re-split the snapshots of one table (one per old worker) over ``workers`` new ones.

    Each key goes to its bin's worker in the default routing table of ``workers``
    (:func:`owner`). A key present in two snapshots means the state was not partitioned
    by key, which is refused rather than guessed at.
    """
    snapshots = list(snapshots)
    if snapshots and snapshots[0].get("replicated"):
        return [snapshots[0]] * workers  # every worker had the same table: copy one
    table = default_table(bins, workers)
    parts: list[KeyedState[Any]] = [KeyedState() for _ in range(workers)]
    for snap in snapshots:
        state: KeyedState[Any] = KeyedState()
        state.restore(snap)
        for time in state.times():
            rows = state.get(time)
            assert rows is not None
            keys = list(rows)
            for key, b in zip(keys, bins_of(keys, bins)):
                t = parts[table[b]].table(time)
                if key in t:
                    raise ValueError(f"key {key!r} at {time} is in two snapshots: not keyed state")
                t[key] = rows[key]
    return [p.snapshot() for p in parts]


class StatefulVertex(Vertex):
    """A vertex whose state is a set of named :class:`KeyedState` tables.

    Make tables with :meth:`keyed_state` in ``__init__``; checkpointing then reaches all
    of them through :meth:`snapshot` and :meth:`restore`, whatever the operator.
    """

    def __init__(self) -> None:
        self._states: dict[str, KeyedState[Any] | ColumnState] = {}

    def keyed_state(
        self, name: str, replicated: bool = False, tracked: bool = False, incremental: bool = False
    ) -> KeyedState[Any]:
        """A new table, registered under ``name`` for snapshots; ``replicated`` when every
        worker holds the same contents (a broadcast input), so a rescale copies it;
        ``tracked`` when the vertex reports every key it adds (:meth:`KeyedState.added`),
        so that a migration finds a bin's keys without hashing the table; ``incremental``
        when it also reports every key it changes or removes (:meth:`KeyedState.touched`),
        so that an incremental checkpoint writes only those (a table kept across epochs)."""
        if name in self._states:
            raise ValueError(f"state {name!r} is defined twice")
        state: KeyedState[Any] = KeyedState(replicated, tracked, incremental)
        self._states[name] = state
        return state

    def column_state(
        self,
        name: str,
        keys: Sequence[str],
        schema: pa.Schema,
        replicated: bool = False,
        incremental: bool = False,
        unique: bool = True,
    ) -> ColumnState:
        """A new table held as Arrow columns (:mod:`timely.state.columnar`), keyed by the
        ``keys`` columns of ``schema``: the table API's state. It checkpoints, migrates and
        re-partitions as :meth:`keyed_state`'s tables do; ``incremental`` when it is kept
        across epochs, so that an incremental checkpoint writes only the changed keys;
        ``unique=False`` for a bag whose keys repeat (a join's side)."""
        if name in self._states:
            raise ValueError(f"state {name!r} is defined twice")
        missing = [k for k in keys if k not in schema.names]
        if missing:
            raise ValueError(f"state {name!r}: key columns {missing} are not in {schema}")
        state = ColumnState(keys, schema, replicated, incremental, unique)
        self._states[name] = state
        return state

    def table_at(self, state: KeyedState[Any], time: Timestamp) -> MutableMapping[Any, Any]:
        """``state``'s table for ``time``; made on first use, with a notification at ``time``."""
        table = state.get(time)
        if table is None:
            table = state.table(time)
            self.notify_at(time)
        return table

    def group_into(
        self,
        table: MutableMapping[Any, Any],
        key: Callable[[Any], Any],
        records: list[Any],
        time: Timestamp,
    ) -> None:
        """Append each record to the list of its ``key(record)`` in ``table``."""
        record = None
        try:
            for record in records:
                k = key(record)
                group = table.get(k)
                if group is None:
                    table[k] = [record]
                else:
                    group.append(record)
        except Exception as e:
            self.fail(e, time, record, key)

    def fold_pairs(
        self,
        table: MutableMapping[Any, Any],
        f: Callable[[Any, Any], Any],
        pairs: list[Any],
        time: Timestamp,
    ) -> None:
        """Fold each ``(key, value)`` of ``pairs`` into ``table[key]`` with ``f``."""
        pair: Any = None
        try:
            for pair in pairs:
                k, v = pair
                table[k] = f(table[k], v) if k in table else v
        except Exception as e:
            self.fail(e, time, pair, f)

    def extract_bins(self, bins: set[int], nbins: int, before: int) -> dict[str, Snapshot]:
        """Take the keys of ``bins`` out of every table that is not replicated, at the
        times of epochs before ``before`` (a migration at ``before`` ships them to their
        new owner)."""
        return {
            name: s.extract(bins, nbins, before)
            for name, s in self._states.items()
            if not s.replicated
        }

    def reserve_bins(self, share: float) -> None:
        """Make room for bins arriving by a migration, about ``share`` times the keys held
        now (:meth:`KeyedState.reserve`)."""
        for s in self._states.values():
            if not s.replicated:
                s.reserve(share)

    def install_bins(self, tables: dict[str, Snapshot], epoch: int) -> None:
        """Put in the keys another worker extracted for the configuration at ``epoch``,
        then ask again for the notifications their times need (:meth:`restored`)."""
        for name, snap in tables.items():
            self._states[name].install(snap)
        self.restored(epoch - 1)

    def use_store(self, store: Store, vertex: int, prefix: str) -> None:
        """The disk backend: the tables kept across epochs (the incremental ones) live in
        what ``store.table(label, ordered, nbins, vertex)`` makes (``label``: ``prefix``
        and the table's name, for errors), or for columnar ones, in memory and in files
        of ``store.columns_dir()``; the per-time ones, read whole when their time
        completes, stay in memory."""
        for name, s in self._states.items():
            if not s.incremental:
                continue
            if isinstance(s, ColumnState):
                s.on_disk(store)
            else:
                s.on_disk(
                    functools.partial(store.table, f"{prefix}, table {name!r}", vertex=vertex)
                )

    def states(self) -> dict[str, KeyedState[Any] | ColumnState]:
        """The tables by name."""
        return dict(self._states)

    def snapshot(self, upto: int | None = None) -> dict[str, Snapshot]:
        """Every table's snapshot, by name (only times of epochs ``<= upto`` if given)."""
        return {name: s.snapshot(upto) for name, s in self._states.items()}

    def keep_changes(self) -> None:
        """Incremental checkpoints: incremental tables record their changed keys."""
        for s in self._states.values():
            if s.incremental:
                s.keep_changes()

    def snapshot_taken(self, epoch: int) -> None:
        """A snapshot for the checkpoint at ``epoch`` was taken (whole or a delta)."""
        for s in self._states.values():
            s.taken(epoch)

    def forget_bases(self, before: int) -> None:
        """No delta will be taken on a checkpoint before ``before`` any more."""
        for s in self._states.values():
            s.forget(before)

    def snapshot_at(self, epoch: int, base: int | None = None) -> dict[str, Any]:
        """The snapshot for the checkpoint at ``epoch``; with ``base``, incremental tables
        as a delta on the snapshot for the checkpoint at ``base`` (:func:`apply_delta`)."""
        routing = self._ctx.worker.routing
        incremental = [s for s in self._states.values() if s.incremental]
        if base is not None and not (incremental and all(s.has_base(base) for s in incremental)):
            base = None  # none to write as a delta, or no snapshot for that part: whole
        tables = (
            self.snapshot(epoch)
            if base is None
            else {
                name: s.delta(epoch, base) if s.incremental else s.snapshot(epoch)
                for name, s in self._states.items()
            }
        )
        snap: dict[str, Any] = {
            "kind": "keyed",
            "tables": tables,
            "bins": routing.bins,
        }
        if base is not None:
            snap["base"] = base
        if len(routing.epochs) > 1:  # bins have moved: where they are is part of the state
            snap["routing"] = [[e, list(t)] for e, t in routing.upto(epoch)]
        return snap

    def restore_at(self, snapshot: dict[str, Any], epoch: int) -> None:
        if snapshot.get("kind") != "keyed":
            raise ValueError(f"step {self.name!r}: not a keyed-state snapshot")
        self.restore(snapshot["tables"])
        configs = snapshot.get("routing")
        if configs:
            self._ctx.worker.routing.restore([(int(e), tuple(t)) for e, t in configs])
        self.restored(epoch)

    def add_piece(self, snapshot: dict[str, Any], epoch: int) -> None:
        """Add the keys of another piece of this worker's share of a checkpoint (a
        rescale reads the old workers' parts one at a time): ``restore_at`` took the
        first; replicated tables came whole with it."""
        for name, snap in snapshot["tables"].items():
            state = self._states[name]
            if not state.replicated:
                state.install(snap)

    def restored(self, epoch: int) -> None:
        """Called after a restore from a checkpoint at ``epoch``: request again the
        notifications later times need (``notify_at`` may use any time after ``epoch``).
        The per-time tables of open times are not restored, so most operators need none."""

    def restore(self, snapshots: dict[str, Snapshot]) -> None:
        """Restore every table from ``snapshots`` (as made by :meth:`snapshot`).

        The restored open times still need their notifications requested again
        (``notify_at(t)`` for ``t`` in each table's ``times()``) once the vertex runs;
        that is the checkpoint coordinator's job, as only it knows when the vertex may act.
        """
        missing = set(self._states) ^ set(snapshots)
        if missing:
            raise ValueError(f"snapshot does not match the vertex's state: {sorted(missing)}")
        for name, s in self._states.items():
            s.restore(snapshots[name])
