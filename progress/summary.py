"""Path summaries: what a path through the graph does to a timestamp.

Every path made of identity, ingress (append a counter), egress (drop the last
counter) and feedback (add to the last counter) steps has one *normal form*: drop
``pop`` trailing counters, add ``advance`` to the coordinate that is then last, and
append the counters ``push``. The normal form is closed under composition, which is
what lets reachability summarise unbounded sets of paths by a few summaries.
"""

from __future__ import annotations

from dataclasses import dataclass

from progress.timestamp import Timestamp


@dataclass(frozen=True, slots=True, order=True)
class PathSummary:
    """A path's effect on timestamps, in normal form ``(pop, advance, push)``."""

    pop: int = 0
    advance: int = 0
    push: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.pop < 0 or self.advance < 0 or any(c < 0 for c in self.push):
            raise ValueError(f"path summaries never move time backwards: {self!r}")

    @staticmethod
    def identity() -> PathSummary:
        """The empty path: time unchanged."""
        return _IDENTITY

    @staticmethod
    def ingress() -> PathSummary:
        """Entering a loop scope: append a loop counter starting at 0."""
        return _INGRESS

    @staticmethod
    def egress() -> PathSummary:
        """Leaving a loop scope: drop the innermost loop counter."""
        return _EGRESS

    @staticmethod
    def feedback(step: int = 1) -> PathSummary:
        """Going round a loop: add ``step`` to the innermost counter."""
        if step < 1:
            raise ValueError(f"a feedback step must be at least 1, got {step}")
        return PathSummary(0, step, ())

    def results_in(self, time: Timestamp) -> Timestamp | None:
        """The time at the path's end for a message at ``time`` at its start.

        ``None`` when the path would drop the epoch itself, i.e. the summary does not
        apply to timestamps of that depth.
        """
        keep = len(time) - self.pop
        if keep < 1:
            return None
        if self.advance:
            head = time[: keep - 1] + (time[keep - 1] + self.advance,)
        elif self.pop:
            head = time[:keep]
        else:
            head = time
        return head + self.push if self.push else head

    def followed_by(self, other: PathSummary) -> PathSummary:
        """The summary of this path followed by ``other``: ``other ∘ self``."""
        if not (other.pop or other.advance or other.push):
            return self  # followed by the identity (an edge, most vertices): no new summary
        pop, advance, push = self.pop, self.advance, list(self.push)
        drop = other.pop
        if drop <= len(push):
            del push[len(push) - drop :]
        else:
            pop += drop - len(push)
            push.clear()
            advance = 0  # the advanced coordinate itself was dropped
        if other.advance:
            if push:
                push[-1] += other.advance
            else:
                advance += other.advance
        push.extend(other.push)
        return PathSummary(pop, advance, tuple(push))

    def output_depth(self, input_depth: int) -> int:
        """Loop depth at the path's end for a start at ``input_depth``."""
        return input_depth - self.pop + len(self.push)

    def less_equal(self, other: PathSummary) -> bool:
        """``self <= other`` implies ``self.results_in(t) <= other.results_in(t)`` for all t.

        Exact for summaries of the same shape (same ``pop`` and ``len(push)``);
        summaries of different shapes are incomparable, which is conservative.
        """
        if self.pop != other.pop or len(self.push) != len(other.push):
            return False
        if self.advance > other.advance:
            return False
        return all(a <= b for a, b in zip(self.push, other.push))

    def advances(self) -> bool:
        """For a cycle (a path back to where it started): no ``t`` has ``results_in(t) <= t``.

        In normal form that holds exactly when the cycle adds to a counter it keeps.
        """
        return self.advance >= 1

    def __repr__(self) -> str:
        if self == _IDENTITY:
            return "PathSummary.identity()"
        return f"PathSummary(pop={self.pop}, advance={self.advance}, push={self.push})"


_IDENTITY = PathSummary(0, 0, ())
_INGRESS = PathSummary(0, 0, (0,))
_EGRESS = PathSummary(1, 0, ())
