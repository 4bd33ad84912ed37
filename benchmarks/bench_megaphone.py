"""Megaphone's live migration next to pause-and-restart, and what bins cost when nothing moves.

**(a) Overhead of bins** (goal: <= 3% on word count). The word count of
``bench_wordcount`` (2M words, 10,000 distinct, the ``Counter`` pre-combine and a keyed
merge) on 2 workers, inline and on Ray, with three exchanges side by side:

- ``hash % workers``: the routing before bins (each key to ``stable_hash(key) % workers``,
  owners remembered per key), kept here as a channel of the benchmark's own;
- ``bins``: key -> bin -> worker through the routing table, as shipped;
- ``bins + control``: the same in a reconfigurable run (``reconfigure=[]``: a control
  input broadcast to every keyed step, closed at the start), with no migration.

**(b) Migration latency** (goal: fluid's worst epoch latency during the migration <= 3x
the steady-state p99). A keyed running count (``running_reduce``) over ``KEYS`` int keys
on Ray, 2 workers: the driver loads every key once, then sends ``RATE`` records/s in
epochs of ``EPOCH_S`` seconds, keys drawn uniformly. After ``BEFORE_S`` seconds half of
the bins change owner (bins ``b < BINS/2`` swap workers), by

- ``fluid``: ``session.reconfigure(..., strategy="fluid", bins_per_step=8)``;
- ``all-at-once``: one configuration;
- ``checkpoint-and-rescale``: ``session.rescale(4)`` (stop at a checkpoint, restore on 4
  workers with state re-partitioned: half the keys move), what a pause-and-restart
  engine does;
- ``live-scale-out`` / ``live-scale-in`` (issue 29): ``session.rescale`` from
  ``workers // 2`` to ``workers`` workers, or back, while the run goes on (joiners start
  at the control input's epoch and bins move to them fluidly; leavers' bins move off,
  then they go). Beside them ``checkpoint-and-rescale`` goes the same way
  (``workers // 2`` to ``workers``). ``--backend inline`` runs every worker on the
  driver's thread (a joiner adds no CPU: the figures are the change's cost alone).

Per epoch: latency = when its output reached the driver minus when the epoch was due to
close on the input's steady schedule (a driver held up by a pause closes epochs late,
and that backlog is latency too, as for events that keep arriving).
Reported: steady-state p50 and p99 (before the migration), the worst epoch from the
migration's start until every step is done and 1 s after, its ratio to the steady p99,
and how long the migration took; plotted to ``results/megaphone.svg``. Every run's final
counts are checked against a ``Counter`` of what was sent.

    python -m benchmarks.bench_megaphone [--quick] [--skip-overhead] [--skip-migration]
"""

from __future__ import annotations

import argparse
import operator
import random
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

import operators  # noqa: F401  (running_reduce)
from benchmarks.bench_wordcount import (
    LINES_PER_BATCH,
    CountWords,
    LineFiles,
    MergeCounts,
    generate,
    paths,
)
from benchmarks.tables import RESULTS, markdown, write_results
from timely import Dataflow, stable_hash
from timely.routing.channels import Exchange, exchange

# -- (a) overhead ----------------------------------------------------------------------------


class HashModWorkers(Exchange):
    """The exchange before bins: ``stable_hash(key) % workers``, owners remembered per key
    (the worker count is read off the table: the default table uses every worker)."""

    def route_by(
        self,
        records: list[Any],
        table: np.ndarray[Any, Any],
        here: int,
        load: np.ndarray[Any, Any] | None = None,
    ) -> dict[int, list[Any]]:
        workers = int(table.max()) + 1
        if workers == 1:
            return {here: records}
        key = self.key
        cache = self._bins  # key -> worker here
        keys = records if key is None else list(map(key, records))
        try:
            owners = list(map(cache.__getitem__, keys))
        except KeyError:
            for k in keys:
                if k not in cache:
                    cache[k] = stable_hash(k) % workers
            owners = list(map(cache.__getitem__, keys))
        out: dict[int, list[Any]] = {}
        for record, w in zip(records, owners):
            part = out.get(w)
            if part is None:
                out[w] = [record]
            else:
                part.append(record)
        return out


def _first(pair: tuple[str, int]) -> str:
    return pair[0]


def wordcount(data: Path, workers: int, backend: str, variant: str) -> Counter[str]:
    flow = Dataflow(f"wc-{variant}")
    words = flow.source(LineFiles(paths(data), LINES_PER_BATCH)).select_many(str.split)
    channel = HashModWorkers(_first) if variant == "hash % workers" else exchange(_first)
    counts = words.unary(CountWords, name="precount").unary(
        MergeCounts, name="count", channel=channel
    )
    counts.collect("counts")
    options: dict[str, Any] = {"progress": False}
    if variant == "bins + control":
        options["reconfigure"] = []  # the control input and its ports; nothing moves
    result = flow.run(workers=workers, backend=backend, **options)
    totals: Counter[str] = Counter()
    for _, (w, c) in result["counts"]:
        totals[w] += c
    return totals


VARIANTS = ["hash % workers", "bins", "bins + control"]


def overhead(words: int, repeat: int, backends: list[str]) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        data = Path(d)
        generate(data, words, 10_000)
        expected: Counter[str] = Counter()
        for p in paths(data):
            expected.update(p.read_text().split())
        for backend in backends:
            wordcount(data, 2, backend, "bins")  # warm-up: Ray's start, imports, files
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for _ in range(repeat):
                for v in VARIANTS:  # interleaved: drift hits every variant alike
                    t0 = time.perf_counter()
                    got = wordcount(data, 2, backend, v)
                    times[v].append(time.perf_counter() - t0)
                    assert got == expected, v
            base = statistics.median(times["hash % workers"])
            for v in VARIANTS:
                med = statistics.median(times[v])
                rows.append(
                    {
                        "backend": backend,
                        "variant": v,
                        "seconds": round(med, 3),
                        "words_per_s": round(words / med),
                        "vs_hash_mod_workers": round(med / base, 3),
                    }
                )
    return rows


# -- (b) migration ---------------------------------------------------------------------------

KEYS = 1_000_000
RATE = 20_000
EPOCH_S = 0.1
BEFORE_S = 4.0
AFTER_S = 4.0
BINS = 256
BINS_PER_STEP = 8
"""Fluid: bins moved per epoch (``--bins-per-step``)."""


def _one(x: int) -> int:
    return 1


def _key(x: int) -> int:
    return x


def swap_half(table: tuple[int, ...]) -> dict[int, int]:
    """Bins ``b < BINS / 2`` go to the other worker of their pair (0 <-> 1, 2 <-> 3 ...)."""
    return {b: table[b] ^ 1 for b in range(len(table) // 2)}


LIVE = {"live-scale-out", "live-scale-in"}


def migration(
    kind: str, workers: int, seed: int = 7, backend: str = "ray", beside_live: bool = False
) -> dict[str, Any]:
    rng = random.Random(seed)
    flow = Dataflow(f"megaphone-{kind}")
    handle = flow.new_input("events")
    arrived: dict[int, float] = {}
    totals: dict[int, int] = {}

    def record(epoch: int, pairs: list[Any]) -> None:
        arrived[epoch] = time.time()
        for k, c in pairs:
            totals[k] = c

    handle.stream.running_reduce(_key, operator.add, value=_one).subscribe(record)
    sent: Counter[int] = Counter()
    closed: dict[int, float] = {}
    options: dict[str, Any] = {"progress": False, "idle_timeout": 0, "bins": BINS}
    ckpt = tempfile.TemporaryDirectory()
    if kind == "checkpoint-and-rescale":
        options |= {"checkpoint": ckpt.name, "checkpoint_interval": 3600.0}
    else:
        options["reconfigurable"] = True
    if backend == "inline":
        del options["idle_timeout"]
    elif kind == "live-scale-out":
        options["standbys"] = 1  # a warm actor to join, as a recovery keeps one
    start_workers, target = workers, workers * 2
    if kind == "live-scale-out":
        start_workers, target = max(1, workers // 2), workers
    elif kind == "live-scale-in":
        target = max(1, workers // 2)
    elif kind == "checkpoint-and-rescale" and (backend == "inline" or beside_live):
        start_workers, target = max(1, workers // 2), workers  # beside live-scale-out
    window: tuple[float, float] = (0.0, 0.0)
    with flow.activate(workers=start_workers, backend=backend, **options) as session:
        keys = list(range(KEYS))
        for i in range(0, KEYS, 100_000):  # the load: every key once, at epoch 0
            handle.send(keys[i : i + 100_000])
        sent.update(keys)
        epoch = 0
        handle.advance_to(1)
        closed[0] = time.time()
        while 0 not in arrived:
            session.poll(0.05)
        per_epoch = int(RATE * EPOCH_S)
        start = time.time()
        migrate_at = start + BEFORE_S
        end = migrate_at + AFTER_S
        asked_epoch = None
        next_close = start

        def finished() -> bool:
            if asked_epoch is None:
                return False
            if kind == "checkpoint-and-rescale":
                return bool(session.rescales)
            return asked_epoch in arrived and (kind not in LIVE or session.workers == target)

        while time.time() < end or not finished():
            epoch += 1
            batch = [rng.randrange(KEYS) for _ in range(per_epoch)]
            handle.send(batch)
            sent.update(batch)
            if asked_epoch is None and time.time() >= migrate_at:
                began = time.time()
                if kind == "checkpoint-and-rescale":
                    session.rescale(target)
                    asked_epoch = epoch
                elif kind in LIVE:
                    session.rescale(target)
                    change = session.rescales[-1]
                    assert change["path"] == "live", change
                    asked_epoch = change["epochs"][-1]
                else:
                    strategy = "fluid" if kind == "fluid" else "all-at-once"
                    steps = session.reconfigure(
                        swap_half, strategy=strategy, bins_per_step=BINS_PER_STEP
                    )
                    asked_epoch = steps[-1]
                window = (began, 0.0)
            next_close += EPOCH_S
            while (pause := next_close - time.time()) > 0:
                session.poll(pause)  # delivers outputs as they come (their arrival times)
            handle.advance_to(epoch + 1)
            # The epoch's time is when its events were due, on the input's schedule: a
            # driver held up by a pause closes late, and the backlog counts as latency.
            closed[epoch] = next_close
            session.poll(0)
        handle.close()
        session.join()
        rescaled = session.rescales[-1]["at"] if session.rescales else None
        restarts = session.restarts
    ckpt.cleanup()
    assert asked_epoch is not None
    if kind in LIVE:
        rescaled = None  # done when the last configuration's epoch is out
    done = rescaled if rescaled is not None else arrived[asked_epoch]
    window = (window[0], done + 1.0)
    latency = {e: arrived[e] - closed[e] for e in closed if e in arrived and e > 0}
    steady = [lat for e, lat in latency.items() if closed[e] < window[0]]
    during = [lat for e, lat in latency.items() if window[0] <= closed[e] <= window[1]]
    p99 = float(np.percentile(steady, 99))
    assert totals == {k: c for k, c in sent.items()}, f"{kind}: counts differ"
    return {
        "kind": kind,
        "backend": backend,
        "workers": f"{start_workers} -> {target}"
        if kind != "fluid" and kind != "all-at-once"
        else workers,
        "restarts": restarts,
        "epochs": epoch,
        "steady_p50_ms": round(statistics.median(steady) * 1000, 1),
        "steady_p99_ms": round(p99 * 1000, 1),
        "worst_during_ms": round(max(during) * 1000, 1),
        "worst_over_p99": round(max(during) / p99, 2),
        "migration_s": round(done - window[0], 2),
        "series": [
            [round(closed[e] - start, 3), round(lat * 1000, 2)] for e, lat in latency.items()
        ],
        "migrate_at_s": round(window[0] - start, 3),
        "bins_per_step": BINS_PER_STEP if kind == "fluid" else None,
    }


KINDS = ["fluid", "all-at-once", "checkpoint-and-rescale", "live-scale-out", "live-scale-in"]


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    for run in runs:
        xs = [x for x, _ in run["series"]]
        ys = [y for _, y in run["series"]]
        ax.plot(xs, ys, label=f"{run['kind']} ({run['workers']} workers)", linewidth=1)
        ax.axvline(run["migrate_at_s"], color="grey", linestyle=":", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the load (dotted: migration asked)", fontsize="small")
    ax.set_ylabel("epoch latency (ms)", fontsize="small")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    global KEYS, BEFORE_S, AFTER_S, BINS_PER_STEP, RATE
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller, 1 repetition")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-migration", action="store_true")
    parser.add_argument("--workers", type=int, nargs="*", default=[2])
    parser.add_argument("--bins-per-step", type=int, default=BINS_PER_STEP)
    parser.add_argument("--kinds", nargs="*", default=KINDS[:3], choices=KINDS)
    parser.add_argument("--backend", default="ray", choices=["ray", "inline"])
    parser.add_argument("--keys", type=int, default=KEYS)
    parser.add_argument("--rate", type=int, default=RATE, help="records/s after the load")
    args = parser.parse_args(argv)
    KEYS, RATE = args.keys, args.rate
    beside_live = bool(LIVE & set(args.kinds))
    BINS_PER_STEP = args.bins_per_step
    payload: dict[str, Any] = {}
    if not args.skip_overhead:
        words = 400_000 if args.quick else 2_000_000
        rows = overhead(words, 1 if args.quick else 5, ["inline", "ray"])
        payload["overhead"] = rows
        print(
            markdown(
                ["backend", "exchange", "seconds", "words/s", "vs hash % workers"],
                [
                    [r["backend"], r["variant"], r["seconds"], r["words_per_s"]]
                    + [r["vs_hash_mod_workers"]]
                    for r in rows
                ],
            )
        )
    if not args.skip_migration:
        if args.quick:
            KEYS, BEFORE_S, AFTER_S = 200_000, 2.0, 2.0
        runs = [
            migration(kind, w, backend=args.backend, beside_live=beside_live)
            for w in args.workers
            for kind in args.kinds
        ]
        payload["migration"] = runs
        print(
            markdown(
                ["kind", "backend", "workers", "steady p50 ms", "steady p99 ms"]
                + ["worst during ms", "worst / p99", "migration s", "restarts"],
                [
                    [r["kind"], r["backend"], r["workers"], r["steady_p50_ms"]]
                    + [r["steady_p99_ms"], r["worst_during_ms"], r["worst_over_p99"]]
                    + [r["migration_s"], r["restarts"]]
                    for r in runs
                ],
            )
        )
        name = "megaphone" if args.backend == "ray" else "megaphone-inline"
        if beside_live:
            name += "-live"
        svg = RESULTS / (f"{name}.quick.svg" if args.quick else f"{name}.svg")
        plot(runs, svg)
        print(f"plot: {svg}")
    path = write_results(
        "megaphone" if args.backend == "ray" else "megaphone-inline",
        args.quick or args.skip_overhead or args.skip_migration,
        payload,
    )
    print(f"figures: {path}")


if __name__ == "__main__":
    main()
