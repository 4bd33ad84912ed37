"""examples/linq_wordcount.py: per-epoch word counts equal collections.Counter."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.examples import load_example

ex = load_example("linq_wordcount")


@pytest.mark.parametrize("workers", [1, 3])
def test_counts_match_counter(workers: int) -> None:
    rng = random.Random(workers)
    vocab = ["a", "b", "c", "dd", "e-e", "ünï"]
    epochs = [
        [" ".join(rng.choices(vocab, k=rng.randint(0, 6))) for _ in range(rng.randint(0, 20))]
        for _ in range(6)
    ]
    epochs[2] = []  # an empty epoch gives no counts
    got = ex.wordcount(epochs, workers=workers, backend="inline")
    for e, lines in enumerate(epochs):
        want = Counter(w for line in lines for w in line.split())
        assert got.get(e, Counter()) == want, e
    assert 2 not in got


def test_cli_inline(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--workers", "2", "--epochs", "3", "--lines", "20"])
    out = capsys.readouterr().out
    assert "every epoch's counts match collections.Counter" in out
    assert out.count("epoch ") == 3
