"""File sinks: text lines, CSV and JSON lines, one file per worker per epoch.

The layout, the ``_COMMITTED`` marker and the exactly-once guarantee are those of
:mod:`connectors.committed`; this module only says how records become a file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from connectors._storage import normalize, resolve
from connectors.committed import CommittedEpochSink, committed_files
from connectors.files.formats import CsvFormat, FileFormat, JsonLinesFormat, Rows, TextFormat


class EpochFileSink(CommittedEpochSink):
    """Each worker's records of each epoch as one file in ``format``.

    Partitioning: each worker writes what it holds; delivery: exactly once for readers
    of committed epochs. Layout and commit: :mod:`connectors.committed`.
    """

    def __init__(self, path: str | os.PathLike[str], format: FileFormat) -> None:
        super().__init__(path)
        self.format = format
        self.extension = format.extension

    def encode(self, records: list[Any]) -> bytes:
        return self.format.encode(records)

    def row_bytes(self, data: bytes) -> list[bytes]:
        return self.format.row_bytes(data)

    def read_committed(self) -> list[tuple[int, Any]]:
        """``(epoch, record)`` for every committed epoch (see :func:`read_committed`)."""
        return read_committed(self.location, self.format)


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
    Epochs above the marker, and directories with no marker, give nothing; a missing
    directory raises ``FileNotFoundError``.
    """
    location = normalize(path)
    fs, _ = resolve(location)
    out: list[tuple[int, Any]] = []
    for e, file in committed_files(location):
        fmt = format or _format_for(file.rsplit(".", 1)[-1], file)
        with fs.open_input_file(file) as f:
            out.extend((e, r) for r in fmt.decode(f, file))
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
