"""The runnable examples, imported by the benchmarks that measure them."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")


def example(name: str) -> Any:
    """``examples/<name>.py`` as module ``name`` (the folder is not a package; each example
    imports ``_cli`` beside it), shipped to Ray workers by value."""
    from ray import cloudpickle

    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cloudpickle.register_pickle_by_value(module)
    return module
