"""The event log's cost: word count on Ray with 2 workers, with and without ``trace=``.

``bench_scale``'s 2M-word count (record at a time), Ray 2 workers, kept actors, timed
after start-up; runs with and without the event log interleaved in pairs (the order
alternating: this VM's speed swings), the overhead being the median of the pairs'
``traced / plain - 1``. Goal: <= 5%. The trace's size and event count are reported too.

    python -m benchmarks.bench_eventlog [--quick] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_scale import timed_run, totals, wordcount_flow
from benchmarks.bench_wordcount import generate
from benchmarks.tables import markdown, write_results
from timely.eventlog import read_trace


def timed(data: Path, trace: str | None) -> float:
    """Seconds from ``activate``'s return to the end of ``join``."""
    options: dict[str, Any] = {} if trace is None else {"trace": trace}
    run = timed_run(wordcount_flow(data), 2, "ray", **options)
    assert totals(run["results"]), "no counts"
    return float(run["work_s"])


def event_cost(n: int = 200_000) -> float:
    """Seconds to record and write one typical event (an activation), best of 3."""
    from timely.eventlog import EventLog, clock

    best = float("inf")
    with tempfile.TemporaryDirectory() as d:
        for attempt in range(3):
            log = EventLog.open(d, 0, 1, attempt, ["v"], "cost")
            t0 = time.perf_counter()
            for i in range(n):
                log.add(("a", clock(), clock(), 1, 0, i, i))
            log.close()
            best = min(best, (time.perf_counter() - t0) / n)
    return best


def main(argv: list[str] | None = None) -> None:
    import ray

    from timely.backends.ray import local_ray_options

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="200k words, 3 pairs")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    words = 200_000 if args.quick else 2_000_000
    repeat = args.repeat or (3 if args.quick else 15)
    load = os.getloadavg()
    data = Path(tempfile.mkdtemp(prefix="eventlog-data-"))
    traces = Path(tempfile.mkdtemp(prefix="eventlog-trace-"))
    generate(data, words, 10_000)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", **local_ray_options())
    plain: list[float] = []
    traced: list[float] = []
    events = size = 0
    try:
        timed(data, None)  # the actors start; every later run reuses them
        for i in range(repeat):
            trace = str(traces / f"run-{i}")
            pair = [(plain, None), (traced, trace)]
            for runs, where in pair if i % 2 == 0 else reversed(pair):
                runs.append(timed(data, where))
            size = sum(p.stat().st_size for p in Path(trace).iterdir())
            events = sum(len(ev) for _, ev in read_trace(trace))
    finally:
        ray.shutdown()
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(traces, ignore_errors=True)
    overheads = [t / p - 1 for p, t in zip(plain, traced)]
    overhead = statistics.median(overheads)
    rows = [
        [name, f"{statistics.median(runs):.3f}", f"{words / statistics.median(runs) / 1e6:.2f}"]
        for name, runs in (("without trace", plain), ("with trace=", traced))
    ]
    per_event = event_cost()
    computed = events * per_event / statistics.median(plain) / 2  # two workers log at once
    print(f"## Event log overhead: word count, {words:,} words, Ray 2 workers ({repeat} pairs)\n")
    print(markdown(["run", "after start-up s (median)", "M words/s"], rows))
    print(
        f"\noverhead {100 * overhead:+.1f}% (median of the pairs: "
        f"{' '.join(f'{100 * o:+.1f}%' for o in sorted(overheads))}); goal <= 5%: "
        f"{'met' if overhead <= 0.05 else 'not met'}"
    )
    print(
        f"one run's trace: {events:,} events, {size / 1e6:.2f} MB; recording and writing an "
        f"event costs {per_event * 1e6:.2f} us here, so the log's own work is "
        f"{100 * computed:.2f}% of the run (the pairs' spread is this VM's noise)"
    )
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    write_results(
        "eventlog",
        args.quick,
        {
            "words": words,
            "repeat": repeat,
            "plain_s": plain,
            "traced_s": traced,
            "overheads": overheads,
            "overhead": overhead,
            "events": events,
            "us_per_event": per_event * 1e6,
            "computed_overhead": computed,
            "bytes": size,
            "load_average": load,
        },
    )


if __name__ == "__main__":
    main()
