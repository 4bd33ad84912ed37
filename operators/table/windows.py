"""Windowed aggregates on tables: each key's aggregates over a window of epochs.

``table.group_by(keys).window_agg(size, slide=..., ...)`` is the table API's
``reduce_by_window`` (:mod:`operators.windows`), with its windows: they end at the
multiples ``w`` of ``slide``, cover the epochs ``(w - size, w]`` and send at ``w``; a
window with no row sends nothing, and windows ending after the last epoch are sent when
the input closes.

The partial aggregates cross the exchange by key as in ``agg``. Each key's worker merges
an epoch's partials once the epoch completes and keeps them, one row per key, in a
:class:`~timely.ColumnState` at that epoch's time ``(e,)``: a checkpoint after epoch
``e`` then holds exactly the epochs up to ``e``, and migrations and rescales move them by
bins like every keyed table. At a window's end the epochs it covers are merged with one
``group_by`` (sums of sums, minima of minima ...), so Python runs per epoch and window,
never per key. State changes only in ``on_notify``, as a checkpoint needs (see
:mod:`timely.state.keyed`).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from operators.table.running import KeyedPartials
from operators.table.vertices import Batch, as_batches
from operators.windows import _request_windows, window_ends
from progress import Timestamp


class WindowAggregate(KeyedPartials):
    """Keeps each epoch's merged partials per key at the epoch's time and, at each
    window end, sends the keys of the window with their aggregates over it (see the
    module)."""

    def __init__(
        self,
        keys: list[str],
        merges: list[tuple[str, str]],
        partial_schema: pa.Schema,
        out_schema: pa.Schema,
        post: Callable[[pa.Table], pa.Table],
        size: int,
        slide: int,
    ) -> None:
        super().__init__(keys, merges, partial_schema, out_schema, post)
        self.size = size
        self.slide = slide
        self.epochs = self.column_state("epochs", keys, partial_schema, incremental=True)

    def on_notify(self, time: Timestamp) -> None:
        w = time[0]
        try:
            for t in sorted(t for t in self.pending if t <= time):
                self._keep(t, self.pending.pop(t), w)
            if w % self.slide:
                return
            kept = [
                table
                for e in range(w - self.size + 1, w + 1)
                if (table := self.epochs.get((e,))) is not None
            ]
            for t in self.epochs.times():  # what no later window covers
                if t[0] <= w + self.slide - self.size:
                    self.epochs.pop(t)
            if not kept:
                return
            merged = self._merged(pa.concat_tables(kept) if len(kept) > 1 else kept[0])
            out = as_batches(self.post(merged), self.out_schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            self.fail(e, time, None, None)
        self.send_by(0, out, time)

    def restored(self, epoch: int) -> None:
        _request_windows(self, self.epochs.times(), epoch, self.size, self.slide)

    def _keep(self, time: Timestamp, batches: list[Batch], now: int) -> None:
        """Keep the epoch's partials, one row per key, and ask for the later ends of the
        windows that cover it (the one ending now, if any, is sent in this call)."""
        if not batches:
            return
        table = pa.Table.from_batches(batches, schema=self.partial_schema)
        if table.num_rows == 0:
            return
        self.epochs.upsert(time, self._merged(table))
        for end in window_ends(time[0], self.size, self.slide):
            if end > now:
                self.notify_at((end,))
