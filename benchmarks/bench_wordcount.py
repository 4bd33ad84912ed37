"""Word count next to its peers, in one run: Counter, timely inline and on Ray, Bytewax 0.21.

Input: 2,000,000 words drawn uniformly (seeded) from 10,000 distinct words, as lines of
10 words in two files of 100,000 lines (one partition each). Every system reads the
same files. timely reads them with a ``Source``: each file is one partition, read in
batches of 5,000 lines, batch ``i`` of each file at epoch ``i``, so 20 epochs of
100,000 words. The dataflow is ``select_many(str.split).count_by(word)`` (per-epoch
counts; the driver adds up the 20 epochs' pairs, inside the timing). Bytewax runs its
documented word count (``DirSource`` with ``batch_size=5000`` -> ``flat_map`` ->
``count_final``) in its own venv and process, with ``-w 1``, ``-w 2`` (two worker
threads in one process) and two processes of one worker each (``-i/-a``).

A columnar variant runs next to the record-at-a-time one, on the same source:
``select_batch(words_chunk)`` turns each batch of lines into one Arrow array of its words
(``pyarrow.compute`` split), and ``count_columns(columnar=True)`` counts them per epoch
without a Python object per word (Arrow pre-combine, partial counts as Arrow tables,
summed per epoch); the driver adds up the epochs' tables with one Arrow ``group_by``.

Every system's totals are asserted equal to ``collections.Counter``'s.

Goals: timely inline (1 worker) >= 0.5x the Counter pass and >= 8x Bytewax ``-w 1``;
timely on Ray (2 workers) >= 8x Bytewax ``-w 2``.

    python -m benchmarks.bench_wordcount [--quick] [--skip-ray] [--bytewax-python PATH]
        [--profile]

``--bytewax-python`` is a Python with ``bytewax==0.21.*`` installed: by default this
one if it has bytewax (``pip install -e '.[bench]'``), else ``/tmp/bwvenv/bin/python``
(a scratch venv: ``python3 -m venv /tmp/bwvenv && /tmp/bwvenv/bin/pip install
'bytewax==0.21.*'``). Bytewax always runs in its own processes.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import operators  # noqa: F401  (registers select_many, count_by on Stream)
from benchmarks.tables import RESULTS, markdown, write_results
from operators import StatefulVertex
from timely import Dataflow, Source, Vertex, exchange

HERE = Path(__file__).resolve().parent
FILES = 2
WORDS_PER_LINE = 10
LINES_PER_BATCH = 5000


def vocabulary(n: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choices(letters, k=rng.randint(3, 10))))
    return sorted(words)


def generate(data: Path, words: int, distinct: int, seed: int = 2026) -> None:
    """``FILES`` files of lines of ``WORDS_PER_LINE`` words; deterministic for a seed."""
    rng = random.Random(seed)
    vocab = vocabulary(distinct, rng)
    per_file = words // FILES
    for f in range(FILES):
        drawn = rng.choices(vocab, k=per_file)
        lines = (
            " ".join(drawn[i : i + WORDS_PER_LINE]) for i in range(0, per_file, WORDS_PER_LINE)
        )
        (data / f"part-{f}.txt").write_text("\n".join(lines) + "\n")


def paths(data: Path) -> list[Path]:
    return sorted(data.glob("part-*.txt"))


# -- (a) plain Python ------------------------------------------------------------------
def counter_pass(data: Path) -> Counter[str]:
    """The fastest plain pass: one ``Counter.update`` (C ``_count_elements``) per file."""
    counts: Counter[str] = Counter()
    for p in paths(data):
        counts.update(p.read_text().split())
    return counts


def counter_per_line(data: Path) -> Counter[str]:
    """The textbook loop: ``Counter.update`` once per line (Python overhead per line)."""
    counts: Counter[str] = Counter()
    for p in paths(data):
        with open(p) as f:
            for line in f:
                counts.update(line.split())
    return counts


# -- (b, c) timely ---------------------------------------------------------------------
class LineFiles(Source):
    """One partition per file; batch ``i`` (``per_batch`` lines) is at epoch ``i``."""

    def __init__(self, files: list[Path], per_batch: int, limit: int | None = None) -> None:
        self.files = [str(p) for p in files]
        self.per_batch = per_batch
        self.limit = limit  # batches per partition (0: an empty run, for start-up cost)
        self._lines: dict[int, list[str]] = {}

    def partitions(self) -> int:
        return len(self.files)

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        i = 0 if offset is None else offset
        if self.limit is not None and i >= self.limit:
            return None
        lines = self._lines.get(partition)
        if lines is None:
            with open(self.files[partition]) as f:
                lines = self._lines[partition] = f.read().splitlines()
        batch = lines[i * self.per_batch : (i + 1) * self.per_batch]
        if not batch:
            del self._lines[partition]
            return None
        return i, batch, i + 1


def _word(w: str) -> str:
    return w


def _first(pair: tuple[str, int]) -> str:
    return pair[0]


class CountWords(Vertex):
    """Not a library operator: ``count_by`` with its pre-combine done by ``Counter``.

    Each batch is counted with ``Counter(records)`` (C code) on the worker that read it,
    then the partial counts are exchanged and merged per epoch, like ``count_by``. It
    shows what a specialised ``count_by`` fast path would buy.
    """

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        self.send_by(0, list(Counter(records).items()), t)


class MergeCounts(StatefulVertex):
    def __init__(self) -> None:
        super().__init__()
        self.acc = self.keyed_state("acc")

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        acc = self.acc.get(t)
        if acc is None:
            acc = self.acc.table(t)
            self.notify_at(t)
        get = acc.get
        for k, v in records:
            acc[k] = get(k, 0) + v

    def on_notify(self, t: tuple[int, ...]) -> None:
        self.send_by(0, list(self.acc.pop(t).items()), t)


def words_chunk(lines: list[str]) -> list[pa.Array]:
    """A batch of lines as one Arrow array of its words (one record: a column chunk).

    ``str.split()`` semantics: the ASCII kernel when the batch is ASCII (faster), else the
    UTF-8 one, which splits on Unicode whitespace too.
    """
    text = pa.array(lines, pa.string())
    if pc.all(pc.string_is_ascii(text)).as_py() is not False:
        return [pc.list_flatten(pc.ascii_split_whitespace(text))]
    return [pc.list_flatten(pc.utf8_split_whitespace(text))]


def timely_wordcount_columnar(
    data: Path, workers: int, backend: str, limit: int | None = None
) -> Counter[str]:
    """``select_batch(words_chunk).count_columns(columnar=True)``: no Python object per word.

    Each epoch's counts arrive as Arrow tables (one per worker); the driver adds them up
    with one Arrow ``group_by``, inside the timing like the other variants' totals.
    """
    flow = Dataflow("wordcount-columnar")
    source = flow.source(LineFiles(paths(data), LINES_PER_BATCH, limit))
    source.select_batch(words_chunk).count_columns(columnar=True).collect("counts")
    result = flow.run(workers=workers, backend=backend)
    tables = [t for _, t in result["counts"]]
    totals: Counter[str] = Counter()
    if tables:
        summed = pa.concat_tables(tables).group_by("key").aggregate([("count", "sum")])
        totals.update(dict(zip(summed["key"].to_pylist(), summed["count_sum"].to_pylist())))
    return totals


def timely_wordcount(
    data: Path, workers: int, backend: str, limit: int | None = None, fast: bool = False
) -> Counter[str]:
    flow = Dataflow("wordcount")
    words = flow.source(LineFiles(paths(data), LINES_PER_BATCH, limit)).select_many(str.split)
    if fast:
        counts = words.unary(CountWords, name="precount").unary(
            MergeCounts, name="count", channel=exchange(_first)
        )
    else:
        counts = words.count_by(_word)
    counts.collect("counts")
    result = flow.run(workers=workers, backend=backend)
    totals: Counter[str] = Counter()
    for _, (w, c) in result["counts"]:
        totals[w] += c
    return totals


# -- (d) Bytewax -----------------------------------------------------------------------
def bytewax_wordcount(
    python: str, data: Path, workers_per_process: int, processes: int = 1
) -> tuple[float, float, Counter[str]]:
    """Seconds inside ``cli_main`` (first start to last end), its CPU seconds (all the
    processes) and the merged counts."""
    out = Path(tempfile.mkdtemp(prefix="bw-out-"))
    try:
        script = str(HERE / "_bytewax_wordcount.py")
        base = [python, script, str(data), str(out), str(workers_per_process)]
        if processes == 1:
            cmds = [base]
        else:
            addresses = ";".join(f"localhost:{2201 + i}" for i in range(processes))
            cmds = [[*base, str(i), addresses] for i in range(processes)]
        procs = [subprocess.Popen(c) for c in cmds]
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError(f"bytewax run {p.args!r} exited with {p.returncode}")
        times = [json.loads(t.read_text()) for t in out.glob("time-*.json")]
        seconds = max(t["end"] for t in times) - min(t["start"] for t in times)
        cpu = sum(t["cpu"] for t in times)
        counts: Counter[str] = Counter()
        for part in out.glob("counts-*.json"):
            for w, c in json.loads(part.read_text()):
                assert w not in counts, "a word was counted on two workers"
                counts[w] = c
        return seconds, cpu, counts
    finally:
        shutil.rmtree(out, ignore_errors=True)


# -- measuring -------------------------------------------------------------------------
def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds (this process) of ``repeat`` calls; the last result."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus), result


def profile_inline(data: Path, top: int = 25) -> str:
    prof = cProfile.Profile()
    prof.enable()
    timely_wordcount(data, 1, "inline")
    prof.disable()
    lines: list[str] = []
    for key in ("tottime", "cumulative"):
        buf = _Capture()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)  # type: ignore[arg-type]
        lines.append(buf.text())
    return "\n".join(lines)


class _Capture:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, s: str) -> int:
        self.parts.append(s)
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)


def write_svg(result: dict[str, Any], path: Path) -> None:
    """A horizontal bar chart of the wall times (hand-written SVG, no plotting library)."""
    rows = result["rows"]
    bar_h, gap, left, width = 22, 8, 250, 420
    top = 46
    longest = max(r["wall_s"] for r in rows)
    height = top + len(rows) * (bar_h + gap) + 40
    colour = {"timely": "#2b6cb0", "bytewax": "#dd6b20"}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" '
        f'height="{height}" font-family="sans-serif" font-size="13">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="15" font-weight="bold">Word count, '
        f"{result['words']:,} words ({result['distinct']:,} distinct): wall seconds "
        f"(lower is better)</text>",
        f'<text x="10" y="37" fill="#555">median of {result["repeat"]}; load average at '
        f"start {result['load_average'][0]:.2f} on a 2-core VM; Python "
        f"{result['python']}</text>",
    ]
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        w = max(1.0, width * r["wall_s"] / longest)
        fill = next((c for k, c in colour.items() if r["system"].startswith(k)), "#718096")
        label = r["system"]
        if r["system"].startswith(("timely", "bytewax")):
            label += f" ({r['workers']} worker{'s' if r['workers'] > 1 else ''})"
        out.append(
            f'<text x="{left - 8}" y="{y + bar_h * 0.7:.0f}" text-anchor="end">{label}</text>'
        )
        out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{fill}"/>')
        out.append(
            f'<text x="{left + w + 6:.1f}" y="{y + bar_h * 0.7:.0f}">{r["wall_s"]:.2f} s</text>'
        )
    axis_y = top + len(rows) * (bar_h + gap)
    out.append(f'<line x1="{left}" y1="{top - 4}" x2="{left}" y2="{axis_y}" stroke="#333"/>')
    out.append(
        f'<text x="{left}" y="{axis_y + 18}" fill="#555">timely in blue, Bytewax 0.21 in '
        "orange, plain Python in grey</text>"
    )
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def _bytewax_python() -> str:
    """This interpreter if it has bytewax (the ``bench`` extra), else the scratch venv's."""
    import importlib.util

    return sys.executable if importlib.util.find_spec("bytewax") else "/tmp/bwvenv/bin/python"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="200k words, one repetition")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--bytewax-python", default=_bytewax_python())
    parser.add_argument("--profile", action="store_true", help="cProfile the inline run")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument(
        "--plot", action="store_true", help="only redraw results/wordcount.svg from the JSON"
    )
    args = parser.parse_args(argv)
    if args.plot:
        write_svg(
            json.loads((RESULTS / "bench_wordcount.json").read_text()), RESULTS / "wordcount.svg"
        )
        return
    words = 200_000 if args.quick else 2_000_000
    repeat = args.repeat or (1 if args.quick else 3)
    load = os.getloadavg()
    started = time.perf_counter()

    data = Path(tempfile.mkdtemp(prefix="wordcount-data-"))
    rows: list[dict[str, Any]] = []
    try:
        generate(data, words, 10_000)
        _, _, expected = timed(lambda: counter_pass(data), 1)  # warm the page cache
        assert sum(expected.values()) == words and len(expected) == 10_000

        def row(system: str, workers: int, wall: float, cpu: float | None, **kw: Any) -> None:
            rows.append({"system": system, "workers": workers, "wall_s": wall, "cpu_s": cpu, **kw})
            print(f"  {system} x{workers}: {wall:.3f} s", file=sys.stderr)

        wall, cpu, got = timed(lambda: counter_pass(data), repeat)
        assert got == expected
        row("collections.Counter", 1, wall, cpu)
        wall, cpu, got = timed(lambda: counter_per_line(data), repeat)
        assert got == expected
        row("Counter, update per line", 1, wall, cpu)

        wall, cpu, got = timed(lambda: timely_wordcount(data, 1, "inline"), repeat)
        assert got == expected, "timely inline counts differ from Counter"
        row("timely inline", 1, wall, cpu)
        wall, cpu, got = timed(lambda: timely_wordcount(data, 1, "inline", fast=True), repeat)
        assert got == expected, "timely inline (Counter vertex) counts differ from Counter"
        row("timely inline, Counter vertex", 1, wall, cpu)
        wall, cpu, got = timed(lambda: timely_wordcount_columnar(data, 1, "inline"), repeat)
        assert got == expected, "timely inline (columnar) counts differ from Counter"
        row("timely inline, columnar", 1, wall, cpu)
        # two workers in one process: no parallelism, but the exchange routes by key
        wall, cpu, got = timed(lambda: timely_wordcount(data, 2, "inline"), repeat)
        assert got == expected, "timely inline x2 counts differ from Counter"
        row("timely inline", 2, wall, cpu)
        wall, cpu, got = timed(lambda: timely_wordcount_columnar(data, 2, "inline"), repeat)
        assert got == expected, "timely inline x2 (columnar) counts differ from Counter"
        row("timely inline, columnar", 2, wall, cpu)

        if not args.skip_ray:
            timely_wordcount(data, 2, "ray", limit=0)  # starts local Ray
            startup, _, _ = timed(lambda: timely_wordcount(data, 2, "ray", limit=0), 2)
            wall, cpu, got = timed(lambda: timely_wordcount(data, 2, "ray"), repeat)
            assert got == expected, "timely Ray counts differ from Counter"
            row("timely ray", 2, wall, None, empty_run_s=startup, driver_cpu_s=cpu)
            wall, cpu, got = timed(lambda: timely_wordcount(data, 2, "ray", fast=True), repeat)
            assert got == expected, "timely Ray (Counter vertex) counts differ from Counter"
            row("timely ray, Counter vertex", 2, wall, None, empty_run_s=startup)
            wall, cpu, got = timed(lambda: timely_wordcount_columnar(data, 2, "ray"), repeat)
            assert got == expected, "timely Ray (columnar) counts differ from Counter"
            row("timely ray, columnar", 2, wall, None, empty_run_s=startup)

        if args.bytewax_python and Path(args.bytewax_python).exists():
            for label, wpp, procs in (
                ("bytewax -w 1", 1, 1),
                ("bytewax -w 2", 2, 1),
                ("bytewax 2 processes", 1, 2),
            ):
                secs, cpus = [], []
                for _ in range(repeat):
                    s, c, got = bytewax_wordcount(args.bytewax_python, data, wpp, procs)
                    assert got == expected, f"{label} counts differ from Counter"
                    secs.append(s)
                    cpus.append(c)
                row(label, wpp * procs, statistics.median(secs), statistics.median(cpus))
        else:
            print(f"no Bytewax python at {args.bytewax_python}; skipping", file=sys.stderr)

        profile = profile_inline(data) if args.profile else None
    finally:
        shutil.rmtree(data, ignore_errors=True)
    total = time.perf_counter() - started

    by = {
        r["system"]: r
        for r in rows
        if not (r["system"].startswith("timely inline") and r["workers"] > 1)
    }
    table = [
        [
            r["system"],
            r["workers"],
            f"{r['wall_s']:.3f}",
            "" if r["cpu_s"] is None else f"{r['cpu_s']:.3f}",
            f"{words / r['wall_s'] / 1e6:.2f}",
        ]
        for r in rows
    ]
    print(f"## Word count, {words:,} words (10,000 distinct), median of {repeat}\n")
    print(markdown(["system", "workers", "wall s", "CPU s (driver)", "M words/s"], table))
    if "timely ray" in by:
        r = by["timely ray"]
        print(
            f"\ntimely ray: empty run (actor start-up, shutdown) {r['empty_run_s']:.3f} s; "
            f"wall minus empty run {r['wall_s'] - r['empty_run_s']:.3f} s"
        )

    ratios: list[list[str]] = []

    def ratio(what: str, ours: str, theirs: str, goal: float) -> None:
        if ours in by and theirs in by:
            x = by[theirs]["wall_s"] / by[ours]["wall_s"]
            a, b = by[ours]["cpu_s"], by[theirs]["cpu_s"]
            cpu = f"{b / a:.2f}x" if a and b else ""
            ratios.append([what, f"{x:.2f}x", cpu, f">= {goal}x", "met" if x >= goal else "missed"])

    ratio("timely inline vs Counter (speed)", "timely inline", "collections.Counter", 0.5)
    ratio("timely inline vs Bytewax -w 1", "timely inline", "bytewax -w 1", 8)
    ratio("timely ray x2 vs Bytewax -w 2", "timely ray", "bytewax -w 2", 8)
    ratio("timely ray x2 vs Bytewax 2 processes", "timely ray", "bytewax 2 processes", 8)
    fast = "timely inline, Counter vertex"
    ratio("(Counter vertex) inline vs Counter", fast, "collections.Counter", 0.5)
    ratio("(Counter vertex) inline vs Bytewax -w 1", fast, "bytewax -w 1", 8)
    ratio(
        "(Counter vertex) ray x2 vs Bytewax -w 2", "timely ray, Counter vertex", "bytewax -w 2", 8
    )
    col = "timely inline, columnar"
    ratio("(columnar) inline vs Counter", col, "collections.Counter", 0.5)
    ratio("(columnar) inline vs Bytewax -w 1", col, "bytewax -w 1", 8)
    ratio("(columnar) ray x2 vs Bytewax -w 2", "timely ray, columnar", "bytewax -w 2", 8)
    if "timely ray, columnar" in by and "bytewax -w 2" in by:
        r = by["timely ray, columnar"]
        net = r["wall_s"] - r["empty_run_s"]
        x = by["bytewax -w 2"]["wall_s"] / net if net > 0 else None
        ratios.append(
            [
                "(columnar) ray x2 minus its empty run vs Bytewax -w 2",
                "n/a (empty run slower)" if x is None else f"{x:.2f}x",
                "",
                ">= 8x",
                "met" if x is not None and x >= 8 else "missed",
            ]
        )
    print()
    print(
        markdown(
            ["ratio (their time / ours)", "wall", "CPU (single process)", "goal", "(wall)"], ratios
        )
    )
    print(
        f"\nload average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"run took {total:.0f} s"
    )
    if profile:
        print("\n## cProfile, timely inline\n")
        print(profile)

    path = write_results(
        "bench_wordcount",
        args.quick,
        {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": load,
            "words": words,
            "distinct": 10_000,
            "repeat": repeat,
            "run_s": total,
            "rows": rows,
            "ratios": ratios,
        },
    )
    if not args.quick:
        write_svg(json.loads(path.read_text()), RESULTS / "wordcount.svg")


if __name__ == "__main__":
    main()
