"""Hand-over from Spark to the workers: ``spark_source`` next to ``DataFrame.toArrow()``.

A DataFrame of ``--rows`` rows (default 2,000,000; five columns: three longs, a double
and a short string) is made by Spark from ``range`` and cached, then handed over:

- **toArrow()**: Spark's own collection to the driver as one Arrow table (the peer: it
  is the fastest way out of Spark, and it is bounded by the driver's memory).
- **spark_source**: Spark stages the rows as Parquet (``deterministic=True``: a shuffle
  by row hash and a sort, so replays are exact; and ``deterministic=False``: Spark's own
  partitions, sorted by nothing), then the readers go through every partition. Read in
  one process (the source's own rate, Arrow batches and Python tuples) and by a
  dataflow on 2 Ray workers that counts the rows (shown as is, and minus the start-up
  of a session over an empty source).

Each figure is rows per second over the whole hand-over (staging + reading), the median
of ``--repeat`` runs; every path's row count is asserted equal to the DataFrame's.

    python -m benchmarks.bench_spark [--quick] [--rows N] [--repeat N] [--skip-ray]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.tables import markdown, timed
from connectors.spark import SparkSource, spark_source
from timely import Dataflow

RESULTS = Path(__file__).resolve().parent / "results"


def make_spark() -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench_spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def make_frame(spark: Any, rows: int) -> Any:
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=4).select(
        F.col("id"),
        (F.col("id") * 7919 % 1000).alias("user"),
        (F.col("id") % 100).alias("epoch"),
        (F.col("id") / 3.0).alias("value"),
        F.concat(F.lit("ad-"), (F.col("id") % 977).cast("string")).alias("ad"),
    )
    df = df.cache()
    df.count()
    return df


def read_all(src: SparkSource) -> int:
    """Every row of every partition, read in this process; the number of rows."""
    n = 0
    for p in range(src.partitions()):
        offset = None
        while (got := src.read(p, offset)) is not None:
            _, records, offset = got
            n += sum(b.num_rows for b in records) if src.records == "arrow" else len(records)
    return n


def dataflow_rows(src: Any, workers: int) -> int:
    """Rows the workers read, counted per worker and epoch and summed on the driver."""
    flow = Dataflow("handover")
    flow.source(src).select(lambda b: b.num_rows).collect("rows")
    out = flow.run(workers=workers, backend="ray")
    return sum(out.records("rows"))


def main(argv: list[str] | None = None) -> None:
    import operators  # noqa: F401 - registers select on Stream

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="200k rows, one repetition")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args(argv)
    rows = args.rows or (200_000 if args.quick else 2_000_000)
    repeat = args.repeat or (1 if args.quick else 3)
    load = os.getloadavg()
    started = time.perf_counter()
    staging = tempfile.mkdtemp(prefix="bench-spark-")
    spark = make_spark()
    df = make_frame(spark, rows)

    results: list[dict[str, Any]] = []

    def row(path: str, wall: float, stage: float | None = None) -> None:
        results.append({"path": path, "wall_s": wall, "stage_s": stage, "rows_per_s": rows / wall})
        print(f"  {path}: {wall:.2f} s, {rows / wall:,.0f} rows/s", file=sys.stderr)

    df.toArrow()  # warm-up: the JVM compiles the paths both sides use
    read_all(spark_source(df.limit(1000), staging=staging))
    wall, table = timed(lambda: df.toArrow(), repeat)
    assert table.num_rows == rows
    row("DataFrame.toArrow() to the driver", wall)
    del table

    for deterministic in (True, False):
        label = "deterministic" if deterministic else "Spark's partitions"
        for shape in ("arrow", "tuples"):

            def stage_and_read(shape: str = shape, deterministic: bool = deterministic) -> Any:
                t0 = time.perf_counter()
                src = spark_source(df, records=shape, staging=staging, deterministic=deterministic)
                t1 = time.perf_counter()
                n = read_all(src)
                src.cleanup()
                return t1 - t0, n

            wall, (stage, n) = timed(stage_and_read, repeat)
            assert n == rows, f"read {n} rows of {rows}"
            row(f"spark_source ({label}) + read in 1 process, {shape}", wall, stage)

    if not args.skip_ray:
        import ray

        empty = spark_source(df.limit(0), records="arrow", staging=staging)
        dataflow_rows(empty, 2)  # starts local Ray
        startup, _ = timed(lambda: dataflow_rows(empty, 2), repeat)

        def on_ray() -> Any:
            t0 = time.perf_counter()
            src = spark_source(df, records="arrow", staging=staging)
            t1 = time.perf_counter()
            n = dataflow_rows(src, 2)
            src.cleanup()
            return t1 - t0, n

        wall, (stage, n) = timed(on_ray, repeat)
        assert n == rows, f"the workers read {n} rows of {rows}"
        row("spark_source (deterministic) + 2 Ray workers, arrow", wall, stage)
        row("  the same minus an empty run's Ray session start-up", wall - startup, stage)
        results[-1]["session_startup_s"] = startup
        ray.shutdown()
    spark.stop()
    shutil.rmtree(staging, ignore_errors=True)
    total = time.perf_counter() - started

    base = results[0]["rows_per_s"]
    print(f"## Spark -> workers hand-over, {rows:,} rows x 5 columns, median of {repeat}\n")
    table_rows = [
        [
            r["path"],
            f"{r['wall_s']:.2f}",
            "" if r["stage_s"] is None else f"{r['stage_s']:.2f}",
            f"{r['rows_per_s']:,.0f}",
            f"{r['rows_per_s'] / base:.2f}x",
        ]
        for r in results
    ]
    print(markdown(["path", "wall s", "of which staging s", "rows/s", "vs toArrow"], table_rows))
    print(
        f"\nload average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"run took {total:.0f} s"
    )
    RESULTS.mkdir(exist_ok=True)
    name = "bench_spark.quick.json" if args.quick else "bench_spark.json"
    (RESULTS / name).write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "load_average": load,
                "rows": rows,
                "repeat": repeat,
                "run_s": total,
                "rows_table": results,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
