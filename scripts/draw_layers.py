"""Draw the layers of the code as an SVG (ARCHITECTURE.md's picture), from the contracts.

    .venv/bin/python scripts/draw_layers.py [docs/layers.svg]

The rows and boxes come from the import contracts in pyproject.toml (``[tool.importlinter]``):
the packages' ``layers`` contract, and ``timely``'s own, drawn inside the ``timely`` box.
Each box lists the modules in its folder as they are on disk, with a caption from
:data:`CAPTIONS` (or the first line of its docstring). A layer imports only the rows below
it; boxes side by side do not import each other. The picture is plain SVG text, the same
for the same tree: ``tests/test_architecture.py`` checks that ``docs/layers.svg`` is what
this script draws now.
"""

from __future__ import annotations

import ast
import sys
from html import escape
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "layers.svg"

CAPTIONS = {
    "analysis": "SnailTrail: critical participation from the event log; the profile, its "
    "report, the live page",
    "control": "DS2: true rates from the event log, scaling decisions, the autoscaler",
    "operators": "the LINQ-like operators, on the public vertex API",
    "connectors": "sources and sinks: collections, files, Parquet, Spark, a paced source",
    "timely": "the runtime",
    "progress": "timestamps, path summaries, antichains, reachability, the pointstamp "
    "tracker, the progress exchange; stdlib only",
    "timely.__main__": "python -m timely",
    "timely.cli": "the command line, and the subcommands packages add",
    "timely.dataflow": "Dataflow, Stream: the graph a user builds, and run()",
    "timely.observe": "monitors that read a running session",
    "timely.backends": "what hosts the workers: this process, or Ray actors",
    "timely.session": "the driver's side of a run: inputs, outputs, checkpoints, recovery, "
    "rescale; what it shows; options checked, backend started",
    "timely.worker": "the step loop; a vertex's context, snapshots and migration, each "
    "behind the narrow interface in ports",
    "timely.graph": "the plan a session runs: specs, the framework's own vertices",
    "timely.checkpoint": "options, store, the driver's coordinator, the adaptive cadence",
    "timely.state": "keyed state per time, in memory or on disk",
    "timely.vertex": "the vertex API",
    "timely.sources": "what a source implements",
    "timely.sinks": "what a sink implements",
    "timely.eventlog": "what workers log, read above",
    "timely.routing": "key -> bin -> worker",
    "timely.comm": "messages, the wire, sockets",
    "timely.errors": "errors that name the step, file:line, time and record",
}

WIDTH = 980
MARGIN = 16
GAP = 10
PAD = 8
NAME_SIZE = 14
TEXT_SIZE = 11
CHAR = 6.1  # the width of a character at TEXT_SIZE, for wrapping
MONO = 6.4  # of one in the modules' monospace
LINE = 14
FILL = {"outer": "#eef2f7", "timely": "#ffffff", "box": "#dbe7f5", "base": "#e4efe0"}


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return found


def layers(contract_id: str) -> list[list[str]]:
    """The rows of one layers contract, top first, each a list of its siblings."""
    contract = next(c for c in contracts() if c["id"] == contract_id)
    rows = []
    for raw in contract["layers"]:  # type: ignore[attr-defined]
        sep = "|" if "|" in raw else ":"
        rows.append([part.strip() for part in raw.split(sep)])
    return rows


def path_of(module: str) -> Path:
    base = ROOT / module.replace(".", "/")
    return base if base.is_dir() else base.with_suffix(".py")


def contents(module: str) -> str:
    """A package's modules: in the order of its own layers contract if it has one
    (``a > b · c``: ``a`` imports ``b`` and ``c``, which do not import each other),
    else as in its folder (sub-packages with a slash)."""
    path = path_of(module)
    if not path.is_dir():
        return ""
    inner = [c for c in contracts() if c.get("containers") == [module]]
    if inner:
        return " > ".join(" \u00b7 ".join(siblings) for siblings in layers(str(inner[0]["id"])))
    names = []
    for p in sorted(path.iterdir()):
        if p.name.startswith("__"):
            continue
        if p.suffix == ".py":
            names.append(p.stem)
        elif p.is_dir() and (p / "__init__.py").exists():
            names.append(p.name + "/")
    return " \u00b7 ".join(names)


def caption(module: str) -> str:
    if module in CAPTIONS:
        return CAPTIONS[module]
    path = path_of(module)
    source = (path / "__init__.py" if path.is_dir() else path).read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    return doc.split("\n")[0].rstrip(".:")


def wrap(text: str, width: float, char: float = CHAR) -> list[str]:
    per_line = max(8, int(width / char))
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > per_line:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


class Box:
    def __init__(self, module: str, width: float) -> None:
        self.module = module
        self.width = width
        inner = width - 2 * PAD
        self.name = module.split(".")[-1] + ("/" if path_of(module).is_dir() else ".py")
        self.caption = wrap(caption(module), inner)
        self.contents = wrap(contents(module), inner, MONO)
        self.height = PAD + NAME_SIZE + 4 + LINE * (len(self.caption) + len(self.contents)) + PAD

    def draw(self, x: float, y: float, height: float, fill: str) -> list[str]:
        out = [
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{self.width:.1f}" height="{height:.1f}" '
            f'rx="6" fill="{fill}" stroke="#5b7190"/>',
            f'<text x="{x + PAD:.1f}" y="{y + PAD + NAME_SIZE - 2:.1f}" class="name">'
            f"{escape(self.name)}</text>",
        ]
        ty = y + PAD + NAME_SIZE + 2
        for line in self.caption:
            ty += LINE
            out.append(f'<text x="{x + PAD:.1f}" y="{ty - 3:.1f}">{escape(line)}</text>')
        for line in self.contents:
            ty += LINE
            out.append(
                f'<text x="{x + PAD:.1f}" y="{ty - 3:.1f}" class="mod">{escape(line)}</text>'
            )
        return out


def row(modules: list[str], x: float, width: float, y: float, fill: str) -> tuple[list[str], float]:
    """One layer: its siblings side by side across ``width``; the SVG and its height."""
    each = (width - GAP * (len(modules) - 1)) / len(modules)
    boxes = [Box(m, each) for m in modules]
    height = max(b.height for b in boxes)
    out: list[str] = []
    for i, b in enumerate(boxes):
        out += b.draw(x + i * (each + GAP), y, height, fill)
    return out, height


def draw() -> str:
    x0, inner = MARGIN + 34, WIDTH - 2 * MARGIN - 34
    out: list[str] = []
    y = MARGIN + 44
    for packages in layers("packages"):
        if packages != ["timely"]:
            part, h = row(
                packages, x0, inner, y, FILL["base" if packages == ["progress"] else "box"]
            )
            out += part
            y += h + GAP
            continue
        top = y
        head = Box("timely", inner)
        y += PAD + NAME_SIZE + 4 + LINE * len(head.caption) + 4
        timely_rows: list[str] = []
        for modules in layers("timely"):
            part, h = row(
                [f"timely.{m}" for m in modules], x0 + GAP, inner - 2 * GAP, y, FILL["box"]
            )
            timely_rows += part
            y += h + GAP
        out += head.draw(x0, top, y - top, FILL["timely"])[:1]  # the frame, under the rows
        name_y = top + PAD + NAME_SIZE - 2
        out.append(f'<text x="{x0 + PAD:.1f}" y="{name_y:.1f}" class="name">timely/</text>')
        out += [
            f'<text x="{x0 + PAD + 60:.1f}" y="{top + PAD + NAME_SIZE - 2:.1f}">'
            f"{escape(' '.join(head.caption))}: its subpackages in layers</text>"
        ]
        out += timely_rows
        y += GAP
    height = y + MARGIN
    arrow_x = MARGIN + 14
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="Helvetica, Arial, sans-serif" '
        f'font-size="{TEXT_SIZE}">',
        "<style>.name{font-weight:bold;font-size:14px}"
        ".mod{font-family:Menlo,Consolas,monospace;font-size:10px;fill:#33485f}"
        ".title{font-size:15px;font-weight:bold}</style>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height:.0f}" fill="{FILL["outer"]}"/>',
        f'<text x="{MARGIN}" y="{MARGIN + 14}" class="title">The layers of the code, from '
        "the import contracts in pyproject.toml</text>",
        f'<text x="{MARGIN}" y="{MARGIN + 30}">A row imports only the rows below it; boxes '
        "side by side do not import each other. lint-imports checks it in the test command."
        "</text>",
        f'<line x1="{arrow_x}" y1="{MARGIN + 50}" x2="{arrow_x}" y2="{height - MARGIN - 10:.0f}" '
        'stroke="#5b7190" stroke-width="2"/>',
        f'<path d="M {arrow_x - 6} {height - MARGIN - 14:.0f} L {arrow_x} {height - MARGIN:.0f} '
        f'L {arrow_x + 6} {height - MARGIN - 14:.0f} Z" fill="#5b7190"/>',
        f'<text transform="translate({arrow_x - 5} {MARGIN + 150}) rotate(-90)" '
        'text-anchor="end">imports</text>',
    ]
    return "\n".join([*head, *out, "</svg>"]) + "\n"


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(draw())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
