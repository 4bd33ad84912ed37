"""Columnar fast paths: each record is a whole column chunk, not one row.

``select_batch`` still hands the function Python records. When even that is too slow
(millions of words or events a second), a record can be a chunk of rows in columns: a
``pyarrow`` ``Array``, ``ChunkedArray``, ``RecordBatch`` or ``Table``, or a numpy array.
The runtime moves chunks like any other record, so only the per-chunk operators must
know about them:

- :func:`where_columns` keeps the rows of each chunk that a vectorised predicate
  selects (``select(f)`` already maps chunk to chunk);
- :func:`count_columns` counts rows per key, like ``count_by``: each batch of chunks is
  counted on the worker that made it (Arrow's hash kernels, no Python per row), the
  partial counts cross the exchange as small Arrow tables, split by the key's owner
  (the worker of its bin in the routing table, as for ``exchange``), and each owner adds
  them up per time with one Arrow ``group_by``.

Row keys come back to Python only to route partial counts between workers (one per
distinct key per batch, and the owner of a key is remembered) and, unless the output
is columnar, as the ``(key, n)`` pairs sent downstream.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.state import Snapshot, StatefulVertex
from operators.stateless import _check
from progress import Timestamp
from timely import Stream, Vertex, stream_method
from timely.errors import function_location
from timely.routing.channels import Exchange
from timely.routing.columns import split_by

Chunk = Any
"""A column chunk: a pyarrow Array/ChunkedArray/RecordBatch/Table or a numpy array."""

COUNT = "count"
_EXACT = 1 << 53
"""Counts below this add up exactly in float64 (the bincount path)."""


def chunk_length(chunk: Chunk) -> int:
    """The number of rows in ``chunk``."""
    rows = getattr(chunk, "num_rows", None)
    return int(rows) if rows is not None else len(chunk)


def _filter(chunk: Chunk, mask: Any) -> Chunk:
    if isinstance(chunk, np.ndarray):
        return chunk[np.asarray(mask, dtype=bool)]
    if isinstance(mask, np.ndarray):
        mask = pa.array(mask, type=pa.bool_())
    return chunk.filter(mask)


class WhereColumns(Vertex):
    """Sends each chunk's rows whose entry of ``pred(chunk)`` is true (empty chunks are dropped)."""

    def __init__(self, pred: Callable[[Chunk], Any]) -> None:
        self.pred = pred

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        out: list[Any] = []
        chunk = None
        try:
            for chunk in records:
                mask = self.pred(chunk)
                if len(mask) != chunk_length(chunk):
                    raise ValueError(
                        f"where_columns: the predicate returned {len(mask)} flags for a chunk "
                        f"of {chunk_length(chunk)} rows; it must return one per row"
                    )
                kept = _filter(chunk, mask)
                if chunk_length(kept):
                    out.append(kept)
        except Exception as e:
            self.fail(e, time, _describe(chunk), self.pred)
        self.send_by(0, out, time)


def _describe(chunk: Any) -> str:
    """A short description of a chunk for an error (chunks are large)."""
    if chunk is None:
        return "None"
    try:
        return f"{type(chunk).__name__} of {chunk_length(chunk)} rows"
    except Exception:
        return repr(chunk)[:200]


def _column(values: Any) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values
    return pa.array(values)  # numpy: zero-copy for numeric types


def _key_names(n: int) -> list[str]:
    return ["key"] if n == 1 else [f"key{i}" for i in range(n)]


def _key_table(keys: Any) -> pa.Table:
    """The key column(s) a key function returned, as a table of ``key`` or ``key0..``."""
    cols = [_column(c) for c in keys] if isinstance(keys, tuple) else [_column(keys)]
    if len({len(c) for c in cols}) > 1:
        raise ValueError(
            f"count_columns: the key columns have different lengths {[len(c) for c in cols]}"
        )
    return pa.table(cols, names=_key_names(len(cols)))


def _int_columns(keys: pa.Table) -> list[np.ndarray[Any, Any]] | None:
    """The key columns as numpy integer arrays, when they all are integers without nulls."""
    cols = []
    for col in keys.columns:
        if not pa.types.is_integer(col.type) or col.null_count:
            return None
        cols.append(col.to_numpy())
    return cols


def _count_packed(keys: pa.Table) -> pa.Table | None:
    """Integer keys counted by packing each row into one offset from the columns' minima.

    With a small packed range this is one ``bincount`` (no hashing at all), else one
    ``value_counts`` of int64. ``None`` when the columns are not all integers or the
    packed range does not fit in 62 bits.
    """
    cols = _int_columns(keys)
    if cols is None or not len(cols[0]):
        return None
    lows = [int(c.min()) for c in cols]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(cols, lows)]
    total = math.prod(spans)
    if total >= 1 << 62:
        return None
    packed = np.zeros(len(cols[0]), dtype=np.int64)
    for c, lo, span in zip(cols, lows, spans):
        packed *= span
        packed += c.astype(np.int64) - lo
    if total <= max(1 << 16, 4 * len(packed)):
        counts = np.bincount(packed, minlength=total)
        present = np.flatnonzero(counts)
        codes, n = present, counts[present]
    else:
        counted = pc.value_counts(pa.array(packed))
        codes = counted.field("values").to_numpy()
        n = counted.field("counts").to_numpy()
    out: list[Any] = []
    for col, lo, span in zip(reversed(keys.columns), reversed(lows), reversed(spans)):
        codes, digit = np.divmod(codes, span)
        out.append(pa.array(digit + lo).cast(col.type))
    out.reverse()
    return pa.table([*out, pa.array(n.astype(np.int64))], names=[*keys.column_names, COUNT])


def _count_rows(keys: pa.Table) -> pa.Table:
    """``keys``' distinct rows with how often each occurs: columns ``key..`` and ``count``."""
    packed = _count_packed(keys)
    if packed is not None:
        return packed
    if keys.num_columns == 1:
        counted = pc.value_counts(keys.column(0))
        if isinstance(counted, pa.ChunkedArray):
            counted = counted.combine_chunks()
        return pa.table(
            [counted.field("values"), pc.cast(counted.field("counts"), pa.int64())],
            names=["key", COUNT],
        )
    names = keys.column_names
    out = keys.group_by(names, use_threads=False).aggregate([([], "count_all")])
    return out.select(names + ["count_all"]).rename_columns(names + [COUNT])


def _sum_counts(parts: list[pa.Table]) -> pa.Table:
    """Partial counts of the same keys added up: one row per distinct key."""
    if len(parts) == 1:
        return parts[0]
    table = pa.concat_tables(parts, promote_options="default")
    names = table.column_names[:-1]
    counts = table.column(COUNT)
    if len(names) == 1 and (pc.sum(counts).as_py() or 0) < _EXACT:
        # One key column: number the distinct keys and add with bincount, about twice as
        # fast as a hash group_by here. Its float64 sums are exact below 2**53.
        encoded = pc.dictionary_encode(table.column(0).combine_chunks(), null_encoding="encode")
        sums = np.bincount(
            encoded.indices.to_numpy(zero_copy_only=False),
            weights=counts.to_numpy(),
            minlength=len(encoded.dictionary),
        )
        return pa.table(
            [encoded.dictionary, pa.array(sums.astype(np.int64))], names=[*names, COUNT]
        )
    out = table.group_by(names, use_threads=False).aggregate([(COUNT, "sum")])
    return out.select(names + [f"{COUNT}_sum"]).rename_columns(names + [COUNT])


def _rows(table: pa.Table) -> list[Any]:
    """The keys of a partial-count table as Python values (tuples for compound keys)."""
    n = table.num_columns - 1
    if n == 1:
        keys: list[Any] = table.column(0).to_pylist()
        return keys
    return list(zip(*(table.column(i).to_pylist() for i in range(n))))


def _from_pairs(pairs: Mapping[Any, int], names: list[str]) -> pa.Table:
    keys = list(pairs)
    if len(names) == 1:
        cols = [pa.array(keys)]
    else:
        cols = [pa.array(list(c)) for c in zip(*keys)] if keys else [pa.array([])] * len(names)
    return pa.table([*cols, pa.array(list(pairs.values()), pa.int64())], names=[*names, COUNT])


class CountChunks(Vertex):
    """``count_columns``' pre-combine: one partial-count table per batch of chunks."""

    def __init__(self, keys: Callable[[Chunk], Any] | None) -> None:
        self.keys = keys

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        keys = self.keys
        tables = []
        chunk = None
        try:
            for chunk in records:
                table = _key_table(chunk if keys is None else keys(chunk))
                if table.num_rows:  # an empty chunk's columns may not even have a type
                    tables.append(table)
            if not tables:
                return
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            partial = _count_rows(table)
        except Exception as e:
            self.fail(e, time, _describe(chunk), keys)
        self.send_by(0, [partial], time)


class PartialExchange(Exchange):
    """Splits partial-count tables by row, each row to the worker that owns its key's bin.

    The bin is the one an ``exchange`` channel (and a state repartition) picks, so a
    key's state stays where its records go, and moves with its bin.
    """

    def __init__(self) -> None:
        super().__init__(None)

    def route_by(
        self,
        records: list[Any],
        table: np.ndarray[Any, Any],
        here: int,
        load: np.ndarray[Any, Any] | None = None,
    ) -> dict[int, list[Any]]:
        nbins = len(table)
        out: dict[int, list[Any]] = {}
        for chunk in records:
            if chunk.num_rows == 0:
                continue
            rows = list(_rows(chunk))
            # The exchange's own memory of each key's bin: a row's key is hashed once.
            key_bins = np.fromiter(self._bins_of(rows, nbins), np.intp, len(rows))
            dest = table[key_bins]
            if load is not None:
                load += np.bincount(key_bins, minlength=nbins)
            for w, part in split_by(chunk, dest):
                out.setdefault(w, []).append(part)
        return out


class SumCounts(StatefulVertex):
    """Adds up the partial counts of each time's keys; sends them when the time completes.

    Partials wait as Arrow tables and are summed with one ``group_by`` at the end. For a
    snapshot they are folded into the ``counts`` keyed table first, so the state looks
    like every other operator's (``{key: n}`` per time) and repartitions by key.
    """

    def __init__(self, columnar: bool) -> None:
        super().__init__()
        self.columnar = columnar
        self.counts = self.keyed_state("counts")
        self.pending: dict[Timestamp, list[pa.Table]] = {}

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        self.table_at(self.counts, time)  # the notification, on first use
        self.pending.setdefault(time, []).extend(records)

    def _compact(self, time: Timestamp) -> None:
        parts = self.pending.pop(time, [])
        if not parts:
            return
        table = self.counts.table(time)
        summed = _sum_counts(parts)
        get = table.get
        for k, n in zip(_rows(summed), summed.column(COUNT).to_pylist()):
            table[k] = get(k, 0) + n

    def on_notify(self, time: Timestamp) -> None:
        parts = self.pending.pop(time, [])
        held = self.counts.pop(time)
        if held:
            names = parts[0].column_names[:-1] if parts else _names_of(held)
            parts.append(_from_pairs(held, names))
        if not parts:
            return
        summed = _sum_counts(parts)
        if self.columnar:
            self.send_by(0, [summed], time)
        else:
            self.send_by(0, list(zip(_rows(summed), summed.column(COUNT).to_pylist())), time)

    def snapshot(self, upto: int | None = None) -> dict[str, Snapshot]:
        for time in list(self.pending):
            self._compact(time)
        return super().snapshot(upto)

    def restore(self, snapshots: dict[str, Snapshot]) -> None:
        super().restore(snapshots)
        self.pending = {}


def _names_of(held: Mapping[Any, int]) -> list[str]:
    first = next(iter(held))
    return _key_names(len(first) if isinstance(first, tuple) else 1)


@stream_method
def where_columns(
    stream: Stream, pred: Callable[[Chunk], Any], name: str = "where_columns"
) -> Stream:
    """Each chunk's rows whose flag in ``pred(chunk)`` is true, as a chunk of the same kind.

    ``pred`` returns one flag per row: a boolean numpy array, a pyarrow boolean array or
    a list of bools (``pyarrow.compute.equal(batch["kind"], 0)``, ``arr % 3 == 0``).
    Chunks left empty are dropped.
    """
    _check("where_columns", "pred", pred)
    return stream.flow.vertex(
        [(stream, None)], lambda: WhereColumns(pred), name=name, where=function_location(pred)
    )[0]


@stream_method
def count_columns(
    stream: Stream,
    keys: Callable[[Chunk], Any] | None = None,
    columnar: bool = False,
    name: str = "count_columns",
) -> Stream:
    """Per time, how many rows have each key, where every record is a column chunk.

    ``keys(chunk)`` returns the chunk's key column (a pyarrow or numpy array with one
    entry per row) or a tuple of columns for a compound key; without ``keys`` the chunk
    itself is the key column. Sends ``(key, n)`` pairs like ``count_by`` (a tuple key
    for a tuple of columns), or, when ``columnar``, one pyarrow ``Table`` per time and
    worker with the key column(s) (``key``, or ``key0``, ``key1``, ...) and ``count``.
    """
    if keys is not None:
        _check("count_columns", "keys", keys)
    flow = stream.flow
    where = function_location(keys) if keys is not None else "count_columns"
    partial = flow.vertex(
        [(stream, None)], lambda: CountChunks(keys), name=f"{name}.combine", where=where
    )[0]
    return flow.vertex(
        [(partial, PartialExchange())], lambda: SumCounts(columnar), name=name, where=where
    )[0]
