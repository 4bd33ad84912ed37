"""ARCHITECTURE.md is true to the tree: every file and module it names is there, and its
picture of the layers (``docs/layers.svg``) is what ``scripts/draw_layers.py`` draws from
the import contracts now."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "ARCHITECTURE.md"
PACKAGES = ("progress", "timely", "operators", "connectors", "analysis", "control")
ENTRY_POINT_GROUPS = {"timely.commands", "timely.monitors", "timely.operators"}
"""Names of the form ``timely.x`` that are entry point groups, not modules."""


def _code_spans() -> list[str]:
    text = PAGE.read_text()
    return re.findall(r"`([^`\n]+)`", text)


def _paths() -> list[str]:
    """Every span that names a file or folder of the tree (a path with a slash, or a
    file name with a suffix the tree has)."""
    found = []
    for span in _code_spans():
        if " " in span or span.startswith("../") or "<" in span:
            continue
        if "/" in span or re.fullmatch(r"[\w.-]+\.(py|md|svg|toml|sh|html|properties)", span):
            found.append(span)
    return found


def test_every_path_it_names_is_in_the_tree() -> None:
    missing = []
    files = {p.name for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts}
    for path in _paths():
        if "/" in path:  # from the top, or (in a package's row) from that package
            if not any((base / path).exists() for base in (ROOT, *(ROOT / p for p in PACKAGES))):
                missing.append(path)
        elif path not in files:
            missing.append(path)
    assert not missing, missing


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, AttributeError, ValueError):  # a parent that is no package
        return False


def test_every_module_it_names_is_importable() -> None:
    """Dotted names under the project's packages: the longest module prefix imports, and
    what follows it is an attribute there."""
    missing = []
    pattern = re.compile(r"^(" + "|".join(PACKAGES) + r")(\.\w+)+$")
    for span in _code_spans():
        name = span.split("(")[0]
        if not pattern.match(name) or name in ENTRY_POINT_GROUPS:
            continue
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            module = ".".join(parts[:i])
            if _is_module(module):
                break
        obj: object = importlib.import_module(module)
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                missing.append(name)
                break
            obj = getattr(obj, attr)
    assert not missing, missing


def test_the_picture_is_drawn_from_the_contracts_as_they_are() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import draw_layers
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    drawn = draw_layers.draw()
    assert (ROOT / "docs" / "layers.svg").read_text() == drawn, (
        "docs/layers.svg is out of date: run .venv/bin/python scripts/draw_layers.py"
    )
    for package in PACKAGES:
        assert f">{package}/</text>" in drawn


@pytest.mark.parametrize("package", ["timely", "operators", "connectors", "analysis", "control"])
def test_the_layers_table_names_every_package(package: str) -> None:
    assert f"| `{package}/` |" in PAGE.read_text()
