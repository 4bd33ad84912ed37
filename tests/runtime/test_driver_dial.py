"""The driver's handshakes with the workers go side by side: every worker gets its proof
before the driver waits for any worker's answer (a run's start waits for one worker's
round trips, not for the sum). Fake listeners in threads, no Ray, nothing timed: they
answer only once every proof is in, which a driver dialing one worker after the other
never reaches (it then fails at its handshake timeout)."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
from collections.abc import Iterator

import pytest

from timely.comm.allocator import DRIVER, Address, PeerLost
from timely.comm.driver import DriverLinks, recv_exactly
from timely.comm.handshake import NONCE, PROOF, check_dialer, listener_proof

SECRET = b"s" * 32


class Listeners:
    """``n`` fake workers that answer the driver's proofs only once all ``n`` are in;
    worker ``liar`` (if any) answers as another worker."""

    def __init__(self, n: int, folder: str, liar: int | None = None) -> None:
        self.all_proved = threading.Barrier(n, timeout=10)
        self.liar = liar
        self.addresses: list[Address] = []
        self.socks: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        for w in range(n):
            path = os.path.join(folder, f"w{w}.sock")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(path)
            sock.listen(1)
            self.socks.append(sock)
            self.addresses.append(Address("node", path))
            thread = threading.Thread(target=self._serve, args=(w, sock), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _serve(self, w: int, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            challenge = os.urandom(NONCE)
            conn.sendall(challenge)
            checked = check_dialer(SECRET, challenge, recv_exactly(conn, PROOF))
            assert checked is not None and checked[0] == DRIVER
            try:
                self.all_proved.wait()
            except threading.BrokenBarrierError:
                return  # a driver that dials one at a time: nothing more comes
            index = w + 1 if w == self.liar else w
            with contextlib.suppress(OSError):  # a driver that gave up may have closed it
                conn.sendall(listener_proof(SECRET, checked[1], index))
                conn.recv(1)  # until the driver closes

    def close(self) -> None:
        self.all_proved.abort()
        for sock in self.socks:
            sock.close()


@pytest.fixture
def folder() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="timely-test-") as f:
        yield f


@pytest.mark.parametrize("n", [2, 3])
def test_every_worker_has_the_proof_before_the_driver_waits_for_an_answer(
    folder: str, n: int
) -> None:
    fakes = Listeners(n, folder)
    links = DriverLinks(n, SECRET, 8)
    try:
        links.connect(fakes.addresses, "node", timeout=2.0)
        assert links.workers == n
        assert all(links.lost(w) is None for w in range(n))
    finally:
        links.close()
        fakes.close()


def test_a_wrong_answer_still_names_its_worker_and_closes_every_socket(folder: str) -> None:
    fakes = Listeners(3, folder, liar=1)
    links = DriverLinks(3, SECRET, 8)
    try:
        with pytest.raises(PeerLost) as caught:
            links.connect(fakes.addresses, "node", timeout=2.0)
        assert caught.value.peer == 1 and "wrong MAC" in str(caught.value)
        for thread in fakes.threads:
            thread.join(5)  # each fake's recv ends: the driver closed its socket
        assert not any(t.is_alive() for t in fakes.threads)
    finally:
        links.close()
        fakes.close()
