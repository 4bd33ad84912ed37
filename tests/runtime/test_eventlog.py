"""The event log: off unless asked for; with ``trace=DIR`` every worker writes what it
did, and the log is consistent with the run (every message sent is received once, with
the same contents; activations account for every record; intervals nest in steps)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import operators  # noqa: F401  (select_many, count_by)
from timely import ConfigError, Dataflow
from timely.eventlog import COMMAND, RECV, START, read_driver_log, read_trace
from timely.worker.snapshots import waited_for

LINES = ["a b c", "b c d e", "a a"] * 20
EPOCHS = 4
WORDS = sum(len(line.split()) for line in LINES) * EPOCHS


def wordcount() -> Dataflow:
    flow = Dataflow("traced")
    lines = flow.new_input("lines")
    lines.stream.select_many(str.split).count_by(lambda w: w).collect("counts")
    for epoch in range(EPOCHS):
        lines.advance_to(epoch)
        lines.send(LINES)
    return flow


def check_trace(directory: Path, workers: int, on_wire: bool) -> dict[int, list[Any]]:
    """Assert what every trace must satisfy; return each worker's events."""
    logs = read_trace(directory)
    assert sorted(h["worker"] for h, _ in logs) == list(range(workers))
    names = logs[0][0]["vertices"]
    events = {h["worker"]: ev for h, ev in logs}
    sends: Counter[tuple[Any, ...]] = Counter()
    receives: Counter[tuple[Any, ...]] = Counter()
    records_in: Counter[str] = Counter()
    for w, ev in events.items():
        steps = [(e[1], e[2]) for e in ev if e[0] == "t"]
        assert steps, f"worker {w} logged no step"
        for e in ev:
            assert e[1] <= e[2], e  # an interval never ends before it starts
            if e[0] == "s":
                sends[(w, e[3], e[4], e[5], e[6], e[8], tuple(map(tuple, e[9])))] += 1
                assert (e[7] > 0) == on_wire  # bytes on the wire only between processes
            elif e[0] == "r":
                receives[(e[3], w, e[4], e[5], e[6], e[8], tuple(map(tuple, e[9])))] += 1
            elif e[0] == "a":
                if e[4] == RECV:
                    records_in[names[e[3]]] += e[5]
                if e[4] != START:  # roots start while the worker is built, before any step
                    assert any(t0 <= e[1] and e[2] <= t1 for t0, t1 in steps), e
    # Every message sent was received exactly once, as sent (sender, receiver, sequence
    # number, batches, records, progress updates).
    assert sends == receives
    assert all(n == 1 for n in sends.values())
    # Activations account for the data: every word reached the pre-combine once.
    assert records_in["count_by.combine"] == WORDS
    commands = [e for ev in events.values() for e in ev if e[0] == "a" and e[4] == COMMAND]
    assert sum(e[5] for e in commands) == len(LINES) * EPOCHS
    return events


def test_no_trace_no_log(tmp_path: Path) -> None:
    flow = wordcount()
    session = flow.activate(workers=2, backend="inline")
    assert all(w.log is None for w in session.worker_list)  # type: ignore[attr-defined]
    session.close()


@pytest.mark.parametrize("workers", [1, 3])
def test_inline_trace_is_consistent_with_the_run(tmp_path: Path, workers: int) -> None:
    results = wordcount().run(workers=workers, backend="inline", seed=5, trace=tmp_path)
    assert sum(c for _, (_, c) in results["counts"]) == WORDS
    check_trace(tmp_path, workers, on_wire=False)


@pytest.mark.usefixtures("ray_local")
def test_ray_trace_is_consistent_with_the_run(tmp_path: Path) -> None:
    results = wordcount().run(workers=2, backend="ray", trace=tmp_path)
    assert sum(c for _, (_, c) in results["counts"]) == WORDS
    events = check_trace(tmp_path, 2, on_wire=True)
    # The actors wait for the driver's input between epochs: waiting is logged.
    assert any(e[0] == "w" for ev in events.values() for e in ev)


def test_a_restore_starts_a_new_attempt(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    wordcount().run(
        workers=2,
        backend="inline",
        trace=trace,
        checkpoint=str(tmp_path / "ckpt"),
        crash_at=(25,),
        max_restarts=1,
    )
    names = sorted(p.name for p in trace.iterdir())
    assert names == ["driver.trace"] + [f"worker-{w}-{a}.trace" for w in (0, 1) for a in (0, 1)]
    # the driver logged the recovery: what was restored, and why
    (recovery,) = [e for e in read_driver_log(str(trace)) if e[0] == "recovery"]
    assert recovery[3]["restart"] == 1 and "injected crash" in recovery[3]["cause"]
    # Checkpoint work is logged: the snapshot of every vertex a checkpoint waits for
    # (those with state, and the graph's ends) for some epoch, on every worker.
    plan = wordcount().build()
    waited = set(waited_for(plan, [spec.factory() for spec in plan.vertices]))
    assert 0 < len(waited) < len(plan.vertices)
    for header, events in read_trace(trace):
        snapshots = {e[5] for e in events if e[0] == "c" and e[4] == "snapshot"}
        if header["attempt"] == 1:  # the attempt that ran to the end checkpointed
            assert len(header["vertices"]) == len(plan.vertices)
            assert snapshots == waited


def test_a_trace_directory_that_cannot_be_made_fails_before_starting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot make the trace directory"):
        wordcount().run(workers=1, backend="inline", trace=blocker / "trace")
    with pytest.raises(ConfigError, match="trace must be a directory"):
        wordcount().run(workers=1, backend="inline", trace=3)


def test_a_backend_without_an_event_log_refuses_trace(tmp_path: Path) -> None:
    from timely.backends.inline import InlineSession
    from timely.session.registry import register_backend

    class Plain(InlineSession):
        def __init__(self, spec: Any, workers: int, checkpoint: Any = None) -> None:
            super().__init__(spec, workers, checkpoint=checkpoint)

    register_backend("plain-no-trace", Plain)
    with pytest.raises(ConfigError, match="keeps no event log"):
        wordcount().run(workers=1, backend="plain-no-trace", trace=tmp_path)
    assert wordcount().run(workers=1, backend="plain-no-trace")["counts"]
