"""The public API on the inline backend: capabilities, sources, sessions, subscribe, probes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timely import Capability, Dataflow, Source, Vertex, exchange, stable_hash


class Delay(Vertex):
    """Re-emits each epoch's records one epoch later, through a downgraded capability."""

    def __init__(self) -> None:
        self.held: dict[tuple[int, ...], tuple[Capability, list[Any]]] = {}

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        if time not in self.held:
            cap = self.retain()
            cap.downgrade((time[0] + 1,))
            self.held[time] = (cap, [])
            self.notify_at(time)
        self.held[time][1].extend(records)

    def on_notify(self, time: tuple[int, ...]) -> None:
        cap, records = self.held.pop(time)
        cap.send_by(0, records)
        cap.drop()


def test_capabilities_retain_downgrade_drop() -> None:
    flow = Dataflow("delay")
    inp = flow.new_input()
    inp.stream.unary(Delay).collect("out")
    for e in range(3):
        inp.advance_to(e)
        inp.send([10 * e, 10 * e + 1])
    out = flow.run(workers=2, backend="inline", seed=5)
    assert sorted(out["out"]) == [(1, 0), (1, 1), (2, 10), (2, 11), (3, 20), (3, 21)]


class Numbers(Source):
    """``parts`` partitions; partition p yields epochs 0..epochs-1, records p*100+e*10+i."""

    def __init__(self, parts: int, epochs: int) -> None:
        self.parts, self.epochs = parts, epochs

    def partitions(self) -> int:
        return self.parts

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        e = 0 if offset is None else offset
        if e >= self.epochs:
            return None
        return e, [partition * 100 + e * 10 + i for i in range(3)], e + 1


@given(
    parts=st.integers(1, 5),
    epochs=st.integers(1, 4),
    workers=st.integers(1, 4),
    seed=st.integers(0, 99),
)
def test_source_partitions_are_read_exactly_once(
    parts: int, epochs: int, workers: int, seed: int
) -> None:
    flow = Dataflow("source")
    flow.source(Numbers(parts, epochs)).exchange(lambda x: x).collect("out")
    out = flow.run(workers=workers, backend="inline", seed=seed)
    want = sorted(
        (e, p * 100 + e * 10 + i) for p in range(parts) for e in range(epochs) for i in range(3)
    )
    assert sorted(out["out"]) == want


def test_streaming_session_subscribe_sees_each_epoch_once_in_order() -> None:
    seen: list[tuple[int, list[int]]] = []
    flow = Dataflow("live")
    inp = flow.new_input()
    inp.stream.exchange(lambda x: x % 3).subscribe(lambda e, recs: seen.append((e, sorted(recs))))
    with flow.activate(workers=3, backend="inline", seed=2) as session:
        inp.send([1, 2, 3])
        inp.advance_to(1)
        assert seen == [(0, [1, 2, 3])]  # epoch 0 completed while the dataflow runs
        inp.send([4])
        inp.advance_to(5)
        assert seen == [(0, [1, 2, 3]), (1, [4])]
        inp.send([5, 6])
        inp.close()
        session.join()
    assert seen == [(0, [1, 2, 3]), (1, [4]), (5, [5, 6])]


def test_nested_loops_reach_their_bounds() -> None:
    class Inc(Vertex):
        def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
            self.send_by(0, [x + 1 for x in records], time)

    flow = Dataflow("nested")
    inp = flow.new_input()
    out = inp.stream.iterate(
        lambda s: s.iterate(lambda t: t.unary(Inc), max_iters=3).exchange(lambda x: x), max_iters=2
    )
    out.collect("out")
    inp.send([0])
    res = flow.run(workers=2, backend="inline", seed=1)
    # Outer round 1: inner emits 1, 2, 3; each re-enters for outer round 2: +1..+3 again.
    want = Counter([1, 2, 3] + [x + k for x in (1, 2, 3) for k in (1, 2, 3)])
    assert Counter(res.records("out")) == want


def test_stable_hash_is_the_same_in_another_process() -> None:
    keys = ["word", b"bytes", 42, -7, 3.5, (1, "a", None), True, ("nested", (1, 2))]
    here = [stable_hash(k) for k in keys]
    code = f"from timely import stable_hash;print([stable_hash(k) for k in {keys!r}])"
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert there.strip() == repr(here)


def test_exchange_puts_a_key_on_one_worker() -> None:
    class Tag(Vertex):
        def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
            self.send_by(0, [(r, self.worker) for r in records], time)

    flow = Dataflow("keys")
    inp = flow.new_input()
    inp.stream.unary(Tag, channel=exchange(lambda w: w)).collect("out")
    inp.send(["a", "b", "c", "a", "b", "a"] * 3)
    res = flow.run(workers=4, backend="inline", seed=9)
    owners: dict[str, set[int]] = {}
    for word, worker in res.records("out"):
        owners.setdefault(word, set()).add(worker)
    assert all(len(w) == 1 for w in owners.values())
    assert {w: next(iter(s)) for w, s in owners.items()} == {w: stable_hash(w) % 4 for w in owners}


def test_operator_libraries_plug_into_stream() -> None:
    from timely import stream_method

    @stream_method
    def tag_with_epoch(stream: Any) -> Any:
        class Tag(Vertex):
            def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
                self.send_by(0, [(time[0], r) for r in records], time)

        return stream.unary(Tag, name="tag")

    flow = Dataflow("plugin")
    inp = flow.new_input()
    inp.stream.tag_with_epoch().collect("out")
    inp.advance_to(2)
    inp.send(["x"])
    assert flow.run(workers=1, backend="inline").records("out") == [(2, "x")]
    with pytest.raises(AttributeError, match="no operator 'no_such_operator'"):
        _ = inp.stream.no_such_operator


READS: list[tuple[int, int]] = []
"""How many batches ``Counted`` had read when each batch arrived downstream, and how many
records the batch held (inline: one process, so a module list is shared)."""


class Counted(Source):
    """One partition of ``n`` one-record batches, all at epoch 0; counts its reads."""

    def __init__(self, n: int, per_step: int, records: int = 4096, pause: float = 0.0) -> None:
        self.n, self.reads, self.pause = n, 0, pause
        self.batches_per_step, self.records_per_step = per_step, records
        # Only a slow read may end a step's reading early (no machine is that slow).
        self.seconds_per_step = 60.0 if pause == 0 else 0.002

    def partitions(self) -> int:
        return 1

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        i = 0 if offset is None else offset
        if i >= self.n:
            return None
        self.reads += 1
        if self.pause:
            time.sleep(self.pause)  # a read that waits on its input
        return 0, [i], i + 1


class NoteReads(Vertex):
    def __init__(self, source: Counted) -> None:
        self.source = source

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        READS.append((self.source.reads, len(records)))


@pytest.mark.parametrize(
    ("per_step", "records", "seen"),
    [
        (1, 4096, [(i, 1) for i in range(1, 7)]),
        (4, 4096, [(4, 4), (6, 2)]),
        (8, 2, [(2, 2), (4, 2), (6, 2)]),
    ],
)
def test_a_source_reads_up_to_its_batches_or_records_per_step(
    per_step: int, records: int, seen: list[tuple[int, int]]
) -> None:
    """Batches read in one step all reach the next vertex in that step, as one batch (they
    are at one epoch); how many a step reads is the source's ``batches_per_step``, or fewer
    once ``records_per_step``."""
    READS.clear()
    source = Counted(6, per_step, records)
    flow = Dataflow("paced")
    flow.source(source).unary(lambda: NoteReads(source)).collect("out")
    flow.run(workers=1, backend="inline")
    assert seen == READS


class Epochs(Counted):
    """``Counted`` with record ``i`` at epoch ``i // 3``."""

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        got = super().read(partition, offset)
        return None if got is None else (got[1][0] // 3, got[1], got[2])


class NoteBatches(Vertex):
    def __init__(self, source: Counted, seen: list[tuple[int, list[Any], Any]]) -> None:
        self.source, self.seen = source, seen

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        self.seen.append((self.source.reads, records, time))


def test_a_steps_reads_go_downstream_one_batch_an_epoch() -> None:
    """A step that reads batches of two epochs sends one batch at each, each at its own
    epoch and in the order read (the first before the source's capability passes it)."""
    source, seen = Epochs(6, 4), []
    flow = Dataflow("epochs")
    flow.source(source).unary(lambda: NoteBatches(source, seen)).collect("out")
    flow.run(workers=1, backend="inline")
    assert seen == [(4, [0, 1, 2], (0,)), (4, [3], (1,)), (6, [4, 5], (1,))]


def test_a_source_whose_reads_wait_reads_one_batch_a_step() -> None:
    """A read that takes longer than ``seconds_per_step`` ends the step's reading: a
    source waiting on its input does not hold its worker for many reads."""
    READS.clear()
    source = Counted(4, 8, pause=0.005)
    flow = Dataflow("waiting")
    flow.source(source).unary(lambda: NoteReads(source)).collect("out")
    flow.run(workers=1, backend="inline")
    assert [(i, 1) for i in range(1, 5)] == READS
