"""SnailTrail online: how soon after a window ends its summary is ready, under load.

A source of batches of 1,000 ints (read one batch a step, so the log is busy) ->
``select`` -> ``exchange()`` -> ``count_by`` on Ray with 2 workers and ``trace=``, while an
:class:`analysis.online.OnlineProfiler` on the driver analyses 1 s windows. Reported:
records/s through the dataflow, events/s into the log, and each window's lag (from the
window's end to its summary), p50 and max. Goal: every window ready <= 2 s after its
end at >= 1M records/s.

    python -m benchmarks.bench_online [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import operators  # noqa: F401  (select, count_by)
from analysis.online import OnlineProfiler
from benchmarks.bench_runtime import Generated
from benchmarks.tables import markdown, write_results
from timely import Dataflow
from timely.eventlog import read_trace


class Batches(Generated):
    """``bench_runtime``'s generated ints, read one batch a step (so the log is busy)."""

    batches_per_step = 1


def _inc(x: int) -> int:
    return x + 1


def _mod(x: int) -> int:
    return x % 100


def main(argv: list[str] | None = None) -> None:
    import ray

    from timely.backends.ray import local_ray_options

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a shorter run")
    args = parser.parse_args(argv)
    batches = 1000 if args.quick else 10000
    load = os.getloadavg()
    trace = tempfile.mkdtemp(prefix="online-trace-")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", **local_ray_options())
    try:
        flow = Dataflow("online")
        (
            flow.source(Batches(2, batches, 1000, 20))
            .select(_inc)
            .exchange()
            .count_by(_mod)
            .collect("counts")
        )
        with OnlineProfiler(trace, window=1.0) as profiler:
            t0 = time.perf_counter()
            results = flow.run(workers=2, backend="ray", trace=trace)
            seconds = time.perf_counter() - t0
            time.sleep(1.5)  # the last complete window's grace
        records = 2 * batches * 1000
        assert sum(c for _, (_, c) in results["counts"]) == records
        events = sum(len(ev) for _, ev in read_trace(trace))
    finally:
        ray.shutdown()
        shutil.rmtree(trace, ignore_errors=True)
    lags = profiler.lags
    assert not profiler.errors, profiler.errors
    rows = [
        ["records/s through the dataflow", f"{records / seconds:,.0f}"],
        ["events/s into the log", f"{events / seconds:,.0f}"],
        ["windows analysed (1 s)", str(len(lags))],
        ["lag after the window's end, p50", f"{statistics.median(lags):.3f} s" if lags else "-"],
        ["lag after the window's end, max", f"{max(lags):.3f} s" if lags else "-"],
    ]
    print("## SnailTrail online: 1 s windows, Ray 2 workers\n")
    print(markdown(["what", "measured"], rows))
    met = bool(lags) and max(lags) <= 2.0 and records / seconds >= 1e6
    verdict = "met" if met else "not met"
    print(f"\ngoal (every window <= 2 s after its end at >= 1M records/s): {verdict}")
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    write_results(
        "online",
        args.quick,
        {
            "records": records,
            "seconds": seconds,
            "events": events,
            "lags_s": lags,
            "load_average": load,
        },
    )


if __name__ == "__main__":
    main()
