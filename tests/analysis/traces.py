"""Small random traces, and a brute-force oracle that enumerates every start-to-end path.

The oracle builds its own graph from the trace, as plainly as it can (a segment's kind is
the kind of the interval containing its midpoint; an edge is kept iff it goes forward
in (time, worker) order) and walks every path, so it checks ``build_pag`` as well as the
counting. Activities are compared by what they are (worker, times, kind, ...), not by
vertex numbers, so the two graphs need not be numbered alike.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from hypothesis import strategies as st

from analysis import PAG, Activity, Interval, Message

Key = tuple[object, ...]
"""What an activity is, independent of vertex numbering."""

KIND_CHOICES: list[tuple[str, str | None, str | None] | None] = [
    None,  # a gap: "unknown"
    ("processing", "map", None),
    ("processing", "count", None),
    ("serialization", None, "exchange:count"),
    ("progress", None, None),
    ("scheduling", None, None),
    ("waiting", None, None),
    ("waiting", None, None),
]
"""Interval kinds drawn, waiting twice: waits are what cut paths."""


@dataclass(frozen=True)
class Trace:
    """A trace and the window ``[start, end)`` to analyse."""

    intervals: list[Interval]
    messages: list[Message]
    start: int
    end: int


@st.composite
def traces(
    draw: st.DrawFn,
    max_workers: int = 3,
    horizon: int = 30,
    max_messages: int = 6,
    skew: bool = True,
) -> Trace:
    """Up to ``max_workers`` workers (ids not necessarily 0..n-1), each a few intervals
    with gaps in ``[0, horizon]``; a few messages, forward in time, and with ``skew``
    some backwards (clock skew); a window that often cuts intervals and messages."""
    count = draw(st.integers(1, max_workers))
    ids = draw(st.lists(st.integers(0, 5), min_size=count, max_size=count, unique=True))
    start = draw(st.integers(0, horizon // 3))
    end = draw(st.integers(start + 1, horizon))
    intervals: list[Interval] = []
    for w in ids:
        n = draw(st.integers(2, 8))
        cuts = sorted(set(draw(st.lists(st.integers(0, horizon), min_size=n, max_size=n))))
        for a, b in itertools.pairwise(cuts):
            choice = draw(st.sampled_from(KIND_CHOICES))
            if choice is not None:
                intervals.append(Interval(w, a, b, *choice))
    low = -3 if skew else 0
    n = draw(st.integers(0, max_messages))
    messages = draw(
        st.lists(
            st.builds(
                lambda ch, src, sent, dst, lat: Message(ch, src, sent, dst, sent + lat),
                st.sampled_from(["exchange:count", "frame"]),
                st.sampled_from(ids),
                st.integers(max(0, start - 3), end),
                st.sampled_from(ids),
                st.integers(low, 8),
            ),
            min_size=n,
            max_size=n,
        )
    )
    return Trace(intervals, messages, start, end)


def activity_key(a: Activity) -> Key:
    """An activity as the oracle names it."""
    if a.peer is None:
        return ("local", a.worker, a.start, a.end, a.kind, a.operator, a.channel)
    return ("message", a.worker, a.start, a.peer, a.end, a.channel)


@dataclass(frozen=True)
class Oracle:
    """Per activity key: how many start-to-end paths use it and its CP (exact)."""

    paths: int
    through: Counter[Key]
    cp: dict[Key, Fraction]


def brute_force(trace: Trace) -> Oracle:
    """Every start-to-end path of the trace's window, enumerated."""
    t_s, t_e = trace.start, trace.end
    clipped: dict[int, list[Interval]] = {}
    for iv in trace.intervals:
        s, e = max(iv.start, t_s), min(iv.end, t_e)
        if s < e:
            clipped.setdefault(iv.worker, []).append(iv._replace(start=s, end=e))
    sent = [
        m
        for m in trace.messages
        if t_s <= m.sent < t_e and m.received <= t_e and (m.sent, m.src) < (m.received, m.dst)
    ]
    points: dict[int, set[int]] = {w: {t_s, t_e} for w in clipped}
    for w, ivs in clipped.items():
        for iv in ivs:
            points[w] |= {iv.start, iv.end}
    for m in sent:
        points.setdefault(m.src, {t_s, t_e}).add(m.sent)
        points.setdefault(m.dst, {t_s, t_e}).add(m.received)

    Node = tuple[int, int]  # (worker, time)
    out: dict[Node, list[tuple[Node, Key, int]]] = {}
    weight: dict[Key, int] = {}
    for w, pts in points.items():
        times = sorted(pts)
        for a, b in itertools.pairwise(times):
            mid = Fraction(a + b, 2)
            covering = [iv for iv in clipped.get(w, []) if iv.start < mid < iv.end]
            kind, op, ch = (
                (covering[0].kind, covering[0].operator, covering[0].channel)
                if covering
                else ("unknown", None, None)
            )
            if kind == "waiting":
                continue
            key: Key = ("local", w, a, b, kind, op, ch)
            weight[key] = b - a
            out.setdefault((w, a), []).append(((w, b), key, b - a))
    for m in sent:
        key = ("message", m.src, m.sent, m.dst, m.received, m.channel)
        weight[key] = m.received - m.sent
        out.setdefault((m.src, m.sent), []).append(((m.dst, m.received), key, m.received - m.sent))

    through: Counter[Key] = Counter({k: 0 for k in weight})
    paths = 0

    def walk(node: Node, used: list[Key], spanned: int) -> None:
        nonlocal paths
        if node[1] == t_e:
            assert spanned == t_e - t_s, "a start-to-end path must span the window"
            paths += 1
            through.update(used)
        for nxt, key, span in out.get(node, []):
            walk(nxt, [*used, key], spanned + span)

    for w in points:
        walk((w, t_s), [], 0)
    cp = {
        k: Fraction(through[k] * weight[k], paths * (t_e - t_s)) if paths else Fraction(0)
        for k in weight
    }
    return Oracle(paths, through, cp)


CpOf = Callable[[PAG], Sequence[float]]


def by_key(pag: PAG, cp: Sequence[float]) -> dict[Key, float]:
    """CP per activity key (parallel duplicates summed, as the oracle counts them)."""
    total: dict[Key, float] = {}
    for a, c in zip(pag.activities, cp):
        k = activity_key(a)
        total[k] = total.get(k, 0.0) + c
    return total
