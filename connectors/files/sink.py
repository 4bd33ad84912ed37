"""File sinks: one file per worker per epoch, made visible by a commit marker.

Layout: ``<dir>/epoch=<e>/part-<worker>-of-<workers>.<ext>``, and ``<dir>/_COMMITTED``
holding ``{"epoch": c}``: every epoch ``<= c`` is complete and final.

Partitioning: each worker writes the records it holds when an epoch completes; the
sink moves no data between workers (exchange the stream first to choose who writes
what).

Delivery: exactly once for readers that honour the marker (:func:`read_committed`).
A part is written to a hidden temporary file and renamed into place, so a part is
whole or absent, and writing it again (a replay) replaces it. ``commit`` moves the
marker forward, again by an atomic rename. ``abort_after(e)`` deletes the epoch
folders above ``e`` that are not committed, so a replay from a checkpoint at ``e``
cannot leave output behind twice. Parts are not fsync'ed: the guarantee covers worker
and driver failures, not a machine losing its page cache. A directory belongs to one
job: a second, fresh job must not write into it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow.fs as pafs

from connectors.files.formats import CsvFormat, FileFormat, JsonLinesFormat, Rows, TextFormat
from connectors.files.fs import normalize, resolve, write_atomically
from timely import ConfigError, Sink

MARKER = "_COMMITTED"
_EPOCH_DIR = re.compile(r"epoch=(\d+)\Z")
_PART = re.compile(r"part-(\d+)-of-(\d+)\.")


def part_name(worker: int, workers: int, extension: str) -> str:
    """The file one worker writes for one epoch."""
    return f"part-{worker}-of-{workers}.{extension}"


class EpochFileSink(Sink):
    """Writes each epoch's records in ``format``; see the module docstring for the layout."""

    def __init__(self, path: str | os.PathLike[str], format: FileFormat) -> None:
        self.location = normalize(path)
        fs, root = resolve(self.location)
        if fs.get_file_info(root).type == pafs.FileType.File:
            raise ConfigError(f"{self.location!r} is a file; a sink writes into a directory")
        self.format = format

    def _root(self) -> tuple[pafs.FileSystem, str]:
        fs, root = resolve(self.location)
        return fs, root.rstrip("/")

    def write(self, worker: int, workers: int, epoch: int, records: list[Any]) -> None:
        data = self.format.encode(records)
        fs, root = self._root()
        folder = f"{root}/epoch={epoch}"
        fs.create_dir(folder, recursive=True)
        write_atomically(fs, f"{folder}/{part_name(worker, workers, self.format.extension)}", data)

    def commit(self, epoch: int | None) -> None:
        fs, root = self._root()
        current = committed_epoch(self.location)
        if epoch is None:
            epoch = max(epoch_dirs(fs, root), default=-1)
        if current is not None and current >= epoch:
            return
        fs.create_dir(root, recursive=True)
        write_atomically(fs, f"{root}/{MARKER}", json.dumps({"epoch": epoch}).encode())

    def abort_after(self, epoch: int) -> None:
        fs, root = self._root()
        committed = committed_epoch(self.location)
        keep = max(epoch, -1 if committed is None else committed)
        for e, folder in epoch_dirs(fs, root).items():
            if e > keep:
                fs.delete_dir(folder)
            else:  # no worker runs now: temporary files left there are from failed writes
                for info in fs.get_file_info(pafs.FileSelector(folder)):
                    if info.base_name.startswith(".") and info.base_name.endswith(".tmp"):
                        fs.delete_file(info.path)

    def read_committed(self) -> list[tuple[int, Any]]:
        """``(epoch, record)`` for every committed epoch (see :func:`read_committed`)."""
        return read_committed(self.location, self.format)


def epoch_dirs(fs: pafs.FileSystem, root: str) -> dict[int, str]:
    """The ``epoch=<e>`` folders under ``root``: epoch -> path."""
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        return {}
    out = {}
    for info in fs.get_file_info(pafs.FileSelector(root)):
        m = _EPOCH_DIR.match(info.base_name)
        if m and info.type == pafs.FileType.Directory:
            out[int(m.group(1))] = info.path
    return out


def committed_epoch(path: str | os.PathLike[str]) -> int | None:
    """The highest committed epoch of a sink's directory (``None``: nothing committed yet)."""
    fs, root = resolve(normalize(path))
    marker = f"{root.rstrip('/')}/{MARKER}"
    try:
        with fs.open_input_stream(marker) as f:
            data = f.read()
    except FileNotFoundError:
        return None
    epoch = json.loads(data)["epoch"]
    if not isinstance(epoch, int):
        raise ValueError(f"{marker}: expected an integer epoch, found {data!r}")
    return epoch


_FORMATS: dict[str, Callable[[], FileFormat]] = {
    TextFormat.extension: TextFormat,
    CsvFormat.extension: lambda: CsvFormat(multiline=True),  # parts are read whole
    JsonLinesFormat.extension: JsonLinesFormat,
}


def register_format(extension: str, factory: Callable[[], FileFormat]) -> None:
    """Let :func:`read_committed` recognise parts ending in ``.<extension>`` (e.g. Parquet)."""
    _FORMATS[extension] = factory


def read_committed(
    path: str | os.PathLike[str], format: FileFormat | None = None
) -> list[tuple[int, Any]]:
    """``(epoch, record)`` for every committed epoch of a sink's directory, in epoch order.

    Within an epoch, records come part by part in worker order. Without ``format`` each
    part is read by its extension with the default options (CSV: dict rows with a header).
    Epochs above the marker, and directories with no marker, give nothing.
    """
    location = normalize(path)
    committed = committed_epoch(location)
    if committed is None:
        return []
    fs, root = resolve(location)
    out: list[tuple[int, Any]] = []
    for e, folder in sorted(epoch_dirs(fs, root.rstrip("/")).items()):
        if e > committed:
            break
        parts = []
        for info in fs.get_file_info(pafs.FileSelector(folder)):
            m = _PART.match(info.base_name)
            if m and info.type == pafs.FileType.File:
                parts.append((int(m.group(1)), info))
        for _, info in sorted(parts, key=lambda p: p[0]):
            fmt = format or _format_for(info.extension, info.path)
            with fs.open_input_file(info.path) as f:
                out.extend((e, r) for r in fmt.decode(f, info.path))
    return out


def _format_for(extension: str, path: str) -> FileFormat:
    factory = _FORMATS.get(extension)
    if factory is None:
        raise ValueError(
            f"{path}: no format for '.{extension}' files; pass format= to read_committed"
        )
    return factory()


class TextSink(EpochFileSink):
    """``str`` records, one per line (``.txt`` parts). See :class:`EpochFileSink`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, TextFormat())


class JsonLinesSink(EpochFileSink):
    """One JSON value per line (``.jsonl`` parts). See :class:`EpochFileSink`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, JsonLinesFormat())


class CsvSink(EpochFileSink):
    """Dict or tuple records as CSV rows (``.csv`` parts), each part with its header.

    Dict records: the columns are ``fieldnames`` or the first record's keys. Tuple
    records need ``fieldnames`` for the header, or ``header=False``. ``rows`` says how
    :meth:`read_committed` returns them. Values are written with ``str`` (``None`` as
    an empty field) and read back as strings.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fieldnames: Sequence[str] | None = None,
        header: bool = True,
        rows: Rows = "dict",
        delimiter: str = ",",
        quotechar: str = '"',
    ) -> None:
        # multiline: values may hold line breaks (quoted); parts are always read whole
        super().__init__(path, CsvFormat(rows, header, fieldnames, delimiter, quotechar, True))
