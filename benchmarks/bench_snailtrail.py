"""SnailTrail's critical-path analysis on one busy window: how long, and which numbers.

A synthetic window of ~20,000 events over 3 workers (each worker's step loop as
intervals: scheduling, two operators, serialization, communication with a message to
every peer, progress, then a wait for the peers' messages; worker 0 a straggler),
analysed end to end: the PAG (``analysis.build_pag``), critical participation, the
summaries. Path counts there run to a thousand bits and more, so three ways of forming
CP are timed side by side:

- **exact counts, split** (``analysis.critical``, the one used): exact Python-int counts
  (additions only), each vertex's count cut to 64 bits and a power of two for the CP;
- **exact products**: the same counts, ``fwd * bwd * w`` as an exact int per edge and an
  exact (correctly rounded) division by ``N * T``;
- **rescaled floats**: counts kept as float mantissas with integer exponents from the
  start, renormalised when they grow past 2**500.

The script checks that all three agree (max relative difference) and that CPs sum to 1.

Run from the repository root: ``.venv/bin/python -m benchmarks.bench_snailtrail [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from analysis import PAG, Interval, Message, build_pag, critical_participation, summarise
from analysis.critical import path_counts
from benchmarks.tables import markdown

RESULTS = Path(__file__).resolve().parent / "results"
SECOND = 1_000_000_000


def synthetic_trace(
    workers: int = 3, events: int = 20_000, span: int = SECOND, seed: int = 0, waits: bool = True
) -> tuple[list[Interval], list[Message]]:
    """About ``events`` intervals and messages in ``[0, span)``: a step loop per worker.

    A step: scheduling, two operators, serialization, communication (one message to
    every peer, received 10-200 us later), progress. A worker starts its next step once
    it has every peer's message of this one, waiting if need be, so every wait ends with
    a receipt (as an exchange does). Worker 0 is a straggler (its steps take 1.5x).
    Durations are random shares of the step. ``waits=False``: nobody waits, so every
    message adds paths and counts grow fastest (the worst case for exact counts).
    """
    rng = random.Random(seed)
    kinds: list[tuple[str, str | None, str | None]] = [
        ("scheduling", None, None),
        ("processing", "map", None),
        ("processing", "count", None),
        ("serialization", None, "exchange:count"),
        ("communication", None, "exchange:count"),
        ("progress", None, "progress"),
    ]
    per_step = len(kinds) + 1 + (workers - 1)  # intervals, a wait, messages sent
    steps = max(1, round(events / workers / per_step))
    step = span // steps // 2
    intervals: list[Interval] = []
    messages: list[Message] = []
    clock = [0] * workers
    arrivals = [0] * workers  # when the last of this step's messages reaches each worker
    for _ in range(steps):
        ready = arrivals
        arrivals = [0] * workers
        for w in range(workers):
            t = clock[w]
            if waits and ready[w] > t:
                intervals.append(Interval(w, t, min(ready[w], span), "waiting"))
                t = ready[w]
            shares = [rng.random() + 0.1 for _ in kinds]
            budget = step * (1.5 if w == 0 else 1.0) / sum(shares)
            for (kind, op, ch), share in zip(kinds, shares):
                d = max(1, int(budget * share))
                if t + d > span:
                    break
                intervals.append(Interval(w, t, t + d, kind, op, ch))
                if kind == "communication":
                    for p in range(workers):
                        if p != w:
                            sent = rng.randrange(t, t + d)
                            received = sent + rng.randrange(10_000, 200_000)
                            arrivals[p] = max(arrivals[p], received)
                            if received < span:
                                messages.append(Message(ch or "frame", w, sent, p, received))
                t += d
            clock[w] = t
        if min(clock) >= span:
            break
    return intervals, messages


def cp_exact_products(pag: PAG) -> list[float]:
    """CP with an exact ``fwd * bwd * w`` per edge and a correctly rounded division."""
    counts = path_counts(pag)
    denominator = counts.paths * pag.length
    if denominator == 0:
        return [0.0] * len(pag.activities)
    fwd, bwd = counts.fwd, counts.bwd
    return [fwd[a.src] * bwd[a.dst] * (a.end - a.start) / denominator for a in pag.activities]


def cp_rescaled_floats(pag: PAG) -> list[float]:
    """CP from counts kept as ``mantissa * 2**exponent`` floats throughout."""
    n = len(pag.times)
    ldexp, frexp = math.ldexp, math.frexp
    edges = sorted((a.src, a.dst) for a in pag.activities)

    def count(
        starts: Sequence[int], order: list[tuple[int, int]], backward: bool
    ) -> tuple[list[float], list[int]]:
        m = [0.0] * n
        e = [0] * n
        for s in starts:
            m[s] = 1.0
        for s, d in order:
            a, b = (d, s) if backward else (s, d)
            x = m[a]
            if x == 0.0:
                continue
            xa, xb = e[a], e[b]
            y = m[b]
            if y == 0.0:
                m[b], e[b] = x, xa
                continue
            if xa >= xb:
                z, ez = x + ldexp(y, xb - xa), xa
            else:
                z, ez = ldexp(x, xa - xb) + y, xb
            if z > 1e150:
                z, k = frexp(z)
                ez += k
            m[b], e[b] = z, ez
        return m, e

    fm, fe = count(pag.sources, edges, False)
    edges.sort(key=lambda edge: edge[1], reverse=True)
    bm, be = count(pag.sinks, edges, True)
    # N as the sum of the sinks' forward counts, in the same representation.
    top = max((fe[s] for s in pag.sinks if fm[s]), default=0)
    nm = sum(ldexp(fm[s], fe[s] - top) for s in pag.sinks)
    if nm == 0.0:
        return [0.0] * len(pag.activities)
    scale = 1.0 / (nm * pag.length)
    return [
        ldexp(fm[a.src] * bm[a.dst] * (a.end - a.start) * scale, fe[a.src] + be[a.dst] - top)
        for a in pag.activities
    ]


def cp_split(pag: PAG) -> list[float]:
    """The scheme ``analysis.critical`` uses."""
    return list(critical_participation(pag).cp)


VARIANTS: dict[str, Callable[[PAG], list[float]]] = {
    "exact counts, split (used)": cp_split,
    "exact products": cp_exact_products,
    "rescaled floats": cp_rescaled_floats,
}


def timed(fn: Callable[[], Any], reps: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of ``reps`` calls, and the last result."""
    walls, cpus = [], []
    result = None
    for _ in range(reps):
        c, w = time.process_time(), time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus), result


def measure(events: int, workers: int, waits: bool, reps: int) -> dict[str, Any]:
    """One synthetic window of ``events`` events over ``workers`` workers, every stage."""
    intervals, messages = synthetic_trace(workers, events, waits=waits)
    build_s, build_cpu, pag = timed(lambda: build_pag(intervals, messages, 0, SECOND), reps)
    counts = path_counts(pag)
    row: dict[str, Any] = {
        "workers": workers,
        "waits": waits,
        "events": len(intervals) + len(messages),
        "intervals": len(intervals),
        "messages": len(messages),
        "vertices": len(pag.times),
        "edges": len(pag.activities),
        "path_count_bits": counts.paths.bit_length(),
        "build_pag_s": build_s,
        "build_pag_cpu_s": build_cpu,
    }
    results: dict[str, list[float]] = {}
    for name, fn in VARIANTS.items():
        wall, cpu, cps = timed(lambda fn=fn: fn(pag), reps)  # type: ignore[misc]
        results[name] = cps
        row[f"cp_s[{name}]"] = wall
        row[f"cp_cpu_s[{name}]"] = cpu
        row[f"cp_sum[{name}]"] = math.fsum(cps)
    exact = results["exact products"]
    for name, cps in results.items():
        row[f"max_rel_diff[{name}]"] = max(
            (abs(c - x) / x for c, x in zip(cps, exact) if x > 0), default=0.0
        )
    crit = critical_participation(pag)
    sum_s, _, _ = timed(lambda: summarise(crit), reps)
    row["summarise_s"] = sum_s
    total_s, total_cpu, _ = timed(
        lambda: summarise(critical_participation(build_pag(intervals, messages, 0, SECOND))), reps
    )
    row["end_to_end_s"] = total_s
    row["end_to_end_cpu_s"] = total_cpu
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller sizes")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    if load[0] > 1.0:
        print(f"warning: load average {load[0]:.2f} at start; other processes may skew timings\n")
    reps = 3 if args.quick else 7
    sizes = [(3, 2_000, True), (3, 20_000, True), (3, 20_000, False)]
    if not args.quick:
        sizes += [(3, 60_000, True), (3, 60_000, False)]
    rows = [measure(events, workers, waits, reps) for workers, events, waits in sizes]

    used = "exact counts, split (used)"
    headers = ["workers", "waits", "events", "messages", "edges", "N bits"]
    headers += ["PAG s", "CP s", "summaries s", "total s", "total CPU s"]
    table = []
    for r in rows:
        row = [r["workers"], "yes" if r["waits"] else "no", r["events"], r["messages"]]
        row += [r["edges"], r["path_count_bits"], f"{r['build_pag_s']:.4f}"]
        row += [f"{r[f'cp_s[{used}]']:.4f}", f"{r['summarise_s']:.4f}"]
        row += [f"{r['end_to_end_s']:.4f}", f"{r['end_to_end_cpu_s']:.4f}"]
        table.append(row)
    print("### Window analysed end to end (median s)\n")
    print(markdown(headers, table))

    headers = ["events", "waits", "N bits", "scheme", "CP s", "vs used", "sum of CP"]
    headers += ["max rel diff"]
    table = []
    for r in rows:
        for name in VARIANTS:
            row = [r["events"], "yes" if r["waits"] else "no", r["path_count_bits"], name]
            row += [f"{r[f'cp_s[{name}]']:.4f}", f"{r[f'cp_s[{name}]'] / r[f'cp_s[{used}]']:.2f}x"]
            row += [f"{r[f'cp_sum[{name}]']:.15f}", f"{r[f'max_rel_diff[{name}]']:.1e}"]
            table.append(row)
    print("\n### Forming CP three ways (median s; max relative difference to exact products)\n")
    print(markdown(headers, table))
    payload = {
        "benchmark": "bench_snailtrail",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "loadavg_at_start": load,
        "reps": reps,
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("bench_snailtrail.quick.json" if args.quick else "bench_snailtrail.json")
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")


if __name__ == "__main__":
    main()
