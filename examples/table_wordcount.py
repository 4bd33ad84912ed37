"""Word count over text files on the table API, beside its row version (``linq_wordcount.py``).

``TextTableSource`` reads each file a chunk of bytes at a time, as a batch of one
``line`` column (one Arrow kernel splits a chunk into lines); ``batches_per_epoch``
puts a partition's ``i``-th batch at epoch ``i // batches_per_epoch``. Then, one kernel
call per batch each: ``col("line").str.split()`` makes each line a list of its words
(split on runs of whitespace, as ``str.split()``), ``explode`` gives one row per word
and ``group_by("word").agg(n=count())`` counts them per epoch, partially on each batch
before the exchange and merged after. No Python runs per line or per word.

The example reads the files given, or writes a few of generated lines; it then gives
the same epochs' lines to the row version (``select_many(str.split)`` + ``count_by``)
and checks that every epoch's counts agree, and that all together they are the
files' words.

    python examples/table_wordcount.py --backend inline --workers 2
    python examples/table_wordcount.py --workers 2 /path/to/*.txt
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from _cli import add_run_flags, run_options

import operators  # noqa: F401 - registers the stream methods (as_table)
from connectors.files.table import LINE, TextTableSource
from operators.table import Table, col, count
from timely import Dataflow


def source(paths: Sequence[str], chunk_bytes: int, batches_per_epoch: int) -> TextTableSource:
    """The files' lines, ``chunk_bytes`` a batch, ``batches_per_epoch`` batches an epoch."""
    return TextTableSource(
        list(paths), chunk_bytes=chunk_bytes, batches_per_epoch=batches_per_epoch
    )


def count_words(lines: Table) -> Table:
    """``(word, n)`` per epoch: the words of the epoch's lines and how often each occurs."""
    words = lines.select(word=col("line").str.split()).explode("word")
    return words.group_by("word").agg(n=count())


def wordcount(
    paths: Sequence[str],
    chunk_bytes: int = 1 << 16,
    batches_per_epoch: int = 1,
    workers: int = 2,
    backend: str = "ray",
    **options: Any,
) -> dict[int, Counter[str]]:
    """Count the words of each epoch of the files; returns ``{epoch: Counter}``."""
    counts: dict[int, Counter[str]] = {}

    def on_epoch(epoch: int, table: pa.Table) -> None:
        pairs = zip(table.column("word").to_pylist(), table.column("n").to_pylist())
        counts[epoch] = Counter(dict(pairs))

    flow = Dataflow("table_wordcount")
    src = source(paths, chunk_bytes, batches_per_epoch)
    lines = flow.source(src, name="lines").as_table(LINE)
    count_words(lines).subscribe(on_epoch)
    flow.run(workers=workers, backend=backend, **options)
    return {e: c for e, c in counts.items() if c}  # an epoch without words has no counts


def epochs_of(src: TextTableSource) -> list[list[str]]:
    """Each epoch's lines as ``src`` cuts them (read here, on the driver, in Python):
    the input the row version is given, so both count the same epochs."""
    epochs: list[list[str]] = []
    for p in range(src.partitions()):
        offset = None
        while (got := src.read(p, offset)) is not None:
            epoch, batches, offset = got
            epochs.extend([] for _ in range(epoch + 1 - len(epochs)))
            for batch in batches:
                epochs[epoch].extend(batch.column(0).to_pylist())
    return epochs


def write_files(directory: Path, files: int, lines: int, seed: int = 0) -> list[str]:
    """``files`` text files of ``lines`` generated lines each (deterministic)."""
    import linq_wordcount  # the row version, beside this file: the same words

    paths = []
    for i in range(files):
        path = directory / f"part-{i}.txt"
        path.write_text("\n".join(linq_wordcount.lines_for(i, lines, seed)) + "\n")
        paths.append(str(path))
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_flags(ap)
    ap.add_argument("paths", nargs="*", help="text files (default: generated ones)")
    ap.add_argument("--files", type=int, default=2, help="generated files")
    ap.add_argument("--lines", type=int, default=5000, help="lines per generated file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-bytes", type=int, default=1 << 16, help="bytes per batch")
    ap.add_argument("--batches-per-epoch", type=int, default=1)
    args = ap.parse_args(argv)
    import linq_wordcount  # the row version, beside this file

    with tempfile.TemporaryDirectory(prefix="table-wordcount-") as tmp:
        paths = args.paths or write_files(Path(tmp), args.files, args.lines, args.seed)
        options = run_options(args)
        start = time.perf_counter()
        counts = wordcount(
            paths, args.chunk_bytes, args.batches_per_epoch, args.workers, args.backend, **options
        )
        table_s = time.perf_counter() - start
        epochs = epochs_of(source(paths, args.chunk_bytes, args.batches_per_epoch))
        start = time.perf_counter()
        rows = linq_wordcount.wordcount(epochs, args.workers, args.backend, **options)
        rows_s = time.perf_counter() - start
        everything: Counter[str] = Counter()
        for p in paths:
            everything.update(Path(p).read_text().split())
    for e in range(len(epochs)):
        got = counts.get(e, Counter())
        top = ", ".join(f"{w} {c}" for w, c in got.most_common(3))
        print(f"epoch {e:3d}: {got.total():6d} words; top: {top}")
        assert got == rows.get(e, Counter()), f"epoch {e} differs from the row version"
    assert sum(counts.values(), Counter()) == everything, "the epochs miss words of the files"
    starting = " with starting the Ray workers" if args.backend == "ray" else ""
    print(
        f"{len(epochs)} epochs, {everything.total()} words in {len(paths)} files on "
        f"{args.workers} {args.backend} workers (tables {table_s:.2f} s{starting}, rows "
        f"{rows_s:.2f} s); every epoch's counts match the row version"
    )


if __name__ == "__main__":
    main()
