"""The driver's own connections to the workers: one more endpoint, index ``DRIVER``.

The driver is not an asyncio program, so this side uses blocking sockets: the driver's
thread dials every worker (Unix on its own node, TCP otherwise), proves the run's secret
with the handshake the workers use (:mod:`timely.comm.handshake`, dialer side; with all
the workers side by side, so that their round trips overlap) and then
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
from collections.abc import Callable, Iterator, Sequence

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


class _Dial:
    """The driver's side of one handshake, taken a step at a time (see
    :meth:`DriverLinks.connect`)."""

    def __init__(self, worker: int, sock: socket.socket, where: str | tuple[str, int]) -> None:
        self.worker = worker
        self.sock = sock
        self.where = where
        self.nonce = b""

    @contextlib.contextmanager
    def failing(self) -> Iterator[None]:
        """A socket error or an early close becomes PeerLost naming the worker."""
        try:
            yield
        except (OSError, EOFError) as e:
            why = "it closed the connection (our proof was refused?)" if not str(e) else e
            raise PeerLost(
                self.worker, f"could not be reached by the driver at {self.where}: {why}"
            ) from None

    def prove(self, secret: bytes) -> None:
        """Read the worker's challenge and answer it."""
        with self.failing():
            challenge = recv_exactly(self.sock, NONCE)
            self.nonce, proof = dialer_proof(secret, challenge, DRIVER)
            self.sock.sendall(proof)

    def check(self, secret: bytes) -> None:
        """Read the worker's answer: it must be this run's worker ``worker``."""
        with self.failing():
            answer = recv_exactly(self.sock, MAC)
            self.sock.settimeout(None)
        if not hmac.compare_digest(answer, listener_proof(secret, self.nonce, self.worker)):
            raise PeerLost(
                self.worker, f"at {self.where} is not this run's worker {self.worker} (wrong MAC)"
            )


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
        """Dial every worker and prove the secret, the handshakes side by side (each
        step is taken with every worker before the next: a start waits for one
        worker's round trips, not for the sum of all). Raises PeerLost naming the
        worker."""
        if self._conns:
            raise ValueError(f"{len(self._conns)} workers are connected already")
        dials: list[_Dial] = []
        try:
            for w, addr in enumerate(table):
                dials.append(self._open(w, addr, node, timeout))
            for dial in dials:
                dial.prove(self._secret)
            for dial in dials:
                dial.check(self._secret)
        except BaseException:
            for dial in dials:
                dial.sock.close()
            raise
        for dial in dials:
            self._attach(dial.worker, dial.sock)

    def add(self, w: int, addr: Address, node: str, timeout: float = HELLO_TIMEOUT) -> None:
        """Dial worker ``w`` (the next index: one joining the run too) and start its reader."""
        again = w < len(self._conns) and self._conns[w].departed  # a left worker's index
        if w != len(self._conns) and not again:
            raise ValueError(f"worker {w} is not the next of {len(self._conns)}")
        dial = self._open(w, addr, node, timeout)
        try:
            dial.prove(self._secret)
            dial.check(self._secret)
        except BaseException:
            dial.sock.close()
            raise
        self._attach(w, dial.sock)

    def _attach(self, w: int, sock: socket.socket) -> None:
        """Worker ``w``'s connection, proven: count it and start its reader."""
        conn = _Conn(w, sock)
        if w < len(self._conns):
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

    def _open(self, w: int, addr: Address, node: str, timeout: float) -> _Dial:
        """A connection to worker ``w``, its handshake not begun."""
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
        dial = _Dial(w, sock, where)
        with dial.failing():
            sock.settimeout(timeout)
            sock.connect(where)
        return dial

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
