"""Warm worker actors, kept between the runs of one driver.

Starting a Ray actor costs a process and its imports (0.3-0.6 s on a laptop-sized
machine, more under load), which dwarfs everything else an empty run does (~20 ms).
A run that ends cleanly hands its actors back here with their reset under way (to
nothing: no worker, no connections, no sockets; a run with its state on disk waits for
the resets first); the next run with the same resource
shape takes them instead of starting new ones. Ray's own process pool does the same
for tasks. The run that ends does not wait for the resets: :meth:`ActorPool.take`
reads each one before it hands its actor out (long done by then, as a rule), and
kills an actor whose reset failed or did not answer in time (it died while idle, say)
instead of handing it out, so the run starts a new one in its place.

Idle actors keep their CPU reservation, so they must not outstay their use: each is
killed ``idle_timeout`` seconds after its run ended (a daemon timer), idle actors of
another shape are killed before a run starts new ones (timely never waits on its own
pool), and :func:`release_workers` kills them all at once. An actor from a failed
run is never kept: it is killed. Actors belong to the Ray job that made them; after
``ray.shutdown()`` the pool forgets them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import ray


@dataclass
class _Idle:
    actor: Any
    shape: Hashable
    until: float
    """When it is killed if nobody takes it (``time.monotonic()``)."""
    reset: Any = None
    """The actor's reset call (an ``ObjectRef``) not yet read: ``take`` reads it."""
    patience: float = 0.0
    """How long ``take`` waits for ``reset`` to answer, in seconds."""


def read_calls(refs: list[Any], timeout: float) -> list[bool]:
    """Which of the calls ``refs`` succeeded, waiting up to ``timeout`` seconds for them
    (one that fails, or does not answer in time, is False)."""
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    done = set(ready)
    ok = []
    for ref in refs:
        try:
            if ref not in done:
                raise TimeoutError
            ray.get(ref)
            ok.append(True)
        except Exception:
            ok.append(False)
    return ok


class ActorPool:
    """Idle worker actors by shape (the resources and options they were made with)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[float, Callable[[], None]], Any] = threading.Timer,
        settle: Callable[[list[Any], float], list[bool]] = read_calls,
    ) -> None:
        self._clock = clock
        self._make_timer = timer
        """``threading.Timer`` (tests give a fake one, with a fake ``clock``)."""
        self._read = settle
        """Reads the resets of the actors taken (tests give a fake one)."""
        self._idle: list[_Idle] = []
        self._job: str | None = None
        self._lock = threading.Lock()
        self._timer: Any = None
        self._due: float | None = None
        """When the armed timer fires (``time.monotonic()``)."""

    def take(self, n: int, shape: Hashable) -> list[Any]:
        """Up to ``n`` idle actors of ``shape`` (the most recently used first); idle actors
        of any other shape that reserve CPUs are killed, so that new ones have room
        (unless ``shape`` reserves none: a standby needs no room). A shape is
        ``(num_cpus, max_concurrency)``.

        An actor given back with its reset under way is handed out once the reset has
        answered; one whose reset failed or did not answer within its patience is killed
        instead (fewer than ``n`` come back: the caller starts new ones)."""
        with self._lock:
            self._forget_other_jobs()
            keep = [i for i in self._idle if i.shape == shape]
            others = [i for i in self._idle if i.shape != shape]
            if _reserves(shape):
                for idle in [i for i in others if _reserves(i.shape)]:
                    kill(idle.actor)
                others = [i for i in others if not _reserves(i.shape)]
            taken = keep[-n:] if n else []
            self._idle = others + keep[: len(keep) - len(taken)]
        taken.reverse()
        pending = [i for i in taken if i.reset is not None]
        if pending:  # outside the lock: the expiry timer must not wait on Ray
            ok = self._read([i.reset for i in pending], max(i.patience for i in pending))
            for idle, fine in zip(pending, ok, strict=True):
                idle.reset = None
                if not fine:
                    kill(idle.actor)
                    taken.remove(idle)
        return [i.actor for i in taken]

    def give_back(
        self,
        actors: list[Any],
        shape: Hashable,
        idle_timeout: float,
        resets: list[Any] | None = None,
        patience: float = 0.0,
    ) -> None:
        """Keep ``actors`` for ``idle_timeout`` seconds: reset already (they host nothing),
        or with their ``resets`` (one call per actor) under way, which the ``take`` that
        hands them out waits for up to ``patience`` seconds."""
        if idle_timeout <= 0:
            for actor in actors:
                kill(actor)
            return
        until = self._clock() + idle_timeout
        calls = [None] * len(actors) if resets is None else resets
        with self._lock:
            self._forget_other_jobs()
            self._idle.extend(
                _Idle(a, shape, until, r, patience) for a, r in zip(actors, calls, strict=True)
            )
            self._schedule()

    def release(self) -> int:
        """Kill every idle actor now; returns how many there were."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._cancel()
            if ray.is_initialized():
                for i in idle:
                    kill(i.actor)
            return len(idle)

    def __len__(self) -> int:
        with self._lock:
            return len(self._idle)

    def _forget_other_jobs(self) -> None:
        """Drop actors of an earlier Ray job: they died with it (or are not ours to use)."""
        job = ray.get_runtime_context().get_job_id() if ray.is_initialized() else None
        if job != self._job:
            self._idle = []
            self._job = job

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._due = None

    def _schedule(self) -> None:
        """Arm the timer for the soonest expiry. A timer armed for a later one is replaced:
        actors given back with a short ``idle_timeout`` must not wait for the expiry of
        those kept before them with a longer one (they held their CPUs for 30 s)."""
        if not self._idle:
            self._cancel()
            return
        due = min(i.until for i in self._idle)
        if self._timer is not None and self._due is not None and self._due <= due:
            return
        self._cancel()
        self._due = due
        self._timer = self._make_timer(max(0.0, due - self._clock()), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            self._timer = None
            self._due = None
            now = self._clock()
            due = [i for i in self._idle if i.until <= now]
            self._idle = [i for i in self._idle if i.until > now]
            if ray.is_initialized():
                for i in due:
                    kill(i.actor)
            self._schedule()


def _reserves(shape: Hashable) -> bool:
    """Whether actors of ``shape`` hold CPUs (a standby's ``(0, ...)`` does not)."""
    return not (isinstance(shape, tuple) and shape and shape[0] == 0)


def kill(actor: Any) -> None:
    """Kill ``actor`` for good; one already dead (or a Ray already gone) is fine."""
    if not ray.is_initialized():
        return  # its actors went with it (and ray.kill would start a Ray)
    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)


POOL = ActorPool()
"""This driver's idle worker actors (one pool per process)."""


def release_workers() -> int:
    """Kill the idle worker actors that timely keeps for the next Ray run (they hold CPU
    reservations until they time out: call this before giving Ray other work). Returns
    how many were killed."""
    return POOL.release()
