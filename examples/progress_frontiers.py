"""Frontiers on simulated workers: the progress core end to end, without Ray.

A dataflow with a loop (input -> parse -> [enter -> merge -> step -> feedback] ->
leave -> count) runs on W simulated workers. Each record goes round the loop a few
times. Every worker keeps a view of the occurrence counts (the exchange protocol) and
feeds what it applies to its own pointstamp tracker; the run prints, per worker, the
step at which the output's frontier passed each epoch, and the progress traffic with
and without accumulation. Every worker must see every epoch complete, in order.

    python examples/progress_frontiers.py --workers 4 --epochs 5
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections import deque
from typing import Any

from progress import (
    Graph,
    GraphBuilder,
    Location,
    Pointstamp,
    ProgressBatch,
    Tracker,
    Update,
    WorkerProgress,
    source,
    target,
)

ROUNDS = 3  # how many times each record goes round the loop


def build() -> tuple[Graph, int, int]:
    b = GraphBuilder()
    inp = b.add_operator("input", inputs=0)
    parse = b.add_operator("parse")
    enter = b.add_ingress("enter", 0)
    merge = b.add_operator("merge", inputs=2, depth=1)
    step = b.add_operator("step", depth=1)
    feedback = b.add_feedback("feedback", 1)
    leave = b.add_egress("leave", 1)
    count = b.add_operator("count", outputs=0)
    b.add_edge(source(inp), target(parse))
    b.add_edge(source(parse), target(enter))
    b.add_edge(source(enter), target(merge, 0))
    b.add_edge(source(merge), target(step))
    b.add_edge(source(step), target(feedback))
    b.add_edge(source(feedback), target(merge, 1))
    b.add_edge(source(step), target(leave))
    b.add_edge(source(leave), target(count))
    return b.build(), inp, count


def run(workers: int, epochs: int, records: int, accumulate: bool, seed: int) -> dict[str, Any]:
    graph, inp, count = build()
    rng = random.Random(seed)
    cap: Pointstamp = (source(inp), (0,))
    protos = [WorkerProgress(w, workers, graph, [cap], accumulate) for w in range(workers)]
    trackers = [Tracker(graph) for _ in range(workers)]
    for t in trackers:
        t.update(cap[0], cap[1], workers)
        t.propagate_all()
    # Each worker works on its earliest pending record first, as a timely scheduler does.
    inbox: list[list[tuple[tuple[int, ...], Location]]] = [[] for _ in range(workers)]
    wire: list[deque[tuple[int, ProgressBatch]]] = [deque() for _ in range(workers)]
    done_at: list[list[int]] = [[] for _ in range(workers)]
    sent = 0
    input_epoch = [0] * workers
    steps = 0

    def out_of(loc: Location, time: tuple[int, ...]) -> list[tuple[Location, tuple[int, ...]]]:
        """Where one record at ``(loc, time)`` goes next (the operators' logic)."""
        node = graph.nodes[loc.node].name
        if node == "step":
            nxt = "feedback" if time[1] + 1 < ROUNDS else "leave"
            dst = target(next(n for n, s in enumerate(graph.nodes) if s.name == nxt))
            return [(dst, time)]
        if node == "count":
            return []
        # Everything else forwards along its output's edges, moving time as they do.
        outs = []
        for src, summary in graph.successors(loc):
            r = summary.results_in(time)
            assert r is not None
            for dst, _ in graph.successors(src):
                outs.append((dst, r))
        return outs

    while any(e < epochs for e in input_epoch) or any(inbox) or any(wire):
        steps += 1
        w = rng.randrange(workers)
        ups: list[Update] = []
        if input_epoch[w] < epochs and (not inbox[w] or rng.random() < 0.05):
            e = input_epoch[w]
            for _ in range(records):  # feed one epoch, then move the input capability on
                dst = next(t for t, _ in graph.successors(source(inp)))
                ups.append(((dst, (e,)), 1))
                heapq.heappush(inbox[rng.randrange(workers)], ((e,), dst))
            ups += [((source(inp), (e,)), -1)]
            if e + 1 < epochs:
                ups.append(((source(inp), (e + 1,)), 1))
            input_epoch[w] += 1
        elif inbox[w]:
            time, loc = heapq.heappop(inbox[w])
            # Safety, seen from the output: nothing arrives for an epoch already complete.
            assert loc != target(count) or time[0] >= len(done_at[w]), (w, time, done_at[w])
            ups.append(((loc, time), -1))
            for dst, t in out_of(loc, time):
                ups.append(((dst, t), 1))
                heapq.heappush(inbox[rng.randrange(workers)], (t, dst))
        protos[w].record(ups)
        batch = protos[w].flush(force=not any(inbox) and input_epoch[w] >= epochs)
        if batch is not None:
            sent += workers
            for r in range(workers):
                wire[r].append((w, batch))
        for r in range(workers):  # the network delivers some of what is in flight
            for _ in range(rng.randrange(len(wire[r]) + 1)):
                _, b = wire[r].popleft()
                trackers[r].update_all(protos[r].receive(b))
            trackers[r].propagate_all()
            front = trackers[r].frontier(target(count))
            while len(done_at[r]) < epochs and not any(f[0] <= len(done_at[r]) for f in front):
                done_at[r].append(steps)
        if not any(inbox) and all(e >= epochs for e in input_epoch):
            for p in protos:  # quiet: flush what accumulation still holds
                b2 = p.flush(force=True)
                if b2 is not None:
                    sent += workers
                    for r in range(workers):
                        wire[r].append((p.worker, b2))
    for r in range(workers):
        assert len(done_at[r]) == epochs, f"worker {r} saw {len(done_at[r])}/{epochs} epochs"
        assert trackers[r].is_idle() and not protos[r].view.live()
    return {"steps": steps, "progress_messages": sent, "epochs_done_at": done_at[0]}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--records", type=int, default=20, help="records per worker per epoch")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    print(f"{args.workers} workers, {args.epochs} epochs, loop of {ROUNDS} rounds")
    print("| accumulation | worker steps | progress messages | messages/step |")
    print("|---|---|---|---|")
    for acc in (False, True):
        r: dict[str, Any] = run(args.workers, args.epochs, args.records, acc, args.seed)
        print(
            f"| {'on' if acc else 'off'} | {r['steps']} | {r['progress_messages']} "
            f"| {r['progress_messages'] / r['steps']:.2f} |"
        )
        print(f"|   worker 0: epochs complete at steps {r['epochs_done_at']} |")
    print("every worker saw every epoch complete, in order; all frontiers empty at the end")


if __name__ == "__main__":
    main()
