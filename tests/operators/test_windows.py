"""Windows over epochs: ``window`` and ``reduce_by_window`` against plain recomputation.

Windows end at the multiples ``w`` of ``slide`` and cover the epochs ``(w - size, w]``;
the reference recomputes every window from the raw records. ``reduce_by_window`` runs
both ways, recomputed and incremental (``inverse``), and both must equal it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from operators.windows import window_ends
from tests.operators.test_properties import Feed, by_epoch, on, per_epoch, send, state_backends
from timely import Dataflow, GraphBuildError

workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)
pairs = st.tuples(st.integers(0, 3), st.integers(-5, 9))


@st.composite
def shapes(draw: st.DrawFn) -> tuple[int, int]:
    size = draw(st.integers(1, 4))
    return size, draw(st.integers(1, size))


def long_feeds(records: st.SearchStrategy[Any]) -> st.SearchStrategy[Feed]:
    """Up to 6 epochs with gaps up to 5: windows that overlap and windows that skip."""
    return st.lists(
        st.tuples(st.integers(0, 5), st.lists(records, max_size=6)), min_size=1, max_size=6
    )


def windows(data: dict[int, list[Any]], size: int, slide: int) -> dict[int, list[Any]]:
    """The reference: each window end ``w`` with the records of epochs ``(w - size, w]``."""
    last = max(data) + size
    out = {}
    for w in range(0, last + 1, slide):
        rs = [r for e, recs in data.items() if w - size < e <= w for r in recs]
        if rs:
            out[w] = rs
    return out


def test_window_ends_cover_each_epoch_in_size_windows() -> None:
    assert list(window_ends(0, 3, 1)) == [0, 1, 2]
    assert list(window_ends(4, 3, 3)) == [6]
    assert list(window_ends(6, 3, 3)) == [6]
    assert list(window_ends(5, 4, 2)) == [6, 8]
    for size in range(1, 5):
        for slide in range(1, size + 1):
            for e in range(12):
                ends = list(window_ends(e, size, slide))
                assert ends == [w for w in range(0, 20, slide) if w - size < e <= w]


@given(feed=long_feeds(pairs), shape=shapes(), w=workers, seed=seeds, state=state_backends)
def test_window_resends_records_at_every_window_end(
    feed: Feed, shape: tuple[int, int], w: int, seed: int, state: str
) -> None:
    size, slide = shape
    flow = Dataflow("window")
    inp = flow.new_input()
    win = inp.stream.window(size, slide)
    win.collect("records")
    win.count_by(lambda r: r[0]).collect("counts")
    inp.stream.window(size).collect("tumbling")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    ref = windows(by_epoch(feed), size, slide)
    assert per_epoch(out["records"]) == {e: Counter(rs) for e, rs in ref.items()}
    assert per_epoch(out["counts"]) == {
        e: Counter(Counter(k for k, _ in rs).items()) for e, rs in ref.items()
    }
    tumbling = windows(by_epoch(feed), size, size)
    assert per_epoch(out["tumbling"]) == {e: Counter(rs) for e, rs in tumbling.items()}


@given(feed=long_feeds(pairs), shape=shapes(), w=workers, seed=seeds, state=state_backends)
def test_reduce_by_window_incremental_equals_recomputation(
    feed: Feed, shape: tuple[int, int], w: int, seed: int, state: str
) -> None:
    size, slide = shape
    flow = Dataflow("reduce_by_window")
    inp = flow.new_input()
    s = inp.stream
    key, value = (lambda r: r[0]), (lambda r: r[1])
    add, sub = (lambda a, b: a + b), (lambda a, b: a - b)
    s.reduce_by_window(key, add, size, slide, value=value).collect("recomputed")
    s.reduce_by_window(key, add, size, slide, inverse=sub, value=value).collect("incremental")
    # Values that can cancel out: a key whose window sums to 0 is still in the window.
    s.reduce_by_window(key, add, size, slide, inverse=sub, value=lambda r: r[1] - r[1] % 2).collect(
        "cancelling"
    )
    s.reduce_by_window(key, max, size, slide, value=value).collect("max")
    s.select(lambda r: r[1]).reduce_by_window(lambda v: v % 2, add, size, slide).collect(
        "identity_value"
    )
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    ref = windows(by_epoch(feed), size, slide)

    def reduced(f: Any, v: Any = value, k: Any = key) -> dict[int, Counter[Any]]:
        res = {}
        for e, rs in ref.items():
            g: dict[Any, list[Any]] = defaultdict(list)
            for r in rs:
                g[k(r)].append(v(r))
            res[e] = Counter((kk, f(vs)) for kk, vs in g.items())
        return res

    assert per_epoch(out["recomputed"]) == reduced(sum)
    assert per_epoch(out["incremental"]) == reduced(sum)
    assert per_epoch(out["cancelling"]) == reduced(sum, lambda r: r[1] - r[1] % 2)
    assert per_epoch(out["max"]) == reduced(max)
    assert per_epoch(out["identity_value"]) == reduced(sum, lambda r: r[1], lambda r: r[1] % 2)


def test_window_arguments_are_checked_when_building() -> None:
    flow = Dataflow("bad")
    s = flow.new_input().stream
    with pytest.raises(GraphBuildError, match="size must be an int >= 1"):
        s.window(0)
    with pytest.raises(GraphBuildError, match="slide 3 > size 2"):
        s.window(2, 3)
    with pytest.raises(GraphBuildError, match="inverse must be a function"):
        s.reduce_by_window(lambda r: r, max, 2, inverse=1)
    with pytest.raises(GraphBuildError, match="leave"):
        s.iterate(lambda t: t.window(2))
