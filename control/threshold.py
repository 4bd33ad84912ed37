"""The heuristic DS2 is measured against: add a worker when utilisation is high, remove
one when it is low (what CPU-threshold autoscalers do).

Utilisation is the busiest worker's useful time over the interval (its operators'
activations and (de)serialisation, as :mod:`control.rates` measures them): above
``high`` (80%) add one worker, below ``low`` (30%) remove one, else hold. One step at a
time, whatever the load, is why it takes several decisions where DS2 takes one.
:class:`ThresholdPolicy` has :class:`~control.ds2.Policy`'s interface, so the
autoscaler runs either (``Autoscale(policy="threshold")``).
"""

from __future__ import annotations

from control.ds2 import Decision
from control.graph import Graph
from control.rates import Measurement


class ThresholdPolicy:
    """Add or remove one worker when the busiest worker's utilisation crosses a bound."""

    def __init__(
        self,
        graph: Graph,
        workers: int,
        *,
        interval_s: float = 10.0,
        warm_up: int = 1,
        high: float = 0.8,
        low: float = 0.3,
        min_workers: int = 1,
        max_workers: int | None = None,
    ) -> None:
        if not 0 <= low < high:
            raise ValueError(f"need 0 <= low < high, got low={low}, high={high}")
        self.graph = graph
        self.workers = workers
        self.interval_s = interval_s
        self.warm_up = warm_up
        self.high = high
        self.low = low
        self.min_workers = min_workers
        self.max_workers = max_workers
        self._warming = warm_up

    def rescaled(self, workers: int) -> None:
        """The run now has ``workers``: warm up again."""
        self.workers = workers
        self._warming = self.warm_up

    def utilisation(self, measurement: Measurement) -> float:
        """The busiest worker's share of the interval spent on useful work."""
        busy: dict[int, float] = {}
        for (_, worker), r in measurement.instances.items():
            busy[worker] = busy.get(worker, 0.0) + r.useful_s
        interval = measurement.interval_s
        return max(busy.values(), default=0.0) / interval if interval > 0 else 0.0

    def observe(self, measurement: Measurement) -> Decision:
        current = self.workers
        u = self.utilisation(measurement)

        def decision(workers: int, why: str) -> Decision:
            return Decision(workers, current, workers, {}, {}, why)

        if measurement.workers != current:
            return decision(current, f"measured at {measurement.workers} workers: ignored")
        if self._warming > 0:
            self._warming -= 1
            return decision(
                current, f"warming up ({self.warm_up - self._warming} of {self.warm_up})"
            )
        high = self.max_workers if self.max_workers is not None else current + 1
        if u > self.high and current < high:
            self.rescaled(current + 1)
            return decision(current + 1, f"utilisation {u:.0%} > {self.high:.0%}: add one")
        if u < self.low and current > self.min_workers:
            self.rescaled(current - 1)
            return decision(current - 1, f"utilisation {u:.0%} < {self.low:.0%}: remove one")
        return decision(current, f"utilisation {u:.0%}: hold")
