"""The Ray backend (being built; see the runtime issue)."""

from __future__ import annotations

from typing import Any

from timely.errors import ConfigError
from timely.runtime import Session


class RaySession(Session):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ConfigError("the ray backend is not built yet; use backend='inline'")

    def input_command(self, vertex: int, cmd: tuple[str, Any]) -> None:
        raise NotImplementedError

    def probe_frontier(self, vertex: int) -> list[tuple[int, ...]]:
        raise NotImplementedError

    def _wait(self) -> None:
        raise NotImplementedError
