"""Report helpers shared by the benchmark scripts."""

from __future__ import annotations

from collections.abc import Sequence


def markdown(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; numbers right-aligned."""
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join("---:" if i else "---" for i in range(len(headers))) + "|")
    lines.extend("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)
