"""Writing frames to a stream without copying them, where the socket takes them.

Why: asyncio's transport copies whatever the socket does not take at once into one
``bytearray`` that it grows at its end and trims at its front; a step's frame of
megabytes, written whole, went through that buffer almost entirely (and through its
reallocations), and before that through a join of header and payload. Here a
connection's outgoing bytes wait as views over the buffers they came in (a message's
envelope, each Arrow batch's IPC stream: :func:`timely.comm.serialization.encode_message_parts`)
and go to the transport in chunks of at most :data:`CHUNK` bytes, each only once the
transport has sent everything before it. A chunk the socket takes whole is never
copied; at most one chunk's rest is. The transport's high-water mark is 0, so it
reports itself drained exactly when its buffer is empty.

Order is kept: every write on a connection (data, credits) goes through its
:class:`FrameSender`, FIFO. A write never waits: what the socket cannot take yet is
sent by a task of the sender's own as the socket drains, between the host's steps, as
asyncio's own buffer would be. A connection that ends drops what waits (its reader
reports the loss).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

CHUNK = 1 << 18
"""The most bytes handed to the transport at once: about what a Unix socket's buffer
takes, so a chunk usually goes whole and uncopied."""


class FrameSender:
    """One connection's outgoing bytes, FIFO, written as the socket takes them."""

    __slots__ = ("_drained", "_pending", "_task", "_writer")

    def __init__(
        self, writer: asyncio.StreamWriter, drained: Callable[[], Awaitable[None]]
    ) -> None:
        """``drained``: waits until the transport has sent all it buffered (the
        connection's protocol knows: :meth:`timely.comm.receiving.FrameReader.drained`)."""
        self._writer = writer
        self._drained = drained
        self._pending: deque[memoryview] = deque()
        self._task: asyncio.Task[None] | None = None
        writer.transport.set_write_buffer_limits(high=0)

    def write(self, parts: Iterable[Any]) -> None:
        """Queue ``parts`` (bytes-like: ``bytes``, ``memoryview``, ``pyarrow.Buffer``),
        and send what the socket takes now. Kept alive until sent, never copied here."""
        if self._writer.is_closing():
            return
        pending = self._pending
        for part in parts:
            view = memoryview(part).cast("B")
            if view.nbytes:
                pending.append(view)
        if self._task is None:
            self._push()
            if pending:
                task = self._task = asyncio.ensure_future(self._flush())
                task._log_destroy_pending = False  # type: ignore[attr-defined]

    def pending(self) -> int:
        """Bytes queued here and not yet handed to the transport."""
        return sum(v.nbytes for v in self._pending)

    def _push(self) -> None:
        """Hand chunks to the transport while it has sent everything before them."""
        transport = self._writer.transport
        pending = self._pending
        while pending and not transport.get_write_buffer_size():
            view = pending[0]
            if view.nbytes <= CHUNK:
                pending.popleft()
                transport.write(view)
            else:
                pending[0] = view[CHUNK:]
                transport.write(view[:CHUNK])

    async def _flush(self) -> None:
        try:
            while self._pending:
                await self._drained()
                if self._writer.is_closing():
                    self._pending.clear()
                    return
                self._push()
        except Exception:  # the connection ended: its reader reports it
            self._pending.clear()
        finally:
            self._task = None

    async def close(self) -> None:
        """Stop sending and drop what waits."""
        self._pending.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
