"""Timestamps: ``(epoch, c1, ..., ck)`` tuples of ints, one counter per enclosing loop.

Loop-nested scopes order timestamps by the *product* partial order: ``a <= b`` iff every
coordinate of ``a`` is ``<=`` the matching one of ``b``. The tuple's own lexicographic
``<`` is a total order that extends it; heaps and sorts use that.
"""

from __future__ import annotations

from typing import TypeAlias

Timestamp: TypeAlias = tuple[int, ...]
"""``(epoch, c1, ..., ck)``; ``k`` is the loop depth of the location it stands at."""


def _check_depths(a: Timestamp, b: Timestamp) -> None:
    if len(a) != len(b):
        raise ValueError(
            f"cannot compare timestamps of different loop depths: {a!r} and {b!r}; "
            "timestamps are only comparable at locations of the same scope"
        )


def less_equal(a: Timestamp, b: Timestamp) -> bool:
    """Product order: ``a <= b`` coordinate by coordinate."""
    if len(a) != len(b):
        _check_depths(a, b)
    for x, y in zip(a, b):
        if x > y:
            return False
    return True


def less_than(a: Timestamp, b: Timestamp) -> bool:
    """Strict product order: ``a <= b`` and ``a != b``."""
    return a != b and less_equal(a, b)


def join(a: Timestamp, b: Timestamp) -> Timestamp:
    """Least upper bound in the product order (coordinate-wise max)."""
    _check_depths(a, b)
    return tuple(max(x, y) for x, y in zip(a, b))


def meet(a: Timestamp, b: Timestamp) -> Timestamp:
    """Greatest lower bound in the product order (coordinate-wise min)."""
    _check_depths(a, b)
    return tuple(min(x, y) for x, y in zip(a, b))
