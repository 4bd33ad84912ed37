"""Batch coalescing (``coalesce_rows``): many tiny Arrow batches through an exchange.

Workload: a source whose every read is 64 batches of ``--rows`` rows (int64 key and
value), 2 partitions, 16 epochs; the table is exchanged by key, each batch gets a
``select`` (a kernel call per batch) and a ``group_by("k").agg(sum)`` per epoch, and the
per-epoch sums are collected. With 2 workers each tiny batch is split in two by the
exchange, so a step sends each peer hundreds of slices of a few rows. The run option
``coalesce_rows`` merges a step's slices for one peer toward that many rows before
they are sent (0: off). Every target's sums are checked equal to the off run's.

Rounds are interleaved (every target once per round) and the median reported, as rows
per second and as a ratio to the run without coalescing; with ``--ray`` also on Ray
with 2 workers (warm: the actors of an earlier run kept).

    python -m benchmarks.bench_coalesce [--rounds N] [--quick] [--ray]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa

import operators  # noqa: F401 - registers the stream methods
from benchmarks.tables import markdown, write_results
from operators.table import col
from timely import Dataflow, Source

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
TARGETS = (0, 1_024, 8_192, 65_536)


class TinyBatches(Source):
    """``per_read`` batches of ``rows`` rows a read, ``reads`` reads an epoch."""

    batches_per_step = 1

    def __init__(self, rows: int, per_read: int, reads: int, epochs: int) -> None:
        self.rows, self.per_read, self.reads, self.epochs = rows, per_read, reads, epochs

    def partitions(self) -> int:
        return 2

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        i = 0 if offset is None else int(offset)
        if i >= self.reads * self.epochs:
            return None
        rng = np.random.default_rng(i * 2 + partition)
        n = self.rows * self.per_read
        keys = pa.array(rng.integers(0, 1000, n))
        values = pa.array(rng.integers(0, 100, n))
        whole = pa.RecordBatch.from_arrays([keys, values], schema=SCHEMA)
        batches = [whole.slice(j * self.rows, self.rows) for j in range(self.per_read)]
        return i // self.reads, batches, i + 1


def run(src: TinyBatches, backend: str, target: int) -> tuple[float, dict[int, int]]:
    flow = Dataflow("coalesce")
    table = flow.source(src, name="tiny").as_table(SCHEMA)
    out = table.exchange("k").select("k", w=col("v") * 2).group_by("k").agg(s=col("w").sum())
    out.collect("sums")
    t0 = time.perf_counter()
    got = flow.run(workers=2, backend=backend, coalesce_rows=target)
    dt = time.perf_counter() - t0
    sums: dict[int, int] = {}
    for epoch, t in got["sums"]:
        sums[epoch] = sums.get(epoch, 0) + int(pa.compute.sum(t["s"]).as_py() or 0)
    return dt, sums


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=8, help="rows per tiny batch")
    ap.add_argument("--quick", action="store_true", help="a quarter of the reads, one round")
    ap.add_argument("--ray", action="store_true", help="also on Ray with 2 workers")
    args = ap.parse_args()
    reads = 4 if args.quick else 16
    rounds = 1 if args.quick else args.rounds
    src = TinyBatches(args.rows, 64, reads, 16)
    total = 2 * args.rows * 64 * reads * 16
    load = os.getloadavg()
    backends = ["inline"]
    run(src, "inline", 0)  # warm: imports and first-call costs stay out of the figures
    if args.ray:
        import logging

        import ray

        from timely.backends.ray import local_ray_options

        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            logging_level=logging.WARNING,
            **local_ray_options(),
        )
        run(src, "ray", 0)  # warm: the actors stay for the measured runs
        backends.append("ray")
    times: dict[tuple[str, int], list[float]] = {}
    want: dict[str, dict[int, int]] = {}
    for _ in range(rounds):
        for backend in backends:
            for target in TARGETS:
                dt, sums = run(src, backend, target)
                assert want.setdefault(backend, sums) == sums, (backend, target)
                times.setdefault((backend, target), []).append(dt)
    rows = []
    for backend in backends:
        base = statistics.median(times[(backend, 0)])
        for target in TARGETS:
            dt = statistics.median(times[(backend, target)])
            rows.append(
                [
                    f"{backend} x2",
                    f"{target:,}" if target else "off",
                    f"{dt:.3f}",
                    f"{total / dt:,.0f}",
                    f"{base / dt:.2f}x",
                ]
            )
    print(f"{total:,} rows in batches of {args.rows}; median of {rounds} round(s)\n")
    print(markdown(["backend", "coalesce_rows", "median s", "rows/s", "vs off"], rows))
    write_results(
        "bench_coalesce",
        args.quick,
        {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_at_start": load,
            "rows": total,
            "rows_per_batch": args.rows,
            "rounds": rounds,
            "seconds": {f"{b} x2, {t}": times[(b, t)] for b, t in times},
        },
    )


if __name__ == "__main__":
    main()
