"""timely: timely dataflow in Python, with Naiad-style progress tracking, on Ray.

Build a :class:`Dataflow`, place vertices on its streams, and ``run`` it on workers.
"""

from timely.dataflow import (
    Dataflow,
    Feedback,
    InputHandle,
    Probe,
    Scope,
    Stream,
    stream_method,
)
from timely.errors import (
    ConfigError,
    GraphBuildError,
    InternalError,
    TimelyError,
    UserFunctionError,
    WorkerDied,
)
from timely.graph.system import Marks
from timely.routing.channels import broadcast, exchange, pipeline
from timely.routing.hashing import stable_hash
from timely.session.base import Results, Session
from timely.sinks import Sink, SinkLineage
from timely.sources import Source
from timely.state.keyed import KeyedState, StatefulVertex
from timely.vertex import Capability, Vertex

__version__ = "0.1.0"

__all__ = [
    "Capability",
    "ConfigError",
    "Dataflow",
    "Feedback",
    "GraphBuildError",
    "InputHandle",
    "InternalError",
    "KeyedState",
    "Marks",
    "Probe",
    "Results",
    "Scope",
    "Session",
    "Sink",
    "SinkLineage",
    "Source",
    "StatefulVertex",
    "Stream",
    "TimelyError",
    "UserFunctionError",
    "Vertex",
    "WorkerDied",
    "broadcast",
    "exchange",
    "pipeline",
    "stable_hash",
    "stream_method",
]
