"""Loops on table streams: the least fixpoint (label propagation, shortest paths), a
loop of a fixed number of rounds (power iterations), and a join whose side from
outside the loop is arranged once per epoch.

``table.iterate(body, until="fixpoint", min_by=(key, value))`` keeps, per epoch, each
key's least value in sorted numpy arrays (the keys, and their values beside them): a
round's batch is reduced to each key's least row (one sort), looked up with one
``searchsorted``, and only the rows that improve on their key's best go round again.
After the loop, each key's least row of the epoch is what leaves.

In a loop, a join with a table from outside it gets that side once, at round 0 of its
epoch, and keeps it *arranged* (differential dataflow's word): its rows sorted by key,
once per epoch. Each round's rows probe it with two ``searchsorted`` calls and gather
their matches with index arithmetic, so a round costs what its own rows match, not a
hash table of the outer side built again every round. Keys must be numbers for that;
other keys fall back to Arrow's hash join, per round.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.loops import loop_finished
from operators.table.arrange import Arrangement, arrange, probe
from operators.table.dense import DENSE_MIN, dense_top
from operators.table.vertices import Batch, PerTime, as_batches, cross_tables
from progress import Timestamp
from timely import Vertex


def _numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def least_rows(table: pa.Table, key: str, value: str) -> pa.Table:
    """Each key's row of least ``value`` (numbers), in key order; rows whose key or
    value is null (or NaN) are dropped: they are no value to propagate. Dense integer
    keys: ``minimum.at`` passes over an array indexed by key; other keys: one
    ``argsort`` of the keys and a ``reduceat`` of the values per run of equal keys. A
    table of just the two columns is built from the least values, no row gathered."""
    table = _with_values(table, key, value)
    if table.num_rows <= 1:
        return table
    keys = table.column(key).to_numpy()
    values = table.column(value).to_numpy()
    if _pairs(table.schema, key, value):
        ks, vs = least_pairs(keys, values)
        return _pair_table(ks, vs, table.schema, key)
    return table.take(least_index(keys, values))


def _with_values(table: pa.Table, key: str, value: str) -> pa.Table:
    """``table`` without the rows whose key or value is null (or NaN)."""
    if table.num_rows == 0:
        return table
    valid = pc.and_(pc.is_valid(table.column(key)), pc.is_valid(table.column(value)))
    if pa.types.is_floating(table.schema.field(value).type):
        valid = pc.and_(valid, pc.invert(pc.is_nan(table.column(value))))
    if not pc.all(valid).as_py():
        table = table.filter(valid)
    return table


def _pairs(schema: pa.Schema, key: str, value: str) -> bool:
    """The rows are ``(key, value)`` and nothing else: a key's least row is its least
    value, whichever row held it."""
    return len(schema) == 2 and key != value


def _pair_table(
    keys: np.ndarray[Any, Any], values: np.ndarray[Any, Any], schema: pa.Schema, key: str
) -> pa.Table:
    arrays = {key: keys}
    arrays.update((n, values) for n in schema.names if n != key)
    return pa.Table.from_arrays([pa.array(arrays[f.name], f.type) for f in schema], schema=schema)


def least_pairs(
    keys: np.ndarray[Any, Any], values: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Each distinct key (in order) and its least value: one ``minimum.at`` over an
    array indexed by key for dense integer keys, else a sort and a ``reduceat``."""
    if keys.dtype.kind in "iu":
        top = dense_top(int(keys.min()), int(keys.max()), len(keys))
        if top:
            high = np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).max
            least = np.full(top, high, dtype=values.dtype)
            np.minimum.at(least, keys, values)
            seen = np.zeros(top, dtype=bool)
            seen[keys] = True
            present = np.flatnonzero(seen)
            return present.astype(keys.dtype, copy=False), least[present]
    order = np.argsort(keys)
    ks = keys[order]
    first = np.empty(len(ks), dtype=bool)
    first[0] = True
    np.not_equal(ks[1:], ks[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return ks[starts], np.minimum.reduceat(values[order], starts)


def least_index(keys: np.ndarray[Any, Any], values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Per distinct key (in key order), the index of a row holding its least value (the
    first such row for dense integer keys)."""
    if keys.dtype.kind in "iu":
        top = dense_top(int(keys.min()), int(keys.max()), len(keys))
        if top:
            return _least_dense(keys, values, top)
    order = np.argsort(keys)
    ks = keys[order]
    vs = values[order]
    first = np.empty(len(ks), dtype=bool)
    first[0] = True
    np.not_equal(ks[1:], ks[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    least = np.minimum.reduceat(vs, starts)
    runs = np.cumsum(first) - 1
    at_least = np.flatnonzero(vs == least[runs])  # every row holding its run's least
    run_of = runs[at_least]
    pick = np.empty(len(at_least), dtype=bool)
    pick[0] = True
    np.not_equal(run_of[1:], run_of[:-1], out=pick[1:])
    out: np.ndarray[Any, Any] = order[at_least[pick]]
    return out


def _least_dense(
    keys: np.ndarray[Any, Any], values: np.ndarray[Any, Any], top: int
) -> np.ndarray[Any, Any]:
    """The row of least value of each key in ``0 <= key < top`` (the first such row of
    a tie), in key order, by two ``minimum.at`` passes: no sort."""
    high = np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).max
    least = np.full(top, high, dtype=values.dtype)
    np.minimum.at(least, keys, values)
    at_least = np.flatnonzero(values == least[keys])
    n = len(keys)
    first = np.full(top, n, dtype=np.int64)
    np.minimum.at(first, keys[at_least], at_least)
    return first[first < n]


class _Best:
    """Each key's least value so far, for one epoch. Integer keys that are dense enough
    (:func:`~operators.table.dense.dense_top`) index an array directly; other keys are kept sorted,
    values beside them, and looked up with ``searchsorted``. A dense table turns sorted
    when a key falls outside its bound."""

    DENSE_MIN = DENSE_MIN

    def __init__(self, key_type: pa.DataType, value_type: pa.DataType) -> None:
        self.dense = pa.types.is_integer(key_type)
        self.keys = np.empty(0, dtype=_dtype(key_type))
        self.values = np.zeros(0, dtype=_dtype(value_type))
        self.present = np.zeros(0, dtype=bool)
        self.count = 0

    def improve(
        self, keys: np.ndarray[Any, Any], values: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Take ``values`` (one per distinct key, ``keys`` sorted) where they are less
        than the keys' best or the key is new; returns the mask of those taken."""
        if self.dense:
            top = dense_top(int(keys[0]), int(keys[-1]), self.count + len(keys), self.DENSE_MIN)
            if top:
                return self._improve_dense(keys, values, top)
            self.keys = np.flatnonzero(self.present).astype(self.keys.dtype)
            self.values = self.values[self.present]
            self.dense = False
        return self._improve_sorted(keys, values)

    def _improve_dense(
        self, keys: np.ndarray[Any, Any], values: np.ndarray[Any, Any], top: int
    ) -> np.ndarray[Any, Any]:
        if top > len(self.present):
            size = max(top, 2 * len(self.present))
            grown = np.zeros(size, dtype=self.values.dtype)
            grown[: len(self.values)] = self.values
            present = np.zeros(size, dtype=bool)
            present[: len(self.present)] = self.present
            self.values, self.present = grown, present
        had = self.present[keys]
        better = ~had | (values < self.values[keys])
        taken = keys[better]
        self.values[taken] = values[better]
        self.present[taken] = True
        self.count += len(keys) - int(had.sum())
        return np.asarray(better)

    def _improve_sorted(
        self, keys: np.ndarray[Any, Any], values: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        pos = np.searchsorted(self.keys, keys)
        found = pos < len(self.keys)
        found[found] = self.keys[pos[found]] == keys[found]
        better = ~found
        better[found] = values[found] < self.values[pos[found]]
        update = found & better
        self.values[pos[update]] = values[update]
        new = ~found
        if new.any():
            ks = np.concatenate([self.keys, keys[new]])
            vs = np.concatenate([self.values, values[new]])
            order = np.argsort(ks, kind="stable")
            self.keys, self.values = ks[order], vs[order]
        return better


def _dtype(t: pa.DataType) -> Any:
    return t.to_pandas_dtype() if _numeric(t) else object


class LeastOnly(Vertex):
    """Inside the loop: the rows that improve on their key's least value in the epoch
    (exchanged by key); per epoch, at round 0, a :class:`_Best`, dropped once the loop is
    done with the epoch."""

    def __init__(self, key: str, value: str, schema: pa.Schema) -> None:
        self.key = key
        self.value = value
        self.schema = schema
        self.best: dict[Timestamp, _Best] = {}

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        base = (*time[:-1], 0)
        best = self.best.get(base)
        if best is None:
            for t in [t for t in self.best if loop_finished(self, t[:-1])]:
                del self.best[t]
            best = self.best[base] = _Best(
                self.schema.field(self.key).type, self.schema.field(self.value).type
            )
        table = pa.Table.from_batches(records, schema=self.schema)
        table = _with_values(table, self.key, self.value)
        if table.num_rows == 0:
            return
        keys = table.column(self.key).to_numpy()
        values = table.column(self.value).to_numpy()
        if _pairs(self.schema, self.key, self.value):  # no row to gather: built from arrays
            ks, vs = least_pairs(keys, values)
            taken = best.improve(ks, vs)
            if taken.any():
                out = _pair_table(ks[taken], vs[taken], self.schema, self.key)
                self.send_by(0, as_batches(out, self.schema), time)
            return
        index = least_index(keys, values)
        taken = best.improve(keys[index], values[index])
        if taken.any():  # the rows taken, gathered once
            self.send_by(0, as_batches(table.take(index[taken]), self.schema), time)


class RoundSplit(Vertex):
    """The end of a loop of ``rounds`` applications: a batch of round ``r`` (the
    ``r + 1``-th application's output) goes round again (output 0) while
    ``r + 1 < rounds``, and leaves (output 1) at the last."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        self.send_by(1 if time[-1] + 1 >= self.rounds else 0, records, time)


class LeastPerTime(PerTime):
    """After the loop: per epoch, each key's least row of all that left it."""

    def __init__(self, key: str, value: str, schema: pa.Schema) -> None:
        super().__init__()
        self.key = key
        self.value = value
        self.schema = schema

    def complete(self, sides: list[list[Batch]], time: Timestamp) -> list[Batch]:
        table = pa.Table.from_batches(sides[0], schema=self.schema)
        return as_batches(least_rows(table, self.key, self.value), self.schema)


class ArrangedJoin(PerTime):
    """A join in a loop whose side ``outer`` (a port) comes from outside it: that side's
    rows come once per epoch, at round 0, and are kept sorted by key (built at the
    epoch's first round to complete: all of them are in by then); each round's rows of
    the other side probe it when the round completes."""

    inputs = 2

    def __init__(
        self,
        outer: int,
        keys: tuple[list[str], list[str]],
        how: str,
        schemas: tuple[pa.Schema, pa.Schema],
        out_schema: pa.Schema,
        right_names: dict[str, str],
        depth: int,
        needed: set[str] | None = None,
    ) -> None:
        super().__init__()
        self.outer = outer
        self.keys = keys
        self.how = how
        self.schemas = schemas
        self.right_names = right_names
        self.depth = depth
        if needed is not None:  # the readers' columns only (projection push-down)
            kept = [f for f in out_schema if f.name in needed] or [out_schema.field(0)]
            out_schema = pa.schema(kept)
            right_names = {n: o for n, o in right_names.items() if o in out_schema.names}
        self.out_schema = out_schema
        self.left_out = [n for n in schemas[0].names if n in out_schema.names]
        """The left side's columns sent (a semi or anti join: the only ones)."""
        self.right_out = right_names
        """The right side's columns sent, and their names in the output."""
        self.held: dict[Timestamp, list[Batch]] = {}
        """The outer side's batches, per outer time (at its round 0)."""
        self.arranged: dict[Timestamp, Arrangement] = {}
        """Per outer time: its rows sorted by key, and the index into them."""

    def _base(self, time: Timestamp) -> Timestamp:
        d = self.depth
        return (*time[:d], *(0,) * (len(time) - d))

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        if input == self.outer:
            base = self._base(time)
            if base not in self.held and base not in self.arranged:
                self._forget(base)
            self.held.setdefault(base, []).extend(records)
            return
        super().on_recv(input, records, time)

    def on_notify(self, time: Timestamp) -> None:
        sides = self.pending.pop(time)
        loop_rows = pa.Table.from_batches(
            sides[1 - self.outer], schema=self.schemas[1 - self.outer]
        )
        base = self._base(time)
        if loop_rows.num_rows:
            out = self._probe(loop_rows, base)
            if out:
                self.send_by(0, out, time)
        self._forget(base)

    def _arrangement(self, base: Timestamp) -> Arrangement:
        """The outer side of ``base``, arranged (only the columns sent); not arranged
        (``index`` None) for other keys than one column of numbers, nor for a cross
        join (no keys)."""
        got = self.arranged.get(base)
        if got is not None:
            return got
        schema = self.schemas[self.outer]
        table = pa.Table.from_batches(self.held.pop(base, []), schema=schema)
        keys = self.keys[self.outer]
        if self.how != "cross" and len(keys) == 1 and _numeric(schema.field(keys[0]).type):
            sent = self.left_out if self.outer == 0 else list(self.right_out)
            got = arrange(table, keys[0], sent)
        else:
            got = Arrangement(None, table, False)
        self.arranged[base] = got
        return got

    def _probe(self, rows: pa.Table, base: Timestamp) -> list[Batch]:
        arranged = self._arrangement(base)
        outer, inner = self.outer, 1 - self.outer
        if self.how == "cross":  # every pair: the side from outside as it came
            left, right = (arranged.table, rows) if outer == 0 else (rows, arranged.table)
            got = cross_tables(left, right, (self.left_out, self.right_out), self.out_schema)
            return as_batches(got, self.out_schema)
        if arranged.index is None:  # other keys: Arrow's hash join, this round
            sides = [arranged.table, rows] if outer == 0 else [rows, arranged.table]
            return _hash_join(sides, self.keys, self.how, self.out_schema, self.right_names)
        out = probe(
            arranged,
            rows,
            self.keys[inner][0],
            self.how,
            outer,
            (self.left_out, self.right_out),
            self.out_schema,
        )
        return as_batches(out, self.out_schema)

    def _forget(self, current: Timestamp) -> None:
        """Drop the arrangements of the outer times the loop is done with on both inputs
        and no round of which waits to be notified."""
        d = self.depth
        waiting = {t[:d] for t in self.pending}
        for t in [*self.arranged, *self.held]:
            o = t[:d]
            if t != current and o not in waiting and all(loop_finished(self, o, p) for p in (0, 1)):
                self.arranged.pop(t, None)
                self.held.pop(t, None)


def _hash_join(
    sides: list[pa.Table],
    keys: tuple[list[str], list[str]],
    how: str,
    out_schema: pa.Schema,
    right_names: dict[str, str],
) -> list[Batch]:
    left, right = sides
    kind = {"inner": "inner", "left": "left outer", "semi": "left semi", "anti": "left anti"}[how]
    if kind in ("left semi", "left anti"):
        got = left.join(right.select(keys[1]), keys[0], keys[1], join_type=kind, use_threads=False)
        return as_batches(got.select(out_schema.names), out_schema)
    renamed = right.rename_columns([right_names.get(n, n) for n in right.schema.names])
    right_keys = [right_names.get(k, k) for k in keys[1]]
    got = left.join(
        renamed, keys[0], right_keys, join_type=kind, coalesce_keys=True, use_threads=False
    )
    return as_batches(got.select(out_schema.names), out_schema)
