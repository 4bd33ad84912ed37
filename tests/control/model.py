"""A synthetic dataflow whose operators scale as the model says, to test the policy on.

Operator i costs ``cost`` seconds of useful time per record on one instance, and sends
``selectivity`` records per record. With p instances, an instance runs at
1 / (cost · (1 + α(p − 1))) records per useful second: α = 0 is DS2's linear scaling,
α > 0 loses a share of each instance to coordination as p grows (capacity still grows
with p, as long as α < 1). As in timely, every one of the W workers runs every operator
on one thread: a worker's second is shared by all the operators, so W workers keep up
when the operators' useful time, added up, is at most W seconds a second. Sources emit
their target rate unless the workers cannot keep up; then backpressure slows every
source by the factor that makes the workers exactly busy. A measurement of one second
reports what each operator processed and sent, and the useful time that took.

Everything is exact (``Fraction``); only the measurements handed to the policy are
floats, as the event log's would be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from hypothesis import assume
from hypothesis import strategies as st

from control import Graph, Measurement, OperatorRates

LIMIT = 256
"""The most workers a generated dataflow may need."""


@dataclass(frozen=True)
class Model:
    graph: Graph
    cost: tuple[Fraction, ...]
    """Seconds of useful time per record, for one instance at p = 1."""
    selectivity: tuple[Fraction, ...]
    targets: dict[int, int]
    """Records per second wanted from each root."""
    alpha: Fraction = Fraction(0)

    def demand(self) -> list[Fraction]:
        """in*_i: records per second each operator must process at the targets."""
        demand = [Fraction(0)] * len(self.cost)
        for v in self.graph.order:
            if v in self.targets:
                demand[v] = Fraction(self.targets[v])
            else:
                demand[v] = sum(
                    (demand[u] * self.selectivity[u] for u, _ in self.graph.inputs(v)),
                    Fraction(0),
                )
        return demand

    def rate(self, v: int, p: int) -> Fraction:
        """Records one of p instances of ``v`` processes per second of useful time."""
        return 1 / (self.cost[v] * (1 + self.alpha * (p - 1)))

    def sustains(self, v: int, p: int) -> bool:
        return p * self.rate(v, p) >= self.demand()[v]

    def load(self, workers: int) -> Fraction:
        """Seconds of useful time a second the operators take, added up, on ``workers``."""
        demand = self.demand()
        return sum((d / self.rate(v, workers) for v, d in enumerate(demand)), Fraction(0))

    def needed(self) -> int:
        """The fewest workers that keep up with the targets (every worker runs every
        operator: their loads add up)."""
        return next(w for w in range(1, LIMIT + 1) if self.load(w) <= w)

    def optimal(self) -> list[int]:
        """Each operator's fewest instances that keep up with the targets (linear: the
        ceiling of DS2's formula)."""
        demand = self.demand()
        out = []
        for v in range(len(self.cost)):
            if demand[v] == 0:
                out.append(1)
            elif self.alpha == 0:
                out.append(max(1, math.ceil(demand[v] * self.cost[v])))
            else:
                out.append(next(p for p in range(1, LIMIT + 1) if self.sustains(v, p)))
        return out

    def throttle(self, workers: int) -> Fraction:
        """The factor backpressure slows the sources by at ``workers`` (1: none)."""
        load = self.load(workers)
        return Fraction(1) if load <= workers else workers / load

    def measure(self, workers: int) -> Measurement:
        """One second of running at ``workers``, as the event log would measure it."""
        f = self.throttle(workers)
        operators = {}
        for v, d in enumerate(self.demand()):
            processed = f * d
            operators[v] = OperatorRates(
                operator=v,
                name=self.graph.names[v],
                kind=self.graph.kinds[v],
                instances=workers,
                interval_s=1.0,
                processed=float(processed),
                sent=float(processed * self.selectivity[v]),
                activation_s=float(processed / self.rate(v, workers)),
            )
        return Measurement(0, 10**9, workers, self.graph, {}, operators)


SELECTIVITIES = [Fraction(1, 3), Fraction(1, 2), Fraction(1), Fraction(2), Fraction(3)]


@st.composite
def models(draw: st.DrawFn, alphas: tuple[Fraction, ...] = (Fraction(0),)) -> Model:
    """A random DAG of chains and diamonds (each vertex fed by one or two earlier ones),
    with one or two roots, per-record costs (whole microseconds) and target rates."""
    roots = draw(st.integers(1, 2))
    n = draw(st.integers(roots + 1, 8))
    edges: list[tuple[int, int]] = []
    for v in range(roots, n):
        ups = draw(st.lists(st.integers(0, v - 1), min_size=1, max_size=2, unique=True))
        edges += [(u, v) for u in ups]
    graph = Graph.of([f"op{v}" for v in range(n)], edges)
    cost = tuple(Fraction(draw(st.integers(1, 2000)), 10**6) for _ in range(n))
    selectivity = tuple(
        Fraction(1) if v < roots else draw(st.sampled_from(SELECTIVITIES)) for v in range(n)
    )
    targets = {v: draw(st.integers(0, 50_000)) for v in range(roots)}
    alpha = draw(st.sampled_from(alphas))
    model = Model(graph, cost, selectivity, targets, alpha)
    demand = model.demand()
    assume(all(d == 0 or model.sustains(v, LIMIT) for v, d in enumerate(demand)))
    assume(model.load(LIMIT) <= LIMIT)
    return model
