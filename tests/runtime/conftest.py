"""Runtime-test set-up: one local Ray for the whole test session.

Starting Ray takes seconds, so every test that needs it shares this instance
(``address="local"``: never a stray cluster found on the machine). Sessions made by
the tests reuse it, and kill their actors when they end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """Local Ray with 2 CPUs, started once; shut down at the end if this fixture started it."""
    import ray  # a runtime dependency: its absence is an error, not a skip

    started = not ray.is_initialized()
    if started:
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    yield ray
    if started:
        ray.shutdown()
