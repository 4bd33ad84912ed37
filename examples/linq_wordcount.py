"""Word count over epochs with the LINQ-style operators: ``select_many`` + ``count_by``.

The same job as ``examples/wordcount.py``, without writing a vertex: each epoch's lines
are split into words with ``select_many``, ``count_by`` exchanges the words so that each
word's partial counts meet on one worker and emits ``(word, n)`` once the epoch is
complete, and ``subscribe`` prints each epoch on the driver. The counts are checked
against ``collections.Counter``.

    python examples/linq_wordcount.py --workers 2 --backend ray --epochs 10
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from _cli import add_run_flags, run_options

from timely import Dataflow

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "timely"]


def lines_for(epoch: int, n: int, seed: int = 0) -> list[str]:
    """``n`` lines of 8 words for ``epoch`` (deterministic)."""
    rng = random.Random(seed * 1_000_003 + epoch)
    return [" ".join(rng.choices(WORDS, k=8)) for _ in range(n)]


def split(line: str) -> list[str]:
    return line.split()


def word(w: str) -> str:
    return w


def wordcount(
    epochs: Sequence[list[str]], workers: int = 2, backend: str = "ray", **options: Any
) -> dict[int, Counter[str]]:
    """Count the words of each epoch's lines; returns ``{epoch: Counter}``."""
    counts: dict[int, Counter[str]] = {}

    def on_epoch(epoch: int, pairs: list[tuple[str, int]]) -> None:
        counts[epoch] = Counter(dict(pairs))

    flow = Dataflow("linq_wordcount")
    lines = flow.new_input("lines")
    lines.stream.select_many(split).count_by(word).subscribe(on_epoch)
    with flow.activate(workers=workers, backend=backend, **options) as session:
        for e, batch in enumerate(epochs):
            lines.advance_to(e)
            lines.send(batch)
        lines.close()
        session.join()
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_flags(ap)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--lines", type=int, default=200, help="lines per epoch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    epochs = [lines_for(e, args.lines, args.seed) for e in range(args.epochs)]
    options = run_options(args)
    start = time.perf_counter()
    counts = wordcount(epochs, args.workers, args.backend, **options)
    elapsed = time.perf_counter() - start
    for e in range(args.epochs):
        got = counts.get(e, Counter())
        top = ", ".join(f"{w} {c}" for w, c in got.most_common(3))
        print(f"epoch {e:3d}: {sum(got.values()):6d} words; top: {top}")
        assert got == Counter(w for line in epochs[e] for w in line.split()), e
    print(
        f"{args.epochs} epochs on {args.workers} {args.backend} workers in {elapsed:.2f} s; "
        "every epoch's counts match collections.Counter"
    )


if __name__ == "__main__":
    main()
