"""DS2 acting on a run: ``flow.run(..., autoscale=...)`` / ``activate(...)``.

A monitor (:mod:`timely.session.monitors`), made through the ``timely.monitors`` entry point,
that closes DS2's loop on the driver, never on a worker: a thread wakes every policy
interval, reads what the workers' event logs flushed since (:class:`~control.rates.
RateMeter`), measures the interval that every worker's log has reached, and hands the
measurement to :class:`~control.ds2.Policy`. Each decision goes to the session's view
(metrics and the live page show it) and to :attr:`AutoscaleMonitor.decisions`; one that
changes the worker count asks :meth:`~timely.session.base.Session.rescale`, made on the
driver's own thread: live in a reconfigurable run fed by the driver (workers join or
leave while it runs), else by a checkpoint, a stop and a restore at W* (the option then
needs ``checkpoint=``). The policy warms up again after every rescale.

Target rates: per source or input (by name), given in :class:`Autoscale`'s ``targets``,
else what each source says it offers (``Source.offered_rate``, e.g. the rate source's
rate); with neither, a source's target is its observed rate, and the policy only ever
scales down (DS2 scales up to meet a target it is given).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from control.ds2 import Decision, Policy
from control.graph import Graph
from control.rates import InstanceRates, Measurement, OperatorRates, RateMeter
from control.threshold import ThresholdPolicy
from timely.errors import ConfigError

if TYPE_CHECKING:
    from timely.checkpoint.config import CheckpointConfig
    from timely.graph.plan import Plan
    from timely.session.base import Session

NS = 1_000_000_000


@dataclass(frozen=True)
class Autoscale:
    """DS2's knobs for a run.

    ``interval``: seconds per policy interval; ``warm_up``: intervals ignored after a
    start or a rescale; ``activation``: consecutive intervals that must propose a change
    before it is made; ``threshold``: how far (a fraction) the sources may fall short of
    their targets before a scale-up; ``min_workers``/``max_workers``: bounds on W*
    (``max_workers`` defaults to this machine's CPUs); ``targets``: records/s per
    source or input name; ``policy``: DS2 (the default) or the threshold heuristic.
    """

    min_workers: int = 1
    max_workers: int | None = None
    targets: Mapping[str, float] = field(default_factory=dict)
    interval: float = 2.0
    warm_up: int = 1
    activation: int = 1
    threshold: float = 0.1
    policy: str = "ds2"
    """``"ds2"``, or ``"threshold"``: the heuristic DS2 is measured against
    (:mod:`control.threshold`: one worker more above 80% utilisation, one fewer below
    30%)."""

    def __post_init__(self) -> None:
        if self.policy not in ("ds2", "threshold"):
            raise ConfigError(
                f'autoscale: policy must be "ds2" or "threshold", got {self.policy!r}'
            )
        ints = {"min_workers": self.min_workers, "warm_up": self.warm_up}
        ints["activation"] = self.activation
        for name, value in ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"autoscale: {name} must be an int >= 0, got {value!r}")
        if self.min_workers < 1 or self.activation < 1:
            raise ConfigError("autoscale: min_workers and activation must be >= 1")
        high = self.max_workers
        if high is not None and (
            isinstance(high, bool) or not isinstance(high, int) or high < self.min_workers
        ):
            raise ConfigError(
                f"autoscale: max_workers must be an int >= min_workers ({self.min_workers}), "
                f"got {high!r}"
            )
        if not (isinstance(self.interval, int | float) and self.interval > 0):
            raise ConfigError(f"autoscale: interval must be > 0 seconds, got {self.interval!r}")
        if not (isinstance(self.threshold, int | float) and 0 <= self.threshold < 1):
            raise ConfigError(f"autoscale: threshold must be in [0, 1), got {self.threshold!r}")
        for name, rate in self.targets.items():
            if not (isinstance(rate, int | float) and rate > 0):
                raise ConfigError(
                    f"autoscale: the target rate of {name!r} must be > 0 records/s, got {rate!r}"
                )


def from_option(value: Any) -> AutoscaleMonitor | None:
    """``autoscale=True`` (DS2's defaults), an :class:`Autoscale`, or a dict of its
    fields; ``False``/``None``: none."""
    if value is None or value is False:
        return None
    if value is True:
        return AutoscaleMonitor(Autoscale())
    if isinstance(value, Autoscale):
        return AutoscaleMonitor(value)
    if isinstance(value, Mapping):
        try:
            return AutoscaleMonitor(Autoscale(**value))
        except TypeError as e:
            raise ConfigError(
                f"autoscale: {e}; the fields are those of control.Autoscale"
            ) from None
    raise ConfigError(
        f"autoscale must be True, a control.Autoscale or a dict of its fields, got {value!r}"
    )


class AutoscaleMonitor:
    """DS2's loop for one session."""

    needs_trace = True

    def __init__(self, settings: Autoscale) -> None:
        self.settings = settings
        self.decisions: list[tuple[Decision, Measurement]] = []
        """Every decision with the measurement it came from, in order."""
        self.errors: list[BaseException] = []
        self._session: Session | None = None
        self._policy: Policy | ThresholdPolicy | None = None
        self._meter: RateMeter | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="timely-ds2", daemon=True)
        self._next: int | None = None

    def check(
        self,
        workers: int,
        backend: str,
        checkpoint: CheckpointConfig | None,
        plan: Plan | None = None,
    ) -> None:
        """Before anything starts: rescaling is live (a reconfigurable run, with or
        without checkpoints) or restores from checkpoints."""
        live = plan is not None and plan.control is not None
        if checkpoint is None and not live:
            raise ConfigError(
                "autoscale rescales live in a reconfigurable run "
                "(flow.activate(..., reconfigurable=True)), or else by "
                "checkpoint and restore: give checkpoint=DIR (and checkpoint_every or "
                "checkpoint_interval for how often)"
            )
        high = self._max_workers()
        if not self.settings.min_workers <= workers <= high:
            raise ConfigError(
                f"autoscale: the run starts at {workers} workers, outside [min_workers, "
                f"max_workers] = [{self.settings.min_workers}, {high}]"
            )

    def _max_workers(self) -> int:
        return self.settings.max_workers or os.cpu_count() or 1

    def attach(self, session: Session) -> None:
        graph = Graph.from_describe(session.view.graph)
        targets = dict(self.settings.targets)
        names = set(graph.names)
        unknown = sorted(set(targets) - names)
        if unknown:
            raise ConfigError(
                f"autoscale: targets name {unknown}, which the dataflow does not have; its "
                f"sources and inputs are {[graph.names[v] for v in graph.roots]}"
            )
        for spec in session.plan.vertices:
            offered = getattr(spec.source, "offered_rate", None) if spec.source else None
            if offered and spec.name not in targets:
                targets[spec.name] = float(offered)
        s = self.settings
        if s.policy == "threshold":
            self._policy = ThresholdPolicy(
                graph,
                session.workers,
                interval_s=s.interval,
                warm_up=s.warm_up,
                min_workers=s.min_workers,
                max_workers=self._max_workers(),
            )
        else:
            self._policy = Policy(
                graph,
                session.workers,
                targets,
                interval_s=s.interval,
                warm_up=s.warm_up,
                activation=s.activation,
                threshold=s.threshold,
                min_workers=s.min_workers,
                max_workers=self._max_workers(),
            )
        self._meter = RateMeter(graph)
        self._session = session
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(min(0.25, self.settings.interval)):
            try:
                self.step()
            except Exception as e:  # kept for the caller: a thread nobody joins yet
                self.errors.append(e)
                return

    def step(self) -> Decision | None:
        """Read what is new; decide for every complete policy interval."""
        session, meter, policy = self._session, self._meter, self._policy
        if session is None or meter is None or policy is None or session.trace is None:
            return None
        meter.read(session.trace)
        settled = meter.settled
        if settled <= 0:
            return None
        length = int(self.settings.interval * NS)
        if self._next is None:
            self._next = settled  # the first interval starts when every log has begun
        decision = None
        while self._next + length <= settled:
            start, end = self._next, self._next + length
            self._next = end
            measurement = meter.measure(start, end)
            meter.forget(start)
            if session.workers != policy.workers and session.rescale_pending() is None:
                policy.rescaled(session.workers)  # done (or refused) since the last
            decision = policy.observe(measurement)
            self.decisions.append((decision, measurement))
            record = _record(decision, measurement)
            if decision.rescale:  # which path the change will take, and why
                why = session.live_blocker(decision.workers)
                record["path"] = "live" if why is None else "restart"
                if why is not None:
                    record["why"] = why
            session.view.decided(record)
            session.log_event("decision", record)
            if decision.rescale:
                session.rescale(decision.workers)
                self._next = None  # the next interval starts on the new workers' logs
                break
        return decision

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def _record(decision: Decision, measurement: Measurement) -> dict[str, Any]:
    """A decision as the view keeps it (``RunView.decided``)."""
    rates = {op.name: _rates(op) for op in measurement.operators.values()}
    names = {v: op.name for v, op in measurement.operators.items()}
    instances: dict[str, dict[str, dict[str, float]]] = {}
    for (v, worker), inst in measurement.instances.items():
        name = names.get(v, measurement.graph.names[v])
        instances.setdefault(name, {})[str(worker)] = _rates(inst)
    return {
        "workers": decision.workers,
        "current": decision.current,
        "proposed": decision.proposed,
        "per_operator": decision.by_name(),
        "rates": rates,
        "instances": instances,
        "reason": decision.reason,
        "acted": decision.rescale,
        "interval_s": measurement.interval_s,
    }


def _rates(r: OperatorRates | InstanceRates) -> dict[str, float]:
    """An operator's (or one instance's) figures over the interval, for the view."""
    entry = {
        "observed_processing": r.observed_processing_rate,
        "observed_output": r.observed_output_rate,
        "useful_s": r.useful_s,
    }
    if r.true_processing_rate is not None:
        entry["true_processing"] = r.true_processing_rate
    if r.true_output_rate is not None:
        entry["true_output"] = r.true_output_rate
    return entry
