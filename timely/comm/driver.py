"""The driver's own connections to the workers: one more endpoint, index ``DRIVER``.

The driver is not an asyncio program, so this side uses blocking sockets: the driver's
thread dials every worker (Unix on its own node, TCP otherwise), proves the run's secret
with the handshake the workers use (:mod:`timely.comm.handshake`, dialer side) and then
writes its commands itself (``sendall``: no thread hop on the way out), one DATA frame
each, at most ``window`` not yet applied per worker (:meth:`DriverLinks.send` waits for
the worker's CREDIT frames otherwise, so a driver faster than its workers is held back).
One reader thread per connection takes the workers' DATA frames (outputs, checkpoint
parts) off the socket as they come and only queues them; the session decodes and
delivers them on the driver's thread when it calls in. A connection that ends (EOF,
reset, garbage) is queued as ``(worker, None)`` and stays in :meth:`DriverLinks.lost`.
"""

from __future__ import annotations

import contextlib
import hmac
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence

from timely.comm.allocator import DRIVER, Address, PeerLost
from timely.comm.frames import COUNT, CREDIT, DATA, HEADER, data_frame
from timely.comm.handshake import HELLO_TIMEOUT, MAC, NONCE, dialer_proof, listener_proof

_CREDIT_WAIT = 0.1
"""How long :meth:`DriverLinks.send` waits for a credit between two calls of its hook."""


class _Conn:
    """The driver's connection to one worker and its counters."""

    def __init__(self, worker: int, sock: socket.socket) -> None:
        self.worker = worker
        self.sock = sock
        self.sent = 0
        self.credit = 0
        """Frames sent; of those, how many the worker has applied (its last credit)."""
        self.lost: str | None = None
        self.thread: threading.Thread | None = None
        self.departed = False
        """The worker left the run: its connection's end is no failure."""


class DriverLinks:
    """The driver's connections to ``workers`` workers of one launch (a relaunch makes a
    new one: old readers only ever touch their own object)."""

    def __init__(self, workers: int, secret: bytes, window: int) -> None:
        self.workers = workers
        self.window = window
        self._secret = secret
        self._conns: list[_Conn] = []
        self._cond = threading.Condition()
        self._closing = False
        self.frames: deque[tuple[int, bytes | None]] = deque()
        """``(worker, payload)`` as they arrived; ``payload`` None: the connection ended."""
        self.arrived = threading.Event()
        """Set whenever a frame (or an ended connection) is queued."""
        self.max_outstanding = 0
        """The most commands ever sent to one worker and not yet applied there."""
        self.credit_waits = 0
        """How often :meth:`send` had to wait for a credit."""

    # -- setting up ---------------------------------------------------------------------------
    def connect(self, table: Sequence[Address], node: str, timeout: float = HELLO_TIMEOUT) -> None:
        """Dial every worker and prove the secret. Raises PeerLost naming the worker."""
        for w, addr in enumerate(table):
            self.add(w, addr, node, timeout)

    def add(self, w: int, addr: Address, node: str, timeout: float = HELLO_TIMEOUT) -> None:
        """Dial worker ``w`` (the next index: one joining the run too) and start its reader."""
        again = w < len(self._conns) and self._conns[w].departed  # a left worker's index
        if w != len(self._conns) and not again:
            raise ValueError(f"worker {w} is not the next of {len(self._conns)}")
        sock = self._dial(w, addr, node, timeout)
        conn = _Conn(w, sock)
        if again:
            self._conns[w] = conn
        else:
            self._conns.append(conn)
        self.workers = len(self._conns)
        conn.thread = threading.Thread(
            target=self._read, args=(conn,), name=f"timely-driver-{w}", daemon=True
        )
        conn.thread.start()

    def depart(self, w: int) -> None:
        """Worker ``w`` left the run: close its connection (its end is no failure)."""
        conn = self._conns[w]
        with self._cond:
            conn.departed = True
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)
        conn.sock.close()

    def _dial(self, w: int, addr: Address, node: str, timeout: float) -> socket.socket:
        if addr.node == node:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            where: str | tuple[str, int] = addr.path
        elif addr.host is not None and addr.port is not None:
            sock = socket.socket(socket.AF_INET6 if ":" in addr.host else socket.AF_INET)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            where = (addr.host, addr.port)
        else:
            raise PeerLost(w, f"is on node {addr.node}, not the driver's, and has no TCP listener")
        try:
            sock.settimeout(timeout)
            sock.connect(where)
            challenge = recv_exactly(sock, NONCE)
            nonce, proof = dialer_proof(self._secret, challenge, DRIVER)
            sock.sendall(proof)
            answer = recv_exactly(sock, MAC)
            if not hmac.compare_digest(answer, listener_proof(self._secret, nonce, w)):
                raise PeerLost(w, f"at {where} is not this run's worker {w} (wrong MAC)")
            sock.settimeout(None)
        except (OSError, EOFError) as e:
            sock.close()
            why = "it closed the connection (our proof was refused?)" if not str(e) else e
            raise PeerLost(w, f"could not be reached by the driver at {where}: {why}") from None
        except PeerLost:
            sock.close()
            raise
        return sock

    # -- receiving (reader threads) -------------------------------------------------------------
    def _read(self, conn: _Conn) -> None:
        sock = conn.sock
        try:
            while True:
                n, kind = HEADER.unpack(recv_exactly(sock, HEADER.size))
                payload = recv_exactly(sock, n) if n else b""
                if kind == DATA:
                    self.frames.append((conn.worker, payload))
                    self.arrived.set()
                elif kind == CREDIT and n == COUNT.size:
                    (credit,) = COUNT.unpack(payload)
                    with self._cond:
                        if not conn.credit <= credit <= conn.sent:
                            raise ConnectionError(f"a credit of {credit} for {conn.sent} frames")
                        conn.credit = credit
                        self._cond.notify_all()
                else:
                    raise ConnectionError(f"a frame of unknown kind {kind}")
        except (OSError, EOFError) as e:
            eof = isinstance(e, EOFError)
            reason = "was closed by the worker (EOF)" if eof else f"failed ({e})"
            with self._cond:
                if self._closing or conn.departed:
                    return
                conn.lost = reason
                self._cond.notify_all()
            self.frames.append((conn.worker, None))
            self.arrived.set()

    def lost(self, w: int) -> str | None:
        """Why the connection to worker ``w`` ended (None: it has not)."""
        return self._conns[w].lost

    # -- sending (the driver's thread) ----------------------------------------------------------
    def ready(self, w: int) -> bool:
        """Whether a command may go to worker ``w`` now (a credit is left)."""
        conn = self._conns[w]
        return conn.sent - conn.credit < self.window

    def send(self, w: int, payload: bytes, waiting: Callable[[], None]) -> None:
        """Send a command to worker ``w`` once it has a credit, calling ``waiting`` (which
        may raise) every so often until then. Raises PeerLost if the connection ended."""
        conn = self._conns[w]
        cond = self._cond
        if conn.sent - conn.credit >= self.window:
            self.credit_waits += 1
            while True:
                with cond:
                    if conn.sent - conn.credit < self.window or conn.lost is not None:
                        break
                    cond.wait(_CREDIT_WAIT)
                    if conn.sent - conn.credit < self.window or conn.lost is not None:
                        break
                waiting()
        frame = data_frame(payload)
        with cond:  # counted before it goes: its credit may come back at once
            if conn.lost is not None:
                raise PeerLost(w, f"(the driver's connection) {conn.lost}")
            conn.sent += 1
            outstanding = conn.sent - conn.credit
        if outstanding > self.max_outstanding:
            self.max_outstanding = outstanding
        try:
            conn.sock.sendall(frame)
        except OSError as e:
            raise PeerLost(w, f"(the driver's connection) failed ({e})") from None

    # -- closing --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close every connection; the reader threads end."""
        with self._cond:
            self._closing = True
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
            conn.sock.close()
        for conn in self._conns:
            if conn.thread is not None and conn.thread is not threading.current_thread():
                conn.thread.join(1.0)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from a blocking ``sock``; EOFError if the peer closes first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError(f"peer closed the connection ({got} of {n} bytes read)")
        got += k
    return bytes(buf)
