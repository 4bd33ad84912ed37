"""The communication layer alone (no Ray): allocators in one event loop, talking over
real Unix and TCP sockets. FIFO per peer, credits bound what a slow receiver holds, a
connection without the secret is refused while the others go on, and a connection
that ends is reported as PeerLost naming the peer on both sides."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Awaitable, Callable

import pytest

from timely.comm.allocator import Address, Allocator, PeerLost
from timely.comm.handshake import NONCE, PROOF

SECRET = b"s" * 32


async def mesh(
    n: int, window: int = 8, tcp: bool = False, secrets: list[bytes] | None = None
) -> list[Allocator]:
    """``n`` connected allocators; with ``tcp``, each on a node of its own."""
    allocs = [Allocator(i, n, (secrets or [SECRET] * n)[i], window) for i in range(n)]
    table = [
        await a.listen(f"node-{i}" if tcp else "node", "127.0.0.1" if tcp else None)
        for i, a in enumerate(allocs)
    ]
    await asyncio.gather(*(a.connect(table, timeout=5) for a in allocs))
    return allocs


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 30))


async def close(allocs: list[Allocator]) -> None:
    for a in allocs:
        await a.close()


@pytest.mark.parametrize("tcp", [False, True])
def test_frames_arrive_in_order_per_peer_over_one_merged_receive(tcp: bool) -> None:
    async def body() -> None:
        allocs = await mesh(3, tcp=tcp)
        try:
            assert all(set(a.kinds().values()) == {"tcp" if tcp else "unix"} for a in allocs)

            async def push(i: int) -> None:
                for k in range(20):  # more than the window: the receiver's credits pace it
                    await allocs[i].channel(0).send(f"{i}:{k}".encode())

            pushing = asyncio.gather(push(1), push(2))
            got: dict[int, list[bytes]] = {1: [], 2: []}
            while len(got[1]) + len(got[2]) < 40:
                peer, frame = await allocs[0].recv()
                allocs[0].applied(peer)
                got[peer].append(frame)
            await pushing
            assert got == {i: [f"{i}:{k}".encode() for k in range(20)] for i in (1, 2)}
        finally:
            await close(allocs)

    run(body)


@pytest.mark.parametrize("tcp", [False, True])
def test_frames_of_every_size_arrive_whole_both_ways_at_once(tcp: bool) -> None:
    """Empty, small and multi-megabyte frames, some sent as several parts, mixed: each
    arrives whole and in order, while both ends send (the large ones read straight into
    their own buffers, the small ones cut from the staging buffer)."""
    sizes = [0, 1, 5, 200_000, 3, 4_000_000, 131_072, 131_073, 70_000, 1 << 20, 7]

    def frame(i: int, k: int, n: int) -> bytes:
        return bytes((i * 31 + k * 7 + j) % 251 for j in range(min(n, 256))) * (n // 256 + 1)

    async def body() -> None:
        allocs = await mesh(2, tcp=tcp)
        try:
            expected = {i: [frame(i, k, n)[:n] for k, n in enumerate(sizes * 2)] for i in (0, 1)}

            async def push(i: int) -> None:
                for k, data in enumerate(expected[i]):
                    channel = allocs[i].channel(1 - i)
                    while not channel.ready():
                        await allocs[i].changed()
                    if k % 2:  # as parts: written one after the other, not joined
                        view = memoryview(data)
                        channel.send_nowait([view[: len(data) // 3], view[len(data) // 3 :]])
                    else:
                        channel.send_nowait(data)

            async def take(i: int) -> list[bytes]:
                got: list[bytes] = []
                while len(got) < len(expected[1 - i]):
                    peer, payload = await allocs[i].recv()
                    allocs[i].applied(peer)
                    got.append(bytes(payload))
                return got

            results = await asyncio.gather(push(0), push(1), take(0), take(1))
            assert results[2] == expected[1] and results[3] == expected[0]
        finally:
            await close(allocs)

    run(body)


def test_listener_is_owner_only_and_never_on_every_interface() -> None:
    async def body() -> None:
        a = Allocator(0, 2, SECRET)
        addr = await a.listen("node")
        try:
            assert stat.S_IMODE(os.stat(os.path.dirname(addr.path)).st_mode) == 0o700
            assert stat.S_IMODE(os.stat(addr.path).st_mode) == 0o600
            for host in ("", "0.0.0.0", "::"):
                with pytest.raises(ValueError, match="every interface"):
                    await Allocator(1, 2, SECRET).listen("node", host)
        finally:
            await a.close()
        assert not os.path.exists(os.path.dirname(addr.path))

    run(body)


def test_credits_bound_what_a_receiver_holds_and_come_back_when_applied() -> None:
    async def body() -> None:
        sender, receiver = (await mesh(2, window=4))[::-1]  # worker 1 sends to worker 0
        try:
            channel = sender.channel(0)
            for k in range(4):
                channel.send_nowait(bytes([k]))
            assert not channel.ready()
            with pytest.raises(RuntimeError, match="no credit"):
                channel.send_nowait(b"x")
            total = 200
            pushing = asyncio.ensure_future(
                asyncio.gather(*[channel.send(bytes([k % 256])) for k in range(4, total)])
            )
            taken = 0
            while taken < total:
                peer, _ = await receiver.recv()
                assert receiver.queued <= 4  # never more than the window waits here
                receiver.applied(peer)
                taken += 1
            await pushing
            receiver.flush_credits()
            while not sender.all_credited():
                await sender.changed()
            assert receiver.max_queued <= 4
        finally:
            await close([sender, receiver])

    run(body)


def test_a_connection_without_the_secret_is_refused_and_the_others_go_on() -> None:
    async def body() -> None:
        allocs = await mesh(2)
        try:
            path = (await _address(allocs[0])).path
            reader, writer = await asyncio.open_unix_connection(path)
            await reader.readexactly(NONCE)
            writer.write(os.urandom(PROOF))  # a well-formed proof with a wrong MAC
            assert await reader.read() == b""  # closed by the listener
            writer.close()
            assert allocs[0].refused == 1
            await allocs[1].channel(0).send(b"still here")
            assert await allocs[0].recv() == (1, b"still here")
            allocs[0].check()
        finally:
            await close(allocs)

    run(body)


def test_a_dialer_with_another_secret_fails_naming_the_listener() -> None:
    async def body() -> None:
        a, b = Allocator(0, 2, SECRET), Allocator(1, 2, b"x" * 32)
        table = [await a.listen("node"), await b.listen("node")]
        try:
            with pytest.raises(PeerLost, match="worker 0 failed the handshake") as info:
                await asyncio.gather(b.connect(table, timeout=5), a.connect(table, timeout=2))
            assert info.value.peer == 0
            assert a.refused == 1
        finally:
            await close([a, b])

    run(body)


def test_a_connection_that_ends_is_peer_lost_on_both_sides() -> None:
    async def body() -> None:
        allocs = await mesh(3)
        try:
            allocs[0].abort(2)
            for me, other in ((0, 2), (2, 0)):
                with pytest.raises(PeerLost, match=f"worker {other} was closed") as info:
                    await allocs[me].recv()
                assert info.value.peer == other
            allocs[1].check()  # the others are untouched
        finally:
            await close(allocs)

    run(body)


def test_a_peer_killed_mid_stream_is_reported_to_a_waiting_sender() -> None:
    async def body() -> None:
        allocs = await mesh(2, window=2)
        try:
            channel = allocs[0].channel(1)
            channel.send_nowait(b"a")
            channel.send_nowait(b"b")
            sending = asyncio.ensure_future(channel.send(b"c"))  # waits for a credit
            await asyncio.sleep(0)
            sock = allocs[1]._links[0].writer.get_extra_info("socket")  # type: ignore[union-attr]
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            allocs[1]._links[0].writer.close()  # type: ignore[union-attr]  # an RST
            with pytest.raises(PeerLost) as info:
                await sending
            assert info.value.peer == 1
        finally:
            await close(allocs)

    run(body)


async def _address(a: Allocator) -> Address:
    """``a``'s Unix address (the test reads it back from the listener)."""
    server = a._servers[0]
    return Address("node", server.sockets[0].getsockname())


@pytest.mark.parametrize("chunk", [1, 7, 4096, 100_003, 1 << 20])
def test_a_frame_reader_cuts_frames_whatever_the_reads(chunk: int) -> None:
    """However the bytes arrive (a byte at a time, or many frames at once), a
    FrameReader hands over each frame whole, in order, small ones from its staging
    buffer (moving a partial frame to its front when full) and large ones read into
    buffers of their own."""
    from timely.comm.frames import HEADER
    from timely.comm.receiving import STAGE, FrameReader

    sizes = [0, 3, STAGE // 2, STAGE // 2 + 1, 5, 60_000, 60_000, 60_000, 60_000, 300_000, 1]
    frames = [(2 + k % 3, bytes((k + j) % 256 for j in range(n))) for k, n in enumerate(sizes)]
    stream = b"".join(HEADER.pack(len(p), kind) + p for kind, p in frames)
    got: list[tuple[int, bytes]] = []
    lost: list[str] = []

    def on_frame(kind: int, payload: bytes | memoryview) -> bool:
        got.append((kind, bytes(payload)))
        return True

    async def body() -> None:
        reader = FrameReader(on_frame, lost.append)
        for at in range(0, len(stream), chunk):  # as the transport would: into its buffer
            piece = stream[at : at + chunk]
            while piece:
                buf = reader.get_buffer(len(piece))
                n = min(buf.nbytes, len(piece))
                buf[:n] = piece[:n]
                reader.buffer_updated(n)
                piece = piece[n:]
        reader.eof_received()

    run(body)
    assert got == frames
    assert lost == ["was closed by the other end (EOF)"]
