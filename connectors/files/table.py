"""File sources that read Arrow batches for the table API: no Python per line or row.

:class:`TextTableSource` (one ``line`` column, split by one Arrow kernel),
:class:`CsvTableSource` (``pyarrow.csv``) and :class:`JsonLinesTableSource`
(``pyarrow.json``) read a chunk of bytes at a time, cut after its last line end, and
parse it in one call. Partitions are byte ranges that own the lines starting in them,
offsets byte positions (:mod:`connectors.files.chunks`), so a replay after a failure
reads exactly the rows after the offset: exactly once with checkpoints. Each has its
``schema`` when it is made, for ``flow.source(src).as_table(src.schema)``.
:class:`ParquetTableSource` reads Parquet row groups as batches.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from connectors._storage import FileEntry, list_files
from connectors.files.chunks import (
    ChunkedSource,
    first_bad_line,
    line_number,
    line_starts,
    records_in,
    rest_of_line,
)
from connectors.files.source import DEFAULT_SPLIT_BYTES, Paths
from timely import ConfigError, Source

LINE = pa.schema([("line", pa.string())])
"""What a :class:`TextTableSource` reads: one string column, the lines without ``\\n``."""

CHUNK = 4 << 20
"""Bytes read per batch: a few hundred thousand short lines, one kernel call each."""

TEXT_CHUNK = 256 << 10
"""Bytes of text read per batch: a batch's passes over its bytes (``str.split()``'s
numpy passes, :mod:`operators.table.ascii`) stay in a core's cache; word count's CPU is
~25% less than at :data:`CHUNK` (2M words: 0.089 s against 0.121 s, min of 7 runs)."""


class TextTableSource(ChunkedSource):
    """Lines of text files as record batches of :data:`LINE` (see the module docstring).

    Use it with the table API: ``flow.source(TextTableSource(path)).as_table(LINE)``."""

    schema = LINE

    def __init__(
        self,
        path: Paths,
        *,
        chunk_bytes: int = TEXT_CHUNK,
        batches_per_epoch: int | None = None,
        split_bytes: int | None = DEFAULT_SPLIT_BYTES,
    ) -> None:
        super().__init__(
            path,
            chunk_bytes=chunk_bytes,
            batches_per_epoch=batches_per_epoch,
            split_bytes=split_bytes,
        )
        self._cut([0] * len(self.files))

    def _batch(self, chunk: bytes, file: int, pos: int) -> pa.RecordBatch:
        lines = _split_lines(chunk, self.files[file].path, pos)
        return pa.RecordBatch.from_arrays([lines], schema=LINE)


def _split_lines(chunk: bytes, path: str, pos: int) -> pa.Array:
    """``chunk``'s lines (each ended by ``\\n``, the last maybe not), as UTF-8 strings."""
    if not chunk:
        return pa.array([], pa.string())
    size = len(chunk) - 1 if chunk.endswith(b"\n") else len(chunk)
    if size < 1 << 31:  # the chunk as one binary value over its own bytes: no copy
        ends = pa.py_buffer(np.array([0, size], np.int32))
        whole = pa.Array.from_buffers(pa.binary(), 1, [None, ends, pa.py_buffer(chunk)])
    else:
        whole = pa.array([chunk[:size]], pa.large_binary())
    raw = pc.split_pattern(whole, b"\n").flatten()
    if raw.type == pa.binary() and int(np.frombuffer(chunk, np.uint8).max()) < 0x80:
        lines = raw.view(pa.string())  # ASCII is valid UTF-8: no check needed
    else:
        try:
            lines = raw.cast(pa.string())
        except pa.ArrowInvalid:
            bad = next(i for i, v in enumerate(raw.to_pylist()) if not _utf8(v))
            raise ValueError(
                f"{path}: line {bad + 1} after byte {pos} is not valid UTF-8"
            ) from None
    if b"\r" in chunk and pc.any(pc.ends_with(lines, "\r")).as_py():
        lines = pc.utf8_rtrim(lines, characters="\r")  # Windows line ends
    return lines


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


INFER_BYTES = 1 << 20
"""How much of the first file's data a schema is inferred from, when none is given."""


def _table_schema(kind: str, schema: Any) -> pa.Schema | None:
    if schema is None or isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, Mapping):
        try:
            return pa.schema([(str(k), _arrow_type(v)) for k, v in schema.items()])
        except (TypeError, ValueError, pa.ArrowInvalid) as e:
            raise ConfigError(f"{kind}: schema {schema!r}: {e}") from None
    raise ConfigError(
        f"{kind}: schema must be a pyarrow.Schema or a mapping of names to Arrow types, "
        f"got {schema!r}"
    )


def _arrow_type(t: Any) -> pa.DataType:
    return t if isinstance(t, pa.DataType) else pa.type_for_alias(str(t))


def _strings_for_nulls(schema: pa.Schema) -> pa.Schema:
    """An inferred schema, with a column the head holds no value of typed as string."""
    return pa.schema(
        [pa.field(f.name, pa.string()) if pa.types.is_null(f.type) else f for f in schema]
    )


def _head(entry: FileEntry, start: int) -> bytes:
    """Up to :data:`INFER_BYTES` of whole lines of ``entry`` from byte ``start``."""
    with entry.open() as f:
        f.seek(start)
        data: bytes = f.read(INFER_BYTES)
    if start + len(data) < entry.size:
        data = data[: data.rfind(b"\n") + 1]
    return data


class _ParsedChunks(ChunkedSource):
    """A chunk parsed by one Arrow reader call, checked to be one record per line.

    ``_parse(chunk, file)`` reads a chunk; ``blank`` are the bytes a line without a
    record holds. A chunk that does not parse, or parses to another number of rows than
    it has records' lines, is bisected to its first bad line, which the error names.
    """

    blank = b"\r\n"
    format = "CSV"

    @abstractmethod
    def _parse(self, chunk: bytes, file: int) -> pa.Table:
        """The rows of ``chunk`` (raises ``pa.ArrowInvalid`` for bad input)."""

    def _batch(self, chunk: bytes, file: int, pos: int) -> pa.RecordBatch:
        if not chunk:
            return _empty(self.schema)
        starts = line_starts(chunk)
        try:
            table = self._parse(chunk, file)
            if table.num_rows == records_in(chunk, starts, self.blank):
                return pa.RecordBatch.from_arrays(
                    [table.column(n).combine_chunks() for n in self.schema.names],
                    schema=self.schema,
                )
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
        self._explain(chunk, starts, file, pos)
        raise AssertionError("unreachable: _explain raises")  # pragma: no cover

    def _opens_value(self, line: bytes) -> bool:
        """Whether ``line`` leaves a value open at its end (a quoted line break)."""
        return False

    def _ok(self, prefix: bytes, file: int) -> bool:
        if not prefix:
            return True
        try:
            rows = self._parse(prefix, file).num_rows
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return False
        return bool(rows == records_in(prefix, line_starts(prefix), self.blank))

    def _explain(self, chunk: bytes, starts: Any, file: int, pos: int) -> None:
        entry = self.files[file]
        k = first_bad_line(chunk, starts, lambda prefix: self._ok(prefix, file))
        at = int(starts[k])
        end = int(starts[k + 1]) if k + 1 < len(starts) else len(chunk)
        spans = k > 0 and self._opens_value(chunk[int(starts[k - 1]) : at])
        if spans:
            end, at = at, int(starts[k - 1])
        line = chunk[at:end]
        where = f"{entry.path}: line {line_number(entry, pos + at)} (at byte {pos + at})"
        try:
            rows = 0 if spans else self._parse(line, file).num_rows
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise ValueError(
                f"{where} is not a {self.format} record of {_show(self.schema)}: {e}; fix "
                "the line "
                "or give a schema that fits it"
            ) from None
        if rows:
            raise ValueError(
                f"{where} holds {rows} {self.format} records: {line[:200]!r}; write one "
                "record per line"
            )
        raise ValueError(
            f"{where} starts a {self.format} record that runs over several lines (a line "
            f"break inside a value): {line[:200]!r}; a table source splits files at line "
            "ends, so write one record per line"
            + (" (or read the file with CsvSource(multiline=True))" if self.format == "CSV" else "")
        )


def _show(schema: pa.Schema) -> str:
    return "{" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "}"


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


class CsvTableSource(_ParsedChunks):
    """CSV files as record batches, parsed by ``pyarrow.csv``: no Python per row.

    ``schema`` (a ``pyarrow.Schema`` or a mapping of names to types) picks and types the
    columns; without one, it is inferred from the head (1 MiB) of the first file, a
    column without a value there typed as string. ``header``: each file's first line
    names its columns (read once per file, on the driver; files may order them
    differently, and must hold every column of the schema); without a header, the
    schema's names are the columns in order (or ``f0``, ``f1``... when inferred). Values
    follow ``pyarrow.csv``: an empty field is null in a numeric column and ``""`` in a
    string one. A record is one line: a quoted line break inside a value fails, naming
    the line (``CsvSource(multiline=True)`` reads such files). Partitions, offsets and
    epochs: :mod:`connectors.files.chunks`; ``.schema`` is the batches' schema, for
    ``flow.source(src).as_table(src.schema)``.
    """

    def __init__(
        self,
        path: Paths,
        schema: Any = None,
        *,
        header: bool = True,
        delimiter: str = ",",
        quote_char: str = '"',
        chunk_bytes: int = CHUNK,
        batches_per_epoch: int | None = None,
        split_bytes: int | None = DEFAULT_SPLIT_BYTES,
    ) -> None:
        super().__init__(
            path,
            chunk_bytes=chunk_bytes,
            batches_per_epoch=batches_per_epoch,
            split_bytes=split_bytes,
        )
        kind = type(self).__name__
        for name, char in (("delimiter", delimiter), ("quote_char", quote_char)):
            if not isinstance(char, str) or len(char) != 1 or char in "\r\n":
                raise ConfigError(
                    f"{kind}: {name} must be one character other than a line end, got {char!r}"
                )
        if delimiter == quote_char:
            raise ConfigError(f"{kind}: delimiter and quote_char are both {delimiter!r}")
        self.header = header
        self._options = pacsv.ParseOptions(delimiter=delimiter, quote_char=quote_char)
        given = _table_schema(kind, schema)
        names: list[list[str] | None] = []
        starts: list[int] = []
        for entry in self.files:
            found, first = self._header(entry) if header else (None, 0)
            names.append(found)
            starts.append(first)
        if given is None:
            given = self._infer(names, starts)
        self.schema = given
        self.columns: list[list[str]] = []  # each file's columns, in its order
        for entry, found in zip(self.files, names):
            if found is None:
                found = list(given.names) if not header else []
            missing = [n for n in given.names if n not in found]
            if missing and entry.size:
                raise ConfigError(
                    f"{kind}: {entry.path} has no column {missing[0]!r} (its header: "
                    f"{found}); give a schema with the columns the files share"
                )
            self.columns.append(found)
        self._cut(starts)

    def _header(self, entry: FileEntry) -> tuple[list[str] | None, int]:
        """The file's column names and where its data starts (none: an empty file)."""
        if entry.size == 0:
            return None, 0
        with entry.open() as f:
            line = rest_of_line(f)
        if not line.strip(b"\r\n"):
            raise ConfigError(
                f"{type(self).__name__}: the first line of {entry.path} is empty, but "
                "header=True expects the column names there; remove the line or pass "
                "header=False with a schema"
            )
        try:
            table = pacsv.read_csv(
                pa.BufferReader(line if line.endswith(b"\n") else line + b"\n"),
                read_options=pacsv.ReadOptions(use_threads=False),
                parse_options=self._options,
            )
        except pa.ArrowInvalid as e:
            raise ConfigError(f"{entry.path}: cannot read the CSV header {line!r}: {e}") from None
        return list(table.column_names), len(line)

    def _infer(self, names: list[list[str] | None], starts: list[int]) -> pa.Schema:
        kind = type(self).__name__
        for entry, found, first in zip(self.files, names, starts):
            if first >= entry.size:
                continue
            head = _head(entry, first)
            read = (
                pacsv.ReadOptions(column_names=found, use_threads=False)
                if found is not None
                else pacsv.ReadOptions(autogenerate_column_names=True, use_threads=False)
            )
            try:
                table = pacsv.read_csv(
                    pa.BufferReader(head), read_options=read, parse_options=self._options
                )
            except pa.ArrowInvalid as e:
                raise ConfigError(
                    f"{kind}: cannot infer a schema from the head of {entry.path} ({e}); "
                    "give a schema"
                ) from None
            return _strings_for_nulls(table.schema)
        for found in names:
            if found is not None:
                return pa.schema([(n, pa.string()) for n in found])
        raise ConfigError(f"{kind}: the files hold no rows to infer a schema from; give a schema")

    def _opens_value(self, line: bytes) -> bool:
        return line.count(self._options.quote_char.encode()) % 2 == 1

    def _parse(self, chunk: bytes, file: int) -> pa.Table:
        return pacsv.read_csv(
            pa.BufferReader(chunk),
            read_options=pacsv.ReadOptions(column_names=self.columns[file], use_threads=False),
            parse_options=self._options,
            convert_options=pacsv.ConvertOptions(
                column_types=self.schema, include_columns=self.schema.names
            ),
        )


class JsonLinesTableSource(_ParsedChunks):
    """JSON lines (one object per line) as record batches, parsed by ``pyarrow.json``.

    ``schema`` picks and types the fields (a field a line lacks is null; fields not in
    the schema are ignored); without one, it is inferred from the head (1 MiB) of the
    first file with data. Blank lines are skipped. A line that is not one JSON object
    fails, naming the file, line and byte. Partitions, offsets and epochs:
    :mod:`connectors.files.chunks`; ``.schema`` is the batches' schema.
    """

    blank = b" \t\r\n"
    format = "JSON"

    def __init__(
        self,
        path: Paths,
        schema: Any = None,
        *,
        chunk_bytes: int = CHUNK,
        batches_per_epoch: int | None = None,
        split_bytes: int | None = DEFAULT_SPLIT_BYTES,
    ) -> None:
        super().__init__(
            path,
            chunk_bytes=chunk_bytes,
            batches_per_epoch=batches_per_epoch,
            split_bytes=split_bytes,
        )
        given = _table_schema(type(self).__name__, schema)
        self.schema = given if given is not None else self._infer()
        self._options = pajson.ParseOptions(
            explicit_schema=self.schema, unexpected_field_behavior="ignore"
        )
        self._cut([0] * len(self.files))

    def _infer(self) -> pa.Schema:
        kind = type(self).__name__
        for entry in self.files:
            head = _head(entry, 0)
            if not head.strip():
                continue
            try:
                table = pajson.read_json(
                    pa.BufferReader(head), read_options=pajson.ReadOptions(use_threads=False)
                )
            except pa.ArrowInvalid as e:
                raise ConfigError(
                    f"{kind}: cannot infer a schema from the head of {entry.path} ({e}); "
                    "give a schema"
                ) from None
            return _strings_for_nulls(table.schema)
        raise ConfigError(f"{kind}: the files hold no rows to infer a schema from; give a schema")

    def _parse(self, chunk: bytes, file: int) -> pa.Table:
        return pajson.read_json(
            pa.BufferReader(chunk),
            read_options=pajson.ReadOptions(use_threads=False, block_size=max(len(chunk), 1024)),
            parse_options=self._options,
        )


class ParquetTableSource(Source):
    """Parquet files as record batches, one row group a read: partitions are the files,
    offsets row group numbers. ``schema`` is the files' (``TableSource.schema``)."""

    def __init__(self, path: Paths, *, columns: list[str] | None = None) -> None:
        self.files: list[FileEntry] = list_files(path)
        self.columns = columns
        first = pq.ParquetFile(self.files[0].path) if self.files else None
        full = first.schema_arrow if first is not None else pa.schema([])
        self.schema = full if columns is None else pa.schema([full.field(c) for c in columns])

    def partitions(self) -> int:
        return len(self.files)

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        group = 0 if offset is None else int(offset)
        f = pq.ParquetFile(self.files[partition].path)
        if group >= f.num_row_groups:
            return None
        table = f.read_row_group(group, columns=self.columns)
        return 0, table.cast(self.schema).to_batches(), group + 1
