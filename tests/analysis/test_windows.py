"""Windows: consecutive, clipping what crosses them, adding up to the trace."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis import Interval, Message, Window, analyse, build_pag, cut
from analysis.pag import UNKNOWN
from tests.analysis.traces import Trace, traces


def test_intervals_spanning_windows_are_clipped() -> None:
    ivs = [Interval(0, 50, 250, "processing", "map"), Interval(1, 0, 10, "input")]
    windows = cut(ivs, [], length=100)
    assert [(w.start, w.end) for w in windows] == [(0, 100), (100, 200), (200, 250)]
    spans = [
        [
            (a.worker, a.start, a.end, a.kind)
            for a in build_pag(w.intervals, w.messages, w.start, w.end).activities
        ]
        for w in windows
    ]
    assert spans == [
        [(0, 0, 50, UNKNOWN), (0, 50, 100, "processing"), (1, 0, 10, "input"),
         (1, 10, 100, UNKNOWN)],
        [(0, 100, 200, "processing")],
        [(0, 200, 250, "processing")],
    ]  # fmt: skip


def test_explicit_bounds_and_empty_traces() -> None:
    assert cut([], []) == []
    windows = cut([Interval(0, 5, 15, "processing")], [], length=10, start=0, end=30)
    assert [(w.start, w.end, len(w.intervals)) for w in windows] == [
        (0, 10, 1),
        (10, 20, 1),
        (20, 30, 0),
    ]
    with pytest.raises(ValueError):
        cut([], [], length=0)


@given(traces(horizon=200, max_messages=10), st.integers(1, 70))
def test_windows_add_up_to_the_trace(trace: Trace, length: int) -> None:
    windows = cut(trace.intervals, trace.messages, length=length)
    if not trace.intervals and not trace.messages:
        assert windows == []
        return
    assert all(0 < w.end - w.start <= length for w in windows)
    assert all(a.end == b.start for a, b in itertools.pairwise(windows))

    # Time per (worker, kind, operator, channel): what the intervals say, window by window.
    want: Counter[tuple[object, ...]] = Counter()
    for iv in trace.intervals:
        want[(iv.worker, iv.kind, iv.operator, iv.channel)] += iv.end - iv.start
    got: Counter[tuple[object, ...]] = Counter()
    kept = accounted = 0
    latency = 0
    for w in windows:
        pag = build_pag(w.intervals, w.messages, w.start, w.end)
        for a in pag.activities + pag.removed:
            if a.peer is None and a.kind != UNKNOWN:
                got[(a.worker, a.kind, a.operator, a.channel)] += a.weight
            elif a.peer is not None:
                latency += a.weight
        kept += pag.messages
        accounted += pag.messages + pag.dropped_backwards + pag.dropped_outside
    assert got == want
    # Every message is accounted for in exactly one window: the one it was sent in.
    assert accounted == len(trace.messages)
    # ... and kept there when it goes forward and arrives by the window's end.
    forward = [
        m
        for m in trace.messages
        if (m.sent, m.src) < (m.received, m.dst) and m.received <= _end_of(windows, m.sent)
    ]
    assert kept == len(forward)
    assert latency == sum(m.received - m.sent for m in forward)


def _end_of(windows: list[Window], t: int) -> int:
    """The end of the window ``t`` lies in."""
    return next(w.end for w in windows if w.start <= t < w.end)


@given(traces(horizon=200, max_messages=10), st.integers(5, 70))
def test_analyse_gives_one_summary_per_window(trace: Trace, length: int) -> None:
    summaries = analyse(trace.intervals, trace.messages, length=length)
    windows = cut(trace.intervals, trace.messages, length=length)
    assert [(s.start, s.end) for s in summaries] == [(w.start, w.end) for w in windows]
    for s in summaries:
        total = math.fsum(c for _, c in s.by_kind.cp)
        assert math.isclose(total, 1.0, rel_tol=1e-9) if s.paths else total == 0.0


def test_a_wait_ended_by_a_message_from_the_previous_window_cuts_the_path() -> None:
    # The edge effect of windows: the message that ends worker 1's wait was sent in
    # window 0, so in window 1 nothing leads past the wait. Worker 0 still spans it.
    ivs = [
        Interval(0, 0, 200, "processing", "p"),
        Interval(1, 0, 120, "waiting"),
        Interval(1, 120, 200, "processing", "r"),
    ]
    msgs = [Message("m", 0, 90, 1, 120)]
    first, second = analyse(ivs, msgs, length=100)
    assert first.dropped_outside == 1 and first.messages == 0
    assert second.messages == 0
    assert second.by_worker.cp == [(0, 1.0), (1, 0.0)]
