"""SnailTrail online: while a run goes on, each window's summary arrives from a thread
of the driver that tails the trace (no timing asserted: a benchmark measures it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import operators  # noqa: F401  (select, count_by)
from analysis.online import OnlineProfiler
from analysis.summaries import Summary
from tests.analysis.test_profile import _seven, quick, slow
from timely import Dataflow


@pytest.mark.usefixtures("ray_local")
def test_windows_are_analysed_while_the_run_goes_on(tmp_path: Path) -> None:
    flow = Dataflow("online")
    nums = flow.new_input("nums")
    nums.stream.select(quick, name="quick").select(slow, name="slow").count_by(_seven).collect("c")
    during: list[Summary] = []
    running = True

    def seen(summary: Summary, lag: float) -> None:
        if running:
            during.append(summary)

    session = flow.activate(workers=2, backend="ray", trace=tmp_path)
    with OnlineProfiler(str(tmp_path), window=0.5, on_window=seen) as profiler:
        epoch = 0
        # Feed the run until three windows came back while it ran (a profiler that never
        # reports keeps it going until pytest-timeout's bound fails the test).
        while len(during) < 3:
            nums.advance_to(epoch)
            nums.send(list(range(2000)))  # more than the workers keep up with: they are busy
            session.poll(0)
            epoch += 1
        running = False
        nums.close()
        session.join()
    assert not profiler.errors
    assert len(profiler.lags) == len(profiler.summaries) >= 3
    # Over the windows where the operators were on the critical path at all (the first
    # holds the workers' start, waiting for the driver), the slow one ranks first.
    busy = [s for s in during if sum(cp for _, cp in s.by_operator.cp) >= 0.1]
    assert busy, [s.by_kind.cp[:3] for s in during]
    total: Counter[str] = Counter()
    for s in busy:
        for name, cp in s.by_operator.cp:
            total[name] += cp
    assert total.most_common(1)[0][0] == "slow", [s.by_operator.cp[:2] for s in busy]
