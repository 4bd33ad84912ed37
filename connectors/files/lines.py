"""Lines of a byte range of a file, with the byte position of each: what makes files splittable.

A range ``[start, end)`` owns every line that *starts* inside it (a line starts at the
data start or right after a ``\\n``). So ranges can be cut anywhere, without reading
the file first: a reader aligns ``start`` to the next line start, and finishes the
line that starts before ``end`` even when it runs past it. Every line belongs to
exactly one range. Splitting on ``\\n`` bytes is safe in UTF-8, where no multi-byte
character contains that byte.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

BLOCK = 1 << 16


def align(f: pa.NativeFile, start: int, data_start: int) -> int:
    """The first line start at or after ``start`` (``start`` itself at the data start)."""
    if start <= data_start:
        return data_start
    f.seek(start - 1)
    pos = start - 1
    while True:
        block: bytes = f.read(BLOCK)
        if not block:
            return pos  # the end of the file: no line starts here
        i = block.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(block)


class Lines:
    """The lines of ``f`` that start in ``[pos, end)``, decoded, with their line ends.

    Iterating yields ``(start, text)``; after each, ``pos`` is the byte position just past
    that line and ``count`` how many lines were handed out. Consumers use ``pos`` as the
    resume offset.
    """

    def __init__(self, f: pa.NativeFile, pos: int, end: int, name: str) -> None:
        self.f = f
        self.pos = pos
        self.end = end
        self.name = name
        self.count = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        f = self.f
        f.seek(self.pos)
        buf = b""
        i = 0
        start = self.pos
        while start < self.end:
            j = buf.find(b"\n", i)
            if j < 0:
                block = f.read(BLOCK)
                if block:
                    buf = buf[i:] + block
                    i = 0
                    continue
                if i == len(buf):
                    return  # the end of the file
                j = len(buf) - 1  # a last line without a line end
            raw = buf[i : j + 1]
            i = j + 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{self.name}: the line at byte {start} is not valid UTF-8 ({e.reason} "
                    f"at byte {start + e.start})"
                ) from None
            self.pos = start + len(raw)
            self.count += 1
            yield start, text
            start = self.pos

    def texts(self) -> Iterator[str]:
        """Just the lines' text (for ``csv.reader``), still advancing ``pos``."""
        for _, text in self:
            yield text


class Taken:
    """Whole lines taken from a file at once: their text, and where the next line starts."""

    def __init__(self, raws: list[bytes], pos: int, next_pos: int, name: str) -> None:
        self.raws = raws
        self.pos = pos
        self.next_pos = next_pos
        self.name = name

    def start_of(self, k: int) -> int:
        """The byte position where line ``k`` starts."""
        return self.pos + sum(map(len, self.raws[:k])) + k

    def texts(self) -> list[str]:
        """The lines decoded, without ``\\n`` or ``\\r\\n``."""
        joined = b"\n".join(self.raws)  # the file's bytes, minus the last line end
        try:
            texts = joined.decode("utf-8").split("\n")
        except UnicodeDecodeError as e:
            start = self.pos + joined.rfind(b"\n", 0, e.start) + 1
            raise ValueError(
                f"{self.name}: the line at byte {start} is not valid UTF-8 ({e.reason} at "
                f"byte {self.pos + e.start})"
            ) from None
        if b"\r" in joined:
            whole = len(texts) if self.ends_with_newline else len(texts) - 1
            texts[:whole] = [t[:-1] if t.endswith("\r") else t for t in texts[:whole]]
        return texts

    @property
    def ends_with_newline(self) -> bool:
        return self.next_pos - self.pos == sum(map(len, self.raws)) + len(self.raws)


def take(f: pa.NativeFile, pos: int, end: int, limit: int, name: str) -> Taken:
    """Up to ``limit`` lines that start in ``[pos, end)``, read and split in bulk.

    The same lines, in the same order, as iterating :class:`Lines` would give; this is
    the fast path for formats with one record per line.
    """
    size = f.size()
    f.seek(pos)
    buf = b""
    block = BLOCK
    end_rel = end - pos
    while True:
        chunk = f.read(block)
        buf += chunk
        at_eof = not chunk or pos + len(buf) >= size
        parts = buf.split(b"\n", limit)
        complete = parts[:-1]
        rest = parts[-1]
        # lines starting before `end`: the first, and one after each "\n" before end - 1
        starting = 1 + buf.count(b"\n", 0, max(end_rel - 1, 0))
        k = min(len(complete), starting)
        if k < len(complete) or k == limit or starting == k:
            raws = complete[:k]
            return Taken(raws, pos, pos + sum(map(len, raws)) + k, name)
        if at_eof:  # the last line has no line end
            raws = complete + ([rest] if rest else [])
            return Taken(raws, pos, pos + sum(map(len, raws)) + len(complete), name)
        block *= 2
