"""The disk state backend: tables kept across epochs live in an embedded RocksDB.

``state_backend="disk"`` puts every table an operator keeps across epochs (the
``incremental`` ones: ``running_reduce``'s and ``map_with_state``'s state,
``join_streaming``'s stored records) into a RocksDB store on the worker's disk, one per
table, in a directory per worker; the per-time tables, read whole when their time
completes and then dropped, stay in memory. Operators do not change: a
:class:`DiskTable` is a ``MutableMapping`` that behaves as the dict it replaces, order
of insertion included. Columnar state (the table API's) does not come here: its large
runs go to memory-mapped Arrow files in the worker's :meth:`StateStore.columns_dir`
(:mod:`timely.state.spill`).

Why RocksDB (through ``rocksdict``) and not LMDB: measured on 1M keys x 100 B, random
updates (what streaming state does) cost 17 ms per 10K in RocksDB against 119 ms in
LMDB, and loading is faster (0.40 s against 0.60 s); LMDB reads faster (see
``benchmarks/README.md``). Why a write-back cache in front: operators read a value,
change it in place (``join_streaming`` appends to its lists) or set it again, so every
value read or written since the last flush is kept in a dict and written back at the
next flush. The worker flushes between activations (:meth:`StateStore.maybe_flush`),
when no operator holds a value, once the cache passes :data:`CACHE_KEYS` keys: memory is
bounded by the cache, not by the state.

Keys and values are encoded with the project's msgpack codec in its plain form
(:func:`timely.comm.serialization.encode_plain`): a value that only pickle could carry is
refused with a clear error, and nothing read from disk is unpickled. Keys equal in
Python (``1``, ``1.0``, ``True``) are one key, stored in one form (:func:`canonical`).
Values got by iterating a table are copies (a value got by key may change in place).

The store is scratch, not durability: checkpoints (:mod:`timely.worker.snapshots`) are what a
restore reads, so the write-ahead log is off and a worker's directory is removed when
the worker closes.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from timely.comm.serialization import PlainDataError, decode_plain, encode_plain, encode_plain_one
from timely.errors import ConfigError, StateStoreError
from timely.routing.bins import bins_of
from timely.routing.hashing import stable_hash

T = TypeVar("T")
BACKENDS = ("memory", "disk")
CACHE_KEYS = 65_536
"""Keys held in a worker's write-back caches before a flush between activations."""
BLOCK_CACHE = 64 << 20
"""Bytes of RocksDB's block cache per worker."""
_CHUNK = 65_536
"""Keys written in one batch by a bulk load (a restore, an install)."""
_DATA = b"\x01"
"""Prefix of a data entry: ``_DATA + key -> value`` (``seq + value`` in ordered tables)."""
_ORDER = b"\x00"
"""Prefix of an ordered table's order entry: ``_ORDER + seq -> key``."""
_SEQ = 8
_BIN = 4
"""Bytes of a key's bin in front of it, in a table grouped by bin."""
_ABSENT: Any = object()
"""A key known not to be in the table, and not on disk."""
_DELETED: Any = object()
"""A key deleted since the last flush, still on disk until then."""


@dataclass(frozen=True)
class StoreConfig:
    """Where a run keeps its disk tables: under ``where`` (the system's temporary
    directory if None), in ``root``, a directory made for the run (:meth:`made`) with one
    subdirectory per worker."""

    where: str | None = None
    root: str = ""
    cache: int = CACHE_KEYS
    """Keys held in a worker's write-back caches before a flush between activations."""

    def made(self) -> StoreConfig:
        """This configuration with the run's directory made (owner-only)."""
        try:
            if self.where is not None:
                os.makedirs(self.where, mode=0o700, exist_ok=True)
            root = tempfile.mkdtemp(prefix="timely-state-", dir=self.where)
        except OSError as e:
            raise ConfigError(
                f"state_dir {self.where!r}: cannot make the run's directory there ({e}); give "
                "a writable directory"
            ) from None
        return dataclasses.replace(self, root=root)


def state_options(options: dict[str, Any]) -> StoreConfig | None:
    """Take ``state_backend``, ``state_dir`` and ``state_cache`` out of ``options`` and
    check them; None for the memory backend."""
    backend = options.pop("state_backend", "memory")
    where = options.pop("state_dir", None)
    cache = options.pop("state_cache", None)
    if backend not in BACKENDS:
        raise ConfigError(
            f"state_backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
        )
    if backend == "memory":
        for name, value in (("state_dir", where), ("state_cache", cache)):
            if value is not None:
                raise ConfigError(
                    f'{name} is for state_backend="disk": give state_backend="disk" too, or '
                    f"drop {name}"
                )
        return None
    if cache is not None and (isinstance(cache, bool) or not isinstance(cache, int) or cache < 1):
        raise ConfigError(
            f"state_cache must be the number of keys (>= 1) a worker holds in memory before "
            f"writing them to disk, got {cache!r}"
        )
    try:
        import rocksdict  # noqa: F401
    except ImportError as e:  # pragma: no cover - a dependency of the project
        raise ConfigError(
            f'state_backend="disk" needs rocksdict ({e}): pip install rocksdict'
        ) from None
    if where is not None and (not isinstance(where, str | os.PathLike) or not str(where)):
        raise ConfigError(f"state_dir must be a directory, got {where!r}")
    return StoreConfig(
        None if where is None else os.fspath(where), cache=CACHE_KEYS if cache is None else cache
    )


def remove_store(config: StoreConfig | None) -> None:
    """Remove a run's state directory (when the run ends)."""
    if config is not None and config.root:
        shutil.rmtree(config.root, ignore_errors=True)


class StateStore:
    """One worker's disk tables: one RocksDB in a directory of its own under the run's,
    each table a range of its keys (a prefix per table), so that a worker opens one
    store whatever the number of tables, and dropping a table deletes one range."""

    def __init__(self, config: StoreConfig, worker: int) -> None:
        self.path = os.path.join(config.root, f"worker-{worker}-{uuid.uuid4().hex[:8]}")
        self.cache = config.cache
        self._db: Any = None
        self._tables: dict[int, DiskTable] = {}
        self._ids = itertools.count()

    def table(self, name: str, ordered: bool, nbins: int = 0, vertex: int = -1) -> DiskTable:
        """A new, empty table of ``vertex`` (``name`` labels it in errors); ``ordered``
        keeps the order keys were inserted in; with ``nbins``, its keys are grouped by
        bin on disk (:meth:`DiskTable.take_bins`)."""
        if self._db is None:
            self._made()
            try:
                self._db = _open(self.path)
            except Exception as e:
                raise StateStoreError(f"cannot open the state store {self.path}: {e}") from e
        t = DiskTable(self._db, next(self._ids), ordered, name, self, nbins, vertex)
        self._tables[t.tid] = t
        return t

    def _made(self) -> None:
        """The worker's directory, owner-only (the run's exists on the driver's node; on
        others, made here)."""
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        os.makedirs(self.path, mode=0o700, exist_ok=True)

    def columns_dir(self) -> str:
        """A directory of this worker's own (owner-only, removed with the store) for
        columnar state's run files (:mod:`timely.state.spill`)."""
        path = os.path.join(self.path, "columns")
        self._made()
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    def dropped(self, table: DiskTable) -> None:
        self._tables.pop(table.tid, None)

    def maybe_flush(self) -> None:
        """Between activations: write the caches back once they hold too many keys."""
        if sum(len(t._cache) for t in self._tables.values()) >= self.cache:
            self.flush()

    def flush(self) -> None:
        for t in self._tables.values():
            t.flush()

    def close(self) -> None:
        """Close the store and remove the worker's directory (columnar run files too)."""
        self._tables.clear()
        if self._db is not None:
            self._db.close()
            self._db = None
        shutil.rmtree(self.path, ignore_errors=True)


_CANONICAL = frozenset({str, int, bytes})
"""Key types that are their own canonical form."""


def canonical(key: Any) -> Any:
    """The one form of the keys equal to ``key``: a dict holds ``1``, ``1.0``, ``True``
    and ``np.int64(1)`` as one key (and ``stable_hash`` sends them to one worker), so the
    store must too. Booleans, integral floats and numpy scalars become ints (or their
    Python values), inside tuples and frozensets too. A key read back from disk comes in
    this form."""
    t = type(key)
    if t in _CANONICAL or key is None:
        return key
    if t is bool:
        return int(key)
    if t is float:
        return int(key) if key.is_integer() else key
    if t is tuple:
        return tuple(map(canonical, key))
    if t is frozenset:
        return frozenset(map(canonical, key))
    if isinstance(key, np.generic):
        return canonical(key.item())
    return key


def _open(path: str) -> Any:
    """A worker's RocksDB: two 16 MiB write buffers and a 64 MiB block cache; a Bloom
    filter per file, so that looking up a key that is not there (every new key) rarely
    reads a file. Index and filter blocks stay out of the block cache, held by the open
    files (about 2 bytes a key): in the cache, random reads of a large table evicted
    them, and every read then loaded and checked a whole index block again (at 20M keys
    the updates slowed from 45,000 to 11,000 a second)."""
    from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteOptions

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(16 << 20)
    options.set_max_write_buffer_number(2)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(Cache(BLOCK_CACHE))
    table.set_cache_index_and_filter_blocks(False)
    options.set_block_based_table_factory(table)
    db = Rdict(path, options)
    write = WriteOptions()
    # scratch: a restore reads the checkpoints, not this (a property; the stub says method)
    write.disable_wal = True  # type: ignore[assignment,method-assign]
    db.set_write_options(write)
    return db


def _io(method: Callable[..., T]) -> Callable[..., T]:
    """``method`` with RocksDB's failures (plain ``Exception``s from rocksdict) raised
    as the worker's loss, naming the store (:meth:`DiskTable._failed`)."""

    @functools.wraps(method)
    def guarded(self: DiskTable, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except Exception as e:
            if type(e) is not Exception:
                raise
            raise self._failed(e) from e

    return guarded


class DiskTable(MutableMapping[Any, Any]):
    """A dict whose contents live in a worker's RocksDB, behind a write-back cache.

    Its entries are the keys starting with its id. In an ordered table each key's
    entry starts with its sequence number, and an order entry ``seq -> key`` per key
    gives iteration in insertion order (a key deleted and set again moves to the end, as
    in a dict); in others iteration follows the encoded keys' order.
    """

    def __init__(
        self,
        db: Any,
        tid: int,
        ordered: bool,
        name: str = "",
        store: StateStore | None = None,
        nbins: int = 0,
        vertex: int = -1,
    ) -> None:
        self.tid = tid
        prefix = tid.to_bytes(4, "big")
        self._data = prefix + _DATA
        self._order = prefix + _ORDER
        self._range = (prefix, (tid + 1).to_bytes(4, "big"))
        self.ordered = ordered
        self.nbins = nbins
        """Keys are stored after their bin (``stable_hash(key) % nbins``, 0: not): a bin's
        keys are one range of the store, which a migration takes out whole."""
        self._skip = _BIN if nbins else 0
        self.name = name
        self.vertex = vertex
        """The vertex whose table this is (its errors name its step)."""
        self._db = db
        self._store = store
        self._cache: dict[Any, Any] = {}
        """Key -> value (``[seq, value]`` when ordered), ``_ABSENT`` or ``_DELETED``."""
        self._stale: list[int] = []
        """Ordered: sequence numbers of deleted keys whose order entries are on disk."""
        self._len = 0
        self._seq = 0
        self._synced_seq = 0
        """Ordered: keys with a sequence number from here on have no order entry yet."""
        self._front = 0
        """Ordered: every order entry before this sequence number is deleted (or stale)."""

    # -- the dict interface -------------------------------------------------------------------
    def _load(self, key: Any) -> Any:
        v = self._cache.get(key, _ABSENT)
        if v is _ABSENT and key not in self._cache:
            stored = self._stored_one(key)
            try:
                raw = self._db.get(self._data + stored)
            except Exception as e:
                if type(e) is not Exception:
                    raise
                raise self._failed(e) from e
            if raw is None:
                v = _ABSENT
            elif self.ordered:
                v = [int.from_bytes(raw[:_SEQ], "big"), decode_plain([raw[_SEQ:]])[0]]
            else:
                v = decode_plain([raw])[0]
            self._cache[key] = v
        return v

    def __getitem__(self, key: Any) -> Any:
        v = self._load(key)
        if v is _ABSENT or v is _DELETED:
            raise KeyError(key)
        return v[1] if self.ordered else v

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._load(key)
        if v is _ABSENT or v is _DELETED:
            return default
        return v[1] if self.ordered else v

    def __contains__(self, key: object) -> bool:
        v = self._load(key)
        return v is not _ABSENT and v is not _DELETED

    def __setitem__(self, key: Any, value: Any) -> None:
        v = self._load(key)
        new = v is _ABSENT or v is _DELETED
        if new:
            self._len += 1
        if not self.ordered:
            self._cache[key] = value
        elif new:
            self._cache[key] = [self._seq, value]
            self._seq += 1
        else:
            v[1] = value

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def pop(self, key: Any, *default: Any) -> Any:
        v = self._load(key)
        if v is _ABSENT or v is _DELETED:
            if default:
                return default[0]
            raise KeyError(key)
        self._len -= 1
        self._cache[key] = _DELETED
        if self.ordered:
            self._stale.append(v[0])
            return v[1]
        return v

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Any]:
        if self.ordered:  # no sync: map_with_state's expiry asks for the front, key by key
            yield from self._in_order()
            return
        for keys, _ in self._scan(values=False):
            yield from keys

    def _in_order(self) -> Iterator[Any]:
        """An ordered table's keys without writing the cache out: the order entries on
        disk, less those deleted since (``_stale``), then the keys set since, by their
        sequence numbers (all later than those on disk). Starts at ``_front``, below which
        every order entry is gone, and reads in chunks that grow from a few keys."""
        stale = set(self._stale)
        db, order = self._db, self._order
        chunk = 16
        start = order + self._front.to_bytes(_SEQ, "big")
        first = True
        while True:
            try:
                it = db.iter()
                it.seek(start)
                suffixes, stored = _read(it, order, chunk)
                seqs: list[int] = []
                raws: list[bytes] = []
                for suffix, raw in zip(suffixes, stored):
                    seq = int.from_bytes(suffix, "big")
                    if seq not in stale:
                        seqs.append(seq)
                        raws.append(raw)
                more = it.valid() and it.key().startswith(order)
                if more:
                    start = it.key()
                del it
            except Exception as e:
                if type(e) is not Exception:
                    raise
                raise self._failed(e) from e
            if first and seqs:
                self._front = seqs[0]  # every entry before it is deleted or stale
            first = False
            yield from self._decode_keys(raws)
            if not more:
                break
            chunk = min(chunk * 4, _CHUNK)
        for _, k in sorted(self._fresh(), key=lambda e: e[0]):
            yield k

    def _fresh(self) -> list[tuple[int, Any]]:
        """Ordered: ``(seq, key)`` of the keys set since the last sync (none has an order
        entry on disk yet; all come after those that do)."""
        synced = self._synced_seq
        return [(v[0], k) for k, v in self._cache.items() if type(v) is list and v[0] >= synced]

    def popitem(self) -> tuple[Any, Any]:
        """The last key and its value, taken out (as a dict's ``popitem``, in an ordered
        table; in another, some key)."""
        if not self._len:
            raise KeyError("popitem(): the table is empty")
        key = self._last() if self.ordered else next(iter(self))
        return key, self.pop(key)

    def _last(self) -> Any:
        fresh = self._fresh()
        if fresh:
            return max(fresh, key=lambda e: e[0])[1]
        stale = set(self._stale)
        order = self._order
        it = self._db.iter()
        try:
            it.seek_for_prev(order + b"\xff" * _SEQ)
            while it.valid() and it.key().startswith(order):
                if int.from_bytes(it.key()[len(order) :], "big") not in stale:
                    return self._decode_keys([it.value()])[0]
                it.prev()
        finally:
            del it
        raise KeyError("popitem(): the table is empty")  # pragma: no cover - _len says not

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        for keys, values in self._scan(values=True):
            yield from zip(keys, values)

    def columns(self) -> tuple[list[Any], list[Any]]:
        """Every key and every value, in the table's order, as two lists (a snapshot)."""
        keys: list[Any] = []
        values: list[Any] = []
        for k, v in self._scan(values=True):
            keys.extend(k)
            values.extend(v)
        return keys, values

    def _scan(self, values: bool) -> Iterator[tuple[list[Any], list[Any]]]:
        """The table in chunks of decoded keys (and values), from disk after a sync."""
        try:
            yield from self._scan_store(values)
        except Exception as e:
            if type(e) is not Exception:
                raise
            raise self._failed(e) from e

    def _scan_store(self, values: bool) -> Iterator[tuple[list[Any], list[Any]]]:
        self._sync()
        db = self._db
        prefix = self._order if self.ordered else self._data
        it = db.iter()
        try:
            it.seek(prefix)
            while True:
                raw_keys, raw_values = _read(it, prefix, _CHUNK)
                if self.ordered:  # seq -> stored key
                    raw_keys = raw_values
                if not raw_keys:
                    return
                if values and self.ordered:
                    data = self._data
                    raw_values = [db.get(data + k)[_SEQ:] for k in raw_keys]
                yield self._decode_keys(raw_keys), decode_plain(raw_values) if values else []
                if len(raw_keys) < _CHUNK:
                    return
        finally:
            del it

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Add many pairs: written to disk in batches, past the cache (a restore or an
        install of millions of keys must not hold them all)."""
        pairs: Iterable[tuple[Any, Any]] = (
            args[0].items() if args and hasattr(args[0], "items") else args[0] if args else ()
        )
        if kwargs:
            pairs = itertools.chain(pairs, kwargs.items())
        self._sync()  # the cache stays: a value held may still change in place
        it = iter(pairs)
        while True:
            chunk = list(itertools.islice(it, _CHUNK))
            if not chunk:
                break
            self._load_chunk(chunk)

    @_io
    def _load_chunk(self, chunk: list[tuple[Any, Any]]) -> None:
        from rocksdict import WriteBatch

        pairs = dict(chunk)  # the last of a key's values, as dict.update keeps
        data = self._data
        raw_keys = self._stored(list(pairs))
        raw_values = self._encode(list(pairs.values()), pairs)
        db = self._db
        batch = WriteBatch(raw_mode=True)
        # Keys already here keep their place (and their count).
        olds = [db.get(data + k) for k in raw_keys] if self._len else [None] * len(raw_keys)
        for rk, rv, old in zip(raw_keys, raw_values, olds):
            if not self.ordered:
                batch.put(data + rk, rv)
            elif old is None:
                seq = self._seq.to_bytes(_SEQ, "big")
                self._seq += 1
                batch.put(data + rk, seq + rv)
                batch.put(self._order + seq, rk)
            else:
                batch.put(data + rk, old[:_SEQ] + rv)
            if old is None:
                self._len += 1
        db.write(batch)
        self._synced_seq = self._seq
        for k in pairs:  # on disk now: what the cache held of them is out of date
            self._cache.pop(k, None)

    @_io
    def clear(self) -> None:
        self._cache.clear()
        self._stale.clear()
        self._db.delete_range(*self._range)
        self._len = 0

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        for _, values in self._scan(values=True):
            yield from values

    def _encode(self, objs: list[Any], keys: Iterable[Any] | None = None) -> list[bytes]:
        """``objs`` as plain data (keys, or the values of ``keys``); what only pickle
        would carry is refused, naming the table and the key."""
        try:
            return encode_plain(objs)
        except PlainDataError as e:
            if keys is None:
                key = next(k for k in objs if not _plain(k))
                what = f"the key {key!r}"
            else:
                key = next(k for k, v in zip(keys, objs) if not _plain(v))
                what = f"the value of key {key!r}"
            error = PlainDataError(f"{self.name}: {what} cannot be kept on disk: {e}")
            error.vertex, error.key = self.vertex, key
            raise error from None

    def _stored(self, keys: list[Any]) -> list[bytes]:
        """Keys as stored: in their canonical form (:func:`canonical`), encoded, after
        their bin when grouped by bin."""
        if not set(map(type, keys)) <= _CANONICAL:
            keys = list(map(canonical, keys))
        raw = self._encode(keys)
        if not self.nbins:
            return raw
        return [b.to_bytes(_BIN, "big") + k for b, k in zip(bins_of(keys, self.nbins), raw)]

    def _decode_keys(self, stored: list[bytes]) -> list[Any]:
        """Keys as stored (:meth:`_stored`) decoded: their bins, if any, cut off."""
        skip = self._skip
        return decode_plain([k[skip:] for k in stored] if skip else stored)

    def _failed(self, error: Exception) -> StateStoreError:
        """RocksDB's failure, as the worker's loss (:class:`StateStoreError`)."""
        where = self._store.path if self._store is not None else "?"
        return StateStoreError(f"{self.name}: the state store {where} failed: {error}")

    def _stored_one(self, key: Any) -> bytes:
        if type(key) not in _CANONICAL:
            key = canonical(key)
        try:
            raw = encode_plain_one(key)
        except PlainDataError:
            self._encode([key])  # raises, naming the table and the key
            raise
        if not self.nbins:
            return raw
        return (stable_hash(key) % self.nbins).to_bytes(_BIN, "big") + raw

    @_io
    def take_bins(self, bins: Iterable[int]) -> tuple[list[Any], list[Any], list[tuple[int, int]]]:
        """Take out every key of ``bins`` (a migration): one range scan and one range
        delete per bin, so that the cost is the bins', not the table's. Returns the keys,
        their values and the ``(bin, count)`` runs they come in."""
        from rocksdict import WriteBatch

        self.flush()  # between activations: the cache may go
        keys: list[bytes] = []
        values: list[bytes] = []
        runs: list[tuple[int, int]] = []
        db, data = self._db, self._data
        batch = WriteBatch(raw_mode=True)
        for b in sorted(bins):
            lo = data + b.to_bytes(_BIN, "big")
            n = len(keys)
            it = db.iter()
            it.seek(lo)
            ks, vs = _read(it, lo, sys.maxsize)
            del it
            keys.extend(ks)
            values.extend(vs)
            if len(keys) > n:
                runs.append((b, len(keys) - n))
                batch.delete_range(lo, data + (b + 1).to_bytes(_BIN, "big"))
        if self.ordered:
            for v in values:
                batch.delete(self._order + v[:_SEQ])
            values = [v[_SEQ:] for v in values]
        db.write(batch)
        self._len -= len(keys)
        return decode_plain(keys), decode_plain(values), runs

    # -- the cache ----------------------------------------------------------------------------
    @_io
    def _sync(self) -> None:
        """Write every cached entry to disk, keeping the cache (an iteration reads disk,
        and a value held may still change in place before the next flush)."""
        from rocksdict import WriteBatch

        cache = self._cache
        if not cache and not self._stale:
            return
        batch = WriteBatch(raw_mode=True)
        order, data = self._order, self._data
        for seq in self._stale:
            batch.delete(order + seq.to_bytes(_SEQ, "big"))
        keys = [k for k, v in cache.items() if v is not _ABSENT]
        raw_keys = self._stored(keys)
        entries = [cache[k] for k in keys]
        live_keys = [k for k, v in zip(keys, entries) if v is not _DELETED]
        live = [cache[k] for k in live_keys]
        raw_values = iter(self._encode([v[1] for v in live] if self.ordered else live, live_keys))
        synced = self._synced_seq
        for k, rk, v in zip(keys, raw_keys, entries):
            if v is _DELETED:
                batch.delete(data + rk)
                cache[k] = _ABSENT
            elif self.ordered:
                seq = v[0].to_bytes(_SEQ, "big")
                batch.put(data + rk, seq + next(raw_values))
                if v[0] >= synced:
                    batch.put(order + seq, rk)
            else:
                batch.put(data + rk, next(raw_values))
        self._db.write(batch)
        self._stale.clear()
        self._synced_seq = self._seq

    def flush(self) -> None:
        """Write the cache back and empty it (between activations: no value is held)."""
        self._sync()
        self._cache.clear()

    @_io
    def drop(self) -> None:
        """Delete the table's entries; the table is not used again."""
        self._cache.clear()
        self._stale.clear()
        if self._store is not None:
            if self._store._db is not None:
                self._db.delete_range(*self._range)
            self._store.dropped(self)
            self._store = None
        self._len = 0


def _read(it: Any, prefix: bytes, limit: int) -> tuple[list[bytes], list[bytes]]:
    """From a RocksDB iterator's position, up to ``limit`` entries whose keys start with
    ``prefix``: their keys (``prefix`` cut off) and values; the iterator is left on the
    entry after them."""
    keys: list[bytes] = []
    values: list[bytes] = []
    cut = len(prefix)
    while it.valid() and len(keys) < limit:
        k = it.key()
        if not k.startswith(prefix):
            break
        keys.append(k[cut:])
        values.append(it.value())
        it.next()
    return keys, values


def _plain(obj: Any) -> bool:
    try:
        encode_plain([obj])
    except PlainDataError:
        return False
    return True
