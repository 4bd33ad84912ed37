"""cProfile of one worker, opt in: where a worker's time goes, per function.

Why: the event log says how long activations and messages took, not which Python
calls inside the step loop, the codec or the socket writes cost it; and a Ray actor
is a process of its own that no profiler started on the driver reaches. With the run
option ``profile_dir`` (or the environment variable ``TIMELY_PROFILE_DIR``, read on
the driver when the option is not given), each worker runs a ``cProfile.Profile``
while it handles messages and steps, and writes ``worker-<i>.prof`` (``pstats``'s
format) in that directory when its run ends: read it with
``python -m pstats worker-0.prof`` or ``pstats.Stats``.

What it covers: on the ``ray`` backend, the actor's whole event loop thread while its
``run`` goes on (decoding, the step, encoding, socket writes, the connections' reader
tasks); on ``inline``, each worker's own scheduling events (receive, command, step),
which all run on the driver's thread. A worker relaunched by a recovery goes on
adding to the same profile (inline) or writes its file again at the end of the run
it hosts (ray). Off by default: profiling adds a cost to every Python call.
"""

from __future__ import annotations

import contextlib
import cProfile
import os
from collections.abc import Iterator, Mapping

from timely.errors import ConfigError

PROFILE_ENV = "TIMELY_PROFILE_DIR"
"""The environment variable read when the run option ``profile_dir`` is not given."""


def profile_dir_option(value: object, env: Mapping[str, str] | None = None) -> str | None:
    """The directory the workers write their profiles to: ``value`` (the run option),
    else ``TIMELY_PROFILE_DIR``, else None (no profiling). Made if missing, as an
    absolute path, so that every worker on this node writes to the same place."""
    if value is None:
        value = (os.environ if env is None else env).get(PROFILE_ENV) or None
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike):
        raise ConfigError(f"profile_dir must be a directory path, got {value!r}")
    path = os.path.abspath(os.fspath(value))
    os.makedirs(path, exist_ok=True)
    return path


def profile_path(directory: str, index: int) -> str:
    """Where worker ``index`` writes its profile."""
    return os.path.join(directory, f"worker-{index}.prof")


class WorkerProfile:
    """One worker's profiler: switched on around what the worker does, dumped at the end."""

    def __init__(self, directory: str, index: int) -> None:
        self.path = profile_path(directory, index)
        self._profile = cProfile.Profile()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Profile the body (one profiler at a time per thread: bodies do not nest)."""
        self._profile.enable()
        try:
            yield
        finally:
            self._profile.disable()

    def dump(self) -> str:
        """Write the profile so far to :attr:`path` (replacing it); returns the path."""
        tmp = f"{self.path}.tmp"
        self._profile.dump_stats(tmp)
        os.replace(tmp, self.path)
        return self.path
