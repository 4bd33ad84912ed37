"""Property tests for ``progress.timestamp``: the product partial order, ``join`` and ``meet``.

Every check compares against a brute-force model written out here: the product order is
``all(x <= y)`` coordinate by coordinate, and bounds are checked against every candidate
of a small grid.
"""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from progress.timestamp import Timestamp, join, less_equal, less_than, meet

SMALL = st.integers(min_value=0, max_value=4)
"""Small coordinates, so that random pairs are often comparable (and often equal)."""

WIDE = st.integers(min_value=-(10**9), max_value=10**9)


def model_le(a: Timestamp, b: Timestamp) -> bool:
    """The product order, spelled out."""
    assert len(a) == len(b)
    return all(x <= y for x, y in zip(a, b))


def model_lt(a: Timestamp, b: Timestamp) -> bool:
    return model_le(a, b) and any(x < y for x, y in zip(a, b))


@cache
def timestamps(length: int, values: st.SearchStrategy[int] = SMALL) -> st.SearchStrategy[Timestamp]:
    return st.tuples(*[values] * length)


@st.composite
def same_depth(
    draw: st.DrawFn,
    count: int,
    values: st.SearchStrategy[int] = SMALL,
    max_length: int = 4,
) -> tuple[Timestamp, ...]:
    """``count`` timestamps of one common length (1 to ``max_length``)."""
    length = draw(st.integers(min_value=1, max_value=max_length))
    return tuple(draw(timestamps(length, values)) for _ in range(count))


OFFSET = st.integers(min_value=0, max_value=3)


def offsets(length: int) -> st.SearchStrategy[Timestamp]:
    """Non-negative coordinate-wise offsets, to build ``a <= b`` pairs on purpose."""
    return timestamps(length, OFFSET)


def add(a: Timestamp, d: Timestamp) -> Timestamp:
    return tuple(x + y for x, y in zip(a, d))


def grid(length: int, top: int) -> list[Timestamp]:
    """Every timestamp of ``length`` with coordinates in ``0..top``."""
    return [tuple(c) for c in itertools.product(range(top + 1), repeat=length)]


# --- the product order -----------------------------------------------------------------


@given(same_depth(2))
def test_product_order_on_pairs(pair: tuple[Timestamp, ...]) -> None:
    a, b = pair
    # less_equal is the coordinate-wise order, and antisymmetric.
    assert less_equal(a, b) == model_le(a, b)
    assert (less_equal(a, b) and less_equal(b, a)) == (a == b)
    # less_than is its strict part.
    assert less_than(a, b) == model_lt(a, b)
    assert not (less_than(a, b) and less_than(b, a))
    # The lexicographic order of tuples extends it.
    if less_equal(a, b):
        assert a <= b
    if less_than(a, b):
        assert a < b


@given(same_depth(2, WIDE))
def test_product_order_on_wide_values(pair: tuple[Timestamp, ...]) -> None:
    a, b = pair
    assert less_equal(a, b) == model_le(a, b)
    assert less_than(a, b) == model_lt(a, b)
    # Reflexive, and never strictly below itself.
    assert less_equal(a, a)
    assert not less_than(a, a)


@given(same_depth(3, st.integers(min_value=0, max_value=2)))
def test_less_equal_is_transitive(triple: tuple[Timestamp, ...]) -> None:
    a, b, c = triple
    if less_equal(a, b) and less_equal(b, c):
        assert less_equal(a, c)


@given(st.data())
def test_built_chains_are_ordered(data: st.DataObject) -> None:
    (a,) = data.draw(same_depth(1, WIDE))
    b = add(a, data.draw(offsets(len(a))))
    c = add(b, data.draw(offsets(len(a))))
    assert less_equal(a, b)
    assert less_equal(b, c)
    assert less_equal(a, c)
    assert less_than(a, c) == (a != c)
    # The lexicographic order extends the product order.
    assert a <= b <= c


# --- join and meet ---------------------------------------------------------------------


@given(same_depth(2, max_length=3))
def test_join_is_the_least_upper_bound(pair: tuple[Timestamp, ...]) -> None:
    a, b = pair
    j = join(a, b)
    assert len(j) == len(a)
    assert model_le(a, j)
    assert model_le(b, j)
    # Least: every upper bound in the grid is above the join, and nothing else is.
    for c in grid(len(a), 5):
        assert (model_le(a, c) and model_le(b, c)) == model_le(j, c)


@given(same_depth(2, max_length=3))
def test_meet_is_the_greatest_lower_bound(pair: tuple[Timestamp, ...]) -> None:
    a, b = pair
    m = meet(a, b)
    assert len(m) == len(a)
    assert model_le(m, a)
    assert model_le(m, b)
    for c in grid(len(a), 5):
        assert (model_le(c, a) and model_le(c, b)) == model_le(c, m)


@given(same_depth(2, WIDE))
def test_join_and_meet_are_coordinatewise_max_and_min(pair: tuple[Timestamp, ...]) -> None:
    a, b = pair
    assert join(a, b) == tuple(max(x, y) for x, y in zip(a, b))
    assert meet(a, b) == tuple(min(x, y) for x, y in zip(a, b))
    assert join(a, b) == join(b, a)
    assert meet(a, b) == meet(b, a)
    assert join(a, a) == a
    assert meet(a, a) == a


# --- depths must match -----------------------------------------------------------------


@st.composite
def different_depths(draw: st.DrawFn) -> tuple[Timestamp, Timestamp]:
    m = draw(st.integers(min_value=1, max_value=4))
    a = draw(timestamps(m))
    if draw(st.booleans()):
        # An extension agrees with ``a`` on every shared coordinate; zip alone would
        # call the two ordered.
        return a, a + draw(timestamps(draw(st.integers(min_value=1, max_value=3))))
    n = draw(st.integers(min_value=1, max_value=4).filter(lambda k: k != m))
    return a, draw(timestamps(n))


@given(different_depths())
def test_comparing_different_depths_raises(pair: tuple[Timestamp, Timestamp]) -> None:
    a, b = pair
    for x, y in ((a, b), (b, a)):
        with pytest.raises(ValueError):
            less_equal(x, y)
        with pytest.raises(ValueError):
            less_than(x, y)
        with pytest.raises(ValueError):
            join(x, y)
        with pytest.raises(ValueError):
            meet(x, y)
