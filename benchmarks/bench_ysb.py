"""Yahoo Streaming Benchmark: the highest input rate whose windows stay within 100 ms.

Events: as in ``examples/ysb.py`` (100 campaigns x 10 ads; event types view, click and
purchase; event time in ms), but drawn on the workers as numpy columns, one Arrow
``Table`` per chunk of event time, instead of Python tuples on the driver. Each of the
``workers`` partitions carries ``rate / workers`` events per second, evenly spaced in
event time, with ad, ad type and event type uniform, and integer ids (user, page, ad,
ad type, event type, event time, ip). Event time tracks the wall clock at the offered
rate: the driver ticks chunk ``[a, b)`` ms (``--chunk-ms``, 50 by default) once the wall
clock reaches ``t0 + b``, and a worker draws the chunk's events when the tick arrives;
the driver closes each second's epoch right after its last chunk.

Dataflow (2 Ray workers): project the three columns the query reads; ``where_columns``
keeps the views; a lookup vertex joins ``ad -> campaign`` through the ad table (a second
input, ``broadcast`` to every worker) and keeps ``(campaign, event_time)``;
``window(10)`` gathers each 10 s of epochs (epoch ``s + 1`` holds event second ``s``) at
its window's end; ``count_columns`` counts per ``(campaign, event_time // 10 s)``,
pre-combined on each worker and summed by the key's owner once the window's last epoch
is complete. The counts are checked against a numpy ``bincount`` of the same events,
drawn again on the driver after the run.

Latency of a window = the wall-clock time its last ``(campaign, window)`` count was
produced (stamped on the worker right after the count) - the window's end ``t0 + end``.
A rate is *sustained* when every measured window (the first, a warm-up, is not
measured) has latency <= 100 ms: with a handful of windows per rate, p99 is the max.
The rate is found by doubling from ``--start`` until a rate fails, then bisecting.

    python -m benchmarks.bench_ysb [--quick] [--window S] [--windows N] [--start RATE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import operators  # noqa: F401  (registers the operators on Stream)
from benchmarks.tables import markdown
from timely import Dataflow, Vertex, broadcast

RESULTS = Path(__file__).resolve().parent / "results"
CAMPAIGNS = 100
ADS_PER_CAMPAIGN = 10
VIEW, CLICK, PURCHASE = 0, 1, 2
AD_TYPES = 5
BOUND_S = 0.100
"""The latency bound a sustained rate must keep every measured window within."""
COLUMNS = ["user_id", "page_id", "ad_id", "ad_type", "event_type", "event_time", "ip"]


def ad_table(seed: int = 0) -> np.ndarray[Any, Any]:
    """``campaign_of[ad]``: the ads shuffled evenly over the campaigns."""
    ads = np.random.default_rng(seed).permutation(CAMPAIGNS * ADS_PER_CAMPAIGN)
    campaign_of = np.empty(len(ads), dtype=np.int32)
    campaign_of[ads] = np.arange(len(ads)) // ADS_PER_CAMPAIGN
    return campaign_of


def _uniform(bits: np.ndarray[Any, Any], shift: int, width: int, n: int) -> np.ndarray[Any, Any]:
    """Values in ``[0, n)`` from ``width`` random bits at ``shift`` (multiply-shift; its
    bias is below ``n / 2**width``)."""
    field = (bits >> np.uint64(shift)) & np.uint64((1 << width) - 1)
    return (field * np.uint64(n)) >> np.uint64(width)


class Generator:
    """Partition ``part``'s events: event ``i`` at ``floor(i / per_ms)`` ms, evenly spaced
    at the partition's rate, with one random 64-bit word from each of two PCG64 streams.

    Event ``i`` uses word ``i`` of each stream whatever the reads, so the reference can
    draw the same events again in other batches. Reading on from where the last read
    stopped continues the streams; another start jumps there with ``advance``.
    """

    def __init__(self, rate: float, parts: int, part: int, seed: int) -> None:
        self.per_ms = rate / parts / 1000
        self.seed = (seed, part)
        self.streams = self._streams(0)
        self.at = 0  # the next event the streams are positioned at

    def _streams(self, at: int) -> list[np.random.PCG64]:
        streams = [np.random.PCG64((*self.seed, s)) for s in (0, 1)]
        for s in streams:
            s.advance(at)
        return streams

    def first_event(self, t_ms: int) -> int:
        """The index of the first event at or after ``t_ms``."""
        return math.ceil(t_ms * self.per_ms)

    def events(self, start_ms: int, end_ms: int) -> pa.Table:
        """The events with times in ``[start_ms, end_ms)``."""
        i, j = self.first_event(start_ms), self.first_event(end_ms)
        if i != self.at:
            self.streams = self._streams(i)
        a, b = (s.random_raw(j - i) for s in self.streams)
        self.at = j
        times = np.floor(np.arange(i, j, dtype=np.float64) / self.per_ms).astype(np.int64)
        np.clip(times, start_ms, end_ms - 1, out=times)  # no float rounding across the range
        cols = [
            (a >> np.uint64(24)).view(np.int64),  # user: 40 bits
            (a & np.uint64(0xFFFFF)).view(np.int64),  # page: 20 bits
            _uniform(b, 0, 20, CAMPAIGNS * ADS_PER_CAMPAIGN).astype(np.int32),
            _uniform(b, 20, 12, AD_TYPES).astype(np.int8),
            _uniform(b, 32, 16, 3).astype(np.int8),  # view, click, purchase
            times,
            (b >> np.uint64(32)).astype(np.uint32).view(np.int32),  # ip (shares bits: payload)
        ]
        return pa.table(cols, names=COLUMNS)


def epoch_of(t_ms: int) -> int:
    """Epoch ``s + 1`` holds event second ``s``: window ends are then multiples of its size."""
    return t_ms // 1000 + 1


class GenerateEvents(Vertex):
    """Turns ticks ``(partition, start_ms, end_ms)`` into that partition's events then.

    The driver sends the ticks, paced by the wall clock, so a worker draws a chunk's
    events once the wall clock has passed the chunk's end, as a live source would.
    """

    def __init__(self, rate: float, parts: int, seed: int) -> None:
        self.rate, self.parts, self.seed = rate, parts, seed
        self.gens: dict[int, Generator] = {}

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        out = []
        for part, start_ms, end_ms in records:
            gen = self.gens.get(part)
            if gen is None:
                gen = self.gens[part] = Generator(self.rate, self.parts, part, self.seed)
            out.append(gen.events(start_ms, end_ms))
        self.send_by(0, out, time)


class CampaignLookup(Vertex):
    """Joins each chunk's ``ad_id`` to its campaign through the ad table (input 1).

    The table arrives as ``(ad, campaign)`` rows and is kept across epochs. Rows whose ad
    is not known yet wait for their epoch to complete (every row sent by then has
    arrived); still unknown, they are dropped. Sends ``(campaign, event_time)`` chunks.
    """

    def __init__(self) -> None:
        self.campaign_of = np.full(CAMPAIGNS * ADS_PER_CAMPAIGN, -1, dtype=np.int32)
        self.waiting: dict[tuple[int, ...], list[pa.Table]] = {}

    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        if input == 1:
            ads, campaigns = np.array(records, dtype=np.int64).T
            self.campaign_of[ads] = campaigns
            return
        self.send_by(0, self._join(records, time, hold=True), time)

    def _join(self, chunks: list[Any], time: tuple[int, ...], hold: bool) -> list[Any]:
        out = []
        for chunk in chunks:
            campaign = self.campaign_of[chunk.column("ad_id").to_numpy()]
            known = campaign >= 0
            if not known.all():
                if hold:
                    if time not in self.waiting:
                        self.waiting[time] = []
                        self.notify_at(time)
                    self.waiting[time].append(chunk.filter(pa.array(~known)))
                chunk, campaign = chunk.filter(pa.array(known)), campaign[known]
            if len(campaign):
                out.append(pa.table({"campaign": campaign, "event_time": chunk["event_time"]}))
        return out

    def on_notify(self, time: tuple[int, ...]) -> None:
        # Rows whose ad is still unknown once their epoch is complete are dropped.
        self.send_by(0, self._join(self.waiting.pop(time), time, hold=False), time)


def project(chunk: pa.Table) -> pa.Table:
    """The columns the query reads (zero-copy), as YSB's projection step."""
    return chunk.select(["ad_id", "event_type", "event_time"])


def is_view(chunk: pa.Table) -> Any:
    return pc.equal(chunk.column("event_type"), VIEW)


def stamp(pairs: list[Any]) -> list[Any]:
    """``(key, n, produced)``: the wall-clock time each count left ``count_columns``."""
    now = time.time()
    return [(k, n, now) for k, n in pairs]


def run_rate(
    rate: float,
    window_s: int,
    windows: int,
    chunk_ms: int,
    workers: int,
    backend: str,
    seed: int = 0,
    lead: float = 0.5,
) -> dict[str, Any]:
    """One run at ``rate`` events/s for ``windows`` windows (the first is the warm-up).

    Event time 0 is ``lead`` seconds after the workers are up. Chunk ``k`` (event time
    ``[k, k + 1) * chunk_ms``) is ticked, one tick per partition, once the wall clock
    reaches its end; the driver advances the epoch right after a second's last chunk.
    """
    if 1000 % chunk_ms:
        raise ValueError(f"chunk_ms must divide 1000, got {chunk_ms}")
    seconds = window_s * windows
    campaign_of = ad_table(seed)
    window_ms = window_s * 1000

    def keys(chunk: pa.Table) -> tuple[Any, Any]:
        return chunk.column("campaign"), chunk.column("event_time").to_numpy() // window_ms

    flow = Dataflow("ysb")
    table = flow.new_input("ad_table")
    ticks = flow.new_input("ticks")
    counts: dict[tuple[int, int], int] = {}
    produced: dict[int, float] = {}
    arrived: dict[int, float] = {}

    def on_counts(epoch: int, rows: list[Any]) -> None:
        now = time.time()
        for (campaign, window), n, at in rows:
            counts[(campaign, window)] = counts.get((campaign, window), 0) + n
            produced[window] = max(produced.get(window, 0.0), at)
            arrived[window] = now

    (
        ticks.stream.unary(lambda: GenerateEvents(rate, workers, seed), name="ad_events")
        .select(project, name="project")
        .where_columns(is_view, name="views")
        .binary(table.stream, CampaignLookup, name="campaign", channels=(None, broadcast()))
        .window(window_s, name="window")
        .count_columns(keys, name="count")
        .select_batch(stamp, name="stamp")
        .subscribe(on_counts)
    )
    lag = 0.0  # how late the driver sent a tick, at most
    with flow.activate(workers=workers, backend=backend) as session:
        table.send(list(enumerate(campaign_of.tolist())))
        table.close()
        t0 = time.time() + lead
        per_second = 1000 // chunk_ms
        epoch = 0
        for k in range(seconds * per_second):
            due = t0 + (k + 1) * chunk_ms / 1000
            while (left := due - time.time()) > 0:
                session.poll(timeout=min(left, 0.005))
                if (left := due - time.time()) < 0.002:
                    time.sleep(max(left, 0.0))
                    break
            lag = max(lag, time.time() - due)
            if epoch != epoch_of(k * chunk_ms):
                epoch = epoch_of(k * chunk_ms)
                ticks.advance_to(epoch)
            ticks.send([(p, k * chunk_ms, (k + 1) * chunk_ms) for p in range(workers)])
            if (k + 1) % per_second == 0:
                ticks.advance_to(epoch + 1)  # the second is complete: close its epoch now
                epoch += 1
        ticks.close()
        session.join()
    got = {w: produced[w] - (t0 + (w + 1) * window_s) for w in sorted(produced)}
    check(counts, rate, seconds, workers, seed, campaign_of, window_ms)
    measured = [got[w] for w in range(1, windows)]
    return {
        "rate": rate,
        "events": expected_events(rate, seconds, workers),
        "windows": windows,
        "latency_s": {str(w): got[w] for w in got},
        "driver_latency_s": {str(w): arrived[w] - (t0 + (w + 1) * window_s) for w in arrived},
        "measured_max_s": max(measured),
        "measured_p50_s": statistics.median(measured),
        "sustained": max(measured) <= BOUND_S and len(measured) == windows - 1,
        "tick_lag_max_s": lag,
    }


def expected_events(rate: float, seconds: int, parts: int) -> int:
    return sum(Generator(rate, parts, p, 0).first_event(seconds * 1000) for p in range(parts))


def check(
    counts: dict[tuple[int, int], int],
    rate: float,
    seconds: int,
    parts: int,
    seed: int,
    campaign_of: np.ndarray[Any, Any],
    window_ms: int,
) -> None:
    """The counts equal a numpy ``bincount`` of the same events (drawn again here)."""
    windows = -(-seconds * 1000 // window_ms)
    want = np.zeros(CAMPAIGNS * windows, dtype=np.int64)
    for p in range(parts):
        gen = Generator(rate, parts, p, seed)
        for tenth in range(seconds * 10):  # in slices, to keep memory small at high rates
            ev = gen.events(tenth * 100, (tenth + 1) * 100)
            view = ev.column("event_type").to_numpy() == VIEW
            camp = campaign_of[ev.column("ad_id").to_numpy()[view]].astype(np.int64)
            win = ev.column("event_time").to_numpy()[view] // window_ms
            want += np.bincount(win * CAMPAIGNS + camp, minlength=len(want))
    got = np.zeros_like(want)
    for (campaign, window), n in counts.items():
        got[window * CAMPAIGNS + campaign] += n
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)[:5]
        raise AssertionError(
            f"YSB counts differ from the reference at (window, campaign) "
            f"{[divmod(int(i), CAMPAIGNS) for i in bad]}: got {got[bad]}, want {want[bad]}"
        )


def search(
    start: float, probe: Any, max_probes: int, ratio: float = 1.15
) -> tuple[float | None, list[dict[str, Any]]]:
    """The highest sustained rate: double from ``start`` until one fails, then bisect
    (geometrically) until the bracket is within ``ratio``."""
    runs: list[dict[str, Any]] = []
    lo: float | None = None
    hi: float | None = None
    rate = start
    while len(runs) < max_probes:
        r = probe(rate)
        runs.append(r)
        print(
            f"  {rate:>12,.0f} ev/s: windows max {r['measured_max_s'] * 1000:7.1f} ms, "
            f"p50 {r['measured_p50_s'] * 1000:7.1f} ms -> "
            f"{'sustained' if r['sustained'] else 'not sustained'}",
            file=sys.stderr,
        )
        if r["sustained"]:
            lo = rate
        else:
            hi = rate
        if hi is None:
            rate = rate * 2
        elif lo is None:
            rate = rate / 2
        elif hi / lo <= ratio:
            break
        else:
            rate = math.sqrt(lo * hi)
        rate = round(rate, -4)
    return lo, runs


def write_svg(result: dict[str, Any], path: Path) -> None:
    """Latency of every measured window against the offered rate (hand-written SVG)."""
    runs = sorted(result["runs"], key=lambda r: r["rate"])
    left, top, width, height = 70, 50, 460, 240
    rates = [r["rate"] for r in runs]
    lats = [v * 1000 for r in runs for w, v in r["latency_s"].items() if int(w) > 0]
    x_max = max(rates) * 1.1
    y_max = max(max(lats, default=0) * 1.1, BOUND_S * 1000 * 1.5)
    ys = min(y_max, 1000.0)

    def x(v: float) -> float:
        return left + width * v / x_max

    def y(v: float) -> float:
        return top + height - height * min(v, ys) / ys

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 30}" '
        f'height="{top + height + 60}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14" font-weight="bold">YSB on {result["workers"]} Ray '
        f"workers: window latency vs offered rate ({result['window_s']} s windows)</text>",
        f'<text x="10" y="37" fill="#555">load average at start {result["load_average"][0]:.2f} '
        f"on a 2-core VM; dashed: the {BOUND_S * 1000:.0f} ms bound; capped at {ys:.0f} ms</text>",
        f'<line x1="{left}" y1="{top + height}" x2="{left + width}" y2="{top + height}" '
        'stroke="#333"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="#333"/>',
        f'<line x1="{left}" y1="{y(BOUND_S * 1000):.1f}" x2="{left + width}" '
        f'y2="{y(BOUND_S * 1000):.1f}" stroke="#c53030" stroke-dasharray="5,4"/>',
    ]
    for i in range(5):
        v = ys * i / 4
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    for r in runs:
        out.append(
            f'<text x="{x(r["rate"]):.1f}" y="{top + height + 16}" text-anchor="middle">'
            f"{r['rate'] / 1e6:.2f}M</text>"
        )
        colour = "#2b6cb0" if r["sustained"] else "#dd6b20"
        for w, v in r["latency_s"].items():
            if int(w) > 0:
                out.append(
                    f'<circle cx="{x(r["rate"]):.1f}" cy="{y(v * 1000):.1f}" r="4" '
                    f'fill="{colour}" fill-opacity="0.7"/>'
                )
    out.append(
        f'<text x="{left + width / 2}" y="{top + height + 36}" text-anchor="middle">offered '
        "rate (events/s); blue: sustained, orange: not; y: latency ms</text>"
    )
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="2 s windows, fewer probes")
    parser.add_argument("--window", type=int, default=None, help="window seconds (default 10)")
    parser.add_argument("--windows", type=int, default=4, help="per rate, the first a warm-up")
    parser.add_argument("--start", type=float, default=1_000_000, help="first rate, events/s")
    parser.add_argument("--probes", type=int, default=None)
    parser.add_argument("--chunk-ms", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="ray", choices=["ray", "inline"])
    parser.add_argument("--plot", action="store_true", help="only redraw results/ysb.svg")
    args = parser.parse_args(argv)
    name = "ysb.quick.json" if args.quick else "ysb.json"
    if args.plot:
        write_svg(json.loads((RESULTS / "ysb.json").read_text()), RESULTS / "ysb.svg")
        return
    window_s = args.window or (2 if args.quick else 10)
    probes = args.probes or (4 if args.quick else 7)
    load = os.getloadavg()
    started = time.perf_counter()

    def probe(rate: float) -> dict[str, Any]:
        return run_rate(rate, window_s, args.windows, args.chunk_ms, args.workers, args.backend)

    best, runs = search(args.start, probe, probes)
    total = time.perf_counter() - started
    load_end = os.getloadavg()

    table = [
        [
            f"{r['rate']:,.0f}",
            f"{r['measured_p50_s'] * 1000:.1f}",
            f"{r['measured_max_s'] * 1000:.1f}",
            " ".join(f"{v * 1000:.0f}" for w, v in r["latency_s"].items() if int(w) > 0),
            "yes" if r["sustained"] else "no",
        ]
        for r in sorted(runs, key=lambda r: r["rate"])
    ]
    print(
        f"## YSB, {args.workers} {args.backend} workers, {window_s} s windows, "
        f"{args.windows - 1} measured per rate\n"
    )
    print(
        markdown(
            ["offered events/s", "p50 ms", "max (= p99) ms", "each window ms", "<= 100 ms"], table
        )
    )
    print(
        f"\nhighest sustained rate: {'none' if best is None else f'{best:,.0f}'} events/s "
        f"(goal >= 1,000,000); load average {load[0]:.2f} at start, {load_end[0]:.2f} at end; "
        f"run took {total:.0f} s"
    )
    RESULTS.mkdir(exist_ok=True)
    result = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": load,
        "load_average_end": load_end,
        "workers": args.workers,
        "backend": args.backend,
        "window_s": window_s,
        "windows_per_rate": args.windows,
        "chunk_ms": args.chunk_ms,
        "bound_s": BOUND_S,
        "highest_sustained_rate": best,
        "run_s": total,
        "runs": runs,
    }
    (RESULTS / name).write_text(json.dumps(result, indent=2))
    if not args.quick:
        write_svg(result, RESULTS / "ysb.svg")


if __name__ == "__main__":
    main()
