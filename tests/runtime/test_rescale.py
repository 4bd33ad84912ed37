"""Rescaling a running session (``session.rescale(W)``): at the next checkpoint the
workers stop and W new ones restore from it; outputs equal a run at a fixed size, epoch
by epoch, with nothing lost or repeated."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import operators  # noqa: F401  (count_by, running_reduce)
from connectors.rate import rate_source
from timely import ConfigError, Dataflow

EPOCHS = 10


def words(epoch: int) -> list[str]:
    return [f"w{(epoch * 7 + i) % 13}" for i in range(40)]


def counting() -> tuple[Dataflow, Any]:
    flow = Dataflow("rescaled")
    lines = flow.new_input("words")
    counts = lines.stream.count_by(lambda w: w)
    counts.collect("per_epoch")
    counts.running_reduce(lambda kv: kv[0], lambda a, b: a + b, value=lambda kv: kv[1]).collect(
        "running"
    )
    return flow, lines


def reference() -> dict[str, list[tuple[int, Any]]]:
    flow, lines = counting()
    for epoch in range(EPOCHS):
        lines.send(words(epoch))
        lines.advance_to(epoch + 1)
    results = flow.run(workers=2, backend="inline")
    return {k: sorted(v, key=repr) for k, v in results.items()}


@pytest.mark.parametrize(("start", "to"), [(2, 3), (3, 1)])
def test_inline_rescale_mid_run_keeps_the_outputs(tmp_path: Path, start: int, to: int) -> None:
    flow, lines = counting()
    session = flow.activate(
        workers=start, backend="inline", checkpoint=str(tmp_path), checkpoint_every=1
    )
    for epoch in range(EPOCHS):
        if epoch == 4:
            session.rescale(to)
        lines.send(words(epoch))
        lines.advance_to(epoch + 1)
    lines.close()
    results = session.join()
    assert {k: sorted(v, key=repr) for k, v in results.items()} == reference()
    assert [(r["from"], r["to"]) for r in session.rescales] == [(start, to)]
    assert session.workers == to and session.restarts == 0
    assert session.rescales[0]["epoch"] >= 3  # a checkpoint taken after the request


def test_ray_rescale_from_another_thread_with_a_source(tmp_path: Path) -> None:
    """A controller's thread asks; the driver's loop acts at the next commit."""
    source = rate_source(4000, seconds=1.5, epoch_seconds=0.1, partitions=4)

    def build() -> Dataflow:
        flow = Dataflow("rescaled-source")
        flow.source(source, name="rate").count_by(lambda x: x % 17).collect("counts")
        return flow

    want = sorted(build().run(workers=2, backend="inline")["counts"])
    flow = build()
    session = flow.activate(
        workers=2, backend="ray", checkpoint=str(tmp_path), checkpoint_interval=0.2
    )
    asker = threading.Thread(target=session.rescale, args=(1,))
    session.poll(0.3)
    asker.start()
    asker.join()
    results = session.join()
    assert sorted(results["counts"]) == want
    assert [(r["from"], r["to"]) for r in session.rescales] == [(2, 1)]


def test_rescale_needs_checkpoints_and_a_worker_count() -> None:
    flow, _ = counting()
    with flow.activate(workers=1, backend="inline") as session:
        # Not reconfigurable, so not live either: the message says both ways out.
        with pytest.raises(ConfigError, match=r"cannot go live \(bins move only in a reconf"):
            session.rescale(2)
        with pytest.raises(ConfigError, match="restores from a checkpoint: run with checkpoint="):
            session.rescale(2)
        with pytest.raises(ConfigError, match="workers must be a positive integer"):
            session.rescale(0)
