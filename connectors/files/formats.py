"""How records are stored in files: one class per format, used by both sources and sinks.

A :class:`FileFormat` encodes one worker's records of one epoch as a file and decodes a
whole file (sinks, ``read_committed``). A :class:`LineFormat` also parses records from
a range of lines, which is what lets a source split a large file across workers.
"""

from __future__ import annotations

import csv
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import pyarrow as pa

from connectors.files.lines import Lines, Taken
from timely import ConfigError


class FileFormat(ABC):
    """Records <-> the bytes of one file."""

    extension: str = ""

    @abstractmethod
    def encode(self, records: list[Any]) -> bytes:
        """The file holding ``records`` (raises, naming the record, for one it cannot hold)."""

    @abstractmethod
    def decode(self, f: pa.NativeFile, name: str) -> list[Any]:
        """Every record of the file ``f`` (called ``name`` in errors)."""

    def row_bytes(self, data: bytes) -> list[bytes]:
        """Each record's bytes in a file :meth:`encode` made, in any order (a sink
        compares a replay of a committed epoch by them): here one record per line."""
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        return lines


SKIP: Any = object()
"""What :meth:`LineFormat.parse_lines` gives for a line that holds no record (a blank one)."""


class LineFormat(FileFormat):
    """A format with one record per line (or, for multi-line CSV, several lines per record)."""

    splittable = True
    """Whether a file may be cut into byte ranges at line starts."""

    def parse_lines(self, taken: Taken, preamble: Any) -> list[Any] | None:
        """One entry per line taken (``SKIP`` for none), or ``None`` to use :meth:`parse`.

        The fast path: a batch of lines parsed at once. ``None`` also when the lines do not
        parse one record per line; :meth:`parse` then reports the error precisely.
        """
        return None

    def preamble(self, f: pa.NativeFile, name: str, size: int) -> tuple[Any, int]:
        """What the file says before its records (a CSV header), and where the records start."""
        return None, 0

    @abstractmethod
    def parse(self, lines: Lines, preamble: Any) -> Iterator[tuple[int, Any]]:
        """``(start byte, record)`` for each record; after each, ``lines.pos`` is just past it."""

    def decode(self, f: pa.NativeFile, name: str) -> list[Any]:
        size = f.size()
        meta, start = self.preamble(f, name, size)
        return [r for _, r in self.parse(Lines(f, start, size, name), meta)]


def strip_line_end(text: str) -> str:
    """The line without its ``\\n`` or ``\\r\\n``."""
    if text.endswith("\n"):
        text = text[:-1]
        if text.endswith("\r"):
            text = text[:-1]
    return text


class TextFormat(LineFormat):
    """Each line is a ``str`` record, without its line end (``\\n`` or ``\\r\\n``)."""

    extension = "txt"

    def parse(self, lines: Lines, preamble: Any) -> Iterator[tuple[int, Any]]:
        for start, text in lines:
            yield start, strip_line_end(text)

    def parse_lines(self, taken: Taken, preamble: Any) -> list[Any] | None:
        return taken.texts()

    def encode(self, records: list[Any]) -> bytes:
        for r in records:
            if not isinstance(r, str):
                raise TypeError(
                    f"text files hold str records, got {r!r}; convert with .select(str) or "
                    "write JSON lines"
                )
            if "\n" in r or r.endswith("\r"):
                raise ValueError(
                    f"record {r!r} contains a line break, which would split it in two when "
                    "read back; write JSON lines instead"
                )
        return ("\n".join(records) + "\n").encode("utf-8")


class JsonLinesFormat(LineFormat):
    """Each non-blank line is one JSON value (tuples are written as lists)."""

    extension = "jsonl"

    def parse(self, lines: Lines, preamble: Any) -> Iterator[tuple[int, Any]]:
        for start, text in lines:
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"{lines.name}: the line at byte {start} is not JSON ({e.msg}, column "
                    f"{e.colno}): {text[:200]!r}"
                ) from None
            yield start, value

    def parse_lines(self, taken: Taken, preamble: Any) -> list[Any] | None:
        texts = taken.texts()
        try:
            return [json.loads(t) if t.strip() else SKIP for t in texts]
        except json.JSONDecodeError:
            return None  # parse() names the line

    def encode(self, records: list[Any]) -> bytes:
        out = []
        for r in records:
            try:
                out.append(json.dumps(r, ensure_ascii=False))
            except (TypeError, ValueError) as e:
                raise TypeError(f"record {r!r} cannot be written as JSON: {e}") from None
        out.append("")
        return "\n".join(out).encode("utf-8")


Rows = Literal["dict", "tuple"]


class CsvFormat(LineFormat):
    """CSV rows as dicts (keyed by the header or ``fieldnames``) or as tuples of strings.

    ``header``: whether each file's first row names the columns (sinks write one).
    ``fieldnames`` overrides or, without a header, supplies the names. Dict rows follow
    ``csv.DictReader``: missing values are ``None``, extra ones a list under key ``None``.
    Blank lines are skipped. Lines end with ``\n`` or ``\r\n`` (a bare ``\r`` is not a line
    end). With ``multiline=False`` (the default) a record is one line,
    so files can be split; ``multiline=True`` allows quoted line breaks inside values,
    and each file is then read whole by one worker.
    """

    extension = "csv"

    def __init__(
        self,
        rows: Rows = "dict",
        header: bool = True,
        fieldnames: Sequence[str] | None = None,
        delimiter: str = ",",
        quotechar: str = '"',
        multiline: bool = False,
    ) -> None:
        if rows not in ("dict", "tuple"):
            raise ConfigError(f"CSV rows must be 'dict' or 'tuple', got {rows!r}")
        if rows == "dict" and not header and fieldnames is None:
            raise ConfigError(
                "CSV dict rows need column names: set header=True (the files have a header "
                "row), give fieldnames=[...], or use rows='tuple'"
            )
        self.rows = rows
        self.header = header
        self.fieldnames = None if fieldnames is None else tuple(fieldnames)
        self.delimiter = delimiter
        self.quotechar = quotechar
        try:
            csv.reader([], delimiter=delimiter, quotechar=quotechar)
        except (TypeError, csv.Error) as e:  # fail here, on the driver, not on a worker
            raise ConfigError(f"CSV delimiter/quotechar: {e}") from None
        self.multiline = multiline
        self.splittable = not multiline

    def _reader(self, lines: Lines) -> Iterator[list[str]]:
        return csv.reader(lines.texts(), delimiter=self.delimiter, quotechar=self.quotechar)

    def preamble(self, f: pa.NativeFile, name: str, size: int) -> tuple[Any, int]:
        if not self.header:
            return None, 0
        lines = Lines(f, 0, size, name)
        try:
            row = next(self._reader(lines), None)
        except csv.Error as e:
            raise ValueError(f"{name}: cannot read the CSV header: {e}") from None
        return (None if row is None else tuple(row)), lines.pos

    def parse(self, lines: Lines, preamble: Any) -> Iterator[tuple[int, Any]]:
        names = self.fieldnames if self.fieldnames is not None else preamble
        as_dict = self.rows == "dict"
        reader = self._reader(lines)
        while True:
            start, count = lines.pos, lines.count
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise ValueError(
                    f"{lines.name}: bad CSV in the record at byte {start}: {e}"
                ) from None
            if not row:
                continue
            if lines.count - count > 1 and not self.multiline:
                raise ValueError(
                    f"{lines.name}: the record at byte {start} spans several lines (a quoted "
                    "line break); pass multiline=True (each file is then read whole)"
                )
            yield start, _as_dict(names, row) if as_dict else tuple(row)

    def parse_lines(self, taken: Taken, preamble: Any) -> list[Any] | None:
        texts = taken.texts()
        try:
            rows = list(csv.reader(texts, delimiter=self.delimiter, quotechar=self.quotechar))
        except csv.Error:
            return None  # parse() names the record
        if len(rows) != len(texts):
            return None  # a quoted line break: parse() explains
        if self.rows == "tuple":
            return [tuple(r) if r else SKIP for r in rows]
        names = self.fieldnames if self.fieldnames is not None else preamble
        return [_as_dict(names, r) if r else SKIP for r in rows]

    def row_bytes(self, data: bytes) -> list[bytes]:
        """Each row after the header, parsed (a quoted value may hold a line break, so a
        record is not a line) and spelled as its JSON list of fields."""
        import io

        text = io.StringIO(data.decode("utf-8"), newline="")
        rows = list(csv.reader(text, delimiter=self.delimiter, quotechar=self.quotechar))
        if self.header:
            rows = rows[1:]
        return [json.dumps(r, ensure_ascii=False).encode() for r in rows]

    def encode(self, records: list[Any]) -> bytes:
        import io

        buf = io.StringIO()
        # "\r\n" (RFC 4180), which also makes the writer quote values holding a bare "\r"
        writer = csv.writer(
            buf, lineterminator="\r\n", delimiter=self.delimiter, quotechar=self.quotechar
        )
        first = records[0]
        if isinstance(first, dict):
            names = list(self.fieldnames if self.fieldnames is not None else first)
            if self.header:
                writer.writerow(names)
            known = set(names)
            for r in records:
                if not isinstance(r, dict):
                    raise TypeError(f"CSV records must all be dicts or all tuples; got {r!r}")
                extra = [k for k in r if k not in known]
                if extra:
                    raise ValueError(
                        f"record {r!r} has fields {extra} that are not columns {names}; pass "
                        "fieldnames=[...] with every column"
                    )
                writer.writerow([r.get(k) for k in names])
            return buf.getvalue().encode("utf-8")
        if self.header:
            if self.fieldnames is None:
                raise ValueError(
                    f"tuple records such as {first!r} carry no column names for the header; "
                    "pass fieldnames=[...] or header=False"
                )
            writer.writerow(self.fieldnames)
        for r in records:
            if not isinstance(r, (tuple, list)):
                raise TypeError(f"CSV records must all be dicts or all tuples; got {r!r}")
            writer.writerow(r)
        return buf.getvalue().encode("utf-8")


def _as_dict(names: tuple[str, ...] | None, row: list[str]) -> dict[Any, Any]:
    """A row as ``csv.DictReader`` makes it (restkey and restval ``None``)."""
    if names is None:
        return {None: row}
    out: dict[Any, Any] = dict(zip(names, row))
    n = len(names)
    if len(row) > n:
        out[None] = row[n:]
    elif len(row) < n:
        for k in names[len(row) :]:
            out[k] = None
    return out
