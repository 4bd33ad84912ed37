"""DS2's scaling policy (Kalavri et al., OSDI'18): from true rates to parallelism.

Walking the graph from the sources in topological order, operator i must process

    in*_i = Σ_j A_ji · o_j[λo]*

records per second, where o_j[λo]* is what upstream j sends when it runs at its own
optimal parallelism: a source's target rate, else in*_j times j's selectivity
(λo / λp, records sent per record processed, the same ratio whether taken over useful
time or the interval). One instance of i processes o_i[λp] / p_i records per second of
useful time, so i needs

    π_i = ⌈ in*_i / (o_i[λp] / p_i) ⌉

instances. Because true rates leave out waiting, they do not depend on how loaded an
operator was: if an operator's work scales linearly with its instances, one decision
lands on the optimum, and repeated decisions never overshoot going up nor undershoot
going down.

Here every worker runs every operator on one thread, so the operators' work adds up
on each worker: the run's decision is the worker count W* = ⌈Σ_i in*_i / (o_i[λp] /
p_i)⌉, the workers' worth of every operator's work added up, clamped to
``[min_workers, max_workers]`` (DS2's W* = max_i π_i holds where each operator has its
own instances; the two agree when one operator does all the work). The per-operator
π_i are reported too. How the parts of a timely graph count:

- **Sources and inputs** emit what they handle (their records processed are the records
  they emit, see :mod:`control.rates`): their o[λo]* is the target rate given for them
  (records/s, by vertex index or name), else their observed output rate. Their own π
  is what emitting that rate takes.
- **Loops.** Back edges (out of ``feedback`` vertices) are left out of the order. A
  vertex they feed (a loop's head) sees the records going round on top of those
  arriving from outside; its forward input is scaled by the measured ratio of what it
  processed to what its forward upstreams sent, which is exact for linear operators.
- **Loop plumbing** (``ingress``, ``egress``, ``feedback``) is counted like any operator:
  it carries records and takes the workers' time.
- **Outputs** the driver reads (``collect``, ``subscribe``) are *pinned*: everything
  they get is gathered onto one worker, so adding workers cannot share their work. Their
  π is reported, not counted in W*, and the reason names them if they need more than one.
- An operator with input to handle but no measurement (it processed nothing in the
  interval) keeps its parallelism, and so does everything downstream of it, whose input
  is then unknown; an operator with nothing to handle needs 1.
- Broadcast edges and operators with several outputs count every record once per edge:
  the log does not say which output a record left by.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from control.graph import Graph
from control.rates import Measurement, OperatorRates

EPSILON = 1e-12
"""Relative slack in the ceiling, so that float rounding in the rates (3.0000000000004
instances) does not cost a worker."""


TargetRates = Mapping[int, float] | Mapping[str, float] | Mapping[int | str, float]
"""Records per second wanted from each source or input, by vertex index or name."""


def _ceil(x: float) -> int:
    """⌈x⌉ of a rate ratio computed in floats."""
    return math.ceil(x - EPSILON * max(1.0, abs(x)))


def _instance_rate(rates: OperatorRates) -> float | None:
    """o[λp] / p: what one instance processes per second of useful time."""
    return rates.instance_rate


def _selectivity(rates: OperatorRates) -> float | None:
    """λo / λp: records sent per record processed."""
    return rates.selectivity


@dataclass(frozen=True)
class Estimate:
    """One operator's line in a decision: the rates used and what they imply."""

    operator: int
    name: str
    instances: int
    """Its parallelism when measured."""
    instance_rate: float | None
    """One instance's true processing rate (records per useful second)."""
    selectivity: float | None
    """Records sent per record processed."""
    input_rate: float | None
    """Σ A_ji o_j[λo]*: the records per second it must process (None: unknown, an
    upstream was not measured)."""
    output_rate: float | None
    """o_i[λo]*: the records per second it then sends (None: unknown)."""
    optimal: int
    """π_i."""
    pinned: bool = False
    """Its work is gathered on one worker: more workers do not share it."""
    note: str = ""
    load: float | None = None
    """in*_i / (one instance's rate): the workers' worth of its work, a fraction (None:
    unknown). W* adds these up: every worker runs every operator on one thread."""


def _targets(graph: Graph, targets: TargetRates | None) -> dict[int, float]:
    out: dict[int, float] = {}
    for vertex, rate in (targets or {}).items():
        v = graph.index(vertex)
        if not graph.is_root(v):
            raise ValueError(f"a target rate is for a source or input; {vertex!r} is neither")
        if rate < 0 or not math.isfinite(rate):
            raise ValueError(f"target rate of {vertex!r} must be finite and >= 0, got {rate}")
        out[v] = float(rate)
    return out


def estimate(
    graph: Graph,
    rates: Mapping[int, OperatorRates],
    targets: TargetRates | None = None,
) -> dict[int, Estimate]:
    """Every operator's target input and output rates and π_i, in topological order."""
    wanted = _targets(graph, targets)
    default = max((r.instances for r in rates.values()), default=1)
    out_rate: dict[int, float | None] = {}
    estimates: dict[int, Estimate] = {}
    for v in graph.order:
        r = rates.get(v)
        instances = r.instances if r is not None else default
        input_rate: float | None
        selectivity: float | None
        if graph.is_root(v):
            if v in wanted:
                input_rate = wanted[v]
            else:
                input_rate = r.observed_output_rate if r is not None else 0.0
            selectivity = 1.0
        else:
            edges = graph.inputs(v)
            forward = [out_rate[u] for u, back in edges if not back]
            input_rate = None if None in forward else sum(x for x in forward if x is not None)
            if input_rate and r is not None and len(forward) < len(edges):
                arrived = sum(rates[u].sent for u, back in edges if not back and u in rates)
                if arrived > 0 and r.processed > 0:
                    input_rate *= r.processed / arrived  # what goes round the loop
            selectivity = _selectivity(r) if r is not None else None
        rate = _instance_rate(r) if r is not None else None
        note = ""
        load: float | None = None
        if input_rate is None:
            optimal, note = instances, "an upstream was not measured: keeps its parallelism"
            output_rate = None
        elif input_rate <= 0:
            optimal, output_rate, load = 1, 0.0, 0.0
        elif rate is None or rate <= 0 or selectivity is None:
            optimal, note = instances, "not measured: keeps its parallelism"
            output_rate = None
        else:
            load = input_rate / rate
            optimal = max(1, _ceil(load))
            output_rate = input_rate * selectivity
        out_rate[v] = output_rate
        estimates[v] = Estimate(
            v,
            graph.names[v],
            instances,
            rate,
            selectivity,
            input_rate,
            output_rate,
            optimal,
            graph.pinned(v),
            note,
            load,
        )
    return {v: estimates[v] for v in sorted(estimates)}


def optimal_parallelism(
    graph: Graph,
    rates: Mapping[int, OperatorRates],
    targets: TargetRates | None = None,
) -> dict[int, int]:
    """π_i for every operator (by vertex index)."""
    return {v: e.optimal for v, e in estimate(graph, rates, targets).items()}


@dataclass(frozen=True)
class Decision:
    """What to run at, and why."""

    workers: int
    """The worker count to run at now."""
    current: int
    """The worker count measured."""
    proposed: int
    """W* = ⌈Σ_i in*_i / instance rate_i⌉ over the operators more workers help, clamped."""
    per_operator: dict[int, int]
    """π_i by vertex index."""
    estimates: dict[int, Estimate] = field(repr=False)
    reason: str = ""

    @property
    def rescale(self) -> bool:
        return self.workers != self.current

    def by_name(self) -> dict[str, int]:
        """π_i by operator name (a name used twice keeps its first vertex)."""
        out: dict[str, int] = {}
        for e in self.estimates.values():
            out.setdefault(e.name, e.optimal)
        return out


def _combine(loads: list[float]) -> float:
    """The workers' time the operators need, together: every worker runs every operator
    on one thread, so their loads add up on it (DS2's max holds where each operator has
    instances of its own)."""
    return sum(loads)


def _clamp(w: int, low: int, high: int | None) -> int:
    w = max(w, low)
    return w if high is None else min(w, high)


def decide(
    graph: Graph,
    rates: Mapping[int, OperatorRates],
    targets: TargetRates | None = None,
    *,
    workers: int | None = None,
    min_workers: int = 1,
    max_workers: int | None = None,
) -> Decision:
    """One DS2 decision: W* from the rates of one interval measured at ``workers``
    (by default the operators' parallelism)."""
    if min_workers < 1 or (max_workers is not None and max_workers < min_workers):
        raise ValueError(f"need 1 <= min_workers <= max_workers, got {min_workers}, {max_workers}")
    estimates = estimate(graph, rates, targets)
    if workers is None:
        workers = max((r.instances for r in rates.values()), default=1)
    scalable = [e for e in estimates.values() if not e.pinned]
    known = [e for e in scalable if e.load is not None]
    unknown = [e for e in scalable if e.load is None]
    total = _combine([e.load for e in known if e.load is not None])
    need = max(1, _ceil(total)) if known else workers
    held = max(unknown, key=lambda e: (e.optimal, -e.operator), default=None)
    if held is not None and held.optimal > need:
        need = held.optimal  # an operator not measured keeps its parallelism
    proposed = _clamp(need, min_workers, max_workers)
    if not scalable:
        reason = "no operator that more workers help"
    elif held is not None and need == held.optimal and held.optimal > max(1, _ceil(total)):
        reason = f"{held.name!r} needs {need} worker{'s' if need != 1 else ''} ({held.note})"
    else:
        top = sorted(known, key=lambda e: (-(e.load or 0.0), e.operator))[:3]
        parts = ", ".join(f"{e.name!r} {e.load:.2f}" for e in top if e.load)
        reason = (
            f"the operators need {total:.2f} workers' time, so {need} "
            f"worker{'s' if need != 1 else ''}" + (f" ({parts})" if parts else "")
        )
    if proposed != need:
        reason += f", clamped to {proposed} by [{min_workers}, {max_workers}]"
    stuck = [e for e in estimates.values() if e.pinned and e.optimal > 1]
    if stuck:
        reason += "; on one worker whatever W: " + ", ".join(
            f"{e.name!r} needs {e.optimal}" for e in stuck
        )
    return Decision(
        proposed,
        workers,
        proposed,
        {v: e.optimal for v, e in estimates.items()},
        estimates,
        reason,
    )


class Policy:
    """DS2's scaling manager over a run: one :meth:`observe` per policy interval.

    Knobs (DS2's):

    - ``interval_s``: the policy interval, how long each measurement lasts (the caller
      cuts the intervals: :meth:`control.rates.RateMeter.measure`).
    - ``warm_up``: intervals ignored after the start and after every rescale, while
      the run settles (caches fill, backlogs drain, new workers start up).
    - ``activation``: how many consecutive intervals must propose a change in the same
      direction before it is made; the change made is the smallest of those proposals
      (the one every interval agreed to).
    - ``threshold`` θ, on the ratio r = observed source rate / target rate, taken as the
      worst over the sources given a target (1 when none is: a source without a target
      is sized for what it offers). A scale-up needs r < 1 − θ: a run whose sources
      reach their targets within θ keeps its workers, whatever noise proposes. A
      scale-down needs r ≥ 1 − θ: a run that falls behind does not give workers up
      (the model, which says fewer would do, is then not to be trusted). Sources above
      1 + θ outrun their targets: they keep up, and a scale-down may follow.
    - ``min_workers``, ``max_workers``: the bounds on W*.

    :meth:`observe` assumes that the caller acts on a decision that rescales (its
    ``workers`` become the policy's); call :meth:`rescaled` with what was done otherwise.
    A measurement taken at another worker count (before the rescale took effect) is
    ignored.
    """

    def __init__(
        self,
        graph: Graph,
        workers: int,
        targets: TargetRates | None = None,
        *,
        interval_s: float = 10.0,
        warm_up: int = 1,
        activation: int = 1,
        threshold: float = 0.1,
        min_workers: int = 1,
        max_workers: int | None = None,
    ) -> None:
        if interval_s <= 0 or warm_up < 0 or activation < 1 or not 0 <= threshold < 1:
            raise ValueError(
                "need interval_s > 0, warm_up >= 0, activation >= 1 and 0 <= threshold < 1"
            )
        if min_workers < 1 or (max_workers is not None and max_workers < min_workers):
            raise ValueError(
                f"need 1 <= min_workers <= max_workers, got {min_workers}, {max_workers}"
            )
        self.graph = graph
        self.targets = _targets(graph, targets)
        self.interval_s = interval_s
        self.warm_up = warm_up
        self.activation = activation
        self.threshold = threshold
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.workers = workers
        self._warming = warm_up
        self._proposals: list[int] = []

    def rescaled(self, workers: int) -> None:
        """The run now has ``workers`` (a start or a rescale): warm up again."""
        self.workers = workers
        self._warming = self.warm_up
        self._proposals = []

    def source_ratio(self, measurement: Measurement) -> float:
        """The worst observed / target rate over the sources given a target."""
        ratios = []
        for v, target in self.targets.items():
            r = measurement.operators.get(v)
            observed = r.observed_output_rate if r is not None else 0.0
            ratios.append(observed / target if target > 0 else math.inf)
        return min(ratios, default=1.0)

    def observe(self, measurement: Measurement) -> Decision:
        """One policy interval: a decision, which rescales only when the knobs allow."""
        current = self.workers
        d = decide(
            self.graph,
            measurement.operators,
            self.targets,
            workers=current,
            min_workers=self.min_workers,
            max_workers=self.max_workers,
        )

        def hold(why: str) -> Decision:
            return Decision(current, current, d.proposed, d.per_operator, d.estimates, why)

        if measurement.workers != current:
            return hold(f"measured at {measurement.workers} workers, running {current}: ignored")
        if self._warming > 0:
            self._warming -= 1
            return hold(f"warming up ({self.warm_up - self._warming} of {self.warm_up})")
        ratio = self.source_ratio(measurement)
        proposed = d.proposed
        if proposed == current:
            self._proposals = []
            return hold(f"at the optimum: {d.reason}")
        if proposed > current and ratio >= 1 - self.threshold:
            self._proposals = []
            return hold(f"sources at {ratio:.0%} of target, within θ: no scale-up ({d.reason})")
        if proposed < current and ratio < 1 - self.threshold:
            self._proposals = []
            return hold(f"sources at {ratio:.0%} of target: no scale-down ({d.reason})")
        if self._proposals and (self._proposals[-1] > current) != (proposed > current):
            self._proposals = []
        self._proposals.append(proposed)
        if len(self._proposals) < self.activation:
            return hold(
                f"{len(self._proposals)} of {self.activation} intervals propose {proposed}"
                f" ({d.reason})"
            )
        window = self._proposals[-self.activation :]
        target = min(window) if proposed > current else max(window)
        self.rescaled(target)
        why = f"rescale from {current} to {target}: {d.reason}"
        return Decision(target, current, d.proposed, d.per_operator, d.estimates, why)
