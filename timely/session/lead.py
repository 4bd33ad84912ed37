"""How far ahead of its sources a reconfigurable run's control input is kept, in time.

A record at an epoch the control input has not passed waits (its routing table is not
known yet), so the driver keeps the control input some epochs past the latest epoch its
sources read. A live change takes effect at the control input's epoch, so that lead is
also how far behind the sources a change lands: too small, and the sources outrun the
driver's look at them and wait; too large, and a change (DS2's, say) takes effect long
after it was asked for.

A fixed number of epochs is right for one epoch length only: 4 epochs of 0.5 s put a
change 2 s of input past the reads, and 4 epochs of 10 ms are shorter than the driver's
look (every 50 ms on Ray). So the lead is kept in seconds: the epochs the sources read in
:data:`LEAD_SECONDS` at the pace they read lately, never fewer than :data:`MIN_LEAD`.
"""

from __future__ import annotations

import math
from collections import deque

LEAD_SECONDS = 0.25
"""How much reading the lead covers: five of the Ray driver's looks at the sources."""

MIN_LEAD = 2
"""The fewest epochs of lead: with one, the sources wait at every epoch for the driver's
next look (measured on Ray at 0.5 s epochs: 1,425 records/s out of 2,000 offered)."""

MAX_LEAD = 1000
"""The most epochs of lead (epochs of a millisecond or less)."""

WINDOW = 16
"""How many of the latest reads (epoch, when) the pace is taken over."""


class SourceLead:
    """The control input's lead over the sources, from the pace at which they read.

    :meth:`observe` takes the latest epoch read and the time (any monotonic clock: tests
    pass a fake one); :meth:`epochs` is the lead. Until two different epochs have been
    seen there is no pace, and the lead is ``initial``."""

    def __init__(self, initial: int) -> None:
        self.initial = initial
        self._reads: deque[tuple[int, float]] = deque(maxlen=WINDOW)

    def observe(self, read: int, now: float) -> None:
        """The sources have read up to epoch ``read`` at ``now``."""
        if not self._reads or read > self._reads[-1][0]:
            self._reads.append((read, now))

    def pace(self) -> float | None:
        """Epochs read a second over the window (None: fewer than two reads seen)."""
        if len(self._reads) < 2:
            return None
        (first, since), (last, at) = self._reads[0], self._reads[-1]
        return (last - first) / (at - since) if at > since else None

    def epochs(self) -> int:
        """How many epochs past the latest read to keep the control input."""
        pace = self.pace()
        if pace is None:
            return self.initial
        wanted = math.ceil(pace * LEAD_SECONDS - 1e-9)  # (not one more for a rounding)
        return max(MIN_LEAD, min(MAX_LEAD, wanted))
