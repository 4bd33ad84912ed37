"""Naiad-style progress tracking: timestamps, path summaries, frontiers, the exchange protocol.

Pure Python, no I/O and no Ray, so that it can be tested alone. The runtime (``timely``)
feeds it occurrence-count updates and reads frontiers back.
"""

from progress.antichain import Antichain, MutableAntichain, partial_le
from progress.change_batch import ChangeBatch
from progress.exchange import ProgressBatch, ProgressView, Update, WorkerProgress
from progress.location import Location, Pointstamp, Port, source, target
from progress.reachability import Graph, GraphBuilder, GraphError, NodeSpec
from progress.summary import PathSummary
from progress.timestamp import Timestamp, join, less_equal, less_than, meet
from progress.tracker import Tracker

__all__ = [
    "Antichain",
    "ChangeBatch",
    "Graph",
    "GraphBuilder",
    "GraphError",
    "Location",
    "MutableAntichain",
    "NodeSpec",
    "PathSummary",
    "Pointstamp",
    "Port",
    "ProgressBatch",
    "ProgressView",
    "Timestamp",
    "Tracker",
    "Update",
    "WorkerProgress",
    "join",
    "less_equal",
    "less_than",
    "meet",
    "partial_le",
    "source",
    "target",
]
