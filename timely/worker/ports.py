"""What each part of a worker may ask of it: narrow interfaces (typing protocols).

The worker (:class:`timely.worker.loop.Worker`) makes its parts and hands itself to
each: a :class:`~timely.worker.context.VertexContext` per vertex, its checkpoint
:class:`~timely.worker.snapshots.Snapshots` and its :class:`~timely.worker.migration.Migration`.
Each part types that worker as the protocol here that says what it uses, and no more, so
none imports ``Worker`` (which imports them all) and the worker's package has no cycle.
``Worker`` satisfies each protocol structurally; mypy checks it where the parts are made.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn, Protocol

from progress import Timestamp, Tracker
from timely.eventlog import EventLog
from timely.graph.plan import EdgeSpec, Plan
from timely.routing.bins import Routing
from timely.vertex import Host, Vertex


class VertexHost(Host, Protocol):
    """What a vertex's context asks of its worker, beyond what the vertex reads itself
    (:class:`~timely.vertex.Host`): the plan (the vertex's internal path summaries), and
    the four calls through which a vertex's actions reach the worker."""

    @property
    def plan(self) -> Plan: ...

    @property
    def emitted(self) -> list[tuple[str, int, list[Any]]]: ...

    def send_from(self, v: int, output: int, records: list[Any], time: Timestamp) -> None: ...

    def notification_requested(self, v: int, time: Timestamp) -> None: ...

    def capability_changed(self, v: int, outputs: int, time: Timestamp, delta: int) -> None: ...


class Held(Protocol):
    """What snapshots and migration read and change of a vertex's context: the times it
    holds capabilities and notification requests at, its current time, and the step's
    error (:class:`~timely.worker.context.VertexContext`)."""

    now: tuple[int, Timestamp] | None

    @property
    def caps(self) -> Counter[Timestamp]: ...

    @property
    def requests(self) -> set[Timestamp]: ...

    def hold(self, time: Timestamp, delta: int) -> None: ...

    def user_error(
        self, error: BaseException, time: Timestamp | None, record: Any, fn: Any
    ) -> NoReturn: ...


class SnapshotHost(Protocol):
    """What a worker's checkpoint schedule (:class:`~timely.worker.snapshots.Snapshots`)
    asks of it: the vertices and their contexts, the frontiers, what waits in the inbox,
    the epochs seen, the event log, and a new look at the notifications held back."""

    @property
    def plan(self) -> Plan: ...

    @property
    def index(self) -> int: ...

    @property
    def peers(self) -> int: ...

    @property
    def vertices(self) -> Sequence[Vertex]: ...

    @property
    def contexts(self) -> Sequence[Held]: ...

    @property
    def tracker(self) -> Tracker: ...

    @property
    def max_epoch(self) -> int: ...

    def members_at(self, epoch: int) -> tuple[int, ...]: ...

    @property
    def log(self) -> EventLog | None: ...

    def queued(self, v: int) -> Iterator[Timestamp]: ...

    def recheck_notifications(self) -> None: ...


class Snapshotted(Protocol):
    """What a migration asks of the worker's checkpoint schedule: whether a vertex's
    snapshot for a checkpoint before an epoch is taken (taken now if it can be)."""

    def hold_back(self, v: int, epoch: int) -> bool: ...


class MigrationHost(Protocol):
    """What a worker's side of a migration (:class:`~timely.worker.migration.Migration`)
    asks of it: the vertices and their contexts, the routing tables, the frontiers, the
    inbox, the checkpoint schedule, and sending a batch it held."""

    @property
    def plan(self) -> Plan: ...

    @property
    def index(self) -> int: ...

    @property
    def vertices(self) -> Sequence[Vertex]: ...

    @property
    def contexts(self) -> Sequence[Held]: ...

    @property
    def routing(self) -> Routing: ...

    @property
    def tracker(self) -> Tracker: ...

    @property
    def inbox(self) -> Sequence[deque[tuple[int, Timestamp, list[Any]]]]: ...

    @property
    def snapshots(self) -> Snapshotted | None: ...

    def release_held(self, edge: EdgeSpec, records: list[Any], time: Timestamp) -> None: ...

    def recheck_notifications(self) -> None: ...
