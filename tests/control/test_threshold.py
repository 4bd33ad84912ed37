"""The threshold heuristic (DS2's baseline): one worker more above 80% utilisation of the
busiest worker, one fewer below 30%, else hold; it climbs one step per decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from control import Autoscale, Graph, InstanceRates, Measurement
from control.threshold import ThresholdPolicy
from timely import ConfigError, Dataflow

GRAPH = Graph.of(["src", "work"], [(0, 1)])


def measured(workers: int, busy: list[float], interval: float = 1.0) -> Measurement:
    """Each worker's useful seconds over ``interval`` (all in ``work``)."""
    instances = {
        (1, w): InstanceRates(interval_s=interval, operator=1, worker=w, activation_s=b)
        for w, b in enumerate(busy)
    }
    return Measurement(0, int(interval * 1e9), workers, GRAPH, instances, {})


def test_one_step_each_way_and_hold_in_between() -> None:
    policy = ThresholdPolicy(GRAPH, 2, warm_up=0, max_workers=4)
    assert policy.observe(measured(2, [0.9, 0.5])).workers == 3  # the busiest counts
    assert policy.observe(measured(3, [0.5, 0.5, 0.5])).workers == 3
    assert policy.observe(measured(3, [0.2, 0.1, 0.25])).workers == 2
    assert policy.workers == 2


def test_bounds_warm_up_and_stale_measurements() -> None:
    policy = ThresholdPolicy(GRAPH, 4, warm_up=1, max_workers=4)
    assert "warming up" in policy.observe(measured(4, [1.0] * 4)).reason
    assert policy.observe(measured(4, [1.0] * 4)).workers == 4  # at max_workers
    low = ThresholdPolicy(GRAPH, 1, warm_up=0, min_workers=1)
    assert low.observe(measured(1, [0.0])).workers == 1  # at min_workers
    assert "ignored" in low.observe(measured(2, [1.0, 1.0])).reason
    with pytest.raises(ValueError, match="low < high"):
        ThresholdPolicy(GRAPH, 1, high=0.3, low=0.8)


def test_a_load_of_three_and_a_half_workers_takes_four_steps() -> None:
    """Work that needs 3.5 workers, evenly spread: the heuristic climbs 1, 2, 3, 4, 5
    (a rescale per decision, and then 70% busy), where DS2 sizes it in one decision."""
    load, workers, steps = 3.5, 1, 0
    policy = ThresholdPolicy(GRAPH, workers, warm_up=0, max_workers=8)
    for _ in range(10):
        d = policy.observe(measured(workers, [min(1.0, load / workers)] * workers))
        steps += d.rescale
        workers = d.workers
    assert (workers, steps) == (5, 4)


def test_autoscale_runs_the_threshold_policy(tmp_path: Path) -> None:
    from connectors.rate import rate_source

    flow = Dataflow("thresholded")
    flow.source(rate_source(2000, seconds=1.0, epoch_seconds=0.25), name="events").collect("out")
    session = flow.activate(
        workers=1,
        backend="inline",
        checkpoint=str(tmp_path),
        checkpoint_every=1,
        autoscale=Autoscale(policy="threshold", max_workers=1, interval=0.25, warm_up=0),
    )
    assert len(session.join()["out"]) == 2000
    decisions = session.view.snapshot()["decisions"]
    assert decisions and all("utilisation" in d["reason"] for d in decisions)
    with pytest.raises(ConfigError, match='policy must be "ds2" or "threshold"'):
        Autoscale(policy="dhalion")
