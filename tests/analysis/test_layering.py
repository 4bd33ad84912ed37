"""``analysis`` sits on top: it may import the stdlib, ``timely`` and ``progress``, and
nothing in the runtime's packages imports it back (DESIGN.md's layers)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str) -> set[str]:
    """Top-level names of every module the package's files import."""
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def test_analysis_imports_only_the_stdlib_timely_and_progress() -> None:
    outside = _imports("analysis") - set(sys.stdlib_module_names) - {"analysis"}
    assert outside <= {"timely", "progress"}


def test_nothing_below_imports_analysis() -> None:
    for package in ("progress", "timely", "operators", "connectors"):
        assert "analysis" not in _imports(package), package
