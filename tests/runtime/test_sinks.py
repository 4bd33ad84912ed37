"""The Sink interface: per-epoch writes on the workers, one commit at the end of a run."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timely import Dataflow, GraphBuildError, Sink, UserFunctionError


class MemorySink(Sink):
    """Records writes and commits in class-level lists (the inline backend shares them)."""

    writes: ClassVar[list[tuple[int, int, int, list[Any]]]] = []
    commits: ClassVar[list[int | None]] = []

    def write(self, worker: int, workers: int, epoch: int, records: list[Any]) -> None:
        MemorySink.writes.append((worker, workers, epoch, sorted(records)))

    def commit(self, epoch: int | None) -> None:
        MemorySink.commits.append(epoch)


@settings(deadline=None)
@given(
    epochs=st.lists(st.lists(st.integers(0, 50), max_size=8), min_size=1, max_size=5),
    workers=st.integers(1, 3),
)
def test_each_epoch_is_written_once_per_worker_then_committed(
    epochs: list[list[int]], workers: int
) -> None:
    MemorySink.writes, MemorySink.commits = [], []
    flow = Dataflow("sink")
    handle = flow.new_input()
    handle.stream.exchange(lambda x: x).sink(MemorySink())
    for e, records in enumerate(epochs):
        handle.advance_to(e)
        handle.send(records)
    flow.run(workers=workers, backend="inline")
    seen = {(w, e) for w, _, e, _ in MemorySink.writes}
    assert len(seen) == len(MemorySink.writes), "an epoch was written twice by one worker"
    assert all(n == workers and recs for _, n, _, recs in MemorySink.writes)
    for e, records in enumerate(epochs):
        got = sorted(r for _, _, ep, recs in MemorySink.writes if ep == e for r in recs)
        assert got == sorted(records)
    assert MemorySink.commits == [None]


class FailingSink(Sink):
    def write(self, worker: int, workers: int, epoch: int, records: list[Any]) -> None:
        raise OSError("disk full")


def test_a_failing_write_names_the_step_and_epoch() -> None:
    flow = Dataflow("sink")
    handle = flow.new_input()
    handle.stream.sink(FailingSink(), name="to-disk")
    handle.send([1])
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=1, backend="inline")
    assert "to-disk" in str(info.value) and "(0,)" in str(info.value)


def test_sink_must_be_a_sink() -> None:
    flow = Dataflow("sink")
    handle = flow.new_input()
    with pytest.raises(GraphBuildError, match=r"timely\.Sink"):
        handle.stream.sink(print)  # type: ignore[arg-type]
