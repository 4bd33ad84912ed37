"""From a real run's event log to its critical-path profile: the converter gives every
worker one activity at a time and matches every message; the profile command prints
tables or JSON; an operator 10x slower than the others ranks first (on Ray)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import operators  # noqa: F401  (select, count_by)
from analysis.pag import build_pag
from analysis.profile import profile
from analysis.trace import INPUT, load, timeline
from timely import Dataflow, InputHandle, Probe, Vertex, exchange
from timely.cli import main
from timely.eventlog import read_trace

WHOLE_RUN = 3600.0
"""A window longer than any run here: the whole run is one window, which a critical path
always spans. In 1 s windows, a short run that straddles a window's edge on a loaded
machine can leave every window without a path, and every CP unknown (0)."""


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def slow(x: int) -> int:
    spin(20e-6)
    return x


def quick(x: int) -> int:
    spin(2e-6)
    return x


def flow_and_input() -> tuple[Dataflow, InputHandle, Probe]:
    flow = Dataflow("profiled")
    nums = flow.new_input("nums")
    counts = (
        nums.stream.select(quick, name="quick")
        .select(slow, name="slow")
        .select(quick, name="quick2")
        .count_by(lambda x: x % 7)
    )
    counts.collect("counts")
    return flow, nums, counts.probe()


def pipeline(epochs: int = 30, per_epoch: int = 1000) -> Dataflow:
    flow, nums, _ = flow_and_input()
    for e in range(epochs):
        nums.advance_to(e)
        nums.send(list(range(per_epoch)))
    return flow


def test_timeline_is_one_activity_at_a_time_and_labels_the_innermost() -> None:
    names = ["v0", "v1"]
    events = [
        ("t", 0, 100),
        ("a", 10, 40, 1, 0, 5, 5),
        ("c", 50, 60, 3, "snapshot", 0),
        ("c", 55, 90, 3, "write"),  # the writer thread: not on the timeline
        ("s", 100, 110, 1, 0, 1, 5, 40, 0, [[1, 5]]),
        ("w", 110, 200),
    ]
    got = [(i.start, i.end, i.kind, i.operator) for i in timeline(0, events, names)]
    assert got == [
        (0, 10, "scheduling", None),
        (10, 40, "processing", "v1"),
        (40, 50, "scheduling", None),
        (50, 60, "checkpoint", "v0"),
        (60, 100, "scheduling", None),
        (100, 110, "serialization", None),
        (110, 200, "waiting", None),
    ]


def test_an_inline_trace_becomes_a_pag_with_every_message_matched(tmp_path: Path) -> None:
    pipeline(epochs=5, per_epoch=200).run(workers=3, backend="inline", seed=1, trace=tmp_path)
    intervals, messages, header = load(str(tmp_path))
    assert header["workers"] == 3
    sends = sum(1 for _, events in read_trace(tmp_path) for e in events if e[0] == "s")
    assert len(messages) == sends  # every message matched
    start = min(i.start for i in intervals)
    end = max(i.end for i in intervals)
    pag = build_pag(intervals, messages, start, end + 1)  # raises if a worker's overlap
    assert pag.dropped_outside == 0
    assert {i.worker for i in intervals} == {0, 1, 2}  # inline: no waits, no driver pseudo-worker


def test_the_profile_command_prints_tables_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline(epochs=5, per_epoch=200).run(workers=2, backend="inline", trace=tmp_path)
    assert main(["profile", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "operators" in text and "slow" in text
    assert main(["profile", str(tmp_path), "--json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    for key in ("activities", "operators", "workers", "channels"):
        rows = report[key]
        assert rows and all({"name", "cp", "time_s"} <= set(r) for r in rows)
        assert [r["cp"] for r in rows] == sorted((r["cp"] for r in rows), reverse=True)
    assert sum(r["cp"] for r in report["activities"]) == pytest.approx(1.0)
    assert main(["profile", str(tmp_path / "nothing-here")]) == 2


@pytest.mark.usefixtures("ray_local")
def test_on_ray_an_operator_ten_times_slower_ranks_first(tmp_path: Path) -> None:
    """The driver sends its first epochs one at a time, each once the one before has
    passed the last step, so the workers wait on it in between: the trace must show
    those waits ended by the driver's input (had it sent every epoch at once, whether a
    worker ever waits on it would be up to the scheduler). The 30 epochs after those go
    at once, and keep the workers busy: the slow step is on the critical path there."""
    flow, nums, probe = flow_and_input()
    session = flow.activate(workers=2, backend="ray", trace=tmp_path, progress=False)
    try:
        for e in range(3):
            nums.advance_to(e)
            nums.send(list(range(100)))
            nums.advance_to(e + 1)
            while not probe.done(e):
                session.poll(0.01)
        for e in range(3, 33):
            nums.advance_to(e)
            nums.send(list(range(1000)))
        nums.close()
        session.join()
    finally:
        session.close()
    result = profile(str(tmp_path), window=WHOLE_RUN)
    operators_by_cp = [name for name, _, _ in result.tables["operators"]]
    assert operators_by_cp[0] == "slow", result.tables["operators"]
    workers = Counter(name for name, _, _ in result.tables["workers"])
    assert workers["worker 0"] == workers["worker 1"] == 1
    _, messages, _ = load(str(tmp_path))
    assert any(m.src == INPUT for m in messages)  # the driver's input woke the workers


class Straggle(Vertex):
    """Ten times slower on worker 1 than on worker 0: a straggler."""

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        for _ in records:
            spin(20e-6 if self.worker == 1 else 2e-6)
        self.send_by(0, records, t)


def _seven(x: int) -> int:
    return x % 7


@pytest.mark.usefixtures("ray_local")
def test_on_ray_a_straggling_worker_ranks_first(tmp_path: Path) -> None:
    flow = Dataflow("straggler")
    nums = flow.new_input("nums")
    nums.stream.unary(Straggle, name="work", channel=exchange()).count_by(_seven).collect("c")
    for e in range(30):
        nums.advance_to(e)
        nums.send(list(range(1000)))
    flow.run(workers=2, backend="ray", trace=tmp_path)
    workers = [name for name, _, _ in profile(str(tmp_path), window=WHOLE_RUN).tables["workers"]]
    assert workers[0] == "worker 1", workers


def _widen(x: int) -> tuple[int, str]:
    return x, "y" * 1000


def _key(r: tuple[int, str]) -> int:
    return r[0]


@pytest.mark.usefixtures("ray_local")
def test_on_ray_an_exchange_heavy_dataflow_names_the_exchange(tmp_path: Path) -> None:
    flow = Dataflow("heavy")
    nums = flow.new_input("nums")
    wide = nums.stream.select(_widen, name="widen")
    # Nothing after the exchange sends data on: a small message (a count, an output
    # gathered onto worker 0) that waits behind the big ones would have the queueing
    # time in its communication edge, and under load that outranks the exchange itself.
    wide.exchange(_key, name="shuffle").select(_key, name="narrow")
    for e in range(30):
        nums.advance_to(e)
        nums.send(list(range(3000)))
    flow.run(workers=2, backend="ray", trace=tmp_path)
    found = profile(str(tmp_path), window=WHOLE_RUN)
    channels = [name for name, _, _ in found.tables["channels"]]
    # Of the dataflow's channels the exchange ranks first: it carries a thousand times the
    # bytes of the input. (The progress exchange is left out: its many small messages
    # queue behind the big ones, and under a busy machine's scheduling that waiting can
    # outrank the exchange itself, which is timing, not what this test is about.)
    data = [name for name in channels if name != "progress"]
    assert data and data[0] == "-> shuffle", (channels, found.windows, found.tables)
