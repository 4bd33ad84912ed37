"""The framing on a connection between workers: ``<u32 length><u8 kind>`` then the payload.

Two kinds travel: ``DATA`` (one encoded :class:`~timely.comm.messages.WorkerMessage`) and
``CREDIT`` (a ``<u64>`` count of the sender's frames the receiver has applied so far,
cumulative, so a lost or merged credit frame cannot skew the count). The layout and
the credit rule are those ``benchmarks/bench_transport.py`` measured (it imports them
from here).
"""

from __future__ import annotations

import struct

HEADER = struct.Struct("<IB")
"""A frame's header: payload length, kind."""
COUNT = struct.Struct("<Q")
"""A credit frame's payload: frames applied so far."""

DATA = 2
CREDIT = 5


def credit_every(window: int) -> int:
    """How many applied frames a receiver lets pass before it returns credit: half the
    window, so a sender with a full window never waits for a whole round trip."""
    return max(1, window // 2)


def data_frame(payload: bytes) -> bytes:
    """``payload`` framed as DATA."""
    return HEADER.pack(len(payload), DATA) + payload


def credit_frame(applied: int) -> bytes:
    """A CREDIT frame: ``applied`` frames of the peer's have been applied here so far."""
    return HEADER.pack(COUNT.size, CREDIT) + COUNT.pack(applied)
