"""Worked examples whose CPs were computed by hand (the derivations are in the comments)."""

from __future__ import annotations

import math

import pytest

from analysis import (
    Interval,
    Message,
    build_pag,
    critical_participation,
    render,
    summarise,
)

Key = tuple[int, int, int, str, "int | None"]


def _cps(
    intervals: list[Interval], messages: list[Message], start: int, end: int
) -> dict[Key, float]:
    critical = critical_participation(build_pag(intervals, messages, start, end))
    return {
        (a.worker, a.start, a.end, a.kind, a.peer): cp
        for a, cp in zip(critical.pag.activities, critical.cp)
    }


def test_single_worker_cps_are_fractions_of_the_window() -> None:
    # One worker, one path: every activity is on it, CP = its share of the window;
    # the gap [30, 40) is "unknown" time, on the path like anything else.
    ivs = [
        Interval(0, 0, 30, "processing", "map"),
        Interval(0, 40, 60, "serialization", channel="frame"),
        Interval(0, 60, 100, "processing", "count"),
    ]
    critical = critical_participation(build_pag(ivs, [], 0, 100))
    assert critical.paths == 1
    got = {(a.start, a.kind): cp for a, cp in zip(critical.pag.activities, critical.cp)}
    assert got == pytest.approx(
        {(0, "processing"): 0.3, (30, "unknown"): 0.1, (40, "serialization"): 0.2,
         (60, "processing"): 0.4}
    )  # fmt: skip
    summary = summarise(critical)
    assert summary.by_operator.cp == [("count", pytest.approx(0.4)), ("map", pytest.approx(0.3))]


def test_waiting_worker_is_replaced_by_the_senders_work() -> None:
    # Worker 0 works [0, 60) on p, sends at 60 (received at 70 by worker 1), works on q
    # until 100. Worker 1 waits [0, 70), then works on r until 100.
    # Without the wait, worker 1's start has no way forward; the paths are
    #   start0 -p- (0,60) -q- end0            and   start0 -p- (0,60) -msg- (1,70) -r- end1.
    # N = 2, T = 100: CP(p) = 2*60/200, CP(q) = 40/200, CP(msg) = 10/200, CP(r) = 30/200.
    ivs = [
        Interval(0, 0, 60, "processing", "p"),
        Interval(0, 60, 100, "processing", "q"),
        Interval(1, 0, 70, "waiting"),
        Interval(1, 70, 100, "processing", "r"),
    ]
    msgs = [Message("exchange:r", 0, 60, 1, 70)]
    got = _cps(ivs, msgs, 0, 100)
    assert got == pytest.approx(
        {
            (0, 0, 60, "processing", None): 0.6,
            (0, 60, 100, "processing", None): 0.2,
            (0, 60, 70, "communication", 1): 0.05,
            (1, 70, 100, "processing", None): 0.15,
        }
    )
    summary = summarise(critical_participation(build_pag(ivs, msgs, 0, 100)))
    # The wait took 70% of worker 1's time and is not critical; worker 0's work is.
    assert summary.by_kind.cp == [
        ("processing", pytest.approx(0.95)),
        ("communication", pytest.approx(0.05)),
        ("waiting", 0.0),
    ]
    assert dict(summary.by_kind.time) == {"processing": 130, "communication": 10, "waiting": 70}
    assert summary.by_worker.cp == [(0, pytest.approx(0.8)), (1, pytest.approx(0.15))]
    assert summary.by_channel.cp == [("exchange:r", pytest.approx(0.05))]


def test_straggler_tops_the_worker_view() -> None:
    # Three workers exchange after one step. Workers 1 and 2 finish at 40 and send to
    # worker 0 (received at 45); worker 0, the straggler, finishes at 90 and sends to
    # both (received at 95); they wait [40, 95) and work [95, 100); worker 0 then does
    # progress work [90, 100). Receipts at 45 split worker 0's step in two.
    # Forward counts: the three starts 1, (0,45) = 1 + 1 + 1 = 3, (0,90) = 3, and every
    # end 3, so N = 9 (T = 100, N*T = 900). Backward counts: (0,90) = 3 (its progress
    # and two messages), so each start also has 3. Hence:
    #   worker 0: [0,45) 1*3*45 = 135, [45,90) 3*3*45 = 405, progress 3*1*10 = 30
    #   workers 1, 2: [0,40) 1*3*40 = 120, [95,100) 3*1*5 = 15
    #   messages: 1->0 and 2->0 1*3*5 = 15 each, 0->1 and 0->2 3*1*5 = 15 each
    # which add up to 900.
    ivs = [
        Interval(0, 0, 90, "processing", "count"),
        Interval(0, 90, 100, "progress"),
        *(Interval(w, 0, 40, "processing", "count") for w in (1, 2)),
        *(Interval(w, 40, 95, "waiting") for w in (1, 2)),
        *(Interval(w, 95, 100, "processing", "count") for w in (1, 2)),
    ]
    msgs = [
        Message("exchange:count", 1, 40, 0, 45),
        Message("exchange:count", 2, 40, 0, 45),
        Message("exchange:count", 0, 90, 1, 95),
        Message("exchange:count", 0, 90, 2, 95),
    ]
    critical = critical_participation(build_pag(ivs, msgs, 0, 100))
    assert critical.paths == 9
    assert math.fsum(critical.cp) == pytest.approx(1.0)
    summary = summarise(critical)
    assert summary.by_worker.cp == [
        (0, pytest.approx(570 / 900)),
        (1, pytest.approx(135 / 900)),
        (2, pytest.approx(135 / 900)),
    ]
    # Every worker spent the whole window on something; only the straggler was critical.
    assert dict(summary.by_worker.time) == {0: 100, 1: 100, 2: 100}
    assert summary.by_channel.cp == [("exchange:count", pytest.approx(60 / 900))]
    assert summary.by_kind.cp[0] == ("processing", pytest.approx(810 / 900))


def test_no_path_means_every_cp_is_zero_and_says_so() -> None:
    # A single worker that waits mid-window with no message to end it: no path spans it.
    ivs = [
        Interval(0, 0, 40, "processing", "map"),
        Interval(0, 40, 60, "waiting"),
        Interval(0, 60, 100, "processing", "map"),
    ]
    critical = critical_participation(build_pag(ivs, [], 0, 100))
    assert critical.paths == 0 and not critical.has_paths
    assert critical.cp == (0.0, 0.0)
    summary = summarise(critical)
    assert summary.paths == 0
    assert summary.by_kind.cp == [("processing", 0.0), ("waiting", 0.0)]
    assert dict(summary.by_kind.time) == {"processing": 80, "waiting": 20}
    assert "no path spans the window" in render(summary)
