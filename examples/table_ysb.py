"""The Yahoo Streaming Benchmark on the table API, beside ``examples/ysb.py``.

The same generated ad events (one event-time second per epoch) and ad -> campaign table
(sent once, at epoch 0), as Arrow batches; the dataflow is three table steps:

- ``where(event_type == "view")``;
- ``join_streaming`` with the ad table: each view meets the table rows sent at earlier
  epochs (both kept as Arrow in the run's state, by the bins of the ad);
- ``group_by("campaign", "window").running_agg(views=count())``: per epoch, each
  ``(campaign, 10 s window)`` it touched with its count so far. A window's count is
  final once its last epoch is out (epochs are event-time seconds).

The counts are checked against ``examples/ysb.py``'s plain-Python count; latency per
window is measured the same way (its final count at the driver minus the time the driver
advanced the input past the window).

    python examples/table_ysb.py --workers 2 --backend ray --seconds 60
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import ysb
from _cli import add_run_flags, run_options

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, table_input
from timely import Dataflow

EVENTS = pa.schema(
    [
        ("user_id", pa.string()),
        ("page_id", pa.string()),
        ("ad_id", pa.string()),
        ("ad_type", pa.string()),
        ("event_type", pa.string()),
        ("event_time", pa.int64()),
        ("ip_address", pa.string()),
    ]
)
ADS = pa.schema([("ad_id", pa.string()), ("campaign", pa.string())])


def batch_of(events: list[ysb.Event]) -> pa.RecordBatch:
    """Generated events as one batch (the generator makes tuples; a real source would
    read batches)."""
    columns = list(zip(*events)) if events else [[] for _ in EVENTS]
    return pa.record_batch([pa.array(c, f.type) for c, f in zip(columns, EVENTS)], schema=EVENTS)


def run(
    seconds: int,
    events_per_second: int,
    table_rows: list[tuple[str, str]],
    window_seconds: int = 10,
    seed: int = 0,
    ads: Sequence[str] | None = None,
    workers: int = 2,
    backend: str = "ray",
    **options: Any,
) -> tuple[dict[tuple[str, int], int], dict[int, float]]:
    """Run YSB on tables; ``{(campaign, window): views}`` and ``{window: latency}``."""
    counts: dict[tuple[str, int], int] = {}
    window_end: dict[int, float] = {}
    latency: dict[int, float] = {}

    def on_epoch(epoch: int, table: pa.Table) -> None:
        now = time.perf_counter()
        for c, w, n in zip(*(table.column(x).to_pylist() for x in ("campaign", "window", "views"))):
            counts[(c, w)] = n
        if (epoch + 1) % window_seconds == 0 or epoch == seconds - 1:
            window = epoch // window_seconds
            latency[window] = now - window_end[window]

    flow = Dataflow("table-ysb")
    events = table_input(flow, EVENTS, name="events")
    ad_rows = table_input(flow, ADS, name="ad_table")
    (
        events.table.where(col("event_type") == "view")
        .join_streaming(ad_rows.table, on="ad_id")
        .with_columns(window=col("event_time") // (window_seconds * 1000))
        .group_by("campaign", "window")
        .running_agg(views=count())
        .subscribe(on_epoch)
    )
    ads = [ad for ad, _ in table_rows] if ads is None else ads
    with flow.activate(workers=workers, backend=backend, **options) as session:
        ad_rows.send(table_rows)
        ad_rows.close()
        ysb.feed(
            session,
            events,
            seconds,
            window_seconds,
            window_end,
            lambda s: batch_of(ysb.events_for(s, events_per_second, ads, seed)),
        )
    return counts, latency


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_flags(ap)
    ap.add_argument("--seconds", type=int, default=60, help="event-time seconds (epochs)")
    ap.add_argument("--events-per-second", type=int, default=2000)
    ap.add_argument("--campaigns", type=int, default=100)
    ap.add_argument("--ads-per-campaign", type=int, default=10)
    ap.add_argument("--window", type=int, default=10, help="window length in seconds")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rows = ysb.ad_table(args.campaigns, args.ads_per_campaign, args.seed)
    start = time.perf_counter()
    counts, latency = run(
        args.seconds,
        args.events_per_second,
        rows,
        args.window,
        args.seed,
        None,
        args.workers,
        args.backend,
        **run_options(args),
    )
    elapsed = time.perf_counter() - start
    want = ysb.plain_counts(rows, args.seconds, args.events_per_second, args.window, args.seed)
    assert counts == dict(want), "counts differ from the plain-Python count"
    lat = sorted(latency.values())
    events = args.seconds * args.events_per_second
    print(
        f"{events} events in {elapsed:.2f} s ({events / elapsed:,.0f} events/s) on "
        f"{args.workers} {args.backend} workers, table API; window latency p50 "
        f"{statistics.median(lat) * 1000:.2f} ms, max {lat[-1] * 1000:.2f} ms; "
        "counts match the plain-Python count"
    )


if __name__ == "__main__":
    main()
