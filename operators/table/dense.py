"""Integer keys that index an array: when they are dense enough, and grouping by them.

Graph algorithms key their rows by node number, ``0 .. n-1``: such keys need no hash
table and no sort. An array indexed by key holds one slot per possible key, so it pays
when the keys fill enough of their range (:func:`dense_top` decides, for every table
step that indexes by key). :func:`dense_group_by` is ``Table.group_by(key).aggregate``
for one such key column: counts, sums, minima and maxima are one ``add.at`` /
``fmin.at`` / ``minimum.at`` pass per batch (a sum adds in row order as numpy's
``bincount``, the power iteration's round, does), over Arrow's buffers as they are:
no batch is concatenated, and ``bincount`` would copy read-only arrays. When sums
show every key in range has rows, the rows are not counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DENSE_SLACK = 8
"""At most this many slots a key: 72 bytes a key at worst, against 16 kept sorted."""
DENSE_MIN = 1 << 16
"""Slots always allowed, however few the keys (a table that grows fills them later)."""

FAST = frozenset({"count_all", "count", "sum", "min", "max"})
"""Arrow's hash aggregates :func:`dense_group_by` computes itself."""


def dense_top(low: int, high: int, keys: int, minimum: int | None = None) -> int:
    """The size of an array indexed by key for integer keys in ``[low, high]``, about
    ``keys`` of them, if they are dense enough to be kept so (non-negative, at most
    ``DENSE_SLACK`` slots a key; at least ``minimum`` slots, ``DENSE_MIN`` by default,
    are always allowed); 0 if not."""
    top = high + 1
    least = DENSE_MIN if minimum is None else minimum
    if low >= 0 and top <= max(least, DENSE_SLACK * keys):
        return top
    return 0


def dense_group_by(table: pa.Table, key: str, aggs: list[tuple[str, str]]) -> pa.Table | None:
    """``table.group_by(key).aggregate(aggs)`` (Arrow's names: ``"<column>_<fn>"``,
    ``"count_all"``; the key first, as pyarrow 26 puts it) by arrays indexed by
    ``key - min(key)``, or ``None`` when that does not apply: a key that is not one
    integer column without nulls, keys too sparse (:func:`dense_top`, with no minimum: a
    small batch must not pay for a large range), a function outside :data:`FAST`, a
    value column that is not an integer or a float32/64.

    The same table as Arrow's, but for the row order: key order here, first seen there
    (neither is promised). Nulls are skipped; a key whose values are all null gets a
    null sum, minimum and maximum; NaN propagates through sums and is skipped by minima
    and maxima unless every value is NaN; integer sums stay integers (int64, uint64),
    wrapping on overflow as Arrow's do; between 0.0 and -0.0, a minimum may pick either.
    """
    n = table.num_rows
    if n == 0 or any(fn not in FAST for _, fn in aggs):
        return None
    column = table.column(key)
    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    if any(c and not _summable(table.schema.field(c).type) for c, _ in aggs):
        return None
    bounds = pc.min_max(column)  # one pass over every chunk
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    top = dense_top(0, high - low, n, minimum=0) if high < 1 << 63 else 0
    if not top:
        return None
    keys = [chunk.to_numpy() for chunk in column.chunks if len(chunk)]
    slots = [k.astype(np.int64) - low if low else k.astype(np.int64, copy=False) for k in keys]
    sums = _sums(table, slots, top, aggs)
    if sums:  # sums alone: which slots have rows is enough, no counts
        names = [key, *(f"{c}_{fn}" for c, fn in aggs)]
        types = [_out_type(table.schema.field(c).type, fn) for c, fn in aggs]
        if every_slot_used(sums, top):  # no gathers either
            arrays = [pa.array(np.arange(low, low + top), column.type)]
            arrays += [pa.array(sums[c], t) for (c, _), t in zip(aggs, types)]
            return pa.Table.from_arrays(arrays, names=names)
        positive = next((c for c in sums if _positive(table.column(c))), None)
        present = np.flatnonzero(sums[positive] != 0 if positive else _seen(slots, top))
        arrays = [pa.array(present + low if low else present, column.type)]
        arrays += [pa.array(sums[c][present], t) for (c, _), t in zip(aggs, types)]
        return pa.Table.from_arrays(arrays, names=names)
    rows = _count(slots, top)
    present = np.flatnonzero(rows)
    names = [key]
    arrays = [pa.array(present + low, column.type)]
    values: dict[str, tuple[Pieces, Pieces, Any]] = {}
    for c, fn in aggs:
        names.append(f"{c}_{fn}" if c else fn)
        if fn == "count_all":
            arrays.append(pa.array(rows[present], pa.int64()))
            continue
        if c not in values:
            values[c] = _valid(table.column(c), slots, rows, top)
        at, v, valid = values[c]
        if fn == "count":
            arrays.append(pa.array(valid[present], pa.int64()))
            continue
        empty = None if valid is rows else valid[present] == 0
        got = (_sum if fn == "sum" else _extreme)(at, v, top, fn)[present]
        arrays.append(pa.array(got, _out_type(table.schema.field(c).type, fn), mask=empty))
    return pa.Table.from_arrays(arrays, names=names)


Pieces = list[np.ndarray[Any, Any]]
"""A column as numpy arrays, one per non-empty chunk of the key column: the rows in
order, never concatenated (numpy's ``ufunc.at`` reads Arrow's read-only buffers as they
are, where ``bincount`` would copy them)."""


def _pieces(column: Any, slots: Pieces) -> list[Any]:
    """``column``'s rows as Arrow arrays cut as ``slots`` are (its chunks, when they
    are: a table made of batches has every column cut alike)."""
    chunks = [chunk for chunk in column.chunks if len(chunk)]
    if [len(chunk) for chunk in chunks] == [len(s) for s in slots]:
        return chunks
    whole, out, at = column.combine_chunks(), [], 0
    for s in slots:
        out.append(whole.slice(at, len(s)))
        at += len(s)
    return out


def _count(slots: Pieces, top: int) -> np.ndarray[Any, Any]:
    """How many rows each slot has."""
    rows = np.zeros(top, dtype=np.int64)
    for s in slots:
        np.add.at(rows, s, 1)
    return rows


def _positive(column: Any) -> bool:
    """A float column whose every value is > 0 (no NaN): a sum of such values is never
    0 (each addition rounds to at least the larger term), so a slot's sum is non-zero
    exactly when it has rows. Integers may wrap to 0: not them."""
    if not pa.types.is_floating(column.type):
        return False
    return all(bool(chunk.to_numpy().min() > 0) for chunk in column.chunks if len(chunk))


def _seen(slots: Pieces, top: int) -> np.ndarray[Any, Any]:
    """Which slots have rows (an assignment, ~2/3 of counting them with ``add.at``)."""
    seen = np.zeros(top, dtype=bool)
    for s in slots:
        seen[s] = True
    return seen


def _sums(table: pa.Table, slots: Pieces, top: int, aggs: list[tuple[str, str]]) -> dict[str, Any]:
    """Each summed column's sums by slot, when every aggregation is a sum of a column
    without nulls (else none): a column non-zero in every slot shows every key in range
    has rows, without counting rows per key (a zero, -0.0 too, may be either)."""
    if any(fn != "sum" or table.column(c).null_count for c, fn in aggs):
        return {}
    return {
        c: _sum(slots, [p.to_numpy() for p in _pieces(table.column(c), slots)], top)
        for c, _ in aggs
    }


def every_slot_used(sums: dict[str, np.ndarray[Any, Any]], top: int) -> bool:
    """Whether some column's sums show every slot has rows: a slot without sums to
    exactly 0 (+0.0), so a column with no zero sum has rows in every slot. A zero sum
    (-0.0 too) may be a slot with rows or one without: then the rows are counted."""
    return any(np.count_nonzero(s) == top for s in sums.values())


def _summable(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t))


def _valid(
    column: Any, slots: Pieces, rows: np.ndarray[Any, Any], top: int
) -> tuple[Pieces, Pieces, np.ndarray[Any, Any]]:
    """A value column's non-null values, their slots, and how many each slot has."""
    pieces = _pieces(column, slots)
    if not column.null_count:
        return slots, [p.to_numpy() for p in pieces], rows
    at, v = [], []
    for s, p in zip(slots, pieces):
        keep = pc.is_valid(p).to_numpy(zero_copy_only=False)
        at.append(s[keep])
        v.append(p.fill_null(0).to_numpy()[keep])
    return at, v, _count(at, top)


def _sum(at: Pieces, v: Pieces, top: int, fn: str = "sum") -> np.ndarray[Any, Any]:
    """Per slot, the sum of its values in row order (as ``bincount`` adds them, so the
    same floats): float64 for floats, int64 or uint64 for integers, wrapping as Arrow's
    do; a float sum past the largest float is infinite, as Arrow's, without numpy's
    warning."""
    kind = v[0].dtype.kind
    wide = np.float64 if kind == "f" else np.int64 if kind == "i" else np.uint64
    sums = np.zeros(top, dtype=wide)
    with np.errstate(over="ignore", invalid="ignore"):
        for a, x in zip(at, v):
            np.add.at(sums, a, x.astype(wide, copy=False))
    return sums


def _extreme(at: Pieces, v: Pieces, top: int, fn: str) -> np.ndarray[Any, Any]:
    """Per slot, the least (``fn == "min"``) or greatest value; floats skip NaN unless a
    slot has nothing else (``fmin``/``fmax`` from a NaN start)."""
    least = fn == "min"
    dtype = v[0].dtype
    op: np.ufunc
    if dtype.kind == "f":
        got = np.full(top, np.nan, dtype=dtype)
        op = np.fmin if least else np.fmax
    else:
        bound = np.iinfo(dtype)
        got = np.full(top, bound.max if least else bound.min, dtype=dtype)
        op = np.minimum if least else np.maximum
    for a, x in zip(at, v):
        op.at(got, a, x)
    return got


def _out_type(t: pa.DataType, fn: str) -> pa.DataType:
    """The type of Arrow's hash aggregate ``fn`` of a column of type ``t``."""
    if fn != "sum":
        return t
    if pa.types.is_floating(t):
        return pa.float64()
    return pa.int64() if pa.types.is_signed_integer(t) else pa.uint64()
