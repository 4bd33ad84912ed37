"""The driver's watch on loops: a warning when a loop runs past ``loop_warning`` rounds.

Why: a loop with no ``until`` whose body re-emits its input every round (a
reachability written with ``concat(r).distinct()`` inside) never ends, and nothing
else tells the user: the run just goes on. Its memory stays flat while it runs (see
``Worker._next_rounds``), but it never finishes.

How the driver learns the rounds: every feedback vertex keeps the time of the
furthest round it has sent to (``FeedbackVertex.furthest``), and each worker hands
them over in ``Worker.loop_rounds``: the inline session reads them from its workers
every few scheduling events, the Ray session from the heartbeats it already sends
(``WorkerActor.ping``). Nothing is added per record, only a comparison per batch fed
back; a round's number is the loop's own counter, so a loop with ``max_iters`` at or
below ``loop_warning`` never warns.

Once per loop (per session): a loop that runs long in one epoch will likely do so in
the next, and one line with the fix is enough. The warning goes to the ``timely``
logger at WARNING (Python shows it on stderr unless logging is set up otherwise; quiet
mode, :mod:`timely.session.verbosity`, silences only the libraries timely starts) and to the
session's ``RunView`` (``warnings``), which the live page shows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from progress import Timestamp
from timely.errors import ConfigError
from timely.graph.plan import Plan
from timely.session.view import RunView

LOG = logging.getLogger("timely")
"""timely's own logger: what the driver warns about (the libraries it starts log under
their own names)."""

DEFAULT = 1_000
"""Rounds of one epoch past which a loop is warned about, unless ``loop_warning=`` says."""


def loop_warning_option(options: dict[str, Any]) -> int | None:
    """Take ``loop_warning`` out of the run options: an int >= 1 (rounds), or None for no
    warning; a :class:`ConfigError` naming the fix otherwise, before anything starts."""
    value = options.pop("loop_warning", DEFAULT)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"loop_warning must be a whole number of rounds >= 1, or None for no warning; "
            f"got {value!r} (for example loop_warning=10_000 for loops meant to run long)"
        )
    return value


class LoopWatch:
    """Warns once per loop that reaches ``threshold`` rounds in an epoch (None: never)."""

    def __init__(self, plan: Plan, view: RunView, threshold: int | None = DEFAULT) -> None:
        self.threshold = threshold
        self.view = view
        self.loops = {s.index: s.loop or s.name for s in plan.vertices if s.kind == "feedback"}
        """Feedback vertex -> the name of its loop."""
        self.warned: set[str] = set()

    def observe(self, rounds: Iterable[tuple[int, Timestamp]]) -> None:
        """The furthest rounds the workers' feedback vertices report, ``(vertex, time)``."""
        threshold = self.threshold
        if threshold is None:
            return
        for v, time in rounds:
            if time[-1] < threshold:
                continue
            loop = self.loops.get(v)
            if loop is None or loop in self.warned:
                continue
            self.warned.add(loop)
            self._warn(loop, time, threshold)

    def _warn(self, loop: str, time: Timestamp, threshold: int) -> None:
        epoch, rounds = time[0], time[-1]
        outer = f" (outer rounds {list(time[1:-1])})" if len(time) > 2 else ""
        message = (
            f"loop {loop!r} is at round {rounds} of epoch {epoch}{outer} (past "
            f"loop_warning={threshold}) and may never end: without until=, a loop goes on "
            "while its body emits records, and a body that passes its input on (as "
            "concat(r).distinct() does) emits at every round. To stop it, give iterate "
            "until='fixpoint' (it ends once a round derives nothing new) or max_iters=N; "
            "if it is meant to run this long, raise loop_warning (None turns this off)"
        )
        LOG.warning("timely: %s", message)
        self.view.warned(
            {
                "kind": "loop",
                "loop": loop,
                "epoch": epoch,
                "round": rounds,
                "time": list(time),
                "message": message,
            }
        )
