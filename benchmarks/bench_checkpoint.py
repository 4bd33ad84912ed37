"""Checkpoint benchmarks: the cost of checkpointing, the time to recover, and the size.

1. Throughput with a checkpoint after every epoch against none, same dataflow, same
   run, alternating the two so that machine load hits both alike: a word count kept
   across epochs (``running_reduce``) over generated text, on Ray with 2 workers and
   inline with 1. Goal: at most 10% slower.
2. Recovery: on Ray with 2 workers, epochs streamed by the driver; once epoch ``e`` is
   out, a worker is killed with ``ray.kill``; the time from the kill to epoch ``e + 1``
   (the first new output, which needs the failure detected, new actors started, the
   checkpoint restored and the inputs replayed) reaching the driver. Goal: <= 3 s.
   Also incremental checkpoints (``checkpoint_incremental=True``), and a running count
   over 1M keys touching 1% of them per epoch (goal: <= 10% slower; bytes per
   checkpoint follow the keys touched).
3. Restore time against state size (1M and 10M keys), from a whole checkpoint and from
   the end of a chain of 10 deltas (1% of the keys each).
4. Size and write time against state size: a ``running_reduce`` table of K keys,
   snapshotted, encoded (msgpack) and written to a local checkpoint store, and read
   back; K = 1e3 .. 1e6.

    python -m benchmarks.bench_checkpoint [--quick] [--skip-ray]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import operators  # noqa: F401 - registers the stream methods
from benchmarks.tables import markdown
from timely import Dataflow
from timely.checkpoint.store import CheckpointStore, decode_part
from timely.comm import serialization
from timely.state.keyed import KeyedState

RESULTS = Path(__file__).resolve().parent / "results"


def text(epochs: int, lines: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = [f"word{i}" for i in range(5000)]
    return [[" ".join(rng.choices(vocab, k=10)) for _ in range(lines)] for _ in range(epochs)]


def running_wordcount(
    data: list[list[str]],
    backend: str,
    workers: int,
    table: bool = False,
    cadence: list[Any] | None = None,
    **options: Any,
) -> float:
    """Seconds to run the whole input through; every epoch's output reaches the driver.
    ``table``: the same word count on the table API (``group_by("word").running_agg``,
    its state a ``ColumnState`` of Arrow columns), each epoch's lines sent as one table.
    ``cadence``: gets the run's measurements of its checkpoints' share appended
    (``session.cadence``)."""
    flow = Dataflow("ckpt-bench")
    seen: list[int] = []
    if table:
        import pyarrow as pa

        from operators.table import col, count, table_input

        inp = table_input(flow, pa.schema([("line", pa.string())]))
        lines: Any = inp
        (
            inp.table.select(word=col("line").str.split())
            .explode("word")
            .group_by("word")
            .running_agg(count().alias("n"))
            .subscribe(lambda e, _: seen.append(e))
        )
        batches: list[Any] = [pa.table({"line": batch}) for batch in data]
    else:
        lines = flow.new_input()
        (
            lines.stream.select_many(str.split)
            .running_reduce(lambda w: w, lambda a, b: a + b, lambda w: 1)
            .subscribe(lambda e, _: seen.append(e))
        )
        batches = list(data)
    start = time.perf_counter()
    with flow.activate(workers=workers, backend=backend, **options) as session:
        for e, batch in enumerate(batches):
            lines.advance_to(e)
            lines.send(batch)
            session.poll()
        lines.close()
        session.join()
    elapsed = time.perf_counter() - start
    if cadence is not None:
        cadence.extend(session.cadence)
    assert len(set(seen)) == len(data), (len(set(seen)), len(data))
    return elapsed


def throughput(
    backend: str,
    workers: int,
    epochs: int,
    lines: int,
    rounds: int,
    incremental: bool = True,
    table: bool = False,
) -> dict[str, Any]:
    """None, whole checkpoints after every epoch and (``incremental``) incremental ones,
    alternating round by round (``table``: the table API's word count). Besides the
    wall time, the ratios of the process's CPU time (``*_cpu``: what a shared machine
    disturbs far less)."""
    data = text(epochs, lines)
    words = epochs * lines * 10
    plain, ckpt, inc = [], [], []
    cpu: dict[str, list[float]] = {"plain": [], "ckpt": [], "inc": []}

    def timed(kind: str, **options: Any) -> float:
        c0 = time.process_time()
        wall = running_wordcount(data, backend, workers, table=table, **options)
        cpu[kind].append(time.process_time() - c0)
        return wall

    running_wordcount(data[:3], backend, workers, table=table)  # warm up (Ray start, imports)
    for _ in range(rounds):
        plain.append(timed("plain"))
        with tempfile.TemporaryDirectory() as d:
            ckpt.append(timed("ckpt", checkpoint=d))
        if incremental:
            with tempfile.TemporaryDirectory() as d:
                inc.append(timed("inc", checkpoint=d, checkpoint_incremental=True))
    p, c = statistics.median(plain), statistics.median(ckpt)
    out = {
        "backend": backend,
        "workers": workers,
        "api": "table" if table else "rows",
        "slowdown_cpu": statistics.median(a / b for a, b in zip(cpu["ckpt"], cpu["plain"])) - 1,
        "epochs": epochs,
        "words": words,
        "plain_words_per_s": words / p,
        "checkpointed_words_per_s": words / c,
        "slowdown": c / p - 1,
    }
    if inc:
        i = statistics.median(inc)
        out |= {
            "incremental_words_per_s": words / i,
            "incremental_slowdown": i / p - 1,
            "incremental_slowdown_cpu": statistics.median(
                a / b for a, b in zip(cpu["inc"], cpu["plain"])
            )
            - 1,
        }
    return out


def touched(keys: int, fraction: float, epochs: int, rounds: int) -> dict[str, Any]:
    """A running count over ``keys`` int keys, every key loaded at epoch 0, then each
    epoch touching ``fraction`` of them: seconds for the epochs after the load with no
    checkpoint, a whole one after every epoch and an incremental one (interleaved), and
    the bytes each kind of checkpoint writes per epoch."""
    import operator

    rng = random.Random(3)
    per_epoch = max(1, int(keys * fraction))
    batches = [rng.sample(range(keys), per_epoch) for _ in range(epochs)]

    def run(disk: bool = False, **options: Any) -> tuple[float, list[int]]:
        flow = Dataflow("touched")
        handle = flow.new_input()
        seen: list[int] = []
        counts = handle.stream.running_reduce(lambda k: k, operator.add, value=lambda k: 1)
        counts.subscribe(lambda e, _: seen.append(e))
        with tempfile.TemporaryDirectory() as d:
            opts = {"checkpoint": d, "keep_checkpoints": epochs + 1, **options} if options else {}
            if disk:
                opts["state_backend"] = "disk"
            with flow.activate(workers=1, backend="inline", **opts) as session:
                handle.send(list(range(keys)))
                handle.advance_to(1)
                while not seen:
                    session.poll()
                start = time.perf_counter()
                for e, batch in enumerate(batches, start=1):
                    handle.send(batch)
                    handle.advance_to(e + 1)
                    session.poll()
                handle.close()
                session.join()
                elapsed = time.perf_counter() - start
            sizes = []
            for name in sorted(os.listdir(d)):
                manifest = Path(d, name, "MANIFEST.json")
                if manifest.exists():
                    parts = json.loads(manifest.read_text())["parts"]
                    sizes.append(sum(p["size"] for p in parts))
        return elapsed, sizes

    plain, whole, inc, deltas, disk_plain, disk_inc = [], [], [], [], [], []
    whole_sizes: list[int] = []
    inc_sizes: list[int] = []
    for _ in range(rounds):
        plain.append(run()[0])
        t, whole_sizes = run(checkpoint_every=1)
        whole.append(t)
        t, inc_sizes = run(checkpoint_every=1, checkpoint_incremental=True)
        inc.append(t)
        # Deltas only (no whole part after the first): what a delta itself costs.
        deltas.append(run(checkpoint_every=1, checkpoint_incremental=10_000)[0])
        # The same on the disk state backend: checkpoints read the table from RocksDB.
        disk_plain.append(run(disk=True)[0])
        disk_inc.append(run(disk=True, checkpoint_every=1, checkpoint_incremental=True)[0])
    p, w, i, d = (statistics.median(x) for x in (plain, whole, inc, deltas))
    dp, di = statistics.median(disk_plain), statistics.median(disk_inc)
    return {
        "disk_plain_s": dp,
        "disk_incremental_s": di,
        "disk_incremental_slowdown": di / dp - 1,
        "disk_vs_memory": dp / p,
        "keys": keys,
        "touched_per_epoch": per_epoch,
        "epochs": epochs,
        "plain_s": p,
        "whole_s": w,
        "incremental_s": i,
        "deltas_only_s": d,
        "whole_slowdown": w / p - 1,
        "incremental_slowdown": i / p - 1,
        "deltas_only_slowdown": d / p - 1,
        "whole_bytes_per_epoch": statistics.median(whole_sizes[1:]),
        "incremental_bytes_per_epoch": statistics.median(inc_sizes[1:]),
        "incremental_bytes_max": max(inc_sizes[1:]),
    }


def against(
    checkout: str, backend: str, workers: int, epochs: int, lines: int, rounds: int
) -> list[dict[str, Any]]:
    """The same throughput measurement, alternating round by round between this checkout
    (in this process) and another one (a subprocess importing that checkout's timely),
    so that both see the same machine load: ``[this, other]``."""
    code = (
        "import json, sys; from benchmarks.bench_checkpoint import throughput; "
        f"print(json.dumps(throughput({backend!r}, {workers}, {epochs}, {lines}, 1)))"
    )
    env = {**os.environ, "PYTHONPATH": checkout}
    mine, theirs = [], []
    for _ in range(rounds):
        mine.append(throughput(backend, workers, epochs, lines, 1))
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=checkout, env=env, capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(f"the run in {checkout} failed:\n{done.stderr[-2000:]}")
        theirs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    out = []
    for runs, label in ((mine, "this checkout"), (theirs, checkout)):
        plain = statistics.median(r["words"] / r["plain_words_per_s"] for r in runs)
        ckpt = statistics.median(r["words"] / r["checkpointed_words_per_s"] for r in runs)
        words = runs[0]["words"]
        out.append(
            {
                **runs[0],
                "code": label,
                "plain_words_per_s": words / plain,
                "checkpointed_words_per_s": words / ckpt,
                "slowdown": ckpt / plain - 1,
            }
        )
    return out


_PAIR_CODE = """
import json, operator, random, statistics, sys, tempfile, time
from timely import Dataflow
import operators
from benchmarks.bench_checkpoint import running_wordcount, text

case, rounds, epochs = {case!r}, {rounds}, {epochs!r}


def touched(keys, checkpoint):
    rng = random.Random(3)
    batches = [rng.sample(range(keys), keys // 100) for _ in range(epochs or 20)]
    flow = Dataflow("touched")
    handle = flow.new_input()
    seen = []
    handle.stream.running_reduce(lambda k: k, operator.add, value=lambda k: 1).subscribe(
        lambda e, _: seen.append(e))
    with tempfile.TemporaryDirectory() as d:
        opts = dict(checkpoint=d, checkpoint_incremental=True) if checkpoint else {{}}
        with flow.activate(workers=1, backend="inline", **opts) as session:
            handle.send(list(range(keys)))
            handle.advance_to(1)
            while not seen or checkpoint and not session.coordinator.committed:
                session.poll()  # (the load's whole part, wherever it is written, before)
            w0, c0, t0 = time.perf_counter(), time.process_time(), time.thread_time()
            for e, batch in enumerate(batches, start=1):
                handle.send(batch)
                handle.advance_to(e + 1)
                session.poll()
            handle.close()
            session.join()
            return time.perf_counter() - w0, time.process_time() - c0, time.thread_time() - t0


def table_touched(keys, checkpoint):
    # touched() on the table API: group_by("k").running_agg, its state a ColumnState,
    # incremental checkpoints its Arrow deltas.
    import pyarrow as pa
    from operators.table import count, table_input

    rng = random.Random(3)
    batches = [pa.table({{"k": rng.sample(range(keys), keys // 100)}}) for _ in range(epochs or 20)]
    flow = Dataflow("touched")
    inp = table_input(flow, pa.schema([("k", pa.int64())]))
    seen = []
    inp.table.group_by("k").running_agg(count().alias("n")).subscribe(
        lambda e, _: seen.append(e))
    with tempfile.TemporaryDirectory() as d:
        opts = dict(checkpoint=d, checkpoint_incremental=True) if checkpoint else {{}}
        with flow.activate(workers=1, backend="inline", **opts) as session:
            inp.send(pa.table({{"k": list(range(keys))}}))
            inp.advance_to(1)
            while not seen or checkpoint and not session.coordinator.committed:
                session.poll()
            w0, c0, t0 = time.perf_counter(), time.process_time(), time.thread_time()
            for e, batch in enumerate(batches, start=1):
                inp.send(batch)
                inp.advance_to(e + 1)
                session.poll()
            inp.close()
            session.join()
            return time.perf_counter() - w0, time.process_time() - c0, time.thread_time() - t0


def wordcount(checkpoint, data=text(epochs or 60, 400)):
    table = case.startswith("table-")
    ray = case.endswith("-ray2")
    with tempfile.TemporaryDirectory() as d:
        opts = {{}}
        if checkpoint:
            opts = dict(checkpoint=d)
            if case == "wordcount-incremental":
                opts["checkpoint_incremental"] = True
        w0, c0, t0 = time.perf_counter(), time.process_time(), time.thread_time()
        running_wordcount(data, "ray" if ray else "inline", 2 if ray else 1, table=table, **opts)
        return time.perf_counter() - w0, time.process_time() - c0, time.thread_time() - t0


run = (
    (lambda c: touched(1_000_000, c)) if case == "touched"
    else (lambda c: table_touched(1_000_000, c)) if case == "table-touched"
    else wordcount
)
run(False)  # warm up
plain, ckpt = [], []
for _ in range(rounds):
    plain.append(run(False))
    ckpt.append(run(True))
out = {{
    k: statistics.median(c[i] / p[i] for p, c in zip(plain, ckpt)) - 1
    for i, k in enumerate(("wall", "process_cpu", "main_thread_cpu"))
}}
out["plain_wall_s"] = statistics.median(p[0] for p in plain)
print(json.dumps(out))
"""

PAIR_CASES = {
    "wordcount": "word count, 5,000 keys, inline x1, every epoch",
    "wordcount-incremental": "the same, incremental",
    "touched": "1M keys, 1% touched an epoch, incremental, every epoch",
    "table-wordcount": "table API word count, 5,000 keys, inline x1, every epoch",
    "table-touched": "table API, 1M keys, 1% touched an epoch, incremental, every epoch",
    "wordcount-ray2": "word count, 5,000 keys, Ray x2, every epoch (CPU: the driver's)",
    "table-wordcount-ray2": "table API word count, Ray x2, every epoch (CPU: the driver's)",
}


def pairs(
    checkout: str, processes: int, rounds: int, cases: list[str], epochs: int | None = None
) -> dict[str, Any]:
    """Checkpoints' cost, this checkout against ``checkout`` (an export of another
    commit): each measurement a process of its own, the two checkouts' processes in
    turn, ``processes`` of each per case; in each process ``rounds`` rounds of a run
    without checkpoints then one with, and the median of each round's ratio, in wall
    time, the process's CPU time and the main thread's (which inline is every worker's
    and the driver's)."""
    here = str(Path(__file__).resolve().parents[1])
    out: dict[str, Any] = {}
    for case in cases:
        code = _PAIR_CODE.format(case=case, rounds=rounds, epochs=epochs)
        runs: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
        for i in range(2 * processes):
            side = ("this", "other")[(i + case.endswith("touched")) % 2]
            root = here if side == "this" else checkout
            done = subprocess.run(
                [sys.executable, "-c", code],
                cwd=root,
                env={**os.environ, "PYTHONPATH": root},
                capture_output=True,
                text=True,
            )
            if done.returncode:
                raise RuntimeError(f"the run in {root} failed:\n{done.stderr[-2000:]}")
            runs[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"  {case} {side}: {runs[side][-1]}", file=sys.stderr)
        out[case] = runs
    return out


def recovery(epochs: int, kills: int) -> dict[str, Any]:
    """Kill a worker every few epochs; time from each kill to the next new epoch output."""
    import ray

    data = text(epochs, 50, seed=1)
    flow = Dataflow("ckpt-recovery")
    lines = flow.new_input()
    arrived: dict[int, float] = {}
    (
        lines.stream.select_many(str.split)
        .running_reduce(lambda w: w, lambda a, b: a + b, lambda w: 1)
        .subscribe(lambda e, _: arrived.setdefault(e, time.perf_counter()))
    )
    gaps: list[float] = []
    killed: dict[int, float] = {}  # the epoch after each kill -> when the kill happened
    kill_at = set(range(epochs // (kills + 1), epochs - 2, epochs // (kills + 1)))
    with (
        tempfile.TemporaryDirectory() as d,
        flow.activate(workers=2, backend="ray", checkpoint=d, max_restarts=kills + 2) as s,
    ):
        for e, batch in enumerate(data):
            lines.advance_to(e)
            lines.send(batch)
            if e in kill_at:
                lines.advance_to(e + 1)
                while e not in arrived:  # caught up: epoch e is out
                    s.poll(timeout=0.01)
                killed[e + 1] = time.perf_counter()
                ray.kill(s.actors[len(killed) % 2], no_restart=True)  # type: ignore[attr-defined]
            s.poll()
        lines.close()
        s.join()
        restarts = s.restarts
    gaps = [arrived[e] - t for e, t in sorted(killed.items())]
    return {
        "kills": len(gaps),
        "restarts": restarts,
        "kill_to_output_s": gaps,
        "median_s": statistics.median(gaps),
        "max_s": max(gaps),
    }


def restore_time(keys: int, deltas: int) -> dict[str, Any]:
    """Restore from a checkpoint of ``keys`` keys: a whole part (``deltas=0``) or the last
    of a chain of ``deltas`` deltas each touching 1% of the keys. Timed: finding,
    verifying, decoding and applying the chain (``CheckpointStore.latest``), then putting
    the state into a table (``KeyedState.restore``), as a worker's restore does."""
    from timely.checkpoint.config import CheckpointConfig
    from timely.checkpoint.coordinator import CheckpointCoordinator

    rng = random.Random(0)
    state: KeyedState[int] = KeyedState(tracked=True, incremental=True)
    state.keep_changes()
    table = state.table((0,))
    table.update(zip(range(keys), range(keys)))
    with tempfile.TemporaryDirectory() as d:
        config = CheckpointConfig(uri=d, incremental=max(deltas, 1), keep=deltas + 2)
        coordinator = CheckpointCoordinator(config, "restore", "fp", 1, [])
        store = coordinator.store
        base: int | None = None
        written = 0
        for epoch in range(deltas + 1):
            if epoch:
                pairs = [(k, table[k] + 1) for k in rng.sample(range(keys), keys // 100)]
                table.update(pairs)
                state.changed((0,), pairs)
            snap = state.snapshot(epoch) if base is None else state.delta(epoch, base)
            vertex: dict[str, Any] = {"kind": "keyed", "tables": {"state": snap}, "bins": 256}
            if base is not None:
                vertex["base"] = base
            part = {"format": 2, "epoch": epoch, "worker": 0, "workers": 1, "base": base}
            data = serialization.encode(part | {"vertices": {3: serialization.encode(vertex)}})
            written += len(data)
            coordinator.part_written(epoch, store.write_part(epoch, 0, 1, data, base))
            state.taken(epoch)
            base = epoch
        t0 = time.perf_counter()
        found = store.latest("fp", "restore")
        t1 = time.perf_counter()
        assert found is not None and found[0] == deltas
        restored: KeyedState[int] = KeyedState()
        restored.restore(found[1][0]["vertices"][3]["tables"]["state"])
        t2 = time.perf_counter()
    assert restored.get((0,)) == table
    return {
        "keys": keys,
        "deltas": deltas,
        "bytes_written": written,
        "load_s": t1 - t0,
        "restore_s": t2 - t1,
        "total_s": t2 - t0,
    }


def size_and_write(keys: int) -> dict[str, Any]:
    state: KeyedState[int] = KeyedState()
    table = state.table((0,))
    for k in range(keys):
        table[f"word{k}"] = k
    with tempfile.TemporaryDirectory() as d:
        store = CheckpointStore(d)
        t0 = time.perf_counter()
        # As a worker does: the vertex's snapshot encoded when taken, then the part.
        vertex = serialization.encode({"kind": "keyed", "tables": {"s": state.snapshot()}})
        data = serialization.encode({"format": 2, "vertices": {3: vertex}})
        t1 = time.perf_counter()
        store.write_part(0, 0, 1, data)
        t2 = time.perf_counter()
        back = decode_part(store.read("ckpt-000000000000/part-0-of-1.bin"))
        restored: KeyedState[int] = KeyedState()
        restored.restore(back["vertices"][3]["tables"]["s"])
        t3 = time.perf_counter()
    assert len(restored) == keys
    return {
        "keys": keys,
        "bytes": len(data),
        "bytes_per_key": len(data) / keys,
        "encode_ms": (t1 - t0) * 1e3,
        "write_ms": (t2 - t1) * 1e3,
        "read_restore_ms": (t3 - t2) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="also measure inline throughput with the timely of another checkout (a git "
        "worktree of an earlier commit), alternating rounds with this one",
    )
    ap.add_argument(
        "--pairs",
        type=int,
        metavar="N",
        help="with --against: only the checkpoints' cost, N processes of each checkout in "
        "turn per case, wall, process CPU and main-thread CPU",
    )
    ap.add_argument("--rounds", type=int, default=6, help="rounds per process with --pairs")
    ap.add_argument(
        "--epochs",
        type=int,
        help="with --pairs: epochs a run (default: 60 for the word counts, 20 for the 1M-key "
        "cases); a longer run weighs the run's start and end less against its epochs",
    )
    ap.add_argument(
        "--cases",
        default=",".join(PAIR_CASES),
        help="with --pairs: which cases, comma-separated (default: all of "
        + ", ".join(PAIR_CASES)
        + ")",
    )
    args = ap.parse_args()
    quick = args.quick
    if args.pairs:
        assert args.against, "--pairs measures against --against CHECKOUT"
        cases = args.cases.split(",")
        unknown = set(cases) - set(PAIR_CASES)
        assert not unknown, f"unknown cases {sorted(unknown)}"
        found = pairs(args.against, args.pairs, args.rounds, cases, args.epochs)
        rows = []
        for case, runs in found.items():
            for side, label in (("other", args.against), ("this", "this checkout")):
                cells = [
                    ", ".join(f"{r[m]:+.0%}" for r in runs[side])
                    + f" (median {statistics.median(r[m] for r in runs[side]):+.0%})"
                    for m in ("main_thread_cpu", "process_cpu", "wall")
                ]
                rows.append((PAIR_CASES[case], label, *cells))
        print(markdown(["what", "code", "main thread CPU", "process CPU", "wall"], rows))
        write_results_file = RESULTS / "bench_checkpoint_pairs.json"
        write_results_file.write_text(
            json.dumps({"load_average": os.getloadavg(), "pairs": found}, indent=1)
        )
        return
    out: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average": os.getloadavg(),
    }
    epochs, lines, rounds = (20, 100, 1) if quick else (60, 400, 3)
    if args.against:
        pair = against(args.against, "inline", 1, epochs, lines, rounds)
        out["against"] = pair
        print(
            markdown(
                ["code", "words/s, none", "words/s, every epoch", "slower by"],
                [
                    (
                        r["code"],
                        f"{r['plain_words_per_s']:,.0f}",
                        f"{r['checkpointed_words_per_s']:,.0f}",
                        f"{r['slowdown']:+.1%}",
                    )
                    for r in pair
                ],
            )
        )
        print()
    runs = [
        throughput("inline", 1, epochs, lines, rounds),
        throughput("inline", 1, epochs, lines, rounds, table=True),
    ]
    if not args.skip_ray:
        runs.append(throughput("ray", 2, epochs, lines, rounds))
        runs.append(throughput("ray", 2, epochs, lines, rounds, table=True))
    out["throughput"] = runs
    print(
        markdown(
            ["backend", "workers", "api", "words/s, none", "every epoch", "slower by", "in CPU"]
            + ["every epoch, incremental", "slower by", "in CPU"],
            [
                (
                    r["backend"],
                    r["workers"],
                    r["api"],
                    f"{r['plain_words_per_s']:,.0f}",
                    f"{r['checkpointed_words_per_s']:,.0f}",
                    f"{r['slowdown']:+.1%}",
                    f"{r['slowdown_cpu']:+.1%}",
                    f"{r['incremental_words_per_s']:,.0f}",
                    f"{r['incremental_slowdown']:+.1%}",
                    f"{r['incremental_slowdown_cpu']:+.1%}",
                )
                for r in runs
            ],
        )
    )
    big = touched(100_000 if quick else 1_000_000, 0.01, 5 if quick else 20, 1 if quick else 3)
    out["touched"] = big
    print()
    print(
        markdown(
            ["keys", "touched/epoch", "none s", "whole s", "slower by", "incremental s"]
            + ["slower by", "deltas only s", "slower by"]
            + ["bytes/epoch whole", "bytes/epoch incremental"],
            [
                (
                    f"{big['keys']:,}",
                    f"{big['touched_per_epoch']:,}",
                    f"{big['plain_s']:.2f}",
                    f"{big['whole_s']:.2f}",
                    f"{big['whole_slowdown']:+.1%}",
                    f"{big['incremental_s']:.2f}",
                    f"{big['incremental_slowdown']:+.1%}",
                    f"{big['deltas_only_s']:.2f}",
                    f"{big['deltas_only_slowdown']:+.1%}",
                    f"{big['whole_bytes_per_epoch']:,.0f}",
                    f"{big['incremental_bytes_per_epoch']:,.0f}",
                )
            ],
        )
    )
    print()
    print(
        markdown(
            ["state backend", "none s", "incremental every epoch s", "slower by", "none / memory"],
            [
                (
                    "memory",
                    f"{big['plain_s']:.2f}",
                    f"{big['incremental_s']:.2f}",
                    f"{big['incremental_slowdown']:+.1%}",
                    "1.00",
                ),
                (
                    "disk",
                    f"{big['disk_plain_s']:.2f}",
                    f"{big['disk_incremental_s']:.2f}",
                    f"{big['disk_incremental_slowdown']:+.1%}",
                    f"{big['disk_vs_memory']:.2f}",
                ),
            ],
        )
    )
    if not args.skip_ray:
        out["recovery"] = recovery(24 if quick else 60, 2 if quick else 5)
        rec = out["recovery"]
        print(
            f"\nkill -> next new output on local Ray: median {rec['median_s']:.2f} s, "
            f"max {rec['max_s']:.2f} s over {rec['kills']} kills"
        )
    sizes = [
        size_and_write(k)
        for k in ((1_000, 100_000) if quick else (1_000, 10_000, 100_000, 1_000_000))
    ]
    out["size"] = sizes
    print()
    print(
        markdown(
            ["keys", "part size", "bytes/key", "encode", "write", "read + restore"],
            [
                (
                    f"{s['keys']:,}",
                    f"{s['bytes'] / 1e6:.2f} MB",
                    f"{s['bytes_per_key']:.1f}",
                    f"{s['encode_ms']:.1f} ms",
                    f"{s['write_ms']:.1f} ms",
                    f"{s['read_restore_ms']:.1f} ms",
                )
                for s in sizes
            ],
        )
    )
    restores = [
        restore_time(k, n)
        for k in ((100_000,) if quick else (1_000_000, 10_000_000))
        for n in (0, 10)
    ]
    out["restore"] = restores
    print()
    print(
        markdown(
            ["keys", "chain", "bytes written", "find, verify, decode, apply", "into the table"]
            + ["restore"],
            [
                (
                    f"{r['keys']:,}",
                    "whole" if r["deltas"] == 0 else f"whole + {r['deltas']} deltas",
                    f"{r['bytes_written'] / 1e6:.1f} MB",
                    f"{r['load_s']:.2f} s",
                    f"{r['restore_s']:.2f} s",
                    f"{r['total_s']:.2f} s",
                )
                for r in restores
            ],
        )
    )
    name = "bench_checkpoint.quick.json" if quick else "bench_checkpoint.json"
    (RESULTS / name).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
