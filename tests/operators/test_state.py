"""KeyedState: snapshots round-trip (through the wire format too) and re-partition by key."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators import KeyedState, StatefulVertex, owner, repartition
from operators.join import Join
from operators.keyed import GroupBy, Merge
from operators.stateless import Distinct
from timely import stable_hash
from timely.comm import serialization
from timely.routing.bins import DEFAULT_BINS

keys = st.one_of(
    st.integers(-5, 50), st.text(max_size=3), st.tuples(st.integers(0, 3), st.text(max_size=2))
)
values = st.one_of(st.integers(), st.lists(st.integers(), max_size=3), st.none())
tables = st.dictionaries(
    st.tuples(st.integers(0, 5)), st.dictionaries(keys, values, max_size=5), max_size=3
)


def _state(data: dict[tuple[int, ...], dict[Any, Any]]) -> KeyedState[Any]:
    s: KeyedState[Any] = KeyedState()
    for time, table in data.items():
        s.table(time).update(table)
    return s


def _contents(s: KeyedState[Any]) -> set[tuple[Any, ...]]:
    return {(t, k, repr(v)) for t, k, v in s.items()}


@given(data=tables)
def test_snapshot_restore_round_trips_through_the_wire_format(
    data: dict[tuple[int, ...], dict[Any, Any]],
) -> None:
    s = _state(data)
    snap = serialization.decode(serialization.encode(s.snapshot()))
    back: KeyedState[Any] = KeyedState()
    back.restore(snap)
    assert _contents(back) == _contents(s)
    assert back.times() == sorted(t for t in data)


def test_restore_rebuilds_tuple_keys_from_plain_lists() -> None:
    s: KeyedState[Any] = KeyedState()
    s.restore({"format": 2, "times": [[[2], [[1, "a"]], [5]]]})
    assert s.get((2,)) == {(1, "a"): 5}
    with pytest.raises(ValueError, match="format"):
        s.restore({"format": 99, "times": []})


@given(data=tables, old=st.integers(1, 4), new=st.integers(1, 4))
def test_repartition_sends_each_key_to_its_exchange_owner(
    data: dict[tuple[int, ...], dict[Any, Any]], old: int, new: int
) -> None:
    # Split as the exchange channel would have, then rescale.
    shards = [
        _state({t: {k: v for k, v in tb.items() if owner(k, old) == w} for t, tb in data.items()})
        for w in range(old)
    ]
    parts = repartition([s.snapshot() for s in shards], new)
    assert len(parts) == new
    union: set[tuple[Any, ...]] = set()
    for w, snap in enumerate(parts):
        s: KeyedState[Any] = KeyedState()
        s.restore(snap)
        assert all(stable_hash(k) % DEFAULT_BINS % new == w for _, k, _ in s.items())
        union |= _contents(s)
    assert union == _contents(_state(data))


def test_repartition_refuses_state_not_keyed() -> None:
    s = _state({(0,): {1: 1}})
    with pytest.raises(ValueError, match="two snapshots"):
        repartition([s.snapshot(), s.snapshot()], 2)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Distinct(lambda r: r),
        lambda: GroupBy(lambda r: r, lambda k, vs: vs),
        lambda: Merge(lambda a, b: a + b),
        lambda: Join(lambda r: r, lambda r: r, lambda a, b: (a, b)),
    ],
)
def test_every_stateful_operator_snapshots_the_same_way(make: Any) -> None:
    v = make()
    assert isinstance(v, StatefulVertex)
    ((name, table),) = v.states().items()
    table.table((1,))["k"] = [1, 2]
    snap = serialization.decode(serialization.encode(v.snapshot()))
    fresh = make()
    fresh.restore(snap)
    assert fresh.states()[name].get((1,)) == {"k": [1, 2]}
    with pytest.raises(ValueError, match="does not match"):
        fresh.restore({})
