"""The stable hash every route of a key goes through: the same in every process and every
run (Python's ``hash`` of ``str`` is salted per process), so that a key's records meet on
one worker, a replay routes them the same way, and every path that routes a key (one
record's :func:`stable_hash`, a vectorised pass over a column of ints, :func:`mix_array`)
puts it in the same bin (the brief's invariant 8).

Both the channels (:mod:`timely.routing.channels`) and the bins and routing tables
(:mod:`timely.routing.bins`) hash through here.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(x: int) -> int:
    """Fibonacci hashing of a 64-bit value, folded: spreads nearby integers apart."""
    x = ((x & _MASK) * _GOLDEN) & _MASK
    return x ^ (x >> 32)


def mix_array(keys: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``_mix`` over an integer array (uint64 arithmetic wraps exactly like ``& _MASK``)."""
    h = keys.astype(np.uint64) * np.uint64(_GOLDEN)
    mixed: np.ndarray[Any, Any] = h ^ (h >> np.uint64(32))
    return mixed


def _crc_table() -> np.ndarray[Any, Any]:
    """The CRC-32 (zlib's, reflected 0xEDB88320) of every byte value."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1)
    return table.astype(np.uint32)


_CRC = _crc_table()
LONGEST = 256
"""Strings up to this many bytes are hashed by :func:`bytes_hashes` in numpy; longer
ones through :func:`stable_hash` one by one (a pass per byte position would cost more
than the Python call)."""


def bytes_hashes(
    data: np.ndarray[Any, Any],
    starts: np.ndarray[Any, Any],
    lengths: np.ndarray[Any, Any],
    binary: bool = False,
) -> np.ndarray[Any, Any]:
    """``stable_hash`` of many strings at once (``binary``: of ``bytes``), each
    ``data[starts[i]:starts[i] + lengths[i]]`` (UTF-8 for ``str``; Arrow's strings are
    valid UTF-8, so they are the bytes ``stable_hash`` encodes).

    zlib's CRC-32, table-driven, one byte position at a time across every string still
    that long (longest first, so those are a prefix): a Python step per byte position,
    a C pass over the strings. Word-length keys of a batch cost ~1 µs each in Python
    through :func:`stable_hash`; here ~10 ns."""
    n = len(lengths)
    lengths = lengths.astype(np.int64, copy=False)
    out = np.empty(n, np.uint64)
    if n == 0:
        return out
    key = -lengths
    if int(lengths.max()) < 1 << 15:
        # numpy sorts 16-bit keys stably by radix: 2-3x faster than int64's timsort (30,000
        # words: 253 against 583 us). Any order by length down would do; this one is cheap.
        key = key.astype(np.int16)
    order = np.argsort(key, kind="stable")
    longest = lengths[order]
    first = starts.astype(np.int64, copy=False)[order]
    crc = np.full(n, 0xFFFFFFFF, np.uint32)
    # still[j]: how many strings are longer than j bytes, a prefix of the sorted order.
    still = n - np.searchsorted(longest[::-1], np.arange(int(longest[0])), side="right")
    for j, k in enumerate(still.tolist()):
        head = crc[:k]
        byte = data[first[:k] + j]
        crc[:k] = _CRC[(head ^ byte) & np.uint32(0xFF)] ^ (head >> np.uint32(8))
    crc ^= np.uint32(0xFFFFFFFF)
    word = crc.astype(np.uint64)
    if binary:
        word ^= np.uint64(0xB7E5)
    word |= longest.astype(np.uint64) << np.uint64(32)
    with np.errstate(over="ignore"):
        h = word * np.uint64(_GOLDEN)
    h ^= h >> np.uint64(32)
    out[order] = h
    return out


def int_keys(keys: Sequence[Any]) -> np.ndarray[Any, Any] | None:
    """``keys`` as one int64/uint64 array when they are (16 or more) machine-size ints,
    else None: such a batch is hashed in one numpy pass (:func:`mix_array`)."""
    if len(keys) < 16 or type(keys[0]) is not int:
        return None
    try:
        arr = np.asarray(keys)
    except (OverflowError, ValueError):  # huge ints; ints mixed with tuples
        return None
    if arr.dtype.kind in "iu" and arr.dtype.itemsize <= 8:
        return arr
    return None


def stable_hash(value: Any) -> int:
    """A 64-bit hash that is the same in every process and run.

    Supports None, bool, int, float, str, bytes, and tuples/frozensets of those (and
    numpy scalars through ``.item()``). Equal keys hash equal (``1``, ``1.0`` and
    ``True`` meet on one worker). Anything else raises ``TypeError``.
    """
    if value is None:
        return 0x5BD1E995
    if isinstance(value, int):  # bool too: True == 1, and equal keys must meet
        if -(2**63) <= value < 2**63:
            return _mix(value)
        return _mix(value & _MASK) ^ _mix(value >> 64)
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        return _mix(zlib.crc32(data) | (len(data) << 32))
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return _mix(zlib.crc32(data) ^ 0xB7E5 | (len(data) << 32))
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 2**63:
            return stable_hash(int(value))  # 1.0 and 1 meet, as they are equal
        return _mix(struct.unpack("<q", struct.pack("<d", value))[0] & _MASK)
    if isinstance(value, tuple):
        h = 0x345678 + len(value)
        for item in value:
            h = _mix(h ^ stable_hash(item))
        return h
    if isinstance(value, frozenset):
        acc = 0
        for item in value:
            acc ^= stable_hash(item)
        return _mix(acc ^ 0xF5E7)
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        return stable_hash(item())
    raise TypeError(
        f"exchange key {value!r} of type {type(value).__name__} has no stable hash; "
        "return None, bool, int, float, str, bytes or a tuple of those from the key function"
    )
