"""A join across epochs on tables: ``table.join_streaming(other, on=...)``.

Unlike the per-time ``join``, a row also matches the rows of the other side that came
at earlier epochs: each matching pair is sent once, at the later of the two epochs,
when that epoch completes (the row API's ``join_streaming``). A static table sent at
epoch 0 thus joins with every later epoch of a stream.

Each side's rows wait per epoch until it completes; then the epoch's new left rows are
joined with every right row kept so far and the epoch's own, and the rows kept from
earlier epochs on the left with the epoch's new right rows: two Arrow hash joins, no
Python per row. The epoch's rows are then kept, in a bag per side
(:class:`~timely.ColumnState` with ``unique=False``) at the epoch's time, so
checkpoints keep exactly the epochs up to theirs, incremental ones write only the
epochs added, and migrations and rescales move the rows by the bins of their keys.
``within=w`` forgets a side's rows once the epoch ``w`` after theirs is complete: only
pairs whose epochs differ by at most ``w`` match.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from operators.table.vertices import Batch, as_batches, join_tables
from progress import Timestamp
from timely import StatefulVertex


class StreamingJoin(StatefulVertex):
    """Both sides kept across epochs; each epoch's new pairs sent when it completes."""

    def __init__(
        self,
        keys: tuple[list[str], list[str]],
        schemas: tuple[pa.Schema, pa.Schema],
        out_schema: pa.Schema,
        right_names: dict[str, str],
        within: int | None,
    ) -> None:
        super().__init__()
        self.keys = keys
        self.schemas = schemas
        self.out_schema = out_schema
        self.right_names = right_names
        self.within = within
        self.pending: dict[Timestamp, tuple[list[Batch], list[Batch]]] = {}
        self.sides = (
            self.column_state("left", keys[0], schemas[0], incremental=True, unique=False),
            self.column_state("right", keys[1], schemas[1], incremental=True, unique=False),
        )

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        held = self.pending.get(time)
        if held is None:
            held = self.pending[time] = ([], [])
            self.notify_at(time)
        held[input].extend(records)

    def on_notify(self, time: Timestamp) -> None:
        held = self.pending.pop(time, None)
        if held is None:
            return
        new = [pa.Table.from_batches(b, schema=s) for b, s in zip(held, self.schemas)]
        try:
            parts = []
            if new[0].num_rows:  # the new left rows meet every right row so far
                right = pa.concat_tables([self._kept(self.sides[1], time), new[1]])
                parts.append(self._join(new[0], right))
            if new[1].num_rows:  # the new right rows meet the left rows kept before
                kept = self._kept(self.sides[0], time)
                if kept.num_rows:
                    parts.append(self._join(kept, new[1]))
            out = [b for p in parts for b in as_batches(p, self.out_schema)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            self.fail(e, time, None, None)
        for side, rows in zip(self.sides, new):
            side.append(time, rows)
        self._forget(time[0])
        if out:
            self.send_by(0, out, time)

    def _kept(self, side: Any, time: Timestamp) -> pa.Table:
        """The rows of ``side`` kept from epochs before ``time`` (within reach)."""
        oldest = -1 if self.within is None else time[0] - self.within
        tables = [
            t
            for at in side.times()
            if oldest <= at[0] and at < time and (t := side.get(at)) is not None
        ]
        if not tables:
            return side.schema.empty_table()
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _join(self, left: pa.Table, right: pa.Table) -> pa.Table:
        return join_tables(
            left, right, self.keys[0], self.keys[1], self.right_names, self.out_schema
        )

    def _forget(self, epoch: int) -> None:
        """Drop the epochs no later epoch can pair with (``within``)."""
        if self.within is None:
            return
        for side in self.sides:
            for at in side.times():
                if at[0] <= epoch - self.within:
                    side.pop(at)
