"""The vertex API: Naiad's ``on_recv``/``on_notify`` with timely's capabilities.

A vertex is a long-running, stateful object that every worker hosts one instance of.
The framework calls ``on_recv(input, records, time)`` for each batch that arrives and
``on_notify(time)`` once no more records at or before ``time`` can arrive at any of its
inputs (after ``notify_at(time)`` asked for it). From inside those calls the vertex may
``send_by(output, records, time)`` at the current time or later.

To send later than the call it is in (after buffering, say), a vertex holds a
*capability*: ``retain()`` returns one for the current time; it can be downgraded to
a later time and must be dropped when done, since a held capability holds back every
frontier downstream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from progress import Timestamp

if TYPE_CHECKING:
    from timely.routing.bins import Routing


class Step(Protocol):
    """What a vertex reads of its step's spec (:class:`timely.graph.plan.VertexSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def outputs(self) -> int: ...


class Host(Protocol):
    """What a vertex reads of the worker that hosts it (:class:`timely.worker.loop.Worker`)."""

    @property
    def index(self) -> int: ...

    @property
    def peers(self) -> int: ...

    @property
    def checkpointing(self) -> bool: ...

    @property
    def routing(self) -> Routing: ...

    def members_at(self, epoch: int) -> tuple[int, ...]: ...

    def frontier(self, vertex: int, port: int = 0) -> tuple[Timestamp, ...]: ...


class Context(Protocol):
    """Everything a vertex asks of the runtime: its context on its worker
    (:class:`timely.worker.context.VertexContext`, which checks each call). The vertex
    API depends on this and nothing of the worker's."""

    @property
    def index(self) -> int: ...

    @property
    def spec(self) -> Step: ...

    @property
    def worker(self) -> Host: ...

    def send(self, output: int, records: Any, time: Timestamp, held: Timestamp | None) -> None: ...

    def notify_at(self, time: Timestamp) -> None: ...

    def retain(self, time: Timestamp | None) -> Capability: ...

    def downgrade_capability(self, old: Timestamp, new: Timestamp) -> None: ...

    def drop_capability(self, time: Timestamp) -> None: ...

    def emit(self, key: str, epoch: int, records: list[Any]) -> None: ...

    def user_error(
        self, error: BaseException, time: Timestamp | None, record: Any, fn: Any
    ) -> NoReturn: ...


class Capability:
    """The right to send at ``time`` (or later) from every output of one vertex."""

    __slots__ = ("_ctx", "_live", "_time")

    def __init__(self, ctx: Context, time: Timestamp) -> None:
        self._ctx = ctx
        self._time = time
        self._live = True

    @property
    def time(self) -> Timestamp:
        return self._time

    @property
    def live(self) -> bool:
        return self._live

    def downgrade(self, time: Timestamp) -> None:
        """Move the capability to a later ``time`` (>= the current one)."""
        self._check()
        self._ctx.downgrade_capability(self._time, time)
        self._time = time

    def drop(self) -> None:
        """Give the capability up; frontiers downstream may then pass its time."""
        self._check()
        self._ctx.drop_capability(self._time)
        self._live = False

    def send_by(self, output: int, records: Sequence[Any], time: Timestamp | None = None) -> None:
        """Send at this capability's time (or a later ``time``)."""
        self._check()
        self._ctx.send(output, records, self._time if time is None else time, self._time)

    def _check(self) -> None:
        if not self._live:
            raise RuntimeError(f"capability at {self._time} was already dropped")

    def __repr__(self) -> str:
        return f"Capability({self._time}{'' if self._live else ', dropped'})"


class Vertex:
    """Base class of vertices: override ``on_recv`` and, if it asks for them, ``on_notify``."""

    _ctx: Context

    # -- called by the framework --------------------------------------------------------
    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        """A batch of ``records`` arrived at ``input``, all at ``time``."""

    def on_notify(self, time: Timestamp) -> None:
        """No more records at or before ``time`` can arrive (requested by ``notify_at``)."""

    # -- checkpointing (see timely/worker/snapshots.py) ---------------------------------------
    def snapshot_at(self, epoch: int) -> dict[str, Any] | None:
        """State reflecting exactly the inputs of epochs ``<= epoch``, as plain data with a
        ``"kind"`` the coordinator knows how to re-partition (``None``: no state).

        Called once the vertex has received and been notified of everything up to
        ``epoch`` and before any notification after it.
        """
        return None

    def restore_at(self, snapshot: dict[str, Any], epoch: int) -> None:
        """Take back what :meth:`snapshot_at` returned, in a new run resuming after ``epoch``."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore a snapshot")

    # -- offered to the vertex ----------------------------------------------------------
    def send_by(self, output: int, records: Sequence[Any], time: Timestamp) -> None:
        """Send ``records`` on ``output`` at ``time`` (the current time or later)."""
        self._ctx.send(output, records, time, None)

    def notify_at(self, time: Timestamp) -> None:
        """Ask for ``on_notify(time)``; holds a capability at ``time`` until then."""
        self._ctx.notify_at(time)

    def retain(self, time: Timestamp | None = None) -> Capability:
        """A capability at the current time (or a later ``time``), kept until dropped."""
        return self._ctx.retain(time)

    def frontier(self, input: int = 0) -> tuple[Timestamp, ...]:
        """This worker's view of the frontier at ``input``: the times at or after which
        records may still arrive there (empty: none will)."""
        return self._ctx.worker.frontier(self._ctx.index, input)

    def fail(
        self,
        error: BaseException,
        time: Timestamp | None,
        record: Any = None,
        fn: Any = None,
    ) -> NoReturn:
        """Stop the run because ``fn`` (a user function, or None for the step's own code)
        raised ``error`` at ``time`` on ``record``: the error names the step, the failing
        ``file:line``, the time and the record. Call it from the ``except`` clause."""
        self._ctx.user_error(error, time, record, fn)

    @property
    def worker(self) -> int:
        """Index of the worker hosting this instance."""
        return self._ctx.worker.index

    state_per_time: bool = False
    """True for a vertex that keeps nothing from one time to the next: its keys may go to
    another worker at any epoch with nothing to move, so its exchanged inputs follow the
    routing table in force at each epoch (and a live rescale may take a worker away)."""

    @property
    def workers(self) -> int:
        """How many workers run the dataflow now (workers may join and leave a running
        one: what a time's records can meet is :meth:`workers_at`)."""
        return self._ctx.worker.peers

    def workers_at(self, time: Timestamp) -> int:
        """How many workers take part at ``time``: fixed once the time can exist (workers
        join and leave at epochs no record has reached yet), so every worker's instance
        agrees on it."""
        return len(self._ctx.worker.members_at(time[0]))

    @property
    def name(self) -> str:
        """The step's name, as given when it was placed."""
        return self._ctx.spec.name
