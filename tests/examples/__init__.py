"""Tests of the runnable examples: each runs one on the inline backend, small, and checks
its output against a reference written independently in the test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (the folder is not a package) as ``example_<name>``."""
    mod_name = f"example_{name}"
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))  # as when run as a script: it imports _cli beside it
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    # Not importable on Ray workers under this name: ship its functions and classes by value.
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module
