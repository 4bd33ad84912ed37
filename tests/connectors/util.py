"""Reading a Source by hand, the way SourceVertex does, for checks below the dataflow."""

from __future__ import annotations

from typing import Any

from timely import Source


def batches(src: Source, partition: int, offset: Any = None) -> list[tuple[int, list[Any], Any]]:
    """Every batch of ``partition`` from ``offset`` on."""
    out = []
    while (got := src.read(partition, offset)) is not None:
        out.append(got)
        offset = got[2]
    return out


def records(src: Source, partition: int, offset: Any = None) -> list[tuple[int, Any]]:
    """``(epoch, record)`` of ``partition`` from ``offset`` on."""
    return [(e, r) for e, recs, _ in batches(src, partition, offset) for r in recs]


def worker_share(src: Source, worker: int, workers: int) -> list[tuple[int, Any]]:
    """What ``worker`` of ``workers`` reads: its partitions ``p % workers == worker``, in order."""
    return [
        pair for p in range(src.partitions()) if p % workers == worker for pair in records(src, p)
    ]
