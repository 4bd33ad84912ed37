"""Rescaling a running session (``session.rescale(W)``): at the next checkpoint the
workers stop and W new ones restore from it; outputs equal a run at a fixed size, epoch
by epoch, with nothing lost or repeated."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import operators  # noqa: F401  (count_by, running_reduce)
from timely import ConfigError, Dataflow, Source

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


class PacedUntilTold(Source):
    """Epoch ``k`` of each partition is due at ``t0 + k * pace`` (:meth:`next_awake`) and
    holds 25 numbers fixed by ``(k, partition)``. The source ends once the file ``end``
    exists, at :meth:`last`: two epochs past the last one due when the file was made (no
    read comes before its due time, a restore's and a handed-over partition's included;
    a file's time may lag the clock by a tick, and one epoch is spare). The test makes
    the file only after the rescale, so the run cannot end before it however slow the
    machine is, and every epoch read before the file was seen is one it keeps."""

    def __init__(self, end: str, t0: float, pace: float = 0.05) -> None:
        self.end, self.t0, self.pace = end, t0, pace
        self._last: int | None = None

    def last(self) -> int | None:
        """The last epoch, once ``end`` exists."""
        if self._last is None and os.path.exists(self.end):
            self._last = int((os.stat(self.end).st_mtime - self.t0) / self.pace) + 2
        return self._last

    def partitions(self) -> int:
        return 4

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        k = 0 if offset is None else int(offset)
        last = self.last()
        if last is not None and k > last:
            return None
        return k, [k * 1000 + partition * 100 + i for i in range(25)], k + 1

    def next_awake(self, partition: int, offset: Any) -> float | None:
        return self.t0 + (0 if offset is None else int(offset)) * self.pace


def test_ray_rescale_from_another_thread_with_a_source(tmp_path: Path) -> None:
    """A controller's thread asks; the driver's loop acts at the next commit. The running
    totals carry state across the rescale: a restore that lost or repeated a batch of the
    source would change every later total, where the per-epoch counts of the epochs
    already out before the stop would not show it."""
    end = tmp_path / "end"
    source = PacedUntilTold(str(end), time.time())

    def build() -> Dataflow:
        flow = Dataflow("rescaled-source")
        counts = flow.source(source, name="rate").count_by(lambda x: x % 17)
        counts.collect("counts")
        totals = counts.running_reduce(lambda kv: kv[0], lambda a, b: a + b, lambda kv: kv[1])
        totals.collect("totals")
        return flow

    flow = build()
    session = flow.activate(
        workers=2, backend="ray", checkpoint=str(tmp_path / "ckpt"), checkpoint_interval=0.2
    )
    try:
        asker = threading.Thread(target=session.rescale, args=(1,))
        session.poll(0.3)
        asker.start()
        asker.join()
        while not session.rescales:  # (a rescale that never comes fails under pytest-timeout)
            session.poll(0.05)
        made = time.time()
        end.touch()
        # last() reads the file's time as the workers' clock, true of a local disk: it
        # must not be behind the time it was made by an epoch (a lag makes `last` short)
        assert os.stat(end).st_mtime > made - source.pace, "the file's time lags the clock"
        results = session.join()
    finally:
        if not end.exists():
            end.touch()  # (the source ends: nothing keeps running after a failure)
        session.close()
    last = source.last()
    assert last is not None
    assert [(r["from"], r["to"]) for r in session.rescales] == [(2, 1)]
    assert session.workers == 1
    want = build().run(workers=2, backend="inline")  # (it reads `end` too)
    for name in ("counts", "totals"):
        assert sorted(results[name]) == sorted(want[name]), name
    assert {e for e, _ in want["counts"]} == set(range(last + 1))


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
