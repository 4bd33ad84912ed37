"""A run's profile as one self-contained HTML page: tables, CP over time, the graph.

One file a reader can mail, archive or open offline: every plot is inline SVG (no
external URL, no script, no font to fetch), the style is one ``<style>`` element. It
holds the four tables of :func:`analysis.profile.render` (every row, not the top few),
CP per operator and per worker in every window (:mod:`analysis.plots`), and the
dataflow's graph with each operator's CP (:mod:`analysis.graphview`), the graph left
out, with a sentence saying why, for a trace whose header does not carry it.

An operator is matched to the graph's vertices by name, as the trace names it: two
vertices of one name share the row (and the CP) that the tables give that name.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from analysis import graphview, plots
from analysis.profile import DIMENSIONS, Profile

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 75em;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
.note { color: #555; }
.tables { display: flex; flex-wrap: wrap; gap: 1em 2.5em; align-items: flex-start; }
table { border-collapse: collapse; font-size: 0.9em; }
caption { text-align: left; font-weight: 600; padding-bottom: 0.3em; }
th, td { padding: 0.15em 0.6em; border-bottom: 1px solid #e4e4e4; }
th { text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.bar { width: 8em; } td.bar span { display: block; height: 0.7em; background: #f46d43; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
"""


def html(p: Profile, source: str | None = None) -> str:
    """The page for profile ``p`` (``source``: where its trace came from, shown)."""
    title = f"profile of {p.run!r}" if p.run else "profile"
    without = (
        f", {p.windows_without_paths} without a path (their CP is unknown, shaded grey)"
        if p.windows_without_paths
        else ""
    )
    intro = (
        f"{p.seconds:.2f} s of trace in {p.windows} windows of {p.window:g} s{without}"
        + (f", from <code>{escape(source)}</code>" if source else "")
        + ". CP is SnailTrail's critical participation: the share of the critical "
        "paths through a window that an activity lies on, weighed by its time; "
        "a table's CP weighs each window by its length."
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="note">{intro}</p>',
        '<h2>Critical participation</h2><div class="tables">',
        *(_table(name, p.tables.get(name, [])) for name, _ in DIMENSIONS),
        "</div>",
        "<h2>Critical participation over time</h2>",
        _plots(p),
        "<h2>The dataflow</h2>",
        _graph(p),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_report(p: Profile, path: str | os.PathLike[str], source: str | None = None) -> Path:
    """Write :func:`html` of ``p`` to ``path`` (through a temporary file beside it, so a
    reader never sees half a page); ``OSError`` if it cannot be written."""
    target = Path(path)
    text = html(p, source)
    partial = target.with_name(f".{target.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _table(name: str, rows: list[tuple[str, float, float]]) -> str:
    if not rows:
        return (
            f'<table><caption>{escape(name)}</caption><tr><td class="note">none</td></tr></table>'
        )
    top = max(cp for _, cp, _ in rows) or 1.0
    body = "".join(
        f'<tr><td>{escape(n)}</td><td class="n">{cp:.3f}</td><td class="n">{t:.3f}</td>'
        f'<td class="bar"><span style="width:{100 * cp / top:.1f}%"></span></td></tr>'
        for n, cp, t in rows
    )
    return (
        f"<table><caption>{escape(name)}</caption>"
        f"<tr><th>name</th><th>CP</th><th>time s</th><th></th></tr>{body}</table>"
    )


def _plots(p: Profile) -> str:
    s = p.series
    if not s.starts:
        return '<p class="note">The trace has no windows: nothing to plot.</p>'
    figures = []
    for key, title, prefix in (
        ("operators", "CP per operator", "cp-operators-"),
        ("workers", "CP per worker", "cp-workers-"),
    ):
        order = [n for n, _, _ in p.tables.get(key, [])]
        svg = plots.cp_over_time(s.starts, s.ends, s.paths, getattr(s, key), title, prefix, order)
        figures.append(f'<figure id="{prefix}plot">{svg}</figure>')
    return "\n".join(figures)


def _graph(p: Profile) -> str:
    if p.graph is None:
        return (
            '<p class="note">The graph is left out: this trace\'s header does not '
            "describe the dataflow (it was written by a timely older than the graph in "
            "the event log).</p>"
        )
    try:
        graph = graphview.Graph.parse(p.graph)
    except ValueError as e:
        return f'<p class="note">The graph is left out: {escape(str(e))}.</p>'
    rows = {n: (cp, t) for n, cp, t in p.tables.get("operators", [])}
    top = max((cp for cp, _ in rows.values()), default=0.0) or 1.0
    labels: dict[int, str] = {}
    values: dict[int, float] = {}
    for v, name in enumerate(graph.names):
        if name in rows:
            cp, t = rows[name]
            labels[v] = f"CP {cp:.3f} · {_duration(t)}"
            values[v] = cp / top
        else:
            labels[v] = "not active"
    svg = graphview.svg(graph, labels, values, title=f"the dataflow {p.run!r}")
    return (
        '<p class="note">Each vertex with its CP and the time its activations took; the '
        "fill grows with CP, the highest operator's the darkest. Dashed: a loop's "
        "feedback; an edge is marked with its channel unless it is a pipeline. The "
        "runtime's own loop vertices are small and grey.</p>"
        f"<figure>{svg}</figure>"
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"
