"""What a window's CPs say, summed by activity kind, operator, worker and channel.

Next to each CP sum is the time the same activities took (the sum of their weights),
because the two answer different questions: an operator may take most of the time yet
never hold anyone up (its workers would have waited anyway), while a short
serialization on one worker may sit on every critical path. Waiting is in the time view
(it took time) with a CP of 0 (it is never critical).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from analysis.critical import Critical
from analysis.pag import Activity

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Breakdown(Generic[K]):
    """One dimension of a window: ``cp`` as ``(name, cp)`` by CP, highest first (ties by
    name); ``time`` as ``(name, ns)``, in the same order, so the two read side by side."""

    cp: list[tuple[K, float]]
    time: list[tuple[K, int]]

    def rows(self) -> list[tuple[K, float, int]]:
        """``(name, cp, ns)`` by CP, highest first."""
        return [(k, c, t) for (k, c), (_, t) in zip(self.cp, self.time)]


@dataclass(frozen=True)
class Summary:
    """A window ``[start, end)`` summed four ways.

    ``by_kind`` covers every activity (communication edges included), so its CPs sum to
    1 when ``paths > 0``. ``by_operator`` covers activities with an operator,
    ``by_channel`` those with a channel (messages, and intervals that name one).
    ``by_worker`` covers worker-local activities only (the stragglers' view): a message
    in flight is no one worker's doing, and is in ``by_channel`` instead. ``paths == 0``
    means no path spans the window and every CP is 0.
    """

    start: int
    end: int
    paths: int
    by_kind: Breakdown[str]
    by_operator: Breakdown[str]
    by_worker: Breakdown[int]
    by_channel: Breakdown[str]
    messages: int
    dropped_backwards: int
    dropped_outside: int


def summarise(critical: Critical) -> Summary:
    """The four breakdowns of one analysed window."""
    pag = critical.pag
    pairs = list(zip(pag.activities, critical.cp))
    pairs.extend((a, 0.0) for a in pag.removed)
    return Summary(
        start=pag.start,
        end=pag.end,
        paths=critical.paths,
        by_kind=breakdown(pairs, _kind),
        by_operator=breakdown(pairs, _operator),
        by_worker=breakdown(pairs, _local_worker),
        by_channel=breakdown(pairs, _channel),
        messages=pag.messages,
        dropped_backwards=pag.dropped_backwards,
        dropped_outside=pag.dropped_outside,
    )


def breakdown(
    pairs: Iterable[tuple[Activity, float]], key: Callable[[Activity], K | None]
) -> Breakdown[K]:
    """CP and time summed by ``key`` (activities it maps to ``None`` are left out)."""
    cp: dict[K, float] = {}
    time: dict[K, int] = {}
    for a, c in pairs:
        k = key(a)
        if k is None:
            continue
        cp[k] = cp.get(k, 0.0) + c
        time[k] = time.get(k, 0) + (a.end - a.start)
    order = sorted(cp, key=lambda k: (-cp[k], str(k)))
    return Breakdown([(k, cp[k]) for k in order], [(k, time[k]) for k in order])


def render(summary: Summary, top: int = 10) -> str:
    """A plain-text report of ``summary``: per dimension, the ``top`` rows by CP, with
    the time each took, as milliseconds and as a share of the window."""
    span = summary.end - summary.start
    lines = [
        f"window [{summary.start}, {summary.end}) ns: {_paths(summary.paths)}, "
        f"{summary.messages} messages ({summary.dropped_backwards} dropped for clock skew, "
        f"{summary.dropped_outside} received after the window)"
    ]
    for title, part in (
        ("kind", summary.by_kind),
        ("operator", summary.by_operator),
        ("worker", summary.by_worker),
        ("channel", summary.by_channel),
    ):
        rows = part.rows()
        if not rows:
            continue
        width = max(len(title), *(len(str(k)) for k, _, _ in rows[:top]))
        lines.append(f"  {title:<{width}}      CP    time ms  time/window")
        lines.extend(
            f"  {k!s:<{width}}  {c:6.3f}  {t / 1e6:9.3f}  {t / span:11.3f}"
            for k, c, t in rows[:top]
        )
    return "\n".join(lines)


def _paths(n: int) -> str:
    if n == 0:
        return "no path spans the window (every CP is 0)"
    if n < 10**6:
        return f"{n} paths"
    return f"~2^{n.bit_length() - 1} paths"


def _kind(a: Activity) -> str:
    return a.kind


def _operator(a: Activity) -> str | None:
    return a.operator


def _channel(a: Activity) -> str | None:
    return a.channel


def _local_worker(a: Activity) -> int | None:
    return a.worker if a.peer is None else None
