"""CP over time as SVG text, to inline in the profile report.

matplotlib draws, without pyplot (no global backend, no GUI: a ``Figure`` saved as
SVG), with text as paths (``svg.fonttype="path"``) so a reader needs no font of ours.
Several of these SVGs share one HTML page, where ids must be unique, so every id is
prefixed, and the XML prologue and metadata block are dropped (the page is HTML).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence

import matplotlib
from matplotlib.figure import Figure

TOP = 10
"""Lines per plot at most (one palette of distinct colours): with more series, the
lowest are summed into the last line."""


def cp_over_time(
    starts: Sequence[float],
    ends: Sequence[float],
    paths: Sequence[bool],
    series: Mapping[str, Sequence[float]],
    title: str,
    prefix: str,
    order: Sequence[str] = (),
    top: int = TOP,
) -> str:
    """One step line per series (each window's CP, over ``[start, end)`` seconds), in
    the order of ``order`` (then the rest of ``series`` by name), at most ``top`` lines;
    windows without a path shaded, since their CP of 0 means "unknown". An ``<svg>``
    element whose ids all start with ``prefix``."""
    names = [n for n in order if n in series] + sorted(n for n in series if n not in order)
    if len(names) > top:  # at most ``top`` lines, the last a sum of at least two
        shown, rest = names[: top - 1], names[top - 1 :]
    else:
        shown, rest = names, []
    lines = [(n, list(series[n])) for n in shown]
    if rest:
        summed = [sum(series[n][k] for n in rest) for k in range(len(starts))]
        lines.append((f"the other {len(rest)}", summed))
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": prefix}):
        fig = Figure(figsize=(9, 3.4), layout="constrained")
        ax = fig.add_subplot()
        x = [*starts, ends[-1]] if starts else []
        palette = matplotlib.colormaps["tab10" if top <= 10 else "tab20"]
        for i, (name, ys) in enumerate(lines):
            colour = palette(i % palette.N) if i < len(shown) else "#777777"
            style = "-" if i < len(shown) else "--"
            ax.step(
                x,
                [*ys, ys[-1]] if ys else [],
                where="post",
                label=name,
                color=colour,
                linestyle=style,
                linewidth=1.4,
            )
        first = True
        for a, b in _runs(starts, ends, paths):
            ax.axvspan(
                a,
                b,
                color="#bbbbbb",
                alpha=0.35,
                linewidth=0,
                label="no path (CP unknown)" if first else None,
            )
            first = False
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("seconds since the trace's start")
        ax.set_ylabel("CP in the window")
        ax.set_ylim(0, max(1e-9, *(max(ys, default=0.0) for _, ys in lines)) * 1.08 if lines else 1)
        if x:
            ax.set_xlim(x[0], x[-1])
        ax.grid(True, linewidth=0.4, alpha=0.5)
        if lines:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return scope_ids(strip_prologue(buffer.getvalue()), prefix)


def _runs(
    starts: Sequence[float], ends: Sequence[float], paths: Sequence[bool]
) -> list[tuple[float, float]]:
    """Consecutive windows without a path, merged: ``(start, end)`` each."""
    out: list[tuple[float, float]] = []
    for a, b, p in zip(starts, ends, paths):
        if p:
            continue
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def strip_prologue(svg: str) -> str:
    """The ``<svg>`` element alone: no XML declaration, doctype or ``<metadata>``."""
    svg = svg[svg.index("<svg") :]
    return re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)


def scope_ids(svg: str, prefix: str) -> str:
    """Every ``id`` in ``svg`` and every ``#id`` reference to it, prefixed."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    if not ids:
        return svg

    def rename(m: re.Match[str]) -> str:
        head, name, tail = m.group(1), m.group(2), m.group(3)
        return f"{head}{prefix}{name}{tail}" if name in ids else m.group(0)

    svg = re.sub(r'(\bid=")([^"]+)(")', rename, svg)
    return re.sub(r"(#)([A-Za-z_][\w.:-]*)(\)?)", rename, svg)
