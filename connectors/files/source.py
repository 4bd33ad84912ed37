"""File sources: text lines, CSV rows and JSON lines, split across workers, resumable.

Partitioning: the files (a path, a directory searched recursively, or a list) are
listed and sorted when the source is made, on the driver; each file is cut into byte
ranges of ``split_bytes`` (``None``: one range per file), and each range is a
partition, numbered in file order. A range owns the records whose first line starts
inside it (:mod:`connectors.files.lines`), so the cuts need no reading ahead. Worker
``w`` reads the partitions ``p % workers == w``.

Offsets: ``(byte position, records read, epoch)`` of a partition, plain ints. Reading
a partition from an offset gives exactly the records after it, in the same batches,
as long as the bytes listed when the source was made are unchanged (appending to a
file is fine: what was appended is not read). That makes a replay after a failure
exact: with checkpoints, every record is delivered exactly once.

Epochs: ``epoch_of(record)`` (records of a partition must then come in non-decreasing
epoch order, e.g. files sorted by time), or ``records_per_epoch`` (the ``i``-th record of
a partition is at epoch ``i // records_per_epoch``), or else every record at epoch 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from connectors._storage import FileEntry, list_files
from connectors.collections import check_epoch
from connectors.files.formats import (
    SKIP,
    CsvFormat,
    JsonLinesFormat,
    LineFormat,
    Rows,
    TextFormat,
)
from connectors.files.lines import Lines, align, take
from timely import ConfigError, Source
from timely.errors import failure_location, function_location

Paths = str | os.PathLike[str] | list[str | os.PathLike[str]]

DEFAULT_SPLIT_BYTES = 64 << 20
"""Large enough that opening a range is cheap next to reading it, small enough to share
one big file among several workers."""


def _positive(name: str, value: Any, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{name} must be an int >= 1{' or None' if allow_none else ''}, got {value!r}"
        )
    return value


class FileSource(Source):
    """Records of ``format`` from files; see the module docstring for the guarantees."""

    def __init__(
        self,
        path: Paths,
        format: LineFormat,
        *,
        epoch_of: Callable[[Any], int] | None = None,
        records_per_epoch: int | None = None,
        batch_size: int = 1024,
        split_bytes: int | None = DEFAULT_SPLIT_BYTES,
    ) -> None:
        kind = type(self).__name__
        if epoch_of is not None and records_per_epoch is not None:
            raise ConfigError(f"{kind}: give epoch_of or records_per_epoch, not both")
        if epoch_of is not None and not callable(epoch_of):
            raise ConfigError(f"{kind}: epoch_of must be a function of a record, got {epoch_of!r}")
        self.format = format
        self.epoch_of = epoch_of
        self.records_per_epoch = _positive(f"{kind}: records_per_epoch", records_per_epoch, True)
        self.batch_size = _positive(f"{kind}: batch_size", batch_size)
        split = _positive(f"{kind}: split_bytes", split_bytes, True)
        self._open: dict[int, Any] = {}  # partition -> its file, open while it is read
        self.files: list[FileEntry] = list_files(path)
        self.preambles: list[Any] = []
        self.ranges: list[tuple[int, int, int, int]] = []  # (file, data start, start, end)
        for i, entry in enumerate(self.files):
            if entry.size == 0:
                self.preambles.append(None)
                continue
            with entry.open() as f:
                meta, data_start = format.preamble(f, entry.path, entry.size)
            self.preambles.append(meta)
            step = split if split is not None and format.splittable else entry.size
            for s in range(data_start, entry.size, step):
                self.ranges.append((i, data_start, s, min(s + step, entry.size)))

    def partitions(self) -> int:
        return len(self.ranges)

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        file, data_start, start, end = self.ranges[partition]
        entry = self.files[file]
        f = self._open.get(partition)
        if f is None:
            f = self._open[partition] = entry.open()
        if offset is None:
            pos, index, last = align(f, start, data_start), 0, 0
        else:
            pos, index, last = offset
        read = self._read_lines if self.format.splittable else self._read_records
        got = read(f, entry, self.preambles[file], pos, end, index, last) if pos < end else None
        if got is None:
            self._open.pop(partition).close()
        return got

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_open"] = {}  # open files stay in their process
        return state

    def _read_lines(
        self, f: Any, entry: FileEntry, meta: Any, pos: int, end: int, index: int, last: int
    ) -> tuple[int, list[Any], Any] | None:
        """The fast path for one record per line: take a batch of lines, parse them at once."""
        limit = self.batch_size
        per = self.records_per_epoch
        if per is not None:
            limit = min(limit, per - index % per)  # a batch never crosses an epoch
        taken = take(f, pos, end, limit, entry.path)
        if not taken.raws:
            return None
        values = self.format.parse_lines(taken, meta)
        if values is None:
            return self._read_records(f, entry, meta, pos, end, index, last)
        if self.epoch_of is None:
            batch = [v for v in values if v is not SKIP]
            epoch = 0 if per is None else index // per
            return epoch, batch, (taken.next_pos, index + len(batch), epoch)
        batch = []
        epoch = last
        for k, value in enumerate(values):
            if value is SKIP:
                continue
            e = self._epoch(value, index, partial(taken.start_of, k), entry)
            if batch and e != epoch:
                return epoch, batch, (taken.start_of(k), index, epoch)
            if e < last:
                self._went_back(entry, taken.start_of(k), e, last)
            epoch = e
            batch.append(value)
            index += 1
        return epoch, batch, (taken.next_pos, index, epoch)

    def _read_records(
        self, f: Any, entry: FileEntry, meta: Any, pos: int, end: int, index: int, last: int
    ) -> tuple[int, list[Any], Any] | None:
        """Record by record: for records that may span lines, and to name a bad line."""
        lines = Lines(f, pos, end, entry.path)
        batch: list[Any] = []
        epoch = last
        nxt = pos
        for at, record in self.format.parse(lines, meta):
            e = self._epoch(record, index, partial(int, at), entry)  # int(at) is at
            if batch and e != epoch:
                break  # the next batch starts with this record
            if e < last:
                self._went_back(entry, at, e, last)
            epoch = e
            batch.append(record)
            index += 1
            nxt = lines.pos
            if len(batch) >= self.batch_size:
                break
        if not batch:
            return None
        return epoch, batch, (nxt, index, epoch)

    @staticmethod
    def _went_back(entry: FileEntry, at: int, epoch: int, last: int) -> None:
        raise ValueError(
            f"{entry.path}: the record at byte {at} is at epoch {epoch}, after records at "
            f"epoch {last}; epochs must not decrease within a file: sort it by epoch, or use "
            "records_per_epoch"
        )

    def _epoch(self, record: Any, index: int, at: Callable[[], int], entry: FileEntry) -> int:
        if self.records_per_epoch is not None:
            return index // int(self.records_per_epoch)
        fn = self.epoch_of
        if fn is None:
            return 0
        try:
            e = fn(record)
        except Exception as exc:
            where = failure_location(exc.__traceback__, function_location(fn))
            raise ValueError(
                f"epoch_of ({where}) failed on the record at byte {at()} of {entry.path}, "
                f"{record!r}: {type(exc).__name__}: {exc}"
            ) from exc
        return check_epoch(e, record, function_location(fn))


class TextSource(FileSource):
    """Lines of text files as ``str`` records (without line ends). See :class:`FileSource`."""

    def __init__(
        self,
        path: Paths,
        *,
        epoch_of: Callable[[Any], int] | None = None,
        records_per_epoch: int | None = None,
        batch_size: int = 1024,
        split_bytes: int | None = DEFAULT_SPLIT_BYTES,
    ) -> None:
        super().__init__(
            path,
            TextFormat(),
            epoch_of=epoch_of,
            records_per_epoch=records_per_epoch,
            batch_size=batch_size,
            split_bytes=split_bytes,
        )


class JsonLinesSource(FileSource):
    """One JSON value per non-blank line. See :class:`FileSource`."""

    def __init__(
        self,
        path: Paths,
        *,
        epoch_of: Callable[[Any], int] | None = None,
        records_per_epoch: int | None = None,
        batch_size: int = 1024,
        split_bytes: int | None = DEFAULT_SPLIT_BYTES,
    ) -> None:
        super().__init__(
            path,
            JsonLinesFormat(),
            epoch_of=epoch_of,
            records_per_epoch=records_per_epoch,
            batch_size=batch_size,
            split_bytes=split_bytes,
        )


class CsvSource(FileSource):
    """CSV rows as dicts or tuples of strings (see :class:`CsvFormat` for the options).

    Each file's header is read when the source is made. ``multiline=True`` reads each
    file whole (one partition per file). Otherwise see :class:`FileSource`.
    """

    def __init__(
        self,
        path: Paths,
        *,
        rows: Rows = "dict",
        header: bool = True,
        fieldnames: Sequence[str] | None = None,
        delimiter: str = ",",
        quotechar: str = '"',
        multiline: bool = False,
        epoch_of: Callable[[Any], int] | None = None,
        records_per_epoch: int | None = None,
        batch_size: int = 1024,
        split_bytes: int | None = DEFAULT_SPLIT_BYTES,
    ) -> None:
        fmt = CsvFormat(rows, header, fieldnames, delimiter, quotechar, multiline)
        super().__init__(
            path,
            fmt,
            epoch_of=epoch_of,
            records_per_epoch=records_per_epoch,
            batch_size=batch_size,
            split_bytes=split_bytes,
        )
