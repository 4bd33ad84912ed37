"""What a running session shows to whatever watches it: :class:`RunView`.

The session's thread writes it (outputs delivered, inputs advanced, checkpoints committed,
restarts, rescales, the adaptive checkpoint interval, the driver's warnings, a controller's
decisions); monitors (:mod:`timely.observe`, the analysis's live page, the autoscaler)
read it on threads of their own. It imports nothing of the run: the session holds one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from timely.checkpoint.history import Recent

KEEP_DECISIONS = 100
"""Controllers' decisions a view keeps (the latest)."""


@dataclass
class OutputState:
    """One output as the driver sees it: the latest epoch delivered and when."""

    epoch: int = -1
    records: int = 0
    moved_at: float = field(default_factory=time.time)


class RunView:
    """What monitors may read of a running session: its graph and size, each output's
    latest delivered epoch, how far the driver's inputs have gone, checkpoints and
    restarts. The driver's thread writes it; monitors read it on their own threads
    (each field is replaced whole, and :meth:`snapshot` copies under a lock)."""

    def __init__(self, name: str, graph: dict[str, Any], workers: int, trace: str | None) -> None:
        self.name = name
        self.graph = graph
        self.workers = workers
        self.trace = trace
        """The event log's directory (None: no log)."""
        self.started_at = time.time()
        self.ended = False
        self.finished = False
        """The run reached its end (every input closed, all work done) without failing."""
        self._lock = threading.Lock()
        self._outputs: dict[str, OutputState] = {}
        self._input_epoch = -1
        self._inputs_closed = False
        self._restarts = 0
        self._committed: Recent[int] = Recent()
        self._subsumed: Recent[int] = Recent()
        self._cadence: tuple[int, float] | None = None
        self.total_epochs: int | None = None
        """How many epochs the run has, once known (every driver input closed, no source)."""
        self._rescales: list[dict[str, Any]] = []
        self._decisions: list[dict[str, Any]] = []
        self._warnings: list[dict[str, Any]] = []

    # -- written by the session ---------------------------------------------------------------
    def delivered(self, key: str, epoch: int, records: int) -> None:
        with self._lock:
            out = self._outputs.setdefault(key, OutputState())
            out.epoch = max(out.epoch, epoch)
            out.records += records
            out.moved_at = time.time()

    def advanced(self, epoch: int) -> None:
        with self._lock:
            self._input_epoch = max(self._input_epoch, epoch)

    def inputs_closed(self, has_sources: bool) -> None:
        """Every driver input is closed: without sources, the epochs are all known."""
        with self._lock:
            if not has_sources:
                self.total_epochs = self._input_epoch + 1 if self._input_epoch >= 0 else 1

    def rescaled(self, workers: int) -> None:
        with self._lock:
            self.workers = workers

    def rescale_done(self, record: dict[str, Any]) -> None:
        """A rescale finished (``Session.rescales``' record)."""
        with self._lock:
            self._rescales.append(dict(record))

    def decided(self, decision: dict[str, Any]) -> None:
        """A controller's decision, for metrics and the page to show. The shape they
        read: ``workers`` (the count wanted), ``current`` (the count running),
        ``per_operator`` (operator name -> parallelism wanted), ``rates`` (operator name ->
        ``{"true_processing", "true_output", "observed_processing", "observed_output",
        "useful_s"}``, records/s and seconds), ``reason`` (text), ``acted`` (whether it
        asked for a rescale); anything more is kept as given. The last ``KEEP_DECISIONS``
        are kept."""
        with self._lock:
            self._decisions.append(dict(decision, at=time.time()))
            del self._decisions[:-KEEP_DECISIONS]

    def warned(self, warning: dict[str, Any]) -> None:
        """A warning the driver gave about the run (``kind``, ``message``, and what the
        kind says: a loop's ``loop``, ``epoch``, ``round``), for the page to show."""
        with self._lock:
            self._warnings.append(dict(warning, at=time.time()))

    def restarted(self, restarts: int) -> None:
        with self._lock:
            self._restarts = restarts

    def committed(self, epochs: Recent[int], subsumed: Recent[int]) -> None:
        """The epochs committed, and those subsumed (complete, a later one committed in
        their place): the coordinator's own records of the latest (``.total``: how many),
        kept as they are (a copy at every part cost a pass over them)."""
        with self._lock:
            self._committed = epochs
            self._subsumed = subsumed

    def cadence(self, interval: int, fraction: float) -> None:
        """``checkpoint_every="auto"`` measured a cycle: the interval chosen after it, and
        the share of its time spent coordinating."""
        with self._lock:
            self._cadence = (interval, fraction)

    # -- read by monitors ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """A consistent copy: ``outputs`` (key -> :class:`OutputState`), ``input_epoch``
        (the furthest a driver input advanced, -1: none), ``restarts``, ``committed``
        (the latest checkpoint epochs), ``commits`` (how many checkpoints were committed),
        ``subsumed`` (how many were subsumed), ``checkpoint_interval``
        and ``coordination_fraction`` (with ``checkpoint_every="auto"``, the latest
        cycle's; None before one or without it),
        ``total_epochs``, ``workers`` (now), ``rescales`` and ``decisions`` (see
        :meth:`decided`), ``warnings`` (see :meth:`warned`), ``ended``, ``elapsed``
        (seconds)."""
        with self._lock:
            return {
                "outputs": {
                    k: OutputState(v.epoch, v.records, v.moved_at) for k, v in self._outputs.items()
                },
                "input_epoch": self._input_epoch,
                "restarts": self._restarts,
                "committed": list(self._committed),
                "commits": self._committed.total,
                "subsumed": self._subsumed.total,
                "checkpoint_interval": None if self._cadence is None else self._cadence[0],
                "coordination_fraction": None if self._cadence is None else self._cadence[1],
                "total_epochs": self.total_epochs,
                "workers": self.workers,
                "rescales": [dict(r) for r in self._rescales],
                "decisions": [dict(d) for d in self._decisions],
                "warnings": [dict(w) for w in self._warnings],
                "ended": self.ended,
                "elapsed": time.time() - self.started_at,
            }

    def epochs_done(self) -> int:
        """Epochs complete at the outputs, as far as the driver has seen: one past the
        latest epoch any output delivered (0: none yet)."""
        with self._lock:
            return max((o.epoch + 1 for o in self._outputs.values()), default=0)
