"""SnailTrail online: each window analysed while the dataflow runs, off the workers.

An :class:`OnlineProfiler` is a thread of the driver's process (never on a worker's
step path) that tails a trace directory: every ``poll`` seconds it reads what the
workers' logs have flushed since (they flush at least every 0.2 s while working and
before they wait), and analyses each window ``[s, s + window)`` once it is complete:
every worker's log has reached past its end, or ``grace`` seconds have gone by since
(a worker that waits a long time logs its wait only when it ends). Each summary goes to
``on_window`` as it is made, with how long after the window's end it was ready. Events
that ended before the next window are dropped once a window is done, so the work per
window follows the events in it, not the run's length.

A window in which the workers mostly wait for the driver's input is input-bound: its
paths run through the driver's pseudo-worker (kind ``"input"``), and the operators'
small shares there say little about which is slower.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from analysis.summaries import Summary
from analysis.trace import convert
from analysis.windows import SECOND, analyse
from timely.eventlog import LogTail

OnWindow = Callable[[Summary, float], None]


class OnlineProfiler:
    """Analyse ``directory``'s trace window by window while it is written."""

    def __init__(
        self,
        directory: str,
        window: float = 1.0,
        on_window: OnWindow | None = None,
        poll: float = 0.1,
        grace: float = 1.0,
    ) -> None:
        self.directory = Path(directory)
        self.length = max(1, int(window * SECOND))
        self.on_window = on_window
        self.poll = poll
        self.grace = int(grace * SECOND)
        self.summaries: list[Summary] = []
        self.lags: list[float] = []
        """For each summary, seconds from its window's end to the summary being ready."""
        self.errors: list[BaseException] = []
        self._tails: dict[Path, LogTail] = {}
        self._next: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="snailtrail", daemon=True)

    def start(self) -> OnlineProfiler:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after analysing what is complete (the last, partial window is left out)."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> OnlineProfiler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while True:
            stopping = self._stop.is_set()
            try:
                self.step()
            except Exception as e:  # reported, not raised on a thread nobody joins yet
                self.errors.append(e)
                return
            if stopping:
                return
            self._stop.wait(self.poll)

    def step(self) -> list[Summary]:
        """Read what is new and analyse every window now complete; returns their summaries."""
        for path in sorted(self.directory.glob("worker-*.trace")):
            tail = self._tails.get(path)
            if tail is None:
                self._tails[path] = tail = LogTail(path)
            tail.read()
        tails = [t for t in self._tails.values() if t.header is not None and t.events]
        if not tails:
            return []
        attempt = max(t.header.get("attempt", 0) for t in tails if t.header)
        tails = [t for t in tails if t.header and t.header.get("attempt", 0) == attempt]
        if self._next is None:
            self._next = min(t.events[0][1] for t in tails)
        now = time.time_ns()
        reached = min(t.last for t in tails)
        made = []
        converted = None  # what the logs hold now, converted once for every window done
        while True:
            end = self._next + self.length
            if end > reached and now < end + self.grace:
                break  # not complete yet
            if end > now:
                break  # in the future
            if converted is None:
                converted = convert([(t.header, t.events) for t in tails if t.header])
            intervals, messages, _ = converted
            for summary in analyse(intervals, messages, self.length, self._next, end):
                ready = time.time_ns()
                self.summaries.append(summary)
                self.lags.append((ready - end) / SECOND)
                made.append(summary)
                if self.on_window is not None:
                    self.on_window(summary, (ready - end) / SECOND)
            self._next = end
        if made:
            for t in tails:  # what ended before the next window starts is never needed again
                t.events = [e for e in t.events if e[2] >= self._next]
        return made
