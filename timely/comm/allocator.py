"""One worker's authenticated connections to its peers: per-peer FIFO channels with
bounded buffers, one merged receive, and :class:`PeerLost`.

After timely-dataflow's ``communication::allocator``. Every pair of workers shares one
duplex stream connection (asyncio streams: ``benchmarks/TRANSPORT.md`` says why), over
a Unix socket when both are on one node and TCP otherwise, set up once per run: each
worker :meth:`Allocator.listen`\\ s, the host gathers the addresses, and
:meth:`Allocator.connect` dials every lower index and accepts every higher one, each
connection proving the run's secret first (:mod:`timely.comm.handshake`).

Backpressure is by credits, end to end as far as the host lets it be: a sender has at
most ``window`` frames per peer that the peer has not *applied* (:meth:`Allocator.applied`,
called by the host once the frame's message is in the worker), so a slow consumer
holds its producers back and nothing buffers more than ``window`` frames per peer.
Credits are cumulative counts, returned every ``window // 2`` applied frames and
whenever the host is about to wait (:meth:`Allocator.flush_credits`).

Failures: a reader task per connection reads all the time, so a peer's EOF, reset or
garbage is noticed within a scheduling delay; the host learns of it from
:meth:`Allocator.check` (and its wake-up callback) as :class:`PeerLost`.

The driver (``driver=True``) is one more endpoint, index :data:`DRIVER`: it dials every
worker with the same handshake (:mod:`timely.comm.driver`), sends commands as DATA
frames under the same credits (:meth:`Allocator.driver_commands`, credited by
:meth:`Allocator.applied` with ``peers``) and gets reports back as DATA frames
(:meth:`Allocator.send_driver`, not credited: the driver's reader thread always takes
them, and they wait on the driver's side until it calls in).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

from timely.comm.frames import COUNT, CREDIT, DATA, HEADER, credit_every, credit_frame, data_frame
from timely.comm.handshake import HandshakeFailed, hello_dialer, hello_listener
from timely.comm.receiving import FrameReader, Payload
from timely.comm.sending import FrameSender
from timely.comm.sockdir import socket_dir
from timely.errors import TimelyError

DRIVER = 0xFFFFFFFF
"""The driver's index in handshakes and :meth:`Allocator.applied` (no worker's: workers
join a running dataflow at the next index)."""
CONNECT_TIMEOUT = 30.0
"""How long :meth:`Allocator.connect` waits for every peer."""
_ALL_INTERFACES = ("", "0.0.0.0", "::")
MAX_FRAME = 2**32 - 1
"""The largest payload a frame's ``<u32>`` length can say."""
SEND_BUFFER = 1 << 22
"""The kernel send buffer asked for on a Unix socket between workers (see ``_buffers``)."""
READ_CHUNK = 1 << 22
"""The most bytes a transport reads per wake-up."""
READ_LIMIT = 1 << 20
"""A connection's read buffer before it pauses reading (asyncio's default, 64 KiB,
made a large frame pause and resume the socket every 128 KiB)."""


class PeerLost(TimelyError):
    """The connection to a peer ended (EOF, reset, garbage) or could not be set up."""

    def __init__(self, peer: int, reason: str) -> None:
        self.peer = peer
        self.reason = reason
        super().__init__(f"the connection to worker {peer} {reason}")

    def __reduce__(self) -> tuple[type[PeerLost], tuple[int, str]]:
        return PeerLost, (self.peer, self.reason)


class Address(NamedTuple):
    """Where a worker listens: its Ray node, its Unix socket, its TCP endpoint (if any)."""

    node: str
    path: str
    host: str | None = None
    port: int | None = None


class _Link:
    """One connection to one peer and both directions' counters."""

    __slots__ = (
        "acked",
        "applied",
        "credit",
        "kind",
        "lost",
        "out",
        "peer",
        "queue",
        "read",
        "sent",
        "writer",
    )

    def __init__(
        self, peer: int, writer: asyncio.StreamWriter, out: FrameSender, kind: str
    ) -> None:
        self.peer = peer
        self.writer = writer
        self.out = out
        """Every write on this connection, in order (:mod:`timely.comm.sending`)."""
        self.kind = kind
        self.queue: deque[Payload] = deque()
        """Frames received and not yet taken by the host."""
        self.read = 0
        """DATA frames taken off the connection (to compare with the peer's ``sent``:
        credits come back whenever the peer is about to wait, and do not count)."""
        self.sent = 0
        self.credit = 0
        """Frames sent; of those, how many the peer has applied (its last credit)."""
        self.applied = 0
        self.acked = 0
        """Frames from the peer applied here; of those, how many were credited back."""
        self.lost: str | None = None


class Channel:
    """FIFO frames to one peer, at most ``window`` of them not yet applied there."""

    def __init__(self, allocator: Allocator, link: _Link) -> None:
        self._allocator = allocator
        self._link = link
        self.peer = link.peer

    def ready(self) -> bool:
        """Whether a frame may go now (a credit is left)."""
        link = self._link
        return link.sent - link.credit < self._allocator.window

    def usable(self) -> bool:
        """Whether a frame may go now without raising: a credit is left and the
        connection is up."""
        link = self._link
        return link.lost is None and not link.writer.is_closing() and self.ready()

    def send_nowait(self, payload: bytes | Sequence[Any]) -> None:
        """Send one frame whose payload is ``payload`` or, given a list of bytes-like
        parts, their concatenation (written as they are, not joined); the caller has
        checked :meth:`ready`. Raises PeerLost."""
        link = self._link
        if link.lost is not None:
            raise PeerLost(link.peer, link.lost)
        if not self.ready():
            raise RuntimeError(f"no credit left for worker {link.peer}: wait for ready() first")
        parts = [payload] if isinstance(payload, bytes) else list(payload)
        size = sum(memoryview(p).nbytes for p in parts)
        if size > MAX_FRAME:
            raise ValueError(
                f"a step's message to worker {link.peer} is {size:,} bytes, over the "
                f"{MAX_FRAME:,}-byte frame limit: send smaller batches (split the records)"
            )
        head = HEADER.pack(size, DATA)
        if parts and isinstance(parts[0], bytes) and len(parts[0]) <= 1 << 12:
            parts[0] = head + parts[0]  # one small write, not two
        else:
            parts.insert(0, head)
        if not link.writer.is_closing():
            link.out.write(parts)
        link.sent += 1

    async def send(self, payload: bytes) -> None:
        """Wait for a credit, then send. Raises PeerLost."""
        while not self.ready():
            self._allocator.check()
            await self._allocator.changed()
        self.send_nowait(payload)


class Allocator:
    """Worker ``index`` of ``peers``: its listeners, its connections, their channels.

    ``wake`` is called (on the event loop) whenever something arrives: a frame, a
    credit, a lost connection; a host that waits on its own event passes its ``set``.
    """

    def __init__(
        self,
        index: int,
        peers: int,
        secret: bytes,
        window: int = 8,
        wake: Callable[[], None] | None = None,
        driver: bool = False,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.index = index
        self.peers = peers
        self.window = window
        self._secret = secret
        self._credit_every = credit_every(window)
        self._wake = wake
        self._event = asyncio.Event()
        self._links: list[_Link | None] = [None] * peers
        self._channels: list[Channel | None] = [None] * peers
        self._connected = asyncio.Event()
        self._missing = peers - 1 + int(driver)
        self._expects_driver = driver
        self._driver: _Link | None = None
        """The driver's connection (index :data:`DRIVER`), once it has dialled in."""
        self._departed: set[int] = set()
        """Workers that left the run: their connections end without a failure."""
        self.max_commands = 0
        """The most driver commands ever waiting to be taken."""
        self._servers: list[asyncio.AbstractServer] = []
        self._dir: str | None = None
        self._discarding = False
        self._broken = False
        self.queued = 0
        """Frames received and not yet taken, over all peers."""
        self.max_queued = 0
        self.refused = 0
        """Connections closed because they failed the handshake."""
        if self._missing == 0:
            self._connected.set()

    # -- setting up ---------------------------------------------------------------------------
    async def listen(self, node: str, host: str | None = None) -> Address:
        """Listen on a Unix socket (0600, in a fresh 0700 directory) and, given ``host``
        (the node's own IP, never a wildcard), on TCP for peers on other nodes."""
        if host is not None and host in _ALL_INTERFACES:
            raise ValueError(
                f"refusing to listen on every interface ({host!r}): give the node's IP"
            )
        self._dir = socket_dir()  # mode 0700; stale ones swept (the process's first)
        path = os.path.join(self._dir, f"worker-{self.index}.sock")

        async def on_unix(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await self._accept(r, w, "unix")

        async def on_tcp(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await self._accept(r, w, "tcp")

        self._servers.append(await asyncio.start_unix_server(on_unix, path=path, limit=READ_LIMIT))
        os.chmod(path, 0o600)
        port = None
        if host is not None:
            server = await asyncio.start_server(on_tcp, host=host, port=0, limit=READ_LIMIT)
            self._servers.append(server)
            port = int(server.sockets[0].getsockname()[1])
        return Address(node, path, host, port)

    async def connect(self, table: Sequence[Address], timeout: float = CONNECT_TIMEOUT) -> None:
        """Dial every lower index (Unix on the same node, else TCP) and wait for every
        higher one to dial in. Raises PeerLost naming the first peer that failed."""
        me = table[self.index]
        dials = [asyncio.ensure_future(self._dial(p, table[p], me.node)) for p in range(self.index)]
        accepted = asyncio.ensure_future(self._connected.wait())
        pending: set[asyncio.Future[Any]] = {*dials, accepted}
        deadline = time.monotonic() + timeout
        try:
            while pending:
                left = deadline - time.monotonic()
                done, pending = await asyncio.wait(
                    pending, timeout=max(left, 0), return_when=asyncio.FIRST_EXCEPTION
                )
                for fut in done:
                    fut.result()  # a failed dial raises PeerLost here
                if pending and time.monotonic() >= deadline:
                    missing = [
                        p for p, link in enumerate(self._links) if link is None and p != self.index
                    ]
                    raise PeerLost(
                        missing[0],
                        f"was not set up within {timeout:g}s (workers {missing} missing for "
                        f"worker {self.index}; is every worker's node reachable from the others?)",
                    )
        finally:
            for fut in pending:
                fut.cancel()

    async def _dial(self, peer: int, addr: Address, node: str) -> None:
        where = addr.path
        try:
            if addr.node == node:
                reader, writer = await asyncio.open_unix_connection(addr.path, limit=READ_LIMIT)
                kind = "unix"
            elif addr.host is not None and addr.port is not None:
                where = f"{addr.host}:{addr.port}"
                reader, writer = await asyncio.open_connection(
                    addr.host, addr.port, limit=READ_LIMIT
                )
                kind = "tcp"
                _keepalive(writer)
            else:
                raise PeerLost(
                    peer, f"is on node {addr.node}, another node, and has no TCP listener"
                )
        except OSError as e:
            raise PeerLost(peer, f"could not be opened at {where}: {e}") from None
        try:
            await hello_dialer(reader, writer, self._secret, self.index, peer)
        except (HandshakeFailed, asyncio.IncompleteReadError, asyncio.TimeoutError, OSError) as e:
            writer.close()
            why = "it closed the connection" if isinstance(e, asyncio.IncompleteReadError) else e
            raise PeerLost(
                peer, f"failed the handshake at {where} ({why}): not this run's worker {peer}"
            ) from None
        self._add(peer, reader, writer, kind)

    async def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kind: str
    ) -> None:
        """A connection to a listener: admitted once it proves the secret and names a
        higher index not yet connected; closed otherwise, and the run goes on."""
        peer = await hello_listener(reader, writer, self._secret, self.index)
        if peer is None:
            admitted = False
        elif peer == DRIVER:  # the driver: one connection, when one is expected
            admitted = self._expects_driver and self._driver is None
        else:
            admitted = self.index < peer < self.peers and self._links[peer] is None
        if not admitted:
            self.refused += 1
            writer.close()
            return
        assert peer is not None
        if kind == "tcp":
            _keepalive(writer)
        self._add(peer, reader, writer, kind)

    def _add(
        self, peer: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kind: str
    ) -> None:
        if kind == "unix":
            _buffers(writer)
        link: _Link

        def on_frame(kind: int, payload: Payload) -> bool:
            return self._frame(link, kind, payload)

        def on_lost(reason: str) -> None:
            self._lose(link, reason)

        protocol = FrameReader(on_frame, on_lost)
        link = _Link(peer, writer, FrameSender(writer, protocol.drained), kind)
        if peer == DRIVER:
            self._driver = link
        else:
            self._links[peer] = link
            self._channels[peer] = Channel(self, link)
        _take_over(reader, writer, protocol)
        self._missing -= 1
        if self._missing == 0:
            self._connected.set()

    # -- workers that join and leave a running dataflow ----------------------------------------
    def expect_peer(self, peer: int) -> None:
        """Worker ``peer`` (the next index) joins the run: admit its connection (it dials
        every worker already in; :meth:`wait_peer` waits for it)."""
        if peer in self._departed:  # the index of a worker that left, taken again
            self._departed.discard(peer)
            return
        if peer != self.peers:
            raise ValueError(f"worker {peer} cannot join worker {self.index}'s {self.peers}")
        self.peers += 1
        self._links.append(None)
        self._channels.append(None)

    async def wait_peer(self, peer: int, timeout: float = CONNECT_TIMEOUT) -> None:
        """Wait until worker ``peer`` (expected) has dialled in. Raises PeerLost."""
        deadline = time.monotonic() + timeout
        while self._links[peer] is None:
            self.check()
            if time.monotonic() >= deadline:
                raise PeerLost(peer, f"did not dial in within {timeout:g}s to join the run")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed(), 0.05)

    def depart(self, peer: int) -> None:
        """Worker ``peer`` left the run (every frame it sent is applied here): its
        connection may end now; nothing more goes to it."""
        self._departed.add(peer)
        link = self._links[peer]
        if link is not None:
            link.applied += len(link.queue)
            self.queued -= len(link.queue)
            link.queue.clear()
            self._links[peer] = None
            self._channels[peer] = None
            link.writer.close()

    # -- receiving ----------------------------------------------------------------------------
    def _frame(self, link: _Link, kind: int, payload: Payload) -> bool:
        """One frame off ``link`` (:class:`~timely.comm.receiving.FrameReader` calls this
        as each completes); False when it ends the connection."""
        if kind == DATA:
            link.read += 1
            if self._discarding:  # the host is done: credit at once, keep nothing
                link.applied += 1
                self._credit(link)
                return True
            link.queue.append(payload)
            if link is self._driver:
                if len(link.queue) > self.max_commands:
                    self.max_commands = len(link.queue)
            else:
                self.queued += 1
                if self.queued > self.max_queued:
                    self.max_queued = self.queued
        elif kind == CREDIT and len(payload) == COUNT.size:
            (credit,) = COUNT.unpack(payload)
            if not link.credit <= credit <= link.sent:
                self._lose(link, f"sent a credit of {credit} for {link.sent} frames")
                return False
            link.credit = credit
        else:
            self._lose(link, f"sent a frame of unknown kind {kind}")
            return False
        self._notify()
        return True

    def _lose(self, link: _Link, reason: str) -> None:
        if link.peer in self._departed:
            link.writer.close()  # a worker that left: its end is no failure
            return
        if link.lost is None:
            link.lost = reason
            self._broken = True
            link.writer.close()
        self._notify()

    def _notify(self) -> None:
        self._event.set()
        if self._wake is not None:
            self._wake()

    async def changed(self) -> None:
        """Wait until something arrives (a frame, a credit, a lost connection)."""
        self._event.clear()
        await self._event.wait()

    def check(self) -> None:
        """Raise PeerLost for the first connection that has ended."""
        if not self._broken:
            return
        for link in self._all():
            if link.lost is not None:
                raise PeerLost(link.peer, link.lost)

    def _all(self) -> list[_Link]:
        """Every connection: the peers', then the driver's."""
        links = [link for link in self._links if link is not None]
        if self._driver is not None:
            links.append(self._driver)
        return links

    def recv_nowait(self, budget: list[int] | None = None) -> list[tuple[int, Payload]]:
        """The frames received so far, ``(peer, payload)``, FIFO per peer; with
        ``budget``, at most ``budget[peer]`` from each peer (decremented)."""
        out: list[tuple[int, Payload]] = []
        if not self.queued:
            return out
        for link in self._links:
            if link is None or not link.queue:
                continue
            queue, peer = link.queue, link.peer
            n = len(queue) if budget is None else min(len(queue), budget[peer])
            for _ in range(n):
                out.append((peer, queue.popleft()))
            if budget is not None:
                budget[peer] -= n
            self.queued -= n
        return out

    def waiting(self, budget: list[int] | None = None) -> bool:
        """Whether :meth:`recv_nowait` with ``budget`` would return anything, or (without
        ``budget``) :meth:`driver_commands`."""
        if budget is None and self._driver is not None and self._driver.queue:
            return True
        if not self.queued:
            return False
        return any(
            link is not None and link.queue and (budget is None or budget[link.peer] > 0)
            for link in self._links
        )

    async def recv(self) -> tuple[int, Payload]:
        """The next frame from any peer, FIFO per peer. Raises PeerLost."""
        while True:
            self.check()
            for link in self._links:
                if link is not None and link.queue:
                    self.queued -= 1
                    return link.peer, link.queue.popleft()
            await self.changed()

    def driver_commands(self) -> list[Payload]:
        """The driver's frames received so far, in order; credit them with
        :meth:`applied` (:data:`DRIVER`) once applied."""
        link = self._driver
        if link is None or not link.queue:
            return []
        out = list(link.queue)
        link.queue.clear()
        return out

    def applied(self, peer: int, n: int = 1) -> None:
        """The host applied ``n`` frames from ``peer`` (:data:`DRIVER`: the driver): credit goes
        back every ``window // 2`` of them."""
        link = self._driver if peer == DRIVER else self._links[peer]
        assert link is not None
        link.applied += n
        if link.applied - link.acked >= self._credit_every:
            self._credit(link)

    def flush_credits(self) -> None:
        """Return the credit of every applied frame now (before the host waits)."""
        for link in self._all():
            if link.applied > link.acked:
                self._credit(link)

    def _credit(self, link: _Link) -> None:
        if link.lost is None and link.applied > link.acked:
            _write(link, credit_frame(link.applied))
            link.acked = link.applied

    def discard(self) -> None:
        """The host takes nothing more: drop what waits and, from now on, credit every
        frame on arrival, so no peer waits on this worker again."""
        self._discarding = True
        for link in self._all():
            link.applied += len(link.queue)
            link.queue.clear()
        self.queued = 0
        self.flush_credits()

    # -- sending ------------------------------------------------------------------------------
    def send_driver(self, payload: bytes) -> None:
        """Send a report (outputs, checkpoint parts) to the driver. Not credited: the
        driver's reader always takes it. Dropped if that connection has ended (then
        :meth:`check` raises)."""
        link = self._driver
        if link is None or link.lost is not None:
            return
        if len(payload) > MAX_FRAME:
            raise ValueError(
                f"a step's outputs are {len(payload):,} bytes, over the {MAX_FRAME:,}-byte "
                "frame limit: emit smaller epochs"
            )
        _write(link, data_frame(payload))
        link.sent += 1

    def channel(self, peer: int) -> Channel:
        """The channel to ``peer`` (after :meth:`connect`)."""
        channel = self._channels[peer]
        if channel is None:
            raise KeyError(f"worker {self.index} has no connection to worker {peer}")
        return channel

    def all_credited(self) -> bool:
        """Every frame sent has been applied (or discarded) by its receiver."""
        return all(link is None or link.sent == link.credit for link in self._links)

    def counts(self) -> tuple[list[int], list[int]]:
        """Per peer: DATA frames sent to it, and DATA frames read from it (taken off the
        connection; reading goes on whatever the host does). A peer's frames that stay
        unread while this worker's loop is free mean its reader is stuck. Safe to call
        from another thread."""
        links = self._links
        return (
            [0 if link is None else link.sent for link in links],
            [0 if link is None else link.read for link in links],
        )

    # -- state, tests, closing ------------------------------------------------------------------
    async def connected(self) -> None:
        """Wait until every peer expected at the start (and the driver) is connected."""
        await self._connected.wait()

    def kinds(self) -> dict[int, str]:
        """How each peer is connected: ``"unix"`` or ``"tcp"``."""
        return {link.peer: link.kind for link in self._links if link is not None}

    def abort(self, peer: int) -> None:
        """For tests: shut the connection to ``peer`` down both ways, as a crash or a
        network fault would (both ends then see it end)."""
        link = self._links[peer]
        assert link is not None
        sock = link.writer.get_extra_info("socket")
        sock.shutdown(socket.SHUT_RDWR)

    def pause(self, peer: int) -> None:
        """For tests: stop reading the connection from ``peer`` (a stuck reader)."""
        link = self._links[peer]
        assert link is not None
        transport = cast(asyncio.Transport, link.writer.transport)
        transport.pause_reading()

    def close_listeners(self) -> None:
        """Stop listening and remove the socket directory; connections stay open."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def close(self) -> None:
        """Close every connection and listener."""
        self.close_listeners()
        for link in self._all():
            await link.out.close()
            link.writer.close()


def _keepalive(writer: asyncio.StreamWriter) -> None:
    """TCP keepalive, so a node that vanishes without a FIN or RST is noticed in ~20 s
    by the kernel even when the driver's heartbeats cannot tell."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 2)):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def _take_over(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, protocol: FrameReader
) -> None:
    """Make ``protocol`` the connection's protocol after the handshake, handing it what
    the stream reader had already read past the handshake (a peer sends as soon as it
    is through) and an end it had already seen. The stream reader's buffer and end are
    private to asyncio: read here once, at the switch."""
    transport = cast(asyncio.Transport, writer.transport)
    left = bytes(reader._buffer)  # type: ignore[attr-defined]
    ended = reader.at_eof() or bool(reader._eof)  # type: ignore[attr-defined]
    transport.set_protocol(protocol)
    if not transport.is_reading():  # the stream reader may have paused it
        transport.resume_reading()
    protocol.feed(left)
    if ended:
        protocol.eof_received()


def _buffers(writer: asyncio.StreamWriter) -> None:
    """Room for a step's frames in the kernel: a worker sends and reads only between
    its steps, so with the default buffer (~200 KiB) a frame of megabytes moved only
    while both ends were between steps at once. The kernel caps the size asked for at
    ``net.core.wmem_max``. And the transport reads up to :data:`READ_CHUNK` per wake-up
    (asyncio's default is 256 KiB), so a worker takes in what waits in one go."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    transport = writer.transport
    if hasattr(transport, "max_size"):
        transport.max_size = READ_CHUNK


def _write(link: _Link, frame: bytes) -> None:
    """Write ``frame`` unless the connection is already closing: the peer is gone, its
    reader reports the loss, and asyncio would print "socket.send() raised exception."
    for every write after it (noise during a recovery)."""
    if not link.writer.is_closing():
        link.out.write((frame,))
