"""Exactly-once checks on the inline backend: crash at every scheduling event of a run,
and check what is committed.

The inline scheduler counts scheduling events; ``crash_at=(n,)`` loses every worker at
event ``n`` and the session recovers from the last committed checkpoint, as on Ray.
:func:`sweep` crashes a run at each event in turn and returns the crash points whose
outputs differ from the failure-free run's: the tests assert that none do, and the
mutation tests that a deliberately broken engine makes some.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from tests.checkpoint import pipelines
from tests.checkpoint.mutable import MUTABLE
from tests.checkpoint.pipelines import PIPELINES
from tests.conftest import crash_points
from timely import Dataflow, Stream

ALL: dict[str, Callable[[Stream], Stream]] = {**PIPELINES, **MUTABLE}

SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
"""Checkpoint stores of the sweeps: a memory-backed file system where there is one (the
same code path as a disk, thousands of small files a sweep, at a fraction of the cost)."""


def epochs_for(n: int, per_epoch: int = 4) -> list[list[int]]:
    """``n`` epochs of small ints, some repeated, varying in size."""
    return [[(e * 7 + i * 5) % 23 for i in range(per_epoch + e % 3)] for e in range(n)]


def build(
    pipeline: str, epochs: list[list[int]], source: bool
) -> tuple[Dataflow, dict[int, list[Any]]]:
    """The dataflow, fed all at once (a bursty driver: every epoch queued before the
    workers start, so one step sees many) or from a source; and where its epochs land."""
    return pipelines.build(pipeline, epochs, source, builders=ALL, close=True, name="sweep")


def run(
    pipeline: str,
    epochs: list[list[int]],
    source: bool,
    workers: int,
    seed: int,
    **options: Any,
) -> tuple[dict[int, list[Any]], Any]:
    flow, out = build(pipeline, epochs, source)
    session = flow.activate(workers=workers, backend="inline", seed=seed, **options)
    session.join()
    return out, session


def sweep(
    pipeline: str,
    epochs: list[list[int]],
    source: bool,
    workers: int = 2,
    every: int | str = 1,
    seed: int = 0,
    first_wrong: bool = False,
    **options: Any,
) -> tuple[int, list[int]]:
    """Crash the run at scheduling events in turn (every one in CI's profile, one in
    six in the quick profile: :func:`tests.conftest.crash_points`); return how many
    events the run has and the crash points after which the outputs differ from a
    failure-free run (``options``: more checkpoint options for the crashed runs).
    ``first_wrong``: try every event, and stop at the first wrong one (a mutation check
    needs one)."""
    expected, _ = run(pipeline, epochs, source, workers, seed)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as d:
        _, session = run(pipeline, epochs, source, workers, seed, checkpoint=d)
    events = session.events
    key = f"{pipeline}-{source}-{workers}-{seed}-{every}-{sorted(options.items())}"
    points = range(1, events + 1) if first_wrong else crash_points(events, key)
    wrong = []
    for n in points:
        with tempfile.TemporaryDirectory(dir=SCRATCH) as d:
            got, session = run(
                pipeline,
                epochs,
                source,
                workers,
                seed,
                checkpoint=d,
                checkpoint_every=every,
                crash_at=(n,),
                max_restarts=1,
                **options,
            )
        if got != expected:
            wrong.append(n)
            if first_wrong:
                break
    return events, wrong
