"""A step sends the Arrow data it routed to a peer once ``send_early_bytes`` of it are
routed, before the step ends (``Worker._send_early``), the step's progress batch after
it on the same FIFO channel.

- Outputs: every epoch's rows after an exchange, and a per-epoch aggregate (which waits
  for notifications, so a frontier that passed data still on its way would show), are
  those of a run that sends at the step's end, on ``inline`` (random sizes and
  thresholds) and on Ray (where the frames go before the step ends: counted).
- Mutations: a step that sends a buffer early but keeps appending to it (one count for
  two deliveries), or one that sends a buffer and keeps it to send again, is caught.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import ray
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count
from timely import ConfigError, Dataflow, Source
from timely.comm.coalesce import coalesce
from timely.comm.messages import WorkerMessage
from timely.worker.loop import Worker

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])


class Batches(Source):
    """Per read, ``per_read`` batches of ``rows`` rows of random keys; two reads an
    epoch; several reads (so several epochs) a step."""

    batches_per_step = 8
    records_per_step = 1 << 30

    def __init__(self, reads: int, per_read: int, rows: int) -> None:
        self.reads, self.per_read, self.rows = reads, per_read, rows

    def partitions(self) -> int:
        return 2

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        i = 0 if offset is None else int(offset)
        if i >= self.reads:
            return None
        rng = np.random.default_rng(partition * 1000 + i)
        out = []
        for j in range(self.per_read):
            k = rng.integers(0, 50, self.rows)
            v = np.full(self.rows, (partition * self.reads + i) * self.per_read + j)
            out.append(pa.record_batch([pa.array(k), pa.array(v)], schema=SCHEMA))
        return i // 2, out, i + 1


def run(
    send_early: int,
    backend: str = "inline",
    workers: int = 2,
    reads: int = 8,
    per_read: int = 6,
    rows: int = 300,
) -> tuple[dict[int, list[Any]], dict[int, list[Any]], list[dict[str, Any]]]:
    """Each epoch's rows after the exchange and its per-key counts and sums (sorted),
    and the Ray workers' counters."""
    flow = Dataflow("early")
    table = flow.source(Batches(reads, per_read, rows)).as_table(SCHEMA).exchange("k")
    table.collect("rows")
    table.group_by("k").agg(count().alias("n"), col("v").sum().alias("s")).collect("agg")
    session = flow.activate(workers=workers, backend=backend, send_early_bytes=send_early)
    try:
        out = session.join()
        stats = (
            ray.get([a.stats.remote() for a in session.actors])  # type: ignore[attr-defined]
            if backend == "ray"
            else []
        )
    finally:
        session.close()
    seen: dict[int, list[Any]] = defaultdict(list)
    for epoch, t in out["rows"]:
        seen[epoch].extend(zip(t["k"].to_pylist(), t["v"].to_pylist(), strict=True))
    agg: dict[int, list[Any]] = defaultdict(list)
    for epoch, t in out["agg"]:
        agg[epoch].extend(zip(t["k"].to_pylist(), t["n"].to_pylist(), t["s"].to_pylist()))
    return (
        {e: sorted(r) for e, r in seen.items()},
        {e: sorted(r) for e, r in agg.items()},
        stats,
    )


def expected(reads: int, per_read: int, rows: int) -> dict[int, list[Any]]:
    """Each epoch's rows, from the source alone."""
    src = Batches(reads, per_read, rows)
    out: dict[int, list[Any]] = defaultdict(list)
    for p in range(2):
        offset = None
        while (got := src.read(p, offset)) is not None:
            epoch, batches, offset = got
            for b in batches:
                out[epoch].extend(zip(b["k"].to_pylist(), b["v"].to_pylist(), strict=True))
    return {e: sorted(r) for e, r in out.items()}


def check(send_early: int, workers: int = 2, reads: int = 8, per_read: int = 6) -> None:
    """Sent early, the same rows and aggregates in every epoch as sent at the step's end,
    and the rows the source made."""
    rows, agg, _ = run(send_early, workers=workers, reads=reads, per_read=per_read)
    plain_rows, plain_agg, _ = run(0, workers=workers, reads=reads, per_read=per_read)
    assert rows == plain_rows == expected(reads, per_read, 300)
    assert agg == plain_agg


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([1, 2000, 5000, 50_000]), st.integers(2, 3), st.integers(1, 8))
def test_early_sends_keep_every_epochs_rows_and_aggregates(
    send_early: int, workers: int, per_read: int
) -> None:
    check(send_early, workers, reads=6, per_read=per_read)


def test_early_sends_happen_and_keep_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = []
    real = Worker._send_early

    def spy(self: Worker, dest: int) -> bool:
        ok = real(self, dest)
        sent.append(ok)
        return ok

    monkeypatch.setattr(Worker, "_send_early", spy)
    check(1)
    assert sent and all(sent)  # inline: a peer's queue always takes a frame


@pytest.mark.usefixtures("ray_local")
def test_on_ray_frames_go_before_the_step_ends() -> None:
    rows, agg, stats = run(1, backend="ray", rows=2000)
    plain_rows, plain_agg, plain_stats = run(0, backend="ray", rows=2000)
    assert rows == plain_rows == expected(8, 6, 2000)
    assert agg == plain_agg
    assert sum(s["early_frames"] for s in stats) > 0
    assert sum(s["early_frames"] for s in plain_stats) == 0


def test_a_run_checks_send_early_bytes() -> None:
    flow = Dataflow("x")
    flow.new_input().stream.collect("out")
    with pytest.raises(ConfigError, match="send_early_bytes must be a number of bytes"):
        flow.run(workers=1, backend="inline", send_early_bytes=-1)


def _keeps_the_buffer(self: Worker, dest: int) -> bool:
    """Mutant: the buffers go, but stay in ``_out`` emptied, so what is routed to them
    later in the step is delivered again under the one count taken when they began."""
    early = self.early
    assert early is not None
    msg = WorkerMessage(self.index, self._seq[dest])
    for (d, v, port, time), records in self._out.items():
        if d == dest and records:
            msg.data.append((v, port, time, coalesce(list(records), 0)))
            records.clear()
    self._seq[dest] += 1
    self._sent_early = True
    early.send(dest, msg)
    return True


def _sends_twice(self: Worker, dest: int) -> bool:
    """Mutant: the buffers go, and stay to go again at the step's end."""
    early = self.early
    assert early is not None
    msg = WorkerMessage(self.index, self._seq[dest])
    for (d, v, port, time), records in self._out.items():
        if d == dest:
            msg.data.append((v, port, time, list(records)))
    self._seq[dest] += 1
    self._sent_early = True
    early.send(dest, msg)
    return True


@pytest.mark.parametrize("mutant", [_keeps_the_buffer, _sends_twice])
def test_the_check_catches_broken_early_sends(monkeypatch: pytest.MonkeyPatch, mutant: Any) -> None:
    monkeypatch.setattr(Worker, "_send_early", mutant)
    with pytest.raises(Exception):  # noqa: B017 - wrong outputs, or the run fails
        check(1)
