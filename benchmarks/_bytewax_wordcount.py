"""The Bytewax side of ``bench_wordcount``: run in a separate venv that has ``bytewax``.

Not imported by the project. ``bench_wordcount`` runs it as a subprocess with the
scratch venv's Python, one process per Bytewax process:

    python benchmarks/_bytewax_wordcount.py DATA_DIR OUT_DIR WORKERS_PER_PROCESS \\
        [PROCESS_ID ADDRESSES]

The dataflow is Bytewax's documented word count: ``DirSource`` (one partition per
file, ``batch_size`` lines per batch) -> ``flat_map(str.split)`` -> ``count_final``.
Each worker writes its ``(word, count)`` pairs to ``OUT_DIR/counts-<process>-<worker>.json``
and the process its start and end times (``time.time()`` around ``cli_main``) and its
CPU seconds (``time.process_time()``, every thread) to
``OUT_DIR/time-<process>.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import bytewax.operators as op
from bytewax.connectors.files import DirSource
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.run import cli_main


class _JsonPart(StatelessSinkPartition[Any]):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[Any] = []

    def write_batch(self, items: list[Any]) -> None:
        self.items.extend(items)

    def close(self) -> None:
        self.path.write_text(json.dumps(self.items))


class JsonSink(DynamicSink[Any]):
    """Each worker's items, as one JSON list per worker when the run ends."""

    def __init__(self, out: Path, process: int) -> None:
        self.out = out
        self.process = process

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _JsonPart:
        return _JsonPart(self.out / f"counts-{self.process}-{worker_index}.json")


def build(data: Path, out: Path, process: int, batch_size: int = 5000) -> Dataflow:
    flow = Dataflow("wordcount")
    lines = op.input("lines", flow, DirSource(data, "part-*.txt", batch_size=batch_size))
    words = op.flat_map("split", lines, str.split)
    counts = op.count_final("count", words, lambda w: w)
    op.output("out", counts, JsonSink(out, process))
    return flow


def main() -> None:
    data, out, wpp = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    process = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    kwargs: dict[str, Any] = {"workers_per_process": wpp}
    if len(sys.argv) > 5:
        kwargs["process_id"] = process
        kwargs["addresses"] = sys.argv[5].split(";")
    flow = build(data, out, process)
    t0, c0 = time.time(), time.process_time()
    cli_main(flow, **kwargs)
    t1, c1 = time.time(), time.process_time()
    (out / f"time-{process}.json").write_text(json.dumps({"start": t0, "end": t1, "cpu": c1 - c0}))


if __name__ == "__main__":
    main()
