"""The interface connector sources implement: partitioned and resumable from an offset.

Each worker reads the partitions ``p`` with ``p % workers == worker``. ``read`` returns
the next batch of one partition as ``(epoch, records, next_offset)``, or ``None`` when
the partition is exhausted. Epochs never decrease within a partition, so the source
can release every epoch before the smallest one its partitions are at. Reading the
same partition from the same offset must give the same batches: that is what makes
a replay after a failure exact.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class Source(ABC):
    """A partitioned, replayable source of ``(epoch, records)`` batches."""

    batches_per_step: int = 8
    """At most how many batches a worker reads from this source in one step (it stops
    sooner once it has ``records_per_step`` records, or once reading has taken
    ``seconds_per_step``): small batches then share a step's fixed costs (progress, one
    frame per peer), while a source whose reads wait on something still reads one a
    step. 1 reads one batch a step, which paces a source whose every batch is an epoch."""
    records_per_step: int = 4096
    seconds_per_step: float = 0.002

    @abstractmethod
    def partitions(self) -> int:
        """How many partitions there are (fixed for the source's lifetime)."""

    @abstractmethod
    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        """The batch at ``offset`` (``None`` = the start): ``(epoch, records, next_offset)``."""

    @property
    def offered_rate(self) -> float | None:
        """Records per second this source offers, if it knows (a rate-controlled source
        does): an autoscaler's target when the user gives none."""
        return None

    def next_awake(self, partition: int, offset: Any) -> float | None:
        """When the batch at ``offset`` may be read (``time.time()`` seconds; None: now).

        A source that paces itself (a rate, a schedule) says so here instead of sleeping
        in ``read``: until then the worker does other work, or waits without spinning.
        Asked after every read, with the offset it returned."""
        return None

    def resumed(self, partition: int, offset: Any, due: float | None) -> None:  # noqa: B027
        """``partition`` was handed over to this worker from another (a live change of
        workers), to be read on from ``offset``, whose batch was due at ``due`` there
        (``time.time()`` seconds; None: now). A source that paces itself keeps its
        schedule on, so a partition that was behind catches up here (by default:
        nothing to do)."""
