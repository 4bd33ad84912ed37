"""Property tests for ``progress.change_batch.ChangeBatch`` against a brute-force model.

The model is a plain dict of net counts: add each delta, delete an item whose count
reaches zero.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Hashable, Iterable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from progress.change_batch import ChangeBatch

Item = Hashable
Op = tuple[Any, ...]

items = st.one_of(
    st.integers(min_value=0, max_value=5),
    st.tuples(st.integers(min_value=0, max_value=2), st.integers(min_value=0, max_value=2)),
)
deltas = st.integers(min_value=-3, max_value=3)
updates = st.lists(st.tuples(items, deltas), max_size=12)

ops: st.SearchStrategy[Op] = st.one_of(
    st.tuples(st.just("update"), items, deltas),
    st.tuples(st.just("extend"), updates),
    st.tuples(st.just("drain")),
    st.tuples(st.just("get"), items),
    st.tuples(st.just("contains"), items),
    st.tuples(st.just("len")),
    st.tuples(st.just("is_empty")),
    st.tuples(st.just("items")),
    st.tuples(st.just("iter")),
    st.tuples(st.just("clear")),
)


def model_add(model: dict[Item, int], item: Item, delta: int) -> None:
    value = model.get(item, 0) + delta
    if value == 0:
        model.pop(item, None)
    else:
        model[item] = value


def net_counts(pairs: Iterable[tuple[Item, int]]) -> dict[Item, int]:
    """Sum the deltas per item with a Counter, then drop the zeros."""
    total: Counter[Item] = Counter()
    for item, delta in pairs:
        total[item] += delta
    return {item: count for item, count in total.items() if count != 0}


def as_dict(pairs: list[tuple[Item, int]]) -> dict[Item, int]:
    """``pairs`` as a dict, insisting that no item appears twice."""
    out = dict(pairs)
    assert len(out) == len(pairs), f"an item listed twice: {pairs!r}"
    return out


def check_against(batch: ChangeBatch[Item], model: dict[Item, int]) -> None:
    listed = batch.items()
    assert all(delta != 0 for _, delta in listed), f"a zero count is stored: {listed!r}"
    assert as_dict(listed) == model
    assert len(batch) == len(model)
    assert batch.is_empty() == (not model)


@given(st.lists(ops, max_size=40))
def test_random_operations_match_the_model(program: list[Op]) -> None:
    batch: ChangeBatch[Item] = ChangeBatch()
    model: dict[Item, int] = {}
    for op in program:
        kind = op[0]
        if kind == "update":
            _, item, delta = op
            batch.update(item, delta)
            model_add(model, item, delta)
        elif kind == "extend":
            for item, delta in op[1]:
                model_add(model, item, delta)
            batch.extend(op[1])
        elif kind == "drain":
            drained = batch.drain()
            assert all(delta != 0 for _, delta in drained)
            assert as_dict(drained) == model
            model = {}
            assert batch.is_empty()
            assert len(batch) == 0
            assert batch.drain() == []
        elif kind == "get":
            assert batch.get(op[1]) == model.get(op[1], 0)
        elif kind == "contains":
            assert (op[1] in batch) == (op[1] in model)
        elif kind == "len":
            assert len(batch) == len(model)
        elif kind == "is_empty":
            assert batch.is_empty() == (not model)
        elif kind == "items":
            assert as_dict(batch.items()) == model
        elif kind == "iter":
            assert as_dict(list(batch)) == model
        elif kind == "clear":
            batch.clear()
            model = {}
        else:  # pragma: no cover - the strategy only makes the kinds above
            raise AssertionError(kind)
        check_against(batch, model)


@given(updates)
def test_construction_consolidates(pairs: list[tuple[Item, int]]) -> None:
    batch = ChangeBatch(pairs)
    expected = net_counts(pairs)
    check_against(batch, expected)
    for item, _ in pairs:
        assert batch.get(item) == expected.get(item, 0)


@given(updates, st.randoms(use_true_random=False))
def test_order_of_updates_does_not_matter(
    pairs: list[tuple[Item, int]], rnd: random.Random
) -> None:
    shuffled = list(pairs)
    rnd.shuffle(shuffled)
    assert ChangeBatch(pairs) == ChangeBatch(shuffled)


@given(updates, updates)
def test_equality_is_equality_of_net_counts(
    left: list[tuple[Item, int]], right: list[tuple[Item, int]]
) -> None:
    assert (ChangeBatch(left) == ChangeBatch(right)) == (net_counts(left) == net_counts(right))


@given(updates)
def test_updates_followed_by_their_negation_cancel(pairs: list[tuple[Item, int]]) -> None:
    batch = ChangeBatch(pairs)
    batch.extend((item, -delta) for item, delta in reversed(pairs))
    assert batch.is_empty()
    assert len(batch) == 0
    assert batch.items() == []
    assert batch.drain() == []


@given(updates)
def test_drain_returns_everything_once_and_empties(pairs: list[tuple[Item, int]]) -> None:
    batch = ChangeBatch(pairs)
    drained = batch.drain()
    assert as_dict(drained) == net_counts(pairs)
    assert batch.is_empty()
    assert batch.drain() == []
    # The batch is usable again after draining, and starts from nothing.
    batch.extend(pairs)
    assert as_dict(batch.items()) == net_counts(pairs)
