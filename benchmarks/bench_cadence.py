"""Drizzle's trade-off on Ray: checkpoint interval against overhead and recovery time.

A running sum per key over ``KEYS`` keys (state that every checkpoint encodes) on 2 Ray
workers, fed ``EPOCHS`` epochs by the driver: the first half of ``BIG`` records each,
the second half ten times smaller (so a checkpoint costs ten times more per epoch).
For no checkpoints, ``checkpoint_every`` 1, 2, 4 ... 64, and ``"auto"`` (AIMD on the
interval, :mod:`timely.checkpoint.aimd`, ``checkpoint_fraction=(0.05, 0.10)``):

- **overhead**: the run's time over the run without checkpoints next to it (median of
  the ratios of such pairs, each interval in turn first and second);
- **recovery**: one worker actor killed when the driver receives epoch ``KILL_AT``;
  the time from the kill to the next epoch the driver had not received before, and how
  many epochs were redone (the kill's epoch minus the checkpoint restored);
- **in CPU**: the same from the CPU time of the driver and both worker processes
  (steadier than wall time on a shared machine);
- **reported**: the coordination fraction the run measured itself, the share of its
  CPU that checkpointing took (every interval is measured as ``auto``'s is,
  :mod:`timely.checkpoint.cost`, :mod:`timely.checkpoint.cadence`), against the measured
  one, ``1 - none / run`` in wall time and in CPU (issue 30's goal: within 3 points);
- for ``auto``, the interval it chose over the run, and where it settled.

Outputs equal the failure-free run's (asserted). Plot: ``results/cadence.svg``;
``--plot`` draws Drizzle's curve, overhead and kill -> next output against ``k``, with
where ``auto`` settled, into ``docs/benchmarks/cadence-curve.{png,svg}``.

    python -m benchmarks.bench_cadence [--quick] [--plot] [--repeat N] [--configs 1,2,8,auto]
"""

from __future__ import annotations

import argparse
import operator
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import operators  # noqa: F401  (running_reduce)
from benchmarks.tables import RESULTS, markdown, write_results
from timely import Dataflow
from timely.checkpoint.cadence import overall

KEYS = 20_000
BIG = 60_000
EPOCHS = 160
KILL_AT = 120
CONFIGS: list[Any] = [None, 1, 2, 4, 8, 16, 32, 64, "auto"]
BOUNDS = (0.05, 0.10)
"""``checkpoint_fraction`` for ``auto``."""
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"


def records(epoch: int) -> list[int]:
    size = BIG if epoch < EPOCHS // 2 else BIG // 10
    return [(epoch * 7919 + i * 31) % KEYS for i in range(size)]


def one_run(every: Any, kill: bool) -> dict[str, Any]:
    import ray

    arrivals: list[tuple[float, int, int]] = []
    state: dict[str, Any] = {"killed_at": None, "last_before": None}
    flow = Dataflow("cadence")
    inp = flow.new_input("keys")
    sums = inp.stream.running_reduce(lambda k: k, operator.add, value=lambda k: 1)
    out: dict[int, list[Any]] = {}
    holder: dict[str, Any] = {}

    def seen(epoch: int, recs: list[Any]) -> None:
        session = holder["session"]
        arrivals.append((time.perf_counter(), epoch, session.restarts))
        out[epoch] = sorted(recs)
        if kill and epoch == KILL_AT and state["killed_at"] is None:
            state["last_before"] = max(e for _, e, _ in arrivals)
            state["killed_at"] = time.perf_counter()
            ray.kill(holder["session"].actors[1], no_restart=True)

    sums.subscribe(seen)
    options: dict[str, Any] = {"idle_timeout": 0 if kill else 30}
    with tempfile.TemporaryDirectory() as ckpt:
        if every is not None:
            options |= {"checkpoint": ckpt, "checkpoint_every": every}
            if every == "auto":
                options["checkpoint_fraction"] = BOUNDS
        t0 = time.perf_counter()
        session = flow.activate(workers=2, backend="ray", **options)
        holder["session"] = session
        cpu0 = None if kill else cpu(session)
        started = time.perf_counter()
        for epoch in range(EPOCHS):
            inp.advance_to(epoch)
            inp.send(records(epoch))
        inp.close()
        session.join()
        ended = time.perf_counter()
        cpu_s = None if cpu0 is None else cpu(session) - cpu0
    result: dict[str, Any] = {
        "run_s": ended - started,
        "start_s": started - t0,
        "out": out,
        "cpu_s": cpu_s,
    }
    windows = session.cadence
    if every == "auto":
        result["intervals"] = [(m.last, m.interval, m.fraction) for m in windows]
    if windows:
        # The share of the run's CPU the workers and the driver say checkpointing took:
        # the windows' coordination over the CPU they spent (the run's own measurement).
        result["reported"] = overall(windows)
    if kill:
        # the first epoch new to the driver from the restarted workers (outputs the old
        # ones had already sent may still arrive after the kill)
        before = max(e for _, e, r in arrivals if r == 0)
        after = [t for t, e, r in arrivals if r > 0 and e > before]
        result["recovery_s"] = min(after) - state["killed_at"] if after else float("nan")
        result["redone"] = max(0, before - session.restored_epoch)
        result["restarts"] = session.restarts
    return result


def cpu(session: Any) -> float:
    """CPU seconds the driver and the worker actors have used so far: far steadier than
    wall time on a shared machine, so the slowdown in CPU is a second check of the
    fraction the run reports."""
    import ray

    stats = ray.get([actor.stats.remote() for actor in session.actors])
    return time.process_time() + sum(s["cpu"] for s in stats)


def plot(rows: list[dict[str, Any]], auto: list[tuple[int, int, float]], path: Any) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.4))
    names = [r["config"] for r in rows if r["config"] != "none"]
    over = [r["overhead"] for r in rows if r["config"] != "none"]
    rec = [r["recovery_s"] for r in rows if r["config"] != "none"]
    a = fig.add_subplot(1, 3, 1)
    a.bar(names, over, color="#1f77b4")
    a.set_title("run time / no checkpoints", fontsize="small")
    a.tick_params(axis="x", labelrotation=60, labelsize="x-small")
    b = fig.add_subplot(1, 3, 2)
    b.bar(names, rec, color="#d62728")
    b.set_title("kill → next new output (s)", fontsize="small")
    b.tick_params(axis="x", labelrotation=60, labelsize="x-small")
    c = fig.add_subplot(1, 3, 3)
    if auto:
        c.step([e for e, _, _ in auto], [k for _, k, _ in auto], where="post")
    c.axvline(EPOCHS // 2, color="grey", linestyle=":")
    c.set_title("auto: interval (epochs) by epoch", fontsize="small")
    c.set_xlabel("epoch (dotted: epochs 10× smaller)", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


def settled(auto: list[tuple[int, int, float]]) -> int | None:
    """The interval ``auto`` ran under last (None: no window measured)."""
    return auto[-1][1] if auto else None


def curve(rows: list[dict[str, Any]], auto_k: int | None, stem: Path) -> list[Path]:
    """Drizzle's trade-off: overhead and kill -> next output against the interval, with
    ``auto``'s point at the interval it settled at; PNG and SVG."""
    from matplotlib.figure import Figure

    fixed = [r for r in rows if isinstance(r["k"], int)]
    auto = next((r for r in rows if r["k"] == "auto"), None)
    ks = [r["k"] for r in fixed]
    fig = Figure(figsize=(9, 3.6))
    a = fig.add_subplot(1, 2, 1)
    a.plot(ks, [100 * (r["overhead"] - 1) for r in fixed], "o-", label="measured slowdown")
    if all(r.get("measured_cpu") is not None for r in fixed):
        a.plot(
            ks,
            [100 * r["measured_cpu"] / (1 - r["measured_cpu"]) for r in fixed],
            "^:",
            color="#9467bd",
            label="measured in CPU (driver + workers)",
        )
    a.plot(
        ks,
        [100 * r["reported"] / (1 - r["reported"]) for r in fixed],
        "s--",
        color="grey",
        label="as the run measured it",
    )
    a.axhspan(
        100 * BOUNDS[0] / (1 - BOUNDS[0]),
        100 * BOUNDS[1] / (1 - BOUNDS[1]),
        color="#2ca02c",
        alpha=0.15,
        label="auto's band",
    )
    a.set_ylabel("run time over none (%)")
    b = fig.add_subplot(1, 2, 2)
    b.plot(ks, [r["recovery_s"] for r in fixed], "o-", color="#d62728")
    b.set_ylabel("kill → next new output (s)")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("checkpoint every k epochs")
    if auto is not None and auto_k is not None:
        a.plot(
            [auto_k],
            [100 * (auto["overhead"] - 1)],
            "*",
            color="#ff7f0e",
            markersize=14,
            label=f"auto (settled at k = {auto_k})",
        )
        b.plot([auto_k], [auto["recovery_s"]], "*", color="#ff7f0e", markersize=14)
    a.legend(fontsize="x-small")
    fig.suptitle(
        "Drizzle's trade-off on Ray, 2 workers: overhead against recovery", fontsize="small"
    )
    fig.tight_layout()
    out = []
    for ext in ("png", "svg"):
        path = stem.with_suffix(f".{ext}")
        fig.savefig(path, dpi=120)
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> None:
    global EPOCHS, KILL_AT
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition, 30 epochs")
    parser.add_argument("--plot", action="store_true", help="draw the curve into docs/")
    parser.add_argument("--repeat", type=int, default=None, help="interleaved repetitions")
    parser.add_argument(
        "--configs",
        default=None,
        help="the intervals to run against none, comma-separated (e.g. 1,2,8,auto; "
        "default: every one)",
    )
    args = parser.parse_args(argv)
    if args.configs:
        CONFIGS[:] = [None, *(c if c == "auto" else int(c) for c in args.configs.split(","))]
    partial = args.quick or bool(args.configs)  # its files never replace a full run's
    loads = [os.getloadavg()[0]]
    repeat = args.repeat or (1 if args.quick else 3)
    if args.quick:
        EPOCHS, KILL_AT = 30, 22
        globals()["BIG"] = 20_000
    times: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    cpu_ratios: dict[str, list[float]] = {}
    reported: dict[str, list[float]] = {}
    reference = None
    auto_intervals: list[tuple[int, int, float]] = []
    # Each interval right next to a run without checkpoints, in turn first and second:
    # this machine's speed swings 2x within a minute, so only a ratio of neighbours means
    # anything (a median over a cycle of every configuration does not).
    for rep in range(repeat):
        for every in CONFIGS[1:]:
            pair = {}
            for config in (None, every) if rep % 2 == 0 else (every, None):
                r = one_run(config, kill=False)
                pair[str(config)] = r["run_s"]
                pair[f"cpu {config}"] = r["cpu_s"]
                times.setdefault(str(config), []).append(r["run_s"])
                if "reported" in r:
                    reported.setdefault(str(config), []).append(r["reported"])
                reference = reference or r["out"]
                assert r["out"] == reference, f"{config}: outputs differ"
                if config == "auto":
                    auto_intervals = r["intervals"]
            loads.append(os.getloadavg()[0])
            ratios.setdefault(str(every), []).append(pair[str(every)] / pair["None"])
            cpu_ratios.setdefault(str(every), []).append(pair[f"cpu {every}"] / pair["cpu None"])
    rows = []
    for every in CONFIGS:
        k = run_k = one_run(every, kill=True) if every is not None else None
        if run_k is not None:
            assert run_k["out"] == reference, f"{every}: outputs after a kill differ"
        run_s = statistics.median(times[str(every)])
        ratio = 1.0 if every is None else statistics.median(ratios[str(every)])
        rows.append(
            {
                "config": "none" if every is None else f"every {every}",
                "k": every,
                "run_s": run_s,
                "overhead": ratio,
                "ratios": ratios.get(str(every)),
                "cpu_ratios": cpu_ratios.get(str(every)),
                "reported_runs": reported.get(str(every)),
                "measured": 1 - 1 / ratio,
                "measured_cpu": None
                if every is None
                else 1 - 1 / statistics.median(cpu_ratios[str(every)]),
                "reported": statistics.median(reported[str(every)])
                if str(every) in reported
                else None,
                "recovery_s": k["recovery_s"] if k else float("nan"),
                "redone": k["redone"] if k else None,
            }
        )
    auto_k = settled(auto_intervals)
    print(
        markdown(
            [
                "checkpoints",
                "run s (median)",
                "run / none",
                "fraction measured",
                "in CPU",
                "fraction reported",
                "kill → new output s",
                "epochs redone",
            ],
            [
                [
                    r["config"] + (f" (settled at k = {auto_k})" if r["k"] == "auto" else ""),
                    f"{r['run_s']:.2f}",
                    f"{r['overhead']:.2f}",
                    "–" if r["reported"] is None else f"{r['measured']:.3f}",
                    "–" if r["measured_cpu"] is None else f"{r['measured_cpu']:.3f}",
                    "–" if r["reported"] is None else f"{r['reported']:.3f}",
                    "–" if r["redone"] is None else f"{r['recovery_s']:.2f}",
                    "–" if r["redone"] is None else r["redone"],
                ]
                for r in rows
            ],
        )
    )
    print("auto's intervals (last epoch of window, k, fraction):", auto_intervals)
    print(f"load average (1 min) after each pair: {min(loads):.1f}-{max(loads):.1f}")
    RESULTS.mkdir(exist_ok=True)
    svg = RESULTS / ("cadence.quick.svg" if partial else "cadence.svg")
    plot(rows, auto_intervals, svg)
    if args.plot:
        stem = DOCS / ("cadence-curve.quick" if partial else "cadence-curve")
        print("curve:", ", ".join(str(p) for p in curve(rows, auto_k, stem)))
    payload = {
        "epochs": EPOCHS,
        "keys": KEYS,
        "big": BIG,
        "rows": rows,
        "auto": auto_intervals,
        "auto_settled": auto_k,
        "load": loads,
    }
    print(f"figures: {write_results('cadence', partial, payload)}; plot: {svg}")


if __name__ == "__main__":
    main()
