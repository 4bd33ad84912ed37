"""Coalescing a step's small Arrow batches for one peer into fewer, larger ones.

Why: a table stream's exchange splits every batch into one part per worker, so a
step that handles many small batches sends many tiny ones to each peer, and each
travels as its own Arrow IPC stream (a schema, a header, buffers). Before a step's
sends to a peer are flushed (the worker's buffer per destination, input port and
time), consecutive record batches of one schema are concatenated, each run up to
``target`` rows (one Arrow call per run, no Python per row); a batch of a quarter of
the target or more is left as it is (an exchange's parts of large batches are). Nothing
waits for more:
the buffer is one step's, so the latency cap is one step and a trickle still flows.

Progress is untouched: the sender counts a buffer once (``+1`` at the target port and
time) and the receiver takes it off once, whatever the buffer holds, so merging the
batches inside one buffer keeps every count. Batches are never merged across times,
ports or peers (they are different buffers), never split, and keep their order. Any
other records (rows, or batches of mixed schemas) are sent as they are.
"""

from __future__ import annotations

from typing import Any

DEFAULT_TARGET = 65_536
"""Rows a coalesced batch grows toward (see benchmarks/README.md, ``bench_coalesce``)."""


def is_record_batch(record: Any) -> bool:
    """Whether ``record`` is a ``pyarrow.RecordBatch`` (without importing pyarrow)."""
    t = type(record)
    return t.__name__ == "RecordBatch" and t.__module__ == "pyarrow.lib"


def one_schema(records: list[Any]) -> Any:
    """The schema every record of ``records`` has, if all are record batches of one
    schema; else None (such records are never merged: a vertex would see them together
    where it saw them apart)."""
    if not records or not is_record_batch(records[0]):
        return None
    kind, schema = type(records[0]), records[0].schema
    for r in records:
        if type(r) is not kind or not r.schema.equals(schema):
            return None
    return schema


def coalesce(records: list[Any], target: int) -> list[Any]:
    """``records`` with runs of consecutive small record batches concatenated, each run
    up to ``target`` rows. A batch of a quarter of the target or more stays alone: merging it
    would copy its bytes (a cost per byte) to save one batch's overhead (a cost per
    batch), which at that size is small. Unchanged unless every record is a record
    batch of one schema; ``target < 2`` turns it off."""
    if len(records) < 2 or target < 2:
        return records
    if one_schema(records) is None:
        return records
    import pyarrow as pa

    large = target // 4
    if all(r.num_rows >= large for r in records):
        return records
    out: list[Any] = []
    run: list[Any] = []
    rows = 0
    for batch in records:
        n = batch.num_rows
        if n >= large:  # large enough alone: merging would copy it to save little
            if run:
                out.append(run[0] if len(run) == 1 else pa.concat_batches(run))
                run, rows = [], 0
            out.append(batch)
            continue
        if run and rows + n > target:
            out.append(run[0] if len(run) == 1 else pa.concat_batches(run))
            run, rows = [], 0
        run.append(batch)
        rows += n
    if run:
        out.append(run[0] if len(run) == 1 else pa.concat_batches(run))
    return out
