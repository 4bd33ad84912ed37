"""The documentation site: its code runs and its pictures are what the code draws.

Every ```` ```python ```` block of ``docs/`` and of ``README.md`` (the site's front page)
runs, each on its own in a fresh namespace, in a temporary directory. A comment on the
line before a block says what it needs, comma-separated:

- ``<!-- docs-test: ray -->``: the session's local Ray (the ``ray_local`` fixture);
- ``<!-- docs-test: spark -->``: the session's local Spark (the ``spark`` fixture);
- ``<!-- docs-test: prints -->``: what the block prints must be the next
  ```` ```text ```` block of the page (prose such as "It printed:" may stand between).

``<!-- docs-test: output -->`` before a ```` ```text ```` block marks it as the output of
the Python block before it (the README, where the example asserts its results, shows
it that way). ``mkdocs build --strict`` (``scripts/test.sh``) checks links and API
references; these tests check what the build cannot.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]
MARKS = {"ray", "spark", "prints"}

_FENCE = re.compile(r"^```(\S*)\s*$")
_MARK = re.compile(r"^<!-- docs-test: ([a-z, ]+) -->$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the block's first line of code, 1-based
    language: str
    code: str
    marks: frozenset[str]

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` with the marks on the line before it."""
    lines = page.read_text().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        before = lines[i - 1] if i else ""
        mark = _MARK.match(before)
        marks = frozenset(m.strip() for m in mark.group(1).split(",")) if mark else frozenset()
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        assert end < len(lines), f"{page}:{i + 1}: a code block that never ends"
        code = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(page, i + 2, opening.group(1), code, marks))
        i = end + 1
    return blocks


def expected_output(blocks: list[Block], k: int) -> str | None:
    """The ```text block after ``blocks[k]`` when it is marked as its output."""
    block = blocks[k]
    if "prints" not in block.marks:
        return None
    assert k + 1 < len(blocks) and blocks[k + 1].language == "text", (
        f"{block.name}: marked 'prints' but no ```text block follows"
    )
    return blocks[k + 1].code


def python_blocks() -> list[tuple[Block, str | None]]:
    found = []
    for page in PAGES:
        blocks = fenced_blocks(page)
        for k, block in enumerate(blocks):
            if block.language == "python":
                found.append((block, expected_output(blocks, k)))
    return found


BLOCKS = python_blocks()


@pytest.mark.parametrize(
    "block, output",
    [
        # The Spark page's blocks start Spark (28 s): in CI's profile.
        pytest.param(b, o, id=b.name, marks=pytest.mark.ci if "spark.md" in b.name else ())
        for b, o in BLOCKS
    ],
)
def test_python_block_runs(
    block: Block,
    output: str | None,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unknown = block.marks - MARKS
    assert not unknown, f"{block.name}: unknown docs-test marks {sorted(unknown)}"
    if "ray" in block.marks:
        request.getfixturevalue("ray_local")
    spark = request.getfixturevalue("spark") if "spark" in block.marks else None
    tables_before = {t.name for t in spark.catalog.listTables()} if spark else set()
    monkeypatch.chdir(tmp_path)
    # Padded so that a traceback's line numbers are the page's.
    source = "\n" * (block.line - 1) + block.code
    printed = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(source, str(block.page), "exec"), namespace)
    finally:
        if spark is not None:  # the session is shared: a page's tables must not leak
            for table in spark.catalog.listTables():
                if table.name not in tables_before:
                    spark.sql(f"DROP TABLE IF EXISTS `{table.name}`")
    if output is not None:
        assert printed.getvalue().strip() == output.strip(), (
            f"{block.name} printed something else than the page shows"
        )


def test_every_python_block_is_run() -> None:
    """A block fenced as ``py`` or ``python3`` would be shown as Python and never run;
    marks must stand right above a block, and output marks must follow a Python block."""
    assert len(BLOCKS) >= 20, "the pages should show code"
    for page in PAGES:
        blocks = fenced_blocks(page)
        for k, block in enumerate(blocks):
            assert block.language not in ("py", "python3", "pycon", "ipython"), (
                f"{block.name}: fence Python as ```python, which the tests run"
            )
            if "output" in block.marks:
                assert block.language == "text" and k and blocks[k - 1].language == "python", (
                    f"{block.name}: 'output' marks a ```text block after a ```python one"
                )
        text = page.read_text()
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("<!-- docs-test"):
                assert _MARK.match(line), f"{page}:{i + 1}: malformed mark {line!r}"
                assert i + 1 < len(lines) and _FENCE.match(lines[i + 1]), (
                    f"{page}:{i + 1}: a docs-test mark must stand on the line before a block"
                )


# -- names and paths the pages mention --------------------------------------------------------
PACKAGES = ("timely", "progress", "operators", "connectors", "analysis", "control")
FOLDERS = (*PACKAGES, "examples", "scripts", "benchmarks", "tests", "docs")
ENTRY_POINT_GROUPS = {"timely.operators", "timely.commands", "timely.monitors"}
_CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _prose(page: Path) -> str:
    """``page`` without its fenced blocks (those run, or are output)."""
    return re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)


def _resolves(dotted: str) -> bool:
    """``dotted`` is a module, or an attribute path inside one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_mentioned_modules_and_files_exist() -> None:
    """Every module, name or file of the repository that a page names in backticks
    exists: when code moves (as ``timely/``'s modules into subpackages), this names the
    pages to update."""
    wrong = []
    for page in PAGES:
        for span in _CODE_SPAN.findall(_prose(page)):
            token = span.split("(")[0].split(" ")[0].rstrip(",;:")
            if token.startswith(tuple(f"{f}/" for f in FOLDERS)):
                path = token.split("#")[0].rstrip("/").replace("*", "")
                if not any(ROOT.glob(path + "*")):
                    wrong.append(f"{page.relative_to(ROOT)}: {token}")
            elif (
                re.fullmatch(rf"(?:{'|'.join(PACKAGES)})(?:\.\w+)+", token)
                and token not in ENTRY_POINT_GROUPS
                and not _resolves(token)
            ):
                wrong.append(f"{page.relative_to(ROOT)}: {token}")
    assert not wrong, "pages name what does not exist:\n" + "\n".join(wrong)


def test_the_reference_covers_the_public_names() -> None:
    """Every name ``timely`` and ``progress`` export, every operator, has its entry."""
    import operators
    import progress
    import timely

    reference = {
        name
        for page in (DOCS / "reference").glob("*.md")
        for name in re.findall(r"^::: ([\w.]+)$", page.read_text(), flags=re.M)
    }
    for package in (timely, progress):
        for name in package.__all__:
            assert f"{package.__name__}.{name}" in reference, f"no reference for {name}"
    for name in operators.__all__:
        if name[0].islower() and name not in ("owner", "repartition"):  # Stream methods
            assert f"operators.{name}" in reference, f"no reference for operators.{name}"


# -- the pictures ----------------------------------------------------------------------------
def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _texts(svg: Path) -> list[str]:
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg", f"{svg} is not an SVG document"
    return sorted("".join(e.itertext()) for e in root.iter("{http://www.w3.org/2000/svg}text"))


def test_concept_pictures_are_what_the_script_draws(tmp_path: Path) -> None:
    """``scripts/draw_concepts.py`` writes valid SVG, the same pictures as the committed
    ones: byte for byte with the matplotlib that drew those, the same text otherwise."""
    draw = _script("draw_concepts")
    written = draw.main(tmp_path)
    committed = sorted(p.name for p in draw.OUT.glob("*.svg"))
    assert sorted(p.name for p in written) == committed
    for path in written:
        ours = draw.OUT / path.name
        assert _texts(path) == _texts(ours), f"{ours} is out of date: run {draw.__file__}"
        if f"Matplotlib v{matplotlib.__version__}," in ours.read_text():
            assert path.read_bytes() == ours.read_bytes(), (
                f"{ours} is out of date: run .venv/bin/python scripts/draw_concepts.py"
            )
    for page in ("timestamps", "frontiers", "loops", "exchange"):
        assert f"img/{page}.svg" in (DOCS / "concepts" / f"{page}.md").read_text()


# -- the site's build -------------------------------------------------------------------
def test_the_test_command_builds_the_site_strictly() -> None:
    """``scripts/test.sh`` builds the site with ``--strict`` and without ``-q``/``--quiet``:
    mkdocs drops warnings at that log level before strict mode counts them, so a broken
    link would pass."""
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    build = next(line for line in test_sh.splitlines() if "mkdocs build" in line)
    assert "--strict" in build
    assert not re.search(r"\s(-q|--quiet)\b", build), build
    assert "site/" in (ROOT / ".gitignore").read_text().splitlines()


# -- the site's hooks ----------------------------------------------------------------------
def test_hooks_point_repository_links_at_the_site() -> None:
    hooks = _script("mkdocs_hooks")
    readme = (
        "[start](docs/getting-started.md) [map](ARCHITECTURE.md#layers) "
        "[bench](benchmarks/README.md) [code](timely/worker/loop.py) [gone](nowhere.md) "
        "[web](https://example.org) ![shot](docs/live-page.png)\n"
        "```text\n[kept](docs/getting-started.md)\n```\n"
    )
    assert hooks.relink(readme, "README.md") == (
        "[start](getting-started.md) [map](architecture.md#layers) "
        "[bench](benchmarks/report.md) code [gone](nowhere.md) "
        "[web](https://example.org) ![shot](live-page.png)\n"
        "```text\n[kept](docs/getting-started.md)\n```\n"
    )
    report = "[t](TRANSPORT.md) ![plot](results/ysb.svg) [up](../README.md)"
    assert hooks.relink(report, "benchmarks/README.md") == (
        "[t](transport.md) ![plot](results/ysb.svg) [up](../index.md)"
    )
