"""What checkpointing costs one worker's step loop, as the loop itself sees it.

``checkpoint_every="auto"`` steers on this (:mod:`timely.checkpoint.cadence`): an AIMD fed
too low a cost settles at too short an interval. Counting only the snapshot, the encode
and the write misses most of it (issue 30: 4-8 % measured at a 39 % slowdown), so the
loop reports every nanosecond that checkpointing takes from it:

- **on the loop**: the CPU time of each span the loop spends in checkpoint code, whatever
  it finds there: the per-step check of which vertices are due, the hold-back check
  before each notification, the snapshots and their encoding, handing a part over (and,
  inline, encoding and writing it): :meth:`LoopCost.section`. CPU time, not wall time:
  the fraction is of the run's CPU (:mod:`timely.checkpoint.cadence`), and on a machine
  shared with other work a span's wall time counts whatever the scheduler ran meanwhile
  (2-3x its CPU at a load of 10 on 2 cores);
- **held back**: the time the loop waits for input while a notification is held back
  for a snapshot (from "due" to "released"): without the checkpoint it would have run
  that notification instead of waiting (:meth:`LoopCost.hold`, :meth:`LoopCost.release`,
  :meth:`LoopCost.idle`), counted as if the loop had computed then.

The writer thread's share (its CPU time, which is GIL time taken from the loop) and the
driver's commits are added where they happen (the backend, the coordinator). It is pure:
the loop passes the times (nanoseconds: its thread's CPU clock for sections, its own
clock for waits), so a test drives it with a fake clock.
"""

from __future__ import annotations


class LoopCost:
    """One worker's checkpoint cost since it was last taken (nanoseconds)."""

    __slots__ = ("_held", "loop_ns", "stall_ns", "stalled_ns")

    def __init__(self) -> None:
        self.loop_ns = 0
        """Spent in checkpoint code on the loop (its thread's CPU time)."""
        self.stall_ns = 0
        """Spent waiting for input while a notification was held back."""
        self.stalled_ns = 0
        """All such waits since the loop began (never taken): counted as if the loop
        had computed then, they belong in the CPU the fraction is of as well as in its
        cost (:mod:`timely.checkpoint.cadence`), or a fraction of mostly waits exceeds 1."""
        self._held: set[int] = set()
        """The vertices with a notification held back now."""

    def section(self, t0: int, t1: int) -> None:
        """The loop spent ``[t0, t1]`` in checkpoint code."""
        self.loop_ns += t1 - t0

    def hold(self, v: int) -> None:
        """A notification of ``v`` is held back until its snapshot is taken."""
        self._held.add(v)

    def release(self, v: int) -> None:
        """``v``'s notifications may go (its snapshot is taken, or none is due)."""
        self._held.discard(v)

    @property
    def holding(self) -> bool:
        """Whether some notification is held back now."""
        return bool(self._held)

    def idle(self, t0: int, t1: int) -> None:
        """The loop waited for input over ``[t0, t1]``: a stall if it held a notification
        back meanwhile (it would have run it instead)."""
        if self._held:
            self.stall_ns += t1 - t0
            self.stalled_ns += t1 - t0

    def take(self) -> int:
        """The cost since the last call (nanoseconds), and start again from nothing."""
        total = self.loop_ns + self.stall_ns
        self.loop_ns = self.stall_ns = 0
        return total
