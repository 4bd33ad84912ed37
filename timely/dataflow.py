"""The logical graph a user builds: ``Dataflow``, ``Stream``, loop scopes and inputs."""

from __future__ import annotations

import dataclasses
import functools
import inspect as _inspect
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from progress import GraphError, PathSummary
from timely.comm.messages import Advance, Close, InputCommand, Send
from timely.errors import GraphBuildError, function_location
from timely.graph.plan import EdgeSpec, Plan, VertexSpec
from timely.graph.spec import RunSpec
from timely.graph.system import (
    Concat,
    FeedbackVertex,
    Forward,
    Gathered,
    InputVertex,
    Inspect,
    Marks,
    SinkVertex,
    SourceVertex,
)
from timely.routing.channels import Channel, Gather, broadcast, exchange, pipeline
from timely.session.start import start_session
from timely.sinks import Sink
from timely.vertex import Vertex

if TYPE_CHECKING:
    from timely.session.base import Results, Session
    from timely.sources import Source

VertexFactory = Callable[[], Vertex]


class Scope:
    """A loop scope: timestamps inside carry one more counter than outside."""

    def __init__(self, flow: Dataflow, parent: Scope | None, name: str, max_iters: int | None):
        self.flow = flow
        self.parent = parent
        self.name = name
        self.max_iters = max_iters
        self.depth: int = 0 if parent is None else parent.depth + 1
        self._feedbacks: list[Feedback] = []

    def feedback(self, step: int = 1, name: str | None = None) -> tuple[Feedback, Stream]:
        """A stream that carries what is later ``connect``-ed to it, ``step`` iterations on."""
        if self.parent is None:
            raise GraphBuildError("feedback needs a loop scope: use flow.loop() to make one")
        handle = Feedback(self, step, name or f"{self.name}.feedback{len(self._feedbacks)}")
        self._feedbacks.append(handle)
        return handle, handle.stream

    def __repr__(self) -> str:
        return f"Scope({self.name!r}, depth={self.depth})"


class Feedback:
    """The far end of a loop: records connected here re-enter the loop one iteration later."""

    def __init__(self, scope: Scope, step: int, name: str) -> None:
        self.scope = scope
        self.connected = False
        d = scope.depth
        internal = {(0, 0): PathSummary.feedback(step) if step > 0 else PathSummary.identity()}
        limit = scope.max_iters
        self.vertex = scope.flow._add_vertex(
            name,
            lambda: FeedbackVertex(step, limit),
            (d,),
            (d,),
            internal=internal,
            where="feedback",
            kind="feedback",
            loop=scope.name,
        )
        self.stream = Stream(scope.flow, self.vertex, 0, scope)

    def connect(self, stream: Stream) -> None:
        """Feed ``stream`` (inside the loop) back to the loop's head."""
        if self.connected:
            raise GraphBuildError(f"feedback {self.stream.name!r} is already connected")
        stream._check_scope(self.scope, "connect to this loop's feedback")
        self.scope.flow._edges.append(
            EdgeSpec(stream.vertex, stream.port, self.vertex, 0, pipeline())
        )
        self.connected = True


_STREAM_METHODS: dict[str, Callable[..., Any]] = {}
_PLUGINS_LOADED = False
_PLUGIN_GROUP = "timely.operators"


def stream_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``fn(stream, ...)`` callable as ``stream.<fn name>(...)``.

    Operator libraries (``operators/``) register their operators this way, so that
    ``timely`` never imports them: they are found through the ``timely.operators``
    entry-point group the first time a stream lacks an attribute.
    """
    name = fn.__name__
    if hasattr(Stream, name):
        raise ValueError(f"Stream.{name} is built in; an operator cannot replace it")
    _STREAM_METHODS[name] = fn
    return fn


def _stream_method(name: str) -> Callable[..., Any] | None:
    global _PLUGINS_LOADED
    if name not in _STREAM_METHODS and not _PLUGINS_LOADED:
        _PLUGINS_LOADED = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=_PLUGIN_GROUP):
            ep.load()
    return _STREAM_METHODS.get(name)


class Stream:
    """Batches of timestamped records flowing out of one vertex output."""

    def __init__(
        self, flow: Dataflow, vertex: int, port: int, scope: Scope, invariant: bool = False
    ) -> None:
        self.flow = flow
        self.vertex = vertex
        self.port = port
        self.scope = scope
        self.invariant = invariant
        """Entered into its loop as loop-invariant (:meth:`enter`)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        method = _stream_method(name)
        if method is None:
            raise AttributeError(f"'Stream' has no operator {name!r}")
        return functools.partial(method, self)

    @property
    def name(self) -> str:
        return self.flow._vertices[self.vertex].name

    def _check_scope(self, scope: Scope, what: str) -> None:
        if self.flow is not scope.flow:
            raise GraphBuildError(
                f"stream {self.name!r} belongs to dataflow {self.flow.name!r}, not "
                f"{scope.flow.name!r}; build each dataflow from its own inputs"
            )
        if self.scope is not scope:
            raise GraphBuildError(
                f"cannot {what}: stream {self.name!r} is in scope {self.scope.name!r} but the "
                f"step is in {scope.name!r}; bring it in with .enter(loop) or out with .leave()"
            )

    # -- placing vertices -----------------------------------------------------------------
    def unary(
        self,
        vertex: VertexFactory | type[Vertex],
        name: str | None = None,
        channel: Channel | None = None,
        outputs: int = 1,
    ) -> Stream:
        """Place a vertex with this stream as its one input; return its first output."""
        streams = self.flow.vertex([(self, channel)], vertex, name=name, outputs=outputs)
        return streams[0]

    def binary(
        self,
        other: Stream,
        vertex: VertexFactory | type[Vertex],
        name: str | None = None,
        channels: tuple[Channel | None, Channel | None] = (None, None),
        outputs: int = 1,
    ) -> Stream:
        """Place a two-input vertex fed by this stream (input 0) and ``other`` (input 1)."""
        ins = [(self, channels[0]), (other, channels[1])]
        return self.flow.vertex(ins, vertex, name=name, outputs=outputs)[0]

    def concat(self, *others: Stream, name: str | None = None) -> Stream:
        """All records of this stream and ``others``, times unchanged."""
        ins: list[tuple[Stream, Channel | None]] = [(s, None) for s in (self, *others)]
        return self.flow.vertex(ins, Concat, name=name or "concat", where="concat")[0]

    def exchange(self, key: Callable[[Any], Any] | None = None, name: str | None = None) -> Stream:
        """Repartition: each record moves to the worker that owns ``key(record)`` (without
        ``key``, the record itself)."""
        return self.unary(Forward, name=name or "exchange", channel=exchange(key))

    def broadcast(self, name: str | None = None) -> Stream:
        """Every worker receives every record."""
        return self.unary(Forward, name=name or "broadcast", channel=broadcast())

    def inspect(self, f: Callable[[Any], Any], name: str | None = None) -> Stream:
        """Call ``f(record)`` on every record (on its worker) and pass records on unchanged."""
        return self.flow.vertex(
            [(self, None)], lambda: Inspect(f), name=name or "inspect", where=function_location(f)
        )[0]

    # -- loops ----------------------------------------------------------------------------
    def enter(self, scope: Scope, invariant: bool = False) -> Stream:
        """This stream inside the loop ``scope``: its records come at iteration 0; with
        ``invariant=True`` a step fed by it sees them at every iteration of their outer
        time (epoch) too, as if sent again at each (what a table used in a loop body
        wants: edges joined with each round's frontier). A stream of an enclosing scope
        used by a step inside a loop is entered so for you."""
        if scope.parent is None or self.scope is not scope.parent:
            raise GraphBuildError(
                f"stream {self.name!r} in scope {self.scope.name!r} can only enter a loop "
                f"made in that scope; {scope.name!r} was made in "
                f"{scope.parent.name if scope.parent else 'no scope'!r}"
            )
        if self.invariant:
            raise GraphBuildError(
                f"stream {self.name!r} is loop-invariant in {self.scope.name!r}; entered "
                f"again into {scope.name!r} it would be seen at the outer loop's first "
                "round only: in the inner loop, join with the stream from outside both "
                "loops (a join takes it from any depth), or first combine it in the "
                "outer loop with a stream of that loop (concat, join) and use the result"
            )
        d = self.scope.depth
        v = self.flow._add_vertex(
            f"{scope.name}.enter",
            Forward,
            (d,),
            (d + 1,),
            internal={(0, 0): PathSummary.ingress()},
            where="enter",
            kind="ingress",
        )
        self.flow._edges.append(EdgeSpec(self.vertex, self.port, v, 0, pipeline()))
        return Stream(self.flow, v, 0, scope, invariant)

    def leave(self) -> Stream:
        """This stream outside its loop (the loop counter is dropped)."""
        scope = self.scope
        if scope.parent is None:
            raise GraphBuildError(f"stream {self.name!r} is not inside a loop; nothing to leave")
        d = scope.depth
        v = self.flow._add_vertex(
            f"{scope.name}.leave",
            Forward,
            (d,),
            (d - 1,),
            internal={(0, 0): PathSummary.egress()},
            where="leave",
            kind="egress",
        )
        self.flow._edges.append(EdgeSpec(self.vertex, self.port, v, 0, pipeline()))
        return Stream(self.flow, v, 0, scope.parent)

    def iterate(
        self,
        body: Callable[[Stream], Stream],
        until: str | Callable[[Any], bool] | None = None,
        max_iters: int | None = None,
        name: str = "iterate",
        min_by: tuple[Callable[[Any], Any], Callable[[Any], Any]] | None = None,
    ) -> Stream:
        """Apply ``body`` again and again, per epoch, until ``until`` says stop.

        ``body`` gets a stream inside a new loop scope and returns one in that scope.
        ``max_iters`` bounds how many times ``body`` is applied (unbounded by default).

        - ``until=None``: each round's output is fed back and also leaves; records go
          round until ``body`` emits none for them. The result holds every round's output.
        - ``until="fixpoint"``: stop when a round derives nothing new in the epoch; the
          result is the set reached: the input and all ``body`` derived from it, each once
          (``body`` only sees what is new; records must be hashable).
          With ``min_by=(key, value)`` the loop keeps, per key, the record of least
          ``value``: a record goes round only if it improves on its key's, and the result
          is each key's least record (label propagation, shortest paths).
        - ``until=pred``: per record, the first of ``x, body(x), body(body(x)), ...`` for
          which ``pred`` holds leaves; the others go round again (Haskell's ``until``).

        The last two are in the operator library (``operators/loops.py``).
        """
        if max_iters is not None and max_iters < 1:
            raise GraphBuildError(f"iterate: max_iters must be >= 1, got {max_iters}")
        if isinstance(until, int):
            raise GraphBuildError(
                f"iterate: until must be None, 'fixpoint' or a predicate, got {until!r}; "
                f"to bound the rounds, pass max_iters={until!r} by keyword"
            )
        if min_by is not None and until != "fixpoint":
            raise GraphBuildError(
                f"iterate: min_by keeps the least record per key of a fixpoint; pass "
                f"until='fixpoint' with it (got until={until!r})"
            )
        if until is not None:
            until_loop = _stream_method("_iterate_until")
            if until_loop is None:
                raise GraphBuildError(
                    "iterate(until=...) is provided by the operator library: install the "
                    "package that registers the 'timely.operators' entry point (operators/)"
                )
            result: Stream = until_loop(self, body, until, max_iters, name, min_by)
            return result
        loop = self.flow.loop(name=name, parent=self.scope, max_iters=max_iters)
        handle, again = loop.feedback()
        result = body(self.enter(loop).concat(again, name=f"{name}.head"))
        if not isinstance(result, Stream):
            raise GraphBuildError(f"iterate: the body must return a Stream, got {result!r}")
        handle.connect(result)
        return result.leave()

    # -- outputs --------------------------------------------------------------------------
    def _top_level(self, what: str) -> None:
        if self.scope.depth:
            raise GraphBuildError(
                f"{what} reads whole epochs: call .leave() to bring {self.name!r} out of "
                f"loop {self.scope.name!r} first"
            )

    def subscribe(
        self, callback: Callable[[int, list[Any]], None], name: str = "subscribe"
    ) -> None:
        """Call ``callback(epoch, records)`` on the driver once per completed epoch, in order."""
        self._top_level("subscribe")
        out = self.flow._outputs
        key = f"{name}#{len(out)}"
        out[key] = callback
        self.flow.vertex(
            [(self, Gather(0))],
            lambda: Gathered(key),
            name=name,
            outputs=0,
            where=function_location(callback),
        )

    def collect(self, name: str) -> None:
        """Gather this stream's records; ``run()`` returns them under ``name``."""
        self._top_level("collect")
        if name in self.flow._collects:
            raise GraphBuildError(f"collect name {name!r} is used twice")
        self.flow._collects.append(name)
        self.flow.vertex(
            [(self, Gather(0))], lambda: Gathered(name), name=f"collect:{name}", outputs=0
        )

    def sink(self, sink: Sink, name: str = "sink") -> None:
        """Write this stream's records to ``sink`` epoch by epoch, exactly once."""
        self._top_level("sink")
        if not isinstance(sink, Sink):
            raise GraphBuildError(f"sink: expected a timely.Sink, got {sink!r}")
        self.flow._sinks.append(sink)
        self.flow.vertex(
            [(self, None)],
            lambda: SinkVertex(sink),
            name=name,
            outputs=0,
            where=function_location(type(sink).write),
        )

    def probe(self, name: str = "probe") -> Probe:
        """A handle on the frontier of this stream, readable from the driver."""
        v = self.flow.vertex([(self, None)], Forward, name=name, outputs=0)
        del v
        probe = Probe(self.flow, len(self.flow._vertices) - 1)
        return probe


class Probe:
    """The frontier at a point of the dataflow, as the workers see it."""

    def __init__(self, flow: Dataflow, vertex: int) -> None:
        self.flow = flow
        self.vertex = vertex

    def frontier(self) -> list[tuple[int, ...]]:
        """The minimal times that could still arrive (empty: the stream is done)."""
        return self.flow._session_or_fail("read a probe").probe_frontier(self.vertex)

    def done(self, epoch: int) -> bool:
        """Whether every record of ``epoch`` (and before) has passed this point."""
        return not any(t[0] <= epoch for t in self.frontier())


class InputHandle:
    """A driver-fed input (Naiad's ``OnNext``/``OnCompleted``): send, advance, close."""

    def __init__(self, flow: Dataflow, vertex: int, name: str) -> None:
        self.flow = flow
        self.vertex = vertex
        self.name = name
        self.stream = Stream(flow, vertex, 0, flow.root)
        self.epoch = 0
        self.closed = False
        self._pending: list[InputCommand] = []

    def send(self, records: Iterable[Any]) -> None:
        """Send ``records`` at the current epoch."""
        self._live("send")
        self._command(Send(list(records)))

    def advance_to(self, epoch: int) -> None:
        """Move to ``epoch``; the epochs before it are complete from this input's side."""
        self._live("advance")
        if epoch < self.epoch:
            raise ValueError(
                f"input {self.name!r} is at epoch {self.epoch}; cannot go back to {epoch}"
            )
        if epoch > self.epoch:
            self.epoch = epoch
            self._command(Advance(epoch))

    def close(self) -> None:
        """No more records from this input."""
        if not self.closed:
            self.closed = True
            self._command(Close())

    def _live(self, what: str) -> None:
        if self.closed:
            raise ValueError(f"cannot {what}: input {self.name!r} is closed")

    def _command(self, cmd: InputCommand) -> None:
        session = self.flow._session
        if session is None:
            self._pending.append(cmd)
        else:
            session.input_command(self.vertex, cmd)


class Dataflow:
    """A logical dataflow graph; ``run`` executes it on workers."""

    def __init__(self, name: str = "dataflow") -> None:
        self.name = name
        self.root = Scope(self, None, "root", None)
        self._vertices: list[VertexSpec] = []
        self._edges: list[EdgeSpec] = []
        self._inputs: list[InputHandle] = []
        self._outputs: dict[str, Callable[[int, list[Any]], None]] = {}
        self._collects: list[str] = []
        self._sinks: list[Sink] = []
        self._scopes: list[Scope] = []
        self._session: Session | None = None

    # -- building -------------------------------------------------------------------------
    def new_input(self, name: str = "input") -> InputHandle:
        """An input fed from the driver; its stream is ``handle.stream``."""
        v = self._add_vertex(name, InputVertex, (), (0,), where="input", kind="input")
        handle = InputHandle(self, v, name)
        self._inputs.append(handle)
        return handle

    def source(self, src: Source, name: str = "source") -> Stream:
        """A connector source; each worker reads its share of ``src``'s partitions."""
        v = self._add_vertex(
            name,
            lambda: SourceVertex(src),
            (),
            (0,),
            where=function_location(type(src).read),
            kind="source",
        )
        self._vertices[v].source = src
        return Stream(self, v, 0, self.root)

    def loop(
        self, name: str = "loop", parent: Scope | None = None, max_iters: int | None = None
    ) -> Scope:
        """A loop scope inside ``parent`` (the top level by default)."""
        scope = Scope(self, parent or self.root, f"{name}{len(self._scopes)}", max_iters)
        self._scopes.append(scope)
        return scope

    def vertex(
        self,
        inputs: Sequence[tuple[Stream, Channel | None]],
        vertex: VertexFactory | type[Vertex],
        name: str | None = None,
        outputs: int = 1,
        where: str | None = None,
        loop_invariant: bool = True,
    ) -> list[Stream]:
        """Place a vertex fed by ``inputs`` (each with its channel); return its outputs.

        An input from an enclosing scope is entered into the deepest input's loop for
        you: loop-invariant (seen at every iteration) unless ``loop_invariant=False``, for
        a step that keeps records across times itself (``join_streaming``), which gets
        them once, at iteration 0."""
        if not inputs:
            raise GraphBuildError("a vertex needs at least one input; use new_input() or source()")
        scope = max((s.scope for s, _ in inputs), key=lambda sc: sc.depth)
        inputs = [(_entered(s, scope, loop_invariant), channel) for s, channel in inputs]
        if inputs and all(s.invariant for s, _ in inputs):
            raise GraphBuildError(
                f"cannot place {name or 'vertex'!r}: its inputs are all loop-invariant streams, "
                "which a step sees at every iteration only beside a stream of the loop; use "
                "the stream outside the loop directly in the step that combines it with the "
                "loop's stream (it is entered for you), transforming it before the loop"
            )
        for stream, _ in inputs:
            stream._check_scope(scope, f"place {name or 'vertex'!r}")
        factory, default_where, label = _factory(vertex)
        marks: list[tuple[Stream, Channel | None]] = []
        if any(s.invariant for s, _ in inputs):
            # Every worker must hear of each iteration its other inputs have records at,
            # to see the invariant records there too.
            marks = [
                (
                    self.vertex([(s, pipeline())], Marks, name=f"{name or label}.marks")[0],
                    broadcast(),
                )
                for s, _ in inputs
                if not s.invariant
            ]
        d = scope.depth
        v = self._add_vertex(
            name or label,
            factory,
            (d,) * (len(inputs) + len(marks)),
            (d,) * outputs,
            where=where or default_where,
        )
        if marks:
            ports = frozenset(range(len(inputs), len(inputs) + len(marks)))
            self._vertices[v] = dataclasses.replace(self._vertices[v], marks_ports=ports)
            inputs = [*inputs, *marks]
        for port, (stream, channel) in enumerate(inputs):
            if channel is not None and not isinstance(channel, Channel):
                raise GraphBuildError(
                    f"input {port} of {name or label!r}: channel must be pipeline(), "
                    f"exchange(key) or broadcast(), got {channel!r}"
                )
            self._edges.append(
                EdgeSpec(
                    stream.vertex,
                    stream.port,
                    v,
                    port,
                    channel or pipeline(),
                    invariant=stream.invariant,
                )
            )
        return [Stream(self, v, o, scope) for o in range(outputs)]

    def _add_vertex(
        self,
        name: str,
        factory: VertexFactory,
        input_depths: tuple[int, ...],
        output_depths: tuple[int, ...],
        internal: dict[tuple[int, int], PathSummary] | None = None,
        where: str = "?",
        kind: str = "vertex",
        loop: str | None = None,
    ) -> int:
        if self._session is not None:
            raise GraphBuildError("the dataflow is running; build it completely before running it")
        index = len(self._vertices)
        self._vertices.append(
            VertexSpec(
                index, name, factory, input_depths, output_depths, internal, where, kind, loop=loop
            )
        )
        return index

    def readers(self, stream: Stream) -> list[int]:
        """The vertices that read ``stream``, so far (the graph may grow until it runs):
        what an operator asks when its output could be narrowed to what its readers use."""
        return [e.dst for e in self._edges if (e.src, e.src_port) == (stream.vertex, stream.port)]

    def build(self) -> Plan:
        """Validate the graph and return its plan; errors say how to fix the graph."""
        for scope in self._scopes:
            for fb in scope._feedbacks:
                if not fb.connected:
                    raise GraphBuildError(
                        f"loop {scope.name!r}: feedback {fb.stream.name!r} is never connected; "
                        "call handle.connect(stream) with the stream to feed back"
                    )
        if not any(s.kind in ("input", "source") for s in self._vertices):
            raise GraphBuildError(
                "the dataflow has no input: add flow.new_input() or flow.source()"
            )
        try:
            return Plan(self.name, list(self._vertices), list(self._edges))
        except GraphError as e:
            raise GraphBuildError(f"dataflow {self.name!r}: {e}") from None

    # -- running --------------------------------------------------------------------------
    def run(
        self,
        workers: int = 2,
        backend: str = "ray",
        address: str | None = None,
        **options: Any,
    ) -> Results:
        """Run to completion: feed what was sent to the inputs, close them, wait for the end.

        Returns what ``collect`` gathered. ``backend="ray"`` (the default) starts local Ray
        when none is running; ``address="auto"`` or an address joins a cluster.
        ``backend="inline"`` runs every worker in this process (for tests).
        A progress bar shows on a terminal once the run lasts a second
        (``progress=False``: none; see :mod:`timely.observe.progressbar`).
        """
        options.setdefault("progress", "auto")
        for handle in self._inputs:
            handle.close()  # before the start: the closes go with what was sent
        with self.activate(workers=workers, backend=backend, address=address, **options) as s:
            return s.join()

    def activate(
        self,
        workers: int = 2,
        backend: str = "ray",
        address: str | None = None,
        **options: Any,
    ) -> Session:
        """Start the dataflow and return a session: feed inputs while it runs, then ``join()``."""
        session = start_session(
            self._run_spec(), workers=workers, backend=backend, address=address, **options
        )
        self._session = session
        try:
            pending: list[tuple[int, InputCommand]] = []
            for handle in self._inputs:
                pending += [(handle.vertex, cmd) for cmd in handle._pending]
                handle._pending = []
            session.input_commands(pending)  # ready at once: one frame per worker
        except BaseException:
            session.close()  # release the workers: the caller never got the session
            raise
        return session

    def _run_spec(self) -> RunSpec:
        """What a session needs of this dataflow (it reads nothing else of it)."""

        def detach() -> None:
            self._session = None

        return RunSpec(
            plan=self.build(),
            collects=list(self._collects),
            callbacks=dict(self._outputs),
            sinks=list(self._sinks),
            open_inputs=lambda: [h.name for h in self._inputs if not h.closed],
            detach=detach,
        )

    def _session_or_fail(self, what: str) -> Session:
        if self._session is None:
            raise RuntimeError(f"cannot {what}: the dataflow is not running (use flow.activate())")
        return self._session


def _entered(stream: Stream, scope: Scope, invariant: bool = True) -> Stream:
    """``stream`` brought into ``scope`` when it comes from an enclosing scope: entered,
    loop-invariant (each iteration sees it) unless ``invariant`` is False. An invariant
    stream from further out than the scope just outside (nested loops) is refused: the
    outer loop's later iterations would not see it. Entered plainly, it goes in loop by
    loop (a step that keeps records across times sees them from then on). Others are
    left as they are (``_check_scope`` then says what is wrong)."""
    if scope.parent is None or stream.scope is scope or stream.flow is not scope.flow:
        return stream
    path: list[Scope] = []  # the loops from just inside the stream's scope to ``scope``
    at: Scope | None = scope
    while at is not None and at is not stream.scope:
        path.append(at)
        at = at.parent
    if at is None:
        return stream
    if len(path) > 1 and invariant:
        raise GraphBuildError(
            f"stream {stream.name!r} of scope {stream.scope.name!r} is used in loop "
            f"{scope.name!r}, nested more than one loop deeper: bring it into each "
            "enclosing loop as a stream of that loop (for example joined or concatenated "
            "there), one level at a time"
        )
    for loop in reversed(path):
        stream = stream.enter(loop, invariant=invariant)
    return stream


def _factory(vertex: VertexFactory | type[Vertex]) -> tuple[VertexFactory, str, str]:
    """A zero-argument factory, the user code's file:line, and a default name."""
    if _inspect.isclass(vertex):
        if not issubclass(vertex, Vertex):
            raise GraphBuildError(f"{vertex.__name__} is not a Vertex subclass")
        where = function_location(vertex.on_recv)
        return vertex, where, vertex.__name__
    if isinstance(vertex, Vertex):
        raise GraphBuildError(
            "pass the Vertex class or a zero-argument factory, not an instance: every worker "
            "makes its own"
        )
    if not callable(vertex):
        raise GraphBuildError(f"expected a Vertex class or factory, got {vertex!r}")
    return vertex, function_location(vertex), getattr(vertex, "__name__", "vertex")
