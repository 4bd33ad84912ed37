"""The rate-controlled source: the records it promises, at the epochs it promises,
paced by ``next_awake`` (a worker waits for the next tick instead of spinning), and
exactly once across a restore."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from connectors.rate import RateSource, rate_source
from timely import ConfigError, Dataflow
from timely.eventlog import read_trace


def expected(source: RateSource) -> dict[int, list[int]]:
    """Every record by epoch, read straight from the source (no pacing involved)."""
    out: dict[int, list[int]] = {}
    for p in range(source.partitions()):
        offset = None
        while (got := source.read(p, offset)) is not None:
            epoch, records, offset = got
            out.setdefault(epoch, []).extend(records)
    return {e: sorted(r) for e, r in out.items()}


def by_epoch(pairs: list[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for e, r in pairs:
        out.setdefault(e, []).append(r)
    return {e: sorted(r) for e, r in out.items()}


def test_the_records_and_their_epochs() -> None:
    source = rate_source(1000, seconds=0.5, epoch_seconds=0.1, tick=0.01, partitions=3)
    got = expected(source)
    assert sorted(r for rs in got.values() for r in rs) == list(range(500))
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert all(len(rs) == 100 for rs in got.values())  # 1,000/s for 0.1 s an epoch
    counted = rate_source(10, count=7, make=lambda i: f"r{i}", tick=0.1, partitions=2)
    assert sorted(r for rs in expected(counted).values() for r in rs) == [f"r{i}" for i in range(7)]


@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_a_run_takes_as_long_as_the_rate_says(backend: str, tmp_path: Path) -> None:
    """0.6 s of records at 2,000/s: the run cannot finish before the last tick is due,
    delivers every record at its epoch, and its workers wait between ticks (a few steps
    per tick, not a spin)."""
    source = rate_source(2000, seconds=0.6, epoch_seconds=0.2, partitions=4)
    flow = Dataflow("paced")
    flow.source(source, name="rate").collect("out")
    started = time.time()
    results = flow.run(workers=2, backend=backend, trace=str(tmp_path))
    assert time.time() - started >= 0.59  # the last tick is due 0.59 s after the first
    assert by_epoch(results["out"]) == expected(source)
    for _, events in read_trace(tmp_path):
        steps = sum(1 for e in events if e[0] == "t")
        assert steps < 1000, steps  # 60 ticks of 2 partitions each, and their epochs


def test_a_restore_gives_the_failure_free_output(tmp_path: Path) -> None:
    source = rate_source(5000, seconds=0.3, epoch_seconds=0.05, partitions=4)
    flow = Dataflow("paced-restore")
    flow.source(source, name="rate").select(lambda x: x * 2).collect("out")
    results = flow.run(
        workers=2,
        backend="inline",
        checkpoint=str(tmp_path),
        checkpoint_every=1,
        crash_at=(60,),
        max_restarts=1,
    )
    want = {e: sorted(2 * r for r in rs) for e, rs in expected(source).items()}
    assert by_epoch(results["out"]) == want


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0, "seconds": 1}, "rate must be > 0"),
        ({"rate": 10}, "exactly one of seconds= "),
        ({"rate": 10, "seconds": 1, "count": 3}, "exactly one of seconds= "),
        ({"rate": 10, "count": -1}, "count must be an int >= 0"),
        ({"rate": 10, "seconds": 1, "tick": 2.0}, "need 0 < tick <= epoch_seconds"),
        ({"rate": 10, "seconds": 1, "partitions": 0}, "partitions must be an int >= 1"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        rate_source(**kwargs)  # type: ignore[arg-type]
