"""The exchange channel's routing: every record goes to ``stable_hash(key) % workers``,
in its batch's order, whatever the owner memory holds (fresh, full and cleared, or
filled for another worker count); a deliberately broken memory is caught."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import timely.channels as channels
from timely import stable_hash
from timely.channels import Exchange

keys = st.one_of(
    st.integers(-(2**70), 2**70),
    st.text(max_size=6),
    st.booleans(),
    st.floats(allow_nan=False),
    st.tuples(st.integers(0, 3), st.text(max_size=2)),
    st.none(),
)
batches = st.lists(st.lists(st.tuples(keys, st.integers()), max_size=40), max_size=6)


def _first(record: tuple[Any, Any]) -> Any:
    return record[0]


def expected(batch: list[Any], workers: int) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for record in batch:
        out.setdefault(stable_hash(record[0]) % workers, []).append(record)
    return out


def check(channel: Exchange, runs: list[tuple[int, list[Any]]]) -> None:
    for workers, batch in runs:
        assert channel.route(batch, workers, 0) == (
            expected(batch, workers) if workers > 1 else {0: batch}
        )


@settings(max_examples=200, deadline=None)
@given(batches, st.lists(st.integers(1, 20), min_size=1, max_size=6), st.integers(1, 8))
def test_exchange_routes_by_stable_hash_whatever_it_remembers(
    data: list[list[Any]], worker_counts: list[int], bound: int
) -> None:
    channel = Exchange(_first)
    runs = [(worker_counts[i % len(worker_counts)], b) for i, b in enumerate(data)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(channels, "_OWNER_CACHE", bound)  # small: the memory fills and clears
        check(channel, runs)


def test_a_memory_kept_across_worker_counts_is_caught() -> None:
    """Mutation check: an owner memory that is not cleared when the worker count changes
    routes a remembered key to its old worker, and the property above sees it."""
    batch = [(k, 0) for k in ("a", "b", "c", "d", "e", "f", "g", "h")]
    broken = Exchange(_first)
    broken.route(batch, 2, 0)
    broken._owners_for = 3  # as if it had been cleared for 3 but kept the owners for 2
    with pytest.raises(AssertionError):
        check(broken, [(3, batch)])


@settings(max_examples=100, deadline=None)
@given(st.lists(keys, max_size=60), st.integers(2, 20))
def test_exchange_without_a_key_routes_by_the_record_itself(
    records: list[Any], workers: int
) -> None:
    got = Exchange(None).route(records, workers, 0)
    want: dict[int, list[Any]] = {}
    for r in records:
        want.setdefault(stable_hash(r) % workers, []).append(r)
    assert got == want


def test_stream_exchange_without_a_key_meets_equal_records_on_one_worker() -> None:
    import operators  # noqa: F401  (count_by)
    from timely import Dataflow

    flow = Dataflow("by-record")
    nums = flow.new_input("nums")
    nums.stream.exchange().count_by(lambda x: x).collect("counts")
    nums.send([3, 1, 3, 2, 3, 1] * 50)
    counts = flow.run(workers=3, backend="inline")["counts"]
    assert sorted(c for _, c in counts) == [(1, 100), (2, 50), (3, 150)]
