"""Where an inline checkpoint's cost goes: the word count of ``bench_checkpoint``, inline
x1, a checkpoint after every epoch, with pieces of the checkpoint taken away in turn.

An ablation, not a profile: a profiler's own cost per call is the size of most pieces
here (~635 Python calls a checkpoint, none over ~60 us), and a piece's cost in the run
includes the cache it takes from the epoch's computation, which only taking it away
shows. Each mode replaces store or writer functions for its runs (this module's
``_patched``; nothing in ``timely`` is changed) and is measured against a run without
checkpoints in the same round, the modes' order rotating from round to round:

- **every epoch**: the run as it is.
- **no files**: every file operation of the store is skipped (the parts' and manifests'
  writes, a links file's parts and a commit log's lines, the folders made and retired);
  the encoding, CRC-32 and all the bookkeeping stay.
- **loop only**: nothing after the snapshot: no part encoded, written or hashed, no
  manifest, nothing retired; what is left is the scan, the snapshots (rows: their
  msgpack encoding, which is the copy), the hold-back of notifications and the
  coordinator's bookkeeping of parts and commits.

``--reported``: what a run reports its checkpoints cost (the fraction
``checkpoint_every="auto"`` steers on, ``timely.checkpoint.cadence.overall`` of
``session.cadence``) against what they cost, ``1 - none / run`` in wall time, for a
checkpoint every epoch, inline x1 and Ray x2 (300 epochs, so that its windows of
``MIN_WINDOW`` close; issue 30's goal: within 3 points).

``--probe``: what the report misses, told apart in one run (issue 30). A run
checkpoints every epoch but every :data:`SKIP`-th, so that a cycle of two epochs sits
among cycles of one; each commit is timed in the process's CPU. With ``C1`` a cycle of
one epoch (``p`` + the checkpoint's cost ``c``, its after-effect on the next epoch
included) and ``C2`` one of two (``2p + c``), ``2 C1 - C2`` is ``c`` as a cycle's
neighbours see it; its median over the run, over the median ``C1``, is the share a
checkpoint every epoch would cost if that were all of it. Beside it: the measured share
(a run without checkpoints against one with every epoch, process CPU), the report's
(its timers), and how much slower than an epoch of the run without checkpoints an epoch
of the probe's run is that follows no checkpoint (``C2 - C1``): what checkpoints cost
every epoch, not only the one after them.

A second table holds the whole checkpoint against the epoch's length (lines per epoch,
30 epochs each): a checkpoint's cost is per epoch, its state (5,000 keys) the same size
at every length, so the share it takes falls as epochs grow.

    python -m benchmarks.bench_checkpoint_parts [--rounds N] [--reported | --probe]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from benchmarks.bench_checkpoint import RESULTS, running_wordcount, text
from benchmarks.tables import markdown
from timely.checkpoint import coordinator as coordinator_module
from timely.checkpoint import links
from timely.checkpoint import store as store_module
from timely.checkpoint import writer as writer_module
from timely.checkpoint.cadence import overall
from timely.eventlog import clock
from timely.worker import snapshots as snapshots_module

MODES = ("every epoch", "no files", "loop only")


def _appended(chain: links.Chain, epoch: int, pieces: list[Any], size: int, delta: bool) -> int:
    """``links.Chain.append`` without the file (``no files``): where the part would go."""
    offset = chain.end
    chain.end += size
    chain.last = epoch
    chain.deltas = chain.deltas or delta
    chain.parts += 1
    return offset


@contextlib.contextmanager
def _patched(mode: str) -> Iterator[None]:
    """The store and writer as ``mode`` has them, restored after."""
    store_cls = store_module.CheckpointStore
    patches = contextlib.ExitStack()

    def put(owner: Any, name: str, value: Any) -> None:
        patches.enter_context(mock.patch.object(owner, name, value))

    def nothing(*_: Any, **__: Any) -> None:
        return None

    if mode == "no files":
        put(store_cls, "write", nothing)
        put(links.Chain, "append", _appended)  # (a links file's parts)
        put(links.Log, "append", nothing)  # (a commit log's lines)
        put(store_cls, "_make_dir", nothing)
        put(store_cls, "retire", lambda self, epoch: True)
    elif mode == "loop only":

        def unwritten(
            store: Any, epoch: int, worker: int, part: dict[str, Any], log: Any, workers: Any = None
        ) -> tuple[dict[str, Any], int]:
            path = f"{store_module.epoch_dir(epoch)}/-"  # (the coordinator reads its folder)
            info = {"worker": worker, "path": path, "size": 0, "crc32": 0, "base": part.get("base")}
            return info, clock()

        put(writer_module, "write_encoded", unwritten)
        put(store_cls, "commit", nothing)
        put(store_cls, "retire", lambda self, epoch: True)
    with patches:
        yield


def _timed(run: Callable[[], float]) -> tuple[float, float]:
    """Wall seconds (the run's own) and the process's CPU seconds."""
    cpu = time.process_time()
    wall = run()
    return wall, time.process_time() - cpu


def ablation(table: bool, rounds: int) -> dict[str, Any]:
    """Each mode's cost over none, per round (wall and process CPU ratios minus one)."""
    data = text(60, 400)

    def run(mode: str | None) -> tuple[float, float]:
        with tempfile.TemporaryDirectory() as root:
            if mode is None:
                return _timed(lambda: running_wordcount(data, "inline", 1, table=table))
            with _patched(mode):
                return _timed(
                    lambda: running_wordcount(data, "inline", 1, table=table, checkpoint=root)
                )

    for mode in (None, *MODES):  # warm: imports, Arrow's kernels, the first folders
        run(mode)
    found: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    for r in range(rounds):
        order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
        plain = run(None)
        for mode in order:
            wall, cpu = run(mode)
            found[mode].append((wall / plain[0] - 1, cpu / plain[1] - 1))
    return {
        "api": "table" if table else "rows",
        "modes": {
            m: {
                "wall": [w for w, _ in v],
                "cpu": [c for _, c in v],
                "wall_median": statistics.median(w for w, _ in v),
                "cpu_median": statistics.median(c for _, c in v),
            }
            for m, v in found.items()
        },
    }


def by_epoch_length(table: bool, rounds: int) -> list[dict[str, Any]]:
    """The whole checkpoint's cost at 400, 1,600 and 6,400 lines an epoch (30 epochs:
    the first checkpoints, which make their folders and files, and the later ones, which
    write over retired ones, in the same proportion), against none, alternating."""
    out = []
    for lines in (400, 1600, 6400):
        data = text(30, lines)
        found = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as root:
                plain = running_wordcount(data, "inline", 1, table=table)
                ckpt = running_wordcount(data, "inline", 1, table=table, checkpoint=root)
            found.append(ckpt / plain - 1)
        out.append(
            {
                "api": "table" if table else "rows",
                "lines_per_epoch": lines,
                "epoch_ms": 1e3 * plain / len(data),
                "slowdown": found,
                "median": statistics.median(found),
            }
        )
    return out


def reported(table: bool, backend: str, workers: int, pairs: int) -> dict[str, Any]:
    """The fraction a run with a checkpoint every epoch reports, against the share of
    its wall time a run without checkpoints beside it saves, pair by pair."""
    data = text(300, 400)

    def run(ck: bool) -> tuple[float, float | None]:
        with tempfile.TemporaryDirectory() as root:
            windows: list[Any] = []
            options: dict[str, Any] = {"checkpoint": root, "checkpoint_every": 1} if ck else {}
            wall = running_wordcount(
                data, backend, workers, table=table, cadence=windows, **options
            )
        return wall, (overall(windows) if windows else None)

    run(False), run(True)  # warm
    measured: list[float] = []
    fractions: list[float] = []
    for _ in range(pairs):
        plain, (ckpt, fraction) = run(False)[0], run(True)
        measured.append(1 - plain / ckpt)
        if fraction is not None:
            fractions.append(fraction)
    return {
        "api": "table" if table else "rows",
        "backend": f"{backend} x{workers}",
        "measured_pairs": measured,
        "reported_pairs": fractions,
        "measured": statistics.median(measured),
        "reported": statistics.median(fractions) if fractions else float("nan"),
    }


SKIP = 4
"""``--probe``: every ``SKIP``-th epoch has no checkpoint."""


@contextlib.contextmanager
def _probing(commits: list[tuple[int, float]]) -> Iterator[None]:
    """Checkpoints every epoch but every :data:`SKIP`-th (the schedule's grid, and the
    next boundary it writes out for one segment, patched), each commit's epoch and the
    process's CPU then appended to ``commits``."""
    grid = snapshots_module._grid
    commit = coordinator_module.CheckpointCoordinator._commit

    def skipping(first: int, every: int | None, after: int, upto: int | None) -> list[int]:
        epochs = grid(first, every, after, after + 2 * SKIP if upto is None else upto)
        kept = [e for e in epochs if e % SKIP != SKIP - 1]
        return kept[:1] if upto is None else kept

    def boundary(self: Any, v: int) -> int | None:
        after = self.snapped[v]
        cached = self._boundaries.get(v)
        if cached is not None and cached[0] == after:
            return cached[1]  # type: ignore[no-any-return]
        due = self.due(after, None)
        found = due[0] if due else None
        self._boundaries[v] = (after, found)
        return found

    def timed(self: Any, epoch: int) -> float:
        at = commit(self, epoch)
        commits.append((epoch, time.process_time()))
        return at

    with contextlib.ExitStack() as patches:
        patches.enter_context(mock.patch.object(snapshots_module, "_grid", skipping))
        patches.enter_context(
            mock.patch.object(snapshots_module.Snapshots, "next_boundary", boundary)
        )
        patches.enter_context(
            mock.patch.object(coordinator_module.CheckpointCoordinator, "_commit", timed)
        )
        yield


def _probed(commits: list[tuple[int, float]]) -> tuple[float, float, int]:
    """From a probing run's commits, over the cycles of two epochs between two of one
    (the first 10 cycles left out): the median ``2 C1 - C2`` over the median ``C1`` (a
    checkpoint's share), the median ``C2 - C1`` (an epoch after no checkpoint, CPU
    seconds), and how many such cycles there were."""
    cycles = [(e1 - e0, c1 - c0) for (e0, c0), (e1, c1) in itertools.pairwise(commits)][10:]
    costs, ones, warm = [], [], []
    for before, (length, two), after in zip(cycles, cycles[1:], cycles[2:]):
        if length == 2 and before[0] == 1 and after[0] == 1:
            one = (before[1] + after[1]) / 2
            costs.append(2 * one - two)
            ones.append(one)
            warm.append(two - one)
    if not costs:
        raise RuntimeError("the probing run committed no cycle of two epochs between two of one")
    return statistics.median(costs) / statistics.median(ones), statistics.median(warm), len(costs)


def probe(table: bool, rounds: int) -> dict[str, Any]:
    """Per round, in turn: a run without checkpoints, one with every epoch (measured
    and reported), and the probing one (:func:`_probing`); 600 epochs each."""
    epochs = 600
    data = text(epochs, 400)

    def cpu(**options: Any) -> tuple[float, list[Any]]:
        windows: list[Any] = []
        with tempfile.TemporaryDirectory() as root:
            if options:
                options["checkpoint"] = root
            t0 = time.process_time()
            running_wordcount(data, "inline", 1, table=table, cadence=windows, **options)
            return time.process_time() - t0, windows

    cpu(), cpu(checkpoint_every=1)  # warm
    found: list[dict[str, float]] = []
    for _ in range(rounds):
        plain, _ = cpu()
        every, windows = cpu(checkpoint_every=1)
        commits: list[tuple[int, float]] = []
        with _probing(commits):
            cpu(checkpoint_every=1)
        share, warm, n = _probed(commits)
        found.append(
            {
                "measured": 1 - plain / every,
                "reported": overall(windows),
                "probe": share,
                "warm_epoch": warm / (plain / epochs) - 1,
                "probes": n,
            }
        )
    return {
        "api": "table" if table else "rows",
        "rounds": found,
        **{k: statistics.median(r[k] for r in found) for k in found[0]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reported", action="store_true", help="only the fraction reported")
    ap.add_argument("--probe", action="store_true", help="only what the report misses")
    args = ap.parse_args()
    if args.probe:
        results = [probe(table, args.rounds) for table in (True, False)]
        print(
            markdown(
                [
                    "api",
                    "measured (CPU)",
                    "reported (timers)",
                    "probe: a checkpoint and its next epoch",
                    "an epoch after no checkpoint, against none",
                ],
                [
                    (
                        r["api"],
                        f"{r['measured']:.3f}",
                        f"{r['reported']:.3f}",
                        f"{r['probe']:.3f}",
                        f"{r['warm_epoch']:+.1%}",
                    )
                    for r in results
                ],
            )
        )
        (RESULTS / "checkpoint_probe.json").write_text(
            json.dumps({"load_average": os.getloadavg(), "cases": results}, indent=1)
        )
        return
    if args.reported:
        cases = [(t, b, w) for b, w in (("inline", 1), ("ray", 2)) for t in (True, False)]
        found = [reported(t, b, w, 5) for t, b, w in cases]
        print(
            markdown(
                ["api", "backend", "reported", "measured", "pairs: measured"],
                [
                    (
                        r["api"],
                        r["backend"],
                        f"{r['reported']:.3f}",
                        f"{r['measured']:.3f}",
                        ", ".join(f"{m:.3f}" for m in r["measured_pairs"]),
                    )
                    for r in found
                ],
            )
        )
        (RESULTS / "checkpoint_reported.json").write_text(
            json.dumps({"load_average": os.getloadavg(), "cases": found}, indent=1)
        )
        return
    out: dict[str, Any] = {"load_average": os.getloadavg()}
    out["ablation"] = [ablation(table, args.rounds) for table in (True, False)]
    rows = [
        (
            a["api"],
            mode,
            f"{m['wall_median']:+.0%} ({', '.join(f'{w:+.0%}' for w in m['wall'])})",
            f"{m['cpu_median']:+.0%}",
        )
        for a in out["ablation"]
        for mode, m in a["modes"].items()
    ]
    print(markdown(["api", "checkpoint", "wall over none: median (rounds)", "CPU"], rows))
    out["epoch_length"] = [r for table in (True, False) for r in by_epoch_length(table, 5)]
    print()
    print(
        markdown(
            ["api", "lines an epoch", "an epoch without", "every epoch: median (rounds)"],
            [
                (
                    r["api"],
                    f"{r['lines_per_epoch']:,}",
                    f"{r['epoch_ms']:.1f} ms",
                    f"{r['median']:+.0%} ({', '.join(f'{s:+.0%}' for s in r['slowdown'])})",
                )
                for r in out["epoch_length"]
            ],
        )
    )
    out["load_average_after"] = os.getloadavg()
    (RESULTS / "checkpoint_parts.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
