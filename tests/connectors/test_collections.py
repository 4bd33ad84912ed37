"""from_collection and CollectingSink, against plain-Python references."""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.collections import CollectingSink, from_collection
from tests.connectors.util import batches, records, worker_share
from timely import ConfigError, Dataflow, UserFunctionError

items_st = st.lists(st.integers(-50, 50), max_size=40)
epoch_fns = st.sampled_from([None, 3, 7])  # None: all at epoch 0; k: epoch = x % k


def epoch_fn(k: int | None) -> Any:
    return None if k is None else (lambda x: x % k)


@given(
    items=items_st,
    k=epoch_fns,
    partitions=st.integers(1, 5),
    batch_size=st.integers(1, 4),
    workers=st.integers(1, 3),
    seed=st.integers(0, 9),
)
def test_every_item_arrives_once_at_its_epoch(
    items: list[int], k: int | None, partitions: int, batch_size: int, workers: int, seed: int
) -> None:
    flow = Dataflow("collection")
    src = from_collection(items, epoch_of=epoch_fn(k), partitions=partitions, batch_size=batch_size)
    flow.source(src).collect("out")
    out = flow.run(workers=workers, backend="inline", seed=seed)
    want = Counter((0 if k is None else x % k, x) for x in items)
    assert Counter(out["out"]) == want


@given(items=items_st, k=epoch_fns, partitions=st.integers(1, 5), batch_size=st.integers(1, 4))
def test_partitions_are_round_robin_and_stably_sorted_by_epoch(
    items: list[int], k: int | None, partitions: int, batch_size: int
) -> None:
    src = from_collection(items, epoch_of=epoch_fn(k), partitions=partitions, batch_size=batch_size)
    assert src.partitions() == partitions
    for p in range(partitions):
        mine = [x for i, x in enumerate(items) if i % partitions == p]
        want = sorted(((0 if k is None else x % k, x) for x in mine), key=lambda t: t[0])
        got = batches(src, p)
        assert [(e, r) for e, recs, _ in got for r in recs] == want
        for e, recs, _ in got:
            assert 1 <= len(recs) <= batch_size
            assert all((0 if k is None else x % k) == e for x in recs)  # one epoch per batch


@given(items=items_st, k=epoch_fns, partitions=st.integers(1, 4), workers=st.integers(1, 3))
def test_two_reads_give_each_worker_the_same_records(
    items: list[int], k: int | None, partitions: int, workers: int
) -> None:
    a = from_collection(items, epoch_of=epoch_fn(k), partitions=partitions, batch_size=3)
    b = from_collection(list(items), epoch_of=epoch_fn(k), partitions=partitions, batch_size=3)
    shares = [worker_share(a, w, workers) for w in range(workers)]
    assert shares == [worker_share(b, w, workers) for w in range(workers)]
    assert Counter(r for share in shares for _, r in share) == Counter(items)


@given(items=items_st, k=epoch_fns, cut=st.integers(0, 20), batch_size=st.integers(1, 4))
def test_reading_from_a_mid_offset_gives_exactly_the_rest(
    items: list[int], k: int | None, cut: int, batch_size: int
) -> None:
    src = from_collection(items, epoch_of=epoch_fn(k), partitions=2, batch_size=batch_size)
    for p in range(2):
        full = batches(src, p)
        cut_at = min(cut, len(full))
        offset = full[cut_at - 1][2] if cut_at else None
        offset = msgpack.unpackb(msgpack.packb(offset))  # offsets survive a checkpoint store
        again = from_collection(items, epoch_of=epoch_fn(k), partitions=2, batch_size=batch_size)
        assert records(again, p, offset) == [(e, r) for e, recs, _ in full[cut_at:] for r in recs]


def test_a_failing_epoch_of_names_the_function_and_the_item() -> None:
    def bad(x: int) -> int:
        return 10 // x

    with pytest.raises(UserFunctionError) as info:
        from_collection([3, 0, 1], epoch_of=bad)
    msg = str(info.value)
    assert "test_collections.py" in msg and "record 0" in msg and "ZeroDivisionError" in msg


@pytest.mark.parametrize("epoch", [-1, 1.5, "2", True])
def test_epoch_of_must_return_a_non_negative_int(epoch: Any) -> None:
    with pytest.raises(ValueError, match="int >= 0"):
        from_collection(["a"], epoch_of=lambda _: epoch)


@pytest.mark.parametrize("kw", [{"partitions": 0}, {"batch_size": 0}, {"partitions": 2.0}])
def test_bad_sizes_fail_early(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=">= 1"):
        from_collection([1], **kw)


@given(
    epochs=st.lists(st.lists(st.integers(0, 9), max_size=6), min_size=1, max_size=4),
    workers=st.integers(1, 3),
)
def test_collecting_sink_holds_each_epoch_once_after_the_run(
    epochs: list[list[int]], workers: int
) -> None:
    items = [(e, x) for e, xs in enumerate(epochs) for x in xs]
    sink = CollectingSink()
    flow = Dataflow("collect")
    flow.source(from_collection(items, epoch_of=lambda t: t[0])).exchange(lambda t: t[1]).sink(sink)
    flow.run(workers=workers, backend="inline")
    assert Counter(sink.committed()) == Counter((e, (e, x)) for e, x in items)
    assert [e for e, _ in sink.committed()] == sorted(e for e, _ in sink.committed())


def test_collecting_sink_two_phase_semantics() -> None:
    sink = CollectingSink()
    sink.write(0, 2, 0, ["a"])
    sink.write(1, 2, 0, ["b"])
    sink.write(0, 2, 1, ["c"])
    sink.write(0, 2, 2, ["d"])
    assert sink.committed() == []  # nothing is visible before a commit
    sink.write(0, 2, 1, ["c2"])  # a replay replaces the first write
    sink.commit(1)
    assert sink.committed() == [(0, "a"), (0, "b"), (1, "c2")]
    sink.abort_after(0)  # epoch 1 is committed: it stays; epoch 2 goes
    sink.commit(None)
    assert sink.committed() == [(0, "a"), (0, "b"), (1, "c2")]
    sink.write(1, 2, 2, ["e"])
    sink.commit(0)  # the commit point never moves back
    assert sink.committed_through == 1
    sink.commit(None)
    assert sink.committed()[-1] == (2, "e")


def test_collecting_sink_refuses_ray(ray_local: Any) -> None:
    flow = Dataflow("collect-on-ray")
    flow.source(from_collection([1, 2, 3])).sink(CollectingSink())
    with pytest.raises(UserFunctionError, match="backend='inline'"):
        flow.run(workers=1, backend="ray")
