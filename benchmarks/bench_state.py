"""State larger than memory: the disk state backend against the memory one, and against
RocksDB alone.

A running value per key (``running_reduce``, each value a 100-byte string that the
newest record replaces), one worker inline: first the keys are loaded, ``--batch`` new
keys an epoch, then ``--updates`` epochs each touch 1% of the keys at random. Each
configuration runs in a process of its own, so that its peak RSS (``ru_maxrss``) is its
own. Reported: keys per second loading and updating, peak RSS, and the ratios of the
disk backend to the memory backend (same run) and to the raw limit, RocksDB written and
read directly through ``rocksdict`` with the same keys, values and batches (what the
backend costs on top of its store).

Goal (issue 15): 20M keys x 100 B on one worker with ``state_backend="disk"`` runs with
a peak RSS <= 1 GiB; throughput reported next to the memory backend at 1M keys.

    python -m benchmarks.bench_state [--quick]
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
VALUE = "v" * 90


def value(k: int, e: int) -> str:
    """A 100-byte value, different at each epoch."""
    return f"{VALUE}{k:06d}{e:04d}"[-100:]


def epochs(keys: int, batch: int, updates: int) -> tuple[list[range], list[list[int]]]:
    loads = [range(lo, min(lo + batch, keys)) for lo in range(0, keys, batch)]
    rng = random.Random(5)
    touched = max(1, keys // 100)
    return loads, [rng.sample(range(keys), touched) for _ in range(updates)]


def dataflow_run(keys: int, batch: int, updates: int, **options: Any) -> dict[str, Any]:
    """One configuration through the dataflow: seconds loading and updating."""
    import operators  # noqa: F401 - registers the stream methods
    from timely import Dataflow

    loads, touches = epochs(keys, batch, updates)
    flow = Dataflow("state-bench")
    handle = flow.new_input()
    seen = [0]

    def count(_: int, records: list[Any]) -> None:
        seen[0] += len(records)

    running = handle.stream.running_reduce(
        operator.itemgetter(0), lambda a, b: b, value=operator.itemgetter(1)
    )
    running.subscribe(count)
    with flow.activate(workers=1, backend="inline", progress=False, **options) as session:
        start = time.perf_counter()
        e = 0
        for ks in loads:
            handle.send([(k, value(k, e)) for k in ks])
            e += 1
            handle.advance_to(e)
            session.poll()
            if e % 20 == 0:  # progress, on stderr
                rate = ks.stop / (time.perf_counter() - start)
                print(f"{ks.stop:,} keys loaded, {rate:,.0f} keys/s", file=sys.stderr, flush=True)
        loaded = time.perf_counter()
        for n, ks in enumerate(touches, start=1):
            handle.send([(k, value(k, e)) for k in ks])
            e += 1
            handle.advance_to(e)
            session.poll()
            rate = n * len(ks) / (time.perf_counter() - loaded)
            print(f"{n} epochs updated, {rate:,.0f} keys/s", file=sys.stderr, flush=True)
        handle.close()
        session.join()
        done = time.perf_counter()
    assert seen[0] == keys + sum(map(len, touches))
    return {"load_s": loaded - start, "update_s": done - loaded}


def raw_run(keys: int, batch: int, updates: int, **_: Any) -> dict[str, Any]:
    """The same keys and values written (and, for updates, read first, as a running
    value is) straight into RocksDB through rocksdict, encoded with the same codec."""
    from timely.comm.serialization import decode_plain, encode_plain
    from timely.state.disk import _open

    loads, touches = epochs(keys, batch, updates)
    d = tempfile.mkdtemp(prefix="bench-state-")
    db = _open(d)
    from rocksdict import WriteBatch

    try:
        start = time.perf_counter()
        e = 0
        for ks in loads:
            wb = WriteBatch(raw_mode=True)
            for k, v in zip(encode_plain(list(ks)), encode_plain([value(k, e) for k in ks])):
                wb.put(k, v)
            db.write(wb)
            e += 1
        loaded = time.perf_counter()
        for ks in touches:
            raw = encode_plain(ks)
            olds = decode_plain([db.get(k) for k in raw])
            assert len(olds) == len(ks)
            wb = WriteBatch(raw_mode=True)
            for k, v in zip(raw, encode_plain([value(k, e) for k in ks])):
                wb.put(k, v)
            db.write(wb)
            e += 1
        done = time.perf_counter()
    finally:
        db.close()
        shutil.rmtree(d, ignore_errors=True)
    return {"load_s": loaded - start, "update_s": done - loaded}


def one(config: dict[str, Any]) -> dict[str, Any]:
    """Run one configuration in this process and add its peak RSS."""
    kind = config.pop("kind")
    keys, batch, updates = config["keys"], config["batch"], config["updates"]
    if kind == "raw":
        out = raw_run(keys, batch, updates)
    elif kind == "disk":
        with tempfile.TemporaryDirectory() as d:
            out = dataflow_run(keys, batch, updates, state_backend="disk", state_dir=d)
    else:
        out = dataflow_run(keys, batch, updates)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    touched = updates * max(1, keys // 100)
    return {
        "kind": kind,
        **config,
        **out,
        "load_keys_per_s": keys / out["load_s"],
        "update_keys_per_s": touched / out["update_s"] if touched else 0.0,
        "peak_rss_bytes": rss,
    }


def spawn(**config: Any) -> dict[str, Any]:
    """:func:`one` in a fresh process (its own peak RSS)."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_state", "--one", json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=None if config["keys"] > 2_000_000 else subprocess.PIPE,  # progress shows
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{config}: failed\n{(proc.stderr or '')[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="100K and 1M keys only")
    parser.add_argument("--big", type=int, default=20_000_000, help="keys of the big run")
    parser.add_argument("--batch", type=int, default=100_000, help="new keys per epoch")
    parser.add_argument("--updates", type=int, default=10, help="epochs touching 1%")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(json.loads(args.one))))
        return
    from benchmarks.tables import markdown

    sizes = [100_000, 1_000_000] if args.quick else [1_000_000]
    rows: list[dict[str, Any]] = []
    for keys in sizes:
        for kind in ("memory", "disk", "raw"):
            rows.append(spawn(kind=kind, keys=keys, batch=args.batch, updates=args.updates))
            print(json.dumps(rows[-1]), flush=True)
    if not args.quick:
        rows.append(spawn(kind="disk", keys=args.big, batch=args.batch, updates=args.updates))
        print(json.dumps(rows[-1]), flush=True)
    table = []
    for r in rows:
        same = {x["kind"]: x for x in rows if x["keys"] == r["keys"]}
        mem, raw = same.get("memory"), same.get("raw")
        table.append(
            [
                f"{r['keys']:,}",
                r["kind"],
                f"{r['load_keys_per_s']:,.0f}",
                f"{r['update_keys_per_s']:,.0f}",
                mib(r["peak_rss_bytes"]),
                f"{r['load_keys_per_s'] / mem['load_keys_per_s']:.2f}" if mem else "-",
                f"{r['update_keys_per_s'] / mem['update_keys_per_s']:.2f}" if mem else "-",
                f"{r['load_keys_per_s'] / raw['load_keys_per_s']:.2f}" if raw else "-",
                f"{r['update_keys_per_s'] / raw['update_keys_per_s']:.2f}" if raw else "-",
            ]
        )
    print(
        markdown(
            [
                "keys",
                "state",
                "load keys/s",
                "update keys/s",
                "peak RSS",
                "load / memory",
                "update / memory",
                "load / raw",
                "update / raw",
            ],
            table,
        )
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "bench_state.json"
    out.write_text(
        json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), "rows": rows}, indent=2)
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
