"""Running aggregates on tables: each key's aggregate over every epoch so far.

``table.group_by(keys).running_agg(...)`` is the table API's ``running_reduce``: at each
epoch with rows, it sends one row per key of that epoch, aggregated over all the
epochs up to it. The partial aggregates (counts, sums, minima ...) cross the exchange
as in ``agg``; each key's worker keeps the merged partials of every key it owns in a
:class:`~timely.ColumnState` (Arrow columns sorted by key hash), so checkpoints write
them as Arrow, incremental ones only the changed keys, and migrations and rescales
move them by bins like every keyed table.

An epoch's partials wait in a list until the epoch completes (``notify_at``), then are
merged with one ``group_by`` and folded into the state with one lookup and a few
element-wise kernels: Python runs per epoch, not per key. State carried across epochs
changes only in ``on_notify``, as a checkpoint needs (see :mod:`timely.state.keyed`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.table.vertices import Batch, as_batches, group_aggregate
from progress import Timestamp
from timely import StatefulVertex

STATE_TIME: Timestamp = (0,)
"""The time the running state is kept at (one fixed time: every worker's tables merge
on a re-partition)."""

Combine = Callable[[Any, Any], Any]
"""How a key's partial so far and its epoch's partial make the new one (both columns,
row for row)."""


def _sum(old: Any, new: Any) -> Any:
    return pc.coalesce(pc.add(old, new), old, new)  # Arrow's sum skips nulls


def _min(old: Any, new: Any) -> Any:
    return pc.min_element_wise(old, new, skip_nulls=True)


def _max(old: Any, new: Any) -> Any:
    return pc.max_element_wise(old, new, skip_nulls=True)


def _first(old: Any, new: Any) -> Any:
    return pc.coalesce(old, new)  # Arrow's first is the first value that is not null


def _last(old: Any, new: Any) -> Any:
    return pc.coalesce(new, old)


COMBINE: dict[str, Combine] = {
    "sum": _sum,
    "min": _min,
    "max": _max,
    "first": _first,
    "last": _last,
}
"""Per merge of a partial (``stream._PARTIAL``), the element-wise kernel that folds an
epoch's partial into the running one."""


class KeyedPartials(StatefulVertex):
    """The part running and windowed aggregates share: each time's partials (one row
    per batch and key, from before the exchange) wait until the time completes, and are
    merged per key with one ``group_by`` (sums of sums, minima of minima ...)."""

    def __init__(
        self,
        keys: list[str],
        merges: list[tuple[str, str]],
        partial_schema: pa.Schema,
        out_schema: pa.Schema,
        post: Callable[[pa.Table], pa.Table],
    ) -> None:
        super().__init__()
        self.keys = keys
        self.merges = merges  # (partial column, how it merges: sum, min, ...)
        self.partial_schema = partial_schema
        self.out_schema = out_schema
        self.post = post
        self.pending: dict[Timestamp, list[Batch]] = {}

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        held = self.pending.get(time)
        if held is None:
            held = self.pending[time] = []
            self.notify_at(time)
        held.extend(records)

    def _merged(self, table: pa.Table) -> pa.Table:
        """``table``'s partials merged, one row per key."""
        got = group_aggregate(table, self.keys, [(c, how, c) for c, how in self.merges])
        return got.cast(self.partial_schema)


class RunningAggregate(KeyedPartials):
    """Merges each epoch's partials per key, folds them into the running state, and
    sends the keys of the epoch with their running aggregates (see the module)."""

    def __init__(
        self,
        keys: list[str],
        merges: list[tuple[str, str]],
        partial_schema: pa.Schema,
        out_schema: pa.Schema,
        post: Callable[[pa.Table], pa.Table],
    ) -> None:
        super().__init__(keys, merges, partial_schema, out_schema, post)
        self.state = self.column_state("state", keys, partial_schema, incremental=True)

    def on_notify(self, time: Timestamp) -> None:
        batches = self.pending.pop(time, [])
        if not batches:
            return
        try:
            epoch = pa.Table.from_batches(batches, schema=self.partial_schema)
            rows = self._fold(self._merged(epoch))
            out = as_batches(self.post(rows), self.out_schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            self.fail(e, time, None, None)
        if out:
            self.send_by(0, out, time)

    def _fold(self, epoch: pa.Table) -> pa.Table:
        """Fold the epoch's rows into the state; the keys' new rows."""
        h = self.state.hashes(epoch)
        got = self.state.find(STATE_TIME, epoch, h)
        found, old = got.index, got.held
        if found.size:
            new = epoch.take(pa.array(found, type=pa.int64()))
            columns = [
                COMBINE[how](old.column(c), new.column(c))
                for c, how in zip(self.partial_schema.names[len(self.keys) :], self._merge_of())
            ]
            folded = pa.Table.from_arrays(
                [*(new.column(k) for k in self.keys), *columns], schema=self.partial_schema
            )
            fresh = np.ones(epoch.num_rows, dtype=bool)
            fresh[found] = False
            rest = np.flatnonzero(fresh)
            rows = pa.concat_tables([folded, epoch.take(pa.array(rest, type=pa.int64()))])
            h = np.concatenate([h[found], h[rest]])
        else:
            rows = epoch
        self.state.upsert(STATE_TIME, rows, h, found=got)  # (the keys just looked up)
        return rows

    def _merge_of(self) -> list[str]:
        hows = dict(self.merges)
        return [hows[c] for c in self.partial_schema.names[len(self.keys) :]]
