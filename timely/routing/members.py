"""Which workers take part in a run at each epoch: workers join and leave live (issue 29).

A worker that joins at epoch ``e`` receives broadcasts, and driver inputs, at times from
``e`` on; one that leaves at ``e`` receives none at ``e`` or later. Every worker and the
driver keep the same schedule, told before any time at ``e`` or later can exist, so a
broadcast at a time reaches exactly the workers that take part at that time.
"""

from __future__ import annotations

import bisect


class Members:
    """The workers taking part from each epoch on (a schedule of sets)."""

    __slots__ = ("epochs", "sets")

    def __init__(self, workers: int) -> None:
        self.epochs: list[int] = [-1]
        self.sets: list[tuple[int, ...]] = [tuple(range(workers))]

    def copy(self) -> Members:
        """The same schedule, to change apart (a joiner's)."""
        out = Members(0)
        out.epochs, out.sets = list(self.epochs), list(self.sets)
        return out

    def at(self, epoch: int) -> tuple[int, ...]:
        """The workers taking part at ``epoch``, in index order."""
        if len(self.epochs) == 1:
            return self.sets[0]
        return self.sets[bisect.bisect_right(self.epochs, epoch) - 1]

    def latest(self) -> tuple[int, ...]:
        """The workers taking part from the last change on."""
        return self.sets[-1]

    def join(self, worker: int, epoch: int) -> None:
        """``worker`` takes part from ``epoch`` on."""
        self._change(epoch, lambda s: tuple(sorted({*s, worker})))

    def leave(self, worker: int, epoch: int) -> None:
        """``worker`` takes no part at ``epoch`` or later."""
        self._change(epoch, lambda s: tuple(w for w in s if w != worker))

    def _change(self, epoch: int, how: object) -> None:
        if epoch < self.epochs[-1]:
            raise ValueError(
                f"a change of members at epoch {epoch}, before the last one ({self.epochs[-1]})"
            )
        assert callable(how)
        if epoch == self.epochs[-1]:
            self.sets[-1] = how(self.sets[-1])
        else:
            self.epochs.append(epoch)
            self.sets.append(how(self.sets[-1]))

    def forget_before(self, epoch: int) -> None:
        """Drop the sets no time at ``epoch`` or later can use."""
        i = bisect.bisect_right(self.epochs, epoch) - 1
        if i > 0:
            del self.epochs[:i], self.sets[:i]
