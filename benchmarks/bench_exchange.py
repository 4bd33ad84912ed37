"""Progress traffic per epoch for W simulated workers, with and without accumulation.

Every worker step yields one progress batch that is broadcast to all W workers, so
the traffic grows like W² times the steps per epoch. Naiad's local accumulation
(``WorkerProgress(accumulate=True)``) holds justified updates back and merges them;
this script measures how much traffic that saves, in messages and in msgpack bytes.

The dataflow is ``input -> map -> count -> sink``; input->map and map->count are
exchange channels (records go to random workers), count->sink is a pipeline. Each
epoch runs five phases, every worker taking one step per phase:

1. send: the input sends ``k`` records at ``(e,)`` to random workers' map
   (``+1`` at ``map.in``, justified by the input capability it holds at ``(e,)``);
2. map: consume its records (``-1``) and send as many to random workers' count;
3. count: consume its records and send one result to its own sink;
4. sink: consume it;
5. downgrade: the input capability moves from ``(e,)`` to ``(e + 1,)``.

After every step the worker calls ``flush()``; a batch goes to every worker (the
sender included), FIFO per sender, delivered round-robin over senders at the end of
each phase. After each phase every view is checked to be safe (each truly live
pointstamp can still be reached from the view's live pointstamps), and at the end
every view's counts must equal the true counts, so the figures are for a run that
kept the protocol's promises.

Run from the repository root: ``.venv/bin/python -m benchmarks.bench_exchange [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]

from benchmarks.tables import markdown
from progress import (
    ChangeBatch,
    Graph,
    GraphBuilder,
    Pointstamp,
    ProgressBatch,
    Timestamp,
    Update,
    WorkerProgress,
    source,
    target,
)

RESULTS = Path(__file__).resolve().parent / "results"
WORKERS = (2, 4, 8, 16, 32, 64)

_b = GraphBuilder()
INPUT = _b.add_operator("input", inputs=0, outputs=1)
MAP = _b.add_operator("map")
COUNT = _b.add_operator("count")
SINK = _b.add_operator("sink", inputs=1, outputs=0)
_b.add_edge(source(INPUT), target(MAP))
_b.add_edge(source(MAP), target(COUNT))
_b.add_edge(source(COUNT), target(SINK))
GRAPH: Graph = _b.build()
del _b


def encode(batch: ProgressBatch) -> bytes:
    """The wire form: ``[sender, seq, [[node, kind, port, [time...], delta], ...]]``."""
    updates = [
        [loc.node, int(loc.kind), loc.port, list(t), delta] for (loc, t), delta in batch.updates
    ]
    data: bytes = msgpack.packb([batch.sender, batch.seq, updates])
    return data


class Cluster:
    """W workers' progress state, the broadcast channels between them, and the truth."""

    def __init__(self, workers: int, accumulate: bool, check: bool) -> None:
        self.w = workers
        self.check = check
        # Every worker holds the input capability at epoch 0 from the start: it owns
        # one, and every view counts all W of them.
        cap0: Pointstamp = (source(INPUT), (0,))
        self.workers = [
            WorkerProgress(i, workers, GRAPH, capabilities=[cap0], accumulate=accumulate)
            for i in range(workers)
        ]
        self.truth: ChangeBatch[Pointstamp] = ChangeBatch([(cap0, workers)])
        # queues[recipient][sender]: batches in flight, FIFO per sender.
        self.queues = [[deque[ProgressBatch]() for _ in range(workers)] for _ in range(workers)]
        self.batches = 0
        self.bytes = 0
        self.updates = 0

    def step(self, worker: int, updates: Sequence[Update], idle: bool = True) -> None:
        """One worker step: record its updates, flush, broadcast the batch if any.

        ``idle``: the worker has no more work queued in this scheduling round.
        """
        if updates:
            self.workers[worker].record(updates)
            self.truth.extend(updates)
        self._send(self.workers[worker].flush(idle=idle))

    def _send(self, batch: ProgressBatch | None) -> None:
        if batch is None:
            return
        self.batches += 1
        self.updates += len(batch.updates)
        self.bytes += len(encode(batch)) * self.w
        for recipient in range(self.w):
            self.queues[recipient][batch.sender].append(batch)

    def deliver(self) -> None:
        """Deliver everything in flight, round-robin over senders at each recipient."""
        for recipient, queues in enumerate(self.queues):
            wp = self.workers[recipient]
            while any(queues):
                for q in queues:
                    if q:
                        wp.receive(q.popleft())
        if self.check:
            self.check_safe()

    def check_safe(self) -> None:
        """No view is ahead of the truth: each truly live pointstamp is reachable in it."""
        live = [ps for ps, c in self.truth if c > 0]
        for wp in self.workers:
            for ps in live:
                if not wp.view.could_be_reached(ps):
                    raise AssertionError(f"worker {wp.worker}'s view is ahead of the truth at {ps}")

    def close(self) -> None:
        """Force out whatever is still held and check every view against the truth."""
        for wp in self.workers:
            self._send(wp.flush(force=True))
        self.deliver()
        truth = dict(self.truth.items())
        for wp in self.workers:
            if wp.view.counts() != truth:
                raise AssertionError(f"worker {wp.worker}'s view differs from the true counts")
            if wp.pending() or wp.early_batches():
                raise AssertionError(f"worker {wp.worker} has updates left over")
        if truth:
            raise AssertionError(f"pointstamps still live at the end: {truth}")


SCHEDULES = {
    "late": "the input downgrades last, after its epoch's records are consumed",
    "eager": "the input downgrades in the step that sends (a source that moves on at once)",
    "eager-round": "eager, and each worker runs its epoch's operators in one scheduling round, "
    "idle only after the last",
}


def simulate(
    workers: int, epochs: int, k: int, accumulate: bool, schedule: str, seed: int, check: bool
) -> dict[str, Any]:
    """Run ``epochs`` epochs; return the traffic of each epoch (and of closing the input).

    ``schedule`` is a key of ``SCHEDULES``: when the input capability moves on.
    """
    eager = schedule.startswith("eager")
    busy = schedule != "eager-round"  # idle after every step unless rounds are modelled
    rng = random.Random(seed)
    c = Cluster(workers, accumulate, check)
    cap, map_in, count_in, sink_in = source(INPUT), target(MAP), target(COUNT), target(SINK)
    per_epoch: list[dict[str, int]] = []
    start = time.perf_counter()
    for e in range(epochs):
        t: Timestamp = (e,)
        before = (c.batches, c.bytes, c.updates)
        at_map = [0] * workers
        at_count = [0] * workers
        at_sink = [0] * workers
        downgrade: list[Update] = [((cap, t), -1), ((cap, (e + 1,)), 1)]
        for w in range(workers):  # 1. send: k records at (e,) to random workers' map
            for _ in range(k):
                at_map[rng.randrange(workers)] += 1
            c.step(w, [((map_in, t), 1)] * k + (downgrade if eager else []), idle=busy)
        c.deliver()
        for w in range(workers):  # 2. map: consume, send on to random workers' count
            m = at_map[w]
            for _ in range(m):
                at_count[rng.randrange(workers)] += 1
            c.step(w, [((map_in, t), -1)] * m + [((count_in, t), 1)] * m, idle=busy)
        c.deliver()
        for w in range(workers):  # 3. count: consume, send one result to its own sink
            n = at_count[w]
            if n:
                at_sink[w] = 1
            c.step(w, [((count_in, t), -1)] * n + [((sink_in, t), 1)] * at_sink[w], idle=busy)
        c.deliver()
        for w in range(workers):  # 4. sink: consume
            c.step(w, [((sink_in, t), -1)] * at_sink[w])
        c.deliver()
        if not eager:
            for w in range(workers):  # 5. downgrade the input capability
                c.step(w, downgrade)
            c.deliver()
        per_epoch.append(
            {
                "batches": c.batches - before[0],
                "messages": (c.batches - before[0]) * workers,
                "bytes": c.bytes - before[1],
                "updates": c.updates - before[2],
            }
        )
    before = (c.batches, c.bytes, c.updates)
    for w in range(workers):  # drop the input capability; everything drains
        c.step(w, [((cap, (epochs,)), -1)])
    c.deliver()
    c.close()
    closing = {
        "batches": c.batches - before[0],
        "messages": (c.batches - before[0]) * workers,
        "bytes": c.bytes - before[1],
        "updates": c.updates - before[2],
    }
    return {
        "workers": workers,
        "accumulate": accumulate,
        "schedule": schedule,
        "epochs": epochs,
        "k": k,
        "seed": seed,
        "per_epoch": per_epoch,
        "closing": closing,
        "seconds": time.perf_counter() - start,
    }


def per_epoch(run: dict[str, Any], key: str) -> float:
    """Mean of ``key`` over the epochs (closing the input is reported apart)."""
    return float(statistics.mean(ep[key] for ep in run["per_epoch"]))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs")
    parser.add_argument("--no-check", action="store_true", help="skip the per-phase safety check")
    parser.add_argument("--k", type=int, default=8, help="records each worker sends per epoch")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    quick: bool = args.quick
    epochs = 5 if quick else 20
    wall = time.perf_counter()
    load = os.getloadavg()

    runs: list[dict[str, Any]] = []
    for schedule, what in SCHEDULES.items():
        rows: list[list[object]] = []
        for w in WORKERS:
            plain = simulate(w, epochs, args.k, False, schedule, args.seed, not args.no_check)
            acc = simulate(w, epochs, args.k, True, schedule, args.seed, not args.no_check)
            runs += [plain, acc]
            pm, am = per_epoch(plain, "messages"), per_epoch(acc, "messages")
            pb, ab = per_epoch(plain, "bytes"), per_epoch(acc, "bytes")
            rows.append(
                [w, f"{pm:,.0f}", f"{am:,.0f}", f"{pb:,.0f}", f"{ab:,.0f}",
                 f"{pm / am:.2f}×", f"{pb / ab:.2f}×"]
            )  # fmt: skip
        print(f"## Progress traffic per epoch, {schedule} input: {what}\n")
        print(
            markdown(
                ["W", "messages (no acc.)", "messages (acc.)", "bytes (no acc.)", "bytes (acc.)",
                 "messages ÷", "bytes ÷"],
                rows,
            )
        )  # fmt: skip
        print()
    total = time.perf_counter() - wall
    print(
        f"Mean of {epochs} epochs, k = {args.k} records per worker per epoch. "
        "messages = batches × W recipients (the sender's own copy included); "
        "bytes = msgpack size × W."
    )
    print(f"({'quick' if quick else 'full'} run, {total:.1f} s)")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("bench_exchange.quick.json" if quick else "bench_exchange.json")
    payload = {
        "benchmark": "bench_exchange",
        "quick": quick,
        "python": sys.version.split()[0],
        "loadavg_at_start": load,
        "platform": platform.platform(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "wall_seconds": total,
        "checked": not args.no_check,
        "runs": runs,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"figures written to {out}")


if __name__ == "__main__":
    main()
