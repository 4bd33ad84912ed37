"""examples/table_wordcount.py: per-epoch word counts of text files on the table API equal
the row version's (``linq_wordcount``) on the same epochs' lines, and ``Counter``'s of the
files; inline on 1 and 2 workers, once on Ray, and through its command line."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.examples import load_example

ex = load_example("table_wordcount")
rows = load_example("linq_wordcount")

VOCAB = ["a", "b", "c", "dd", "e-e", "ünï", "timely"]


def generated(directory: Path, seed: int, files: int = 3) -> list[str]:
    """Files of random lines: blank ones, runs of spaces and tabs, leading and trailing
    blanks, files with and without a final line end, and an empty file."""
    rng = random.Random(seed)
    paths = []
    for i in range(files):
        lines = [
            rng.choice(["", " ", "\t"]).join(rng.choices(VOCAB, k=rng.randint(0, 7)))
            + rng.choice(["", " ", "  \t"])
            for _ in range(rng.randint(50, 300))
        ]
        lines = [rng.choice(["", " "]) + line for line in lines]
        text = "\n".join(lines) + rng.choice(["", "\n"])
        path = directory / f"part-{i}.txt"
        path.write_text(text)
        paths.append(str(path))
    empty = directory / "empty.txt"
    empty.write_text("")
    return [*paths, str(empty)]


def words_of(paths: list[str]) -> Counter[str]:
    return Counter(w for p in paths for w in Path(p).read_text().split())


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_counts_equal_the_row_versions_per_epoch(tmp_path: Path, workers: int, seed: int) -> None:
    paths = generated(tmp_path, seed)
    got = ex.wordcount(
        paths, chunk_bytes=256, batches_per_epoch=2, workers=workers, backend="inline"
    )
    epochs = ex.epochs_of(ex.source(paths, 256, 2))
    assert len(epochs) > 3  # small chunks: several epochs
    want = rows.wordcount(epochs, workers=workers, backend="inline")
    assert got == want
    for e, lines in enumerate(epochs):
        assert got.get(e, Counter()) == Counter(w for line in lines for w in line.split()), e
    assert sum(got.values(), Counter()) == words_of(paths)


def test_one_epoch_when_every_chunk_is_in_it(tmp_path: Path) -> None:
    paths = generated(tmp_path, 7)
    got = ex.wordcount(paths, chunk_bytes=1 << 20, batches_per_epoch=1, workers=2, backend="inline")
    assert got == {0: words_of(paths)}


def test_on_ray(ray_local: Any, tmp_path: Path) -> None:
    paths = generated(tmp_path, 3)
    got = ex.wordcount(paths, chunk_bytes=512, batches_per_epoch=1, workers=2, backend="ray")
    epochs = ex.epochs_of(ex.source(paths, 512, 1))
    assert got == rows.wordcount(epochs, workers=1, backend="inline")
    assert sum(got.values(), Counter()) == words_of(paths)


def test_the_example_checks_itself(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--workers", "2", "--lines", "400", "--chunk-bytes", "4096"])
    out = capsys.readouterr().out
    assert "every epoch's counts match the row version" in out
    assert out.count("epoch ") >= 4


def test_the_example_reads_the_files_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = generated(tmp_path, 5, files=2)
    ex.main(["--backend", "inline", "--workers", "1", *paths])
    assert f"{words_of(paths).total()} words in 3 files" in capsys.readouterr().out


def test_a_split_on_single_spaces_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generated files have tabs and runs of blanks: splitting on one space (empty
    words, words glued by tabs) must not pass for ``str.split()``."""
    from operators.table import Table, col, count

    def on_spaces(lines: Table) -> Table:
        words = lines.select(word=col("line").str.split(" ")).explode("word")
        return words.group_by("word").agg(n=count())

    paths = generated(tmp_path, 0)
    monkeypatch.setattr(ex, "count_words", on_spaces)
    got = ex.wordcount(paths, chunk_bytes=256, batches_per_epoch=2, workers=1, backend="inline")
    assert sum(got.values(), Counter()) != words_of(paths)
