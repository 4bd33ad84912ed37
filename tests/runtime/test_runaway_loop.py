"""A loop that never ends (issue 25): its memory stays flat while its rounds go on, and
the driver warns about it (``loop_warning``).

The runaway is the newcomer's reachability with no ``until``, whose body re-emits its
input every round, so that it never ends::

    roots.iterate(lambda r: r.join(edges, ...).concat(r).distinct())

Each test bounds it (``max_iters``, or a session closed after the warning) and counts
rounds, never time. Memory is read by a step inside the body at chosen rounds: the
blocks the interpreter holds (``sys.getallocatedblocks()`` after a collection: every
object anything keeps, in any table) and the sizes of the engine's own tables (for the
message when it fails). Not tracemalloc's traced memory: it found the causes (see
``Worker._next_rounds``) but makes these runs five times slower; a leak of one object
per round shows here as thousands of blocks.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

import operators  # noqa: F401  (join, distinct)
import timely.worker.loop
from progress import Timestamp
from timely import ConfigError, Dataflow, Stream, Vertex
from timely.backends.inline import InlineSession
from timely.worker.loop import Worker

EDGES = [(0, 1), (1, 2), (2, 0), (2, 3), (4, 5)]
FLAT = 2_000
"""Blocks more at the last reading than at the first that still count as flat: a few
dicts resize between readings (2 workers swing by some hundreds); one object kept per
round would be 8,000 more over 8,000 rounds."""


class Readings(Vertex):
    """Passes records on; at the first batch of each round in ``at`` (worker 0), records
    the interpreter's allocated blocks and each worker's table sizes in ``into``."""

    def __init__(self, at: set[int], into: dict[int, Any], workers: Callable[[], list[Worker]]):
        self.at, self.into, self.hosts = at, into, workers
        self.last = -1

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        r = time[-1]
        if r != self.last:
            self.last = r
            if r in self.at and self.worker == 0 and r not in self.into:
                gc.collect()
                self.into[r] = (sys.getallocatedblocks(), [sizes(w) for w in self.hosts()])
        self.send_by(0, records, time)


def sizes(w: Worker) -> dict[str, int]:
    """The engine's tables on ``w`` that a round could leave something in."""
    keyed = [s for v in w.vertices for s in getattr(v, "_states", {}).values()]  # join's...
    seen = [len(ts) for per in w._invariant.values() for _, ts in per.values()]
    return {
        "requests": sum(len(c.requests) for c in w.contexts),
        "capabilities": sum(len(c.caps) for c in w.contexts),
        "operator_times": sum(len(s.times()) for s in keyed),
        "pointstamps": len(w.progress.view.counts()),
        "tracker": sum(len(a._counts) for a in w.tracker._pointstamps),
        "queued": sum(len(q) for q in w.inbox) + sum(map(len, w._held_rounds.values())),
        "invariant_rounds": sum(seen),
    }


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "timely" and r.levelno >= 30]


def the_issue_s_loop(
    name: str = "reach", max_iters: int | None = None, tap: type[Vertex] | None = None
) -> tuple[Dataflow, Any, Stream]:
    """The issue's reachability with no ``until`` (bounded by ``max_iters`` if given),
    the body's output through a ``tap`` step if given: the dataflow, its input and the
    loop's result."""
    flow = Dataflow("runaway")
    edges = flow.new_input("edges")
    roots = edges.stream.where(lambda e: e[0] == 0).select(lambda e: 0).distinct()

    def body(r: Stream) -> Stream:
        out = r.join(edges.stream, lambda n: n, lambda e: e[0], lambda n, e: e[1])
        out = out.concat(r).distinct()
        return out if tap is None else flow.vertex([(out, None)], tap, name="tap")[0]

    return flow, edges, roots.iterate(body, max_iters=max_iters, name=name)


def runaway(
    flow: Dataflow, edges: Stream, body: str, at: set[int], into: dict[int, Any], workers: Any
) -> Callable[[Stream], Stream]:
    """The never-ending body (``join``: the issue's; ``invariant``: one whose outer stream
    a per-time step re-reads every round, kept by the worker), and a reading step."""
    nodes = edges.select(lambda e: e[1])

    def step(r: Stream) -> Stream:
        if body == "join":
            out = r.join(edges, lambda n: n, lambda e: e[0], lambda n, e: e[1]).concat(r)
        else:
            out = r.concat(nodes)
        out = out.distinct()
        return flow.vertex([(out, None)], lambda: Readings(at, into, workers), name="readings")[0]

    return step


def run_runaway(workers: int, rounds: int, at: set[int], body: str = "join") -> dict[int, Any]:
    """Run the runaway for ``rounds`` rounds (its ``max_iters``) on the inline backend;
    the readings taken at the rounds ``at``."""
    into: dict[int, Any] = {}
    flow = Dataflow("runaway")
    edges = flow.new_input("edges")
    roots = edges.stream.where(lambda e: e[0] == 0).select(lambda e: 0).distinct()
    sessions: list[InlineSession] = []
    step = runaway(flow, edges.stream, body, at, into, lambda: sessions[0].worker_list)
    roots.iterate(step, max_iters=rounds).probe()
    session = flow.activate(workers=workers, backend="inline", progress=False, loop_warning=None)
    assert isinstance(session, InlineSession)
    sessions.append(session)
    with session:
        edges.send(EDGES)
        edges.close()
        session.join()
    assert sorted(into) == sorted(at), f"the loop did not reach every reading: {sorted(into)}"
    return into


def growth(readings: dict[int, Any]) -> tuple[int, str]:
    """Blocks more at the last reading than at the first, and what the tables were."""
    first, last = min(readings), max(readings)
    tables = "\n".join(f"round {r}: {readings[r][1]}" for r in sorted(readings))
    return readings[last][0] - readings[first][0], tables


@pytest.mark.parametrize(
    ("workers", "first", "last"),
    [
        pytest.param(1, 2_000, 10_000, marks=pytest.mark.ci),
        pytest.param(2, 1_000, 3_000, marks=pytest.mark.ci),
    ],
)
def test_a_runaway_loop_stays_flat(workers: int, first: int, last: int) -> None:
    """The issue's runaway: as many blocks at its last round as at the first reading
    (flat once warmed up), and no engine table larger; 10,000 rounds on one worker, and
    3,000 on two (the progress exchange and the data between workers too). Both in CI's
    profile (7 s each); the quick profile runs the loop-invariant case below."""
    readings = run_runaway(workers, last, {first, (first + last) // 2, last - 1})
    more, tables = growth(readings)
    assert more < FLAT, f"{more} blocks more over {last - first} rounds:\n{tables}"
    for before, after in zip(readings[first][1], readings[last - 1][1]):
        for name, n in after.items():
            assert n <= before[name] + 10, f"{name} grew:\n{tables}"


def test_a_runaway_loop_over_a_loop_invariant_stream_stays_flat() -> None:
    """A per-time step that re-reads an outer stream every round: the worker keeps the
    stream once per epoch and the rounds it delivered it at, which go as they finish."""
    readings = run_runaway(1, 3_000, {1_000, 2_999}, body="invariant")
    more, tables = growth(readings)
    assert more < FLAT, f"{more} blocks more over 2,000 rounds:\n{tables}"
    assert (
        readings[2_999][1][0]["invariant_rounds"] <= readings[1_000][1][0]["invariant_rounds"] + 2
    ), tables


def test_mutation_a_loop_that_runs_ahead_of_its_rounds_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the bound on rounds ahead, records go round within one step (and far ahead
    of the rounds done): every round keeps its tables, and the readings grow."""
    monkeypatch.setattr(Worker, "_too_far", lambda self, v, time: False)
    readings = run_runaway(1, 600, {200, 599})
    more, tables = growth(readings)
    assert more > FLAT, f"the mutation went unseen ({more} blocks more):\n{tables}"


def test_mutation_invariant_rounds_kept_for_ever_are_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keeping every round an outer stream was delivered at (the worker's re-delivery
    store) grows by a time per round: the table check sees it."""
    monkeypatch.setattr(Worker, "_forget_rounds", lambda self, v, seen: None)
    readings = run_runaway(2, 1_000, {200, 999}, body="invariant")
    _, tables = growth(readings)
    first, last = readings[200][1][0], readings[999][1][0]
    assert last["invariant_rounds"] > first["invariant_rounds"] + 500, tables


@pytest.mark.parametrize("workers", [1, 3])
def test_loops_held_to_one_round_ahead_give_the_same_results(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tightest bound (one round past the oldest round not done) holds loops back at
    every round, over epochs some of which are still open while their loops run: the
    issue's loop bounded by max_iters and a fixpoint whose records pass without a
    notification still give every record they reach."""
    monkeypatch.setattr(timely.worker.loop, "ROUNDS_AHEAD", 1)
    flow, edges, reach = the_issue_s_loop(max_iters=50)
    reach.distinct().collect("reach")
    doubled = edges.stream.select(lambda e: e[0]).fixpoint(lambda s: s.select(lambda x: 2 * x % 23))
    doubled.collect("doubled")
    edges.send(EDGES)
    edges.advance_to(1)
    edges.send([(1, 2), (3, 4)])
    got = flow.run(workers=workers, backend="inline", progress=False, loop_warning=None)
    assert sorted(got["reach"]) == [(0, 0), (0, 1), (0, 2), (0, 3)]  # epoch 1: no root

    def closure(xs: set[int]) -> set[int]:
        while (more := xs | {2 * x % 23 for x in xs}) != xs:
            xs = more
        return xs

    firsts = [{e[0] for e in EDGES}, {1, 3}]
    expected = [(epoch, x) for epoch, xs in enumerate(firsts) for x in closure(xs)]
    assert sorted(got["doubled"]) == sorted(expected)


# -- the warning ------------------------------------------------------------------------------


def check_message(message: str, threshold: int) -> None:
    assert "loop 'reach0'" in message  # the loop's name in the graph
    assert "of epoch 0" in message
    at = int(message.split(" is at round ")[1].split()[0])
    assert at >= threshold
    assert "until='fixpoint'" in message and "max_iters" in message
    assert f"loop_warning={threshold}" in message


@pytest.mark.parametrize("workers", [1, 2])
def test_the_driver_warns_once_about_a_loop_past_loop_warning_rounds(
    workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    flow, edges, reach = the_issue_s_loop(max_iters=300)
    reach.probe()
    edges.send(EDGES)
    with caplog.at_level(logging.WARNING, logger="timely"):
        flow.run(workers=workers, backend="inline", progress=False, loop_warning=100)
    [message] = warned(caplog)  # once, though the loop goes on for 200 rounds more
    check_message(message, 100)


def test_a_loop_within_loop_warning_rounds_is_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flow, edges, reach = the_issue_s_loop(max_iters=100)  # rounds 0..99
    reach.probe()
    edges.send(EDGES)
    with caplog.at_level(logging.WARNING, logger="timely"):
        flow.run(workers=2, backend="inline", progress=False, loop_warning=100)
        flow2, edges2, reach2 = the_issue_s_loop(max_iters=500)
        reach2.probe()
        edges2.send(EDGES)
        flow2.run(workers=2, backend="inline", progress=False, loop_warning=None)
    assert warned(caplog) == []


def test_the_warning_is_on_by_default_and_shows_in_the_live_page_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without the option, a loop past 1,000 rounds is warned about; the live page's
    state.json carries the warning while the run goes on (read from inside the loop)."""
    states: list[dict[str, Any]] = []
    sessions: list[Any] = []

    class ReadPage(Vertex):
        def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
            if time[-1] == 1_100 and self.worker == 0 and not states:
                url = sessions[0].ui_url + "state.json"
                with urllib.request.urlopen(url, timeout=10) as r:
                    states.append(json.loads(r.read()))
            self.send_by(0, records, time)

    flow, edges, reach = the_issue_s_loop(max_iters=1_200, tap=ReadPage)
    reach.probe()
    with caplog.at_level(logging.WARNING, logger="timely"):
        session = flow.activate(workers=1, backend="inline", progress=False, ui=True)
        sessions.append(session)
        with session:
            edges.send(EDGES)
            edges.close()
            session.join()
    [message] = warned(caplog)
    check_message(message, 1_000)
    [state] = states
    [warning] = state["warnings"]
    assert warning["kind"] == "loop" and warning["loop"] == "reach0"
    assert warning["epoch"] == 0 and 1_000 <= warning["round"] < 1_100
    assert warning["message"] == message.removeprefix("timely: ")


def test_the_driver_warns_about_a_runaway_loop_on_ray(
    ray_local: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """On Ray the rounds come with the heartbeats: a loop that never ends is warned about
    while it runs, and the session that stops it is closed by the test."""
    flow, edges, reach = the_issue_s_loop()  # no bound: it runs until the session closes
    reach.probe()
    with caplog.at_level(logging.WARNING, logger="timely"):
        session = flow.activate(workers=2, backend="ray", progress=False, loop_warning=50)
        with session:
            edges.send(EDGES)
            edges.advance_to(1)  # epoch 0's rounds can end: the loop runs (for ever)
            for _ in range(1_200):  # polls, each up to 0.1 s: the warning comes well before
                session.poll(0.1)
                if session.view.snapshot()["warnings"]:
                    break
    [message] = warned(caplog)
    check_message(message, 50)


def test_a_short_loop_past_loop_warning_is_seen_on_ray_by_its_end(
    ray_local: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A loop that passes the bound and ends between two heartbeats is still warned
    about: the workers' last report carries their loops' furthest rounds."""
    flow, edges, reach = the_issue_s_loop(max_iters=60)
    reach.probe()
    edges.send(EDGES)
    with caplog.at_level(logging.WARNING, logger="timely"):
        flow.run(workers=2, backend="ray", progress=False, loop_warning=50)
    [message] = warned(caplog)
    check_message(message, 50)


@pytest.mark.parametrize("value", [0, -5, 2.5, True, "1000"])
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_a_bad_loop_warning_is_refused_before_anything_starts(
    value: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_start(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a backend was started")

    monkeypatch.setattr(InlineSession, "__init__", no_start)
    if backend == "ray":
        from timely.backends.ray import RaySession

        monkeypatch.setattr(RaySession, "__init__", no_start)
    flow, _, reach = the_issue_s_loop(max_iters=5)
    reach.probe()
    with pytest.raises(ConfigError, match="loop_warning must be a whole number of rounds"):
        flow.run(workers=1, backend=backend, progress=False, loop_warning=value)
