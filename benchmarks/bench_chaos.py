"""Chaos soak: hundreds of worker kills on local Ray, every output checked.

The harness of ``tests/checkpoint/test_chaos.py`` (``tests/checkpoint/chaos.py``), run
over and over with new seeds: each run takes one dataflow (sliding sums slid by an
inverse, in-place ``dict`` state, a fixpoint into running counts, a bursty driver, two
sources, a committed file sink), kills workers at seeded points in five ways (one; two,
5–50 ms apart; a replacement during the recovery; two at once; one by a ``SIGKILL``
to its process) and compares every
epoch with a failure-free inline run. Reported per dataflow and overall: kills,
restarts, wrong / lost / duplicated epochs (the goal: none), and the time from a kill
to the next new output at the driver (the goal: median <= 1 s, max <= 3 s), which
needs the failure detected, new actors started, the checkpoint restored and the
inputs replayed. Two figures show the checkpoint cadence, which bounds what a recovery
redoes: "replayed", how many epochs behind the driver's output the restored checkpoint
was when the new workers started, and the longest time a run went on (outside
recoveries) without a new commit.

Benchmarks import the harness from ``tests/``: it is test code (an oracle, kill
schedules, the judging), and one copy of it is what keeps the soak and the tests
measuring the same thing.

    python -m benchmarks.bench_chaos [--kills N] [--quick] [--events-per-run K] [--seed S]
        [--dataflow NAME ...]

The tables go to stdout; the figures to ``benchmarks/results/chaos.json``
(``chaos.quick.json`` with ``--quick`` or ``--dataflow``: a partial run).

Every kill event either has its latency measured or is counted as missed, with the
reason (``missed``); kills that landed on an actor the session had already replaced
(the second of a ``double`` often does: the first is seen within milliseconds) are
counted apart (``stale``), since they cost no recovery of their own.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.tables import markdown
from tests.checkpoint.chaos import (
    CASES,
    KINDS,
    Case,
    case_data,
    judge,
    latency_summary,
    plan_kills,
    run,
)

RESULTS = Path(__file__).resolve().parent / "results"

GOAL_MEDIAN_S = 1.0
GOAL_MAX_S = 3.0


def epochs_for(case: Case, events: int) -> int:
    """Enough epochs for ``events`` kill events about 6 epochs apart (10 for a source,
    within its first ``kills_until``: see ``plan_kills``), and never fewer than the test
    uses."""
    if case.feed == "driver":
        return max(case.epochs, 6 * events + case.burst + case.lag + 8)
    return max(case.epochs, int((10 * events + 3) / case.kills_until))


def one_run(case: Case, seed: int, events_per_run: int) -> dict[str, Any]:
    """One chaos run of ``case`` with ``events_per_run`` kill events, judged."""
    kinds = [KINDS[i % len(KINDS)] for i in range(events_per_run)]
    n = epochs_for(case, events_per_run)
    data = case_data(case, seed, n)
    events = plan_kills(case, seed, kinds, n)
    with tempfile.TemporaryDirectory() as d:
        expected = run(case, data, "inline", Path(d))
        # A crash of the run is a finding too: counted, reported, and the soak goes on.
        got = run(case, data, "ray", Path(d), events, catch=True)
    error = got.error
    verdict = judge(expected, got)
    return {
        "dataflow": case.name,
        "seed": seed,
        "epochs": n,
        "error": error,
        "seconds": got.seconds,
        "kills": got.kills,
        "restarts": got.restarts,
        "wrong": len(verdict.wrong) + len(verdict.extra) + len(verdict.sink_wrong),
        "sink_torn": verdict.sink_torn,
        "lost": len(verdict.lost) if error is None else None,
        "duplicated": len(verdict.duplicated),
        "committed": got.commits,
        "longest_without_commit_s": got.longest_without_commit,
        "events": [
            {
                "kind": r.event.kind,
                "after": r.event.after,
                "kills": r.kills,
                "high": r.high,
                "restored": r.restored,
                "relaunch_high": r.relaunch_high,
                # what the driver had received when the new workers started, and the
                # restore has to compute again (outputs still in flight at the kill may
                # arrive before the relaunch: hence not r.high)
                "replayed": None if r.restored is None else r.relaunch_high - r.restored,
                "latency_s": r.latency,
                "missed": r.missed,
                "stale": r.stale,
            }
            for r in got.records
        ],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals and latency figures over ``runs``."""
    events = [e for r in runs for e in r["events"]]
    latencies = [e["latency_s"] for e in events if e["latency_s"] is not None]
    replayed = [e["replayed"] for e in events if e["replayed"] is not None]
    gaps = [r["longest_without_commit_s"] for r in runs if r["longest_without_commit_s"]]
    return {
        "runs": len(runs),
        "failed_runs": sum(r["error"] is not None for r in runs),
        "kills": sum(r["kills"] for r in runs),
        "events": len(events),
        "measured_events": sum(e["latency_s"] is not None for e in events),
        "missed_events": sum(e["missed"] is not None for e in events),
        "missed_why": dict(Counter(e["missed"] for e in events if e["missed"] is not None)),
        "stale_kills": sum(e["stale"] for e in events),
        "restarts": sum(r["restarts"] for r in runs),
        "wrong": sum(r["wrong"] + r["sink_torn"] for r in runs),
        "lost": sum(r["lost"] or 0 for r in runs),
        "duplicated": sum(r["duplicated"] for r in runs),
        "replayed_median": statistics.median(replayed) if replayed else None,
        "longest_without_commit_s": max(gaps, default=None),
        **latency_summary(latencies),
    }


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def main() -> None:
    import ray

    from timely.backends.ray import local_ray_options

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--kills", type=int, default=300, help="run rounds (each dataflow once) until this many"
    )
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run: one round, one event of each kind"
    )
    ap.add_argument("--events-per-run", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1000, help="the first run's seed")
    ap.add_argument(
        "--dataflow",
        action="append",
        choices=sorted(CASES),
        help="only this dataflow (repeatable); a partial run, written as chaos.quick.json",
    )
    args = ap.parse_args()
    target = 0 if args.quick else args.kills
    per_run = len(KINDS) if args.quick else args.events_per_run
    names = sorted(args.dataflow or CASES)

    out: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "kills_asked": target,
        "events_per_run": per_run,
        "goal": {"median_s": GOAL_MEDIAN_S, "max_s": GOAL_MAX_S},
    }
    runs: list[dict[str, Any]] = []
    start = time.monotonic()
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        logging_level=logging.WARNING,
        **local_ray_options(),
    )
    try:
        seed = args.seed
        while True:  # whole rounds, so that every dataflow gets as many runs
            for name in names:
                r = one_run(CASES[name], seed, per_run)
                runs.append(r)
                status = r["error"] or (
                    "ok" if not (r["wrong"] or r["lost"] or r["duplicated"]) else "WRONG"
                )
                measured = sum(e["latency_s"] is not None for e in r["events"])
                print(
                    f"{name:16s} seed {seed}: {r['kills']:3d} kills, {r['restarts']:3d} restarts, "
                    f"{measured}/{len(r['events'])} events measured, "
                    f"{r['seconds']:5.1f} s: {status[:160]}",
                    flush=True,
                )
            seed += 1
            if sum(r["kills"] for r in runs) >= target:
                break
    finally:
        ray.shutdown()
    out["seconds"] = time.monotonic() - start
    out["runs"] = runs
    out["dataflows"] = {
        name: {
            "workers": CASES[name].workers,
            "feed": CASES[name].feed,
            "cadence": CASES[name].options,
            **summarize([r for r in runs if r["dataflow"] == name]),
        }
        for name in names
    }
    out["overall"] = summarize(runs)
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        events = [e for r in runs for e in r["events"] if e["kind"] == kind]
        lat = [e["latency_s"] for e in events if e["latency_s"] is not None]
        kinds[kind] = {
            "events": len(events),
            "kills": sum(e["kills"] for e in events),
            "stale_kills": sum(e["stale"] for e in events),
            **latency_summary(lat),
        }
    out["kinds"] = kinds
    overall = out["overall"]
    out["goal_met"] = (
        overall["median_s"] is not None
        and overall["median_s"] <= GOAL_MEDIAN_S
        and all(
            d["max_s"] is not None and d["max_s"] <= GOAL_MAX_S for d in out["dataflows"].values()
        )
        and not (overall["wrong"] or overall["lost"] or overall["duplicated"])
        and not overall["failed_runs"]
        and not overall["missed_events"]
    )

    def row(name: str, s: dict[str, Any], workers: Any, feed: Any) -> tuple[Any, ...]:
        return (
            name,
            workers,
            feed,
            s["kills"],
            s["restarts"],
            s["wrong"],
            s["lost"],
            s["duplicated"],
            s["failed_runs"],
            "–" if s["replayed_median"] is None else f"{s['replayed_median']:g}",
            seconds(s["longest_without_commit_s"]),
            seconds(s["median_s"]),
            seconds(s["p90_s"]),
            seconds(s["max_s"]),
        )

    print()
    print(
        markdown(
            [
                "dataflow",
                "workers",
                "fed by",
                "kills",
                "restarts",
                "wrong",
                "lost",
                "duplicated",
                "failed runs",
                "replayed (median epochs)",
                "longest without a commit",
                "kill → output, median",
                "p90",
                "max",
            ],
            [
                row(name, d, d["workers"], d["feed"] + _cadence(d["cadence"]))
                for name, d in out["dataflows"].items()
            ]
            + [row("**all**", overall, "", "")],
        )
    )
    print()
    print(
        markdown(
            [
                "kill kind",
                "events",
                "kills",
                "on replaced actors",
                "kill → output, median",
                "p90",
                "max",
            ],
            [
                (k, v["events"], v["kills"], v["stale_kills"], seconds(v["median_s"]))
                + (seconds(v["p90_s"]), seconds(v["max_s"]))
                for k, v in kinds.items()
            ],
        )
    )
    why = ", ".join(f"{n} {reason}" for reason, n in overall["missed_why"].items())
    print(
        f"\n{overall['events']} kill events in {out['seconds']:.0f} s "
        f"({out['seconds'] / max(overall['events'], 1):.2f} s each): "
        f"{overall['measured_events']} with a recovery measured, "
        f"{overall['missed_events']} missed{f' ({why})' if why else ''}"
    )
    print(
        f"\n{overall['kills']} kills in {out['seconds']:.0f} s; goal (nothing wrong, lost or "
        f"duplicated; every event measured; median <= {GOAL_MEDIAN_S:g} s, max <= "
        f"{GOAL_MAX_S:g} s for every dataflow): {'met' if out['goal_met'] else 'NOT met'}"
    )
    name = "chaos.quick.json" if args.quick or args.dataflow else "chaos.json"
    (RESULTS / name).write_text(json.dumps(out, indent=1))


def _cadence(options: dict[str, Any]) -> str:
    if "checkpoint_interval" in options:
        return f", ckpt every {options['checkpoint_interval']:g} s"
    return f", ckpt every {options.get('checkpoint_every', 1)} epoch"


if __name__ == "__main__":
    main()
