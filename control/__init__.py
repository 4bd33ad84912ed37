"""Analysis and control: DS2's scaling decisions from the event log.

``control.rates`` measures (useful time, true and observed rates), ``control.ds2``
decides (per-operator optimal parallelism, the run's worker count), over the dataflow's
graph as ``control.graph`` reads it; ``control.autoscale`` closes the loop on a running
session (``autoscale=``), acting through ``Session.rescale`` (checkpoint, stop, restore
at W*). Imports ``timely``; nothing in the runtime
imports it.
"""

from control.autoscale import Autoscale, AutoscaleMonitor
from control.ds2 import Decision, Estimate, Policy, decide, estimate, optimal_parallelism
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
    "Autoscale",
    "AutoscaleMonitor",
    "Decision",
    "Edge",
    "Estimate",
    "Graph",
    "InstanceRates",
    "Measurement",
    "OperatorRates",
    "Policy",
    "RateMeter",
    "Rates",
    "decide",
    "estimate",
    "measure_trace",
    "optimal_parallelism",
]
