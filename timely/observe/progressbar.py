"""A progress bar on stderr (``progress=``), drawn by tqdm from the driver's view.

``run`` asks for ``progress="auto"``: a bar once the run has lasted a second, and
only when stderr is a terminal (a log file or CI gets no carriage returns). ``True``
always draws one, ``False`` never. The bar counts epochs complete at the outputs (as
far as the driver has seen them) out of the run's epochs once they are known (every
driver input closed, no source), and shows the records delivered per second. A thread
redraws it every ``REFRESH`` seconds; the workers know nothing of it.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from timely.errors import ConfigError

if TYPE_CHECKING:
    from timely.session.base import Session

REFRESH = 0.1
"""Seconds between redraws."""


def from_option(value: Any) -> ProgressBar | None:
    """``progress=True | False | "auto"`` -> the bar (None: no bar)."""
    if value is False or value is None:
        return None
    if value is True:
        return ProgressBar(always=True)
    if value == "auto":
        return ProgressBar(always=False)
    raise ConfigError(f'progress must be True, False or "auto", got {value!r}')


class ProgressBar:
    """One session's bar."""

    needs_trace = False

    def __init__(self, always: bool) -> None:
        self.always = always
        self._session: Session | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="timely-progress", daemon=True)
        self.bar: tqdm[Any] | None = None

    def attach(self, session: Session) -> None:
        self._session = session
        self.bar = tqdm(
            desc=session.view.name,
            unit="epoch",
            file=sys.stderr,
            delay=0 if self.always else 1.0,
            disable=False if self.always else None,  # None: off when not a terminal
            dynamic_ncols=True,
            leave=True,
        )
        if not self.bar.disable:  # not a terminal: nothing to draw, no thread
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH):
            self.update()

    def update(self) -> None:
        """Redraw from the session's view."""
        bar, session = self.bar, self._session
        if bar is None or session is None:
            return
        view = session.view.snapshot()
        total = view["total_epochs"]
        if total is not None and bar.total != total:
            bar.total = total
        done = session.view.epochs_done()
        if total is not None:
            # the last epochs may carry no output; a finished run has done them all
            done = total if session.view.finished else min(done, total)
        records = sum(o.records for o in view["outputs"].values())
        elapsed = view["elapsed"]
        rate = records / elapsed if elapsed > 0 else 0.0
        bar.set_postfix_str(f"{rate:,.0f} records/s", refresh=False)
        if done > bar.n:
            bar.update(done - bar.n)  # honours the delay and tqdm's own rate limit

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        if self.bar is not None:
            self.update()
            self.bar.close()
            self.bar = None
