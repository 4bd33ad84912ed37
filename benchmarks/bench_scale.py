"""Workers that scale: start-up, speed-up and word count on Ray against one inline worker.

One run, local Ray initialised once (``num_cpus=2``, no dashboard) before anything is
timed:

1. Start-up: an empty run (one input, closed at once, -> select -> collect) with
   ``flow.run(workers=2, backend="ray")``: the first run on the fresh Ray (its actors land
   on worker processes Ray prestarted), then medians of 5 with new actors every run
   (cold: once the prestarted processes are used up) and with the actors kept from the
   run before (warm: what every run of a driver after its first gets). Goal <= 0.4 s.
2. Speed-up: 1,000,000 ints from a ``Source`` of 8 partitions (batches of 1,000, 10
   epochs) -> ``select(spin)`` -> ``count_by(r % 1000)``. ``spin`` is a pure-Python loop
   of ``k`` integer steps, ``k`` calibrated at start so one call costs ~3 us on this
   machine (the median of 5 timings of 100,000 calls). Ray 2 workers against inline 1
   worker, in interleaved pairs (the order alternating; the ratio is the median of the
   pairs'). Goal >= 1.7x after start-up.
3. Word count, 2,000,000 words (``bench_wordcount``'s files and source, record at a
   time: ``select_many(str.split).count_by(word)``), Ray 2 workers against inline 1
   worker. Goal >= 1.6x after start-up. Bytewax ``-w 2`` (whole wall time, its process
   start included) against timely's whole wall with new actors and with warm ones (Ray
   itself already up) when ``bytewax`` is importable here (the ``bench`` extra);
   otherwise skipped. Goal >= 2.5x.
4. Word count on Ray with W = 1, 2, 4 workers (4 is more than the 2 cores): throughput
   and messages sent per worker per epoch (the actors' ``stats()``; progress batches
   ride on data messages and are not counted apart, so this counts every frame a worker
   sent to its peers).

"After start-up": a Ray run is timed from the moment ``activate`` returns (every actor
built, connected, its loop started) to the end of ``join``, as ``bench_runtime``'s
``pipeline_rate``; the whole wall time and the wall time minus the empty run of (1) are
shown too. An inline run has no start-up to speak of: its whole wall time is used.

    python -m benchmarks.bench_scale [--quick]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import operators  # noqa: F401  (registers select, select_many, count_by on Stream)
from benchmarks.bench_wordcount import (
    FILES,
    LINES_PER_BATCH,
    WORDS_PER_LINE,
    LineFiles,
    generate,
    paths,
)
from benchmarks.tables import markdown, write_results
from timely import Dataflow, Source
from timely.backends.ray import local_ray_options
from timely.backends.ray_pool import release_workers

SPIN_US = 3.0


# -- the CPU-bound select ----------------------------------------------------------------
def spin(k: int, x: int) -> int:
    """``k`` steps of a small integer recurrence: pure-Python CPU work for one record;
    returns ``x`` itself (the counts can then be checked)."""
    y = x
    for _ in range(k):
        y = (y * 31 + 7) & 0xFFFF
    return x if y >= 0 else -x


def calibrate(target_us: float = SPIN_US, calls: int = 100_000) -> tuple[int, float]:
    """The ``k`` for which ``spin(k, x)`` costs about ``target_us``; and its measured cost."""

    def cost(k: int) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for x in range(calls):
                spin(k, x)
            times.append(time.perf_counter() - t0)
        return 1e6 * statistics.median(times) / calls

    base, k = cost(0), 40
    per_step = (cost(k) - base) / k
    k = max(1, round((target_us - base) / per_step))
    return k, cost(k)


class Ints(Source):
    """``parts`` partitions of ``per_part`` ints, in batches of ``size``; ``epochs`` epochs."""

    def __init__(self, parts: int, per_part: int, size: int, epochs: int) -> None:
        self.parts, self.per_part, self.size = parts, per_part, size
        self.batches = -(-per_part // size)
        self.per_epoch = -(-self.batches // epochs)

    def partitions(self) -> int:
        return self.parts

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        i = 0 if offset is None else offset
        if i >= self.batches:
            return None
        base = partition * self.per_part
        lo = base + i * self.size
        hi = min(base + self.per_part, lo + self.size)
        return i // self.per_epoch, list(range(lo, hi)), i + 1


def _mod1000(r: int) -> int:
    return r % 1000


def _word(w: str) -> str:
    return w


# -- running and timing ------------------------------------------------------------------
def timed_run(flow: Dataflow, workers: int, backend: str, **options: Any) -> dict[str, Any]:
    """Run ``flow`` to the end (with session ``options``): whole wall, start-up
    (``activate``), after start-up, the collected results and, on Ray, every actor's
    ``stats()`` read as the run ends."""
    import ray

    stats: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    session = flow.activate(workers=workers, backend=backend, **options)
    t1 = time.perf_counter()
    if backend == "ray":
        stop = session._stop  # type: ignore[attr-defined]

        def read_stats_then_stop() -> None:
            actors = session.actors  # type: ignore[attr-defined]
            if actors and not stats:
                stats.extend(ray.get([a.stats.remote() for a in actors]))
            stop()

        session._stop = read_stats_then_stop  # type: ignore[attr-defined]
    with session:
        for handle in flow._inputs:
            handle.close()
        results = session.join()
    t2 = time.perf_counter()
    return {
        "wall_s": t2 - t0,
        "startup_s": t1 - t0,
        "work_s": t2 - t1,
        "results": results,
        "stats": stats,
    }


def median_run(make: Callable[[], Dataflow], workers: int, backend: str, repeat: int) -> Any:
    """``repeat`` runs; the one with the median time after start-up (and its results)."""
    runs = sorted((timed_run(make(), workers, backend) for _ in range(repeat)), key=_work)
    return runs[len(runs) // 2]


def paired_runs(
    make: Callable[[], Dataflow], repeat: int, check: Callable[[Any], None]
) -> tuple[dict[str, dict[str, Any]], list[float]]:
    """``repeat`` pairs of runs, inline with 1 worker and Ray with 2, interleaved (the order
    alternating) so that a slow spell of a shared machine hits both alike. Returns the
    median run of each (by time after start-up) and each pair's ratio inline / Ray;
    ``check`` is given every run's results."""
    runs: dict[str, list[dict[str, Any]]] = {"inline x1": [], "ray x2": []}
    ratios = []
    for i in range(repeat):
        pair = {}
        order = (("inline", 1), ("ray", 2)) if i % 2 == 0 else (("ray", 2), ("inline", 1))
        for backend, w in order:
            r = timed_run(make(), w, backend)
            check(r.pop("results"))
            pair[backend] = r
            runs[f"{backend} x{w}"].append(r)
        ratios.append(pair["inline"]["work_s"] / pair["ray"]["work_s"])
    medians = {name: sorted(rs, key=_work)[len(rs) // 2] for name, rs in runs.items()}
    return medians, ratios


def _work(r: dict[str, Any]) -> float:
    return float(r["work_s"])


def empty_flow() -> Dataflow:
    flow = Dataflow("empty")
    flow.new_input().stream.select(_word).collect("out")
    return flow


def spin_flow(records: int, k: int) -> Dataflow:
    flow = Dataflow("speedup")
    (
        flow.source(Ints(8, records // 8, 1000, 10))
        .select(functools.partial(spin, k))
        .count_by(_mod1000)
        .collect("counts")
    )
    return flow


def wordcount_flow(data: Path) -> Dataflow:
    flow = Dataflow("wordcount")
    source = flow.source(LineFiles(paths(data), LINES_PER_BATCH))
    source.select_many(str.split).count_by(_word).collect("counts")
    return flow


def totals(results: Any) -> Counter[Any]:
    out: Counter[Any] = Counter()
    for _, (k, c) in results["counts"]:
        out[k] += c
    return out


def main(argv: list[str] | None = None) -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="1/10 of the data, 1 repetition")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    records = 100_000 if args.quick else 1_000_000
    words = 200_000 if args.quick else 2_000_000
    repeat = args.repeat or (1 if args.quick else 5)
    load = os.getloadavg()
    started = time.perf_counter()

    k, spin_us = calibrate()
    print(f"spin: k={k} steps, {spin_us:.2f} us/call", file=sys.stderr)
    data = Path(tempfile.mkdtemp(prefix="scale-data-"))
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", **local_ray_options())
    try:
        # 1. start-up: new actors every time (cold), then actors kept from the run before
        # The first run on a fresh Ray: its actors land on worker processes Ray prestarted.
        first = timed_run(empty_flow(), 2, "ray")["wall_s"]
        colds: list[float] = []
        empties: list[float] = []
        for runs, cold in ((colds, True), (empties, False)):
            for _ in range(5):
                if cold:
                    release_workers()
                t0 = time.perf_counter()
                empty_flow().run(workers=2, backend="ray")
                runs.append(time.perf_counter() - t0)
        cold_empty = statistics.median(colds)
        empty = statistics.median(empties)
        print(
            f"  empty run: first {first:.3f} s, cold {cold_empty:.3f} s, warm {empty:.3f} s",
            file=sys.stderr,
        )

        # 2. speed-up, CPU-bound select
        expected = Counter({m: records // 1000 for m in range(1000)})

        def check_spin(results: Any) -> None:
            assert totals(results) == expected, "spin: counts differ"

        speed, speed_ratios = paired_runs(lambda: spin_flow(records, k), repeat, check_spin)
        print(f"  spin inline / ray x2: {speed_ratios}", file=sys.stderr)

        # 3. word count, 2 Ray workers against 1 inline
        generate(data, words, 10_000)
        words_expected: Counter[str] = Counter()
        for p in paths(data):
            words_expected.update(p.read_text().split())

        def check_words(results: Any) -> None:
            assert totals(results) == words_expected, "word count: counts differ"

        wc, wc_ratios = paired_runs(lambda: wordcount_flow(data), repeat, check_words)
        print(f"  wordcount inline / ray x2: {wc_ratios}", file=sys.stderr)
        bytewax: dict[str, Any] | None = None
        if importlib.util.find_spec("bytewax"):
            from benchmarks.bench_wordcount import bytewax_wordcount

            secs, _, got = bytewax_wordcount(sys.executable, data, 2)
            assert got == words_expected, "bytewax counts differ"
            release_workers()  # timely's whole wall from new actors too (Ray itself is up)
            cold_wc = timed_run(wordcount_flow(data), 2, "ray")
            assert totals(cold_wc.pop("results")) == words_expected, "cold ray x2: counts differ"
            bytewax = {
                "wall_s": secs,
                "timely_cold_wall_s": cold_wc["wall_s"],
                "timely_warm_wall_s": wc["ray x2"]["wall_s"],
            }

        # 4. W = 1, 2, 4 on Ray
        scaling: list[dict[str, Any]] = []
        for w in (1, 2, 4):
            r = wc["ray x2"] if w == 2 else median_run(lambda: wordcount_flow(data), w, "ray", 1)
            if w != 2:
                assert totals(r.pop("results")) == words_expected, f"ray x{w}: counts differ"
            scaling.append({"workers": w, **r})
            print(f"  wordcount ray x{w}: {r['work_s']:.3f} s", file=sys.stderr)
    finally:
        ray.shutdown()
        shutil.rmtree(data, ignore_errors=True)
    total = time.perf_counter() - started
    epochs = -(-words // (FILES * WORDS_PER_LINE * LINES_PER_BATCH))  # batch i: epoch i

    # -- report ---------------------------------------------------------------------------
    print("## Start-up: empty run, 2 Ray workers, Ray initialised (median of 5)\n")
    print(
        "Cold: new actors for every run (``release_workers()`` before it). Warm: the actors "
        "of the run before, kept reset for ``idle_timeout`` (the default after the first "
        "run of a driver).\n"
    )
    verdicts: list[list[str]] = []

    def verdict(what: str, value: float, goal: float, higher: bool, unit: str) -> None:
        met = value >= goal if higher else value <= goal
        margin = value / goal if higher else goal / value
        verdicts.append(
            [
                what,
                f"{value:.2f}{unit}",
                f"{'>=' if higher else '<='} {goal}{unit}",
                "met" if met else "not met",
                f"{margin:.2f}x of goal",
            ]
        )

    print(
        markdown(
            ["actors", "runs (s)", "median s"],
            [
                ["new, the first run on a fresh Ray (prestarted processes)", f"{first:.3f}", ""],
                ["cold", " ".join(f"{e:.3f}" for e in colds), f"{cold_empty:.3f}"],
                ["warm", " ".join(f"{e:.3f}" for e in empties), f"{empty:.3f}"],
            ],
        )
    )

    def rows(table: dict[str, dict[str, Any]], n: int) -> list[list[str]]:
        return [
            [
                name,
                f"{r['wall_s']:.3f}",
                f"{r['startup_s']:.3f}",
                f"{r['work_s']:.3f}",
                f"{r['wall_s'] - empty:.3f}" if name.startswith("ray") else "",
                f"{n / r['work_s'] / 1e6:.2f}",
            ]
            for name, r in table.items()
        ]

    headers = ["run", "wall s", "activate s", "after start-up s", "wall - empty run s", "M rec/s"]

    def speedup(title: str, table: dict[str, dict[str, Any]], n: int, ratios: list[float]) -> float:
        """Print ``table`` and its speed-up: the median of the interleaved pairs' ratios."""
        print(f"\n## {title} (median of {repeat})\n")
        print(markdown(headers, rows(table, n)))
        ratio = statistics.median(ratios)
        by_walls = table["inline x1"]["work_s"] / (table["ray x2"]["wall_s"] - empty)
        print(
            f"\nspeed-up after start-up {ratio:.2f}x, the median of {repeat} interleaved pairs "
            f"({' '.join(f'{r:.2f}' for r in sorted(ratios))}); of the median runs' walls "
            f"minus the empty run: {by_walls:.2f}x"
        )
        return ratio

    sx = speedup(
        f"Speed-up: {records:,} ints, 8 partitions, select(spin, {spin_us:.2f} us) -> count_by",
        speed,
        records,
        speed_ratios,
    )
    wx = speedup(f"Word count: {words:,} words, record at a time", wc, words, wc_ratios)
    if bytewax is not None:
        bx = bytewax["wall_s"]
        print(
            "\n"
            + markdown(
                ["run (whole wall, start-up included; Ray already up)", "wall s", "Bytewax / it"],
                [
                    ["Bytewax 0.21 -w 2", f"{bx:.3f}", "1.00"],
                    [
                        "timely ray x2, new actors",
                        f"{bytewax['timely_cold_wall_s']:.3f}",
                        f"{bx / bytewax['timely_cold_wall_s']:.2f}",
                    ],
                    [
                        "timely ray x2, warm actors",
                        f"{bytewax['timely_warm_wall_s']:.3f}",
                        f"{bx / bytewax['timely_warm_wall_s']:.2f}",
                    ],
                ],
            )
        )
    else:
        print("Bytewax: skipped (bytewax is not importable in this Python)")

    print("\n## Word count on Ray, W workers (2 cores: W = 4 is oversubscribed)\n")
    scale_rows = []
    for r in scaling:
        sent = [s["messages_sent"] for s in r["stats"]]
        scale_rows.append(
            [
                str(r["workers"]),
                f"{r['work_s']:.3f}",
                f"{words / r['work_s'] / 1e6:.2f}",
                f"{r['wall_s']:.3f}",
                f"{statistics.mean(sent) / epochs:.1f}",
                " ".join(str(s) for s in sent),
            ]
        )
    print(
        markdown(
            [
                "W",
                "after start-up s",
                "M words/s",
                "wall s",
                "messages sent / worker / epoch",
                "messages sent per worker",
            ],
            scale_rows,
        )
    )
    print(
        f"\n({epochs} epochs; progress batches ride on data messages and are not counted "
        "apart: the counts are every frame a worker sent to its peers)"
    )

    verdict("start-up, empty run, 2 Ray workers, warm actors", empty, 0.4, False, " s")
    verdict("start-up, empty run, 2 Ray workers, new actors", cold_empty, 0.4, False, " s")
    verdict("speed-up, CPU-bound select, after start-up", sx, 1.7, True, "x")
    verdict("word count speed-up, after start-up", wx, 1.6, True, "x")
    if bytewax is not None:
        bx = bytewax["wall_s"]
        verdict(
            "word count vs Bytewax, new actors", bx / bytewax["timely_cold_wall_s"], 2.5, True, "x"
        )
        verdict(
            "word count vs Bytewax, warm actors", bx / bytewax["timely_warm_wall_s"], 2.5, True, "x"
        )
    print()
    print(markdown(["goal", "measured", "goal", "verdict", "margin"], verdicts))
    print(
        f"\nload average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"{os.cpu_count()} CPUs; run took {total:.0f} s"
    )

    write_results(
        "scale",
        args.quick,
        {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": load,
            "cpus": os.cpu_count(),
            "repeat": repeat,
            "run_s": total,
            "spin": {"k": k, "us_per_call": spin_us},
            "startup": {
                "first_run_s": first,
                "cold_runs_s": colds,
                "cold_median_s": cold_empty,
                "runs_s": empties,
                "median_s": empty,
            },
            "speedup": {
                "records": records,
                "runs": speed,
                "ratio": sx,
                "pair_ratios": speed_ratios,
            },
            "wordcount": {
                "words": words,
                "runs": wc,
                "ratio": wx,
                "pair_ratios": wc_ratios,
                "bytewax": bytewax,
            },
            "scaling": {"epochs": epochs, "runs": scaling},
            "verdicts": verdicts,
        },
    )


if __name__ == "__main__":
    main()
