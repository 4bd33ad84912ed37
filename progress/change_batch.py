"""``ChangeBatch``: a consolidating accumulator of ``(item, delta)`` updates."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class ChangeBatch(Generic[T]):
    """Net counts per item; an item whose net count reaches zero is dropped at once.

    Progress updates are consolidated before they travel: a message sent and received
    in the same step cancels out and costs nothing on the wire.
    """

    __slots__ = ("_counts",)

    def __init__(self, updates: Iterable[tuple[T, int]] = ()) -> None:
        self._counts: dict[T, int] = {}
        self.extend(updates)

    def update(self, item: T, delta: int) -> None:
        """Add ``delta`` to ``item``'s count."""
        if delta == 0:
            return
        counts = self._counts
        value = counts.get(item, 0) + delta
        if value:
            counts[item] = value
        else:
            del counts[item]

    def extend(self, updates: Iterable[tuple[T, int]]) -> None:
        """Add every ``(item, delta)`` in ``updates``."""
        for item, delta in updates:
            self.update(item, delta)

    def drain(self) -> list[tuple[T, int]]:
        """Return the consolidated non-zero updates and leave the batch empty."""
        out = list(self._counts.items())
        self._counts = {}
        return out

    def items(self) -> list[tuple[T, int]]:
        """The consolidated non-zero updates, without draining."""
        return list(self._counts.items())

    def get(self, item: T) -> int:
        """Net count of ``item`` (0 when absent)."""
        return self._counts.get(item, 0)

    def is_empty(self) -> bool:
        return not self._counts

    def clear(self) -> None:
        self._counts = {}

    def __len__(self) -> int:
        return len(self._counts)

    def __iter__(self) -> Iterator[tuple[T, int]]:
        return iter(list(self._counts.items()))

    def __contains__(self, item: object) -> bool:
        return item in self._counts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChangeBatch):
            return NotImplemented
        return self._counts == other._counts

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ChangeBatch({sorted(self._counts.items(), key=repr)!r})"
