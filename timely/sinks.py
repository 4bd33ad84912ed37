"""The interface connector sinks implement: per-epoch writes, committed with checkpoints.

Why this shape: exactly-once output needs two phases. Workers ``write`` an epoch's
records once the epoch is complete at the sink (idempotently: a replay after a failure
writes the same epoch again and replaces what was there). The driver ``commit``\\ s
epochs once they can never be replayed: when a checkpoint at or after them is
committed, or the run has ended. Before a restore from a checkpoint at epoch ``e`` the
driver calls ``abort_after(e)``, so output of epochs the replay will produce again is
discarded rather than duplicated. Readers that honour the commit see every epoch once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from progress import Timestamp
from timely.system import TimeBuffer


class Sink(ABC):
    """Where a stream's records leave the dataflow, epoch by epoch, exactly once.

    The object is copied to every worker (pickled), so keep it to configuration: a
    path, a schema, options. ``write`` runs on the workers, ``commit`` and
    ``abort_after`` on the driver.
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
        """Discard uncommitted output of epochs ``> epoch`` (``-1``: of every epoch)."""


class SinkVertex(TimeBuffer):
    """Buffers each time's records and hands them to the sink when the time completes."""

    def __init__(self, sink: Sink) -> None:
        super().__init__()
        self.sink = sink

    def complete(self, time: Timestamp, records: list[Any]) -> None:
        try:
            self.sink.write(self.worker, self.workers, time[0], records)
        except Exception as e:
            self.fail(e, time, None, type(self.sink).write)
