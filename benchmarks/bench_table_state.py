"""State across epochs on tables: ``running_agg`` (Arrow columns, ``ColumnState``) against
the row path's ``running_reduce`` (a dict per worker), with and without a checkpoint at
every epoch, and against the raw limit (numpy adding each epoch into a dense array).

A running sum per key, one worker inline: ``--keys`` keys loaded ``--batch`` an epoch,
then ``--updates`` epochs each touching 1% of the keys at random (issue 30's "1M keys,
1% touched per epoch"). Rounds interleave the configurations; medians are reported,
with each configuration's ratio to the others in the same round.

With ``--backends``, the state backends instead: ``running_agg`` over ``--sizes`` keys
(loaded ``--batch`` an epoch, then ``--updates`` epochs touching 1%), with
``state_backend="memory"`` and ``"disk"``, each configuration in a process of its own so
that its peak RSS (``ru_maxrss``) is its own, beside the peak of its anonymous memory
(``RssAnon``, sampled every 10 ms: what the OS cannot drop, where ``ru_maxrss`` also counts
the pages of mapped files it may drop under pressure).

    python -m benchmarks.bench_table_state [--quick]
    python -m benchmarks.bench_table_state --backends [--quick]
"""

from __future__ import annotations

import argparse
import json
import operator
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])


def plan(keys: int, batch: int, updates: int) -> list[np.ndarray[Any, Any]]:
    """The keys of each epoch: loads, then 1% touched at random per epoch."""
    loads = [np.arange(lo, min(lo + batch, keys)) for lo in range(0, keys, batch)]
    rng = np.random.default_rng(5)
    touched = max(1, keys // 100)
    return loads + [rng.choice(keys, touched, replace=False) for _ in range(updates)]


def table_run(epochs: list[np.ndarray[Any, Any]], **options: Any) -> float:
    import operators  # noqa: F401 - registers the stream methods
    from operators.table import col, table_input
    from timely import Dataflow

    flow = Dataflow("table-state")
    inp = table_input(flow, SCHEMA)
    seen = [0]
    inp.table.group_by("k").running_agg(s=col("v").sum()).subscribe(
        lambda e, t: seen.__setitem__(0, seen[0] + t.num_rows)
    )
    for e, ks in enumerate(epochs):
        inp.advance_to(e)
        inp.send(
            pa.record_batch(
                [pa.array(ks), pa.array(np.ones(len(ks), dtype=np.int64))], schema=SCHEMA
            )
        )
    inp.close()
    return _timed(flow, seen, epochs, **options)


def row_run(epochs: list[np.ndarray[Any, Any]], **options: Any) -> float:
    import operators  # noqa: F401 - registers the stream methods
    from timely import Dataflow

    flow = Dataflow("row-state")
    handle = flow.new_input()
    seen = [0]
    handle.stream.running_reduce(
        operator.itemgetter(0), lambda a, b: (a[0], a[1] + b[1])
    ).subscribe(lambda e, rs: seen.__setitem__(0, seen[0] + len(rs)))
    for e, ks in enumerate(epochs):
        handle.advance_to(e)
        handle.send([(k, 1) for k in ks.tolist()])
    handle.close()
    return _timed(flow, seen, epochs, **options)


def _timed(flow: Any, seen: list[int], epochs: list[Any], **options: Any) -> float:
    """Seconds of the whole run (every key of every epoch out once)."""
    t0 = time.perf_counter()
    flow.run(workers=1, backend="inline", **options)
    total = time.perf_counter() - t0
    assert seen[0] == sum(len(k) for k in epochs), "every key of every epoch out once"
    return total


def numpy_run(epochs: list[np.ndarray[Any, Any]], keys: int) -> float:
    """The raw limit: each epoch added into a dense array, its keys' sums read out."""
    t0 = time.perf_counter()
    sums = np.zeros(keys, dtype=np.int64)
    out = 0
    for ks in epochs:
        np.add.at(sums, ks, 1)
        out += len(sums[ks])
    assert out == sum(len(k) for k in epochs)
    return time.perf_counter() - t0


def backend_run(keys: int, batch: int, updates: int, **options: Any) -> dict[str, float]:
    """``running_agg`` fed an epoch at a time (the driver holds one batch, not the run's):
    seconds loading and updating."""
    import operators  # noqa: F401 - registers the stream methods
    from operators.table import col, table_input
    from timely import Dataflow

    epochs = plan(keys, batch, updates)
    loads = -(-keys // batch)
    flow = Dataflow("table-backends")
    inp = table_input(flow, SCHEMA)
    seen = [0]
    inp.table.group_by("k").running_agg(s=col("v").sum()).subscribe(
        lambda e, t: seen.__setitem__(0, seen[0] + t.num_rows)
    )
    with flow.activate(workers=1, backend="inline", progress=False, **options) as session:
        start = time.perf_counter()
        loaded = start
        for e, ks in enumerate(epochs):
            if e == loads:
                loaded = time.perf_counter()
            ones = np.ones(len(ks), dtype=np.int64)
            inp.send(pa.record_batch([pa.array(ks), pa.array(ones)], schema=SCHEMA))
            inp.advance_to(e + 1)
            session.poll()
        inp.close()
        session.join()
        done = time.perf_counter()
    assert seen[0] == sum(len(k) for k in epochs), "every key of every epoch out once"
    return {"load_s": loaded - start, "update_s": done - loaded}


def _anon_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def one(config: dict[str, Any]) -> dict[str, Any]:
    """One backend's run in this process, with its peak RSS and peak anonymous memory."""
    peak = [0]
    running = [True]

    def sample() -> None:
        while running[0]:
            peak[0] = max(peak[0], _anon_kib())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    keys, batch, updates = config["keys"], config["batch"], config["updates"]
    if config["backend"] == "disk":
        with tempfile.TemporaryDirectory(dir=config.get("state_dir")) as d:
            out = backend_run(keys, batch, updates, state_backend="disk", state_dir=d)
    else:
        out = backend_run(keys, batch, updates)
    running[0] = False
    sampler.join()
    return {
        **config,
        **out,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_anon_bytes": peak[0] * 1024,
    }


def spawn(**config: Any) -> dict[str, Any]:
    """:func:`one` in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_table_state", "--one", json.dumps(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{config}: failed\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def backends(sizes: list[int], batch: int, updates: int, quick: bool) -> None:
    """Memory against disk at each size, each run in its own process."""
    from benchmarks.tables import markdown, write_results

    rows = []
    for keys in sizes:
        for backend in ("memory", "disk"):
            rows.append(spawn(backend=backend, keys=keys, batch=batch, updates=updates))
            print(json.dumps(rows[-1]), flush=True)

    def mib(n: float) -> str:
        return f"{n / 2**20:,.0f} MiB"

    table = []
    for r in rows:
        mem = next(x for x in rows if x["keys"] == r["keys"] and x["backend"] == "memory")
        table.append(
            [
                f"{r['keys']:,}",
                r["backend"],
                f"{r['load_s']:.2f}",
                f"{r['update_s']:.2f}",
                mib(r["peak_rss_bytes"]),
                mib(r["peak_anon_bytes"]),
                f"{(r['load_s'] + r['update_s']) / (mem['load_s'] + mem['update_s']):.2f}",
                f"{r['peak_rss_bytes'] / mem['peak_rss_bytes']:.2f}",
                f"{r['peak_anon_bytes'] / mem['peak_anon_bytes']:.2f}",
            ]
        )
    print(
        markdown(
            [
                "keys",
                "backend",
                "load s",
                "update s",
                "peak RSS",
                "peak anon",
                "time / memory",
                "RSS / memory",
                "anon / memory",
            ],
            table,
        )
    )
    path = write_results(
        "table_state_backends", quick, {"machine": platform.platform(), "rows": rows}
    )
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--backends", action="store_true", help="memory against disk")
    parser.add_argument(
        "--sizes", default="1000000,5000000", help="keys of each --backends run, by commas"
    )
    parser.add_argument("--quick", action="store_true", help="100k keys, 2 rounds")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(json.loads(args.one))))
        return
    if args.backends:
        sizes = [100_000, 500_000] if args.quick else [int(n) for n in args.sizes.split(",")]
        backends(sizes, args.batch, args.updates, args.quick)
        return
    if args.quick:
        args.keys, args.batch, args.rounds = 100_000, 20_000, 2
    epochs = plan(args.keys, args.batch, args.updates)
    configs = {
        "table": lambda: table_run(epochs),
        "table, checkpoint every epoch (incremental)": lambda: _ckpt(table_run, epochs),
        "row": lambda: row_run(epochs),
        "row, checkpoint every epoch (incremental)": lambda: _ckpt(row_run, epochs),
        "numpy dense array (raw limit)": lambda: numpy_run(epochs, args.keys),
    }
    times: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, fn in configs.items():
            times[name].append(fn())
    med = {name: statistics.median(ts) for name, ts in times.items()}
    base = med["table"]
    print(f"{args.keys:,} keys, {args.updates} epochs touching 1%, inline x1, {args.rounds} rounds")
    print(f"{'configuration':48} {'seconds':>8} {'x table':>8}")
    for name, s in med.items():
        print(f"{name:48} {s:8.3f} {s / base:8.2f}")
    ckpt = " checkpoint every epoch (incremental)"
    table_cost = med[f"table,{ckpt}"] / base - 1
    row_cost = med[f"row,{ckpt}"] / med["row"] - 1
    print(f"checkpoint cost: table +{table_cost:.0%}, row +{row_cost:.0%}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "table_state.json").write_text(
        json.dumps(
            {
                "machine": platform.machine(),
                "keys": args.keys,
                "updates": args.updates,
                "seconds": med,
                "all": times,
            },
            indent=1,
        )
    )


def _ckpt(fn: Any, epochs: list[Any]) -> float:
    with tempfile.TemporaryDirectory() as d:
        result: float = fn(epochs, checkpoint=d, checkpoint_every=1, checkpoint_incremental=True)
        return result


if __name__ == "__main__":
    main()
