"""The Yahoo Streaming Benchmark: ad views per campaign in 10 s event-time windows.

Generated ad events (``--campaigns`` campaigns of ``--ads-per-campaign`` ads; event
types view, click, purchase; event time in ms) arrive one event-time second per epoch.
The dataflow keeps the views, looks up each ad's campaign in the ad -> campaign table
(a second input, sent once and ``broadcast`` to every worker, which keeps it across
epochs), counts per ``(campaign, window)`` with ``count_by`` (per epoch), and sums
those counts per window in ``WindowSum``, which holds a notification (a capability)
at the window's last epoch and emits the window's counts once that epoch completes.
Epochs are event-time seconds, so a 10 s window is 10 consecutive epochs.

Latency, per window: the wall-clock time at which its counts reach the driver (the
``subscribe`` callback) minus the wall-clock time at which the driver advanced the
input past the window's last epoch (the window's end, from the system's point of
view). ``--pace`` makes each epoch last that many wall-clock seconds, as a live
source would; by default epochs are fed as fast as the dataflow takes them.
Counts are checked against a plain-Python count.

    python examples/ysb.py --workers 2 --backend ray --seconds 60 --events-per-second 2000
"""

from __future__ import annotations

import argparse
import operator
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Final

from _cli import add_run_flags, run_options

from timely import Dataflow, StatefulVertex, Stream, broadcast

Time = tuple[int, ...]
EVENT_TYPES = ("view", "click", "purchase")

# An event: (user_id, page_id, ad_id, ad_type, event_type, event_time_ms, ip_address)
Event = tuple[str, str, str, str, str, int, str]
AD: Final = 2
EVENT_TYPE: Final = 4
EVENT_TIME: Final = 5


def ad_table(campaigns: int, ads_per_campaign: int, seed: int = 0) -> list[tuple[str, str]]:
    """The ``(ad_id, campaign_id)`` rows: ads shuffled over the campaigns, evenly."""
    ads = [f"ad-{i:05d}" for i in range(campaigns * ads_per_campaign)]
    random.Random(seed).shuffle(ads)
    return [(ad, f"campaign-{i // ads_per_campaign:04d}") for i, ad in enumerate(ads)]


def events_for(second: int, n: int, ads: Sequence[str], seed: int = 0) -> list[Event]:
    """``n`` events with event times in ``[second * 1000, second * 1000 + 999]`` ms."""
    rng = random.Random(seed * 1_000_003 + second)
    base = second * 1000
    return [
        (
            f"user-{rng.randrange(100_000)}",
            f"page-{rng.randrange(1000)}",
            rng.choice(ads),
            rng.choice(("banner", "modal", "sponsored-search", "mail", "mobile")),
            rng.choice(EVENT_TYPES),
            base + rng.randrange(1000),
            "1.2.3.4",
        )
        for _ in range(n)
    ]


class CampaignLookup(StatefulVertex):
    """Maps events (input 0) to ``(campaign, event_time_ms)`` through the table (input 1).

    The table is kept across epochs (later rows add to it). An event whose ad is not
    in the table yet waits for its epoch to complete, by when every row sent at that
    epoch or before has arrived; if its ad is still unknown it is dropped.

    State (checkpointable): the rows, per epoch they came at, in a replicated table (the
    table input is broadcast, so every worker holds all of it); waiting events per time.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rows = self.keyed_state("rows", replicated=True)
        self.waiting = self.keyed_state("waiting")
        self.table: dict[str, str] = {}

    def restored(self, epoch: int) -> None:
        for t in self.rows.times():
            self.table.update(self.rows.table(t))

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        if input == 1:
            self.rows.table(time).update(records)
            self.table.update(records)
            return
        table = self.table
        out = [(table[r[AD]], r[EVENT_TIME]) for r in records if r[AD] in table]
        if len(out) < len(records):
            late = self.table_at(self.waiting, time).setdefault(0, [])
            late.extend(r for r in records if r[AD] not in table)
        self.send_by(0, out, time)

    def on_notify(self, time: Time) -> None:
        table = self.table
        late = self.waiting.pop(time).get(0, [])
        self.send_by(0, [(table[r[AD]], r[EVENT_TIME]) for r in late if r[AD] in table], time)


class WindowSum(StatefulVertex):
    """Sums per-epoch ``((campaign, window), n)`` counts over each window's epochs.

    Each epoch's counts wait in a per-epoch table; the first count of a window asks to
    be notified at the window's last epoch (holding a capability there), which then
    sends ``(campaign, window, count)`` for the window. Its input needs no exchange:
    ``count_by`` already sends every count of a ``(campaign, window)`` key from the
    key's one owner. Nothing carried across epochs changes outside ``on_notify``, so a
    checkpoint after any epoch is exact.
    """

    def __init__(self, epochs_per_window: int) -> None:
        super().__init__()
        self.size = epochs_per_window
        self.counts = self.keyed_state("counts")

    def _window_end(self, epoch: int) -> tuple[int]:
        return ((epoch // self.size) * self.size + self.size - 1,)

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        table = self.counts.get(time)
        if table is None:
            table = self.counts.table(time)
            self.notify_at(self._window_end(time[0]))
        self.fold_pairs(table, operator.add, records, time)

    def restored(self, epoch: int) -> None:
        for end in sorted({self._window_end(t[0]) for t in self.counts.times()}):
            if end[0] > epoch:
                self.notify_at(end)

    def on_notify(self, time: Time) -> None:
        window = time[0] // self.size
        total: Counter[str] = Counter()
        for t in self.counts.times():
            if t[0] // self.size == window:
                for (campaign, _), n in self.counts.pop(t).items():
                    total[campaign] += n
        self.send_by(0, [(c, window, n) for c, n in total.items()], time)


def _is_view(event: Event) -> bool:
    return event[EVENT_TYPE] == "view"


def views_per_campaign(events: Stream, table: Stream, window_seconds: int = 10) -> Stream:
    """``(campaign, window, views)`` for every window, sent at its last epoch."""
    window_ms = window_seconds * 1000

    def key(pair: tuple[str, int]) -> tuple[str, int]:
        return (pair[0], pair[1] // window_ms)

    return (
        events.where(_is_view)
        .binary(table, CampaignLookup, name="campaign_lookup", channels=(None, broadcast()))
        .count_by(key, name="count_per_epoch")
        .unary(lambda: WindowSum(window_seconds), name="window_sum")
    )


def run(
    seconds: int,
    events_per_second: int,
    table_rows: list[tuple[str, str]],
    window_seconds: int = 10,
    seed: int = 0,
    pace: float = 0.0,
    ads: Sequence[str] | None = None,
    workers: int = 2,
    backend: str = "ray",
    **options: Any,
) -> tuple[dict[tuple[str, int], int], dict[int, float]]:
    """Run YSB; return ``{(campaign, window): views}`` and ``{window: latency in seconds}``.

    Events pick their ad from ``ads`` (by default, the table's ads)."""
    counts: dict[tuple[str, int], int] = {}
    window_end: dict[int, float] = {}  # window -> wall clock when the driver passed it
    latency: dict[int, float] = {}

    def on_window(epoch: int, rows: list[tuple[str, int, int]]) -> None:
        now = time.perf_counter()
        for campaign, window, n in rows:
            counts[(campaign, window)] = n
        window = epoch // window_seconds
        latency[window] = now - window_end[window]

    flow = Dataflow("ysb")
    events = flow.new_input("events")
    table = flow.new_input("ad_table")
    views_per_campaign(events.stream, table.stream, window_seconds).subscribe(on_window)
    if ads is None:
        ads = [ad for ad, _ in table_rows]
    with flow.activate(workers=workers, backend=backend, **options) as session:
        table.send(table_rows)
        table.close()
        feed(
            session,
            events,
            seconds,
            window_seconds,
            window_end,
            lambda s: events_for(s, events_per_second, ads, seed),
            pace,
        )
    return counts, latency


def feed(
    session: Any,
    events: Any,
    seconds: int,
    window_seconds: int,
    window_end: dict[int, float],
    epoch_events: Callable[[int], Any],
    pace: float = 0.0,
) -> None:
    """Send ``epoch_events(s)`` at each epoch ``s``; record in ``window_end`` when the
    driver passed each window's last epoch (what latency is measured from); wait for
    the run. Shared by the row and the table versions."""
    start = time.perf_counter()
    for s in range(seconds):
        events.advance_to(s)
        events.send(epoch_events(s))
        if pace:
            while (left := start + (s + 1) * pace - time.perf_counter()) > 0:
                session.poll(timeout=min(left, 0.05))
        if (s + 1) % window_seconds == 0:
            window_end[s // window_seconds] = time.perf_counter()
            events.advance_to(s + 1)  # the window's last epoch is complete at the input
        session.poll()
    if seconds % window_seconds:
        window_end[seconds // window_seconds] = time.perf_counter()
    events.close()
    session.join()


def plain_counts(
    rows: list[tuple[str, str]], seconds: int, events_per_second: int, window: int, seed: int
) -> Counter[tuple[str, int]]:
    """The reference: views per ``(campaign, window)`` of the same events, in plain
    Python."""
    campaign_of = dict(rows)
    want: Counter[tuple[str, int]] = Counter()
    for s in range(seconds):
        for e in events_for(s, events_per_second, list(campaign_of), seed):
            if e[EVENT_TYPE] == "view":
                want[(campaign_of[e[AD]], e[EVENT_TIME] // (window * 1000))] += 1
    return want


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
    ap.add_argument("--pace", type=float, default=0.0, help="wall-clock seconds per epoch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rows = ad_table(args.campaigns, args.ads_per_campaign, args.seed)
    options = run_options(args)
    start = time.perf_counter()
    counts, latency = run(
        args.seconds,
        args.events_per_second,
        rows,
        args.window,
        args.seed,
        args.pace,
        None,
        args.workers,
        args.backend,
        **options,
    )
    elapsed = time.perf_counter() - start

    want = plain_counts(rows, args.seconds, args.events_per_second, args.window, args.seed)
    per_window: dict[int, int] = defaultdict(int)
    for (_, w), n in counts.items():
        per_window[w] += n
    for w in sorted(latency):
        print(
            f"window {w:3d} [{w * args.window:4d} s, {(w + 1) * args.window:4d} s): "
            f"{per_window[w]:7d} views, latency {latency[w] * 1000:8.2f} ms"
        )
    assert counts == dict(want), "counts differ from the plain-Python count"
    lat = sorted(latency.values())
    events = args.seconds * args.events_per_second
    print(
        f"{events} events in {elapsed:.2f} s ({events / elapsed:,.0f} events/s) on "
        f"{args.workers} {args.backend} workers; window latency p50 "
        f"{statistics.median(lat) * 1000:.2f} ms, max {lat[-1] * 1000:.2f} ms; "
        "counts match the plain-Python count"
    )


if __name__ == "__main__":
    main()
