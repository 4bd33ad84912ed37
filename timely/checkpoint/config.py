"""The checkpoint and recovery options of a run (``checkpoint=``, ``checkpoint_every=``,
``checkpoint_interval=``, ``checkpoint_incremental=``, ``checkpoint_fraction=``,
``keep_checkpoints=``, ``resume=``, ``on_error=``, ``max_restarts=``), checked before
anything starts: :class:`CheckpointConfig`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from timely.checkpoint.aimd import DEFAULT_BOUNDS, check_bounds
from timely.errors import ConfigError

DEFAULT_CHAIN = 100
"""``checkpoint_incremental=True``: a whole part after at most this many deltas, and
sooner once the deltas since the last whole part add up to half its size (a restore
then reads at most 1.5 times a whole part): see :data:`BY_SIZE`."""
BY_SIZE = -DEFAULT_CHAIN
"""``CheckpointConfig.incremental`` for ``checkpoint_incremental=True``: chains end by
size (:meth:`timely.worker.snapshots.Snapshots.whole_next`), not after a fixed count."""
COUNT_CHAIN = 10
"""With ``checkpoint_incremental=True``, deltas between whole parts where a part's size is
not known on the loop: the count of before issue 30's sized chains. No host leaves such
a part now (a row snapshot is encoded when taken, a columnar one counts its Arrow
bytes; Ray encoded row snapshots on its writer thread until issue 30's ninth pass)."""


@dataclass(frozen=True)
class CheckpointConfig:
    """How and where to checkpoint; ``flow.run(checkpoint=...)`` and friends build it.

    ``every``: checkpoint after every epoch ``e`` with ``e % every == every - 1``.
    ``fraction``: with ``checkpoint_every="auto"``, the bounds ``(lo, hi)`` on the share of
    time spent coordinating that the driver keeps the interval within
    (:mod:`timely.checkpoint.aimd`); ``every`` is then the first interval. None: a fixed interval.
    ``interval``: instead, checkpoint about every ``interval`` seconds: the driver picks
    an epoch no worker has passed yet and asks every worker for it.
    ``keep``: committed checkpoints kept (older ones are deleted).
    ``max_restarts``: recoveries from worker failures before the run fails.
    ``on_error``: what a user function's exception does: ``"fail"`` the run, or
    ``"restore"`` from the last checkpoint and retry (counted against ``max_restarts``).
    ``resume``: start from the latest checkpoint found under ``uri``, if any.
    ``incremental``: parts write what changed since the worker's previous part (the keys
    operators report changed), a whole part after every ``incremental`` deltas (0: every
    part whole; :data:`BY_SIZE`: once the deltas add up to half a whole part).
    """

    uri: str
    every: int = 1
    fraction: tuple[float, float] | None = None
    interval: float | None = None
    keep: int = 3
    max_restarts: int = 3
    on_error: str = "fail"
    resume: bool = True
    incremental: int = 0

    @staticmethod
    def from_options(options: dict[str, Any]) -> CheckpointConfig | None:
        """Take the ``checkpoint*``/recovery options out of ``options`` and check them."""
        uri = options.pop("checkpoint", None)
        names = (
            "checkpoint_every",
            "checkpoint_fraction",
            "checkpoint_interval",
            "keep_checkpoints",
            "max_restarts",
            "on_error",
            "resume",
            "checkpoint_incremental",
        )
        given = {n: options.pop(n) for n in names if n in options}
        if uri is None:
            if given:
                raise ConfigError(
                    f"{', '.join(sorted(given))} need checkpoint=DIR_OR_URI (where checkpoints go)"
                )
            return None
        if not isinstance(uri, str | os.PathLike) or not str(uri):
            raise ConfigError(f"checkpoint must be a directory or URI, got {uri!r}")
        interval = given.get("checkpoint_interval")
        if interval is not None:
            if "checkpoint_every" in given:
                raise ConfigError(
                    "give checkpoint_every (epochs) or checkpoint_interval (seconds), not both"
                )
            if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
                raise ConfigError(f"checkpoint_interval must be seconds > 0, got {interval!r}")
        every = given.get("checkpoint_every", 1)
        if every != "auto" and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise ConfigError(
                f'checkpoint_every must be a positive integer or "auto", got {every!r}'
            )
        fraction = _fraction(every, given)
        incremental = given.get("checkpoint_incremental", False)
        if incremental is True:
            incremental = BY_SIZE
        elif incremental is False:
            incremental = 0
        elif not isinstance(incremental, int) or incremental < 1:
            raise ConfigError(
                "checkpoint_incremental must be True (a whole checkpoint once the deltas "
                f"add up to half of one, at most {DEFAULT_CHAIN} deltas), False, or the "
                "number of deltas between whole "
                f"ones (>= 1); got {incremental!r}"
            )
        config = CheckpointConfig(
            uri=str(uri),
            interval=None if interval is None else float(interval),
            every=1 if every == "auto" else every,
            fraction=fraction,
            keep=given.get("keep_checkpoints", 3),
            max_restarts=given.get("max_restarts", 3),
            on_error=given.get("on_error", "fail"),
            resume=given.get("resume", True),
            incremental=incremental,
        )
        for name, value, low in (
            ("keep_checkpoints", config.keep, 1),
            ("max_restarts", config.max_restarts, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if config.on_error not in ("fail", "restore"):
            raise ConfigError(f"on_error must be 'fail' or 'restore', got {config.on_error!r}")
        return config


def _fraction(every: Any, given: dict[str, Any]) -> tuple[float, float] | None:
    """The checked ``checkpoint_fraction`` for ``checkpoint_every=every`` (None: not auto)."""
    if every != "auto":
        if "checkpoint_fraction" in given:
            raise ConfigError(
                'checkpoint_fraction bounds the adaptive interval: give checkpoint_every="auto" '
                "with it, or leave it out"
            )
        return None
    value = given.get("checkpoint_fraction", DEFAULT_BOUNDS)
    if not (
        isinstance(value, tuple | list)
        and len(value) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)
    ):
        raise ConfigError(
            "checkpoint_fraction must be (lo, hi), the share of time spent checkpointing to "
            f"keep within, e.g. {DEFAULT_BOUNDS}; got {value!r}"
        )
    lo, hi = float(value[0]), float(value[1])
    problem = check_bounds(lo, hi)
    if problem is not None:
        raise ConfigError(f"checkpoint_fraction: {problem}")
    return lo, hi
