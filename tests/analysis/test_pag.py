"""The PAG's shape: a DAG in (time, worker) order, worker timelines that tile the window,
waiting taken out, and every message accounted for."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given

from analysis import Interval, Message, build_pag
from analysis.pag import COMMUNICATION, NEVER_CRITICAL, UNKNOWN
from tests.analysis.traces import Trace, traces


@given(traces())
def test_vertices_are_in_time_worker_order_and_edges_go_forward(trace: Trace) -> None:
    pag = build_pag(trace.intervals, trace.messages, trace.start, trace.end)
    keys = list(zip(pag.times, pag.owners))
    assert keys == sorted(set(keys))  # one vertex per (worker, time), in order
    for a in pag.activities + pag.removed:
        assert a.src < a.dst
        assert (pag.times[a.src], pag.owners[a.src]) == (a.start, a.worker)
        assert (pag.times[a.dst], pag.owners[a.dst]) == (
            a.end,
            a.worker if a.peer is None else a.peer,
        )
    assert [pag.times[v] for v in pag.sources] == [pag.start] * len(pag.workers)
    assert [pag.times[v] for v in pag.sinks] == [pag.end] * len(pag.workers)
    assert [pag.owners[v] for v in pag.sources] == list(pag.workers)


@given(traces())
def test_each_workers_timeline_tiles_the_window(trace: Trace) -> None:
    """Local activities and removed waits of a worker: back to back from start to end."""
    pag = build_pag(trace.intervals, trace.messages, trace.start, trace.end)
    local = sorted(
        (a.worker, a.start, a.end) for a in pag.activities + pag.removed if a.peer is None
    )
    for w in pag.workers:
        spans = [(s, e) for x, s, e in local if x == w]
        assert spans[0][0] == pag.start and spans[-1][1] == pag.end
        assert all(e0 == s1 for (_, e0), (s1, _) in itertools.pairwise(spans))
    assert {a.kind for a in pag.removed} <= NEVER_CRITICAL
    assert not any(a.kind in NEVER_CRITICAL for a in pag.activities)


@given(traces())
def test_every_message_sent_in_the_window_is_accounted_for(trace: Trace) -> None:
    pag = build_pag(trace.intervals, trace.messages, trace.start, trace.end)
    sent = [m for m in trace.messages if trace.start <= m.sent < trace.end]
    edges = [a for a in pag.activities if a.peer is not None]
    assert len(edges) == pag.messages
    assert pag.messages + pag.dropped_backwards + pag.dropped_outside == len(sent)
    assert all(a.kind == COMMUNICATION and a.weight >= 0 for a in edges)


def test_gaps_are_unknown_and_intervals_are_clipped() -> None:
    ivs = [Interval(0, -50, 20, "processing", "map"), Interval(0, 70, 500, "input")]
    pag = build_pag(ivs, [], 0, 100)
    assert [(a.start, a.end, a.kind) for a in pag.activities] == [
        (0, 20, "processing"),
        (20, 70, UNKNOWN),
        (70, 100, "input"),
    ]


def test_clock_skew_and_boundary_messages() -> None:
    ivs = [Interval(w, 0, 100, "processing", "op") for w in (0, 1)]
    msgs = [
        Message("a", 0, 50, 1, 40),  # received before sent: skew, dropped
        Message("b", 1, 50, 0, 50),  # zero latency to a lower worker: would go backwards
        Message("c", 0, 50, 1, 50),  # zero latency to a higher worker: kept
        Message("d", 0, 90, 1, 100),  # received at the window's end: lands on the end vertex
        Message("e", 0, 90, 1, 101),  # received after the window: dropped
        Message("f", 0, -5, 1, 10),  # sent before the window: the earlier window's
    ]
    pag = build_pag(ivs, msgs, 0, 100)
    assert pag.dropped_backwards == 2 and pag.dropped_outside == 1 and pag.messages == 2
    kept = sorted(str(a.channel) for a in pag.activities if a.peer is not None)
    assert kept == ["c", "d"]
    d = next(a for a in pag.activities if a.channel == "d")
    assert d.dst in pag.sinks


def test_a_worker_with_only_messages_still_gets_a_timeline() -> None:
    pag = build_pag([], [Message("m", 3, 10, 7, 20)], 0, 100)
    assert pag.workers == (3, 7)
    kinds = sorted((a.worker, a.start, a.end, a.kind) for a in pag.activities)
    assert kinds == [
        (3, 0, 10, UNKNOWN),
        (3, 10, 20, COMMUNICATION),
        (3, 10, 100, UNKNOWN),
        (7, 0, 20, UNKNOWN),
        (7, 20, 100, UNKNOWN),
    ]


def test_an_empty_window_has_no_workers() -> None:
    pag = build_pag([Interval(0, 200, 300, "processing", "op")], [], 0, 100)
    assert pag.workers == () and pag.activities == () and pag.times == ()


@pytest.mark.parametrize(
    ("intervals", "start", "end", "match"),
    [
        ([], 5, 5, "empty window"),
        ([Interval(0, 10, 5, "processing")], 0, 100, "ends before it starts"),
        (
            [Interval(0, 0, 10, "processing"), Interval(0, 5, 20, "progress")],
            0,
            100,
            "overlapping",
        ),
    ],
)
def test_bad_input_is_refused(intervals: list[Interval], start: int, end: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_pag(intervals, [], start, end)
