"""``str.split()`` of ASCII text by numpy over the string array's bytes, in a few passes.

Arrow's ``utf8_split_whitespace`` decodes every code point and its ``ascii_*`` twin
differs from Python on the separators 0x1C-0x1F; both build a list per row, one word at
a time (~23 ms per million words here). On text whose bytes are all below 0x80, which
a numpy reduction tells (~0.5 ms per 4 MB), the words are found by whole-array passes
instead (~12 ms per million): a byte belongs to a word unless it is one of the ten
bytes Python counts as whitespace (``\\t\\n\\x0b\\x0c\\r``, ``\\x1c``-``\\x1f``, space);
a word starts at a word byte after a blank or at a row's start, and ends before a blank
or at a row's end; the word bytes, compacted, are the values' data, and each row's list
starts at the first word at or after the row's start. Empty parts never arise, so no
pass drops them. Anything else (non-ASCII text, large strings, a null row that spans
bytes) is left to Arrow: :func:`split_ascii` returns ``None``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

WORDS = pa.list_(pa.string())
"""What a split gives: Arrow's ``list<item: string>``, as its own kernels do."""


def text_bytes(values: pa.Array) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    """The bytes a string array's values span (a view) and its offsets into them (from 0),
    or ``None`` for any other array (large strings included)."""
    if not isinstance(values, pa.StringArray):
        return None
    n = len(values)
    _, offsets, data = values.buffers()
    if n == 0:
        return np.empty(0, np.uint8), np.zeros(1, np.int32)
    ends = np.frombuffer(offsets, np.int32, n + 1, values.offset * 4)
    first, last = int(ends[0]), int(ends[-1])
    if data is None or last == first:
        return np.empty(0, np.uint8), np.zeros(n + 1, np.int32)
    return np.frombuffer(data, np.uint8, last - first, first), ends - first if first else ends


_TAB, _SEPARATORS, _FIVE = np.uint8(9), np.uint8(28), np.uint8(5)
"""Uint8 scalars: numpy's fast loops (a ``dtype=`` argument takes a ~8x slower path)."""


def _word(raw: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Whether each byte is not whitespace to ``str.split()``, that is not 9-13 nor
    28-32 (wrapping in uint8, ``b - 9 >= 5`` fails only for 9..13, ``b - 28 >= 5`` only
    for 28..32: the separators 0x1C-0x1F and the space)."""
    word: np.ndarray[Any, Any] = (raw - _TAB) >= _FIVE
    word &= (raw - _SEPARATORS) >= _FIVE
    return word


def split_ascii(values: pa.Array) -> pa.Array | None:
    """``[s.split() for s in values]`` (a null row stays null) as a list array, or
    ``None`` when the text is not one this path takes (see the module docstring)."""
    got = text_bytes(values)
    if got is None:
        return None
    raw, offsets = got
    size = len(raw)
    if size and int(raw.max()) >= 0x80:
        return None
    mask = None
    if values.null_count:
        mask = values.is_null()
        if np.diff(offsets)[mask.to_numpy(zero_copy_only=False)].any():
            return None  # a null row over bytes: Arrow's kernel ignores them, we would not
    word = _word(raw)
    cut = np.empty(size + 1, np.bool_)  # cut[i]: byte i - 1 is blank, or a row starts at i
    cut[0] = True
    np.logical_not(word, out=cut[1:])
    cut[offsets] = True
    starts = np.flatnonzero(word & cut[:-1])
    np.logical_not(word, out=cut[:-1])  # cut[i]: byte i is blank, or a row starts at i
    cut[size] = True
    cut[offsets] = True
    ends = np.flatnonzero(word & cut[1:])  # the last byte of each word
    value_offsets = np.empty(len(starts) + 1, np.int32)
    value_offsets[0] = 0
    np.cumsum(ends - starts + 1, out=value_offsets[1:])
    data = np.compress(word, raw)
    words = pa.StringArray.from_buffers(
        len(starts), pa.py_buffer(value_offsets), pa.py_buffer(data)
    )
    rows = np.searchsorted(starts, offsets).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(rows), words, type=WORDS, mask=mask)
