"""SnailTrail's acceptance scenarios, each run 10 times on Ray: is the ranking right?

The three scenarios of ``tests/analysis/test_profile.py`` (one copy of the dataflows and
of what "ranked right" means, as ``bench_chaos`` shares its harness with the tests):
(a) an operator 10x slower than the others must rank first among operators; (b) a
worker 10x slower must rank first among workers; (c) in an exchange-heavy dataflow the
exchange must rank first among channels. Goal: 10 of 10 each.

    python -m benchmarks.bench_scenarios [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.tables import markdown, write_results
from tests.analysis import test_profile as scenarios

SCENARIOS: dict[str, Callable[[Path], None]] = {
    "(a) a 10x slower operator ranks first": (
        scenarios.test_on_ray_an_operator_ten_times_slower_ranks_first
    ),
    "(b) a straggling worker ranks first": scenarios.test_on_ray_a_straggling_worker_ranks_first,
    "(c) the exchange-heavy channel ranks first": (
        scenarios.test_on_ray_an_exchange_heavy_dataflow_names_the_exchange
    ),
}


def main(argv: list[str] | None = None) -> None:
    import ray

    from timely.backends.ray import local_ray_options

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", **local_ray_options())
    right: dict[str, int] = dict.fromkeys(SCENARIOS, 0)
    wrong: dict[str, list[str]] = {name: [] for name in SCENARIOS}
    try:
        for _ in range(args.runs):
            for name, scenario in SCENARIOS.items():
                trace = Path(tempfile.mkdtemp(prefix="scenario-"))
                try:
                    scenario(trace)
                    right[name] += 1
                except AssertionError as e:
                    wrong[name].append(str(e).splitlines()[0][:200])
                finally:
                    shutil.rmtree(trace, ignore_errors=True)
    finally:
        ray.shutdown()
    rows = [[name, f"{right[name]} of {args.runs}"] for name in SCENARIOS]
    print(f"## SnailTrail acceptance scenarios, Ray 2 workers, {args.runs} runs each\n")
    print(markdown(["scenario", "ranked right"], rows))
    for name, errors in wrong.items():
        for e in errors:
            print(f"- {name}: {e}")
    met = all(n == args.runs for n in right.values())
    print(f"\ngoal (every run ranked right): {'met' if met else 'not met'}")
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    write_results(
        "scenarios",
        args.runs < 10,
        {"runs": args.runs, "right": right, "wrong": wrong, "load": load},
    )


if __name__ == "__main__":
    main()
