"""The driver's side of ``checkpoint_every="auto"``: measuring the coordination fraction
and handing the controller's interval to the workers.

The controller (:class:`~timely.checkpoint.aimd.AIMD`) is fed one :class:`Measurement` per
*window*: the commits from one checkpoint to a later one, all under the same interval.

- **What is measured.** In CPU time, which a machine shared with other work disturbs
  far less than wall time (issue 30): coordination is the workers' checkpoint work (each
  part is reported with the CPU its worker's loop spent in checkpoint code, its writer
  thread's CPU and the loop's waits while a notification was held back: see
  :mod:`timely.checkpoint.cost`) plus the driver's own (the CPU of its commits and of
  the reports' handling). The fraction is that over the CPU the whole run used in the
  window: each worker's process (reported with its parts) and the driver's. Wall time
  counted a worker's checkpoint code at the pace the machine gave it (on Ray x2 at a
  load of 10, 2-3x its CPU) and the writer thread's CPU at full speed, both over a
  window in which the workers were not computing throughout. Total is still the wall
  time from the window's first commit to its
  last, each commit timed when its last part became durable (the workers' clocks, not
  when the driver got round to the reports); it stands in for the CPU (times the
  workers running at once) when none was measured.
- **When.** A window closes at the first commit at least ``k`` epochs and
  :data:`MIN_WINDOW` seconds after it began: commits come in bursts (a frontier jumps
  several epochs at once; reports wait for the driver), so the time between two of
  them is not the time spent on the epochs between them, but a window of several
  bursts is. A window begins only at a commit on the current schedule: after the
  controller changes the interval, at the epoch from which every worker agreed to it.
- **How workers agree.** Through the request ``checkpoint_interval`` uses
  (``Worker.request_checkpoint``), with the new interval: checkpoints after an epoch none
  of them has passed (their *floor*) and every ``k`` epochs from there. Each worker keeps
  its schedule before that epoch, so checkpoints already under way are taken. The
  epoch asked for is ``k`` after the commit that chose ``k`` when the workers are not
  past it, else the first such multiple past the highest floor heard (with the
  lookahead that doubles on refusal). A refusal is asked again at once: workers that
  agreed to a refused epoch follow the new interval from there, the others do not, and
  none of the checkpoints in between where they differ is committed.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Protocol

from timely.checkpoint.aimd import AIMD
from timely.checkpoint.history import Recent

clock = time.perf_counter
"""What a request to the workers is timed on (seconds; a test gives a fake one)."""

MIN_WINDOW = 0.5
"""The shortest window measured (seconds): several bursts of commits."""

_ATTEMPTS = 8
"""Requests for a new interval in a row before waiting for the next chance."""

_MAX_LOOKAHEAD = 1 << 20
"""Bounds the request's lookahead (in epochs)."""


class Request(Protocol):
    """Asks every worker for a checkpoint after ``epoch`` (and every ``every`` epochs
    after it): whether all agreed, and the highest checkpoint floor among them."""

    def __call__(
        self, epoch: int, every: int | None = None, fraction: float | None = None
    ) -> tuple[bool, int]: ...


@dataclass(frozen=True)
class Measurement:
    """One window, as the controller was fed it."""

    first: int
    """The checkpoint whose commit began the window."""
    last: int
    """The checkpoint whose commit closed it."""
    interval: int
    """The interval it ran under."""
    work: float
    """The workers' checkpoint work, all of them (CPU seconds)."""
    driver: float
    """The driver's commits and the handling of the parts' reports (CPU seconds)."""
    total: float
    """Wall time from the first commit to the last (seconds)."""
    next_interval: int
    """The interval the controller chose after it."""
    cpu: float = 0.0
    """The CPU the run used over the window: the workers' processes and the driver's
    (seconds; 0: not measured)."""
    parallel: int = 1
    """How many workers run at once."""

    @property
    def coordination(self) -> float:
        """CPU seconds spent coordinating."""
        return self.work + self.driver

    @property
    def spent(self) -> float:
        """The CPU seconds the window's fraction is of: the run's, or when none was
        measured, its wall time on every worker running at once."""
        return self.cpu if self.cpu > 0 else self.total * self.parallel

    @property
    def fraction(self) -> float:
        """The share of the run's CPU spent coordinating."""
        spent = self.spent
        return self.coordination / spent if spent > 0 else 0.0


def overall(measurements: list[Measurement]) -> float:
    """The fraction over several windows: their coordination over the CPU they spent."""
    spent = sum(m.spent for m in measurements)
    return sum(m.coordination for m in measurements) / spent if spent > 0 else 0.0


class AutoCadence:
    """The adaptive checkpoint interval of one run: windows, measurements, requests."""

    def __init__(self, controller: AIMD, parallel: int, min_window: float | None = None) -> None:
        """``parallel``: how many workers run at once (the wall time stands for that much
        CPU when none is measured); ``min_window``: seconds (:data:`MIN_WINDOW` by
        default)."""
        self.controller = controller
        self.parallel = max(1, parallel)
        self.min_window = MIN_WINDOW if min_window is None else min_window
        self.measurements: Recent[Measurement] = Recent()
        """The windows measured in this run, in order: the latest
        :data:`~timely.checkpoint.history.HISTORY` or more (``.total``: how many)."""
        self._work: dict[int, tuple[float, float]] = {}
        """Per checkpoint epoch, the work and the workers' CPU reported with its parts so
        far."""
        self._stray = (0.0, 0.0)
        """Work and CPU reported with parts that will never be committed."""
        self._driver = 0.0
        """The driver's commits and requests in the open window."""
        self.request_seconds = 0.0
        """The driver's time asking workers for new intervals (between windows: a change's
        cost, not the interval's)."""
        self._start: tuple[int, float, float | None] | None = None
        """The commit the open window began at: its epoch, its time and the driver's
        process CPU then (None: none is open)."""
        self._window_work = 0.0
        self._window_cpu = 0.0
        self._in_force = 0
        """The epoch from which every worker checkpoints at the current interval."""
        self._wanted: tuple[int, int, float] | None = None
        """A new interval the workers have yet to agree to: ``(interval, the epoch of the
        commit that chose it, the fraction that made it)``."""
        self._floor = -1
        self._lookahead = 1
        self._asking = False

    @property
    def interval(self) -> int:
        """The controller's interval (new workers start with it)."""
        return self.controller.interval

    def pending(self) -> int | None:
        """The interval chosen that the workers have yet to agree to (None: none)."""
        return None if self._wanted is None else self._wanted[0]

    # -- what the coordinator reports ---------------------------------------------------------
    def part(self, epoch: int, work: float, cpu: float = 0.0, committable: bool = True) -> None:
        """A worker's part of the checkpoint at ``epoch`` took ``work`` seconds of its CPU
        (and its process used ``cpu`` seconds since its last part); one that can no longer
        be committed (an epoch at or before the last commit) counts in the window it was
        reported in."""
        if committable:
            w, c = self._work.get(epoch, (0.0, 0.0))
            self._work[epoch] = (w + work, c + cpu)
        else:
            self._stray = (self._stray[0] + work, self._stray[1] + cpu)

    def driver(self, seconds: float) -> None:
        """The driver spent ``seconds`` of CPU on checkpoints."""
        self._driver += seconds

    def committed(self, epoch: int, at: float, cpu: float | None = None) -> Measurement | None:
        """The checkpoint at ``epoch`` is committed, its last part durable at ``at``
        (seconds), the driver's process having used ``cpu`` seconds of CPU so far (None:
        not measured): close the window if it is long enough and feed it to the
        controller. Returns the measurement made, if any."""
        done = [self._work.pop(e) for e in [e for e in self._work if e <= epoch]]
        work = self._stray[0] + sum(w for w, _ in done)
        workers_cpu = self._stray[1] + sum(c for _, c in done)
        self._stray = (0.0, 0.0)
        start = self._start
        if start is None:
            if self._wanted is None and epoch >= self._in_force:
                # The checkpoint that begins a window was paid for before it.
                self._start, self._driver = (epoch, at, cpu), 0.0
                self._window_work = self._window_cpu = 0.0
            return None
        self._window_work += work
        self._window_cpu += workers_cpu
        first, began, cpu0 = start
        k = self.controller.interval
        if epoch - first < k or at - began < self.min_window:
            return None
        total = at - began
        spent = 0.0 if cpu is None or cpu0 is None else self._window_cpu + cpu - cpu0
        measured = Measurement(
            first, epoch, k, self._window_work, self._driver, total, k, spent, self.parallel
        )
        chosen = self.controller.observe(measured.coordination, measured.spent, k)
        measured = dataclasses.replace(measured, next_interval=chosen)
        self.measurements.append(measured)
        self._driver = 0.0
        self._start, self._window_work, self._window_cpu = (epoch, at, cpu), 0.0, 0.0
        if chosen != k:
            self._wanted = (chosen, epoch, measured.fraction)
            self._start = None
        return measured

    def restarted(self, epoch: int) -> None:
        """New workers start after the checkpoint at ``epoch`` (-1: from scratch), at the
        controller's interval: nothing is owed to them, and the relaunch is in no window."""
        self._work.clear()
        self._stray = (0.0, 0.0)
        self._driver = self._window_work = self._window_cpu = 0.0
        self._start = self._wanted = None
        self._in_force = epoch + 1
        self._floor = -1
        self._lookahead = 1

    # -- telling the workers --------------------------------------------------------------------
    def reschedule(self, request: Request) -> None:
        """Ask every worker for the interval chosen, if they have not all agreed yet."""
        if self._wanted is None or self._asking:
            return
        k, chosen_at, fraction = self._wanted
        self._asking = True  # no second request from inside this one
        started = clock()
        try:
            for _ in range(_ATTEMPTS):
                # The first epoch k, 2k, ... after the commit that chose k that is past the
                # floor (plus the lookahead): any of them starts the same grid.
                past = max(self._floor + self._lookahead - chosen_at, 1)
                epoch = chosen_at + -(-past // k) * k
                agreed, floor = request(epoch, k, fraction)
                self._floor = max(self._floor, floor)
                if agreed:
                    self._wanted = None
                    self._in_force = epoch
                    self._lookahead = max(1, self._lookahead // 2)
                    return
                self._lookahead = min(2 * self._lookahead, _MAX_LOOKAHEAD)
        finally:
            self._asking = False
            self.request_seconds += clock() - started
