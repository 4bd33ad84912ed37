"""Proof of the run's secret at the start of every connection between workers.

HMAC-SHA256 challenge and response both ways (its cost, 0.3-0.4 ms per connection, is
in ``benchmarks/TRANSPORT.md``). The listener sends a nonce; the dialer answers with
its own nonce, its worker index and a MAC over the listener's nonce and that index;
the listener reads exactly those bytes, checks the MAC and only then reads the index
or anything else, and closes the connection on a mismatch. It answers with a MAC over
the dialer's nonce and its own index, so the dialer knows it reached the worker it
meant to. The secret comes from the driver through Ray and never crosses a socket.

The checks are pure functions (:func:`dialer_proof`, :func:`check_dialer`,
:func:`listener_proof`) so that blocking-socket code (the benchmark's thread variant)
speaks the same protocol as the asyncio one here.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import struct

NONCE = 16
MAC = 32
INDEX = struct.Struct("<I")
PROOF = NONCE + INDEX.size + MAC
"""What a dialer sends: its nonce, its index, its MAC."""
HELLO_TIMEOUT = 5.0
"""How long either side waits for the other's part of the handshake."""


class HandshakeFailed(ConnectionError):
    """The other end does not know the run's secret, or is not the worker expected."""


def mac(secret: bytes, role: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 of ``role`` and ``parts`` under ``secret``."""
    return hmac.new(secret, b"".join((role, *parts)), hashlib.sha256).digest()


def dialer_proof(secret: bytes, challenge: bytes, index: int) -> tuple[bytes, bytes]:
    """The dialer's nonce and what it sends in answer to ``challenge``."""
    nonce = os.urandom(NONCE)
    claim = INDEX.pack(index)
    return nonce, nonce + claim + mac(secret, b"dialer", challenge, claim)


def check_dialer(secret: bytes, challenge: bytes, proof: bytes) -> tuple[int, bytes] | None:
    """The dialer's index and nonce if ``proof`` is right, else None (nothing in it is
    interpreted before the MAC is checked)."""
    if len(proof) != PROOF:
        return None
    claim = proof[NONCE : NONCE + INDEX.size]
    if not hmac.compare_digest(
        proof[NONCE + INDEX.size :], mac(secret, b"dialer", challenge, claim)
    ):
        return None
    return INDEX.unpack(claim)[0], proof[:NONCE]


def listener_proof(secret: bytes, nonce: bytes, index: int) -> bytes:
    """The listener's answer to the dialer's ``nonce``: it knows the secret and is ``index``."""
    return mac(secret, b"listener", nonce, INDEX.pack(index))


async def hello_listener(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    secret: bytes,
    index: int,
    timeout: float = HELLO_TIMEOUT,
) -> int | None:
    """The listener's side: the dialer's index, or None if it failed (then close)."""
    challenge = os.urandom(NONCE)
    try:
        writer.write(challenge)
        proof = await asyncio.wait_for(reader.readexactly(PROOF), timeout)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError):
        return None
    checked = check_dialer(secret, challenge, proof)
    if checked is None:
        return None
    peer, nonce = checked
    writer.write(listener_proof(secret, nonce, index))
    return peer


async def hello_dialer(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    secret: bytes,
    index: int,
    peer: int,
    timeout: float = HELLO_TIMEOUT,
) -> None:
    """The dialer's side, as worker ``index`` reaching worker ``peer``. Raises
    :class:`HandshakeFailed`, ``asyncio.IncompleteReadError`` (the listener closed: it
    refused our proof), ``asyncio.TimeoutError`` or ``OSError``."""
    challenge = await asyncio.wait_for(reader.readexactly(NONCE), timeout)
    nonce, proof = dialer_proof(secret, challenge, index)
    writer.write(proof)
    answer = await asyncio.wait_for(reader.readexactly(MAC), timeout)
    if not hmac.compare_digest(answer, listener_proof(secret, nonce, peer)):
        raise HandshakeFailed(f"the listener is not worker {peer} of this run (wrong MAC)")
