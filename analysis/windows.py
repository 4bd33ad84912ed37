"""Snapshot windows: a trace cut into consecutive windows, each analysed on its own.

SnailTrail analyses a stream of events in snapshots because a critical path only means
something over a stretch of time that the computation as a whole spent: one second by
default. A window's PAG clips the intervals that cross its boundaries, so the windows'
times add up to the trace's; a message belongs to the window it was sent in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from analysis.critical import critical_participation
from analysis.pag import Interval, Message, build_pag
from analysis.summaries import Summary, summarise

SECOND = 1_000_000_000
"""The default window, in ns."""


@dataclass(frozen=True)
class Window:
    """``[start, end)`` and what touches it: the intervals overlapping it (unclipped:
    ``build_pag`` clips) and the messages sent in it."""

    start: int
    end: int
    intervals: tuple[Interval, ...]
    messages: tuple[Message, ...]


def cut(
    intervals: Iterable[Interval],
    messages: Iterable[Message],
    length: int = SECOND,
    start: int | None = None,
    end: int | None = None,
) -> list[Window]:
    """Consecutive windows ``[start + k * length, ...)`` covering ``[start, end)``.

    ``start`` defaults to the trace's first instant, ``end`` to just past its last; the last window
    ends at ``end``, so it may be shorter than ``length`` rather than invent idle time.
    Each interval goes to every window it overlaps, each message to the window of
    ``sent``; a trace with nothing in it has no windows.
    """
    if length <= 0:
        raise ValueError(f"window length must be positive, not {length}")
    ivs = [iv for iv in intervals if iv.end > iv.start]
    msgs = list(messages)
    if start is None:
        start = min([iv.start for iv in ivs] + [m.sent for m in msgs], default=0)
    if end is None:  # past every instant, a skewed message's send included
        end = max(
            [iv.end for iv in ivs] + [max(m.received, m.sent + 1) for m in msgs], default=start
        )
    if end <= start:
        return []
    count = -(-(end - start) // length)
    by_window: list[list[Interval]] = [[] for _ in range(count)]
    for iv in ivs:
        if iv.end <= start or iv.start >= end:
            continue
        first = max(0, (iv.start - start) // length)
        last = min(count - 1, (iv.end - 1 - start) // length)
        for k in range(first, last + 1):
            by_window[k].append(iv)
    sent: list[list[Message]] = [[] for _ in range(count)]
    for m in msgs:
        if start <= m.sent < end:
            sent[(m.sent - start) // length].append(m)
    return [
        Window(
            start + k * length,
            min(start + (k + 1) * length, end),
            tuple(by_window[k]),
            tuple(sent[k]),
        )
        for k in range(count)
    ]


def analyse(
    intervals: Iterable[Interval],
    messages: Iterable[Message],
    length: int = SECOND,
    start: int | None = None,
    end: int | None = None,
) -> list[Summary]:
    """Every window of the trace (see ``cut``), built, analysed and summarised."""
    return [
        summarise(critical_participation(build_pag(w.intervals, w.messages, w.start, w.end)))
        for w in cut(intervals, messages, length, start, end)
    ]
