"""The backend registry: ``backend=`` names -> the session classes that host workers
(:mod:`timely.backends`: ``inline``, one process with a seeded scheduler, and ``ray``).

A backend is a :class:`~timely.session.base.Session` subclass whose ``__init__`` takes
``(spec, workers, checkpoint=..., <its own options>)``. The registry maps a name to where
the class lives, so that a backend's imports (Ray) are paid only when it is used, and
:func:`check_options` checks every backend's options the same way, from its signature,
before anything starts.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

from timely.errors import ConfigError

if TYPE_CHECKING:
    from timely.session.base import Session

_REGISTRY: dict[str, str | type[Session]] = {
    "inline": "timely.backends.inline:InlineSession",
    "ray": "timely.backends.ray:RaySession",
}
_COMMON = ("self", "spec", "workers", "checkpoint")
"""Parameters every backend takes from the runtime, not from the user's options."""


def register_backend(name: str, backend: str | type[Session]) -> None:
    """Make ``backend`` (a Session subclass, or ``"module:Class"``) usable as ``backend=name``."""
    _REGISTRY[name] = backend


def backend_names() -> list[str]:
    """The names ``backend=`` accepts."""
    return sorted(_REGISTRY)


def backend_class(name: str) -> type[Session]:
    """The session class of backend ``name``; ``ConfigError`` naming the choices if unknown."""
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ConfigError(f"unknown backend {name!r}; use one of {', '.join(backend_names())}")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        _REGISTRY[name] = entry
    assert not isinstance(entry, str)
    return entry


def backend_options(cls: type[Session]) -> list[str]:
    """The options a backend takes (its ``__init__``'s parameters but the common ones)."""
    params = inspect.signature(cls.__init__).parameters
    return [n for n, p in params.items() if n not in _COMMON and p.kind is p.POSITIONAL_OR_KEYWORD]


def check_options(name: str, options: dict[str, Any]) -> type[Session]:
    """Backend ``name``'s class, once every option in ``options`` is one it takes."""
    cls = backend_class(name)
    known = backend_options(cls)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(
            f"the {name} backend does not take {', '.join(unknown)}; its options are "
            f"{', '.join(known)}"
            + (
                " (address= is for the ray backend: drop it or use backend='ray')"
                if "address" in unknown
                else ""
            )
        )
    return cls
