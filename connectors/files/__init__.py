"""File sources and sinks: text lines, CSV, JSON lines (Parquet: ``connectors.parquet``).

Sources (:mod:`connectors.files.source`) split files across workers by byte ranges and
resume from byte offsets; sinks (:mod:`connectors.files.sink`) write one file per worker
per epoch and commit with a marker, exactly once with checkpoints. Paths may be local
paths or URIs that ``pyarrow.fs`` knows (``file://``, ``s3://``, ...).
"""

from connectors.committed import committed_epoch
from connectors.files.formats import CsvFormat, FileFormat, JsonLinesFormat, LineFormat, TextFormat
from connectors.files.sink import (
    CsvSink,
    EpochFileSink,
    JsonLinesSink,
    TextSink,
    read_committed,
    register_format,
)
from connectors.files.source import CsvSource, FileSource, JsonLinesSource, TextSource

__all__ = [
    "CsvFormat",
    "CsvSink",
    "CsvSource",
    "EpochFileSink",
    "FileFormat",
    "FileSource",
    "JsonLinesFormat",
    "JsonLinesSink",
    "JsonLinesSource",
    "LineFormat",
    "TextFormat",
    "TextSink",
    "TextSource",
    "committed_epoch",
    "read_committed",
    "register_format",
]
