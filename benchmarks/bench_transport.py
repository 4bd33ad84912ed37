"""Worker-to-worker transport between two Ray actors on one node: Ray calls against sockets.

Candidates for the direct transport between workers, measured side by side in one run,
both ends being Ray async actors on this node:

- ``ray``: Ray actor calls, as the workers talk today (``peer.recv.remote(payload)``,
  at most 8 calls in flight);
- ``unix``, ``tcp``: asyncio streams inside the actors' event loops, over a Unix-domain
  socket and over TCP on 127.0.0.1; length-prefixed frames, ``StreamWriter.write`` +
  ``drain`` on one side, ``readexactly`` on the other;
- ``zmq-ipc``, ``zmq-tcp``: pyzmq (``zmq.asyncio``), a DEALER connecting to the peer's
  ROUTER over ``ipc://`` and ``tcp://127.0.0.1``;
- ``thread-unix``: plain blocking sockets on a thread at both ends (no event loop), to
  show what the asyncio machinery costs.

Latency: round trips of a 32-byte message, p50 and p99. Throughput: msgpack batches of
1,000 ints (``timely.comm.serialization.encode`` on the sender and ``decode`` on the
receiver, both inside the timing), with at most ``--window`` batches unacknowledged:
the receiver returns a credit after every ``window // 2`` decoded batches, as a Ray
call returns once its batch is taken in. ``unix, drain only`` drops the credits and
relies on the stream's own buffers (asyncio's 64 KiB high-water mark, then the
socket's). Every socket connection starts with a handshake proving knowledge of the
run's secret (HMAC-SHA256 challenge and response both ways; ZAP with PLAIN for zmq)
before the listener reads anything else; its cost (connect, handshake, first round
trip) is measured on fresh connections. Unix sockets live in a 0700 directory, 0600.

Failure detection: a sender streams to a fresh receiver actor, the driver kills the
receiver mid-stream (``ray.kill``, or SIGKILL as a crash would), and the sender records
what it sees (exception type, where) and when, against the time of the kill and of the
process's observed exit. A connection with a wrong secret is tried too.

    .venv/bin/python -m benchmarks.bench_transport [--quick]   # from the repository root
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import itertools
import json
import logging
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import msgpack  # type: ignore[import-untyped]
import ray

from benchmarks.tables import markdown
from timely.backends.ray import local_ray_options
from timely.comm.driver import recv_exactly
from timely.comm.frames import COUNT, CREDIT, DATA, HEADER, credit_every
from timely.comm.handshake import (
    HELLO_TIMEOUT,
    MAC,
    NONCE,
    PROOF,
    check_dialer,
    dialer_proof,
    hello_dialer,
    hello_listener,
    listener_proof,
)
from timely.comm.serialization import decode, encode

try:
    import zmq
    import zmq.asyncio
    import zmq.auth.asyncio
except ImportError:  # pragma: no cover - pyzmq is optional here
    zmq = None  # type: ignore[assignment]

RESULTS = Path(__file__).resolve().parent / "results"

HEAD = HEADER
"""A frame's header: payload length, kind (timely.comm.frames)."""
ACK = CREDIT
PING, DATA_NOACK, FIN = 1, 3, 4
"""The benchmark's own kinds, beside timely's DATA and CREDIT."""
PING_BYTES = 32
KILL_TIMEOUT = 3.0
"""How long a sender in the kill test waits for a credit before it gives up."""
BATCH = 1000
ZMQ_USER = "timely"

STREAMS = ("unix", "tcp")
ZMQ = ("zmq-ipc", "zmq-tcp")
THREAD = ("thread-unix",)
LABELS = {
    "ray": "(a) Ray actor calls",
    "unix": "(b) asyncio streams, Unix socket",
    "unix-drain": "(b') asyncio streams, Unix socket, drain only",
    "tcp": "(c) asyncio streams, TCP 127.0.0.1",
    "zmq-ipc": "(d) pyzmq DEALER→ROUTER, ipc://",
    "zmq-tcp": "(d) pyzmq DEALER→ROUTER, tcp://127.0.0.1",
    "thread-unix": "(e) blocking socket on a thread, Unix",
    "codec": "(–) encode + decode in one process, no transport",
}


# -- the secret handshake (timely.comm.handshake; the benchmark is worker 0 on both ends) ----------
async def _hello_server(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes
) -> bool:
    """The listener's side: exactly ``PROOF`` bytes are read before the check."""
    return await hello_listener(reader, writer, secret, 0, HELLO_TIMEOUT) is not None


async def _hello_client(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes
) -> None:
    await hello_dialer(reader, writer, secret, 0, 0, HELLO_TIMEOUT)


def _hello_server_sync(conn: socket.socket, secret: bytes) -> bool:
    challenge = os.urandom(NONCE)
    conn.sendall(challenge)
    conn.settimeout(HELLO_TIMEOUT)
    try:
        proof = recv_exactly(conn, PROOF)
    except (OSError, EOFError):
        return False
    conn.settimeout(None)
    checked = check_dialer(secret, challenge, proof)
    if checked is None:
        return False
    conn.sendall(listener_proof(secret, checked[1], 0))
    return True


def _hello_client_sync(conn: socket.socket, secret: bytes) -> None:
    challenge = recv_exactly(conn, NONCE)
    nonce, proof = dialer_proof(secret, challenge, 0)
    conn.sendall(proof)
    if not hmac.compare_digest(recv_exactly(conn, MAC), listener_proof(secret, nonce, 0)):
        raise ConnectionError("the peer does not know the run's secret")


# -- receivers --------------------------------------------------------------------------------
async def _serve_stream(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes, ack_every: int
) -> None:
    """One connection: echo pings, decode data (a credit every ``ack_every``), answer FIN."""
    try:
        if not await _hello_server(reader, writer, secret):
            return
        frames = records = 0
        while True:
            n, kind = HEAD.unpack(await reader.readexactly(HEAD.size))
            body = await reader.readexactly(n) if n else b""
            if kind in (DATA, DATA_NOACK):
                records += len(decode(body))
                frames += 1
                if kind == DATA and frames % ack_every == 0:
                    writer.write(HEAD.pack(COUNT.size, ACK) + COUNT.pack(frames))
                    await writer.drain()
            elif kind == PING:
                writer.write(HEAD.pack(n, PING) + body)
                await writer.drain()
            elif kind == FIN:
                writer.write(HEAD.pack(COUNT.size, FIN) + COUNT.pack(records))
                await writer.drain()
                frames = records = 0
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve_zmq(sock: Any, ack_every: int) -> None:
    state: dict[bytes, list[int]] = {}
    while True:
        ident, frame = await sock.recv_multipart()
        kind = frame[0]
        if kind == DATA:
            st = state.setdefault(ident, [0, 0])
            st[1] += len(decode(frame[1:]))
            st[0] += 1
            if st[0] % ack_every == 0:
                await sock.send_multipart([ident, bytes((ACK,)) + COUNT.pack(st[0])])
        elif kind == PING:
            await sock.send_multipart([ident, frame])
        elif kind == FIN:
            st = state.pop(ident, [0, 0])
            await sock.send_multipart([ident, bytes((FIN,)) + COUNT.pack(st[1])])


def _serve_thread(listener: socket.socket, secret: bytes, ack_every: int) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(
            target=_serve_thread_conn, args=(conn, secret, ack_every), daemon=True
        ).start()


def _serve_thread_conn(conn: socket.socket, secret: bytes, ack_every: int) -> None:
    with conn:
        try:
            if not _hello_server_sync(conn, secret):
                return
            frames = records = 0
            while True:
                n, kind = HEAD.unpack(recv_exactly(conn, HEAD.size))
                body = recv_exactly(conn, n) if n else b""
                if kind == DATA:
                    records += len(decode(body))
                    frames += 1
                    if frames % ack_every == 0:
                        conn.sendall(HEAD.pack(COUNT.size, ACK) + COUNT.pack(frames))
                elif kind == PING:
                    conn.sendall(HEAD.pack(n, PING) + body)
                elif kind == FIN:
                    conn.sendall(HEAD.pack(COUNT.size, FIN) + COUNT.pack(records))
                    frames = records = 0
        except (OSError, EOFError):
            pass


# -- senders ----------------------------------------------------------------------------------
class Link(Protocol):
    async def send(self, kind: int, payload: bytes) -> None: ...
    async def recv(self) -> tuple[int, bytes]: ...
    async def close(self) -> None: ...


class StreamLink:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, kind: int, payload: bytes) -> None:
        self.writer.write(HEAD.pack(len(payload), kind) + payload)
        await self.writer.drain()

    async def recv(self) -> tuple[int, bytes]:
        n, kind = HEAD.unpack(await self.reader.readexactly(HEAD.size))
        return kind, (await self.reader.readexactly(n) if n else b"")

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


class ZmqLink:
    def __init__(self, sock: Any, watch: asyncio.Task[None] | None = None) -> None:
        self.sock = sock
        self.watch = watch

    async def send(self, kind: int, payload: bytes) -> None:
        await self.sock.send(bytes((kind,)) + payload)

    async def recv(self) -> tuple[int, bytes]:
        frame: bytes = await self.sock.recv()
        return frame[0], frame[1:]

    async def close(self) -> None:
        if self.watch is not None:
            await asyncio.sleep(0.05)  # the last events
            self.watch.cancel()
        with contextlib.suppress(zmq.ZMQError):
            self.sock.disable_monitor()
        self.sock.close(linger=0)


class SyncLink:
    """A blocking socket, for the thread variant."""

    def __init__(self, path: str, secret: bytes) -> None:
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.connect(path)
        _hello_client_sync(self.conn, secret)

    def send(self, kind: int, payload: bytes) -> None:
        self.conn.sendall(HEAD.pack(len(payload), kind) + payload)

    def recv(self) -> tuple[int, bytes]:
        n, kind = HEAD.unpack(recv_exactly(self.conn, HEAD.size))
        return kind, (recv_exactly(self.conn, n) if n else b"")


def _batches(seed: int = 7, count: int = 64) -> list[list[int]]:
    """Batches of 1,000 ints below 2**31 (mostly 5 bytes each in msgpack)."""
    rng = random.Random(seed)
    return [[rng.randrange(1 << 31) for _ in range(BATCH)] for _ in range(count)]


def _push_sync(link: SyncLink, batches: list[list[int]], n: int, window: int) -> dict[str, Any]:
    acked = nbytes = 0
    t0 = time.perf_counter()
    for sent in range(n):
        while sent - acked >= window:
            kind, body = link.recv()
            (acked,) = COUNT.unpack(body)
        data = encode(batches[sent % len(batches)])
        nbytes += len(data)
        link.send(DATA, data)
    link.send(FIN, b"")
    while True:
        kind, body = link.recv()
        if kind == FIN:
            break
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "records": COUNT.unpack(body)[0], "bytes": nbytes, "batches": n}


class Endpoint:
    """Both ends of every variant: listeners (the receiver) and measurements (the sender)."""

    def __init__(self) -> None:
        self.records = 0
        self.streamed = 0
        self.where = ""
        self.batches = _batches()
        self.dir = ""
        self.tasks: list[asyncio.Task[None]] = []
        self.servers: list[asyncio.base_events.Server] = []
        self.zctx: Any = None
        self.auth: Any = None

    # -- as a Ray call receiver
    async def info(self) -> dict[str, Any]:
        import timely

        return {
            "pid": os.getpid(),
            "loop": type(asyncio.get_running_loop()).__module__,
            "timely": timely.__file__,
        }

    async def echo(self, payload: bytes) -> bytes:
        return payload

    async def recv(self, payload: bytes) -> None:
        self.records += len(decode(payload))

    async def cpu(self) -> float:
        """This process's CPU seconds so far (all its threads, Ray's included)."""
        return time.process_time()

    async def take_count(self) -> int:
        n, self.records = self.records, 0
        return n

    # -- as a socket receiver
    async def listen(self, secret: bytes, variants: list[str], ack_every: int) -> dict[str, str]:
        """Start a listener per variant; return the addresses a sender connects to."""
        self.dir = tempfile.mkdtemp(prefix="timely-bench-transport-")  # 0700
        addrs: dict[str, str] = {"dir": self.dir}

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await _serve_stream(r, w, secret, ack_every)

        if "unix" in variants:
            path = os.path.join(self.dir, "unix.sock")
            self.servers.append(await asyncio.start_unix_server(handle, path=path))
            os.chmod(path, 0o600)
            addrs["unix"] = path
        if "tcp" in variants:
            server = await asyncio.start_server(handle, host="127.0.0.1", port=0)
            self.servers.append(server)
            addrs["tcp"] = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        if zmq is not None and set(ZMQ) & set(variants):
            self.zctx = zmq.asyncio.Context()
            self.auth = zmq.auth.asyncio.AsyncioAuthenticator(self.zctx)
            self.auth.start()
            self.auth.configure_plain(domain="timely", passwords={ZMQ_USER: secret.hex()})
            for v, where in (
                ("zmq-ipc", "ipc://" + os.path.join(self.dir, "zmq.ipc")),
                ("zmq-tcp", "tcp://127.0.0.1"),
            ):
                if v not in variants:
                    continue
                sock = self.zctx.socket(zmq.ROUTER)
                sock.plain_server = True
                sock.zap_domain = b"timely"
                sock.linger = 0
                if where.startswith("tcp"):
                    port = sock.bind_to_random_port(where)
                    addrs[v] = f"{where}:{port}"
                else:
                    sock.bind(where)
                    os.chmod(where[len("ipc://") :], 0o600)
                    addrs[v] = where
                self.tasks.append(asyncio.ensure_future(_serve_zmq(sock, ack_every)))
        if "thread-unix" in variants:
            path = os.path.join(self.dir, "thread.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            os.chmod(path, 0o600)
            listener.listen(16)
            threading.Thread(
                target=_serve_thread, args=(listener, secret, ack_every), daemon=True
            ).start()
            addrs["thread-unix"] = path
        return addrs

    async def modes(self) -> dict[str, str]:
        """The permissions of the listening directory and its socket files."""
        out = {self.dir: oct(os.stat(self.dir).st_mode & 0o777)}
        for name in sorted(os.listdir(self.dir)):
            p = os.path.join(self.dir, name)
            out[p] = oct(os.stat(p).st_mode & 0o777)
        return out

    async def close(self) -> None:
        for s in self.servers:
            s.close()
        for t in self.tasks:
            t.cancel()
        if self.auth is not None:
            self.auth.stop()
        if self.zctx is not None:
            self.zctx.destroy(linger=0)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- as a sender
    async def _open(
        self, variant: str, addr: str, secret: bytes, events: list[tuple[float, str]] | None = None
    ) -> Link:
        """A connection to ``addr``, the secret checked (for zmq: under way); with
        ``events``, a zmq socket's events from before it connects are recorded there."""
        if variant in ("unix", "unix-drain"):
            r, w = await asyncio.open_unix_connection(addr)
        elif variant == "tcp":
            host, port = addr.rsplit(":", 1)
            r, w = await asyncio.open_connection(host, int(port))
        else:
            if self.zctx is None:
                self.zctx = zmq.asyncio.Context()
            sock = self.zctx.socket(zmq.DEALER)
            sock.plain_username = ZMQ_USER.encode()
            sock.plain_password = secret.hex().encode()
            sock.linger = 0
            watch = None if events is None else _monitor(sock, events)
            sock.connect(addr)
            return ZmqLink(sock, watch)
        try:
            await _hello_client(r, w, secret)
        except BaseException:
            w.close()
            raise
        return StreamLink(r, w)

    async def handshake(self, variant: str, addr: str, secret: bytes, times: int) -> list[float]:
        """Seconds from connecting to the first pong, on fresh connections (or, for ``ray``,
        the first call on a freshly created actor's handle: ``addr`` is unused)."""
        out = []
        for _ in range(times):
            if variant == "thread-unix":
                out.append(await asyncio.to_thread(self._handshake_sync, addr, secret))
                continue
            t0 = time.perf_counter()
            link = await self._open(variant, addr, secret)
            await link.send(PING, bytes(PING_BYTES))
            await link.recv()
            out.append(time.perf_counter() - t0)
            await link.close()
        return out

    @staticmethod
    async def _ping_once(link: Link) -> None:
        await link.send(PING, bytes(PING_BYTES))
        await link.recv()

    def _handshake_sync(self, addr: str, secret: bytes) -> float:
        t0 = time.perf_counter()
        link = SyncLink(addr, secret)
        link.send(PING, bytes(PING_BYTES))
        link.recv()
        seconds = time.perf_counter() - t0
        link.conn.close()
        return seconds

    async def first_call(self, peer: Any) -> float:
        """Seconds of the first call from this actor to ``peer`` (started, never called
        from here): Ray sets up its connection on the way."""
        t0 = time.perf_counter()
        await peer.echo.remote(bytes(PING_BYTES))
        return time.perf_counter() - t0

    async def ping(self, variant: str, addr: str, secret: bytes, peer: Any, n: int) -> list[float]:
        """Round-trip seconds of ``n`` pings (after 100 unmeasured)."""
        payload = bytes(PING_BYTES)
        out: list[float] = []
        perf = time.perf_counter
        if variant == "ray":
            for i in range(n + 100):
                t0 = perf()
                await peer.echo.remote(payload)
                if i >= 100:
                    out.append(perf() - t0)
            return out
        if variant == "thread-unix":
            return await asyncio.to_thread(self._ping_sync, addr, secret, n)
        link = await self._open(variant, addr, secret)
        for i in range(n + 100):
            t0 = perf()
            await link.send(PING, payload)
            await link.recv()
            if i >= 100:
                out.append(perf() - t0)
        await link.close()
        return out

    def _ping_sync(self, addr: str, secret: bytes, n: int) -> list[float]:
        link = SyncLink(addr, secret)
        payload = bytes(PING_BYTES)
        out: list[float] = []
        perf = time.perf_counter
        for i in range(n + 100):
            t0 = perf()
            link.send(PING, payload)
            link.recv()
            if i >= 100:
                out.append(perf() - t0)
        link.conn.close()
        return out

    async def push(
        self, variant: str, addr: str, secret: bytes, peer: Any, n: int, window: int
    ) -> dict[str, Any]:
        """Push ``n`` encoded batches, at most ``window`` unacknowledged; the clock stops
        once the receiver reports every record decoded. With this process's CPU seconds."""
        cpu = time.process_time()
        out = await self._push(variant, addr, secret, peer, n, window)
        out["sender_cpu"] = time.process_time() - cpu
        return out

    async def _push(
        self, variant: str, addr: str, secret: bytes, peer: Any, n: int, window: int
    ) -> dict[str, Any]:
        batches = self.batches
        acked = nbytes = 0
        if variant == "ray":
            refs: deque[Any] = deque()
            t0 = time.perf_counter()
            for i in range(n):
                if len(refs) >= window:
                    await refs.popleft()
                data = encode(batches[i % len(batches)])
                nbytes += len(data)
                refs.append(peer.recv.remote(data))
            for ref in refs:
                await ref
            records = await peer.take_count.remote()
            seconds = time.perf_counter() - t0
            return {"seconds": seconds, "records": records, "bytes": nbytes, "batches": n}
        if variant == "thread-unix":
            sync = SyncLink(addr, secret)
            try:
                return await asyncio.to_thread(_push_sync, sync, batches, n, window)
            finally:
                sync.conn.close()
        kind_data = DATA_NOACK if variant == "unix-drain" else DATA
        link = await self._open(variant, addr, secret)
        t0 = time.perf_counter()
        for sent in range(n):
            while kind_data == DATA and sent - acked >= window:
                kind, body = await link.recv()
                (acked,) = COUNT.unpack(body)
            data = encode(batches[sent % len(batches)])
            nbytes += len(data)
            await link.send(kind_data, data)
        await link.send(FIN, b"")
        while True:
            kind, body = await link.recv()
            if kind == FIN:
                break
        seconds = time.perf_counter() - t0
        await link.close()
        return {"seconds": seconds, "records": COUNT.unpack(body)[0], "bytes": nbytes, "batches": n}

    # -- failure detection
    async def progress(self) -> int:
        return self.streamed

    async def stream_until_dead(
        self, variant: str, addr: str, secret: bytes, peer: Any, window: int, timeout: float
    ) -> dict[str, Any]:
        """Stream batches (credits as in ``push``) until something fails or ``timeout``
        passes; report what failed, where and when (``time.time()``)."""
        self.streamed = 0
        self.where = "connect"
        events: list[tuple[float, str]] = []
        link: Link | None = None
        deadline = time.monotonic() + timeout
        try:
            if variant == "ray":
                await self._stream_ray(peer, window, deadline)
            elif variant == "thread-unix":
                await asyncio.to_thread(self._stream_sync, addr, secret, window, deadline)
            else:
                link = await self._open(variant, addr, secret, events)
                await self._stream_link(link, window, deadline)
        except asyncio.TimeoutError:
            out: dict[str, Any] = {"detected_at": None, "error": None}
        except Exception as e:
            out = {
                "detected_at": time.time(),
                "error": f"{type(e).__module__}.{type(e).__qualname__}",
                "message": str(e).splitlines()[0][:160] if str(e) else "",
            }
        if link is not None:
            await link.close()
        streamed, self.streamed = self.streamed, 0  # the next test's progress starts at 0
        return {**out, "where": self.where, "batches": streamed, "events": events}

    async def _stream_ray(self, peer: Any, window: int, deadline: float) -> None:
        refs: deque[Any] = deque()
        i = 0
        while True:
            if len(refs) >= window:
                self.where = "awaiting the oldest call"
                remaining = deadline - time.monotonic()
                await asyncio.wait_for(asyncio.wrap_future(refs.popleft().future()), remaining)
            self.where = "calling"
            refs.append(peer.recv.remote(encode(self.batches[i % 64])))
            i += 1
            self.streamed = i

    async def _stream_link(self, link: Link, window: int, deadline: float) -> None:
        sent = acked = 0
        while True:
            while sent - acked >= window:
                self.where = "reading a credit"
                remaining = deadline - time.monotonic()
                _, body = await asyncio.wait_for(link.recv(), remaining)
                (acked,) = COUNT.unpack(body)
            self.where = "write + drain"
            await link.send(DATA, encode(self.batches[sent % 64]))
            sent += 1
            self.streamed = sent

    def _stream_sync(self, addr: str, secret: bytes, window: int, deadline: float) -> None:
        link = SyncLink(addr, secret)
        sent = acked = 0
        try:
            while True:
                while sent - acked >= window:
                    self.where = "reading a credit"
                    link.conn.settimeout(max(0.001, deadline - time.monotonic()))
                    try:
                        _, body = link.recv()
                    except TimeoutError:
                        raise asyncio.TimeoutError() from None
                    (acked,) = COUNT.unpack(body)
                self.where = "sendall"
                link.send(DATA, encode(self.batches[sent % 64]))
                sent += 1
                self.streamed = sent
        finally:
            link.conn.close()

    async def wrong_secret(self, variant: str, addr: str, secret: bytes) -> dict[str, Any]:
        """Connect with a wrong secret and try a ping: what does the sender see?"""
        bad = bytes(b ^ 0xFF for b in secret)
        events: list[tuple[float, str]] = []
        t0 = time.perf_counter()
        try:
            if variant == "thread-unix":
                await asyncio.to_thread(SyncLink, addr, bad)
            else:
                link = await self._open(variant, addr, bad, events)
                try:
                    await asyncio.wait_for(self._ping_once(link), 1.0)
                finally:
                    await link.close()
        except asyncio.TimeoutError:
            return {"error": "no reply within 1 s (no error)", "events": events}
        except Exception as e:
            return {
                "error": f"{type(e).__module__}.{type(e).__qualname__}",
                "seconds": time.perf_counter() - t0,
                "events": events,
            }
        return {"error": None, "events": events}


_MONITORS = itertools.count()


def _monitor(sock: Any, events: list[tuple[float, str]]) -> asyncio.Task[None]:
    """Record ``sock``'s events (``time.time()``, name) into ``events``."""
    mon = sock.get_monitor_socket(addr=f"inproc://timely-monitor-{next(_MONITORS)}")
    return asyncio.ensure_future(_watch(mon, events))


async def _watch(mon: Any, events: list[tuple[float, str]]) -> None:
    from zmq.utils.monitor import parse_monitor_message

    try:
        while True:
            msg = parse_monitor_message(await mon.recv_multipart())
            events.append((time.time(), str(zmq.Event(msg["event"]).name)))
    finally:
        mon.close(linger=0)


RemoteEndpoint: Any = ray.remote(num_cpus=0.5)(Endpoint)


# -- the driver -------------------------------------------------------------------------------
def _wait_exit(pid: int, timeout: float) -> float | None:
    """``time.time()`` at which ``pid`` is gone or a zombie (polled every 0.5 ms)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return time.time()
        except (FileNotFoundError, ProcessLookupError):
            return time.time()
        time.sleep(0.0005)
    return None


def codec_alone(n: int) -> dict[str, Any]:
    """The same batches encoded and decoded in one process, no transport: the ceiling."""
    batches = _batches()
    nbytes = 0
    cpu, t0 = time.process_time(), time.perf_counter()
    for i in range(n):
        data = encode(batches[i % len(batches)])
        nbytes += len(data)
        assert len(decode(data)) == BATCH
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "records": n * BATCH,
        "bytes": nbytes,
        "batches": n,
        "sender_cpu": time.process_time() - cpu,
        "receiver_cpu": 0.0,
    }


def _get(ref: Any, timeout: float = 120.0) -> Any:
    """``ray.get`` that fails rather than hangs (the driver's every wait)."""
    return ray.get(ref, timeout=timeout)


KILLS = ("ray.kill", "SIGKILL")
"""How the receiver dies: through Ray (which knows at once), or a crash Ray learns of."""


def kill_test(
    variant: str,
    how: str,
    sender: Any,
    secret: bytes,
    window: int,
    ack_every: int,
    timeout: float,
) -> dict[str, Any]:
    """Kill a fresh receiver mid-stream; when and how does the sender learn of it?"""
    _say(f"kill ({how}): {variant}")
    victim = RemoteEndpoint.remote()
    pid = _get(victim.info.remote())["pid"]
    addr = where = ""
    if variant != "ray":
        addrs = _get(victim.listen.remote(secret, [variant], ack_every))
        addr, where = addrs[variant], addrs["dir"]
    ref = sender.stream_until_dead.remote(variant, addr, secret, victim, window, timeout)
    end = time.monotonic() + 10
    while _get(sender.progress.remote()) < 300 and time.monotonic() < end:
        time.sleep(0.01)
    killed = time.time()
    if how == "SIGKILL":
        os.kill(pid, signal.SIGKILL)
    else:
        ray.kill(victim)
    exited = _wait_exit(pid, timeout)
    got: dict[str, Any] = _get(ref)
    if where:  # the victim had no time to clean up
        shutil.rmtree(where, ignore_errors=True)
    t = got["detected_at"]
    got["after_kill_ms"] = None if t is None else (t - killed) * 1e3
    got["after_exit_ms"] = None if t is None or exited is None else (t - exited) * 1e3
    got["exit_after_kill_ms"] = None if exited is None else (exited - killed) * 1e3
    got["events"] = [(round((e - killed) * 1e3, 2), name) for e, name in got["events"]]
    return got


def _say(what: str) -> None:
    """Progress on stderr (the tables go to stdout)."""
    print(f"[bench_transport {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one repetition, fewer batches")
    parser.add_argument("--pings", type=int, default=2000, help="round trips per repetition")
    parser.add_argument("--window", type=int, default=8, help="batches in flight at most")
    args = parser.parse_args(argv)
    quick: bool = args.quick
    reps = kill_reps = 1 if quick else 3
    nbatches = 500 if quick else 5000
    window: int = args.window
    ack_every = credit_every(window)
    variants = ["ray", "unix", "tcp"]
    if zmq is not None:
        variants += list(ZMQ)
    variants += list(THREAD)
    pushes = variants[:2] + ["unix-drain"] + variants[2:]
    secret = os.urandom(32)
    wall = time.perf_counter()
    load = os.getloadavg()

    codec = [codec_alone(nbatches) for _ in range(reps)]
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,  # the actors print nothing the report needs
        **local_ray_options(),
    )
    try:
        a, b = RemoteEndpoint.remote(), RemoteEndpoint.remote()
        info = _get([a.info.remote(), b.info.remote()])
        addrs = _get(b.listen.remote(secret, variants, ack_every))
        addrs["unix-drain"] = addrs["unix"]
        modes = _get(b.modes.remote())
        hand: dict[str, list[float]] = {"ray": []}
        for _ in range(3):
            fresh = RemoteEndpoint.remote()
            _get(fresh.info.remote())
            hand["ray"].append(_get(a.first_call.remote(fresh)))
            ray.kill(fresh)
        for v in variants[1:]:
            _say(f"handshakes: {v}")
            hand[v] = _get(a.handshake.remote(v, addrs[v], secret, 20))
        rtts: dict[str, list[float]] = {v: [] for v in variants}
        rates: dict[str, list[dict[str, Any]]] = {v: [] for v in pushes}
        for rep in range(reps):  # interleaved, so a busy moment on the machine hits all
            order = variants if rep % 2 == 0 else variants[::-1]
            for v in order:
                _say(f"rep {rep + 1}/{reps}: pings, {v}")
                rtts[v] += _get(a.ping.remote(v, addrs.get(v, ""), secret, b, args.pings))
            for v in pushes if rep % 2 == 0 else pushes[::-1]:
                _say(f"rep {rep + 1}/{reps}: push, {v}")
                cpu = _get(b.cpu.remote())
                r = _get(a.push.remote(v, addrs.get(v, ""), secret, b, nbatches, window))
                r["receiver_cpu"] = _get(b.cpu.remote()) - cpu
                assert r["records"] == nbatches * BATCH, (v, r)
                rates[v].append(r)
        _say("wrong secrets")
        wrong = {v: _get(a.wrong_secret.remote(v, addrs[v], secret)) for v in variants[1:]}
        _get(b.close.remote())
        ray.kill(b)
        kills = {
            (v, how): [
                kill_test(v, how, a, secret, window, ack_every, KILL_TIMEOUT)
                for _ in range(kill_reps)
            ]
            for how in KILLS
            for v in variants
        }
        _get(a.close.remote())
        ray.kill(a)
    finally:
        ray.shutdown()
    total = time.perf_counter() - wall

    summary: dict[str, dict[str, Any]] = {}
    rates["codec"] = codec
    for v in [*pushes, "codec"]:
        runs = rates[v]
        sm: dict[str, Any] = {
            "records_per_s": statistics.median(r["records"] / r["seconds"] for r in runs),
            "mb_per_s": statistics.median(r["bytes"] / r["seconds"] / 1e6 for r in runs),
            "cpu_us_per_batch": statistics.median(
                (r["sender_cpu"] + r["receiver_cpu"]) / r["batches"] * 1e6 for r in runs
            ),
            "runs": runs,
        }
        if v in rtts:
            xs = rtts[v]
            sm.update(
                pings=len(xs),
                rtt_p50_us=_pct(xs, 0.5) * 1e6,
                rtt_p90_us=_pct(xs, 0.9) * 1e6,
                rtt_p99_us=_pct(xs, 0.99) * 1e6,
                rtt_min_us=min(xs) * 1e6,
                handshake_ms=statistics.median(hand[v]) * 1e3,
                handshakes=len(hand[v]),
            )
        summary[v] = sm
    base = summary["ray"]
    rows: list[list[object]] = []
    for v in [*pushes, "codec"]:
        sm = summary[v]
        lat: list[object] = ["", "", "", ""]
        if "rtt_p50_us" in sm:
            speedup = base["rtt_p50_us"] / sm["rtt_p50_us"]
            lat = [f"{sm['rtt_p50_us']:,.0f}", f"{sm['rtt_p99_us']:,.0f}", f"{speedup:.1f}×",
                   f"{sm['handshake_ms']:.2f}"]  # fmt: skip
        rows.append(
            [LABELS[v], *lat[:3], f"{sm['records_per_s'] / 1e6:.2f} M", f"{sm['mb_per_s']:.1f}",
             f"{sm['records_per_s'] / base['records_per_s']:.1f}×",
             f"{sm['cpu_us_per_batch']:,.0f}", lat[3]]
        )  # fmt: skip
    print("## Transport between two Ray actors on one node\n")
    print(
        markdown(
            ["transport", "RTT p50 µs", "RTT p99 µs", "p50: Ray ÷ this", "records/s", "MB/s",
             "records/s: this ÷ Ray", "CPU µs/batch", "handshake ms"],
            rows,
        )
    )  # fmt: skip
    print(
        f"\n{len(rtts['ray']):,} round trips of {PING_BYTES} B per transport. Throughput: "
        f"median of {reps} × {nbatches:,} batches of {BATCH:,} ints "
        f"(~{base['runs'][0]['bytes'] / nbatches / 1e3:.1f} kB encoded), at most {window} "
        f"unacknowledged, encode + decode included; CPU: both processes, all threads. "
        f"Handshake: connect + secret check + first round trip, median of 20 fresh "
        f"connections (Ray: median of 3 first calls to a started actor)."
    )
    krows: list[list[object]] = []
    for (v, how), ks in kills.items():
        after = [k["after_kill_ms"] for k in ks if k["after_kill_ms"] is not None]
        exits = [k["exit_after_kill_ms"] for k in ks if k["exit_after_kill_ms"] is not None]
        gone = [
            next((ms for ms, name in k["events"] if name == "DISCONNECTED" and ms > 0), None)
            for k in ks
        ]
        krows.append(
            [LABELS[v], how,
             ", ".join(sorted({k["error"] or f"nothing within {KILL_TIMEOUT:.0f} s" for k in ks})),
             ", ".join(sorted({k["where"] for k in ks})),
             f"{statistics.median(after):.1f} ({min(after):.1f}–{max(after):.1f})" if after else "",
             f"{statistics.median(exits):.1f}" if exits else "",
             ", ".join(f"{g:.1f}" for g in gone if g is not None)]
        )  # fmt: skip
    print("\n## The receiver killed mid-stream: what the sender sees\n")
    print(
        markdown(
            ["transport", "killed by", "sender gets", "while", "ms after the kill: median (range)",
             "process gone, ms after the kill", "zmq monitor DISCONNECTED, ms"],
            krows,
        )
    )  # fmt: skip
    print(
        f"\n{kill_reps} kill(s) per transport and way, each of a fresh receiver after 300 "
        f"batches; the sender gives up after {KILL_TIMEOUT:.0f} s without a credit."
    )
    print("\n## A connection with a wrong secret\n")
    wrows = [
        [LABELS[v], w["error"], ", ".join(name for _, name in w["events"])]
        for v, w in wrong.items()
    ]
    print(markdown(["transport", "sender gets", "zmq monitor"], wrows))
    print(f"\nlisteners: {modes}")
    print(f"({'quick' if quick else 'full'} run, {total:.1f} s, load at start {load[0]:.2f})")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("transport.quick.json" if quick else "transport.json")
    payload = {
        "benchmark": "bench_transport",
        "quick": quick,
        "python": sys.version.split()[0],
        "ray": ray.__version__,
        "pyzmq": None if zmq is None else zmq.__version__,
        "libzmq": None if zmq is None else zmq.zmq_version(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "platform": platform.platform(),
        "loadavg_at_start": load,
        "loadavg_at_end": os.getloadavg(),
        "cpus": os.cpu_count(),
        "actors": info,
        "wall_seconds": total,
        "window": window,
        "ack_every": ack_every,
        "batch": BATCH,
        "batches": nbatches,
        "repetitions": reps,
        "listener_modes": modes,
        "summary": summary,
        "kill": [{"variant": v, "how": how, "runs": ks} for (v, how), ks in kills.items()],
        "wrong_secret": wrong,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"figures written to {out}")


if __name__ == "__main__":
    # Run from the module's importable name, so Ray ships the actor class by reference.
    from benchmarks.bench_transport import main as _main

    _main()
