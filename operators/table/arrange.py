"""Arrangements: a table's rows sorted by one key column of numbers, probed by the rows
of another table with ``searchsorted`` (or, for dense integer keys, an array of where
each key's rows start), their matches gathered with index arithmetic: a join with no
hash table. The arranged join of a loop (:class:`~operators.table.loops.ArrangedJoin`)
keeps one per epoch; :class:`~operators.table.vertices.Join` makes one per time for
dense integer keys, in place of Arrow's hash join."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.table.dense import dense_top


class Arrangement(NamedTuple):
    """Rows sorted by key, and ``index``: the sorted keys (for ``searchsorted``) or, if
    ``dense``, where each key's rows start (``starts[k]:starts[k + 1]``); ``None``: not
    arranged, ``table`` as it came."""

    index: Any
    table: pa.Table
    dense: bool
    keys: Any = None
    """If ``dense``: the rows' keys, sorted (a numpy array)."""


def arrange(table: pa.Table, key: str, sent: list[str], dense_only: bool = False) -> Arrangement:
    """``table`` (its columns ``sent``) arranged by its column of numbers ``key``, rows
    with a null key dropped; not arranged when ``dense_only`` and the keys are not
    dense integers."""
    kind = table.schema.field(key).type
    keys_column = table.column(key)
    top = 0
    if pa.types.is_integer(kind) and table.num_rows:
        low, high = pc.min_max(keys_column).values()
        if low.is_valid:
            top = dense_top(low.as_py(), high.as_py(), table.num_rows)
    if dense_only and not top:
        return Arrangement(None, table, False)
    if keys_column.null_count:
        table = table.filter(pc.is_valid(keys_column))
        keys_column = table.column(key)
    keys = keys_column.to_numpy()
    if in_order(keys):  # as it is: no sort, no gather
        rows, index = table.select(sent), keys
    else:
        order = _stable_order(keys, top)
        rows, index = table.select(sent).take(order), keys[order]
    if top:
        starts = np.zeros(top + 1, dtype=np.int64)
        np.cumsum(np.bincount(index, minlength=top), out=starts[1:])
        return Arrangement(starts, rows, True, index)
    return Arrangement(index, rows, False)


def in_order(keys: np.ndarray[Any, Any]) -> bool:
    """The keys are in order already (one pass; a sort and a gather of every column
    saved: a table keyed by node numbers often comes so)."""
    return len(keys) < 2 or bool(np.all(keys[:-1] <= keys[1:]))


def probe(
    arranged: Arrangement,
    rows: pa.Table,
    key: str,
    how: str,
    outer: int,
    out: tuple[list[str], dict[str, str]],
    out_schema: pa.Schema,
) -> pa.Table:
    """The join of ``rows`` (probing on ``key``) with the arranged rows, which are the
    left side if ``outer`` is 0, else the right; ``how``: inner, left, semi or anti (the
    last three with the probe rows on the left). ``out``: the left side's columns sent
    and the right side's, with their output names."""
    left_out, right_out = out
    probe_column = rows.column(key)
    valid = None
    if probe_column.null_count:  # a null key matches nothing
        valid = pc.is_valid(probe_column).to_numpy(zero_copy_only=False)
        probe_column = probe_column.fill_null(0)
    at_keys = probe_column.to_numpy()
    index = arranged.index
    n = len(at_keys)
    first = _first_of_run(at_keys) if arranged.dense and valid is None else None
    if first is not None and first >= 0 and first + n < len(index):
        lo, hi = index[first : first + n], index[first + 1 : first + n + 1]  # views, no gather
    elif arranged.dense and n and at_keys.min() >= 0 and at_keys.max() < len(index) - 1:
        lo, hi = index[at_keys], index[at_keys + 1]  # every key within the index
    elif arranged.dense:
        inside = (at_keys >= 0) & (at_keys < len(index) - 1)
        at = np.where(inside, at_keys, 0)
        lo = np.where(inside, index[at], 0)
        hi = np.where(inside, index[at + 1], 0)
    else:
        lo = np.searchsorted(index, at_keys, side="left")
        hi = np.searchsorted(index, at_keys, side="right")
    if valid is not None:
        hi = np.where(valid, hi, lo)
    counts = hi - lo
    if how in ("semi", "anti"):  # the probe rows are the left side here
        keep = counts > 0 if how == "semi" else counts == 0
        return rows.select(left_out).filter(pa.array(keep))
    if how == "left" and outer == 1 and n and int(counts.max()) <= 1:
        return _lookup(arranged.table, rows, lo, counts, out, out_schema)
    repeat = _Repeat(counts)
    match = _matches(lo, hi, counts, repeat)
    if isinstance(match, slice) and arranged.keys is not None and repeat.repeats:
        repeat.rows = _walk_rows(arranged.keys[match], at_keys, counts, first)
    table = arranged.table
    if outer == 0:
        columns = [_gather(table, n, match) for n in left_out]
        columns += [repeat.column(rows.column(n)) for n in right_out]
    else:
        columns = [repeat.column(rows.column(n)) for n in left_out]
        columns += [_gather(table, n, match) for n in right_out]
    got = pa.Table.from_arrays(columns, schema=out_schema)
    if how == "left":  # the probe rows without a match, with nulls
        alone = rows.filter(pa.array(counts == 0))
        if alone.num_rows:
            nulls = [pa.nulls(alone.num_rows, out_schema.field(o).type) for o in right_out.values()]
            lone = [alone.column(n) for n in left_out]
            got = pa.concat_tables([got, pa.Table.from_arrays([*lone, *nulls], schema=out_schema)])
    return got


def lookup_run(
    rows: pa.Table,
    table: pa.Table,
    keys: tuple[str, str],
    how: str,
    out: tuple[list[str], dict[str, str]],
    out_schema: pa.Schema,
) -> pa.Table | None:
    """``rows`` (the left side) joined with ``table`` (``how``: inner or left) when the
    rows' keys are ``k, k + 1, ...`` without nulls (node numbers in order) and the
    table's are unique and in order (a dense ``group_by``'s output): each table row's
    match is the row at its key less ``k``, so its columns are put in place, with no
    arrangement and no search. ``None`` when the keys are not so (or are ``uint64``)."""
    left_key, right_key = keys
    probe_keys = rows.column(left_key)
    table_keys = table.column(right_key)
    if probe_keys.null_count or table_keys.null_count or not rows.num_rows:
        return None
    at_keys = probe_keys.to_numpy()
    first = _first_of_run(at_keys)
    if first is None:
        return None
    found = table_keys.to_numpy()
    if found.dtype == np.uint64 or at_keys.dtype == np.uint64:
        return None  # keys past int64's range would not subtract
    if not unique_in_order(found):
        return None
    n = len(at_keys)
    where = found.astype(np.int64, copy=False) - first
    if len(where) and (where[0] < 0 or where[-1] >= n):  # keys beyond the rows match none
        inside = np.flatnonzero((where >= 0) & (where < n))
        where = where[inside]
    else:
        inside = np.arange(len(where))
    matched = np.zeros(n, dtype=bool)
    matched[where] = True
    left_out, right_out = out
    if how == "left":
        columns = [rows.column(c) for c in left_out]
        columns += [_at_or_null(table.column(c), inside, matched) for c in right_out]
    else:
        keep = pa.array(matched)
        columns = [rows.column(c).filter(keep) for c in left_out]
        columns += [table.column(c).take(inside) for c in right_out]
    return pa.Table.from_arrays(columns, schema=out_schema)


def unique_in_order(keys: np.ndarray[Any, Any]) -> bool:
    """Each key greater than the one before: unique and in order (one pass)."""
    return len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1]))


def _lookup(
    table: pa.Table,
    rows: pa.Table,
    lo: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    out: tuple[list[str], dict[str, str]],
    out_schema: pa.Schema,
) -> pa.Table:
    """A left join where no probe row matched twice (the arranged keys are unique): each
    probe row once, in its order (the next join's probe keeps walking its arrangement in
    key order), its columns as they are, the arranged side's at the match or null."""
    left_out, right_out = out
    columns = [rows.column(n) for n in left_out]
    if right_out:
        matched = counts > 0
        at = lo[matched]
        for n in right_out:
            columns.append(_at_or_null(table.column(n), at, matched))
    return pa.Table.from_arrays(columns, schema=out_schema)


def _at_or_null(column: Any, at: np.ndarray[Any, Any], matched: np.ndarray[Any, Any]) -> Any:
    """Per probe row, ``column`` at its match (``at``: of the rows that ``matched``, in
    order) or null: numbers without nulls by a numpy gather put in place, their
    validity the bits of ``matched``; other columns by Arrow's gather of indices that
    are null where nothing matched (~3x the time)."""
    t = column.type
    n = len(matched)
    if column.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        values = column.to_numpy()[at]
        if len(at) == n:
            return pa.array(values, t)
        placed = np.zeros(n, dtype=values.dtype)
        placed[matched] = values
        valid = _validity(matched)
        return pa.Array.from_buffers(t, n, [valid, pa.py_buffer(placed)], n - len(at))
    if len(column) == 0:
        return pa.nulls(n, t)
    index = np.zeros(n, dtype=np.int64)
    index[matched] = at
    return column.take(pa.array(index, mask=~matched))


def _validity(valid: np.ndarray[Any, Any]) -> Any:
    """An Arrow validity bitmap of a boolean array (least significant bit first)."""
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _stable_order(keys: np.ndarray[Any, Any], top: int) -> np.ndarray[Any, Any]:
    """The order that sorts ``keys`` stably. For integer keys in ``[0, top)`` (``top`` >
    0) below 2**32: numpy's radix sort (its stable sort of 16-bit numbers), one pass per
    16 bits, least significant first; else numpy's stable merge sort (~5x slower)."""
    if top and top <= 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    if top and top <= 1 << 32:
        first = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
        high = (keys[first] >> 16).astype(np.uint16)
        order: np.ndarray[Any, Any] = first[np.argsort(high, kind="stable")]
        return order
    return np.argsort(keys, kind="stable")


def _first_of_run(at_keys: np.ndarray[Any, Any]) -> int | None:
    """``k`` if the keys are ``k, k + 1, ..., k + n - 1`` (the nodes out of a dense
    ``group_by``, in order), else ``None``."""
    n = len(at_keys)
    if not n or at_keys.dtype.kind not in "iu":
        return None
    first = int(at_keys[0])
    if int(at_keys[-1]) - first != n - 1:
        return None
    return first if np.array_equal(at_keys, np.arange(first, first + n)) else None


def _walk_rows(
    keys: np.ndarray[Any, Any],
    at_keys: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    first: int | None,
) -> np.ndarray[Any, Any]:
    """The probe row of each matched arranged row when the probe walks a dense
    arrangement in key order (``keys``: the matched rows' keys): each key with matches
    is one probe row's, so a row's probe row is where its key is among the probe keys
    (the key less the first, ``first``, when the probe keys are consecutive integers
    without nulls). A gather, where ``np.repeat`` of each probe row by its count costs
    ~4x as much."""
    if first is not None:
        return keys - first if first else keys
    matched = counts > 0
    where = np.zeros(int(keys[-1]) + 1, dtype=np.intp)
    where[at_keys[matched]] = np.flatnonzero(matched)
    rows: np.ndarray[Any, Any] = where[keys]
    return rows


def _matches(
    lo: np.ndarray[Any, Any],
    hi: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    repeat: _Repeat,
) -> np.ndarray[Any, Any] | slice:
    """The arranged rows each probe row matches (``lo[i]:hi[i]``), one after another:
    a slice when each range starts where the one before ended (the probe walks the
    arrangement in key order, as the ranks of a dense ``group_by`` do), so the arranged
    side's columns are sliced, not gathered (rows that match nothing, wherever they are,
    left out of the walk: a left join's rows without a match come after the others);
    ``lo`` itself (of the rows that matched) when no row matched more than once (unique
    keys: a lookup)."""
    if len(lo) and np.array_equal(lo[1:], hi[:-1]):
        return slice(int(lo[0]), int(hi[-1]))
    walk = _walk_of_matched(lo, hi, counts, repeat)
    if walk is not None:
        return walk
    if repeat.once:
        return lo
    if repeat.mask is not None:
        at: np.ndarray[Any, Any] = lo[repeat.mask]
        return at
    ends = np.cumsum(counts)
    shift = lo - (ends - counts)  # each range's start, less its output offset
    total = int(ends[-1]) if len(ends) else 0
    match: np.ndarray[Any, Any] = np.repeat(shift, counts) + np.arange(total)
    return match


def _walk_of_matched(
    lo: np.ndarray[Any, Any],
    hi: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    repeat: _Repeat,
) -> slice | None:
    """The matches as a slice when the ranges of the rows that matched each start where
    the one before ended (the rows without a match add nothing, wherever they are);
    ``None`` if they do not, or if every row matched (then the caller's check said so)."""
    if repeat.once:
        return None
    matched = repeat.mask if repeat.mask is not None else counts > 0
    starts, ends = lo[matched], hi[matched]
    if len(starts) and np.array_equal(starts[1:], ends[:-1]):
        return slice(int(starts[0]), int(ends[-1]))
    return None


class _Repeat:
    """The probe rows' columns, each row repeated as many times as it matched: the
    column itself when every row matched once, the rows that matched (a filter) when
    none matched more than once, else ``np.repeat`` of its values (numbers without
    nulls) or a ``take`` of the repeated row numbers, made once."""

    def __init__(self, counts: np.ndarray[Any, Any]) -> None:
        self.counts = counts
        most = int(counts.max()) if len(counts) else 0
        self.once = bool(len(counts) == 0 or (most == 1 and counts.min() == 1))
        self.mask: Any = None
        """Which rows matched, when each matched at most once (and some did not)."""
        if most <= 1 and not self.once:
            self.mask = counts.astype(bool)
        self.rows: np.ndarray[Any, Any] | None = None
        """The probe row of each output row, when known without ``np.repeat``
        (:func:`_walk_rows`): the columns are gathered by it."""
        self._filter: Any = None

    @property
    def repeats(self) -> bool:
        """Some probe row matched more than once: its columns are repeated."""
        return not self.once and self.mask is None

    def column(self, column: Any) -> Any:
        if self.once:
            return column
        if self.mask is not None:
            if self._filter is None:
                self._filter = pa.array(self.mask)
            return column.filter(self._filter)
        t = column.type
        numbers = column.null_count == 0 and (
            pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
        )
        if numbers and self.rows is not None:
            return pa.array(column.to_numpy().take(self.rows), t)
        if numbers:
            return pa.array(np.repeat(column.to_numpy(), self.counts), t)
        if self.rows is None:
            self.rows = np.repeat(np.arange(len(self.counts)), self.counts)
        return column.take(self.rows)


def _gather(table: pa.Table, name: str, at: np.ndarray[Any, Any] | slice) -> Any:
    """Column ``name`` of ``table`` at rows ``at`` (indexes, or a slice: no copy)."""
    column = table.column(name)
    if isinstance(at, slice):
        return column.slice(at.start, at.stop - at.start)
    return column.take(at)
