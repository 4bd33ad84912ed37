"""Fault injection on real Ray: workers killed with ``ray.kill`` and ``os._exit`` inside a
vertex, at seeded random points, in wordcount, YSB and incremental connected components.
The outputs must equal a failure-free run's: nothing lost, nothing delivered twice."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.checkpoint.pipelines import PIPELINES
from tests.examples import load_example
from timely import Dataflow, Stream

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_local")]

ysb = load_example("ysb")
icc = load_example("incremental_cc")

ADS = ysb.ad_table(10, 5, seed=1)


def wordcount(s: Stream) -> Stream:
    words = s.select_many(lambda line: line.split())
    return words.count_by(lambda w: w).concat(
        PIPELINES["running"](words.select(len)).select(lambda kv: ("len", *kv))
    )


def ysb_views(s: Stream) -> Stream:
    flow = s.flow
    table = flow._ads  # type: ignore[attr-defined]
    return ysb.views_per_campaign(s, table.stream, window_seconds=3)


def components(s: Stream) -> Stream:
    return icc.component_changes(s)


def wordcount_epochs(rng: random.Random, n: int) -> list[list[Any]]:
    words = [f"w{i}" for i in range(30)]
    return [
        [" ".join(rng.choices(words, k=rng.randint(1, 6))) for _ in range(rng.randint(1, 8))]
        for _ in range(n)
    ]


def ysb_epochs(rng: random.Random, n: int) -> list[list[Any]]:
    ads = [ad for ad, _ in ADS]
    return [ysb.events_for(s, rng.randint(5, 40), ads, seed=rng.randrange(1000)) for s in range(n)]


def cc_epochs(rng: random.Random, n: int) -> list[list[Any]]:
    return [
        [(rng.randrange(60), rng.randrange(60)) for _ in range(rng.randint(1, 6))] for _ in range(n)
    ]


CASES: dict[str, tuple[Callable[[Stream], Stream], Callable[[random.Random, int], list[Any]]]] = {
    "wordcount": (wordcount, wordcount_epochs),
    "ysb": (ysb_views, ysb_epochs),
    "incremental_cc": (components, cc_epochs),
}


def exit_once(marker: Path, trigger: Any) -> Callable[[Any], None]:
    """A function that ends its worker's process (``os._exit``) the first time it sees
    ``trigger``; the marker file makes it happen once, not again after the restore."""

    def check(record: Any) -> None:
        if record == trigger and not marker.exists():
            marker.write_text("exited")
            os._exit(1)

    return check


def run(
    case: str,
    epochs: list[list[Any]],
    backend: str,
    kills: dict[int, int] | None = None,
    exits: list[tuple[Path, Any]] = (),  # type: ignore[assignment]
    **options: Any,
) -> tuple[dict[int, list[Any]], Any]:
    """Feed the epochs one by one; before epoch ``e`` in ``kills`` kill that worker."""
    body, _ = CASES[case]
    flow = Dataflow(f"faults-{case}")
    out: dict[int, list[Any]] = {}

    def record(epoch: int, records: list[Any]) -> None:
        assert epoch not in out, f"epoch {epoch} delivered twice"
        out[epoch] = sorted(records, key=repr)

    events = flow.new_input("events")
    flow._ads = flow.new_input("ads")  # type: ignore[attr-defined]
    stream = events.stream
    for marker, trigger in exits:
        stream = stream.inspect(exit_once(marker, trigger))
    body(stream).subscribe(record)
    with flow.activate(workers=2, backend=backend, **options) as session:
        flow._ads.send(ADS)  # type: ignore[attr-defined]
        flow._ads.close()  # type: ignore[attr-defined]
        for e, batch in enumerate(epochs):
            if kills and e in kills:
                ray.kill(session.actors[kills[e]], no_restart=True)  # type: ignore[attr-defined]
            events.advance_to(e)
            events.send(batch)
            session.poll(timeout=0.02)
        events.close()
        session.join()
    return out, session


def killed(case: str, tmp_path: Path, label: str, kills: int, **options: Any) -> Any:
    """A run on Ray with ``kills`` workers killed at seeded epochs, checked against the
    inline run without failures; returns the session."""
    rng = random.Random(f"{label}-{case}")
    epochs = CASES[case][1](rng, 16)
    expected, _ = run(case, epochs, "inline")
    at = {e: rng.randrange(2) for e in rng.sample(range(1, 16), kills)}
    # YSB checkpoints by time (the driver picks the epochs), the others by epoch count.
    cadence: dict[str, Any] = {"checkpoint_interval": 0.2} if case == "ysb" else {}
    got, session = run(
        case,
        epochs,
        "ray",
        at,
        checkpoint=str(tmp_path),
        max_restarts=len(at) + 1,
        **cadence,
        **options,
    )
    assert got == expected
    assert 1 <= session.restarts <= len(at) + 1
    return session


# Components on incremental checkpoints in CI's profile (5 s; the quick profile kills
# them in test_ray_kills_with_incremental_checkpoints' word count and YSB).
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.ci) if c == "incremental_cc" else c for c in sorted(CASES)],
)
def test_ray_kill_at_random_epochs(case: str, tmp_path: Path) -> None:
    killed(case, tmp_path, "kill", 4)


# ysb in CI's profile only: the quick one kills ysb with whole checkpoints, and word
# count with incremental ones.
@pytest.mark.parametrize("case", ["wordcount", pytest.param("ysb", marks=pytest.mark.ci)])
def test_ray_kills_with_incremental_checkpoints(case: str, tmp_path: Path) -> None:
    """The same kills, parts written as deltas on the part before (a whole one after
    every two): each restore applies its chain, on request (YSB) or every epoch."""
    killed(case, tmp_path, "incremental", 3, checkpoint_incremental=2)


def test_ray_kills_with_state_on_disk(tmp_path: Path) -> None:
    """The same kills with the word counts in the disk backend: a killed actor's store is
    left behind, its replacement restores the chain into a new one, and the run's state
    directory is gone at the end."""
    state_dir = tmp_path / "state"
    killed(
        "wordcount",
        tmp_path / "checkpoints",
        "disk",
        3,
        checkpoint_incremental=2,
        state_backend="disk",
        state_dir=str(state_dir),
    )
    assert os.listdir(state_dir) == []


# word count alone in the quick profile (ysb and the rest in CI's): an exit is the same
# failure to the driver whatever the dataflow; test_ray_kill_at_random_epochs kills ysb.
@pytest.mark.parametrize(
    "case",
    [c if c == "wordcount" else pytest.param(c, marks=pytest.mark.ci) for c in sorted(CASES)],
)
def test_os_exit_inside_a_vertex(case: str, tmp_path: Path) -> None:
    rng = random.Random(f"exit-{case}")
    epochs = CASES[case][1](rng, 12)
    expected, _ = run(case, epochs, "inline")
    picks = rng.sample(range(1, 12), 3)
    exits = [(tmp_path / f"exit-{e}", epochs[e][0]) for e in picks]
    got, session = run(
        case,
        epochs,
        "ray",
        exits=exits,
        checkpoint=str(tmp_path / "ckpt"),
        checkpoint_every=2,
        max_restarts=4,
    )
    assert got == expected
    assert all(marker.exists() for marker, _ in exits)
    assert 1 <= session.restarts <= 4


# 2 -> 3 in CI's profile only (~19 s): the quick one restores 3 -> 2, and rescales live
# both ways (tests/runtime/test_live_rescale.py).
@pytest.mark.parametrize(("before", "after"), [pytest.param(2, 3, marks=pytest.mark.ci), (3, 2)])
def test_restore_on_ray_with_another_worker_count(before: int, after: int, tmp_path: Path) -> None:
    """Stop a run after a checkpoint; resume it on Ray with another number of workers."""
    rng = random.Random(f"rescale-{before}")
    epochs = cc_epochs(rng, 12)
    expected, _ = run("incremental_cc", epochs, "inline")
    body = CASES["incremental_cc"][0]

    def flow_for(n: int) -> tuple[Dataflow, dict[int, list[Any]], Any]:
        flow = Dataflow("rescale")
        out: dict[int, list[Any]] = {}
        events = flow.new_input("events")
        flow.new_input("ads").close()  # unused here; closed so that it holds no epoch back
        body(events.stream).subscribe(lambda e, r: out.setdefault(e, sorted(r, key=repr)))
        for e, batch in enumerate(epochs[:n]):
            events.advance_to(e)
            events.send(batch)
        return flow, out, events

    flow, first, events = flow_for(7)
    events.advance_to(7)
    session = flow.activate(workers=before, backend="ray", checkpoint=str(tmp_path))
    while not session.committed or session.committed[-1] < 6:
        session.poll(timeout=0.05)
    session.close()

    flow, second, _ = flow_for(12)
    session = flow.activate(workers=after, backend="ray", checkpoint=str(tmp_path))
    assert session.restored_epoch == 6
    for h in flow._inputs:
        h.close()
    session.join()
    assert {**{e: r for e, r in first.items() if e <= 6}, **second} == expected
