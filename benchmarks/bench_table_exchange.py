"""``Table.exchange`` of int64 batches between two Ray workers, next to the raw socket
push of the same bytes, in one run.

- **timely**: a table dataflow on Ray x2. The driver sends small seed tables; each seed
  row becomes, on its worker, one batch of ``--rows`` rows of two int64 columns (``k``
  random, ``v``), built once per worker and reused so that making data costs nothing.
  The batches go through ``exchange("k")`` (hashed, split per worker, Arrow IPC on the
  workers' Unix sockets) and each is counted where it lands. The same dataflow without
  the exchange (every batch stays on its worker) is run too; the exchange's own time is
  the difference, and the bytes it moved are the rows that changed worker (computed on
  the driver with the same routing) times 16.
- **raw push**: ``bench_transport``'s asyncio Unix-socket push (its ``Endpoint`` actors,
  the secret handshake, credits every half window of 8 frames), both ways at once as
  the two workers exchange, of Arrow IPC frames holding the same rows as the
  exchange's cross-worker frames (``timely.comm.serialization.encode`` on the sender,
  ``decode`` on the receiver, both timed). The physical limit for these bytes on this
  transport.

The ratio is raw time / timely time for the same bytes (1.0: the exchange runs at the
socket's speed). Repetitions are interleaved (timely, local, raw; then reversed).

    .venv/bin/python -m benchmarks.bench_table_exchange [--quick] [--rows N] [--batches N]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import ray

import operators  # noqa: F401 - registers the stream methods
from benchmarks.bench_transport import Endpoint, _get
from benchmarks.tables import markdown, write_results
from operators.table import Table, table_input
from timely import Dataflow
from timely.backends.ray import local_ray_options
from timely.comm.frames import credit_every
from timely.routing.columns import exchange_columns

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
SEEDS = pa.schema([("part", pa.int64())])
COUNTS = pa.schema([("rows", pa.int64())])
WINDOW = 8
WORKERS = 2


def int64_batch(rows: int, seed: int = 5) -> pa.RecordBatch:
    """``rows`` rows of random int64 keys and a counter: 16 bytes a row."""
    rng = np.random.default_rng(seed)
    k = rng.integers(-(2**62), 2**62, rows, dtype=np.int64)
    return pa.record_batch([pa.array(k), pa.array(np.arange(rows, dtype=np.int64))], schema=SCHEMA)


class Generate:
    """A seed row -> one int64 batch of ``rows`` rows, built once per worker."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.batch: pa.RecordBatch | None = None

    def __call__(self, seeds: pa.RecordBatch) -> pa.Table:
        if self.batch is None:
            self.batch = int64_batch(self.rows)
        return pa.Table.from_batches([self.batch] * seeds.num_rows, schema=SCHEMA)


def count_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.record_batch([pa.array([batch.num_rows], pa.int64())], schema=COUNTS)


def run_timely(rows: int, batches: int, exchange: bool) -> tuple[float, int]:
    """Wall seconds of a Ray x2 run that makes ``batches`` batches (spread over the
    workers by their seed) and exchanges them by ``k`` (or keeps them where they are);
    returns it with the rows counted at the end."""
    flow = Dataflow("table_exchange" if exchange else "table_local")
    seeds = table_input(flow, SEEDS, name="seeds")
    made: Table = seeds.table.exchange("part").map_batches(Generate(rows), SCHEMA)
    moved = made.exchange("k") if exchange else made
    moved.map_batches(count_rows, COUNTS, name="count").collect("rows")
    for i in range(0, batches, WORKERS):
        seeds.send(pa.table({"part": list(range(i, min(i + WORKERS, batches)))}, SEEDS))
    start = time.perf_counter()
    out = flow.run(workers=WORKERS, backend="ray")
    seconds = time.perf_counter() - start
    return seconds, sum(sum(t.column("rows").to_pylist()) for _, t in out["rows"])


def crossing(rows: int, batches: int) -> tuple[int, list[int]]:
    """How many rows change worker in the exchange, and how many of a batch's rows go
    to each worker (the seed's worker is where it was made): the runtime's routing."""
    batch = int64_batch(rows)
    to = exchange_columns("k").route([batch], WORKERS, 0)
    per_worker = [sum(p.num_rows for p in to.get(w, [])) for w in range(WORKERS)]
    seeds = pa.record_batch([pa.array(range(batches), pa.int64())], schema=SEEDS)
    made_on = exchange_columns("part").route([seeds], WORKERS, 0)
    moved = 0
    for w, parts in made_on.items():
        n = sum(p.num_rows for p in parts)
        moved += n * (rows - per_worker[w])
    return moved, per_worker


class ArrowEndpoint(Endpoint):
    """``bench_transport``'s endpoint pushing Arrow batches of ``rows`` int64 rows."""

    def use_rows(self, rows: int) -> int:
        self.batches = [[int64_batch(rows, seed)] for seed in range(4)]
        return rows


RemoteArrowEndpoint: Any = ray.remote(num_cpus=0)(ArrowEndpoint)


def raw_push(ends: list[Any], addrs: list[dict[str, str]], secret: bytes, frames: int) -> float:
    """Seconds for both endpoints to push ``frames // 2`` frames to each other at once."""
    each = frames // 2
    a, b = ends
    refs = [
        a.push.remote("unix", addrs[1]["unix"], secret, b, each, WINDOW),
        b.push.remote("unix", addrs[0]["unix"], secret, a, frames - each, WINDOW),
    ]
    got = _get(refs)
    assert [g["records"] for g in got] == [each, frames - each], got
    return max(g["seconds"] for g in got)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller batches")
    parser.add_argument("--rows", type=int, default=None, help="rows a batch (16 bytes each)")
    parser.add_argument("--batches", type=int, default=None, help="batches made in all")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    rows = args.rows or (1 << 14 if args.quick else 1 << 16)
    batches = args.batches or (32 if args.quick else 256)
    repeat = args.repeat or (2 if args.quick else 5)
    load = os.getloadavg()
    started = time.perf_counter()
    moved, per_worker = crossing(rows, batches)
    half = min(per_worker)  # a cross-worker frame carries about this many rows
    frames = max(2, round(moved / half))
    ray.init(
        address="local",
        num_cpus=WORKERS,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
        **local_ray_options(),
    )
    secret = os.urandom(32)
    try:
        ends = [RemoteArrowEndpoint.remote() for _ in range(WORKERS)]
        _get([e.use_rows.remote(half) for e in ends])
        addrs = _get([e.listen.remote(secret, ["unix"], credit_every(WINDOW)) for e in ends])
        run_timely(64, 2, True)  # starts the workers (kept for the runs after)
        walls: dict[str, list[float]] = {"exchange": [], "local": [], "raw": []}
        for rep in range(repeat):
            order = ["exchange", "local", "raw"]
            for what in order if rep % 2 == 0 else order[::-1]:
                print(f"  rep {rep + 1}/{repeat}: {what}", file=sys.stderr)
                if what == "raw":
                    walls["raw"].append(raw_push(ends, addrs, secret, frames))
                    continue
                seconds, counted = run_timely(rows, batches, what == "exchange")
                assert counted == rows * batches, (what, counted)
                walls[what].append(seconds)
        _get([e.close.remote() for e in ends])
    finally:
        ray.shutdown()
    total = time.perf_counter() - started

    med = {k: statistics.median(v) for k, v in walls.items()}
    pairs = [x - loc for x, loc in zip(walls["exchange"], walls["local"], strict=True)]
    own = statistics.median(pairs)
    mb = moved * 16 / 1e6
    raw_frames_mb = frames * half * 16 / 1e6

    def line(what: str, wall: float, mb_moved: float | None, ratio: bool) -> list[str]:
        rate = f"{mb_moved / wall:.0f}" if mb_moved else ""
        return [what, f"{wall:.3f}", rate, f"{med['raw'] / wall:.2f}x" if ratio else ""]

    table = [
        line("timely Ray x2, make + exchange + count", med["exchange"], mb, True),
        line("timely Ray x2, make + count (no exchange)", med["local"], None, False),
        line("timely: the exchange's own time (paired difference)", own, mb, True),
        line("raw push, asyncio Unix sockets, both ways", med["raw"], raw_frames_mb, True),
    ]
    print(
        f"## Table.exchange of int64 batches, Ray x2: {batches} batches of {rows:,} rows "
        f"({batches * rows * 16 / 1e6:.0f} MB made, {mb:.0f} MB change worker), "
        f"median of {repeat}\n"
    )
    print(markdown(["what", "wall s", "MB/s moved", "raw / timely"], table))
    print(
        f"\nload average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"run took {total:.0f} s"
    )
    write_results(
        "table_exchange",
        args.quick,
        {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": load,
            "rows": rows,
            "batches": batches,
            "moved_rows": moved,
            "raw_frames": frames,
            "raw_rows_a_frame": half,
            "repeat": repeat,
            "run_s": total,
            "walls": walls,
            "exchange_own_s": pairs,
        },
    )


if __name__ == "__main__":
    main()
