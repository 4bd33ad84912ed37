"""Antichains: sets of mutually incomparable elements, the shape of every frontier."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from progress.summary import PathSummary
from progress.timestamp import Timestamp, less_equal

T = TypeVar("T", Timestamp, PathSummary)


def partial_le(a: Any, b: Any) -> bool:
    """The partial order antichains use: product order on timestamps, else ``less_equal``."""
    if type(a) is tuple:
        return less_equal(a, b)
    return bool(a.less_equal(b))


class Antichain(Generic[T]):
    """The minimal elements of the set of everything inserted.

    ``less_equal(t)`` asks whether ``t`` is at or beyond the antichain (some element is
    ``<= t``): for a frontier, whether a time may still be seen.
    """

    __slots__ = ("_elements",)

    def __init__(self, elements: Iterable[T] = ()) -> None:
        self._elements: list[T] = []
        for element in elements:
            self.insert(element)

    @classmethod
    def of(cls, element: T) -> Antichain[T]:
        """The antichain of one element (no comparisons to make)."""
        made: Antichain[T] = cls.__new__(cls)
        made._elements = [element]
        return made

    def insert(self, element: T) -> bool:
        """Insert ``element`` unless some element is ``<=`` it; return whether it was."""
        elements = self._elements
        for existing in elements:
            if existing is element or partial_le(existing, element):
                return False
        if elements:
            self._elements = elements = [e for e in elements if not partial_le(element, e)]
        elements.append(element)
        return True

    def __contains__(self, element: object) -> bool:
        return element in self._elements

    def less_equal(self, element: T) -> bool:
        """Some element of the antichain is ``<= element``."""
        return any(partial_le(e, element) for e in self._elements)

    def less_than(self, element: T) -> bool:
        """Some element of the antichain is strictly ``< element``."""
        return any(e != element and partial_le(e, element) for e in self._elements)

    def dominates(self, other: Antichain[T]) -> bool:
        """Every element of ``other`` is at or beyond this antichain."""
        return all(self.less_equal(e) for e in other._elements)

    @property
    def elements(self) -> tuple[T, ...]:
        return tuple(self._elements)

    def is_empty(self) -> bool:
        return not self._elements

    def __len__(self) -> int:
        return len(self._elements)

    def __iter__(self) -> Iterator[T]:
        return iter(self._elements)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Antichain):
            return NotImplemented
        return set(self._elements) == set(other._elements)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Antichain({sorted(self._elements)!r})"


class MutableAntichain:
    """Occurrence counts of timestamps, and the frontier of those with a positive count.

    Counts may go negative for a while (an update can arrive before the one it
    cancels); only positive counts are live. ``update_iter`` reports how the frontier
    moved as ``(time, +1)`` for an element that joined it and ``(time, -1)`` for one
    that left it, which is what the tracker propagates.
    """

    __slots__ = ("_counts", "_frontier")

    def __init__(self) -> None:
        self._counts: dict[Timestamp, int] = {}
        self._frontier: list[Timestamp] = []

    def update_iter(self, updates: Iterable[tuple[Timestamp, int]]) -> list[tuple[Timestamp, int]]:
        """Apply ``(time, delta)`` updates; return the frontier changes they caused."""
        counts = self._counts
        old = frontier = self._frontier
        rebuild = False
        for time, delta in updates:
            if not delta:
                continue
            value = counts.get(time, 0) + delta
            if value:
                counts[time] = value
            else:
                del counts[time]
            if rebuild:
                continue
            if delta > 0:
                # A live time that nothing in the frontier is <= joins it, evicting what it
                # is <= to; no other element's status changes.
                if value > 0 and not any(less_equal(f, time) for f in frontier):
                    frontier = [f for f in frontier if not less_equal(time, f)]
                    frontier.append(time)
                    frontier.sort()
            elif value <= 0 and time in frontier:
                rebuild = True  # times it hid may surface: recompute from the counts
        if rebuild:
            frontier = self._minimal()
        if frontier is old:
            return []
        self._frontier = frontier
        changes = [(t, -1) for t in old if t not in frontier]
        changes.extend((t, 1) for t in frontier if t not in old)
        return changes

    def update(self, time: Timestamp, delta: int) -> list[tuple[Timestamp, int]]:
        """Apply one update; return the frontier changes (as :meth:`update_iter` would,
        in the same order, without its loop: the tracker calls this per pointstamp)."""
        if not delta:
            return []
        counts = self._counts
        value = counts.get(time, 0) + delta
        if value:
            counts[time] = value
        else:
            del counts[time]
        old = self._frontier
        if delta > 0:
            if value <= 0 or any(less_equal(f, time) for f in old):
                return []
            frontier = [f for f in old if not less_equal(time, f)]
            frontier.append(time)
            frontier.sort()
            self._frontier = frontier
            changes = [(t, -1) for t in old if less_equal(time, t)]
            changes.append((time, 1))
            return changes
        if value > 0 or time not in old:
            return []
        frontier = self._minimal()
        self._frontier = frontier
        changes = [(t, -1) for t in old if t not in frontier]
        changes.extend((t, 1) for t in frontier if t not in old)
        return changes

    def _minimal(self) -> list[Timestamp]:
        fresh: list[Timestamp] = []
        # Lexicographic order extends the product order, so a time is minimal iff no
        # already-kept (lexicographically smaller) time is <= it.
        for time in sorted(t for t, c in self._counts.items() if c > 0):
            if not any(less_equal(f, time) for f in fresh):
                fresh.append(time)
        return fresh

    def frontier(self) -> tuple[Timestamp, ...]:
        """The minimal live times, in lexicographic order."""
        return tuple(self._frontier)

    def less_equal(self, time: Timestamp) -> bool:
        """Some live time is ``<= time``."""
        for f in self._frontier:  # a loop: no generator for the worker's check per batch
            if less_equal(f, time):
                return True
        return False

    def less_than(self, time: Timestamp) -> bool:
        """Some live time is strictly ``< time``."""
        return any(f != time and less_equal(f, time) for f in self._frontier)

    def count_for(self, time: Timestamp) -> int:
        return self._counts.get(time, 0)

    def is_empty(self) -> bool:
        """No live time."""
        return not self._frontier

    def __repr__(self) -> str:
        return f"MutableAntichain(frontier={self._frontier!r})"
