"""Analysis and control: DS2's scaling decisions from the event log.

``control.rates`` measures (useful time, true and observed rates) over the dataflow's
graph as ``control.graph`` reads it. Pure parts only: acting on a decision is the
runtime's. Imports ``timely``; nothing in the runtime imports it.
"""

from control.graph import Edge, Graph
from control.rates import (
    InstanceRates,
    Measurement,
    OperatorRates,
    RateMeter,
    Rates,
    measure_trace,
)

__all__ = [
    "Edge",
    "Graph",
    "InstanceRates",
    "Measurement",
    "OperatorRates",
    "RateMeter",
    "Rates",
    "measure_trace",
]
