"""Stress loop for ``tests/checkpoint/test_ray_faults.py::test_ray_kill_at_random_epochs``:
the same dataflow and kill schedule shape, many seeds, counting the runs whose outputs
differ from the failure-free run (and those with an epoch missing).

It was written to chase an intermittent lost epoch in the incremental connected
components case. Its cause: a snapshot shared objects with the live state (the
union-find's member lists), and a step that completed several epochs (as the replay
after a restore does: every logged input arrives at once) encoded the checkpoint of
the first after the later ones had changed those lists. A second kill that restored
from such a checkpoint replayed epochs whose changes were already applied, so they had
nothing to send: a lost epoch. Run it against an older checkout (``PYTHONPATH``) to see
the difference.

    python -m benchmarks.stress_ray_faults [--case incremental_cc] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="incremental_cc")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=16)
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--out", default=None, help="write the summary as JSON here")
    args = ap.parse_args()

    import logging

    import ray

    from tests.checkpoint import test_ray_faults as faults
    from timely.backends.ray import local_ray_options

    ray.init(
        num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, **local_ray_options()
    )
    wrong = lost = 0
    seconds: list[float] = []
    try:
        for run in range(args.runs):
            rng = random.Random(f"stress-{args.case}-{run}")
            epochs = faults.CASES[args.case][1](rng, args.epochs)
            expected, _ = faults.run(args.case, epochs, "inline")
            kills = {e: rng.randrange(2) for e in rng.sample(range(1, args.epochs), args.kills)}
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as d:
                got, _ = faults.run(
                    args.case, epochs, "ray", kills, checkpoint=d, max_restarts=args.kills + 1
                )
            seconds.append(time.perf_counter() - started)
            if got != expected:
                wrong += 1
                lost += bool(set(expected) - set(got))
            print(f"run {run}: {'ok' if got == expected else 'WRONG'}", flush=True)
    finally:
        ray.shutdown()
    summary: dict[str, Any] = {
        "case": args.case,
        "runs": args.runs,
        "kills_per_run": args.kills,
        "wrong_runs": wrong,
        "runs_with_a_lost_epoch": lost,
        "seconds_per_run": sum(seconds) / len(seconds),
    }
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
