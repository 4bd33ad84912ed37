"""``analysis`` sits on top: it may import the stdlib, ``timely`` and ``progress``, and
nothing in the runtime's packages imports it back (DESIGN.md's layers). One third-party
library is allowed, in one module: matplotlib draws the HTML report's plots
(``analysis/plots.py``), and nothing else in the analysis needs it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str, file: str = "*.py") -> set[str]:
    """Top-level names of every module the package's files (``file``: a glob) import."""
    names: set[str] = set()
    for path in (ROOT / package).rglob(file):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def test_analysis_imports_only_the_stdlib_timely_and_progress() -> None:
    outside = _imports("analysis") - set(sys.stdlib_module_names) - {"analysis"}
    assert outside <= {"timely", "progress", "matplotlib"}


def test_only_the_plots_import_matplotlib() -> None:
    others = {p.name for p in (ROOT / "analysis").glob("*.py")} - {"plots.py"}
    assert all("matplotlib" not in _imports("analysis", name) for name in others)
    assert "matplotlib" in _imports("analysis", "plots.py")


def test_nothing_below_imports_analysis() -> None:
    for package in ("progress", "timely", "operators", "connectors"):
        assert "analysis" not in _imports(package), package
