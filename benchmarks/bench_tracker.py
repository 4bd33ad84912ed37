"""Pointstamp-tracker throughput, and evidence that its cost follows what changes.

DESIGN.md promises that "the progress tracker's cost grows with the number of
pointstamps that change, not with the graph". This script puts figures on that:

1. Throughput (pointstamp updates/s, worklist pops per update) for a run-like
   workload on a chain of 100 operators and on three nested loops. Epochs are
   pipelined: every round the input sends epoch ``e`` and downgrades its capability
   to ``e + 1``, and every message in flight moves one hop (consumed ``-1`` where it
   is, produced ``+1`` at the next input). ``propagate_all`` runs after every step,
   either one operator activation (2-3 updates) or one scheduling round (all the
   activations of the round, consolidated, like a worker's progress batch).
2. Incrementality: on chains of 10, 100 and 1000 operators, the cost of one update
   three operators before the end stays flat, while one at the start grows with the
   length, because there the frontier really moves at every location.

Run from the repository root: ``.venv/bin/python -m benchmarks.bench_tracker [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.tables import markdown
from progress import Graph, GraphBuilder, Location, Timestamp, Tracker, source, target

RESULTS = Path(__file__).resolve().parent / "results"

Update = tuple[Location, Timestamp, int]
Step = list[Update]
Round = list[Step]
"""One scheduling round: the steps (operator activations) a worker makes in one pass."""


# -- graphs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dataflow:
    """A graph, its input node, and how a message chooses an output at each node."""

    name: str
    graph: Graph
    input: int
    route: Callable[[int, Timestamp], int]
    """``(node, time) -> output port`` for nodes with more than one output."""


def chain(length: int) -> Dataflow:
    """An input (no inputs, one output), then ``length`` one-in one-out operators in a row."""
    b = GraphBuilder()
    inp = b.add_operator("input", inputs=0, outputs=1)
    prev = inp
    for i in range(length):
        op = b.add_operator(f"op{i}")
        b.add_edge(source(prev), target(op))
        prev = op
    return Dataflow(f"chain of {length}", b.build(), inp, lambda node, time: 0)


def nested_loops(depth: int = 3, body: int = 3, iterations: Sequence[int] = (3, 3, 3)) -> Dataflow:
    """Input -> ``depth`` loops nested in each other -> sink.

    Each loop level has its own ingress, a two-input merge (ingress and feedback), a
    few body operators, the next level's loop (if any), then a branch with two
    outputs: round again through the level's feedback, or leave through its egress.
    A message goes round level ``d`` ``iterations[d - 1]`` times.
    """
    b = GraphBuilder()
    inp = b.add_operator("input", inputs=0, outputs=1)
    branches: dict[int, int] = {}  # branch node -> loop level

    def scope(level: int, upstream: Location) -> Location:
        ingress = b.add_ingress(f"ingress{level}", level - 1)
        b.add_edge(upstream, target(ingress))
        merge = b.add_operator(f"merge{level}", inputs=2, depth=level)
        b.add_edge(source(ingress), target(merge, 0))
        out = source(merge)
        for i in range(body):
            op = b.add_operator(f"body{level}.{i}", depth=level)
            b.add_edge(out, target(op))
            out = source(op)
        if level < depth:
            out = scope(level + 1, out)
        branch = b.add_operator(f"branch{level}", inputs=1, outputs=2, depth=level)
        branches[branch] = level
        b.add_edge(out, target(branch))
        feedback = b.add_feedback(f"feedback{level}", level)
        b.add_edge(source(branch, 0), target(feedback))
        b.add_edge(source(feedback), target(merge, 1))
        egress = b.add_egress(f"egress{level}", level)
        b.add_edge(source(branch, 1), target(egress))
        return source(egress)

    sink = b.add_operator("sink", inputs=1, outputs=0)
    b.add_edge(scope(1, source(inp)), target(sink))

    def route(node: int, time: Timestamp) -> int:
        level = branches[node]
        return 0 if time[level] + 1 < iterations[level - 1] else 1

    return Dataflow(f"{depth} nested loops", b.build(), inp, route)


# -- workload ------------------------------------------------------------------------------
def hop(flow: Dataflow, loc: Location, time: Timestamp) -> tuple[Location, Timestamp] | None:
    """Where a message at input ``loc`` goes next (``None``: the node only consumes it)."""
    spec = flow.graph.nodes[loc.node]
    if not spec.output_depths:
        return None
    out = flow.route(loc.node, time) if len(spec.output_depths) > 1 else 0
    nxt = spec.internal[(loc.port, out)][0].results_in(time)
    edges = flow.graph.successors(source(loc.node, out))
    if nxt is None or not edges:
        return None
    return edges[0][0], nxt


def workload(flow: Dataflow, epochs: int, inflight_cap: int | None = None) -> list[Round]:
    """Pipelined epochs: per round every message moves one hop and the input sends an epoch.

    The input sends epoch ``e`` (and downgrades its capability to ``e + 1``) in a round
    only while fewer than ``inflight_cap`` epochs are still in the dataflow, like a
    source under backpressure; ``None`` sends one every round. After the last epoch
    it drops its capability and the messages still in flight drain, so the tracker
    ends idle.
    """
    cap = source(flow.input)
    entry = flow.graph.successors(cap)[0][0]
    rounds: list[Round] = [[[(cap, (0,), 1)]]]
    inflight: list[tuple[Location, Timestamp]] = []
    e = 0
    while e < epochs or inflight:
        steps: Round = []
        moved: list[tuple[Location, Timestamp]] = []
        for loc, t in inflight:
            nxt = hop(flow, loc, t)
            if nxt is None:
                steps.append([(loc, t, -1)])
            else:
                steps.append([(loc, t, -1), (nxt[0], nxt[1], 1)])
                moved.append(nxt)
        inflight = moved
        if e < epochs and (inflight_cap is None or len(inflight) < inflight_cap):
            steps.append([(entry, (e,), 1), (cap, (e,), -1), (cap, (e + 1,), 1)])
            inflight.append((entry, (e,)))
            e += 1
            if e == epochs:
                steps.append([(cap, (epochs,), -1)])
        rounds.append(steps)
    return rounds


def run(graph: Graph, batches: list[Step]) -> tuple[float, float, int]:
    """Feed the batches to a fresh tracker, propagating after each.

    Returns wall seconds, CPU seconds (a much lower CPU than wall time means another
    process took the core) and worklist pops.
    """
    tracker = Tracker(graph)
    update, propagate = tracker.update, tracker.propagate_all
    cpu = time.process_time()
    start = time.perf_counter()
    for batch in batches:
        for loc, t, delta in batch:
            update(loc, t, delta)
        propagate()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    if not tracker.is_idle():
        raise AssertionError("workload did not drain: the tracker is not idle at the end")
    return elapsed, cpu, tracker.worklist_pops


GRANULARITIES = ("operator activation", "scheduling round")
"""What a step is: one operator's activation (2-3 updates) or a whole scheduling round."""


def throughput(
    flow: Dataflow,
    epochs: int,
    inflight: int | None,
    reps: int,
    granularities: Sequence[str] = GRANULARITIES[:1],
) -> list[dict[str, Any]]:
    """Updates/s (median of ``reps`` fresh trackers) and pops/update, per step granularity."""
    rounds = workload(flow, epochs, inflight)
    per_step = [step for r in rounds for step in r]
    batching = {
        "operator activation": per_step,
        "scheduling round": [[u for step in r for u in step] for r in rounds],
    }
    updates = sum(len(s) for s in per_step)
    # Epochs in flight = messages at a target at the start of a round (one per epoch).
    peak = max(sum(1 for step in r if step[0][2] < 0 and not step[0][0].is_source) for r in rounds)
    rows = []
    for granularity in granularities:
        batches = batching[granularity]
        times, cpus, pops = [], [], 0
        for _ in range(reps):
            elapsed, cpu, pops = run(flow.graph, batches)
            times.append(elapsed)
            cpus.append(cpu)
        median = statistics.median(times)
        rows.append(
            {
                "graph": flow.name,
                "locations": len(flow.graph.locations),
                "epochs": epochs,
                "inflight_cap": inflight,
                "inflight_peak": peak,
                "step": granularity,
                "updates": updates,
                "propagations": len(batches),
                "updates_per_propagation": updates / len(batches),
                "seconds_median": median,
                "seconds_all": times,
                "cpu_seconds_all": cpus,
                "updates_per_second": updates / median,
                "updates_per_cpu_second": updates / statistics.median(cpus),
                "worklist_pops": pops,
                "pops_per_update": pops / updates,
            }
        )
    return rows


def incrementality(length: int, reps: int) -> dict[str, Any]:
    """Cost of a message appearing and leaving near the end vs at the start of a chain.

    The input holds a capability at ``(1,)``; a message at ``(0,)`` appears (+1, then
    propagate) and is consumed (-1, then propagate), ``reps`` times. Near the end the
    frontier moves at the last three operators only; at the start it moves everywhere.
    """
    flow = chain(length)
    tracker = Tracker(flow.graph)
    tracker.update_source(flow.input, 0, (1,), 1)
    tracker.propagate_all()
    result: dict[str, Any] = {"length": length, "locations": len(flow.graph.locations)}
    for where, node in (("end", length - 2), ("start", 1)):  # ops are nodes 1..length
        samples: list[float] = []
        cpu_samples: list[float] = []
        pops_before = tracker.worklist_pops
        for _ in range(reps):
            for delta in (1, -1):
                cpu = time.process_time()
                start = time.perf_counter()
                tracker.update_target(node, 0, (0,), delta)
                tracker.propagate_all()
                samples.append(time.perf_counter() - start)
                cpu_samples.append(time.process_time() - cpu)
        result[where] = {
            "node": node,
            "operators_downstream": length - node + 1,
            "updates": len(samples),
            "pops_per_update": (tracker.worklist_pops - pops_before) / len(samples),
            "microseconds_median": statistics.median(samples) * 1e6,
            "cpu_microseconds_median": statistics.median(cpu_samples) * 1e6,
        }
    return result


# -- report --------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs and repetitions")
    args = parser.parse_args(argv)
    quick: bool = args.quick
    reps = 3 if quick else 5
    wall = time.perf_counter()
    load = os.getloadavg()
    if load[0] > 1.0:
        print(f"warning: load average {load[0]:.2f} at start; other processes may skew timings\n")

    scale = 4 if quick else 1
    both = GRANULARITIES
    rows = throughput(chain(100), 100 // scale, 1, reps)
    rows += throughput(chain(100), 200 // scale, None, reps, both)
    loops = nested_loops()
    rows += throughput(loops, 20 // scale, 1, reps)
    rows += throughput(loops, 24 // scale, 8, reps, both)
    rows += throughput(loops, 48 // scale, 32, reps)
    print("## Tracker throughput\n")
    print(
        markdown(
            ["graph", "locations", "epochs", "in flight (peak)", "propagate after each",
             "updates", "updates/propagation", "median s", "updates/s", "updates/CPU s",
             "pops/update"],
            [
                [r["graph"], r["locations"], r["epochs"], r["inflight_peak"], r["step"],
                 r["updates"],
                 f"{r['updates_per_propagation']:.1f}", f"{r['seconds_median']:.3f}",
                 f"{r['updates_per_second']:,.0f}", f"{r['updates_per_cpu_second']:,.0f}",
                 f"{r['pops_per_update']:.2f}"]
                for r in rows
            ],
        )
    )  # fmt: skip

    inc = [incrementality(n, reps=20 if quick else 100) for n in (10, 100, 1000)]
    print("\n## Incrementality: one update on a chain\n")
    print(
        markdown(
            ["chain length", "end: pops/update", "end: µs/update", "end: CPU µs/update",
             "start: pops/update", "start: µs/update", "start: CPU µs/update"],
            [
                [r["length"]] + [
                    f"{r[where][key]:.1f}"
                    for where in ("end", "start")
                    for key in ("pops_per_update", "microseconds_median",
                                "cpu_microseconds_median")
                ]
                for r in inc
            ],
        )
    )  # fmt: skip

    total = time.perf_counter() - wall
    print(f"\n({'quick' if quick else 'full'} run, {total:.1f} s)")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("bench_tracker.quick.json" if quick else "bench_tracker.json")
    payload = {
        "benchmark": "bench_tracker",
        "quick": quick,
        "repetitions": reps,
        "python": sys.version.split()[0],
        "loadavg_at_start": load,
        "platform": platform.platform(),
        "wall_seconds": total,
        "throughput": rows,
        "incrementality": inc,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"figures written to {out}")


if __name__ == "__main__":
    main()
