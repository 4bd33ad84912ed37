"""The exchange channel's routing: every record goes to the worker that the routing
table gives its bin, ``stable_hash(key) % bins``, in its batch's order, whatever the
bin memory holds (fresh, full and cleared, or filled for another bin count) and
whatever the table; a deliberately broken memory is caught."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import timely.routing.channels as channels
from timely import stable_hash
from timely.routing.bins import DEFAULT_BINS
from timely.routing.channels import Exchange

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


def expected(batch: list[Any], table: list[int]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for record in batch:
        out.setdefault(table[stable_hash(record[0]) % len(table)], []).append(record)
    return out


def check(channel: Exchange, runs: list[tuple[list[int], list[Any]]]) -> None:
    for table, batch in runs:
        got = channel.route_by(batch, np.asarray(table, dtype=np.intp), 0)
        assert got == expected(batch, table)


tables = st.integers(1, 40).flatmap(
    lambda bins: st.lists(st.integers(0, 20), min_size=bins, max_size=bins)
)


@settings(max_examples=200, deadline=None)
@given(batches, st.lists(tables, min_size=1, max_size=6), st.integers(1, 8))
def test_exchange_routes_by_bin_and_table_whatever_it_remembers(
    data: list[list[Any]], routing: list[list[int]], bound: int
) -> None:
    channel = Exchange(_first)
    runs = [(routing[i % len(routing)], b) for i, b in enumerate(data)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(channels, "_OWNER_CACHE", bound)  # small: the memory fills and clears
        check(channel, runs)


@settings(max_examples=50, deadline=None)
@given(batches, st.integers(2, 20))
def test_route_uses_the_default_table(data: list[list[Any]], workers: int) -> None:
    channel = Exchange(_first)
    table = [b % workers for b in range(DEFAULT_BINS)]
    for batch in data:
        assert channel.route(batch, workers, 0) == expected(batch, table)


def test_a_memory_kept_across_bin_counts_is_caught() -> None:
    """Mutation check: a bin memory that is not cleared when the bin count changes
    routes a remembered key by its old bin, and the property above sees it."""
    batch = [(k, 0) for k in ("a", "b", "c", "d", "e", "f", "g", "h")]
    broken = Exchange(_first)
    check(broken, [([0, 1], batch)])
    broken._bins_for = 3  # as if it had been cleared for 3 bins but kept those for 2
    with pytest.raises(AssertionError):
        check(broken, [([0, 1, 2], batch)])


@settings(max_examples=100, deadline=None)
@given(st.lists(keys, max_size=60), st.integers(2, 20))
def test_exchange_without_a_key_routes_by_the_record_itself(
    records: list[Any], workers: int
) -> None:
    got = Exchange(None).route(records, workers, 0)
    want: dict[int, list[Any]] = {}
    for r in records:
        want.setdefault(stable_hash(r) % DEFAULT_BINS % workers, []).append(r)
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
