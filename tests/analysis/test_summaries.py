"""Summaries: sorted by CP, time next to it, and the sums they must keep."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given

from analysis import Breakdown, build_pag, critical_participation, render, summarise
from tests.analysis.traces import Trace, traces


def _sorted_by_cp(part: Breakdown[Any]) -> bool:
    keys = [(-c, str(k)) for k, c in part.cp]
    return keys == sorted(keys) and [k for k, _ in part.cp] == [k for k, _ in part.time]


@given(traces())
def test_breakdowns_are_sorted_and_keep_their_sums(trace: Trace) -> None:
    pag = build_pag(trace.intervals, trace.messages, trace.start, trace.end)
    critical = critical_participation(pag)
    s = summarise(critical)
    parts = (s.by_kind, s.by_operator, s.by_worker, s.by_channel)
    assert all(_sorted_by_cp(p) for p in parts)
    every = pag.activities + pag.removed
    # by kind: everything, so CP sums to 1 (or 0) and time to every weight.
    total_cp = math.fsum(c for _, c in s.by_kind.cp)
    assert math.isclose(total_cp, 1.0, rel_tol=1e-9) if critical.paths else total_cp == 0
    assert sum(t for _, t in s.by_kind.time) == sum(a.weight for a in every)
    # by worker: local activities, which tile the window on every worker.
    assert dict(s.by_worker.time) == {w: pag.length for w in pag.workers}
    comm = math.fsum(c for a, c in zip(pag.activities, critical.cp) if a.peer is not None)
    assert math.isclose(math.fsum(c for _, c in s.by_worker.cp) + comm, total_cp, abs_tol=1e-9)
    # by operator and channel: the activities that name one.
    assert sum(t for _, t in s.by_operator.time) == sum(a.weight for a in every if a.operator)
    assert sum(t for _, t in s.by_channel.time) == sum(a.weight for a in every if a.channel)
    # waiting took time and is never critical
    assert all(c == 0.0 for k, c in s.by_kind.cp if k == "waiting")
    assert s.paths == critical.paths and s.messages == pag.messages


@given(traces())
def test_render_names_every_dimension_present(trace: Trace) -> None:
    s = summarise(
        critical_participation(build_pag(trace.intervals, trace.messages, trace.start, trace.end))
    )
    text = render(s)
    assert text.startswith(f"window [{s.start}, {s.end}) ns")
    for title, part in (("kind", s.by_kind), ("worker", s.by_worker), ("channel", s.by_channel)):
        assert (f"  {title}" in text) == bool(part.cp)
