"""The physical plan: what every worker instantiates, and the progress graph it tracks."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from progress import Graph, GraphBuilder, PathSummary, Pointstamp, source, target
from timely.channels import Channel
from timely.sources import Source
from timely.vertex import Vertex


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


class Plan:
    """A validated dataflow, ready to run on any number of workers."""

    def __init__(self, name: str, vertices: list[VertexSpec], edges: list[EdgeSpec]) -> None:
        self.name = name
        self.vertices = vertices
        self.edges = edges
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
