"""Windowed aggregates on tables (``group_by(...).window_agg(...)``) against a plain-Python
windowed reference: random rows with nulls, empty batches, epochs, 1-4 workers, random
delivery orders, tumbling and sliding windows; a window off by one epoch told apart;
graph errors."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, table_input
from tests.table.test_operators import COMMON, EPOCHS, SCHEMA, rows_of, run, same
from tests.table.test_running import AGGS, FIRST_LAST, aggregates
from timely import Dataflow, GraphBuildError


def _windowed(epochs: Any, size: int, slide: int) -> dict[int, list[dict[str, Any]]]:
    """Per window end ``w`` (a multiple of ``slide``), each key with rows in the epochs
    ``(w - size, w]`` and its aggregates over them."""
    by_epoch = rows_of(epochs)
    want: dict[int, list[dict[str, Any]]] = {}
    for w in range(0, len(by_epoch) + size, slide):
        groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for e in range(w - size + 1, w + 1):
            for r in by_epoch.get(e, []):
                groups[r["k"]].append(r)
        out = []
        for k, g in groups.items():
            out.append(aggregates(k, g))
        if out:
            want[w] = out
    return want


SIZES = st.integers(1, 4).flatmap(
    lambda size: st.tuples(st.just(size), st.none() | st.integers(1, size))
)
"""A window size and a slide (None: tumbling)."""


@COMMON
@given(EPOCHS, SIZES, st.integers(1, 4), st.integers(0, 9))
def test_window_agg_aggregates_each_key_over_its_windows(
    epochs: Any, sizes: tuple[int, int | None], workers: int, seed: int
) -> None:
    size, slide = sizes
    got = run(lambda t: t.group_by("k").window_agg(size, *AGGS, slide=slide), epochs, workers, seed)
    same(got, _windowed(epochs, size, size if slide is None else slide))


def test_a_window_off_by_one_epoch_is_told_apart() -> None:
    """The property can fail: windows one epoch longer, or ending one epoch earlier, are
    not the reference on data where a key comes back."""
    epochs = [[[{"k": "a", "x": e, "y": 0.5}]] for e in range(4)]
    got = run(lambda t: t.group_by("k").window_agg(2, *AGGS, slide=1), epochs, 2, 0)
    same(got, _windowed(epochs, 2, 1))
    with pytest.raises(AssertionError):
        same(got, _windowed(epochs, 3, 1))
    shifted = {w + 1: rows for w, rows in _windowed(epochs, 2, 1).items()}
    with pytest.raises(AssertionError):
        same(got, shifted)


@COMMON
@given(FIRST_LAST, st.integers(1, 3), st.integers(0, 9))
def test_window_first_and_last_are_the_window_s_first_and_last_values(
    epochs: list[dict[str, int | None]], workers: int, seed: int
) -> None:
    batches = [[[{"k": k, "x": x, "y": None} for k, x in e.items()]] for e in epochs]
    got = run(
        lambda t: t.group_by("k").window_agg(
            3, col("x").first().alias("f"), col("x").last().alias("l"), slide=2
        ),
        batches,
        workers,
        seed,
    )
    want: dict[int, list[dict[str, Any]]] = {}
    for w in range(0, len(epochs) + 3, 2):
        values: dict[str, list[int | None]] = defaultdict(list)
        for e in range(max(w - 2, 0), min(w + 1, len(epochs))):
            for k, x in epochs[e].items():
                values[k].append(x)
        got_values = {k: [x for x in xs if x is not None] for k, xs in values.items()}
        want[w] = [
            {"k": k, "f": xs[0] if xs else None, "l": xs[-1] if xs else None}
            for k, xs in got_values.items()
        ]
    same(got, want)


def test_window_agg_refuses_what_it_cannot_keep() -> None:
    flow = Dataflow("bad")
    t = table_input(flow, SCHEMA).table
    with pytest.raises(GraphBuildError, match=r"window_agg.*list"):
        t.group_by("k").window_agg(2, col("x").list())
    with pytest.raises(GraphBuildError, match="group_by keys"):
        t.group_by().window_agg(2, count())
    with pytest.raises(GraphBuildError, match="'nope'"):
        t.group_by("nope").window_agg(2, count())
    with pytest.raises(GraphBuildError, match="outside iterate"):
        t.iterate(lambda inner: inner.group_by("k").window_agg(2, count()).select("k"), rounds=2)
    with pytest.raises(GraphBuildError, match="size must be"):
        t.group_by("k").window_agg(0, count())
    with pytest.raises(GraphBuildError, match="slide 3 > size 2"):
        t.group_by("k").window_agg(2, count(), slide=3)
