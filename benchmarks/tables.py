"""Report and timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
"""Where every benchmark writes its figures."""


def write_results(stem: str, quick: bool, payload: dict[str, Any], indent: int = 2) -> Path:
    """Write ``payload`` as ``results/<stem>.json`` (``<stem>.quick.json`` for a quick or
    partial run, so that it never replaces a full run's figures); returns the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / (f"{stem}.quick.json" if quick else f"{stem}.json")
    path.write_text(json.dumps(payload, indent=indent))
    return path


def markdown(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; numbers right-aligned."""
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join("---:" if i else "---" for i in range(len(headers))) + "|")
    lines.extend("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The median wall time of ``repeat`` calls of ``fn`` and the last call's result."""
    walls, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), result
