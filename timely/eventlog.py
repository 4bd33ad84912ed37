"""The event log (timely's *logging*): what each worker did, and when.

Off by default; a worker given an :class:`EventLog` records, as compact tuples with
two timestamps (``time.time_ns()``, a clock every process on a node shares, and
across nodes as good as their clock sync):

- ``("a", t0, t1, vertex, kind, records_in, records_out)``: an activation; ``kind`` is
  ``RECV`` (``on_recv``), ``NOTIFY`` (``on_notify``), ``COMMAND`` (an input command
  from the driver), ``PULL`` (a source read) or ``START`` (a root's start); records out
  are what it sent.
- ``("t", t0, t1)``: a whole step (what lies between its activations is scheduling and
  progress tracking);
- ``("s", t0, t1, peer, seq, batches, records, bytes, updates, targets)`` and the
  same with ``"r"``: a message to or from ``peer`` (encode and write; read and apply),
  with its per-sender sequence number so that a send and its receive can be matched,
  the data it carries, its size on the wire (0 in-process), the progress updates riding
  on it and ``[vertex, records]`` for each vertex its data goes to (the channels it
  carries);
- ``("w", t0, t1)``: waiting, nothing to do;
- ``("c", t0, t1, epoch, phase[, vertex])``: checkpoint work: a vertex's
  ``"snapshot"`` (taken and encoded), a part's ``"write"``.

The driver keeps a log of its own beside the workers' (``driver.trace``,
:func:`read_driver_log`): ``("decision", t, t, record)`` for a controller's decision
(:meth:`~timely.session.base.Session.log_event`) and ``("rescale", t0, t1, record)``.
- ``("k", t, t, epoch, every, fraction)``: the checkpoint cadence changed
  (``checkpoint_every="auto"``): checkpoints after ``epoch`` and every ``every`` epochs
  after it, chosen because the driver measured ``fraction`` of the time coordinating.

A trace directory holds one file per worker and attempt (``worker-<i>-<attempt>.trace``,
a restore starts a new attempt): a stream of msgpack objects, first a header (worker,
workers, the vertices' names, the dataflow's name and graph, the clock), then lists of
events as they are flushed. A live consumer can read a file while it grows (:func:`read_trace` reads
what is complete). Events are appended in memory and written every ``FLUSH_EVERY``
events, at least every ``FLUSH_NS`` while the worker steps or waits (:meth:`EventLog.tick`),
and at the end: the step loop never waits on the disk for long, and a live reader is
at most about that far behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import msgpack  # type: ignore[import-untyped]

from timely.comm.messages import WorkerMessage
from timely.errors import ConfigError

RECV, NOTIFY, COMMAND, PULL, START = 0, 1, 2, 3, 4
"""Activation kinds."""
KIND_NAMES = {RECV: "recv", NOTIFY: "notify", COMMAND: "command", PULL: "pull", START: "start"}
FLUSH_EVERY = 4096
"""Events kept in memory before they are written."""
FLUSH_NS = 200_000_000
"""The longest events wait in memory while the worker is active (0.2 s)."""

clock = time.time_ns
"""The event log's clock: nanoseconds, shared by every process on a node."""


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Described(Protocol):
    """What a log's header takes of the dataflow it records (a
    :class:`timely.graph.plan.Plan`): its name, its vertices' names, and the graph as
    plain data. The event log sits below the graph, so it asks for no more."""

    @property
    def name(self) -> str: ...

    @property
    def vertices(self) -> Sequence[_Named]: ...

    def describe(self) -> dict[str, list[list[object]]]: ...


class EventLog:
    """One worker's event log, written to ``path``."""

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any]) -> None:
        self.path = Path(path)
        self._file: BinaryIO | None = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._file.write(msgpack.packb(header))
        self._file.flush()
        self.events: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()  # the checkpoint writer thread logs too
        self.written = 0
        self._flushed_at = clock()

    @classmethod
    def open(
        cls,
        directory: str,
        worker: int,
        workers: int,
        attempt: int,
        names: Sequence[str],
        run: str,
        graph: dict[str, Any] | None = None,
    ) -> EventLog:
        """The log of ``worker`` (of ``workers``) for restore attempt ``attempt``; ``graph``
        is the dataflow as :meth:`Described.describe` gives it."""
        header = {
            "format": 1,
            "worker": worker,
            "workers": workers,
            "attempt": attempt,
            "vertices": list(names),
            "run": run,
            "clock": "time_ns",
            "pid": os.getpid(),
        }
        if graph is not None:
            header["graph"] = graph
        return cls(Path(directory) / f"worker-{worker}-{attempt}.trace", header)

    @classmethod
    def for_plan(
        cls, directory: str, plan: Described, worker: int, workers: int, attempt: int
    ) -> EventLog:
        """The log of ``worker`` running ``plan`` (its vertices named in the header)."""
        names = [spec.name for spec in plan.vertices]
        return cls.open(directory, worker, workers, attempt, names, plan.name, plan.describe())

    def add(self, event: tuple[Any, ...]) -> None:
        """Record one event (a tuple as described in the module docstring)."""
        events = self.events
        events.append(event)
        if len(events) >= FLUSH_EVERY:
            self.flush()

    def tick(self) -> None:
        """Flush if the oldest unwritten event may be ``FLUSH_NS`` old (a host calls this
        after every step and before it waits)."""
        if self.events and clock() - self._flushed_at >= FLUSH_NS:
            self.flush()

    def flush(self) -> None:
        """Write what was recorded since the last flush."""
        self._flushed_at = clock()
        with self._lock:
            events, self.events = self.events, []
            file = self._file
            if events and file is not None:
                file.write(msgpack.packb(events))
                file.flush()
                self.written += len(events)

    def close(self) -> None:
        self.flush()
        with self._lock:
            file, self._file = self._file, None
            if file is not None:
                file.close()


def message_event(
    kind: str, t0: int, t1: int, peer: int, message: WorkerMessage, nbytes: int
) -> tuple[Any, ...]:
    """A send (``kind="s"``) or receive (``"r"``) event for ``message``."""
    per_target: dict[int, int] = {}
    for batch in message.data:
        per_target[batch[0]] = per_target.get(batch[0], 0) + len(batch[3])
    records = sum(per_target.values())
    updates = 0 if message.progress is None else len(message.progress.updates)
    targets = sorted(per_target.items())
    return (kind, t0, t1, peer, message.seq, len(message.data), records, nbytes, updates, targets)


def trace_option(options: dict[str, Any]) -> str | None:
    """Take ``trace`` (a directory for the event log) out of ``options``; make the
    directory. Fails before anything starts if it cannot be made."""
    trace = options.pop("trace", None)
    if trace is None:
        return None
    if not isinstance(trace, str | os.PathLike) or not str(trace):
        raise ConfigError(f"trace must be a directory for the event log, got {trace!r}")
    try:
        os.makedirs(trace, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"cannot make the trace directory {str(trace)!r} ({e}); give a directory this "
            "process (and, on a cluster, every node) can write"
        ) from None
    return str(trace)


def read_trace(directory: str | os.PathLike[str]) -> list[tuple[dict[str, Any], list[Any]]]:
    """Every log file in ``directory``: ``(header, events)`` each, in file-name order.
    A file still being written yields the events flushed so far."""
    out = []
    for path in sorted(Path(directory).glob("worker-*.trace")):
        tail = LogTail(path)
        tail.read()
        if isinstance(tail.header, dict):
            out.append((tail.header, tail.events))
    return out


def temporary_trace() -> str:
    """A temporary event-log directory, for a monitor that reads the log in a run that
    gave none (the session removes it at the end: see :func:`remove_trace`)."""
    return tempfile.mkdtemp(prefix="timely-trace-")


def remove_trace(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


DRIVER_LOG = "driver.trace"
"""The driver's own log in a trace directory: what it decided and did for the run (a
controller's decisions, rescales), as ``(kind, t0, t1, record)`` events."""


def open_driver_log(directory: str, run: str) -> EventLog:
    """The driver's log in ``directory`` (appended to by every attempt of the run)."""
    header = {"format": 1, "driver": True, "run": run, "clock": "time_ns", "pid": os.getpid()}
    return EventLog(Path(directory) / DRIVER_LOG, header)


def read_driver_log(directory: str | os.PathLike[str]) -> list[tuple[Any, ...]]:
    """The driver's events in ``directory`` (none if it logged nothing)."""
    path = Path(directory) / DRIVER_LOG
    if not path.exists():
        return []
    tail = LogTail(path)
    tail.read()
    return tail.events


class LogTail:
    """One worker's log file, read as it grows (a live consumer's view): each
    :meth:`read` takes what was flushed since the last one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offset = 0
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self.header: dict[str, Any] | None = None
        self.events: list[tuple[Any, ...]] = []
        """The events read so far (a consumer may drop those it no longer needs)."""
        self.last = 0
        """The latest timestamp seen in this log."""

    def read(self) -> int:
        """Take in what was written since; returns how many events were new."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        self._unpacker.feed(data)
        new = 0
        for item in self._unpacker:
            if self.header is None:
                self.header = item
                continue
            for e in item:
                event = tuple(e)
                self.events.append(event)
                if event[2] > self.last:
                    self.last = event[2]
                new += 1
        return new
