"""Monitors: what watches a run from the driver's process (metrics, a progress bar, a
live page), never from a worker's step path.

A monitor (:class:`~timely.session.base.Monitor`) is made from a run option before
anything starts (so a port in use or a missing package fails with the fix, as any bad
configuration does), is handed the session once its workers run (``attach``), reads what
the session shows (:class:`~timely.session.view.RunView`) and the event log on threads of
its own, and is closed with the session. This module makes them from the options, by
name (``module:factory``), so that the session imports none of them: they sit above it.
The options and the monitors they make:

- ``metrics_port=PORT``: a Prometheus endpoint (:mod:`timely.observe.metrics`);
- ``progress=True``: a progress bar on stderr (:mod:`timely.observe.progressbar`; ``run``
  shows one by default when stderr is a terminal and the run lasts over a second);
- options that layers above ``timely`` add through the ``timely.monitors`` entry point
  group (the analysis's ``ui=True``, a live web page): the entry point's name is the
  option, its object a factory like :data:`MONITORS`'.

Metrics and the page read the event log, so they turn it on: without ``trace=``, the
session logs to a temporary directory removed at its end.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from timely.session.base import Monitor

MONITORS_GROUP = "timely.monitors"


MonitorFactory = Callable[[Any], Monitor | None]
"""A run option's value -> its monitor (None: the option asks for none), raising
:class:`~timely.errors.ConfigError` for a bad value."""

MONITORS: dict[str, str] = {
    "metrics_port": "timely.observe.metrics:from_option",
    "progress": "timely.observe.progressbar:from_option",
}
"""timely's own monitor options, by the factory that makes each (``module:name``)."""


@functools.cache
def _factories() -> dict[str, str]:
    """The monitor options, timely's and the installed packages' (read once per process:
    scanning the entry points costs ~5 ms, and a session starts many runs)."""
    from importlib.metadata import entry_points

    found = dict(MONITORS)
    for ep in entry_points(group=MONITORS_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def _load(path: str) -> MonitorFactory:
    module, _, name = path.partition(":")
    factory: MonitorFactory = getattr(importlib.import_module(module), name)
    return factory


def monitor_options(options: dict[str, Any]) -> list[Monitor]:
    """Take every monitor option out of ``options`` and make its monitor (closing the
    ones made so far if a later one fails)."""
    made: list[Monitor] = []
    try:
        for option, path in _factories().items():
            if option not in options:
                continue
            value = options.pop(option)
            monitor = _load(path)(value)
            if monitor is not None:
                made.append(monitor)
    except BaseException:
        for m in made:
            m.close()
        raise
    return made
