"""The README's example runs as written."""

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
