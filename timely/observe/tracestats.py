"""Running totals over a live event log: what metrics and the live page show.

The workers already log every activation, message, wait and checkpoint write
(:mod:`timely.eventlog`); counting them on the driver costs the workers nothing more.
:class:`TraceStats` tails every log file in a trace directory (every attempt: a counter
keeps what earlier attempts did) and folds each new event into totals, then drops it,
so its memory follows the graph's size, not the run's length.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from timely.eventlog import LogTail

NS = 1e-9


@dataclass
class OperatorTotals:
    """One operator on one worker."""

    activations: int = 0
    records_in: int = 0
    records_out: int = 0
    useful_s: float = 0.0
    """Time in its activations (DS2's useful time, but for (de)serialisation, which the
    log keeps per message, not per operator)."""


@dataclass
class WorkerTotals:
    """One worker."""

    steps: int = 0
    step_s: float = 0.0
    messages_sent: int = 0
    messages_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    records_sent: int = 0
    waiting_s: float = 0.0
    last: int = 0
    """The latest timestamp (ns) in its log."""


@dataclass
class Durations:
    """How many and how long in all (a Prometheus summary without quantiles)."""

    count: int = 0
    total_s: float = 0.0
    last_s: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds
        self.last_s = seconds


@dataclass
class Totals:
    """Everything counted so far: by ``(operator name, worker)``, by worker, and the
    checkpoints' snapshot and write times."""

    operators: dict[tuple[str, int], OperatorTotals] = field(default_factory=dict)
    workers: dict[int, WorkerTotals] = field(default_factory=dict)
    snapshots: Durations = field(default_factory=Durations)
    writes: Durations = field(default_factory=Durations)


class TraceStats:
    """Totals over the logs in ``directory``, brought up to date by :meth:`update`
    (safe to call from several threads: one updates at a time)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.totals = Totals()
        self._tails: dict[Path, LogTail] = {}
        self._lock = threading.Lock()

    def update(self) -> Totals:
        """Read what the workers flushed since the last call and count it."""
        with self._lock:
            for path in sorted(self.directory.glob("worker-*.trace")):
                tail = self._tails.get(path)
                if tail is None:
                    self._tails[path] = tail = LogTail(path)
                try:
                    tail.read()
                except OSError:
                    continue  # removed at the run's end: what was read stays counted
                if tail.header is not None and tail.events:
                    self._count(tail.header, tail.events)
                    tail.events = []
            return self.totals

    def _count(self, header: dict[str, Any], events: list[tuple[Any, ...]]) -> None:
        worker: int = header["worker"]
        names: list[str] = header["vertices"]
        totals = self.totals
        w = totals.workers.get(worker)
        if w is None:
            totals.workers[worker] = w = WorkerTotals()
        ops = totals.operators
        for e in events:
            tag = e[0]
            if tag == "a":
                key = (names[e[3]], worker)
                op = ops.get(key)
                if op is None:
                    ops[key] = op = OperatorTotals()
                op.activations += 1
                op.records_in += e[5]
                op.records_out += e[6]
                op.useful_s += (e[2] - e[1]) * NS
            elif tag == "t":
                w.steps += 1
                w.step_s += (e[2] - e[1]) * NS
            elif tag == "s":
                w.messages_sent += 1
                w.records_sent += e[6]
                w.bytes_sent += e[7]
            elif tag == "r":
                w.messages_received += 1
                w.bytes_received += e[7]
            elif tag == "w":
                w.waiting_s += (e[2] - e[1]) * NS
            elif tag == "c":
                (totals.snapshots if e[4] == "snapshot" else totals.writes).add((e[2] - e[1]) * NS)
            if e[2] > w.last:
                w.last = e[2]
