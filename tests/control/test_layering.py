"""``control`` (DS2's measurements and policy) sits on top, beside ``analysis``: it may
import the stdlib, ``timely`` and ``progress``, and nothing in the runtime's packages
imports it back (DESIGN.md's layers). Someone wiring it to the runtime does so through
``timely``'s public hooks, from above."""

from __future__ import annotations

import sys

from tests.analysis.test_layering import _imports


def test_control_imports_only_the_stdlib_timely_and_progress() -> None:
    outside = _imports("control") - set(sys.stdlib_module_names) - {"control"}
    assert outside <= {"timely", "progress"}


def test_neither_the_runtime_nor_the_analysis_imports_control() -> None:
    for package in ("progress", "timely", "operators", "connectors", "analysis"):
        assert "control" not in _imports(package), package
