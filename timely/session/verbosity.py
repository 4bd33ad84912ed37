"""Quiet by default: what the libraries timely starts may print at the user's terminal.

Why: someone at a terminal wants their dataflow's output and its errors, not Ray's
start-up banner and token notice, every worker's forwarded log lines, or Spark's WARN
lines. Those are off unless ``verbose`` is asked for: ``flow.run(..., verbose=True)``,
``python -m timely run ... --verbose``, an example's ``--verbose``, or the environment
variable ``TIMELY_VERBOSE=1`` (read when ``verbose`` is not given). Verbose means each
library's own defaults, as if timely did nothing. Errors never depend on it: a failing
user function or a dead worker reaches the driver as a timely error, which names the
step and ``file:line`` whatever this says.

Each backend applies it where it starts its library (:mod:`timely.backends.ray`,
``_connect``); the Spark connector where it makes a SparkSession
(:func:`connectors.spark.spark_log_options`).

timely's own warnings about a run (a loop past ``loop_warning`` rounds,
:mod:`timely.session.loopwatch`) go to the ``timely`` logger at WARNING, which nothing here
quiets: with logging not set up, Python prints them on stderr.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from timely.errors import ConfigError

VERBOSE_ENV = "TIMELY_VERBOSE"
"""The environment variable that asks for verbose runs when ``verbose`` is not given."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def parse_verbose(text: str) -> bool:
    """``"1"``/``"true"``/``"yes"``/``"on"`` -> True; ``""``/``"0"``/``"false"``/``"no"``/
    ``"off"`` -> False (any case); anything else is a ``ValueError`` naming the choices."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected 1/true/yes/on or 0/false/no/off, got {text!r}")


def verbose_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``TIMELY_VERBOSE`` asks for verbose runs (unset: no)."""
    env = os.environ if env is None else env
    text = env.get(VERBOSE_ENV)
    if text is None:
        return False
    try:
        return parse_verbose(text)
    except ValueError as e:
        raise ConfigError(f"environment variable {VERBOSE_ENV}={text!r}: {e}") from None


def resolve_verbose(verbose: object) -> bool:
    """The ``verbose=`` run option checked: a bool as given, None from ``TIMELY_VERBOSE``."""
    if verbose is None:
        return verbose_from_env()
    if not isinstance(verbose, bool):
        raise ConfigError(
            f"verbose must be True or False, got {verbose!r}; True shows Ray's and Spark's "
            "own log lines, which timely keeps off the terminal by default"
        )
    return verbose
