"""The checkpoint cadence's controller (``checkpoint_every="auto"``), after Drizzle's
coordination interval and TCP's congestion window: AIMD on the rate of checkpoints, that
is, the interval between them grows multiplicatively and shrinks additively.

Why: a checkpoint costs about the same however many epochs it covers (snapshot, encode,
write, commit, the driver's round trips), so the share of time spent coordinating
falls as the interval ``k`` (epochs between checkpoints) grows; a longer interval also
means more to replay after a failure and later reconfiguration. The controller keeps the
*coordination fraction* (time coordinating over all time, per cycle between two
checkpoints) within ``[lo, hi]``: above ``hi`` it multiplies ``k`` by ``factor`` (the
run is paying too much now: back off fast), below ``lo`` it takes ``step`` off (cheap
checkpoints: recover sooner, probing down slowly), in between it keeps ``k``.

It is pure: fed each cycle's measurement, it returns the next interval. Where it runs
and what is measured is the coordinator's business (:mod:`timely.checkpoint.coordinator`).

Why it does not oscillate at a steady load. With a checkpoint cost ``c`` and a
processing cost ``p`` per epoch the fraction at ``k`` is ``c / (c + k p)``, which is in
``[lo, hi]`` exactly for ``k`` in ``[K_lo, K_hi] = [r (1 - hi) / hi, r (1 - lo) / lo]``
(``r = c / p``); that band's ratio ``K_hi / K_lo = (1 - lo) hi / (lo (1 - hi))``
depends on the bounds alone (2.1 for 5 %-10 %).

- An increase never jumps over the band: from ``k < K_lo``, ``factor * k < factor *
  K_lo <= K_hi`` as long as ``factor`` is at most the band's ratio (checked at
  construction: :func:`check_bounds`).
- A decrease by ``step=1`` visits every integer on its way down, so it stops at the
  largest integer in the band whenever there is one.
- Inside the band nothing changes (the band is the hysteresis), and only a cycle run
  entirely under the current interval counts (``observe(..., interval)`` with another
  interval is ignored): a cycle that began under the old interval says nothing about the
  new one, and reacting to it would overshoot.

So from any start the interval reaches the band and stays there, when some integer in
``[min_interval, max_interval]`` lies in it; otherwise it rests at the nearer end.
"""

from __future__ import annotations

import math

DEFAULT_BOUNDS = (0.05, 0.10)
"""The coordination fraction ``checkpoint_every="auto"`` aims for, by default."""

MAX_INTERVAL = 256
"""The longest interval ``auto`` chooses: recovery replays up to this many epochs."""


def band_ratio(lo: float, hi: float) -> float:
    """``K_hi / K_lo``: how far apart (as a ratio) the shortest and the longest interval
    with a fraction in ``[lo, hi]`` are, at any steady load."""
    return (1 - lo) * hi / (lo * (1 - hi))


def check_bounds(lo: float, hi: float, factor: int = 2) -> str | None:
    """What is wrong with ``(lo, hi)`` as bounds for a controller multiplying by
    ``factor`` (None: they are usable)."""
    if not 0 < lo < hi < 1:
        return f"need 0 < lo < hi < 1, got ({lo!r}, {hi!r})"
    if band_ratio(lo, hi) < factor:
        return (
            f"({lo:g}, {hi:g}) is too narrow: multiplying the interval by {factor} could jump "
            f"over it and oscillate; hi / (1 - hi) must be at least {factor} times "
            f"lo / (1 - lo), e.g. ({lo:g}, {_widest_needed(lo, factor):.3g}) or wider"
        )
    return None


def _widest_needed(lo: float, factor: int) -> float:
    """The smallest ``hi`` that gives ``lo`` a band of ratio ``factor``."""
    x = factor * lo / (1 - lo)
    return x / (1 + x)


class AIMD:
    """The interval ``k`` (epochs between checkpoints), adjusted after each cycle.

    ``interval``: the first one; ``lo``, ``hi``: the coordination fraction aimed for;
    ``factor``: the multiplicative increase; ``step``: the additive decrease;
    ``min_interval``, ``max_interval``: the bounds ``k`` stays within.
    """

    def __init__(
        self,
        interval: int = 1,
        lo: float = DEFAULT_BOUNDS[0],
        hi: float = DEFAULT_BOUNDS[1],
        factor: int = 2,
        step: int = 1,
        min_interval: int = 1,
        max_interval: int = MAX_INTERVAL,
    ) -> None:
        if not (isinstance(factor, int) and factor >= 2):
            raise ValueError(f"factor must be an integer >= 2, got {factor!r}")
        if not (isinstance(step, int) and step >= 1):
            raise ValueError(f"step must be an integer >= 1, got {step!r}")
        if not 1 <= min_interval <= max_interval:
            raise ValueError(
                f"need 1 <= min_interval <= max_interval, got {min_interval}, {max_interval}"
            )
        problem = check_bounds(lo, hi, factor)
        if problem is not None:
            raise ValueError(problem)
        self.lo = lo
        self.hi = hi
        self.factor = factor
        self.step = step
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.interval = min(max(interval, min_interval), max_interval)
        """The current interval ``k``."""

    def observe(self, coordination: float, total: float, interval: int) -> int:
        """One cycle between two checkpoints: ``coordination`` seconds of its ``total``
        were spent coordinating, and it ran entirely under ``interval``. Returns the
        interval to use from now on.

        A cycle under another interval than the current one (it began before the last
        change, or the workers have not switched yet) changes nothing."""
        if interval != self.interval or not total > 0 or math.isnan(coordination):
            return self.interval
        fraction = coordination / total
        k = self.interval
        if fraction > self.hi:
            k = min(k * self.factor, self.max_interval)
        elif fraction < self.lo:
            k = max(k - self.step, self.min_interval)
        self.interval = k
        return k
