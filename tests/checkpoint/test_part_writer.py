"""The inline backend's part writer (``timely.checkpoint.writer.PartWriter``): parts on
its thread are reported once written and in the order handed over, whichever write ends
first; a relaunch's drain waits for every write and drops the reports. Mutation check: a
writer that reports parts as their writes end is caught."""

from __future__ import annotations

import concurrent.futures
import threading
from collections import deque
from typing import Any

import pytest

from timely.checkpoint.store import CheckpointStore
from timely.checkpoint.writer import PartWriter


class GatedStore(CheckpointStore):
    """A store whose write of epoch ``e`` waits until the test opens ``gates[e]``."""

    def __init__(self, gates: dict[int, threading.Event]) -> None:
        super().__init__("unused")
        self.gates = gates
        self.written: list[int] = []

    def write_part(self, epoch: int, worker: int, workers: int, data: bytes, *a: Any) -> Any:
        self.gates[epoch].wait()
        self.written.append(epoch)
        return {"worker": worker, "path": f"{epoch}", "size": len(data), "crc32": 0, "base": None}


def part(epoch: int) -> dict[str, Any]:
    return {"format": 2, "epoch": epoch, "workers": 1, "base": None, "vertices": {}}


def writer_with(gates: dict[int, threading.Event]) -> tuple[PartWriter, GatedStore]:
    writer = PartWriter(CheckpointStore("unused"))
    store = GatedStore(gates)
    writer._thread_store = store
    return writer, store


def test_parts_are_reported_once_written_in_the_order_handed_over() -> None:
    gates = {e: threading.Event() for e in range(3)}
    writer, store = writer_with(gates)
    for e in range(3):
        writer.submit(e, 0, part(e), 0, 0)
    assert writer.ready() == [] and writer.pending  # nothing written yet
    gates[0].set()
    assert [e for e, _ in writer.wait(1)] == [0]  # the first, once written
    assert writer.owes(3) and not writer.owes(1)
    gates[2].set()  # (the one thread writes in order: 2 waits behind 1)
    gates[1].set()
    assert [e for e, _ in writer.wait(3)] == [1, 2]
    assert not writer.pending and store.written == [0, 1, 2]
    writer.close()


def test_a_drain_waits_for_every_write_and_drops_the_reports() -> None:
    gates = {e: threading.Event() for e in range(2)}
    writer, store = writer_with(gates)
    for e in range(2):
        writer.submit(e, 0, part(e), 0, 0)
    for gate in gates.values():
        gate.set()
    writer.drain()
    assert store.written == [0, 1]  # both landed before the drain returned
    assert writer.ready() == [] and not writer.pending
    writer.close()


def test_a_writer_reporting_parts_as_they_end_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: every part written so far is reported, wherever it is in the queue (a
    pool of threads, say), so a later part can be reported before an earlier one."""

    def ready(self: PartWriter) -> list[Any]:
        done = [f for f in self._pending if f.done()]
        self._pending = deque(f for f in self._pending if not f.done())
        return [f.result() for f in reversed(done)]

    monkeypatch.setattr(PartWriter, "ready", ready)
    with pytest.raises(AssertionError):
        test_parts_are_reported_once_written_in_the_order_handed_over()


def test_a_parts_pieces_join_into_its_encoding() -> None:
    """A part's pieces are its encoding, whether its snapshots are all encoded already
    (packed whole) or one is a table left as data (pieces)."""
    import pyarrow as pa

    from timely.checkpoint.writer import encode_part, part_pieces
    from timely.comm import serialization

    table = pa.table({"word": ["a", "b"] * 3000, "n": list(range(6000))})
    snap = {"kind": "keyed", "tables": {"t": {"columnar": 1, "times": [((0,), table)]}}}
    encoded = serialization.encode({"kind": "keyed", "tables": {}})
    for vertices in ({1: encoded, 2: b"x" * 10_000}, {1: encoded, 2: snap}):
        part = {"format": 2, "epoch": 3, "worker": 0, "workers": 1, "vertices": vertices}
        assert b"".join(part_pieces(part)) == encode_part(part)


def columnar_snapshot(words: list[str], chunks: int) -> dict[str, Any]:
    import pyarrow as pa

    table = pa.table({"word": words, "n": list(range(len(words)))})
    table = pa.concat_tables([table] * chunks)
    state = {"columnar": 1, "keys": ["word"], "replicated": False, "times": [((0,), table)]}
    return {"kind": "keyed", "tables": {"state": state}, "bins": 256}


def test_random_parts_pieces_are_their_encoding_and_restore() -> None:
    """Parts of columnar snapshots left as data (tables of one or more chunks), row
    snapshots encoded already (small, or large enough to be a piece of their own) and
    plain data: their pieces join into :func:`encode_part`'s bytes, which restore reads
    back (the Arrow tables equal, the rest as it was)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from timely.checkpoint.store import decode_part
    from timely.checkpoint.writer import encode_part, part_pieces
    from timely.comm import serialization

    rows = st.lists(st.tuples(st.text(max_size=5), st.integers()), max_size=600)
    snapshot = (
        st.builds(columnar_snapshot, st.lists(st.text(max_size=6), max_size=300), st.integers(1, 3))
        | rows.map(lambda r: serialization.encode({"kind": "keyed", "rows": r}))
        | st.builds(lambda r, nested: {"kind": "user", "v": [r, (nested,)]}, rows, st.binary())
    )

    @settings(max_examples=40, deadline=None)
    @given(st.dictionaries(st.integers(0, 9), snapshot, max_size=4), st.none() | st.integers(0, 3))
    def check(vertices: dict[int, Any], base: int | None) -> None:
        part = {"format": 2, "epoch": 7, "worker": 1, "workers": 2, "base": base}
        part["vertices"] = vertices
        data = b"".join(part_pieces(part))
        assert data == encode_part(part)
        back = decode_part(data)
        assert back["base"] == base and set(back["vertices"]) == set(vertices)
        for v, snap in vertices.items():
            got = back["vertices"][v]
            if type(snap) is bytes:
                assert got == serialization.decode(snap)
            elif snap["kind"] == "keyed":
                ((time, table),) = got["tables"]["state"]["times"]
                assert time == (0,) and table.equals(snap["tables"]["state"]["times"][0][1])
            else:
                assert got == snap

    check()


def columnar_part(*tables: Any) -> dict[str, Any]:
    """A part whose one snapshot, left as data, holds ``tables`` (a ``ColumnState``'s)."""
    from timely.state.columnar import COLUMNAR

    state = {"columnar": COLUMNAR, "keys": ["word"], "replicated": False}
    state["times"] = [((e,), t) for e, t in enumerate(tables)]
    return {"format": 2, "epoch": 0, "workers": 1, "vertices": {1: {"tables": {"s": state}}}}


def test_a_part_is_large_by_the_bytes_its_tables_use_not_the_buffers_they_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bound (whole buffers) decides only when it is small: a small slice of a large
    table is small. Mutation check: deciding by the bound alone sends the slice to the
    writer thread (caught: the slice is then large)."""
    import pyarrow as pa

    import timely.checkpoint.writer as writer_module
    from timely.checkpoint.writer import is_large, part_bytes

    monkeypatch.setattr(writer_module, "LARGE", 100_000)
    big = pa.table({"n": pa.array(range(20_000), pa.int64())})  # 160,000 bytes
    assert is_large(columnar_part(big))
    piece = big.slice(0, 1_000)  # 8,000 bytes used, of the same 160,000-byte buffer
    assert part_bytes(columnar_part(piece), bound=True) >= 100_000  # (what the bound sees)
    assert not is_large(columnar_part(piece))
    assert not is_large(columnar_part(piece, piece))
    assert not is_large({"format": 2, "epoch": 0, "workers": 1, "vertices": {1: b"x" * 10}})
    assert is_large({"format": 2, "epoch": 0, "workers": 1, "vertices": {1: b"x" * 200_000}})
    # A snapshot whose size is not known on the loop (not all Arrow) is written there.
    assert not is_large({"format": 2, "epoch": 0, "workers": 1, "vertices": {1: {"x": 1}}})


class _Host:
    """What a Ray worker actor's part writing asks of its worker: the parts it completed."""

    def __init__(self) -> None:
        self.parts: list[tuple[int, dict[str, Any]]] = []

    def take_parts(self) -> list[tuple[int, dict[str, Any]]]:
        parts, self.parts = self.parts, []
        return parts

    def checkpoint_work(self) -> int:
        return 0

    def checkpoint_stalled(self) -> int:
        return 0

    def checkpoint_section(self, t0: int, t1: int) -> None:
        pass


def _ray_actor(store: CheckpointStore, reports: list[int]) -> tuple[Any, _Host]:
    """A Ray worker actor (not started: its part writing only) over ``store``, with a
    writer thread, the epochs of the parts it reports in frames of their own kept in
    ``reports``; and the worker it hosts."""
    from timely.backends.ray import WorkerActor

    actor = WorkerActor()
    host = _Host()
    actor.worker = host  # type: ignore[assignment]
    actor.store = store
    actor.writer = concurrent.futures.ThreadPoolExecutor(1)
    actor.pending_writes = []
    actor._report = lambda outputs, parts, end: reports.extend(e for e, _ in parts)  # type: ignore[method-assign]
    return actor, host


def sized(epoch: int, size: int) -> dict[str, Any]:
    """A part of ``size`` encoded bytes."""
    return {**part(epoch), "vertices": {1: b"x" * size}}


def test_on_ray_a_small_part_is_written_on_the_loop_unless_one_before_is_on_the_thread() -> None:
    """A Ray worker actor writes a small part on its loop, reported in the step's own
    frame, and a large one on its writer thread, reported in a frame of its own once
    written; a part completed while one is still on the thread, or written and not yet
    reported, follows it there, so parts are written and reported in epoch order.
    Mutation checks: a small part written on the loop whatever is on the thread is
    written before the large one before it (caught by the assertion after the second
    step); a thread's part never counted as reported sends every later part there
    (caught by the last). That the loop sends a step's parts in its frame is checked on
    Ray by ``test_exactly_once.py``'s checkpoint-interval test: with parts sent only at
    the run's end it commits once (caught)."""
    import asyncio

    gates = {e: threading.Event() for e in range(5)}
    for e in (0, 2, 3, 4):
        gates[e].set()  # only the large part's write waits for the test
    store = GatedStore(gates)
    reports: list[int] = []
    actor, host = _ray_actor(store, reports)

    def step(*parts: tuple[int, int]) -> list[int]:
        """A step completing ``parts`` (epoch, size): the epochs its frame reports."""
        host.parts = [(e, sized(e, size)) for e, size in parts]
        actor._write_parts()
        return [e for e, _ in actor._take_written()]

    async def steps() -> None:
        actor.loop = asyncio.get_running_loop()
        assert step((0, 10), (1, 2 << 20)) == [0]  # the small one at once, on the loop
        assert store.written == [0]
        assert step((2, 10)) == []  # while the large one waits on its gate: on the thread
        assert store.written == [0]
        assert step((3, 10)) == []
        await asyncio.sleep(0)
        assert reports == []
        gates[1].set()
        for fut in actor.pending_writes:
            await asyncio.wrap_future(fut)
        await asyncio.sleep(0)
        assert store.written == [0, 1, 2, 3] and reports == [1, 2, 3]
        assert step((4, 10)) == [4]  # nothing on the thread: on the loop again
        assert store.written[-1] == 4 and actor.pending_writes == []  # (the done ones read)

    try:
        asyncio.run(steps())
    finally:
        actor.writer.shutdown(wait=False)
        for gate in gates.values():
            gate.set()


def test_on_ray_a_write_that_failed_on_the_thread_fails_the_next_step() -> None:
    """A part the writer thread could not write (a full disk) fails the run at the next
    step that completes parts, not only at the run's end; a part written since would
    only wait behind it on the thread. Mutation check: finished writes left unread let
    the step go on (caught by ``pytest.raises``)."""
    import asyncio

    class FullStore(CheckpointStore):
        def write_part(self, epoch: int, *a: Any) -> Any:
            raise OSError(28, "No space left on device")

    actor, host = _ray_actor(FullStore("unused"), [])

    async def steps() -> None:
        actor.loop = asyncio.get_running_loop()
        host.parts = [(0, sized(0, 2 << 20))]
        actor._write_parts()  # large: on the thread, where it fails
        concurrent.futures.wait(actor.pending_writes)
        host.parts = [(1, sized(1, 1))]
        with pytest.raises(OSError, match="No space left"):
            actor._write_parts()

    try:
        asyncio.run(steps())
    finally:
        actor.writer.shutdown(wait=True)
