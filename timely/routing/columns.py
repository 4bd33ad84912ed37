"""Routing batches of columns: a key's bin from whole columns, the same bin as
:func:`~timely.routing.hashing.stable_hash` gives the row.

A table stream's records are Arrow ``RecordBatch``es; an exchange by key columns must
put every key in the bin the row path would (DESIGN.md, invariant 8), so that routing
tables, Megaphone's migration, rescales and checkpoints never depend on which path
carried a key. Integers, booleans, floats and nulls are hashed in numpy passes that
repeat ``stable_hash``'s arithmetic in uint64 (an exchange by one int64 column reads
each row's bin from two bytes of one multiply: :func:`int_bins`); strings and bytes are
hashed once per distinct value of a batch (a dictionary encoding), from the
dictionary's buffers by a numpy CRC-32 equal to ``stable_hash``'s
(:func:`~timely.routing.hashing.bytes_hashes`). Several key columns combine as
``stable_hash`` combines a tuple.

A batch is split by destination: when the workers are few, each one's rows are found
by a compare and ``nonzero`` pass and gathered by a ``take`` of their own (the parts
are the same rows, in order, as one stable ordering and a slice each would give, with
no ordering built); when they are many, one stable radix sort of the worker numbers,
one ``take`` and a zero-copy slice per worker.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from timely.routing.channels import Exchange
from timely.routing.hashing import _GOLDEN, LONGEST, bytes_hashes, stable_hash

_NULL = np.uint64(0x5BD1E995)
_G = np.uint64(_GOLDEN)
_S32 = np.uint64(32)
_CACHE = 1 << 20
"""How many distinct strings a channel remembers the hash of (cleared when full)."""
_FEW = 8
"""Up to this many workers, :func:`split_by` finds each one's rows by a pass of its own."""
_LITTLE = sys.byteorder == "little"
_LOOKUPS = 16
"""How many routing tables a channel keeps the lookup of (forgotten all at once when
full): a fluid migration has a few configurations in flight at once."""


def _mix(h: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    with np.errstate(over="ignore"):
        out: np.ndarray[Any, Any] = h * _G  # a new array: the rest works in place on it
    out ^= out >> _S32
    return out


def _int_hashes(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``stable_hash`` of machine integers (the two's complement bits, as ``& _MASK``)."""
    if values.dtype == np.uint64:
        big = values >= np.uint64(1 << 63)
        h = _mix(values)
        if big.any():  # stable_hash folds ints of 2**63 and more: _mix(v) ^ _mix(v >> 64)
            h = np.where(big, h ^ _mix(np.zeros(1, np.uint64)), h)
        return h
    if values.dtype != np.int64:  # int64 is reinterpreted as it is, without a copy
        values = values.astype(np.int64)
    return _mix(values.view(np.uint64))


_DISTINCT = 0.5
"""A string column whose last dictionary held at least this share of its rows as
distinct values is hashed value by value next time (:meth:`ColumnHasher.hashes`)."""
_RECHECK = 16
"""Every this many batches hashed value by value, one goes through the dictionary again,
to see whether its values still repeat as little."""


@dataclass
class ColumnHasher:
    """Per-row ``stable_hash`` of one column's values, remembering strings' hashes.

    A string column is hashed through a dictionary of its distinct values (one hash per
    value, however often it repeats: raw words), unless this column's last dictionary
    showed that its values hardly repeat (a group's keys, as after ``group_by``'s
    partial aggregates): then the dictionary costs more than it saves (~2x the hashing
    of 20,000 distinct words) and the values are hashed from the column's own buffers.
    Both give the same hashes."""

    _strings: dict[Any, int] = field(default_factory=dict)
    _direct: int = 0
    """Batches left to hash value by value before the dictionary is tried again."""

    def hashes(self, column: pa.Array | pa.ChunkedArray) -> np.ndarray[Any, Any]:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        t = column.type
        n = len(column)
        if pa.types.is_dictionary(t):
            return self._by_dictionary(column.dictionary, column.indices, n)
        if pa.types.is_null(t):
            return np.full(n, _NULL, dtype=np.uint64)
        if pa.types.is_boolean(t) or pa.types.is_integer(t):
            zero = pa.scalar(False if pa.types.is_boolean(t) else 0, t)
            filled = pc.fill_null(column, zero) if column.null_count else column
            values = filled.to_numpy(zero_copy_only=False)
            if values.dtype == np.bool_:
                values = values.astype(np.int64)
            h = _int_hashes(values)
        elif pa.types.is_floating(t):
            h = self._floats(column)
        elif (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or (pa.types.is_large_binary(t))
        ):
            if self._direct > 0:
                self._direct -= 1
                direct = text_hashes(column)
                if direct is not None:
                    return direct
            encoded = pc.dictionary_encode(column)
            if len(encoded.dictionary) >= _DISTINCT * n and not column.null_count:
                self._direct = _RECHECK
            return self._by_dictionary(encoded.dictionary, encoded.indices, n)
        else:  # other types: stable_hash per row, the slow path
            return np.fromiter(
                (stable_hash(v) for v in column.to_pylist()), dtype=np.uint64, count=n
            )
        if column.null_count:
            h = np.where(column.is_null().to_numpy(zero_copy_only=False), _NULL, h)
        return h

    def _floats(self, column: pa.Array) -> np.ndarray[Any, Any]:
        values = pc.fill_null(column, 0.0).to_numpy(zero_copy_only=False).astype(np.float64)
        whole = (np.floor(values) == values) & (np.abs(values) < 2.0**63)
        as_int = _int_hashes(np.where(whole, values, 0).astype(np.int64))
        as_bits = _mix(values.view(np.uint64))
        return np.where(whole, as_int, as_bits)

    def _by_dictionary(self, values: pa.Array, indices: pa.Array, n: int) -> np.ndarray[Any, Any]:
        table = text_hashes(values)
        if table is None:
            table = self._one_by_one(values)
        if not len(table):
            return np.full(n, _NULL, dtype=np.uint64)
        idx = (
            indices.fill_null(0).to_numpy(zero_copy_only=False)
            if indices.null_count
            else (indices.to_numpy(zero_copy_only=False))
        )
        out: np.ndarray[Any, Any] = table[idx.astype(np.intp)]
        if indices.null_count:
            out = np.where(indices.is_null().to_numpy(zero_copy_only=False), _NULL, out)
        return out

    def _one_by_one(self, values: pa.Array) -> np.ndarray[Any, Any]:
        cache = self._strings
        keys = values.to_pylist()
        if len(cache) + len(keys) > _CACHE:
            cache.clear()
        get = cache.get
        hashed = []
        for k in keys:
            known = get(k)
            if known is None:
                known = cache[k] = stable_hash(k)
            hashed.append(known)
        return np.array(hashed, dtype=np.uint64)


_TEXT = {
    pa.string(): (np.int32, False),
    pa.binary(): (np.int32, True),
    pa.large_string(): (np.int64, False),
    pa.large_binary(): (np.int64, True),
}


def text_hashes(values: pa.Array) -> np.ndarray[Any, Any] | None:
    """``stable_hash`` of each value of a string or binary array without nulls, from its
    buffers (:func:`~timely.routing.hashing.bytes_hashes`; values longer than
    ``LONGEST`` bytes one by one); ``None`` for any other array."""
    kind = _TEXT.get(values.type)
    if kind is None or values.null_count:
        return None
    offset_type, binary = kind
    n = len(values)
    _, offsets, data = values.buffers()
    width = np.dtype(offset_type).itemsize
    ends = np.frombuffer(offsets, offset_type, n + 1, values.offset * width)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
    starts, lengths = ends[:-1], np.diff(ends)
    long = np.flatnonzero(lengths > LONGEST)
    if not len(long):
        return bytes_hashes(raw, starts, lengths, binary)
    out = np.empty(n, np.uint64)
    short = np.flatnonzero(lengths <= LONGEST)
    out[short] = bytes_hashes(raw, starts[short], lengths[short], binary)
    out[long] = [stable_hash(values[int(i)].as_py()) for i in long]
    return out


def key_hashes(
    batch: pa.RecordBatch | pa.Table, keys: tuple[str, ...], hashers: list[ColumnHasher]
) -> np.ndarray[Any, Any]:
    """Per row, ``stable_hash`` of the row's key: the value of one key column, or the
    tuple of several."""
    if len(keys) == 1:
        return hashers[0].hashes(batch.column(keys[0]))
    h = np.full(batch.num_rows, np.uint64(0x345678 + len(keys)), dtype=np.uint64)
    for name, hasher in zip(keys, hashers):
        h = _mix(h ^ hasher.hashes(batch.column(name)))
    return h


class ColumnExchange(Exchange):
    """Batches of rows go to the workers owning their key's bin, by whole columns: each
    batch is split into one slice per worker (see the module docstring)."""

    kind = "exchange"

    def __init__(self, keys: tuple[str, ...]) -> None:
        super().__init__(None)
        self.keys = keys
        self._hashers = [ColumnHasher() for _ in keys]
        self._lookups: dict[int, tuple[np.ndarray[Any, Any], Lookup]] = {}
        """Each routing table seen (by ``id``, the array kept so that the id stays its
        own) made ready for :func:`workers_of`: a table is built once per configuration
        and routes every batch until the next, so its lookup is made once, not per batch."""

    def _lookup(self, table: np.ndarray[Any, Any]) -> Lookup:
        """``table``'s lookup, made on first use. A new configuration is a new array
        (``Routing`` never changes one in place), so a table changed by a migration, a
        rescale or a restore is a miss."""
        entry = self._lookups.get(id(table))
        if entry is not None and entry[0] is table:
            return entry[1]
        if len(self._lookups) >= _LOOKUPS:
            self._lookups.clear()
        made = lookup(table)
        self._lookups[id(table)] = (table, made)
        return made

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_hashers"] = [ColumnHasher() for _ in self.keys]  # a memory, not the plan
        state["_lookups"] = {}
        return state

    def __repr__(self) -> str:
        return f"exchange_columns{self.keys}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ColumnExchange) and other.keys == self.keys

    def __hash__(self) -> int:
        return hash(("exchange_columns", self.keys))

    def route_by(
        self,
        records: list[Any],
        table: np.ndarray[Any, Any],
        here: int,
        load: np.ndarray[Any, Any] | None = None,
    ) -> dict[int, list[Any]]:
        bins = len(table)
        ready = self._lookup(table)
        out: dict[int, list[Any]] = {}
        for batch in records:
            if batch.num_rows == 0:
                continue
            key_bins = int_bins(batch, self.keys, bins)
            if key_bins is None:
                key_bins = _bins_of(key_hashes(batch, self.keys, self._hashers), bins)
            if load is not None:
                load += np.bincount(key_bins, minlength=bins)
            dest = workers_of(key_bins, ready)
            for w, part in split_by(batch, dest):
                out.setdefault(w, []).append(part)
        return out


def int_bins(
    batch: pa.RecordBatch | pa.Table, keys: tuple[str, ...], bins: int
) -> np.ndarray[Any, Any] | None:
    """Each row's bin, ``stable_hash(key) % bins``, for one int64 key column without
    nulls and up to 256 bins, a power of two (``DEFAULT_BINS``), in two passes instead
    of the hash's five; ``None`` for any other key, bins or byte order.

    ``stable_hash`` of an int64 ``v`` is ``h ^ (h >> 32)`` with ``h = v * golden`` (mod
    2**64), so its low byte, all a bin below 256 reads, is byte 0 of ``h`` XOR byte 4:
    one multiply, then an XOR of two byte-strided views (uint8 out, contiguous, which
    the routing table's lookup takes faster than a strided view)."""
    if len(keys) != 1 or bins > 1 << 8 or bins & (bins - 1) or not _LITTLE:
        return None
    column = batch.column(keys[0])
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            return None
        column = column.chunk(0)
    if column.type != pa.int64() or column.null_count:
        return None
    values = column.to_numpy(zero_copy_only=True)
    with np.errstate(over="ignore"):
        h = values.view(np.uint64) * _G
    octets = h.view(np.uint8)
    low: np.ndarray[Any, Any] = octets[0::8] ^ octets[4::8]
    if bins != 1 << 8:
        low &= np.uint8(bins - 1)
    return low


def _bins_of(hashes: np.ndarray[Any, Any], bins: int) -> np.ndarray[Any, Any]:
    """Each hash's bin, ``hash % bins``: the low bits when ``bins`` is a power of two (as
    ``DEFAULT_BINS`` is; a mask is cheaper than a 64-bit division), in the narrowest
    integer type that holds them (indexing with it is cheaper too). Up to 256 bins on a
    little-endian machine, the low byte of each hash is read in place (a strided view)."""
    if bins <= 1 << 8 and bins & (bins - 1) == 0 and _LITTLE:
        low_byte: np.ndarray[Any, Any] = hashes.view(np.uint8)[::8]
        return low_byte if bins == 1 << 8 else low_byte & np.uint8(bins - 1)
    low = hashes & np.uint64(bins - 1) if bins & (bins - 1) == 0 else hashes % np.uint64(bins)
    out: np.ndarray[Any, Any] = low.astype(
        np.uint8 if bins <= 1 << 8 else np.uint16 if bins <= 1 << 16 else np.intp
    )
    return out


@dataclass(frozen=True, eq=False)
class Lookup:
    """A routing table made ready to look rows' workers up in, once per table."""

    table: np.ndarray[Any, Any]
    """One worker per bin, in the narrowest unsigned type that holds them: the
    destinations looked up through it need no conversion in :func:`split_by`."""
    turn: int | None
    """``W - 1`` when the bins are dealt to ``W`` workers in turn (bin ``b`` on worker
    ``b % W``) and ``W`` is a power of two: a row's worker is then its bin's low bits."""


def lookup(table: np.ndarray[Any, Any]) -> Lookup:
    """``table`` (one worker per bin) ready for :func:`workers_of`: its largest worker and
    whether it is dealt in turn are read here, not for every batch it routes."""
    top = int(table.max()) if len(table) else 0
    narrow = table.astype(np.uint8) if top < 1 << 8 and table.dtype != np.uint8 else table
    workers = top + 1
    dealt = workers & (workers - 1) == 0 and _dealt_in_turn(narrow, workers)
    return Lookup(narrow, workers - 1 if dealt else None)


def workers_of(key_bins: np.ndarray[Any, Any], table: Lookup) -> np.ndarray[Any, Any]:
    """Each row's worker, ``table[bin]``, from its bin (``key_bins``, integers). Bins dealt
    to ``W`` workers in turn (``default_table``, ``W`` a power of two: every run that has
    not migrated) are read from the bin's low bits; any other table by Arrow's ``take``,
    which reads 8- or 16-bit bins as they are (numpy's converts them to 64-bit indices
    first)."""
    if table.turn is not None:
        out: np.ndarray[Any, Any] = key_bins & key_bins.dtype.type(table.turn)
        return out
    dest: np.ndarray[Any, Any] = pc.take(
        pa.array(table.table), pa.array(key_bins), boundscheck=False
    ).to_numpy()
    return dest


def _dealt_in_turn(table: np.ndarray[Any, Any], workers: int) -> bool:
    """Whether bin ``b`` is on worker ``b % workers`` for every bin of ``table``."""
    bins = len(table)
    if bins % workers:
        return False
    turn = np.arange(workers, dtype=table.dtype)
    return bool((table.reshape(-1, workers) == turn).all())


def split_by(batch: pa.RecordBatch | pa.Table, dest: np.ndarray[Any, Any]) -> list[tuple[int, Any]]:
    """``batch``'s rows grouped by ``dest`` (one worker per row): ``(worker, part)`` for
    each worker with rows, in worker order, each part its rows in their order.

    For up to ``_FEW`` workers, each worker's row numbers come from one compare and
    ``nonzero`` pass and its part from a ``take`` of them (a batch whose rows all go to
    one worker is returned as it is). Two passes over the worker numbers per worker, and
    one gather in all: less than building one ordering of every row (a ``compress`` of
    row numbers per worker) and gathering by it. For more workers, a stable sort of the
    worker numbers as 8- or 16-bit ints (numpy's radix sort: linear, where a stable sort
    of int64 is a merge sort), one ``take``, and a zero-copy slice per worker, where
    each worker's rows start coming from a ``bincount``."""
    n = len(dest)
    top = int(dest.max())
    if top < _FEW:
        parts = []
        for w in range(top + 1):
            rows = np.flatnonzero(dest == w)
            if len(rows) == n:
                return [(w, batch)]
            if len(rows):
                parts.append((w, _gather(batch, rows)))
        return parts
    first = int(dest[0])
    if (dest == first).all():
        return [(first, batch)]
    small = (
        dest.astype(np.uint8 if top < 1 << 8 else np.uint16, copy=False) if top < 1 << 16 else dest
    )
    order = np.argsort(small, kind="stable")
    taken = _gather(batch, order)
    counts = np.bincount(small, minlength=top + 1)
    ends = np.cumsum(counts)
    return [
        (w, taken.slice(int(ends[w] - counts[w]), int(counts[w])))
        for w in np.flatnonzero(counts).tolist()
    ]


def _gather(batch: pa.RecordBatch | pa.Table, rows: np.ndarray[Any, Any]) -> Any:
    """``batch``'s rows at ``rows`` (row numbers, each in range by construction), by
    Arrow's ``take`` without its bounds check (which ``batch.take`` makes)."""
    return pc.take(batch, pa.array(rows), boundscheck=False)


def exchange_columns(*keys: str) -> ColumnExchange:
    """Partition a table stream's batches by the values of the ``keys`` columns: each
    row goes where ``exchange(lambda r: key)`` would send its key (see
    :mod:`timely.routing.columns`)."""
    if not keys or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"exchange_columns takes column names, got {keys!r}")
    return ColumnExchange(tuple(keys))
