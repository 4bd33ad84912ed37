"""A run's critical-path profile, offline, from its event log (``python -m timely profile
TRACE_DIR``: :mod:`analysis.command`).

The trace's windows are analysed one by one (:mod:`analysis.windows`); the profile
weighs each window's CPs by its length, so that, over a run, a dimension's CP is the
share of the run's critical participation it had (windows without a path count for
nothing). The driver, a pseudo-worker in the trace (:data:`analysis.trace.INPUT`), is
left out of the workers' table: its share is the activity kind ``"input"``. Tables by
activity kind, operator, worker and channel go to stdout, or with
``--json`` one object: ``activities``, ``operators``, ``workers`` and ``channels``, each
a list sorted by CP, highest first, every entry with its ``name``, ``cp`` and ``time_s``,
and ``series``, each window's own CP by operator and by worker (:class:`Series`), which
the HTML report (:mod:`analysis.report`) plots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from analysis.summaries import Breakdown, Summary
from analysis.trace import INPUT, load
from analysis.windows import SECOND, analyse

K = TypeVar("K")

DIMENSIONS = (
    ("activities", "by_kind"),
    ("operators", "by_operator"),
    ("workers", "by_worker"),
    ("channels", "by_channel"),
)


@dataclass(frozen=True)
class Series:
    """Each window's own CP, for plots over time (the tables weigh windows together).

    Window ``k`` spans ``[starts[k], ends[k])`` seconds since the trace's first instant;
    ``paths[k]`` is false where no path spans it (every CP is 0 there, which means
    "unknown", not "idle"). ``operators`` and ``workers`` map a name (as in the tables)
    to its CP in every window, 0 where it had no activity.
    """

    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    paths: list[bool] = field(default_factory=list)
    operators: dict[str, list[float]] = field(default_factory=dict)
    workers: dict[str, list[float]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "start_s": self.starts,
            "end_s": self.ends,
            "paths": self.paths,
            "operators": self.operators,
            "workers": self.workers,
        }


@dataclass(frozen=True)
class Profile:
    """A run's profile: per dimension, ``(name, cp, seconds)`` by CP, highest first; the
    per-window ``series``; and the dataflow's ``graph`` as the trace's header has it
    (:meth:`timely.graph.plan.Plan.describe`), ``None`` for a trace written before headers
    carried it."""

    run: str
    windows: int
    windows_without_paths: int
    seconds: float
    tables: dict[str, list[tuple[str, float, float]]]
    series: Series = field(default_factory=Series)
    graph: dict[str, Any] | None = None
    window: float = 1.0
    """Seconds per window."""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": self.run,
            "windows": self.windows,
            "windows_without_paths": self.windows_without_paths,
            "seconds": self.seconds,
        }
        for name, rows in self.tables.items():
            out[name] = [{"name": n, "cp": cp, "time_s": t} for n, cp, t in rows]
        out["series"] = self.series.as_json()
        return out


def profile(directory: str, window: float = 1.0) -> Profile:
    """Analyse the trace in ``directory`` in windows of ``window`` seconds."""
    intervals, messages, header = load(directory)
    summaries = analyse(intervals, messages, length=max(1, int(window * SECOND)))
    counted = [s for s in summaries if s.paths > 0]
    total = sum(s.end - s.start for s in counted) or 1
    tables = {
        name: _combine(((getattr(s, field), s.end - s.start) for s in summaries), total, name)
        for name, field in DIMENSIONS
    }
    span = sum(s.end - s.start for s in summaries)
    graph = header.get("graph")
    return Profile(
        run=str(header.get("run", "")),
        windows=len(summaries),
        windows_without_paths=len(summaries) - len(counted),
        seconds=span / SECOND,
        tables=tables,
        series=series(summaries),
        graph=graph if isinstance(graph, dict) else None,
        window=window,
    )


def series(summaries: list[Summary]) -> Series:
    """Every window's CP by operator and by worker (the driver left out, as in the
    tables), named as the tables name them."""
    origin = summaries[0].start if summaries else 0
    operators: dict[str, list[float]] = {}
    workers: dict[str, list[float]] = {}
    for k, s in enumerate(summaries):
        for dimension, part, out in (
            ("operators", s.by_operator, operators),
            ("workers", s.by_worker, workers),
        ):
            for key, cp in part.cp:
                if dimension == "workers" and key == INPUT:
                    continue
                out.setdefault(_name(key, dimension), [0.0] * len(summaries))[k] += cp
    return Series(
        starts=[(s.start - origin) / SECOND for s in summaries],
        ends=[(s.end - origin) / SECOND for s in summaries],
        paths=[s.paths > 0 for s in summaries],
        operators=operators,
        workers=workers,
    )


def _combine(
    parts: Iterable[tuple[Breakdown[Any], int]], total: int, dimension: str
) -> list[tuple[str, float, float]]:
    cp: dict[str, float] = {}
    time: dict[str, float] = {}
    for part, length in parts:
        for key, c, t in part.rows():
            if dimension == "workers" and key == INPUT:
                continue  # the driver is no worker: its share shows as the kind "input"
            name = _name(key, dimension)
            cp[name] = cp.get(name, 0.0) + c * length / total
            time[name] = time.get(name, 0.0) + t / SECOND
    return sorted(((n, cp[n], time[n]) for n in cp), key=lambda r: (-r[1], r[0]))


def _name(key: Any, dimension: str) -> str:
    return f"worker {key}" if dimension == "workers" else str(key)


def render(p: Profile, top: int = 10) -> str:
    """The profile as plain-text tables."""
    lines = [
        f"profile of {p.run!r}: {p.seconds:.2f} s in {p.windows} windows"
        + (f" ({p.windows_without_paths} without a path)" if p.windows_without_paths else "")
    ]
    for name, rows in p.tables.items():
        if not rows:
            continue
        width = max(len(name), *(len(n) for n, _, _ in rows[:top]))
        lines.append("")
        lines.append(f"{name:<{width}}      CP    time s")
        lines.extend(f"{n:<{width}}  {cp:6.3f}  {t:8.3f}" for n, cp, t in rows[:top])
    return "\n".join(lines)
