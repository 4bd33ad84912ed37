"""Word count on the table API next to Polars, the row LINQ and a ``Counter`` pass, in
one run: the workload of issue 28.

Input: 2,000,000 words from a 50,000-word vocabulary drawn Zipf-like (seeded), as lines
of 10 words in two text files; every system reads the files itself (reading is timed).

- **Polars** (the vectorised one-core limit): ``scan_csv`` of the lines, split,
  explode, ``group_by().len()``, in a process of its own.
- **Counter**: the files read in Python, ``Counter`` over ``str.split``.
- **timely row LINQ**: ``TextSource`` -> ``select_many(str.split)`` -> ``count_by``.
- **timely table API**: ``TextTableSource`` (batches of 256 KiB of lines, one Arrow
  kernel each) -> ``select(word=col("line").str.split()).explode("word")`` ->
  ``group_by("word").agg(n=count())``, inline on 1 worker and on Ray with 2 (warm:
  the actors of an earlier run kept).

Every system's counts are checked equal to ``Counter``'s. Rounds are interleaved and
the median of ``--rounds`` reported, as words per second and as ratios to Polars.

Goals (issue 28): table API inline x1 >= 1x Polars; Ray x2 warm >= 1.7x inline x1.

    python -m benchmarks.bench_table_wordcount [--rounds N] [--quick] [--skip-ray] [--words N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import operators  # noqa: F401 - registers the stream methods
from benchmarks.tables import markdown, write_results
from connectors.files import TextSource
from connectors.files.table import LINE, TextTableSource
from operators.table import col, count
from timely import Dataflow

WORDS = 2_000_000
VOCAB = 50_000


def make_files(directory: Path, words: int) -> list[Path]:
    rng = np.random.default_rng(28)
    vocab = np.array([f"w{i}" for i in range(VOCAB)])
    ranks = np.minimum(rng.zipf(1.2, words), VOCAB) - 1
    drawn = vocab[ranks]
    lines = [" ".join(drawn[i : i + 10]) for i in range(0, words, 10)]
    half = len(lines) // 2
    paths = []
    for i, part in enumerate((lines[:half], lines[half:])):
        p = directory / f"part-{i}.txt"
        p.write_text("\n".join(part) + "\n")
        paths.append(p)
    return paths


def counter(paths: list[Path]) -> Counter[str]:
    c: Counter[str] = Counter()
    for p in paths:
        with open(p) as f:
            for line in f:
                c.update(line.split())
    return c


POLARS = """
import sys, time, polars as pl
paths = sys.argv[1:]
t = time.perf_counter()
df = (
    pl.scan_csv(paths, has_header=False, new_columns=["line"], separator="\\x1f", quote_char=None)
    .select(pl.col("line").str.split(" ").alias("word")).explode("word")
    .group_by("word").len().collect()
)
dt = time.perf_counter() - t
print(dt, df.height, int(df["len"].sum()))
"""


def polars(paths: list[Path]) -> tuple[float, int, int]:
    done = subprocess.run(
        [sys.executable, "-c", POLARS, *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "POLARS_MAX_THREADS": "1"},
    )
    dt, distinct, total = done.stdout.split()
    return float(dt), int(distinct), int(total)


def table_api(paths: list[Path], workers: int, backend: str) -> tuple[float, dict[str, int]]:
    flow = Dataflow("table-wordcount")
    lines = flow.source(TextTableSource([str(p) for p in paths]), name="lines").as_table(LINE)
    (
        lines.select(word=col("line").str.split())
        .explode("word")
        .group_by("word")
        .agg(n=count())
        .collect("counts")
    )
    t = time.perf_counter()
    out = flow.run(workers=workers, backend=backend)
    dt = time.perf_counter() - t
    counts: dict[str, int] = {}
    for _, table in out["counts"]:
        counts.update(zip(table.column("word").to_pylist(), table.column("n").to_pylist()))
    return dt, counts


def row_linq(paths: list[Path]) -> tuple[float, dict[str, int]]:
    flow = Dataflow("row-wordcount")
    s = flow.source(TextSource([str(p) for p in paths], batch_size=5000), name="lines")
    s.select_many(str.split).count_by(lambda w: w).collect("counts")
    t = time.perf_counter()
    out = flow.run(workers=1, backend="inline")
    dt = time.perf_counter() - t
    return dt, {w: n for _, (w, n) in out["counts"]}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    got = fn()
    return time.perf_counter() - t, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200,000 words, one round")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--words", type=int, default=WORDS, help=f"input size (default {WORDS:,})")
    args = ap.parse_args()
    words = 200_000 if args.quick else args.words
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory() as d:
        paths = make_files(Path(d), words)
        want = counter(paths)
        times: dict[str, list[float]] = {}
        if not args.skip_ray:
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
            table_api(paths, 2, "ray")  # warm: the actors stay for the measured runs
        for _ in range(rounds):
            pdt, distinct, total = polars(paths)
            assert (distinct, total) == (len(want), words)
            times.setdefault("Polars (own process, 1 thread)", []).append(pdt)
            dt, got = timed(lambda: counter(paths))
            times.setdefault("Python Counter", []).append(dt)
            dt, got = row_linq(paths)
            assert got == want
            times.setdefault("timely row LINQ, inline x1", []).append(dt)
            dt, got = table_api(paths, 1, "inline")
            assert got == want
            times.setdefault("timely table API, inline x1", []).append(dt)
            if not args.skip_ray:
                dt, got = table_api(paths, 2, "ray")
                assert got == want
                times.setdefault("timely table API, Ray x2 (warm)", []).append(dt)
    polars_s = statistics.median(times["Polars (own process, 1 thread)"])
    inline_s = statistics.median(times["timely table API, inline x1"])
    rows = []
    for system, ts in times.items():
        s = statistics.median(ts)
        rows.append(
            [
                system,
                f"{s:.3f}",
                f"{words / s / 1e6:.2f}",
                f"{polars_s / s:.2f}x",
                f"{inline_s / s:.2f}x",
            ]
        )
    print(
        markdown(
            [
                "system",
                "seconds (median)",
                "M words/s",
                "speed / Polars",
                "speed / table inline x1",
            ],
            rows,
        )
    )
    write_results(
        "table_wordcount",
        args.quick or words != WORDS,  # another size never replaces the 2M figures
        {
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "load_average": os.getloadavg(),
            "words": words,
            "vocabulary": VOCAB,
            "rounds": rounds,
            "seconds": times,
        },
    )


if __name__ == "__main__":
    main()
