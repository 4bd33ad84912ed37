"""Parquet files as a dataflow source and sink (pyarrow; local paths or ``pyarrow.fs`` URIs).

**Source: partitioning and replay.** :class:`ParquetSource` lists its files once, on
the driver, sorted by path, and makes one partition per (file, row group) in that
order; worker ``w`` of ``W`` reads the partitions ``p`` with ``p % W == w``. An offset
is the row index inside the row group (a plain int), and a batch depends only on the
partition and the offset, so a replay from a recorded offset reads exactly the same
rows in the same epochs. Epochs come from an integer column (which must not decrease
within a row group: sort each file by it, as ``spark_source`` does) or, without one,
from the row order: the ``k``-th run of ``batch_size`` rows across all the files, in
order, is epoch ``k`` (so the epochs do not depend on how rows fall into row groups).
Each worker holds at most one row group's decoded pages per partition it is reading.

**Sink: exactly once.** :class:`ParquetSink` writes each worker's records of an epoch
to ``<dir>/epoch=<e>/part-<worker>-of-<workers>.parquet`` and commits epochs with a
``<dir>/_COMMITTED`` marker, as every sink of :mod:`connectors.committed` does.
:func:`read_committed` reads the committed epochs only, so a reader sees each epoch
once, whatever failures and replays happened.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from connectors._storage import list_files, normalize, resolve
from connectors.arrow_records import (
    SchemaError,
    check_fits,
    check_shape,
    conform,
    from_table,
    to_table,
)
from connectors.committed import CommittedEpochSink, committed_files
from connectors.committed import committed_epoch as committed_epoch  # re-exported
from timely import Source


@dataclass(frozen=True)
class _Part:
    file: int  # index into ParquetSource._files
    row_group: int
    rows: int
    first_row: int  # the row group's first row, counted over all files in order


class _Cursor:
    """An open reader on one row group, positioned at ``pos`` (a worker-local cache)."""

    def __init__(self, batches: Any, pos: int) -> None:
        self.batches = batches  # iterator of RecordBatch from ParquetFile.iter_batches
        self.pos = pos  # row (within the row group) of buf's first row
        self.buf: pa.Table | None = None
        self.last_epoch: int | None = None

    def fill(self, rows: int) -> pa.Table:
        """At least ``rows`` rows from ``pos`` on (fewer at the row group's end)."""
        chunks = [] if self.buf is None else [self.buf]
        have = 0 if self.buf is None else self.buf.num_rows
        while have < rows:
            batch = next(self.batches, None)
            if batch is None:
                break
            chunks.append(pa.Table.from_batches([batch]))
            have += batch.num_rows
        self.buf = pa.concat_tables(chunks) if len(chunks) != 1 else chunks[0]
        return self.buf

    def take(self, n: int) -> None:
        assert self.buf is not None
        self.buf = self.buf.slice(n)
        self.pos += n


class ParquetSource(Source):
    """Rows of Parquet files as records, one partition per (file, row group).

    ``paths``: a file, a directory (every non-hidden file below it) or a list of them,
    local or URIs (``file://``, ``s3://`` ...). ``epoch_column``: an integer column
    giving each row's epoch, or ``None`` for epochs by row order (``batch_size`` rows
    each). ``records``: ``"tuples"`` (in column order), ``"dicts"`` or ``"arrow"`` (one
    ``pyarrow.RecordBatch`` per batch). ``columns``: the columns to hand over (default
    all; the epoch column is read either way). ``batch_size``: the most rows per batch.
    """

    def __init__(
        self,
        paths: str | Sequence[str],
        epoch_column: str | None = None,
        records: str = "tuples",
        batch_size: int = 65_536,
        columns: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.records = check_shape(records)
        self.batch_size = batch_size
        self.epoch_column = epoch_column
        self._fs, self._files = _discover(paths)
        schema = self._check_schemas(columns)
        self.schema: pa.Schema = schema
        self.columns: list[str] = list(columns) if columns is not None else schema.names
        self._read_columns = list(self.columns)
        if epoch_column is not None and epoch_column not in self._read_columns:
            self._read_columns.append(epoch_column)
        self._parts = self._partition()
        self._cursors: dict[int, _Cursor] = {}

    # -- the driver's view: files, schema, partitions --------------------------------------
    def _check_schemas(self, columns: Sequence[str] | None) -> pa.Schema:
        first = pq.read_schema(self._files[0], filesystem=self._fs)
        wanted = list(columns) if columns is not None else list(first.names)
        if self.epoch_column is not None and self.epoch_column not in wanted:
            wanted.append(self.epoch_column)
        for name in wanted:
            if first.get_field_index(name) < 0:
                what = "epoch column" if name == self.epoch_column else "column"
                raise SchemaError(
                    f"{what} {name!r} is not in {self._files[0]!r} (its columns: "
                    f"{first.names}); pass one of those"
                    + (" or epoch_column=None for epochs by row order" if what != "column" else "")
                )
        if self.epoch_column is not None:
            typ = first.field(self.epoch_column).type
            if not pa.types.is_integer(typ):
                raise SchemaError(
                    f"epoch column {self.epoch_column!r} is {typ}, not an integer type; "
                    "derive an integer epoch column (e.g. minutes since the start, cast to "
                    "int64) and pass its name"
                )
        for path in self._files[1:]:
            other = pq.read_schema(path, filesystem=self._fs)
            for name in wanted:
                i = other.get_field_index(name)
                if i < 0 or other.field(i).type != first.field(name).type:
                    found = "missing" if i < 0 else str(other.field(i).type)
                    raise SchemaError(
                        f"column {name!r} is {first.field(name).type} in {self._files[0]!r} "
                        f"but {found} in {path!r}; rewrite the files with one schema (cast "
                        "the column) or read them as separate sources"
                    )
        return pa.schema([first.field(n) for n in wanted if n in (columns or first.names)])

    def _partition(self) -> list[_Part]:
        parts: list[_Part] = []
        first_row = 0
        for i, path in enumerate(self._files):
            with self._fs.open_input_file(path) as f:
                meta = pq.ParquetFile(f).metadata
            for rg in range(meta.num_row_groups):
                rows = meta.row_group(rg).num_rows
                if rows:
                    parts.append(_Part(i, rg, rows, first_row))
                first_row += rows
        return parts

    def partitions(self) -> int:
        return len(self._parts)

    @property
    def files(self) -> list[str]:
        """The files read, in partition order."""
        return list(self._files)

    # -- the workers' view: batches ---------------------------------------------------------
    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        part = self._parts[partition]
        pos = 0 if offset is None else int(offset)
        if pos >= part.rows:
            self._cursors.pop(partition, None)
            return None
        cursor = self._cursor(partition, part, pos)
        table = cursor.fill(self.batch_size)
        if self.epoch_column is None:
            row = part.first_row + pos
            epoch = row // self.batch_size
            n = min(table.num_rows, (epoch + 1) * self.batch_size - row)
        else:
            epoch, n = self._epoch_run(table, cursor, partition, pos)
        batch = table.slice(0, n)
        cursor.take(n)
        if cursor.pos >= part.rows:
            del self._cursors[partition]
        if self.epoch_column is not None and self.epoch_column not in self.columns:
            batch = batch.drop_columns([self.epoch_column])
        if self.records == "arrow":  # the batches' schema is self.schema, without file metadata
            batch = batch.replace_schema_metadata(self.schema.metadata)
        return epoch, from_table(batch, self.records), pos + n

    def _cursor(self, partition: int, part: _Part, pos: int) -> _Cursor:
        cursor = self._cursors.get(partition)
        if cursor is not None and cursor.pos == pos:
            return cursor
        f = pq.ParquetFile(self._fs.open_input_file(self._files[part.file]), buffer_size=1 << 20)
        batches = f.iter_batches(
            batch_size=self.batch_size, row_groups=[part.row_group], columns=self._read_columns
        )
        cursor = _Cursor(batches, 0)
        while cursor.pos < pos:  # a replay from an offset: skip to it
            table = cursor.fill(1)
            cursor.take(min(table.num_rows, pos - cursor.pos))
        self._cursors[partition] = cursor
        return cursor

    def _epoch_run(
        self, table: pa.Table, cursor: _Cursor, partition: int, pos: int
    ) -> tuple[int, int]:
        """The epoch at the cursor and how many rows (at most batch_size) share it."""
        name = self.epoch_column
        assert name is not None
        col = table.column(name).slice(0, self.batch_size + 1)
        if col.null_count:
            raise SchemaError(
                f"epoch column {name!r} has a null value in {self._where(partition, pos)}; "
                "fill or filter out rows without an epoch before reading"
            )
        epochs = col.to_numpy()
        epoch = int(epochs[0])
        later = np.flatnonzero(epochs != epoch)
        n = int(later[0]) if len(later) else min(len(epochs), self.batch_size)
        n = min(n, self.batch_size)
        nxt = int(epochs[n]) if n < len(epochs) else None
        last = cursor.last_epoch
        if epoch < 0 or (last is not None and epoch < last) or (nxt is not None and nxt < epoch):
            raise SchemaError(
                f"epoch column {name!r} is not sorted in {self._where(partition, pos)} "
                f"(or has a negative epoch: {epoch}); epochs must not decrease within a row "
                f"group: sort each file by {name!r} before writing it (Spark: "
                f"df.sortWithinPartitions({name!r}); spark_source does it for you)"
            )
        cursor.last_epoch = epoch
        return epoch, n

    def _where(self, partition: int, pos: int) -> str:
        part = self._parts[partition]
        return f"{self._files[part.file]!r}, row group {part.row_group}, near row {pos}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cursors"] = {}  # open readers stay with the process that opened them
        return state


def _discover(paths: str | Sequence[str]) -> tuple[pafs.FileSystem, list[str]]:
    items: list[str | os.PathLike[str]] = [paths] if isinstance(paths, str) else list(paths)
    entries = list_files(items)
    if not entries:
        raise FileNotFoundError(f"no Parquet files in {paths}")
    fs = resolve(entries[0].root)[0]
    for entry in entries:
        this_fs = resolve(entry.root)[0]
        if this_fs.type_name != fs.type_name:
            raise ValueError(
                f"{entry.root!r} is on {this_fs.type_name}, {entries[0].root!r} on "
                f"{fs.type_name}; read files of one filesystem per source"
            )
    return fs, [entry.path for entry in entries]


class ParquetSink(CommittedEpochSink):
    """Each epoch's records as Parquet files under ``path``, committed with checkpoints.

    ``schema`` (a ``pyarrow.Schema``) fixes the columns and types, and is needed for
    tuple records; without it dict records give the columns and Arrow infers the types.
    Records may also be Arrow ``RecordBatch``es, written as they are (one Arrow call per
    part, no Python per row): ``table.sink(ParquetSink(path))`` writes a table stream,
    with the table's schema.
    Partitioning: each worker writes what it holds; delivery: exactly once for readers
    of committed epochs (:mod:`connectors.committed`).
    """

    extension = "parquet"

    def __init__(self, path: str | os.PathLike[str], schema: pa.Schema | None = None) -> None:
        if schema is not None and not isinstance(schema, pa.Schema):
            raise TypeError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
        super().__init__(path)
        self.schema = schema

    def bind_schema(self, schema: pa.Schema) -> None:
        """A table stream's schema, when ``table.sink(self)`` builds the graph: the parts'
        schema if none was given; one given must have the table's columns and types
        (:func:`~connectors.arrow_records.check_fits`), checked here, not on a worker."""
        if self.schema is None:
            self.schema = schema
        else:
            check_fits(type(self).__name__, self.schema, schema)

    def encode(self, records: list[Any]) -> bytes:
        out = pa.BufferOutputStream()
        pq.write_table(to_table(records, self.schema), out)
        data: bytes = out.getvalue().to_pybytes()
        return data

    def row_bytes(self, data: bytes) -> list[bytes]:
        """Each row read back, as the ``repr`` of its ``(column, value)`` pairs: a row's
        bytes do not depend on the row groups, the batches it came in, or which part
        holds it. Python per row, but only when a replay of a committed epoch is
        compared (:mod:`connectors.committed`), never when writing."""
        table = pq.read_table(pa.BufferReader(data))
        return [repr(list(row.items())).encode() for row in table.to_pylist()]


def read_committed(
    path: str | os.PathLike[str], schema: pa.Schema | None = None, epoch_column: str | None = None
) -> pa.Table:
    """Every committed epoch of a :class:`ParquetSink`'s output, as one table.

    Rows are in epoch order, then by worker. ``schema`` casts every part to it (and
    gives an empty result its columns); ``epoch_column`` adds each row's epoch as an
    int64 column of that name.
    """
    files = committed_files(path)
    fs = resolve(normalize(path))[0]
    tables = []
    for e, file in files:
        t = pq.read_table(file, filesystem=fs)
        if schema is not None:
            t = conform(t, schema)
        if epoch_column is not None:
            if epoch_column in t.column_names:
                raise SchemaError(
                    f"the data already has a column {epoch_column!r}; pass another "
                    "epoch_column name, or None"
                )
            t = t.append_column(epoch_column, pa.array(np.full(t.num_rows, e, dtype=np.int64)))
        tables.append(t)
    if not tables:
        empty = schema if schema is not None else pa.schema([])
        if epoch_column is not None:
            empty = empty.append(pa.field(epoch_column, pa.int64()))
        return empty.empty_table()
    try:
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(
            f"the committed parts of {path!r} have different schemas ({e}); pass schema= to "
            "cast them to one, and give the sink that schema next time"
        ) from None
