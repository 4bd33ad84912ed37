"""Reading frames off a connection straight into their own buffers.

Why: asyncio's ``StreamReader`` copies every received chunk into one growing
``bytearray`` and ``readexactly`` copies a frame out of it again (and trims the
front): a frame of megabytes was copied three times between the socket and the
decoder. A :class:`FrameReader` is the connection's protocol once the handshake is
done (``asyncio.BufferedProtocol``: the transport reads into a buffer the protocol
hands it): small frames are read into one staging buffer and cut from it; a frame too
large for that gets a ``bytearray`` of its own and the socket reads the rest of it
straight there, so its bytes are copied once, by the kernel. That buffer comes from
Arrow's allocator (64-byte aligned, not zeroed, its memory reused from batch to batch:
a fresh ``bytearray`` was zeroed and faulted in page by page every time), and the Arrow
batches decoded from the frame are views over it.

It also tells the connection's :class:`~timely.comm.sending.FrameSender` when the
transport has sent what it buffered (``drained``), which the stream writer's
``drain`` can no longer tell once its protocol is replaced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from timely.comm.frames import HEADER

STAGE = 1 << 18
"""The staging buffer: frames up to half of it are read there and cut out."""

Payload = bytes | memoryview
"""A frame's payload: ``bytes`` cut from the staging buffer, or a view of the buffer a
large frame was read into."""


class FrameReader(asyncio.BufferedProtocol):
    """Frames ``<u32 length><u8 kind>`` + payload, each handed to ``on_frame(kind,
    payload)`` as it completes (which returns False to stop reading: the connection
    is being dropped); the end of the connection to ``on_lost(reason)``."""

    def __init__(
        self, on_frame: Callable[[int, Payload], bool], on_lost: Callable[[str], None]
    ) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._stage = bytearray(STAGE)
        self._view = memoryview(self._stage)
        self._start = 0
        self._end = 0
        """Received bytes not yet cut into frames: ``_stage[_start:_end]``."""
        self._big: memoryview | None = None
        """The payload being read straight into its own buffer, if any."""
        self._kind = 0
        self._filled = 0
        self._stopped = False
        self._writable = asyncio.Event()
        self._writable.set()

    # -- reading ------------------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        big = self._big
        if big is not None:
            return big[self._filled :]
        if self._end == len(self._stage):  # full: move what is left of a frame to the front
            rest = self._end - self._start
            self._view[:rest] = self._view[self._start : self._end]
            self._start, self._end = 0, rest
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._stopped:
            return
        big = self._big
        if big is not None:
            self._filled += nbytes
            if self._filled == big.nbytes:
                self._big = None
                if not self._on_frame(self._kind, big):
                    self._stopped = True
            return
        self._end += nbytes
        self._cut()

    def feed(self, data: bytes) -> None:
        """Bytes the stream reader had read before this protocol took over."""
        view = memoryview(data)
        while view.nbytes and not self._stopped:
            buf = self.get_buffer(view.nbytes)
            n = min(buf.nbytes, view.nbytes)
            buf[:n] = view[:n]
            self.buffer_updated(n)
            view = view[n:]

    def _cut(self) -> None:
        """Hand over every whole frame in the staging buffer; start reading a large one
        into its own buffer."""
        stage, view = self._stage, self._view
        size = HEADER.size
        while not self._stopped:
            start, avail = self._start, self._end - self._start
            if avail < size:
                break
            n, kind = HEADER.unpack_from(stage, start)
            if avail - size >= n:
                self._start = start + size + n
                payload = bytes(view[start + size : start + size + n]) if n else b""
                if not self._on_frame(kind, payload):
                    self._stopped = True
            elif n > len(stage) // 2:
                have = avail - size
                big = _allocate(n)
                big[:have] = view[start + size : self._end]
                self._big, self._kind, self._filled = big, kind, have
                self._start = self._end = 0
                return
            else:
                break  # the rest of a small frame is still to come
        if self._start == self._end:
            self._start = self._end = 0

    # -- the connection -------------------------------------------------------------------------
    def eof_received(self) -> bool:
        self._lost("was closed by the other end (EOF)")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._writable.set()  # a sender waiting for the buffer to drain stops waiting
        if exc is None:
            self._lost("was closed by the other end (EOF)")
        else:
            self._lost(f"failed ({type(exc).__name__}: {exc})")

    def _lost(self, reason: str) -> None:
        if not self._stopped:
            self._stopped = True
            self._on_lost(reason)

    # -- flow control of the writing side -------------------------------------------------------
    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def drained(self) -> None:
        """Wait until the transport has sent what it buffered (or the connection ended)."""
        await self._writable.wait()


def _allocate(n: int) -> memoryview:
    """``n`` writable bytes from Arrow's memory pool, as unsigned bytes."""
    import pyarrow as pa

    return memoryview(pa.allocate_buffer(n)).cast("B")
