"""A run's records that only grow (the checkpoints committed, when, the cadence's
windows), kept as their latest entries and a count of all.

A stream runs for days: one that checkpoints every epoch of 10 ms commits ~8.6M times a
day, and a list of every commit's epoch and time held ~600 MB by then (and a monitor
that copied it at each scrape, a pass over all of it). Nothing reads more than the
latest few: the coordinator its newest commits (the kept ones among them), the session
whether one came since a request, a monitor the newest and how many.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")

HISTORY = 1024
"""Entries kept at least (a record holds up to twice as many before it drops the oldest)."""


class Recent(list[T]):
    """A list of a record's latest entries, at least :attr:`keep` of them (all while
    there are no more), oldest first; :attr:`total` counts every entry ever appended. Only
    :meth:`append` adds: the dropping is amortised, a slice deleted once the list holds
    twice ``keep``. The coordinator and the cadence append (nothing else adds to
    one), and readers take it as the list it is."""

    __slots__ = ("keep", "total")

    def __init__(self, least: int = 1) -> None:
        super().__init__()
        self.keep = max(HISTORY, least)
        """Entries kept at least: :data:`HISTORY`, or ``least`` if more."""
        self.total = 0
        """Entries appended since the record began, those dropped included."""

    def append(self, entry: T, /) -> None:
        super().append(entry)
        self.total += 1
        if len(self) >= 2 * self.keep:
            del self[: len(self) - self.keep]
