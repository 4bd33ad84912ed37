"""File connector benchmarks: source read rates and sink write rate, next to the stdlib.

Sources: records/s of reading every partition of a text, JSON lines and CSV file
(300k records, one worker's view, no dataflow), beside the plain-Python reader of the
same file in the same run: ``for line in f``, ``json.loads`` per line,
``csv.DictReader``. Also the text source through a dataflow on the inline backend
(1 worker, source -> collect count per epoch). Sink: ``JsonLinesSink.write`` of 10
epochs beside ``json.dumps`` per line into one file.

    python -m benchmarks.bench_files [--records N]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.tables import markdown
from connectors.files import CsvSource, JsonLinesSink, JsonLinesSource, TextSource
from timely import Dataflow, Source

RESULTS = Path(__file__).resolve().parent / "results"


def drain(src: Source) -> int:
    n = 0
    for p in range(src.partitions()):
        offset = None
        while (got := src.read(p, offset)) is not None:
            n += len(got[1])
            offset = got[2]
    return n


def through_dataflow(path: str) -> int:
    flow = Dataflow("bench-files")
    flow.source(TextSource(path, records_per_epoch=50_000)).count_by(lambda _: 0).collect("n")
    return sum(n for _, (_, n) in flow.run(workers=1, backend="inline")["n"])


def rate(fn: Callable[[], int], repeat: int = 3) -> tuple[float, int]:
    """Best records/s over ``repeat`` runs, and the record count."""
    best, n = 0.0, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn()
        best = max(best, n / (time.perf_counter() - t0))
    return best, n


def write_inputs(d: str, n: int) -> dict[str, str]:
    paths = {k: os.path.join(d, f"in.{k}") for k in ("txt", "jsonl", "csv")}
    with open(paths["txt"], "w") as f:
        f.writelines(f"line {i} with a few words in it\n" for i in range(n))
    with open(paths["jsonl"], "w") as f:
        f.writelines(json.dumps({"id": i, "u": f"u{i % 97}", "v": i / 2}) + "\n" for i in range(n))
    with open(paths["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "user", "v"])
        w.writerows([i, f"u{i % 97}", i / 2] for i in range(n))
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        p = write_inputs(d, args.records)

        def lines() -> int:
            with open(p["txt"]) as f:
                return sum(1 for _ in f)

        def jsons() -> int:
            with open(p["jsonl"]) as f:
                return len([json.loads(line) for line in f])

        def dicts() -> int:
            with open(p["csv"], newline="") as f:
                return len(list(csv.DictReader(f)))

        with open(p["jsonl"]) as f:
            records = [json.loads(line) for line in f]

        def sink() -> int:
            s = JsonLinesSink(os.path.join(d, "out"))
            k = len(records) // 10
            for e in range(10):
                s.write(0, 1, e, records[e * k : (e + 1) * k])
            return 10 * k

        def plain_write() -> int:
            with open(os.path.join(d, "plain.jsonl"), "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
            return len(records)

        cases: list[tuple[str, Callable[[], int], str, Callable[[], int]]] = [
            ("TextSource", lambda: drain(TextSource(p["txt"])), "for line in f", lines),
            (
                "JsonLinesSource",
                lambda: drain(JsonLinesSource(p["jsonl"])),
                "json.loads per line",
                jsons,
            ),
            ("CsvSource (dict rows)", lambda: drain(CsvSource(p["csv"])), "csv.DictReader", dicts),
            (
                "TextSource in a dataflow (inline, 1 worker)",
                lambda: through_dataflow(p["txt"]),
                "for line in f",
                lines,
            ),
            ("JsonLinesSink.write, 10 epochs", sink, "json.dumps per line", plain_write),
        ]
        for what, ours, peer, theirs in cases:
            r_ours, n1 = rate(ours)
            r_peer, n2 = rate(theirs)
            assert n1 == n2 == args.records, (what, n1, n2)
            rows.append({"what": what, "records_per_s": r_ours, "peer": peer, "peer_per_s": r_peer})
    print(
        markdown(
            ["what", "records/s", "stdlib peer", "peer records/s", "ratio"],
            [
                [
                    r["what"],
                    f"{r['records_per_s']:,.0f}",
                    r["peer"],
                    f"{r['peer_per_s']:,.0f}",
                    f"{r['records_per_s'] / r['peer_per_s']:.2f}",
                ]
                for r in rows
            ],
        )
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_files.json").write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "load_average": os.getloadavg(),
                "records": args.records,
                "rows": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
