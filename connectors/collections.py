"""In-memory sources and sinks, for tests, examples and small inputs.

``from_collection(items)`` is a :class:`timely.Source` over a Python collection;
``CollectingSink`` keeps a stream's output in the driver's memory with the same
two-phase (write, then commit) semantics as the file sinks, so tests of exactly-once
output need no disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from timely import ConfigError, Sink, Source, UserFunctionError
from timely.errors import failure_location, function_location

DEFAULT_PARTITIONS = 8
"""Enough for up to 8 workers to share the work; pass ``partitions=`` for more."""


def check_epoch(epoch: Any, record: Any, where: str) -> int:
    """``epoch`` if it is an int >= 0; otherwise an error that names the record and the fix."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(
            f"epoch_of ({where}) returned {epoch!r} for record {record!r}; "
            "it must return an int >= 0"
        )
    return epoch


def _check_positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


class CollectionSource(Source):
    """The items of a collection, spread over ``partitions`` partitions.

    Partitioning: item ``i`` (in iteration order) goes to partition ``i % partitions``;
    each partition keeps its items in order, stably sorted by epoch, so epochs never
    decrease within it. Worker ``w`` reads the partitions ``p % workers == w``.

    Delivery: the items are held in the source itself, so a replay from any offset (an
    index into the partition) gives exactly the same batches: exactly once together
    with checkpoints.
    """

    def __init__(
        self,
        items: Iterable[Any],
        epoch_of: Callable[[Any], int] | None = None,
        partitions: int = DEFAULT_PARTITIONS,
        batch_size: int = 1024,
    ) -> None:
        _check_positive("from_collection: partitions", partitions)
        self.batch_size = _check_positive("from_collection: batch_size", batch_size)
        parts: list[list[tuple[int, Any]]] = [[] for _ in range(partitions)]
        where = function_location(epoch_of)
        for i, item in enumerate(items):
            if epoch_of is None:
                epoch = 0
            else:
                try:
                    epoch = epoch_of(item)
                except Exception as e:
                    at = failure_location(e.__traceback__, where)
                    raise UserFunctionError("from_collection", at, None, item, e) from e
                check_epoch(epoch, item, where)
            parts[i % partitions].append((epoch, item))
        for part in parts:
            part.sort(key=lambda pair: pair[0])  # stable: items of one epoch keep their order
        self._parts = parts

    def partitions(self) -> int:
        return len(self._parts)

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        part = self._parts[partition]
        start = 0 if offset is None else int(offset)
        if start >= len(part):
            return None
        epoch = part[start][0]
        stop = min(len(part), start + self.batch_size)
        end = start + 1
        while end < stop and part[end][0] == epoch:
            end += 1
        return epoch, [item for _, item in part[start:end]], end


def from_collection(
    items: Iterable[Any],
    epoch_of: Callable[[Any], int] | None = None,
    partitions: int = DEFAULT_PARTITIONS,
    batch_size: int = 1024,
) -> CollectionSource:
    """A source over ``items``: every item at epoch ``epoch_of(item)`` (0 without it).

    Use it as ``flow.source(from_collection(items))``. ``epoch_of`` runs here, on the
    driver, so a failing one is reported before the dataflow starts.
    """
    return CollectionSource(items, epoch_of, partitions, batch_size)


class CollectingSink(Sink):
    """Keeps each epoch's records in memory; ``committed()`` returns what was committed.

    It stages writes per ``(epoch, worker, workers)`` (a second write replaces the
    first), ``commit`` makes epochs visible, ``abort_after`` drops uncommitted epochs:
    the contract of :class:`timely.Sink`, without a disk. The records live in the
    driver's process, so it works only with ``backend="inline"``; on Ray a write fails
    with a message saying so.
    """

    def __init__(self) -> None:
        self._pid = os.getpid()
        self.staged: dict[tuple[int, int, int], list[Any]] = {}
        self.committed_through = -1
        self.writes = 0

    def write(self, worker: int, workers: int, epoch: int, records: list[Any]) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                "CollectingSink keeps records in the driver's memory and cannot receive them "
                "from another process; run with backend='inline', or use a file sink "
                "(connectors.files) on Ray"
            )
        self.writes += 1
        self.staged[(epoch, worker, workers)] = list(records)

    def commit(self, epoch: int | None) -> None:
        if epoch is None:
            epoch = max((e for e, _, _ in self.staged), default=-1)
        self.committed_through = max(self.committed_through, epoch)

    def abort_after(self, epoch: int) -> None:
        keep = max(epoch, self.committed_through)
        self.staged = {k: v for k, v in self.staged.items() if k[0] <= keep}

    def committed(self) -> list[tuple[int, Any]]:
        """``(epoch, record)`` for every committed epoch, in epoch then worker order."""
        return [
            (e, r)
            for (e, _, _), records in sorted(self.staged.items(), key=lambda kv: kv[0])
            if e <= self.committed_through
            for r in records
        ]
