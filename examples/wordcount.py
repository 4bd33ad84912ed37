"""Word count over epochs of text, on the vertex API (the LINQ-style operators come next).

Each epoch is a batch of lines. Words are split where the lines are, exchanged so that
each word's counts meet on one worker, counted per epoch, and printed as each epoch
completes. The counts are checked against a plain ``collections.Counter`` pass.

    python examples/wordcount.py --workers 2 --backend ray --epochs 20
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from typing import Any

from _cli import add_run_flags, run_options

from timely import Dataflow, Vertex, exchange

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "timely",
    "frontiers",
    "advance",
]


class Split(Vertex):
    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        self.send_by(0, [w for line in records for w in line.split()], t)


class CountWords(Vertex):
    """Counts each epoch's words; emits ``(word, count)`` pairs when the epoch is complete."""

    def __init__(self) -> None:
        self.counts: dict[tuple[int, ...], Counter[str]] = {}

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        counts = self.counts.get(t)
        if counts is None:
            self.counts[t] = counts = Counter()
            self.notify_at(t)
        counts.update(records)

    def on_notify(self, t: tuple[int, ...]) -> None:
        self.send_by(0, sorted(self.counts.pop(t).items()), t)


def lines_for(epoch: int, n: int) -> list[str]:
    rng = random.Random(epoch)
    return [" ".join(rng.choices(WORDS, k=8)) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_flags(ap)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--lines", type=int, default=200, help="lines per epoch")
    args = ap.parse_args()

    totals: dict[int, Counter[str]] = {}

    def report(epoch: int, pairs: list[tuple[str, int]]) -> None:
        totals[epoch] = Counter(dict(pairs))
        top = ", ".join(f"{w} {c}" for w, c in sorted(pairs, key=lambda p: -p[1])[:3])
        print(f"epoch {epoch:3d}: {sum(c for _, c in pairs):6d} words; top: {top}")

    flow = Dataflow("wordcount")
    lines = flow.new_input("lines")
    (
        lines.stream.unary(Split, name="split")
        .unary(CountWords, name="count", channel=exchange(lambda w: w))
        .subscribe(report)
    )
    start = time.perf_counter()
    options = run_options(args)
    with flow.activate(workers=args.workers, backend=args.backend, **options) as session:
        for e in range(args.epochs):
            lines.advance_to(e)
            lines.send(lines_for(e, args.lines))
        lines.close()
        session.join()
    elapsed = time.perf_counter() - start
    for e in range(args.epochs):
        assert totals.get(e) == Counter(
            w for line in lines_for(e, args.lines) for w in line.split()
        ), e
    words = args.epochs * args.lines * 8
    print(
        f"{args.epochs} epochs, {words} words on {args.workers} {args.backend} workers "
        f"in {elapsed:.2f} s; every epoch's counts match collections.Counter"
    )


if __name__ == "__main__":
    main()
