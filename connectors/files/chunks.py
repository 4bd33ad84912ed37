"""Byte ranges of files read a chunk of whole lines at a time: the base of the table sources.

Partitions: each file is cut into byte ranges of ``split_bytes`` (``None``: one range per
file) from where its data starts (after a CSV header); a range owns the lines that
*start* in it (:mod:`connectors.files.lines`), so every line belongs to exactly one
range. A read takes up to ``chunk_bytes`` bytes, cut after the last line end (finishing
a line longer than a chunk, and the range's last line even past its end), and a
subclass turns those bytes into one Arrow batch with one kernel call.

Offsets: ``(byte position, batches read)``. Reading a partition from an offset gives
exactly the lines after it, in the same batches, as long as the files are unchanged:
a replay after a failure is exact, so with checkpoints every row arrives once.

Epochs: ``batches_per_epoch`` (the ``i``-th batch of a partition is at epoch
``i // batches_per_epoch``), else every batch at epoch 0.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np
import pyarrow as pa

from connectors._storage import FileEntry, list_files
from connectors.files.lines import align
from connectors.files.source import Paths, _positive
from timely import Source


class ChunkedSource(Source):
    """Files as batches of lines' worth of bytes; see the module docstring."""

    schema: pa.Schema
    """The schema of every batch, known when the source is made."""

    def __init__(
        self,
        path: Paths,
        *,
        chunk_bytes: int,
        batches_per_epoch: int | None,
        split_bytes: int | None,
    ) -> None:
        kind = type(self).__name__
        self.chunk_bytes = _positive(f"{kind}: chunk_bytes", chunk_bytes)
        self.batches_per_epoch = _positive(f"{kind}: batches_per_epoch", batches_per_epoch, True)
        self.split_bytes = _positive(f"{kind}: split_bytes", split_bytes, True)
        self.files: list[FileEntry] = list_files(path)
        self.ranges: list[tuple[int, int, int, int]] = []  # (file, data start, start, end)
        self._open: dict[int, Any] = {}

    def _cut(self, data_starts: list[int]) -> None:
        """Make the partitions: byte ranges from each file's data start (after a header)."""
        split = self.split_bytes
        for i, (entry, first) in enumerate(zip(self.files, data_starts)):
            step = split if split is not None else max(entry.size - first, 1)
            for s in range(first, entry.size, step):
                self.ranges.append((i, first, s, min(s + step, entry.size)))

    def partitions(self) -> int:
        return len(self.ranges)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_open"] = {}  # open files stay in their process
        return state

    def _align(self, f: Any, start: int, data_start: int) -> int:
        """Where the range's first line starts (a test breaks this to see the check fail)."""
        return align(f, start, data_start)

    @abstractmethod
    def _batch(self, chunk: bytes, file: int, pos: int) -> pa.RecordBatch:
        """The rows of ``chunk``, whole lines read at byte ``pos`` of ``self.files[file]``."""

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        file, data_start, start, end = self.ranges[partition]
        entry = self.files[file]
        f = self._open.get(partition)
        if f is None:
            f = self._open[partition] = entry.open()
        pos, batches = (self._align(f, start, data_start), 0) if offset is None else offset
        if pos >= end:
            self._open.pop(partition).close()
            return None
        f.seek(pos)
        want = min(self.chunk_bytes, end - pos)
        data = f.read(want)
        if pos + len(data) >= end or len(data) < want:
            # The range's end (or the file's): its last line may run past it, and is
            # still this range's (it starts inside).
            if data and not data.endswith(b"\n"):
                data += rest_of_line(f)
            cut = len(data)
        else:
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # a line longer than a chunk
                data += rest_of_line(f)
                cut = len(data)
        batch = self._batch(data[:cut], file, pos)
        per = self.batches_per_epoch
        epoch = 0 if per is None else batches // per
        return epoch, [batch] if batch.num_rows else [], (pos + cut, batches + 1)


def rest_of_line(f: Any) -> bytes:
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


def line_starts(chunk: bytes) -> np.ndarray[Any, Any]:
    """The byte offset in ``chunk`` of each of its lines (one numpy pass, no Python per line)."""
    ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10) + 1
    starts = np.concatenate([[0], ends])
    return starts[starts < len(chunk)] if len(chunk) else starts[:0]


def records_in(chunk: bytes, starts: np.ndarray[Any, Any], blank: bytes) -> int:
    """How many lines of ``chunk`` hold something besides the bytes ``blank`` (numpy).

    A parser that reads one record per such line returns this many rows; fewer means a
    record ran over several lines, more that a line held several.
    """
    if not len(starts):
        return 0
    raw = np.frombuffer(chunk, np.uint8)
    solid = np.cumsum(~np.isin(raw, np.frombuffer(blank, np.uint8)))
    ends = np.append(starts[1:], len(chunk)) - 1
    before = np.where(starts > 0, solid[np.maximum(starts - 1, 0)], 0)
    return int(np.count_nonzero(solid[ends] - before))


def first_bad_line(chunk: bytes, starts: np.ndarray[Any, Any], parses: Any) -> int:
    """The index of the first line whose prefix of ``chunk`` does not parse.

    ``parses(prefix)`` is monotone (a prefix with a bad line fails), so a bisection finds
    the line in a few parses: the error path only.
    """
    lo, hi = 0, len(starts)  # lines[:lo] parse; lines[:hi] do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if parses(chunk[: starts[mid]]):
            lo = mid
        else:
            hi = mid
    return lo


def line_number(entry: FileEntry, at: int) -> int:
    """The 1-based line of ``entry`` that starts at byte ``at`` (counted on the error path)."""
    n = 1
    with entry.open() as f:
        left = at
        while left > 0:
            block: bytes = f.read(min(left, 1 << 20))
            if not block:
                break
            n += block.count(b"\n")
            left -= len(block)
    return n
