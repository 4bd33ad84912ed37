"""The program activity graph (PAG) of one snapshot window, after SnailTrail (NSDI'18).

The input is what every worker was doing (``Interval``) and which messages went
between workers (``Message``), on a clock common to all workers. The PAG turns that
into a DAG whose edges are *activities*: a worker doing something between two points
in time, or a message in flight. Because every edge weighs exactly the time it spans,
every path from the window's start to its end spans the whole window, and the share of
those paths an activity lies on is a measure of how much it held the computation up
(``analysis.critical``).

A vertex is a ``(worker, time)`` pair: a worker's interval boundaries, the ends of the
messages it sent or received, and a start vertex at ``t_s`` and an end vertex at ``t_e``
for every worker with anything in the window. Two events at the same instant on the same
worker are one point in time, so one vertex. Vertices are numbered in ``(time, worker)``
order, which is total; an edge that would not go forward in it (clock skew between
nodes, or a zero-latency message to a lower-numbered worker) is dropped and counted, so
the numbering is a topological order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

WAITING = "waiting"
UNKNOWN = "unknown"
COMMUNICATION = "communication"

KINDS = (
    "processing",
    "serialization",
    COMMUNICATION,
    "scheduling",
    "progress",
    "checkpoint",
    "input",
    WAITING,
)
"""The interval kinds the event log produces; others are accepted and kept as given."""

NEVER_CRITICAL: frozenset[str] = frozenset({WAITING})
"""Kinds removed from the graph. A worker that waits is held up by someone else: the
message that ends the wait carries the critical path instead (SnailTrail's rule)."""


class Interval(NamedTuple):
    """What worker ``worker`` did in ``[start, end)`` (ns, on a clock shared by all workers).

    A worker's intervals do not overlap; a gap between them is time nobody accounted
    for, analysed as kind ``"unknown"`` rather than guessed. ``operator`` names the
    operator of a ``"processing"`` interval; ``channel`` the channel an interval works
    on (serialization, communication), so summaries can charge either.
    """

    worker: int
    start: int
    end: int
    kind: str
    operator: str | None = None
    channel: str | None = None


class Message(NamedTuple):
    """One message on ``channel`` from worker ``src`` (sent at ``sent``) to ``dst``
    (received at ``received``): the only way one worker's work can hold another's up."""

    channel: str
    src: int
    sent: int
    dst: int
    received: int


class Activity(NamedTuple):
    """An edge of the PAG: ``src -> dst`` (vertex numbers), spanning ``[start, end)``.

    Worker-local activities carry their interval's kind, operator and channel, clipped
    to the window. A message is an activity of kind ``"communication"`` from its sender
    ``worker`` to ``peer`` (``None`` for local ones). Its weight is always ``end - start``,
    the time it spans, which is what makes every start-to-end path span the window.
    """

    src: int
    dst: int
    worker: int
    start: int
    end: int
    kind: str
    operator: str | None = None
    channel: str | None = None
    peer: int | None = None

    @property
    def weight(self) -> int:
        """The time the activity spans (ns)."""
        return self.end - self.start


@dataclass(frozen=True)
class PAG:
    """The program activity graph of the window ``[start, end)``.

    ``times[v]`` and ``owners[v]`` are vertex ``v``'s time and worker; vertices are
    numbered in ``(time, worker)`` order, and every edge goes from a lower number to a
    higher one. ``sources`` are the start vertices (one per worker in ``workers``, at
    ``start``), ``sinks`` the end vertices. ``activities`` are the graph's edges;
    ``removed`` the waiting activities taken out of it (kept for the total-time view:
    they took time, they are never critical).
    """

    start: int
    end: int
    workers: tuple[int, ...]
    times: tuple[int, ...]
    owners: tuple[int, ...]
    sources: tuple[int, ...]
    sinks: tuple[int, ...]
    activities: tuple[Activity, ...]
    removed: tuple[Activity, ...]
    messages: int
    """Messages that became communication edges."""
    dropped_backwards: int
    """Messages dropped because their edge would not go forward in ``(time, worker)``
    order: clock skew between nodes, or a zero-latency message to a lower worker."""
    dropped_outside: int
    """Messages sent in the window but received after its end: they have no vertex to
    land on in this window."""

    @property
    def length(self) -> int:
        """``end - start``: the time every counted path spans."""
        return self.end - self.start


def build_pag(
    intervals: Iterable[Interval], messages: Iterable[Message], start: int, end: int
) -> PAG:
    """The PAG of ``[start, end)``: intervals clipped to it, messages sent in it.

    A message belongs to the window in which it was *sent*; it becomes an edge when it
    is also received in the window (``received <= end``: the end vertex may receive).
    One received after the end is dropped and counted in ``dropped_outside`` rather
    than clipped, because clipping would invent a receipt nobody observed; one received
    in the window but sent before it is the earlier window's to count. So every message
    is accounted for in exactly one window.

    Raises ``ValueError`` on an empty window, an interval that ends before it starts,
    or two overlapping intervals of one worker.
    """
    if end <= start:
        raise ValueError(f"empty window [{start}, {end})")
    clipped: dict[int, list[tuple[int, int, Interval]]] = {}
    for iv in intervals:
        if iv.end < iv.start:
            raise ValueError(f"interval ends before it starts: {iv}")
        s, e = _clip(iv.start, iv.end, start, end)
        if s < e:
            clipped.setdefault(iv.worker, []).append((s, e, iv))

    kept: list[Message] = []
    backwards = outside = 0
    for m in messages:
        if not start <= m.sent < end:
            continue
        if (m.received, m.dst) <= (m.sent, m.src):
            backwards += 1
        elif m.received > end:
            outside += 1
        else:
            kept.append(m)

    points: dict[int, set[int]] = {w: {start, end} for w in clipped}
    for w, ivs in clipped.items():
        ivs.sort(key=_first)
        for (_, e0, x), (s1, _, y) in itertools.pairwise(ivs):
            if s1 < e0:
                raise ValueError(f"overlapping intervals of worker {w}: {x} and {y}")
        pts = points[w]
        for s, e, _ in ivs:
            pts.add(s)
            pts.add(e)
    for m in kept:
        points.setdefault(m.src, {start, end}).add(m.sent)
        points.setdefault(m.dst, {start, end}).add(m.received)

    # A vertex's key is time * workers + the worker's rank: (time, worker) order, as ints,
    # which sort and hash faster than pairs.
    workers = tuple(sorted(points))
    nw = len(workers)
    rank = {w: r for r, w in enumerate(workers)}
    keys = sorted([t * nw + r for r, w in enumerate(workers) for t in points[w]])
    number = dict(zip(keys, range(len(keys))))

    new = tuple.__new__  # NamedTuple's own __new__ is a Python call per activity
    activities: list[Activity] = []
    removed: list[Activity] = []
    for r, w in enumerate(workers):
        times = sorted(points[w])
        verts = [number[t * nw + r] for t in times]
        ivs = clipped.get(w, [])
        i, n = 0, len(ivs)
        for a, b, va, vb in zip(times, times[1:], verts, verts[1:]):
            while i < n and ivs[i][1] <= a:
                i += 1
            if i < n and ivs[i][0] <= a:
                iv = ivs[i][2]
                act = new(Activity, (va, vb, w, a, b, iv.kind, iv.operator, iv.channel, None))
            else:
                act = new(Activity, (va, vb, w, a, b, UNKNOWN, None, None, None))
            (removed if act.kind in NEVER_CRITICAL else activities).append(act)
    for m in kept:
        activities.append(
            new(
                Activity,
                (
                    number[m.sent * nw + rank[m.src]],
                    number[m.received * nw + rank[m.dst]],
                    m.src,
                    m.sent,
                    m.received,
                    COMMUNICATION,
                    None,
                    m.channel,
                    m.dst,
                ),
            )
        )

    return PAG(
        start=start,
        end=end,
        workers=workers,
        times=tuple([k // nw for k in keys]),
        owners=tuple([workers[k % nw] for k in keys]),
        sources=tuple(number[start * nw + r] for r in range(nw)),
        sinks=tuple(number[end * nw + r] for r in range(nw)),
        activities=tuple(activities),
        removed=tuple(removed),
        messages=len(kept),
        dropped_backwards=backwards,
        dropped_outside=outside,
    )


def _first(item: tuple[int, int, Interval]) -> int:
    return item[0]


def _clip(s: int, e: int, start: int, end: int) -> tuple[int, int]:
    """``[s, e)`` cut to the window: a window accounts only for its own time."""
    return (s if s > start else start), (e if e < end else end)
