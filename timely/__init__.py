"""timely: timely dataflow in Python, with Naiad-style progress tracking, on Ray.

Build a :class:`Dataflow`, place vertices on its streams, and ``run`` it on workers.

The package is in layers, each importing only the layers below it (import-linter checks
it: ``[tool.importlinter]`` in pyproject.toml; ARCHITECTURE.md draws it), top first:

- :mod:`timely.cli` (``python -m timely``): the command line;
- :mod:`timely.dataflow`, the graph a user builds and runs; :mod:`timely.observe`,
  monitors that read a running session; :mod:`timely.backends`, what hosts the workers;
- :mod:`timely.session`: the driver's side of a run;
- :mod:`timely.worker`: the step loop, and its parts behind narrow interfaces;
- :mod:`timely.graph` (the plan a session runs) and :mod:`timely.checkpoint`;
- :mod:`timely.state`: keyed state, in memory or on disk;
- the interfaces: the vertex API (:mod:`timely.vertex`), sources and sinks
  (:mod:`timely.sources`, :mod:`timely.sinks`), the event log (:mod:`timely.eventlog`);
- :mod:`timely.routing` (key -> bin -> worker) and :mod:`timely.comm` (the messages,
  their wire format, the sockets between workers);
- :mod:`timely.errors`.

Below them all, ``progress`` (timestamps, frontiers, the progress protocol).
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
from timely.routing.columns import exchange_columns
from timely.routing.hashing import stable_hash
from timely.session.base import Results, Session
from timely.sinks import Sink, SinkLineage
from timely.sources import Source
from timely.state.columnar import ColumnState
from timely.state.keyed import KeyedState, StatefulVertex
from timely.vertex import Capability, Vertex

__version__ = "0.1.0"

__all__ = [
    "Capability",
    "ColumnState",
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
    "exchange_columns",
    "pipeline",
    "stable_hash",
    "stream_method",
]
