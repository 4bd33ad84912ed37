"""The README's example runs as written, and the README is a front page."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README should show the API"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_readme_commands_are_the_scripts() -> None:
    text = README.read_text()
    for command in ("bash scripts/main.sh", "bash scripts/test.sh"):
        assert command in text
        assert (README.parent / command.split()[1]).is_file()


def test_readme_is_a_front_page() -> None:
    """Short (the manual is the documentation site, docs/), and it links into the site:
    every page it links under docs/ exists (the site's strict build checks the rest)."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200, "README.md is the front page: at most 200 lines"
    links = re.findall(r"\]\((docs/[^)#\s]+)", text)
    assert "docs/getting-started.md" in links and "docs/reference/index.md" in links
    for link in links:
        assert (README.parent / link).is_file(), f"README links to {link}, which is missing"
