"""The import contracts (``[tool.importlinter]`` in pyproject.toml) hold, and they bite.

``lint-imports`` runs in the test command (scripts/test.sh); here it runs on the tree as
it is, which keeps every contract, and on copies of the tree with one import added
against the layers (mutation checks): each copy fails, and the report names the contract
broken and the import that broke it. The tree has no import cycle, module by module
(``scripts/import_cycles.py``), while a copy with the cycle this layout removed
(the vertex API typed with the worker's context) has one. Every import counts: at
module level, inside a function, or under ``TYPE_CHECKING``.

The older hand-made checks stay beside these: ``tests/analysis/test_layering.py`` and
``tests/control/test_layering.py`` also check the third-party libraries each may use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.analysis.test_layering import _imports

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("progress", "timely", "operators", "connectors", "analysis", "control")
LINT = Path(sys.executable).with_name("lint-imports")
CYCLES = ROOT / "scripts" / "import_cycles.py"


def _names() -> dict[str, str]:
    """Each contract's id -> its name (what the report prints)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["id"]: c["name"] for c in config["tool"]["importlinter"]["contracts"]}


def _run(command: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    """``command`` with ``root``'s packages first on the path (not the installed tree)."""
    env = dict(os.environ, PYTHONPATH=str(root), COLUMNS="300")
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return _run([str(LINT), "--no-cache", "--no-logo"], root)


def _copy(tmp_path: Path) -> Path:
    """The packages and pyproject.toml, copied to a directory of their own."""
    root = tmp_path / "tree"
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _broken(report: str) -> set[str]:
    return {line[: -len(" BROKEN")] for line in report.splitlines() if line.endswith(" BROKEN")}


def test_the_tree_keeps_every_contract() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    names = _names()
    kept = {line[: -len(" KEPT")] for line in done.stdout.splitlines() if line.endswith(" KEPT")}
    assert kept == set(names.values())
    assert f"Contracts: {len(names)} kept, 0 broken." in done.stdout


def test_progress_imports_the_stdlib_only() -> None:
    """DESIGN.md: ``progress`` stays importable and testable alone. The contracts see only
    the project's own packages; this sees the rest."""
    assert _imports("progress") - set(sys.stdlib_module_names) == {"progress"}


def test_the_tree_has_no_import_cycle() -> None:
    done = _run([sys.executable, str(CYCLES)], ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ", 0 cycles" in done.stdout


MUTATIONS = [
    # (file, text appended, the contract it breaks, the import the report names)
    pytest.param(
        "timely/errors.py",
        "import timely.worker.loop",
        "timely",
        "timely.errors -> timely.worker.loop",
        id="timely-upward",
    ),
    pytest.param(
        "timely/observe/metrics.py",
        "import timely.backends.inline",
        "timely",
        "timely.observe.metrics -> timely.backends.inline",
        id="timely-siblings",
    ),
    pytest.param(
        "timely/worker/ports.py",
        "import timely.worker.loop",
        "timely-worker",
        "timely.worker.ports -> timely.worker.loop",
        id="worker-ports-upward",
    ),
    pytest.param(
        "timely/eventlog.py",
        "def _f() -> None:\n    from timely.session.view import RunView  # noqa: F401",
        "timely",
        "timely.eventlog -> timely.session.view",
        id="observability-low-reads-the-session",
    ),
    pytest.param(
        "progress/timestamp.py",
        "import timely.errors",
        "packages",
        "progress.timestamp -> timely.errors",
        id="progress-upward",
    ),
    pytest.param(
        "timely/dataflow.py",
        "import operators.batch",
        "packages",
        "timely.dataflow -> operators.batch",
        id="timely-imports-operators",
    ),
    pytest.param(
        "operators/batch.py",
        "import connectors.rate",
        "operators-connectors",
        "operators.batch -> connectors.rate",
        id="operators-connectors",
    ),
    pytest.param(
        "analysis/pag.py",
        "import control.graph",
        "analysis-control",
        "analysis.pag -> control.graph",
        id="analysis-control",
    ),
    pytest.param(
        "connectors/rate.py",
        "import progress.timestamp",
        "connectors-use-timely",
        "connectors.rate -> progress.timestamp",
        id="connectors-progress",
    ),
    pytest.param(
        "control/rates.py",
        "import operators.batch",
        "analysis-control-use-timely",
        "control.rates -> operators.batch",
        id="control-operators",
    ),
    pytest.param(
        "connectors/_storage.py",
        "import connectors.parquet",
        "no-cycles",
        "._storage -> .parquet",
        id="cycle-inside-connectors",
    ),
]


@pytest.mark.parametrize(("path", "text", "contract", "named"), MUTATIONS)
def test_an_import_against_the_layers_fails_naming_the_contract(
    tmp_path: Path, path: str, text: str, contract: str, named: str
) -> None:
    root = _copy(tmp_path)
    with open(root / path, "a") as f:
        f.write(f"\n\n{text}  # noqa\n")
    done = _lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _names()[contract] in _broken(done.stdout), done.stdout
    assert named in done.stdout, done.stdout


def test_the_cycle_this_layout_removed_is_found_again(tmp_path: Path) -> None:
    """The vertex API typed with the worker's context (as it was): the vertex, the
    context, the worker and what it uses import each other again, and both the contracts
    and the module-by-module check say so."""
    root = _copy(tmp_path)
    with open(root / "timely/vertex.py", "a") as f:
        f.write(
            "\n\nif TYPE_CHECKING:\n    from timely.worker.context import VertexContext  # noqa\n"
        )
    done = _lint(root)
    assert done.returncode == 1
    names = _names()
    assert {names["timely"], names["no-cycles"]} <= _broken(done.stdout), done.stdout
    cycles = _run([sys.executable, str(CYCLES)], root)
    assert cycles.returncode == 1
    cycle = next(line for line in cycles.stdout.splitlines() if line.startswith("cycle:"))
    assert "timely.vertex" in cycle and "timely.worker.context" in cycle
