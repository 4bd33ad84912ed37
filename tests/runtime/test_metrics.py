"""The Prometheus endpoint (``metrics_port=``): scraped while a run goes on, its
figures agree with what the run did; it binds localhost only, fails before starting on
a bad or busy port, and goes away with the session."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import operators  # noqa: F401  (select_many, count_by)
from timely import ConfigError, Dataflow
from timely.session.base import Session

WORDS = ["a", "b", "c", "d", "e", "f"] * 50
EPOCHS = 5


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample: name -> {sorted labels: value}."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by_operator(samples: dict[str, Any], name: str, operator: str) -> float:
    return sum(v for k, v in samples.get(name, {}).items() if ("operator", operator) in k)


def scrape_until(session: Session, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Scrape until ``check`` holds (the workers flush their logs before they wait, so
    it holds soon after the outputs are in); the driver keeps delivering meanwhile."""
    assert session.metrics_url is not None
    for _ in range(300):
        samples = scrape(session.metrics_url)
        if check(samples):
            return samples
        session.poll(0.1)
    raise AssertionError(f"never true; last scrape: {samples}")


def feed(backend: str, **options: Any) -> tuple[Any, Session]:
    flow = Dataflow("metered")
    lines = flow.new_input("words")
    lines.stream.count_by(lambda w: w).collect("counts")
    session = flow.activate(workers=2, backend=backend, metrics_port=0, **options)
    for epoch in range(EPOCHS):
        lines.send(WORDS)
        lines.advance_to(epoch + 1)
    return lines, session


def test_a_ray_run_is_scraped_while_it_goes(tmp_path: Path) -> None:
    lines, session = feed("ray")
    assert session.metrics_url is not None
    assert session.metrics_url.startswith("http://127.0.0.1:")

    def complete(samples: dict[str, Any]) -> bool:
        epochs = samples.get("timely_output_frontier_epoch", {})
        combined = by_operator(samples, "timely_operator_records_in_total", "count_by.combine")
        return epochs.get((("output", "counts"),)) == EPOCHS - 1 and combined == len(WORDS) * EPOCHS

    samples = scrape_until(session, complete)
    assert samples["timely_workers"][()] == 2
    # Every worker stepped, and sent bytes to its peer (they are separate processes).
    for metric in ("timely_worker_steps_total", "timely_worker_sent_bytes_total"):
        assert set(samples[metric]) == {(("worker", "0"),), (("worker", "1"),)}
        assert all(v > 0 for v in samples[metric].values())
    assert by_operator(samples, "timely_operator_useful_seconds_total", "count_by.combine") > 0
    assert samples["timely_restarts_total"][()] == 0
    url = session.metrics_url
    lines.close()
    session.join()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)


def test_restarts_and_checkpoints_are_counted(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    lines, session = feed(
        "inline",
        checkpoint=str(tmp_path / "ckpt"),
        checkpoint_every=1,
        crash_at=(40,),
        max_restarts=1,
        trace=str(trace),
    )
    samples = scrape_until(
        session,
        lambda s: (
            s.get("timely_output_frontier_epoch", {}).get((("output", "counts"),)) == EPOCHS - 1
        ),
    )
    assert samples["timely_restarts_total"][()] == 1
    assert samples["timely_checkpoints_committed_total"][()] >= 1
    assert samples["timely_checkpoints_subsumed_total"][()] == 0  # inline: one part at a time
    assert samples["timely_checkpoint_write_seconds_count"][()] >= 2  # both workers' parts
    assert samples["timely_checkpoint_snapshot_seconds_count"][()] > 0
    lines.close()
    session.join()
    assert any(trace.iterdir())  # a trace the user asked for stays


def test_the_adaptive_interval_and_its_fraction_are_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import timely.checkpoint.cadence

    monkeypatch.setattr(timely.checkpoint.cadence, "MIN_WINDOW", 0.0)  # a window every few epochs
    flow = Dataflow("adaptive")
    lines = flow.new_input("words")
    lines.stream.count_by(lambda w: w).collect("counts")
    session = flow.activate(
        workers=2,
        backend="inline",
        metrics_port=0,
        checkpoint=str(tmp_path),
        checkpoint_every="auto",
    )
    for epoch in range(20):
        lines.send(WORDS)
        lines.advance_to(epoch + 1)
    samples = scrape_until(session, lambda s: "timely_checkpoint_interval_epochs" in s)
    last = session.cadence[-1]
    assert samples["timely_checkpoint_interval_epochs"][()] == last.next_interval
    assert samples["timely_checkpoint_coordination_ratio"][()] == pytest.approx(last.fraction)
    lines.close()
    session.join()


def test_without_trace_the_log_is_temporary() -> None:
    lines, session = feed("inline")
    directory = session.trace
    assert directory is not None and os.path.isdir(directory)
    scrape_until(session, lambda s: "timely_worker_steps_total" in s)
    lines.close()
    session.join()
    assert not os.path.exists(directory)


def test_bad_ports_fail_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match="metrics_port must be a TCP port"):
        flow = Dataflow("bad")
        flow.new_input("x").stream.collect("out")
        flow.activate(workers=1, backend="inline", metrics_port="9100")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        flow = Dataflow("busy")
        flow.new_input("x").stream.collect("out")
        with pytest.raises(ConfigError, match="choose another metrics_port"):
            flow.activate(workers=1, backend="inline", metrics_port=port)
        assert flow._session is None


def test_a_backend_without_an_event_log_refuses_metrics() -> None:
    from timely.backends.inline import InlineSession
    from timely.session.registry import register_backend

    class Plain(InlineSession):
        def __init__(self, spec: Any, workers: int, checkpoint: Any = None) -> None:
            super().__init__(spec, workers, checkpoint=checkpoint)

    register_backend("plain-no-metrics", Plain)
    flow = Dataflow("plain")
    flow.new_input("x").stream.collect("out")
    with pytest.raises(ConfigError, match="keeps no event log, which metrics"):
        flow.run(workers=1, backend="plain-no-metrics", metrics_port=0)


def test_a_controllers_decision_and_a_rescale_are_exposed(tmp_path: Path) -> None:
    lines, session = feed("inline", checkpoint=str(tmp_path), checkpoint_every=1)
    session.view.decided(
        {
            "workers": 3,
            "current": 2,
            "per_operator": {"count_by": 3, "words": 1},
            "rates": {"count_by": {"true_processing": 1500.0, "observed_processing": 900.0}},
            "reason": "test",
            "acted": True,
        }
    )
    session.rescale(3)
    lines.send(WORDS)
    lines.advance_to(EPOCHS + 1)
    samples = scrape_until(session, lambda s: s["timely_rescales_total"][()] == 1)
    assert samples["timely_workers"][()] == 3
    assert samples["timely_scaling_decisions_total"][()] == 1
    assert samples["timely_scaling_workers_wanted"][()] == 3
    wanted = samples["timely_operator_parallelism_wanted"]
    assert wanted == {(("operator", "count_by"),): 3, (("operator", "words"),): 1}
    rate = samples["timely_operator_true_processing_rate"]
    assert rate == {(("operator", "count_by"),): 1500.0}
    lines.close()
    session.join()
