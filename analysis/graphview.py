"""A dataflow's graph drawn as SVG, for the profile report and for pages that update it.

The graph is what an event log's header carries (:meth:`timely.graph.plan.Plan.describe`):
``{"vertices": [[name, kind], ...], "edges": [[src, dst, channel], ...]}``. Layout is
Sugiyama's first steps, kept small: edges that close a cycle (a loop's feedback) are
found by a depth-first search from the vertices nothing feeds and set aside; every
other edge then goes down, and each vertex sits on the layer of its longest path from
those roots; a few barycentre sweeps order each layer to uncross edges. Vertices are
boxes top to bottom, loops' feedback edges dashed curves up the right-hand side.

The drawing's ids are an interface (a live page swaps labels and fills by id), so they
only ever depend on vertex and edge indices in the plan:

- ``v-<i>``: vertex ``i``'s ``<g>`` (``data-name``, ``data-kind`` attributes; class
  ``vertex``, ``system`` for the runtime's own kinds, and ``kind-<kind>``);
- ``v-<i>-box``: its ``<rect>`` (fill: :func:`shade` of its value);
- ``v-<i>-label``: its label line's ``<text>``, present even when empty;
- ``e-<j>``: edge ``j``'s ``<g>`` (class ``edge``, ``back`` for a feedback edge).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

SYSTEM_KINDS = frozenset({"ingress", "egress", "feedback"})
"""Kinds of vertex that the runtime adds (loop plumbing): drawn small and grey."""

_NAME_CHARS = 32
_PAD = 8
_GAP_X = 24
_GAP_Y = 36
_MARGIN = 16
_LANE = 12


@dataclass(frozen=True)
class Graph:
    """A dataflow's vertices (``names``, ``kinds``) and edges ``(src, dst, channel)``."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    edges: tuple[tuple[int, int, str], ...]

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Graph:
        """The graph from a header's ``graph`` entry; ``ValueError`` if it is not one."""
        try:
            vertices = [(str(name), str(kind)) for name, kind in data["vertices"]]
            edges = [(int(s), int(d), str(c)) for s, d, c in data["edges"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a dataflow graph: {e}") from None
        for s, d, _ in edges:
            if not (0 <= s < len(vertices) and 0 <= d < len(vertices)):
                raise ValueError(f"edge {s} -> {d} names a vertex the graph does not have")
        return cls(tuple(n for n, _ in vertices), tuple(k for _, k in vertices), tuple(edges))


@dataclass(frozen=True)
class Layout:
    """Where each vertex goes: ``layer[v]`` (0 at the top), ``layers`` (each layer's
    vertices, left to right), and ``back`` (indices of edges that close a cycle)."""

    layer: tuple[int, ...]
    layers: tuple[tuple[int, ...], ...]
    back: frozenset[int]


def back_edges(graph: Graph) -> frozenset[int]:
    """Edges that close a cycle: those a depth-first search (from the vertices without
    inputs first, then in index order) finds going to a vertex still on its stack."""
    n = len(graph.names)
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    fed = [False] * n
    for j, (s, d, _) in enumerate(graph.edges):
        out[s].append((d, j))
        fed[d] = True
    state = [0] * n  # 0: not seen, 1: on the stack, 2: done
    back: set[int] = set()
    for root in [v for v in range(n) if not fed[v]] + list(range(n)):
        if state[root]:
            continue
        state[root] = 1
        stack = [(root, iter(out[root]))]
        while stack:
            v, todo = stack[-1]
            for d, j in todo:
                if state[d] == 1:
                    back.add(j)
                elif state[d] == 0:
                    state[d] = 1
                    stack.append((d, iter(out[d])))
                    break
            else:
                state[v] = 2
                stack.pop()
    return frozenset(back)


def layout(graph: Graph, sweeps: int = 4) -> Layout:
    """Longest-path layers without the back edges, then ``sweeps`` barycentre passes
    (alternately down and up) over the order within each layer."""
    n = len(graph.names)
    back = back_edges(graph)
    forward = [(s, d) for j, (s, d, _) in enumerate(graph.edges) if j not in back]
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for s, d in forward:
        succs[s].append(d)
        preds[d].append(s)
    layer = [0] * n
    waiting = [len(p) for p in preds]
    ready = [v for v in range(n) if not waiting[v]]
    while ready:  # Kahn's order: the forward edges form a DAG
        v = ready.pop()
        for d in succs[v]:
            layer[d] = max(layer[d], layer[v] + 1)
            waiting[d] -= 1
            if not waiting[d]:
                ready.append(d)
    layers: list[list[int]] = [[] for _ in range(max(layer, default=-1) + 1)]
    for v in range(n):
        layers[layer[v]].append(v)
    for sweep in range(sweeps):
        if sweep % 2 == 0:
            _sweep(layers, range(1, len(layers)), preds)
        else:
            _sweep(layers, range(len(layers) - 2, -1, -1), succs)
    return Layout(tuple(layer), tuple(tuple(vs) for vs in layers), back)


def _sweep(layers: list[list[int]], order: range, near: list[list[int]]) -> None:
    """Sort each layer of ``order`` by the mean position of each vertex's ``near``
    neighbours (those already placed in this sweep), ties and loners where they were."""
    where = _coordinates(layers)
    for k in order:

        def barycentre(v: int) -> tuple[float, float]:
            others = near[v]
            mean = sum(where[u] for u in others) / len(others) if others else where[v]
            return mean, where[v]

        layers[k].sort(key=barycentre)
        where.update(_coordinates([layers[k]]))


def _coordinates(layers: Sequence[Sequence[int]]) -> dict[int, float]:
    """Each vertex's position in its layer, centred on 0 (layers of different widths)."""
    return {v: i - (len(vs) - 1) / 2 for vs in layers for i, v in enumerate(vs)}


def shade(value: float | None) -> str:
    """A box's fill for a value in ``[0, 1]`` (clipped): white to orange-red; ``None``
    (no value) is white."""
    if value is None:
        return "#ffffff"
    x = min(1.0, max(0.0, value))
    r, g, b = (round(255 + (c - 255) * x) for c in (244, 109, 67))
    return f"#{r:02x}{g:02x}{b:02x}"


@dataclass(frozen=True)
class _Box:
    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


def svg(
    graph: Graph | Mapping[str, Any],
    labels: Mapping[int, str] | None = None,
    values: Mapping[int, float] | None = None,
    title: str | None = None,
) -> str:
    """The graph as one ``<svg>`` element (no external references, no script): a box
    per vertex with its name and ``labels[i]`` (e.g. ``"CP 0.42"``), filled by
    ``shade(values[i])``; edges as arrows, marked with their channel's kind unless it is
    ``pipeline``. Ids as the module's docstring lists them."""
    g = graph if isinstance(graph, Graph) else Graph.parse(graph)
    labels = labels or {}
    values = values or {}
    lay = layout(g)
    boxes: dict[int, _Box] = {}
    rows = []
    y = float(_MARGIN)
    for vs in lay.layers:
        sizes = [_size(g, v, labels.get(v, "")) for v in vs]
        height = max((h for _, h in sizes), default=0.0)
        rows.append((vs, sizes, y, height))
        y += height + _GAP_Y
    width = max(
        (sum(w for w, _ in sizes) + _GAP_X * (len(sizes) - 1) for _, sizes, _, _ in rows),
        default=0.0,
    )
    for vs, sizes, top, height in rows:
        x = _MARGIN + (width - (sum(w for w, _ in sizes) + _GAP_X * (len(sizes) - 1))) / 2
        for v, (w, h) in zip(vs, sizes):
            boxes[v] = _Box(x, top + (height - h) / 2, w, h)
            x += w + _GAP_X
    lanes = {j: k for k, j in enumerate(sorted(lay.back))}  # one lane per feedback edge
    total_w = width + 2 * _MARGIN + _LANE * (len(lanes) + 1 if lanes else 0)
    total_h = max(y - _GAP_Y + _MARGIN, 2 * _MARGIN)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timely-graph" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" width="{total_w:.0f}" '
        f'height="{total_h:.0f}" font-family="monospace" role="img">',
        f"<title>{escape(title or 'dataflow graph')}</title>",
        '<defs><marker id="timely-arrow" viewBox="0 0 8 8" refX="8" refY="4" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>',
        '<g class="edges" fill="none" stroke="#555" stroke-width="1.2">',
    ]
    right = _MARGIN + width
    for j, (s, d, channel) in enumerate(g.edges):
        parts.append(_edge(j, boxes[s], boxes[d], channel, lanes.get(j), right))
    parts.append("</g>")
    parts.append('<g class="vertices">')
    for v in range(len(g.names)):
        parts.append(_vertex(g, v, boxes[v], labels.get(v, ""), values.get(v)))
    parts.append("</g></svg>")
    return "\n".join(parts)


def _system(kind: str) -> bool:
    return kind in SYSTEM_KINDS


def _size(g: Graph, v: int, label: str) -> tuple[float, float]:
    small = _system(g.kinds[v])
    char = 6.0 if small else 7.2
    chars = max(len(_short(g.names[v])), len(label), 10 if small else 16)
    return chars * char + 2 * _PAD, (34.0 if small else 42.0)


def _short(name: str) -> str:
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"


def _vertex(g: Graph, v: int, box: _Box, label: str, value: float | None) -> str:
    name, kind = g.names[v], g.kinds[v]
    small = _system(kind)
    size = 10 if small else 12
    classes = " ".join(["vertex", *(["system"] if small else []), f"kind-{_css(kind)}"])
    fill = "#eeeeee" if small and value is None else shade(value)
    stroke = "#999" if small else "#333"
    return (
        f'<g id="v-{v}" class="{classes}" data-name="{escape(name)}" '
        f'data-kind="{escape(kind)}"><title>{escape(name)} ({escape(kind)})</title>'
        f'<rect id="v-{v}-box" x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" '
        f'height="{box.h:.1f}" rx="5" fill="{fill}" stroke="{stroke}"/>'
        f'<text x="{box.cx:.1f}" y="{box.y + box.h / 2 - 3:.1f}" text-anchor="middle" '
        f'font-size="{size}" fill="{"#555" if small else "#000"}">{escape(_short(name))}</text>'
        f'<text id="v-{v}-label" class="label" x="{box.cx:.1f}" '
        f'y="{box.y + box.h / 2 + size:.1f}" text-anchor="middle" font-size="{size - 1}" '
        f'fill="#333">{escape(label)}</text></g>'
    )


def _edge(j: int, src: _Box, dst: _Box, channel: str, lane: int | None, right: float) -> str:
    """A forward edge straight down. A back edge (the ``lane``-th) runs in the gaps
    between rows, where no box is: down out of its source, right to a lane of its own
    past every box, up to the gap above its target, and down into it."""
    back = lane is not None
    if lane is not None:
        x = right + _LANE * (lane + 1)
        x1, y1 = src.x + src.w - 12, src.y + src.h
        x2, y2 = dst.x + dst.w - 12, dst.y
        below, above = y1 + _GAP_Y / 2 - 2 * lane, y2 - _GAP_Y / 2 + 2 * lane
        path = f"M{x1:.1f},{y1:.1f} V{below:.1f} H{x:.1f} V{above:.1f} H{x2:.1f} V{y2:.1f}"
        mx, my = x + 3, (below + above) / 2
        extra = ' stroke-dasharray="4 3" stroke-linejoin="round"'
    else:
        x1, y1, x2, y2 = src.cx, src.y + src.h, dst.cx, dst.y
        path = f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}"
        mx, my = (x1 + x2) / 2 + 4, (y1 + y2) / 2 + 4
        extra = ""
    text = (
        f'<text x="{mx:.1f}" y="{my:.1f}" font-size="10" font-style="italic" fill="#333" '
        f'stroke="#fff" stroke-width="3" paint-order="stroke">{escape(channel)}</text>'
        if channel != "pipeline"
        else ""
    )
    return (
        f'<g id="e-{j}" class="edge{" back" if back else ""}">'
        f'<path d="{path}" marker-end="url(#timely-arrow)"{extra}/>{text}</g>'
    )


def _css(kind: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", kind.lower())
