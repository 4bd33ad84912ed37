"""The interface connector sinks implement: per-epoch writes, committed with checkpoints.

Why this shape: exactly-once output needs two phases. Workers ``write`` an epoch's
records once the epoch is complete at the sink (idempotently: a replay after a failure
writes the same epoch again and replaces what was there). The driver ``commit``\\ s
epochs once they can never be replayed: when a checkpoint at or after them is
committed, or the run has ended. Before a restore from a checkpoint at epoch ``e`` the
driver calls ``abort_after(e)``, so output of epochs the replay will produce again is
discarded rather than duplicated. Readers that honour the commit see every epoch once.

A restore can start from a checkpoint older than what a sink committed: the newest one
was damaged, or the run ended past its last checkpoint (``commit(None)``). The replay
then writes epochs the sink already holds. Before any worker starts, the driver tells
each sink who writes this run (:meth:`Sink.bind`, a :class:`SinkLineage`), so that a
sink can tell its own lineage's replay (skip it, the output is already there) from
another job writing into its place (refuse it).
"""

from __future__ import annotations

import os
import urllib.parse
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SinkLineage:
    """Who writes a run's epochs: the dataflow and the checkpoint lineage its state is of.

    Two runs are the same lineage when they share the plan's ``fingerprint`` (the one
    checkpoints are checked against) and ``lineage``: the id written once into the
    checkpoint directory (so every resume from it, whichever checkpoint it restores,
    is the same lineage), or a run's own id when it has no checkpoints. A replay by the
    same lineage computes the epochs it committed again; anything else is another job.
    """

    dataflow: str
    """The dataflow's name (for messages)."""
    fingerprint: str
    """The plan's fingerprint (:meth:`timely.graph.plan.Plan.fingerprint`)."""
    lineage: str
    """The checkpoint directory's lineage id, or ``run-<id>`` for a run without one."""
    checkpoint: str | None
    """Where that lineage's checkpoints are (without credentials), for messages; None
    for a run without checkpoints."""

    def same(self, other: SinkLineage | None) -> bool:
        """Whether ``other`` is this dataflow in this lineage (names are not compared)."""
        return (
            other is not None
            and other.fingerprint == self.fingerprint
            and other.lineage == self.lineage
        )

    def to_json(self) -> dict[str, Any]:
        """Plain data for a marker file (JSON: nothing is unpickled from a sink's files)."""
        return {
            "dataflow": self.dataflow,
            "fingerprint": self.fingerprint,
            "lineage": self.lineage,
            "checkpoint": self.checkpoint,
        }

    @staticmethod
    def from_json(data: Any) -> SinkLineage | None:
        """The lineage a marker holds (None: it holds none, as markers written before
        lineages were recorded, or by a sink never bound to a run)."""
        if not isinstance(data, dict):
            return None
        dataflow, fingerprint, lineage = (
            data.get(k) for k in ("dataflow", "fingerprint", "lineage")
        )
        if not (
            isinstance(dataflow, str) and isinstance(fingerprint, str) and isinstance(lineage, str)
        ):
            return None
        checkpoint = data.get("checkpoint")
        where = checkpoint if isinstance(checkpoint, str) else None
        return SinkLineage(dataflow, fingerprint, lineage, where)

    def describe(self) -> str:
        """For messages: the dataflow, its fingerprint and where its lineage lives."""
        where = (
            f"checkpoints in {self.checkpoint!r}"
            if self.checkpoint is not None
            else "a run without checkpoints"
        )
        return (
            f"dataflow {self.dataflow!r} (fingerprint {self.fingerprint}) from {where} "
            f"(lineage {self.lineage})"
        )


def display_location(uri: str) -> str:
    """``uri`` without user, password or query (they may hold credentials): what a
    lineage records of where its checkpoints are."""
    if "://" not in uri:
        return os.path.abspath(uri)
    parts = urllib.parse.urlsplit(uri)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


class Sink(ABC):
    """Where a stream's records leave the dataflow, epoch by epoch, exactly once.

    The object is copied to every worker (pickled), so keep it to configuration: a
    path, a schema, options, and what :meth:`bind` says. ``write`` runs on the workers;
    ``bind``, ``abort_after`` and ``commit`` on the driver.
    """

    @abstractmethod
    def write(self, worker: int, workers: int, epoch: int, records: list[Any]) -> None:
        """Durably write one worker's records of one complete epoch (never called empty).

        Must be idempotent per ``(worker, workers, epoch)``: a second call replaces the first.
        """

    def commit(self, epoch: int | None) -> None:  # noqa: B027 - sinks without a commit step skip it
        """Make every epoch ``<= epoch`` visible (``None``: the run ended, all of them).

        Every worker has written every such epoch; none of them will be replayed.
        """

    def abort_after(self, epoch: int) -> None:  # noqa: B027 - sinks without staging skip it
        """Discard uncommitted output of epochs ``> epoch`` (``-1``: of every epoch).

        Called on the driver before workers start from the checkpoint at ``epoch`` (or
        from scratch): the epochs after it are written again.
        """

    def bind_schema(self, schema: Any) -> None:  # noqa: B027 - sinks of rows skip it
        """The ``pyarrow.Schema`` of the table stream written here (``table.sink(self)``),
        when the graph is built: a sink that needs it (a Parquet file's columns) takes
        it, or refuses one that does not fit, before anything starts."""

    def bind(self, lineage: SinkLineage) -> None:  # noqa: B027 - sinks that commit nothing skip it
        """Who writes this run's epochs; called on the driver before anything else, and
        before the sink is copied to the workers (so what it keeps reaches them).

        A sink that commits records it with its commits, skips the epochs a replay of
        the same lineage writes again (checking they are the same), and refuses another
        lineage's writes into what it committed.
        """
