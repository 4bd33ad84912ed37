"""The examples run and check themselves (each asserts its output against a reference)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_wordcount_example_inline() -> None:
    out = _run(
        str(EXAMPLES / "wordcount.py"), "--backend", "inline", "--workers", "3", "--epochs", "4"
    )
    assert "every epoch's counts match collections.Counter" in out
    assert out.count("epoch ") == 4


def test_progress_frontiers_example() -> None:
    out = _run(str(EXAMPLES / "progress_frontiers.py"), "--workers", "3", "--epochs", "3")
    assert "every worker saw every epoch complete, in order" in out
