"""File sources that read Arrow batches for the table API: no Python per line or row.

:class:`TextTableSource` reads text files as batches of one ``line`` column: a chunk
of bytes at a time, cut after its last line end, split into lines by one Arrow
kernel. Partitions are the byte ranges :class:`~connectors.files.source.FileSource`
uses (a range owns the lines that start in it), and offsets are byte positions, so a
replay after a failure reads exactly the lines after the offset: exactly once with
checkpoints. :class:`ParquetTableSource` reads Parquet row groups as batches.

Epochs: ``batches_per_epoch`` (the ``i``-th batch of a partition is at epoch
``i // batches_per_epoch``), else every batch at epoch 0.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connectors._storage import FileEntry, list_files
from connectors.files.lines import align
from connectors.files.source import DEFAULT_SPLIT_BYTES, Paths, _positive
from timely import Source

LINE = pa.schema([("line", pa.string())])
"""What a :class:`TextTableSource` reads: one string column, the lines without ``\\n``."""

CHUNK = 4 << 20
"""Bytes read per batch: a few hundred thousand short lines, one kernel call each."""


class TextTableSource(Source):
    """Lines of text files as record batches of :data:`LINE` (see the module docstring).

    Use it with the table API: ``flow.source(TextTableSource(path)).as_table(LINE)``."""

    def __init__(
        self,
        path: Paths,
        *,
        chunk_bytes: int = CHUNK,
        batches_per_epoch: int | None = None,
        split_bytes: int | None = DEFAULT_SPLIT_BYTES,
    ) -> None:
        self.chunk_bytes = _positive("TextTableSource: chunk_bytes", chunk_bytes)
        self.batches_per_epoch = _positive(
            "TextTableSource: batches_per_epoch", batches_per_epoch, True
        )
        split = _positive("TextTableSource: split_bytes", split_bytes, True)
        self.files: list[FileEntry] = list_files(path)
        self.ranges: list[tuple[int, int, int]] = []  # (file, start, end)
        for i, entry in enumerate(self.files):
            step = split if split is not None else max(entry.size, 1)
            for s in range(0, entry.size, step):
                self.ranges.append((i, s, min(s + step, entry.size)))
        self._open: dict[int, Any] = {}

    def partitions(self) -> int:
        return len(self.ranges)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_open"] = {}  # open files stay in their process
        return state

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        file, start, end = self.ranges[partition]
        entry = self.files[file]
        f = self._open.get(partition)
        if f is None:
            f = self._open[partition] = entry.open()
        pos, batches = (align(f, start, 0), 0) if offset is None else offset
        if pos >= end:
            self._open.pop(partition).close()
            return None
        f.seek(pos)
        data = f.read(min(self.chunk_bytes, end - pos))
        if pos + len(data) >= end or len(data) < min(self.chunk_bytes, end - pos):
            # The range's end (or the file's): its last line may run past it, and is
            # still this range's (it starts inside).
            if data and not data.endswith(b"\n"):
                data += _rest_of_line(f)
            cut = len(data)
        else:
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # a line longer than a chunk
                data += _rest_of_line(f)
                cut = len(data)
        chunk = data[:cut]
        lines = _split_lines(chunk, entry.path, pos)
        per = self.batches_per_epoch
        epoch = 0 if per is None else batches // per
        batch = pa.RecordBatch.from_arrays([lines], schema=LINE)
        return epoch, [batch] if len(lines) else [], (pos + cut, batches + 1)


def _rest_of_line(f: Any) -> bytes:
    """The bytes up to and with the next ``\\n`` (or to the end of the file)."""
    out = []
    while True:
        block: bytes = f.read(1 << 16)
        if not block:
            break
        i = block.find(b"\n")
        if i >= 0:
            out.append(block[: i + 1])
            break
        out.append(block)
    return b"".join(out)


def _split_lines(chunk: bytes, path: str, pos: int) -> pa.Array:
    """``chunk``'s lines (each ended by ``\\n``, the last maybe not), as UTF-8 strings."""
    if not chunk:
        return pa.array([], pa.string())
    body = chunk[:-1] if chunk.endswith(b"\n") else chunk
    raw = pc.split_pattern(pa.array([body], pa.binary()), b"\n").flatten()
    try:
        lines = raw.cast(pa.string())
    except pa.ArrowInvalid:
        bad = next(i for i, v in enumerate(raw.to_pylist()) if not _utf8(v))
        raise ValueError(f"{path}: line {bad + 1} after byte {pos} is not valid UTF-8") from None
    if lines.null_count == 0 and len(lines) and pc.any(pc.ends_with(lines, "\r")).as_py():
        lines = pc.utf8_rtrim(lines, characters="\r")  # Windows line ends
    return lines


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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
