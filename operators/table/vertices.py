"""The vertices of the table API: each handles whole Arrow batches.

A table stream's records are ``pyarrow.RecordBatch``es of the stream's schema (one
message may carry several). Stateless steps evaluate compiled expressions once per
batch; per-time steps (aggregation, distinct, join) keep the batches of each time in
a list and combine them with one Arrow call (``Table.group_by``, ``Table.join``) when
the time completes, so Python runs per batch and per time, never per row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.table.arrange import arrange, lookup_run, probe
from operators.table.dense import dense_group_by
from operators.table.expr import Compiled, as_array, evaluate
from progress import Timestamp
from timely import Vertex

Batch = Any
"""A ``pyarrow.RecordBatch`` (pyarrow ships no types)."""


def as_batches(table: pa.Table, schema: pa.Schema) -> list[Batch]:
    """``table``'s rows as record batches of ``schema`` (none for an empty table)."""
    if table.num_rows == 0:
        return []
    batches: list[Batch] = (table.cast(schema) if table.schema != schema else table).to_batches()
    return batches


class Project(Vertex):
    """``select`` / ``with_columns`` / ``where``: each output column an expression of the
    batch's columns, and an optional predicate applied first."""

    def __init__(
        self,
        columns: Sequence[tuple[str, Compiled]],
        schema: pa.Schema,
        predicate: Compiled | None = None,
    ) -> None:
        self.columns = list(columns)
        self.schema = schema
        self.predicate = predicate

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        out = []
        for batch in records:
            try:
                if self.predicate is not None:
                    mask = evaluate(self.predicate, batch)
                    batch = batch.filter(mask)  # null: dropped, as SQL's WHERE
                    if batch.num_rows == 0:
                        continue
                if self.columns:
                    arrays = [evaluate(fn, batch) for _, fn in self.columns]
                    batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                self.fail(e, time, None, None)
            out.append(batch)
        if out:
            self.send_by(0, out, time)


class Explode(Vertex):
    """One row per item of a list column; the other columns repeated (rows whose list is
    empty or null go, as Polars' ``explode`` drops none but SQL's ``UNNEST`` does: the
    latter, for a stream of words)."""

    def __init__(self, column: str, schema: pa.Schema) -> None:
        self.column = column
        self.schema = schema

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        out = []
        for batch in records:
            lists = batch.column(self.column)
            flat = pc.list_flatten(lists)
            others = [name for name in batch.schema.names if name != self.column]
            # Each item's row, only to repeat other columns (a stream of words has none:
            # its 2M parent indices would cost more than the flatten itself).
            parents = pc.list_parent_indices(lists) if others else None
            arrays = [
                flat if name == self.column else batch.column(name).take(parents)
                for name in batch.schema.names
            ]
            if len(flat):
                out.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        if out:
            self.send_by(0, out, time)


class MapBatches(Vertex):
    """The escape hatch: a function of whole batches (``pa.RecordBatch`` in, a batch or a
    table of the declared schema out)."""

    def __init__(self, fn: Callable[[Batch], Any], schema: pa.Schema) -> None:
        self.fn = fn
        self.schema = schema

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        out: list[Batch] = []
        batch = None
        try:
            for batch in records:
                got = self.fn(batch)
                if isinstance(got, pa.Table):
                    out.extend(as_batches(got, self.schema))
                elif got.num_rows:
                    out.append(got if got.schema == self.schema else got.cast(self.schema))
        except Exception as e:
            self.fail(e, time, batch, self.fn)
        if out:
            self.send_by(0, out, time)


class PerTime(Vertex):
    """Keeps each time's batches (per input) until the time completes."""

    inputs = 1
    state_per_time = True

    def __init__(self) -> None:
        self.pending: dict[Timestamp, list[list[Batch]]] = {}

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        sides = self.pending.get(time)
        if sides is None:
            sides = self.pending[time] = [[] for _ in range(self.inputs)]
            self.notify_at(time)
        sides[input].extend(records)

    def on_notify(self, time: Timestamp) -> None:
        sides = self.pending.pop(time)
        try:
            out = self.complete(sides, time)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            self.fail(e, time, None, None)
        if out:
            self.send_by(0, out, time)

    def complete(  # pragma: no cover
        self, sides: list[list[Batch]], time: Timestamp
    ) -> list[Batch]:
        raise NotImplementedError


def first_k(table: Any, k: int, order: list[tuple[str, str]]) -> Any:
    """The ``k`` rows first in ``order`` (a stable sort: ties keep their order; nulls
    last), sorted; the whole input if it has ``k`` rows or fewer, sorted too."""
    indices = pc.sort_indices(table, sort_keys=order)  # nulls at the end: the default
    return table.take(indices[:k])


class TopK(PerTime):
    """Per time, the first ``k`` rows in ``order`` of every batch that came (each batch
    was cut to its own first ``k`` before the exchange)."""

    def __init__(self, k: int, order: list[tuple[str, str]], schema: pa.Schema) -> None:
        super().__init__()
        self.k = k
        self.order = order
        self.schema = schema

    def complete(self, sides: list[list[Batch]], time: Timestamp) -> list[Batch]:
        table = pa.Table.from_batches(sides[0], schema=self.schema)
        return as_batches(first_k(table, self.k, self.order), self.schema)


def _table(batches: list[Batch], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches(batches, schema=schema)


class Aggregate(PerTime):
    """Group by ``keys`` and aggregate: Arrow's hash aggregation (``Table.group_by``).

    Used twice for an exchange: before it on each batch (partial aggregates: counts,
    sums, minima...), and after it per time, merging the partials of every worker."""

    def __init__(
        self,
        keys: list[str],
        aggs: list[tuple[str, str, str]],
        in_schema: pa.Schema,
        out_schema: pa.Schema,
        post: Callable[[pa.Table], pa.Table] | None = None,
        per_time: bool = True,
        alone: tuple[pa.Schema, list[tuple[str, str, str]]] | None = None,
        pass_alone: bool = False,
    ) -> None:
        super().__init__()
        self.keys = keys
        self.aggs = aggs  # (column, Arrow's hash aggregate, output name)
        self.in_schema = in_schema
        self.out_schema = out_schema
        self.post = post
        self.per_time = per_time
        self.alone = alone
        """The merge after an exchange, on a run of one worker: the rows came unreduced
        (their schema), and these aggregations of them give the merged columns."""
        self.pass_alone = pass_alone
        """The partials before an exchange, on a run of one worker: the batches go on
        as they are, aggregated once after it (``alone``), not twice."""

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        if self.per_time:
            super().on_recv(input, records, time)
            return
        if self.pass_alone and self.workers_at(time) == 1:
            self.send_by(0, records, time)
            return
        try:
            out = self._aggregate(records, self.in_schema, self.aggs)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            self.fail(e, time, None, None)
        if out:
            self.send_by(0, out, time)

    def complete(self, sides: list[list[Batch]], time: Timestamp) -> list[Batch]:
        if self.alone is not None and self.workers_at(time) == 1:
            return self._aggregate(sides[0], *self.alone)
        return self._aggregate(sides[0], self.in_schema, self.aggs)

    def _aggregate(
        self, batches: list[Batch], schema: pa.Schema, aggs: list[tuple[str, str, str]]
    ) -> list[Batch]:
        if not batches:
            return []
        table = _table(batches, schema)
        keys = self.keys
        got = group_aggregate(table, keys, aggs) if keys else _aggregate_all(table, aggs)
        got = got.select(self.out_schema.names if self.post is None else self._before_post())
        if self.post is not None:
            got = self.post(got)
        return as_batches(got, self.out_schema)

    def _before_post(self) -> list[str]:
        return [*self.keys, *(name for _, _, name in self.aggs)]


def group_aggregate(table: pa.Table, keys: list[str], aggs: list[tuple[str, str, str]]) -> pa.Table:
    """``table.group_by(keys)`` with ``aggs`` (``(column, Arrow's function, output
    name)``; no column: ``count_all``): the keys, then the outputs, named.

    Arrow names an output ``<column>_<function>``, twice when two aggregations take the
    same function of the same column, and puts the keys first or last by version: the
    outputs are named here by position."""
    names = [name for _, _, name in aggs]
    if len(keys) == 1 and table.num_rows:  # node numbers: arrays indexed by key, no hash
        dense = dense_group_by(table, keys[0], [(c, fn) for c, fn, _ in aggs])
        if dense is not None:
            return dense.rename_columns([*keys, *names])
    got = table.group_by(keys, use_threads=False).aggregate(
        [(c if c else [], fn) for c, fn, _ in aggs]
    )
    if got.column_names[: len(keys)] == keys:
        return got.rename_columns([*keys, *names])
    return got.rename_columns([*names, *keys]).select([*keys, *names])


def _aggregate_all(table: pa.Table, aggs: list[tuple[str, str, str]]) -> pa.Table:
    """Aggregates over the whole table (no keys): one row."""
    funcs: dict[str, Callable[[pa.Array], Any]] = {
        "count": lambda a: pc.count(a, mode="only_valid"),
        "count_all": lambda a: pa.scalar(len(a), pa.int64()),
        "sum": pc.sum,
        "min": pc.min,
        "max": pc.max,
        "first": lambda a: a[0] if len(a) else pa.scalar(None, a.type),
        "last": lambda a: a[-1] if len(a) else pa.scalar(None, a.type),
        "list": lambda a: pa.scalar(a.to_pylist(), pa.list_(a.type)),
    }
    arrays, names = [], []
    for c, fn, name in aggs:
        column = table.column(c) if c else pa.chunked_array([pa.nulls(table.num_rows)])
        value = funcs[fn](column.combine_chunks())
        arrays.append(pa.array([value.as_py()], type=value.type))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


class Distinct(PerTime):
    """One row per distinct value of the ``keys`` columns (all columns by default), per
    time: the first row seen of each, by arrival."""

    def __init__(self, keys: list[str], schema: pa.Schema, per_time: bool = True) -> None:
        super().__init__()
        self.keys = keys
        self.schema = schema
        self.per_time = per_time

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        if self.per_time:
            super().on_recv(input, records, time)
            return
        out = self.complete([records], time)
        if out:
            self.send_by(0, out, time)

    def complete(self, sides: list[list[Batch]], time: Timestamp) -> list[Batch]:
        table = _table(sides[0], self.schema)
        if table.num_rows == 0:
            return []
        rest = [n for n in self.schema.names if n not in self.keys]
        got = table.group_by(self.keys, use_threads=False).aggregate([(n, "first") for n in rest])
        got = got.rename_columns(
            [n[: -len("_first")] if n.endswith("_first") else n for n in got.schema.names]
        )
        return as_batches(got.select(self.schema.names), self.schema)


class Join(PerTime):
    """Both sides of a time, joined on the key columns when the time completes (Arrow's
    hash join: ``Table.join``)."""

    inputs = 2

    def __init__(
        self,
        left_keys: list[str],
        right_keys: list[str],
        how: str,
        schemas: tuple[pa.Schema, pa.Schema],
        out_schema: pa.Schema,
        right_names: dict[str, str],
        needed: set[str] | None = None,
    ) -> None:
        super().__init__()
        self.left_keys = left_keys
        self.right_keys = right_keys
        self.how = how
        self.schemas = schemas
        self.out_schema = out_schema
        self.right_names = right_names  # right column -> output name (suffixed on clashes)
        if needed is not None:  # the readers' columns only (projection push-down)
            kept = [f for f in out_schema if f.name in needed] or [out_schema.field(0)]
            self.out_schema = pa.schema(kept)
        names = self.out_schema.names
        self.left_out = [n for n in schemas[0].names if n in names]
        self.right_out = {n: o for n, o in right_names.items() if o in names}

    def complete(self, sides: list[list[Batch]], time: Timestamp) -> list[Batch]:
        left = _table(sides[0], self.schemas[0])
        right = _table(sides[1], self.schemas[1])
        if left.num_rows == 0:
            return []
        if self.how == "cross":
            got = cross_tables(left, right, (self.left_out, self.right_out), self.out_schema)
            return as_batches(got, self.out_schema)
        key = self.right_keys[0]
        if len(self.right_keys) == 1 and pa.types.is_integer(self.schemas[1].field(key).type):
            out = (self.left_out, self.right_out)
            if self.how in ("inner", "left"):  # node numbers in order: a lookup by position
                keys = (self.left_keys[0], key)
                got = lookup_run(left, right, keys, self.how, out, self.out_schema)
                if got is not None:
                    return as_batches(got, self.out_schema)
            # Dense integer keys (node numbers): the right side arranged, no hash table.
            arranged = arrange(right, key, list(self.right_out), dense_only=True)
            if arranged.index is not None:
                got = probe(arranged, left, self.left_keys[0], self.how, 1, out, self.out_schema)
                return as_batches(got, self.out_schema)
        how = {"inner": "inner", "left": "left outer", "semi": "left semi", "anti": "left anti"}[
            self.how
        ]
        if how in ("left semi", "left anti"):
            got = left.join(
                right.select(self.right_keys),
                self.left_keys,
                self.right_keys,
                join_type=how,
                use_threads=False,
            )
            return as_batches(got.select(self.out_schema.names), self.out_schema)
        got = join_tables(
            left, right, self.left_keys, self.right_keys, self.right_names, self.out_schema, how
        )
        return as_batches(got, self.out_schema)


def join_tables(
    left: pa.Table,
    right: pa.Table,
    left_keys: list[str],
    right_keys: list[str],
    right_names: dict[str, str],
    out_schema: pa.Schema,
    how: str = "inner",
) -> pa.Table:
    """``left`` joined with ``right`` by Arrow's hash join (``how``: Arrow's join type):
    the left's columns, then the right's but its keys, renamed by ``right_names``."""
    renamed = right.rename_columns([right_names.get(n, n) for n in right.schema.names])
    got = left.join(
        renamed,
        left_keys,
        [right_names.get(k, k) for k in right_keys],
        join_type=how,
        coalesce_keys=True,
        use_threads=False,
    )
    return got.select(out_schema.names)


def cross_tables(
    left: pa.Table, right: pa.Table, out: tuple[list[str], dict[str, str]], out_schema: pa.Schema
) -> pa.Table:
    """Every row of ``left`` with every row of ``right`` (left-major: each left row's
    pairs together, in ``right``'s order). ``out``: the left's columns sent and the
    right's, with their output names. A one-row ``right`` (a scalar to add to every
    row) leaves the left's columns as they are and repeats its values."""
    left_out, right_out = out
    nl, nr = left.num_rows, right.num_rows
    if nl == 0 or nr == 0:
        return out_schema.empty_table()
    if nr == 1:
        columns = [left.column(n) for n in left_out]
        columns += [as_array(right.column(n)[0], nl) for n in right_out]
    else:
        each_left = np.repeat(np.arange(nl), nr)
        each_right = np.tile(np.arange(nr), nl)
        columns = [left.column(n).take(each_left) for n in left_out]
        columns += [right.column(n).take(each_right) for n in right_out]
    return pa.Table.from_arrays(columns, schema=out_schema)


class GatherTables(PerTime):
    """Every batch of a time in one ``pyarrow.Table``, sent when the time completes (what
    ``collect`` and ``subscribe`` hand the driver: one table per epoch)."""

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__()
        self.schema = schema

    def on_notify(self, time: Timestamp) -> None:
        sides = self.pending.pop(time)
        self.send_by(0, [_table(sides[0], self.schema)], time)


class ToRows(Vertex):
    """Rows as Python records: dicts (``to_rows()``) or tuples (``to_rows(tuples=True)``)."""

    def __init__(self, tuples: bool) -> None:
        self.tuples = tuples

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        out: list[Any] = []
        for batch in records:
            if self.tuples:
                out.extend(zip(*(c.to_pylist() for c in batch.columns)))
            else:
                out.extend(batch.to_pylist())
        if out:
            self.send_by(0, out, time)


class ToTable(Vertex):
    """Python rows (dicts, or tuples in the schema's column order) as record batches of
    ``schema``: one batch per message."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        try:
            batch = to_batch(records, self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as e:
            self.fail(e, time, _bad_row(records, self.schema), None)
        if batch.num_rows:
            self.send_by(0, [batch], time)


def to_batch(records: Any, schema: pa.Schema) -> Batch:
    """Rows (dicts or tuples), a ``RecordBatch`` or a ``Table`` as one batch of ``schema``."""
    if isinstance(records, (pa.RecordBatch, pa.Table)):
        got = records if records.schema == schema else records.select(schema.names).cast(schema)
        if isinstance(got, pa.Table):
            batches = got.combine_chunks().to_batches()
            return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)
        return got
    rows = list(records)
    if rows and not isinstance(rows[0], dict):
        cols = list(zip(*rows))
        return pa.RecordBatch.from_arrays(
            [pa.array(list(c), type=f.type) for c, f in zip(cols, schema)], schema=schema
        )
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _bad_row(records: Sequence[Any], schema: pa.Schema) -> Any:
    """The first row that does not fit ``schema`` (for the error message)."""
    for row in records:
        try:
            to_batch([row], schema)
        except Exception:
            return row
    return None
