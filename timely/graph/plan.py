"""The physical plan: what every worker instantiates, and the progress graph it tracks."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from progress import Graph, GraphBuilder, PathSummary, Pointstamp, source, target
from timely.comm.coalesce import DEFAULT_TARGET
from timely.graph.system import InputVertex
from timely.routing.bins import DEFAULT_BINS
from timely.routing.channels import Broadcast, Channel, Exchange
from timely.sources import Source
from timely.vertex import Vertex

if TYPE_CHECKING:
    from timely.state.disk import StoreConfig


SEND_EARLY = 1 << 21
"""The Arrow bytes a step routes to one peer before it sends them (when its host can send
mid-step: ``Worker.early``), without waiting for the step's end: the peer then reads and
routes while this worker still routes, instead of each waiting on the other's step."""


@dataclass
class VertexSpec:
    """One logical vertex: how to make it, its ports, and what its paths do to time."""

    index: int
    name: str
    factory: Callable[[], Vertex]
    input_depths: tuple[int, ...]
    output_depths: tuple[int, ...]
    internal: dict[tuple[int, int], PathSummary] | None = None
    where: str = "?"
    kind: str = "vertex"
    """``vertex`` (user), ``input``, ``source``, or a system kind (ingress, egress, …)."""
    source: Source | None = None
    """The connector a ``source`` vertex reads (for controllers: its offered rate)."""
    control_port: int | None = None
    """The input on which a keyed vertex receives the run's routing configurations
    (reconfigurable runs; :meth:`Plan.with_control`), hidden from the vertex."""
    loop: str | None = None
    """For a ``feedback`` vertex, the name of the loop scope it closes (what the driver's
    ``loop_warning`` names)."""
    marks_ports: frozenset[int] = frozenset()
    """Inputs carrying, from every worker, a mark per time its other inputs had records
    at (a vertex with loop-invariant inputs: each iteration that happens anywhere gets
    the invariant records on every worker), hidden from the vertex."""

    @property
    def inputs(self) -> int:
        return len(self.input_depths)

    @property
    def outputs(self) -> int:
        return len(self.output_depths)


@dataclass(frozen=True)
class EdgeSpec:
    """Output ``src_port`` of ``src`` feeds input ``dst_port`` of ``dst`` through ``channel``."""

    src: int
    src_port: int
    dst: int
    dst_port: int
    channel: Channel
    invariant: bool = False
    """The edge carries a stream entered into a loop as loop-invariant: the receiving
    vertex sees its records of an outer time at every iteration of it (``Stream.enter``)."""


class Plan:
    """A validated dataflow, ready to run on any number of workers."""

    def __init__(
        self,
        name: str,
        vertices: list[VertexSpec],
        edges: list[EdgeSpec],
        bins: int = DEFAULT_BINS,
        control: int | None = None,
    ) -> None:
        self.name = name
        self.vertices = vertices
        self.edges = edges
        self.bins = bins
        """Keys hash to this many bins; routing tables map bins to workers."""
        self.control = control
        """The driver input that carries routing configurations (None: the routing
        table never changes in this run)."""
        self.live_control = False
        """The driver keeps ``control`` open while the run goes (``reconfigurable=True``,
        no schedule given up front): sources read nothing at or past its epoch, where a
        change of workers may take effect."""
        self.store: StoreConfig | None = None
        """Where the disk state backend keeps this run's tables (None: in memory)."""
        self.coalesce_rows = DEFAULT_TARGET
        """Rows a step's small Arrow batches for one peer are merged toward before they
        are sent (:mod:`timely.comm.coalesce`; 0: never merged). A run option."""
        self.send_early = SEND_EARLY
        """The Arrow bytes a step routes to one peer before it sends them, without
        waiting for the step's end (0: only at the step's end). A run option."""
        self.profile_dir: str | None = None
        """Where each worker writes its cProfile (:mod:`timely.worker.profiling`; None:
        not profiled). A run option."""
        builder = GraphBuilder()
        for spec in vertices:
            builder.add_node(spec.name, spec.input_depths, spec.output_depths, spec.internal)
        for e in edges:
            builder.add_edge(source(e.src, e.src_port), target(e.dst, e.dst_port))
        self.graph: Graph = builder.build()
        self.out_edges: list[list[list[EdgeSpec]]] = [
            [[] for _ in range(spec.outputs)] for spec in vertices
        ]
        for e in edges:
            self.out_edges[e.src][e.src_port].append(e)
        self.roots = [s.index for s in vertices if s.kind in ("input", "source")]
        self.invariant: dict[int, frozenset[int]] = {}
        """Per vertex, its input ports fed by loop-invariant streams."""
        for e in edges:
            if e.invariant:
                self.invariant[e.dst] = self.invariant.get(e.dst, frozenset()) | {e.dst_port}

    def with_control(self, bins: int = DEFAULT_BINS, reconfigurable: bool = False) -> Plan:
        """This plan with ``bins`` bins and, if ``reconfigurable``, a control input
        (``reconfigure``) broadcast to a hidden last input of every top-level vertex fed
        by an ``exchange``: the stream of configurations that Megaphone's migration
        follows (:mod:`timely.routing.bins`). Progress then orders every configuration before
        the data it applies to, on every worker."""
        if not reconfigurable:
            # The same graph: its reachability and cycle check are not built again
            # (~25 ms on a table PageRank's graph, a cost every run paid twice).
            plain = copy.copy(self)
            plain.bins, plain.control = bins, None
            plain.store, plain.coalesce_rows, plain.profile_dir = None, DEFAULT_TARGET, None
            plain.send_early = SEND_EARLY
            return plain
        vertices = list(self.vertices)
        edges = list(self.edges)
        c = len(vertices)
        vertices.append(
            VertexSpec(c, "reconfigure", InputVertex, (), (0,), where="reconfigure", kind="input")
        )
        keyed = sorted({e.dst for e in self.edges if isinstance(e.channel, Exchange)})
        for v in keyed:
            spec = vertices[v]
            if spec.internal is not None or any(spec.input_depths + spec.output_depths):
                continue  # inside a loop: its bins stay where they are
            port = spec.inputs
            vertices[v] = replace(spec, input_depths=(*spec.input_depths, 0), control_port=port)
            edges.append(EdgeSpec(c, 0, v, port, Broadcast()))
        return Plan(self.name, vertices, edges, bins, control=c)

    def initial_capabilities(self, epoch: int = 0) -> list[Pointstamp]:
        """What each worker holds at the start: every root's outputs at ``epoch`` (0, or the
        epoch after the checkpoint a run resumes from)."""
        return [
            (source(v, o), (epoch,)) for v in self.roots for o in range(self.vertices[v].outputs)
        ]

    def describe(self) -> dict[str, list[list[object]]]:
        """The graph as plain data, for an event log's header, a report or a web page:
        ``vertices`` (``[name, kind]`` each) and ``edges`` (``[src, dst, channel]`` each,
        the channel's kind in lower case: ``pipeline``, ``exchange``, …)."""
        return {
            "vertices": [[s.name, s.kind] for s in self.vertices],
            "edges": [[e.src, e.dst, type(e.channel).__name__.lower()] for e in self.edges],
        }

    def fingerprint(self) -> str:
        """A digest of the graph's shape: vertex names, kinds and ports, edges and channel
        kinds. A checkpoint only restores into a dataflow with the same fingerprint."""
        shape = [(s.name, s.kind, s.input_depths, s.output_depths) for s in self.vertices] + [
            (e.src, e.src_port, e.dst, e.dst_port, type(e.channel).__name__) for e in self.edges
        ]
        return hashlib.sha256(repr(shape).encode()).hexdigest()[:16]
