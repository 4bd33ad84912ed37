"""Draw the pictures of the documentation's Concepts pages, as SVG.

    .venv/bin/python scripts/draw_concepts.py [DIR]   # default: docs/concepts/img

Every number in them comes from the progress core itself: the order of timestamps from
``progress.less_equal``, the counts and frontiers from a run of ``progress.Tracker``
(the worked example of ``docs/concepts/frontiers.md``, at its step 4), the path
summaries from ``progress.PathSummary``, and the batches between workers from two
``progress.WorkerProgress`` (accumulation on). The files are the same on every run
with the same matplotlib (no dates, fixed ids, text kept as text);
``tests/test_docs.py`` re-draws them and compares.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from progress import (
    Graph,
    GraphBuilder,
    Location,
    PathSummary,
    ProgressBatch,
    Timestamp,
    Tracker,
    Update,
    WorkerProgress,
    less_equal,
    source,
    target,
)

OUT = Path(__file__).resolve().parent.parent / "docs" / "concepts" / "img"
"""Where the pictures go (the Concepts pages show them from there)."""

INK = "#263238"
BLUE = "#1e88e5"
RED = "#d81b60"
GREEN = "#43a047"
GREY = "#9e9e9e"
PALE = "#eceff1"

STYLE: dict[str, Any] = {
    "svg.fonttype": "none",  # text stays text: smaller files, searchable, the page's font
    "svg.hashsalt": "timely-docs",  # fixed ids, so that a re-draw gives the same file
    "font.family": "sans-serif",
    "font.size": 10,
    "text.color": INK,
    "axes.edgecolor": INK,
}


# -- the loop of the worked example ----------------------------------------------------------
def loop_graph() -> tuple[Graph, dict[str, int]]:
    """The graph of ``docs/concepts/frontiers.md``: an input, a loop, an output."""
    b = GraphBuilder()
    ids = {
        "input": b.add_operator("input", inputs=0),
        "enter": b.add_ingress("enter", depth=0),
        "merge": b.add_operator("merge", inputs=2, depth=1),
        "step": b.add_operator("step", depth=1),
        "feedback": b.add_feedback("feedback", depth=1),
        "leave": b.add_egress("leave", depth=1),
        "output": b.add_operator("output", outputs=0),
    }
    for a, port_a, z, port_z in EDGES:
        b.add_edge(source(ids[a], port_a), target(ids[z], port_z))
    return b.build(), ids


EDGES = [
    ("input", 0, "enter", 0),
    ("enter", 0, "merge", 0),
    ("merge", 0, "step", 0),
    ("step", 0, "feedback", 0),
    ("feedback", 0, "merge", 1),
    ("step", 0, "leave", 0),
    ("leave", 0, "output", 0),
]

WORKED_EXAMPLE: list[tuple[str, list[tuple[str, bool, int, Timestamp, int]]]] = [
    ("the input holds a capability at epoch 0", [("input", True, 0, (0,), +1)]),
    (
        "it sends a batch at epoch 0 and moves on to epoch 1",
        [("enter", False, 0, (0,), +1), ("input", True, 0, (0,), -1), ("input", True, 0, (1,), +1)],
    ),
    (
        "enter and merge pass the batch on, into the loop: (0, 0)",
        [("enter", False, 0, (0,), -1), ("step", False, 0, (0, 0), +1)],
    ),
    (
        "step sends a batch round the loop and one out of it",
        [
            ("step", False, 0, (0, 0), -1),
            ("feedback", False, 0, (0, 0), +1),
            ("leave", False, 0, (0, 0), +1),
        ],
    ),
]
"""The first four steps of the worked example: ``(node, is_output, port, time, delta)``."""

POS = {
    "input": (0.0, 0.0),
    "enter": (1.9, 0.0),
    "merge": (3.8, 0.0),
    "step": (5.7, 0.0),
    "feedback": (4.75, -1.5),
    "leave": (7.6, 0.0),
    "output": (9.5, 0.0),
}
BOX_W, BOX_H = 1.3, 0.62


def _node(ax: Axes, name: str, sub: str | None = None) -> None:
    """A node's box; ``sub``, in blue under its name, is the frontier at its input."""
    x, y = POS[name]
    ax.add_patch(
        FancyBboxPatch(
            (x - BOX_W / 2, y - BOX_H / 2),
            BOX_W,
            BOX_H,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor="white",
            edgecolor=INK,
            linewidth=1.2,
            zorder=3,
        )
    )
    if sub is None:
        ax.text(x, y, name, ha="center", va="center", zorder=4, fontsize=10)
        return
    ax.text(x, y + 0.12, name, ha="center", va="center", zorder=4, fontsize=10)
    ax.text(x, y - 0.15, sub, ha="center", va="center", zorder=4, fontsize=8.5, color=BLUE)


def _port(name: str, output: bool, port: int = 0) -> tuple[float, float]:
    """Where a node's port is drawn: outputs on the right, inputs on the left (merge's
    second input, from the feedback, underneath; the feedback's ports on its sides)."""
    x, y = POS[name]
    if name == "feedback":
        return (x - BOX_W / 2, y) if output else (x + BOX_W / 2, y)
    if name == "merge" and not output and port == 1:
        return (x, y - BOX_H / 2)
    if name == "step" and output:
        return (x + BOX_W / 2, y)
    return (x + BOX_W / 2, y) if output else (x - BOX_W / 2, y)


def _edge(ax: Axes, a: str, z: str, port: int = 0) -> None:
    start, end = _port(a, True), _port(z, False, port)
    if a == "step" and z == "feedback":
        start = (POS["step"][0], POS["step"][1] - BOX_H / 2)
        style = "arc3,rad=-0.35"
    elif a == "feedback":
        style = "arc3,rad=-0.35"
    else:
        style = "arc3"
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            connectionstyle=style,
            arrowstyle="-|>",
            mutation_scale=12,
            color=INK,
            linewidth=1.2,
            zorder=2,
            shrinkA=0,
            shrinkB=0,
        )
    )


def _loop_scope(ax: Axes, label: str) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (2.95, -2.15),
            3.6,
            2.65,
            boxstyle="round,pad=0.02,rounding_size=0.15",
            facecolor=PALE,
            edgecolor=GREY,
            linestyle="--",
            linewidth=1,
            zorder=0,
        )
    )
    ax.text(3.05, -2.05, label, ha="left", va="bottom", fontsize=9, color=GREY)


def _graph_axes(
    ax: Axes,
    scope_label: str,
    top: float = 0.9,
    bottom: float = -2.3,
    subs: dict[str, str] | None = None,
) -> None:
    ax.set_xlim(-0.75, 10.25)
    ax.set_ylim(bottom, top)
    ax.set_aspect("equal")
    ax.axis("off")
    _loop_scope(ax, scope_label)
    for name in POS:
        _node(ax, name, (subs or {}).get(name))
    for a, _, z, port in EDGES:
        _edge(ax, a, z, port)


def _fmt_time(t: Timestamp) -> str:
    return str(tuple(t))  # as Python prints it, as the pages' printed output does


def _fmt_frontier(f: Sequence[Timestamp]) -> str:
    return "{" + ", ".join(_fmt_time(t) for t in f) + "}" if f else "{}"


def run_worked_example(steps: int) -> tuple[Graph, dict[str, int], Tracker]:
    """The tracker after the first ``steps`` steps of the worked example."""
    graph, ids = loop_graph()
    tracker = Tracker(graph)
    for _, updates in WORKED_EXAMPLE[:steps]:
        for name, output, port, time, delta in updates:
            loc = source(ids[name], port) if output else target(ids[name], port)
            tracker.update(loc, time, delta)
        tracker.propagate_all()
    return graph, ids, tracker


def draw_frontiers(path: Path) -> None:
    """Step 4 of the worked example: the live pointstamps with their counts (red), the
    frontier at every input (blue), and step's frontier on the (epoch, round) grid."""
    graph, ids, tracker = run_worked_example(4)
    fig = plt.figure(figsize=(10.4, 3.9))
    ax = fig.add_axes((0.0, 0.0, 0.74, 1.0))
    subs = {
        graph.nodes[n].name: _fmt_frontier(tracker.frontier(target(n)))
        for n in ids.values()
        if graph.nodes[n].input_depths
    }
    _graph_axes(ax, "loop scope: times (epoch, round)", top=1.5, bottom=-2.3, subs=subs)
    # Counts: every live pointstamp, as a badge at its port.
    for loc in graph.locations:
        for t in tracker.pointstamp_frontier(loc):
            name = graph.nodes[loc.node].name
            x, y = _port(name, loc.is_source, loc.port)
            if name == "feedback":
                at = (x + 0.95, y - 0.05)
            else:
                at = (x + (0.25 if loc.is_source else -0.25), y + 0.62)
            ax.annotate(
                f"{_fmt_time(t)}: {tracker.count(loc, t):+d}",
                (x, y),
                xytext=at,
                ha="center",
                va="center",
                fontsize=9,
                color="white",
                bbox={"boxstyle": "round,pad=0.25", "facecolor": RED, "edgecolor": RED},
                arrowprops={"arrowstyle": "-", "color": RED, "linewidth": 1},
                zorder=6,
            )
    ax.text(-0.7, 1.35, "red: live pointstamps and their counts", color=RED, fontsize=9)
    ax.text(
        -0.7,
        1.1,
        "blue: the frontier at each node's input (merge: its first)",
        color=BLUE,
        fontsize=9,
    )
    # Step's frontier as a region of the (epoch, round) grid.
    grid = fig.add_axes((0.8, 0.2, 0.19, 0.62))
    frontier = tracker.frontier(target(ids["step"]))
    _grid(grid, 3, 3)
    for e in range(3):
        for r in range(3):
            later = any(less_equal(f, (e, r)) for f in frontier)
            colour = BLUE if (e, r) in frontier else (PALE if later else GREEN)
            grid.add_patch(
                Rectangle((e - 0.42, r - 0.42), 0.84, 0.84, facecolor=colour, edgecolor="none")
            )
            grid.text(
                e,
                r,
                f"{e},{r}",
                ha="center",
                va="center",
                fontsize=8.5,
                color="white" if colour != PALE else INK,
            )
    grid.set_title(f"at step: {_fmt_frontier(frontier)}", fontsize=9, color=BLUE)
    grid.text(
        1.0,
        -1.25,
        "green: complete · blue: the frontier\ngrey: may still arrive",
        ha="center",
        va="top",
        fontsize=8,
    )
    _save(fig, path)


def _grid(ax: Axes, epochs: int, rounds: int) -> None:
    ax.set_xlim(-0.6, epochs - 0.4)
    ax.set_ylim(-0.6, rounds - 0.4)
    ax.set_aspect("equal")
    ax.set_xticks(range(epochs))
    ax.set_yticks(range(rounds))
    ax.set_xlabel("epoch")
    ax.set_ylabel("round")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def draw_timestamps(path: Path) -> None:
    """The product order around one time, and the lexicographic order that extends it."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 4.2))
    pivot = (1, 2)
    epochs, rounds = 4, 4
    _grid(left, epochs, rounds)
    for e in range(epochs):
        for r in range(rounds):
            t = (e, r)
            if e + 1 < epochs:
                _hasse(left, t, (e + 1, r))
            if r + 1 < rounds:
                _hasse(left, t, (e, r + 1))
    for e in range(epochs):
        for r in range(rounds):
            t = (e, r)
            if t == pivot:
                colour = INK
            elif less_equal(t, pivot):
                colour = GREEN
            elif less_equal(pivot, t):
                colour = BLUE
            else:
                colour = GREY
            left.scatter([e], [r], s=420, color=colour, zorder=3)
            left.text(e, r, f"{e},{r}", ha="center", va="center", color="white", fontsize=8.5)
    left.set_title("product order: (e, r) ≤ (e', r') when e ≤ e' and r ≤ r'", fontsize=9.5)
    left.text(
        1.5,
        -1.45,
        "green: ≤ (1, 2) · blue: ≥ (1, 2) · grey: incomparable",
        ha="center",
        fontsize=8.5,
    )
    _grid(right, epochs, rounds)
    order = sorted((e, r) for e in range(epochs) for r in range(rounds))
    xs = [t[0] for t in order]
    ys = [t[1] for t in order]
    right.plot(xs, ys, color=GREY, linewidth=1, zorder=1)
    for i, (e, r) in enumerate(order):
        right.scatter([e], [r], s=420, color=BLUE, zorder=3)
        right.text(e, r, str(i + 1), ha="center", va="center", color="white", fontsize=8.5)
    right.set_title("tuple order (epoch first): a total order that extends it", fontsize=9.5)
    right.text(
        1.5,
        -1.45,
        "sorts and heaps use it: (0, 3) before (1, 0)",
        ha="center",
        fontsize=8.5,
    )
    fig.subplots_adjust(left=0.07, right=0.98, top=0.9, bottom=0.22, wspace=0.3)
    _save(fig, path)


def _hasse(ax: Axes, a: Timestamp, b: Timestamp) -> None:
    assert less_equal(a, b)
    ax.annotate(
        "",
        xy=(b[0], b[1]),
        xytext=(a[0], a[1]),
        arrowprops={"arrowstyle": "-|>", "color": GREY, "shrinkA": 11, "shrinkB": 11},
        zorder=1,
    )


def draw_loops(path: Path) -> None:
    """The loop's nodes with their path summaries, and a record's time along the way."""
    fig = plt.figure(figsize=(9.6, 3.7))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    _graph_axes(ax, "loop scope", top=1.5, bottom=-2.4)
    summaries = {
        "enter": PathSummary.ingress(),
        "feedback": PathSummary.feedback(),
        "leave": PathSummary.egress(),
    }
    record = {"enter": (3,), "feedback": (3, 1), "leave": (3, 2)}
    for name, summary in summaries.items():
        x, y = POS[name]
        before = record[name]
        after = summary.results_in(before)
        assert after is not None
        words = {"enter": "ingress", "feedback": "feedback", "leave": "egress"}[name]
        ax.text(
            x,
            y + 0.55 if name != "feedback" else y - 0.55,
            f"{words}: {_fmt_time(before)} → {_fmt_time(after)}",
            ha="center",
            va="center",
            fontsize=9,
            color=BLUE,
        )
    labels = [
        ((0.95, 0.08), "(3,)"),
        ((2.85, 0.08), "(3, 0)"),
        ((4.75, 0.08), "(3, r)"),
        ((6.65, 0.08), "(3, 2)"),
        ((8.55, 0.08), "(3,)"),
        ((3.4, -1.2), "(3, r + 1)"),
    ]
    for (x, y), text in labels:
        ax.text(x, y, text, ha="center", va="bottom", fontsize=8.5, color=RED)
    ax.text(
        -0.7,
        1.3,
        "red: the time of a record of epoch 3 on each edge (it leaves in round 2)",
        fontsize=9,
        color=RED,
    )
    ax.text(-0.7, 1.05, "blue: each node's path summary, applied", fontsize=9, color=BLUE)
    _save(fig, path)


# -- two workers exchanging progress ---------------------------------------------------------
def exchange_run() -> tuple[
    Graph, list[tuple[int, str, ProgressBatch | None, list[Update]]], list[str]
]:
    """Two workers, input -> map -> count, one epoch: each worker's steps, the batch each
    flushed (None: held back) and what it then holds, and each worker's view at the end."""
    b = GraphBuilder()
    inp = b.add_operator("input", inputs=0)
    mapped = b.add_operator("map")
    count = b.add_operator("count", outputs=0)
    b.add_edge(source(inp), target(mapped))
    b.add_edge(source(mapped), target(count))
    graph = b.build()
    cap = (source(inp), (0,))
    workers = [WorkerProgress(w, 2, graph, [cap]) for w in range(2)]
    send: list[Update] = [
        ((target(mapped), (0,)), +2),  # one batch to each worker's map
        ((source(inp), (0,)), -1),
        ((source(inp), (1,)), +1),
    ]
    consume: list[Update] = [((target(mapped), (0,)), -2), ((target(count), (0,)), +2)]
    counted: list[Update] = [((target(count), (0,)), -2)]
    script: list[tuple[int, str, list[Update], bool]] = [
        (0, "input sends epoch 0, moves to 1", send, True),
        (1, "input sends epoch 0, moves to 1", send, True),
        (1, "map takes in 2 batches", consume, False),
        (1, "count takes in 2 batches", counted, True),
        (0, "map takes in 2 batches", consume, False),
        (0, "count takes in 2 batches", counted, True),
    ]
    log: list[tuple[int, str, ProgressBatch | None, list[Update]]] = []
    for w, what, updates, idle in script:
        workers[w].record(updates)
        batch = workers[w].flush(idle=idle)
        log.append((w, what, batch, workers[w].pending()))
        if batch is not None:
            for receiver in workers:
                receiver.receive(batch)
    views = []
    for worker in workers:
        live = ", ".join(f"{_loc(graph, loc)} {_fmt_time(t)}" for loc, t in worker.view.live())
        views.append(f"view: {live} live")
    return graph, log, views


def _fmt_updates(graph: Graph, updates: Sequence[Update]) -> str:
    return " · ".join(f"{_loc(graph, loc)} {_fmt_time(t)} {d:+d}" for (loc, t), d in updates)


def _loc(graph: Graph, loc: Location) -> str:
    return f"{graph.nodes[loc.node].name}.{'out' if loc.is_source else 'in'}"


def draw_exchange(path: Path) -> None:
    """Each worker's steps and the one atomic batch each flush broadcasts."""
    graph, log, views = exchange_run()
    fig = plt.figure(figsize=(8.0, 5.6))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, 10)
    ax.set_ylim(-len(log) - 1.6, 1.0)
    ax.axis("off")
    lanes = {0: 1.45, 1: 8.55}
    for w, x in lanes.items():
        ax.plot([x, x], [0.2, -len(log) - 0.9], color=GREY, linewidth=1.5, zorder=0)
        ax.text(x, 0.5, f"worker {w}", ha="center", va="center", fontsize=11, weight="bold")
    for i, (w, what, batch, held) in enumerate(log):
        y = -i - 0.4
        x = lanes[w]
        ax.add_patch(
            FancyBboxPatch(
                (x - 1.4, y - 0.22),
                2.8,
                0.44,
                boxstyle="round,pad=0.02,rounding_size=0.08",
                facecolor="white",
                edgecolor=INK,
                zorder=3,
            )
        )
        ax.text(x, y, what, ha="center", va="center", fontsize=9, zorder=4)
        other = lanes[1 - w]
        if batch is None:
            ax.text(
                (x + other) / 2,
                y,
                "held back: " + _fmt_updates(graph, held),
                ha="center",
                va="center",
                fontsize=9,
                color=GREY,
                style="italic",
            )
            continue
        ups = _fmt_updates(graph, batch.updates)
        ax.annotate(
            "",
            xy=(other + (1.45 if other < x else -1.45), y - 0.55),
            xytext=(x + (-1.45 if other < x else 1.45), y),
            arrowprops={"arrowstyle": "-|>", "color": BLUE, "linewidth": 1.3},
            zorder=2,
        )
        ax.text(
            (x + other) / 2,
            y - 0.05,
            f"batch {batch.sender}.{batch.seq}\n{ups}",
            ha="center",
            va="bottom",
            fontsize=8.5,
            linespacing=1.1,
            color=BLUE,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
            zorder=4,
        )
    for w, x in lanes.items():
        ax.text(x, -len(log) - 1.2, views[w], ha="center", va="center", fontsize=9, color=GREEN)
    ax.text(
        5.0,
        -len(log) - 0.75,
        "every batch also goes to its sender's own view; map.in (0,) is at 0 in both: "
        "epoch 0 is complete at count",
        ha="center",
        va="center",
        fontsize=9,
    )
    _save(fig, path)


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


PICTURES = {
    "timestamps.svg": draw_timestamps,
    "frontiers.svg": draw_frontiers,
    "loops.svg": draw_loops,
    "exchange.svg": draw_exchange,
}


def main(out: Path = OUT) -> list[Path]:
    """Draw every picture into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.style.context(STYLE):
        for name, draw in PICTURES.items():
            draw(out / name)
            written.append(out / name)
    return written


if __name__ == "__main__":
    for p in main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT):
        print(p)
