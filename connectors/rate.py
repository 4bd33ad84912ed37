"""A rate-controlled source: records at a set rate (events/s), for tests, benchmarks and
demos of what a dataflow does under a known offered load.

``rate_source(rate, seconds=...)`` offers ``rate`` records per second in all, spread
over its partitions, for ``seconds`` (or until ``count`` records). Each partition
emits a batch every ``tick`` seconds, paced with :meth:`timely.Source.next_awake`, so a
worker waiting for the next tick does other work or sleeps, never spins. Batches are
grouped into epochs of ``epoch_seconds``.

Partitioning: record ``i`` is ``make(i)`` (``i`` itself by default) and belongs to
partition ``i % partitions``; worker ``w`` reads the partitions ``p % workers == w``.
Delivery: a batch is a function of its offset alone (the tick number), so a replay
after a failure gives the same records at the same epochs: exactly once with
checkpoints. Pacing restarts at the replay's offset (no backlog piles up while the
workers are down): the rate is what the source offers from then on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from timely import ConfigError, Source


def rate_source(
    rate: float,
    seconds: float | None = None,
    count: int | None = None,
    make: Callable[[int], Any] | None = None,
    epoch_seconds: float = 1.0,
    tick: float = 0.01,
    partitions: int = 8,
) -> RateSource:
    """A source offering ``rate`` records/s for ``seconds`` (or ``count`` records)."""
    return RateSource(rate, seconds, count, make, epoch_seconds, tick, partitions)


class RateSource(Source):
    """See the module's docstring; offsets are tick numbers.

    A step reads every partition that is due, up to ``batches_per_step`` (8) ticks'
    batches: on schedule that is the tick just due; a partition behind its schedule (a
    worker that fell behind, or one handed over live, :meth:`resumed`) is due at once
    and is read several ticks a step, as fast as the worker takes them, until it is back
    on its schedule. (Read one tick a step, a worker that fell behind could only catch up
    as fast as it steps: about one tick's few records per step's fixed cost.)"""

    def __init__(
        self,
        rate: float,
        seconds: float | None = None,
        count: int | None = None,
        make: Callable[[int], Any] | None = None,
        epoch_seconds: float = 1.0,
        tick: float = 0.01,
        partitions: int = 8,
    ) -> None:
        if not (isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0):
            raise ConfigError(f"rate_source: rate must be > 0 records/s, got {rate!r}")
        if (seconds is None) == (count is None):
            raise ConfigError(
                "rate_source: give exactly one of seconds= (how long it offers records) or "
                "count= (how many in all)"
            )
        if seconds is not None and not seconds > 0:
            raise ConfigError(f"rate_source: seconds must be > 0, got {seconds!r}")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise ConfigError(f"rate_source: count must be an int >= 0, got {count!r}")
        if count is not None and count < 0:
            raise ConfigError(f"rate_source: count must be an int >= 0, got {count!r}")
        if not tick > 0 or not epoch_seconds >= tick:
            raise ConfigError(
                f"rate_source: need 0 < tick <= epoch_seconds, got tick={tick!r}, "
                f"epoch_seconds={epoch_seconds!r}"
            )
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"rate_source: partitions must be an int >= 1, got {partitions!r}")
        self.rate = float(rate)
        self.total = count if count is not None else math.floor(self.rate * float(seconds or 0))
        self.make = make
        self.epoch_seconds = float(epoch_seconds)
        self.tick = float(tick)
        self.parts = partitions
        self._start: dict[int, float] = {}
        """Per partition, when tick 0 was (or would have been) due on this worker."""

    @property
    def offered_rate(self) -> float:
        return self.rate

    def partitions(self) -> int:
        return self.parts

    def _emitted(self, ticks: int) -> int:
        """Records of the whole source due in the first ``ticks`` ticks."""
        return min(self.total, math.floor(self.rate * ticks * self.tick))

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        tick = 0 if offset is None else int(offset)
        lo, hi = self._emitted(tick), self._emitted(tick + 1)
        if lo >= self.total:
            return None
        p, n = partition, self.parts
        first = lo + (p - lo) % n  # the first index of this partition in [lo, hi)
        indices = range(first, hi, n)
        make = self.make
        records = list(indices) if make is None else [make(i) for i in indices]
        epoch = int(tick * self.tick / self.epoch_seconds + 1e-9)
        return epoch, records, tick + 1

    def resumed(self, partition: int, offset: Any, due: float | None) -> None:
        """A partition handed over live keeps its schedule: one that was behind is due
        at once and catches up (a restore's first read is due now instead)."""
        if due is not None:
            tick = 0 if offset is None else int(offset)
            self._start[partition] = due - tick * self.tick

    def next_awake(self, partition: int, offset: Any) -> float | None:
        tick = 0 if offset is None else int(offset)
        start = self._start.get(partition)
        if start is None or offset is None:  # a first read (from the start, or a restore's
            # offset) is due now
            start = self._start[partition] = time.time() - tick * self.tick
        return start + tick * self.tick
