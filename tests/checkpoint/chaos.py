"""Chaos on real Ray: seeded kill schedules against dataflows with state carried across
epochs, and an oracle (the same dataflow inline, without failures) to judge the outputs.

Shared by ``tests/checkpoint/test_chaos.py`` (a few kills per dataflow, asserted) and
``benchmarks/bench_chaos.py`` (the soak: hundreds of kills, counted and timed), so that
both exercise exactly the same harness.

A run: the driver feeds a dataflow (one epoch at a time, or bursts of several epochs
without polling in between), or a source feeds it; a :class:`Killer` thread waits until
the driver has received a given epoch's output, then kills workers with
``ray.kill(actor, no_restart=True)`` or a ``SIGKILL`` to its process, in one of five
ways (:data:`KINDS`). It then waits
for the next new output, which gives the kill's recovery latency, before the next kill
is armed. A driver that feeds the dataflow is paced by the killer (:meth:`Killer.holds`):
it holds its next epochs while a kill planned before them has not been made, so kills
land where they were planned and never wait on output the driver holds back. Outputs
are recorded per epoch by :class:`Recorder`, which notes every epoch delivered twice.

Everything here uses the public API, plus ``session.actors`` (the Ray session's actor
handles, replaced by a new list when it relaunches its workers) and ``session.pids``
(their processes).
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import os
import random
import signal
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import operators  # noqa: F401 - registers the stream methods
from connectors.collections import from_collection
from connectors.files import JsonLinesSink, read_committed
from tests.checkpoint import pipelines
from tests.checkpoint.mutable import dict_state
from tests.checkpoint.pipelines import EpochSource
from timely import Dataflow, Stream
from timely.checkpoint.history import Recent

KINDS = ("single", "double", "recovery", "pair", "sigkill")
"""How workers are killed at one kill event:

- ``single``: one worker;
- ``double``: one worker, then another 5–50 ms later (both of the same generation);
- ``recovery``: one worker, then, once the session has started replacements, one of the
  replacements 0–50 ms later (a failure during recovery);
- ``pair``: two workers at once.
"""

KILLS_PER_EVENT = {"single": 1, "double": 2, "recovery": 2, "pair": 2, "sigkill": 1}


# -- the dataflows -------------------------------------------------------------------------
def sliding(s: Stream) -> Stream:
    """Sliding sums slid by ``inverse``: a snapshot that shares the window's accumulators
    with live state restores sums that are wrong (or negative) after a kill."""
    return s.reduce_by_window(lambda x: x % 7, operator.add, 5, slide=1, inverse=operator.sub)


def halves_and_thirds(inner: Stream) -> Stream:
    return inner.select_many(lambda x: (x // 2, x // 3))


def reach_counts(s: Stream) -> Stream:
    """A fixpoint per epoch (everything reachable by x -> x//2, x//3), then running counts
    per residue across epochs: a loop feeding state carried across epochs."""
    reached = s.fixpoint(halves_and_thirds)
    return reached.running_reduce(lambda x: x % 5, operator.add, lambda x: 1)


def tag(label: str) -> Callable[[Any], Any]:
    def tagged(record: Any) -> Any:
        return (label, *record) if isinstance(record, tuple) else (label, record)

    return tagged


def windows_and_counts(s: Stream) -> Stream:
    """Sliding sums and an in-place ``dict`` state side by side (for bursts and sources)."""
    return sliding(s).select(tag("sum")).concat(dict_state(s).select(tag("seen")))


def running_sums(s: Stream) -> Stream:
    return s.running_reduce(lambda x: x % 6, operator.add)


def sessions_and_windows(s: Stream) -> Stream:
    """Per-key sessions (``map_with_state`` forgetting idle keys) beside sliding sums:
    what a paced, driver-fed stream of events typically keeps."""
    return pipelines.sessions(s).select(tag("session")).concat(sliding(s).select(tag("sum")))


def word_counts(s: Stream) -> Stream:
    """Running counts of words (ints as words) across epochs, from a replayable source."""
    return s.select(lambda x: f"w{x % 13}").running_reduce(lambda w: w, operator.add, lambda w: 1)


def reach_per_epoch(s: Stream) -> Stream:
    """Reachability from node 0 over every edge seen so far (a ``running_reduce`` keeps
    them; each epoch's fixpoint joins the reached nodes with them): a loop whose rounds
    make the most scheduling events per epoch."""
    edges = s.select(lambda x: (x % 16, (x * 7 + 3) % 16)).running_reduce(
        lambda e: e, lambda a, b: a, lambda e: e, every_key=True
    )
    pairs = edges.select(lambda kv: kv[0])
    roots = s.select(lambda x: 0).distinct()  # node 0, in every epoch: every epoch has output
    return roots.iterate(
        lambda r: r.join(pairs, lambda n: n, lambda e: e[0], lambda n, e: e[1]),
        until="fixpoint",
    )


def value_of(item: tuple[int, int]) -> int:
    return item[1]


def epoch_of(item: tuple[int, int]) -> int:
    return item[0]


# -- cases ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One dataflow and how it is fed and checkpointed in a chaos run.

    ``feed``: ``"driver"`` (``burst`` epochs sent without polling, then the driver waits
    until at most ``lag`` epochs are outstanding), ``"collection"`` (``from_collection``
    with ``epoch_of``) or ``"source"`` (``EpochSource``). A source reads as fast as the
    workers go and cannot be held back by the driver, so its kills all come in the first
    ``kills_until`` of its epochs. ``sink``: also write the output to a ``JsonLinesSink``
    and check what is committed there.
    """

    name: str
    body: Callable[[Stream], Stream]
    data: Callable[[random.Random, int], list[list[Any]]]
    epochs: int
    workers: int = 2
    feed: str = "driver"
    burst: int = 1
    lag: int = 2
    sink: bool = False
    kills_until: float = 0.4
    pace: float = 0.0
    """Seconds the driver waits (polling) after each epoch it sends: a paced input."""
    quiet: float = 0.0
    """Seconds of quiet after each burst (polling, sending nothing)."""
    options: dict[str, Any] = field(default_factory=lambda: {"checkpoint_every": 1})

    @property
    def interval(self) -> float | None:
        value: float | None = self.options.get("checkpoint_interval")
        return value


def ints(rng: random.Random, n: int) -> list[list[Any]]:
    return [[rng.randrange(40) for _ in range(rng.randint(1, 6))] for _ in range(n)]


def nodes(rng: random.Random, n: int) -> list[list[Any]]:
    return [[rng.randrange(64) for _ in range(rng.randint(1, 3))] for _ in range(n)]


CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case("sliding", sliding, ints, 48),
        Case("dict_state", dict_state, ints, 48, workers=3),
        Case("iterate", reach_counts, nodes, 48),
        Case("bursty", windows_and_counts, ints, 64, burst=8, lag=8),
        Case("collection", windows_and_counts, ints, 300, feed="collection"),
        # Its kills in the first quarter: after them it runs for seconds (600 epochs,
        # 2.5-3 s on a quiet machine), long enough for missing checkpoints to show (450
        # epochs ran in 1.5 s, too short to tell; 750 gave a loaded CI run more chances
        # of a slow spell between commits). It reads as fast as it can: the workers move
        # many epochs while a checkpoint request travels.
        Case(
            "source_interval",
            windows_and_counts,
            ints,
            800,
            workers=3,
            feed="source",
            kills_until=0.25,
            options={"checkpoint_interval": 0.2},
        ),
        Case("sink", running_sums, ints, 48, sink=True),
        # The dataflows of issue 26, where recoveries stalled for 30 s: paced inputs with
        # checkpoint_interval, bursts followed by quiet, 3 workers checkpointing every
        # third epoch, word counts from a source, reachability over running state.
        Case(
            "paced_interval",
            sessions_and_windows,
            ints,
            60,
            pace=0.1,
            options={"checkpoint_interval": 0.4},
        ),
        Case("bursts_quiet", sessions_and_windows, ints, 64, burst=8, lag=8, quiet=0.7),
        Case(
            "paced_3",
            sessions_and_windows,
            ints,
            48,
            workers=3,
            pace=0.05,
            options={"checkpoint_every": 3},
        ),
        Case(
            "word_source",
            word_counts,
            ints,
            400,
            feed="source",
            kills_until=0.3,
            options={"checkpoint_every": 2},
        ),
        Case("reach", reach_per_epoch, ints, 40, workers=3),
    ]
}


# -- kill schedules ------------------------------------------------------------------------
@dataclass(frozen=True)
class KillEvent:
    """Kill once the driver has received the output of epoch ``after`` (or later)."""

    after: int
    kind: str
    first: int
    """The worker killed first."""
    second: int
    """``double``/``pair``: the other worker killed; ``recovery``: the replacement killed."""
    lead: float
    """Seconds from the trigger to the first kill (0–20 ms: where in a step it lands)."""
    gap: float
    """``double``: seconds between the two kills (5–50 ms); ``recovery``: from the
    relaunch to the replacement's kill (0–50 ms)."""


def schedule(
    rng: random.Random, kinds: list[str], workers: int, first: int, last: int
) -> list[KillEvent]:
    """One event per entry of ``kinds`` (in a seeded order), triggered at distinct epochs
    spread over ``[first, last]``."""
    kinds = list(kinds)
    rng.shuffle(kinds)
    n = len(kinds)
    span = (last - first) / max(n, 1)
    events = []
    for i, kind in enumerate(kinds):
        lo = first + int(i * span)
        hi = max(lo, first + int((i + 1) * span) - 1)
        a, b = rng.sample(range(workers), 2)
        gap = rng.uniform(0.005, 0.05) if kind == "double" else rng.uniform(0.0, 0.05)
        events.append(KillEvent(rng.randint(lo, hi), kind, a, b, rng.uniform(0.0, 0.02), gap))
    return events


def plan_kills(
    case: Case, seed: int, kinds: list[str], epochs: int | None = None
) -> list[KillEvent]:
    """Kill events for a run of ``case`` over ``epochs`` epochs (``case.epochs`` by
    default): after the first few epochs, and early enough that the run is still going
    when the last one lands (the driver holds its last burst until then; a source cannot
    be held, so its kills come in its first ``case.kills_until``, which leaves a long run
    without kills after them, where the checkpoint cadence shows)."""
    n = case.epochs if epochs is None else epochs
    rng = random.Random(f"chaos-{case.name}-{seed}-kills")
    first = 3
    last = n - case.burst - case.lag - 3 if case.feed == "driver" else int(n * case.kills_until)
    return schedule(rng, kinds, case.workers, first, last)


def case_data(case: Case, seed: int, epochs: int | None = None) -> list[list[Any]]:
    """The seeded input of a run of ``case``: one list of records per epoch."""
    rng = random.Random(f"chaos-{case.name}-{seed}-data")
    return case.data(rng, case.epochs if epochs is None else epochs)


# -- recording -----------------------------------------------------------------------------
class Recorder:
    """The subscribe callback: each epoch's records (sorted), arrival times, and the
    epochs delivered twice. Thread-safe for the killer, which waits on ``cond``."""

    def __init__(self) -> None:
        self.out: dict[int, list[Any]] = {}
        self.arrived: dict[int, float] = {}
        self.duplicates: list[int] = []
        self.high = -1
        self.cond = threading.Condition()

    def __call__(self, epoch: int, records: list[Any]) -> None:
        now = time.monotonic()
        with self.cond:
            twice = epoch in self.out
            if twice:
                self.duplicates.append(epoch)
            else:
                self.out[epoch] = sorted(records, key=repr)
                self.arrived[epoch] = now
                self.high = max(self.high, epoch)
            self.cond.notify_all()
        assert not twice, f"epoch {epoch} delivered twice"

    def wait_past(self, epoch: int, stop: threading.Event, timeout: float) -> bool:
        """Wait until an epoch ``> epoch`` has arrived; False on stop or timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.high <= epoch:
                left = deadline - time.monotonic()
                if stop.is_set() or left <= 0:
                    return False
                self.cond.wait(min(left, 0.05))
        return True


@dataclass
class KillRecord:
    """What happened at one kill event."""

    event: KillEvent
    kills: int = 0
    at: float = 0.0
    """When the first kill was made (``time.monotonic``)."""
    high: int = -1
    """The latest epoch delivered when the first kill was made."""
    committed: int = -1
    """The session's latest committed checkpoint when the first kill was made."""
    relaunch_high: int = -1
    """The latest epoch delivered once the session had relaunched its workers (for the
    last time, for ``recovery``)."""
    stale: int = 0
    """Kills that landed on an actor the session had already replaced (it had seen an
    earlier kill and relaunched, killing the rest): counted in ``kills``, they cost no
    recovery of their own."""
    restored: int | None = None
    """The checkpoint epoch the (first) relaunch restored from."""
    latency: float | None = None
    """Seconds from the first kill to the next new epoch at the driver."""
    missed: str | None = None
    """Why the event did not complete (never triggered, no relaunch seen, no output)."""
    observed: Any = None
    """What the killer's ``observe`` returned at the trigger (a sink's committed output)."""


class Killer(threading.Thread):
    """Runs a kill schedule against a live Ray session, one event at a time.

    ``observe``, if given, is called at each trigger, before the kill: what a reader of
    the run's output sees at that moment (checked against the oracle afterwards).

    Every event ends measured (``latency``) or with the reason it was not (``missed``);
    a wait for a trigger, a relaunch or new output gives up after ``timeout`` seconds,
    or at once when the run ends (``stop``).
    """

    def __init__(
        self,
        session: Any,
        recorder: Recorder,
        events: Sequence[KillEvent],
        observe: Callable[[], Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(name="chaos-killer", daemon=True)
        self.session = session
        self.recorder = recorder
        self.events = events
        self.observe = observe
        self.timeout = timeout
        self.records: list[KillRecord] = []
        self.stop = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._struck = 0
        """How many events have had their kills (and relaunches) made, or were missed."""
        self._past: int | None = None
        """While the killer waits for new output after a kill: the epoch it must pass."""

    def holds(self, epoch: int, due: float) -> bool:
        """Whether a driver about to send ``epoch`` should hold it: while an event
        triggered before ``due`` has not struck yet (the driver got ahead of the schedule:
        its kill would land later than planned, or, in the last burst, after the run).
        Never while the killer waits for output past an epoch that only ``epoch`` can
        bring (every epoch up to ``epoch - 2`` can complete without it; ``epoch - 1`` is
        open until it is sent): the two would wait on each other until the timeout."""
        if self.done.is_set():
            return False
        with self._lock:
            if self._past is not None and self._past >= epoch - 2:
                return False
            return any(e.after < due for e in self.events[self._struck :])

    def _struck_one(self, past: int | None) -> None:
        """The current event's kills are made (or it was missed); ``past``: the epoch
        whose successor gives its latency (None: not waited for)."""
        with self._lock:
            self._struck += 1
            self._past = past

    def run(self) -> None:
        import ray

        try:
            for event in self.events:
                if self.stop.is_set():
                    return
                record = KillRecord(event)
                self.records.append(record)
                if not self.recorder.wait_past(event.after - 1, self.stop, self.timeout):
                    record.missed = "not triggered" if not self.stop.is_set() else "run ended"
                    return
                if self.observe is not None:
                    record.observed = self.observe()
                self._sleep(event.lead)
                self._strike(ray, event, record)
                self._struck_one(None if record.missed else record.relaunch_high)
                # Outputs the old workers made before they died may still arrive after the
                # kill; the first epoch past what had arrived at the (last) relaunch is
                # the first the new workers made.
                if record.missed is None and not self.recorder.wait_past(
                    record.relaunch_high, self.stop, self.timeout
                ):
                    record.missed = "no new output" if not self.stop.is_set() else "run ended"
                with self._lock:
                    self._past = None
                if record.missed is None:
                    first_new = self._next_after(record.relaunch_high)
                    record.latency = self.recorder.arrived[first_new] - record.at
        except BaseException as e:  # reported by the driver thread
            self.error = e
        finally:
            self.done.set()

    def _sleep(self, seconds: float) -> None:
        """A seeded delay that places a kill (the schedule, not a wait for anything)."""
        self.stop.wait(seconds)

    def _next_after(self, epoch: int) -> int:
        with self.recorder.cond:
            return min(e for e in self.recorder.out if e > epoch)

    def _strike(self, ray: Any, event: KillEvent, record: KillRecord) -> None:
        session = self.session
        actors = session.actors
        with self.recorder.cond:
            record.high = self.recorder.high
        record.committed = session.committed[-1] if session.committed else -1
        record.at = time.monotonic()
        if event.kind == "sigkill":  # the OS kills the process; Ray only sees it die
            self._kill(ray, actors, event.first, record, pid=session.pids[event.first])
        else:
            self._kill(ray, actors, event.first, record)
        if event.kind == "pair":
            self._kill(ray, actors, event.second, record)
        elif event.kind == "double":
            self._sleep(event.gap)
            self._kill(ray, actors, event.second, record)
        replaced = self._relaunched(actors)
        if replaced is None:
            record.missed = "no relaunch seen"
            return
        record.restored = session.restored_epoch
        if event.kind == "recovery":
            self._sleep(event.gap)
            if self._kill(ray, replaced, event.second, record) and (
                self._relaunched(replaced) is None
            ):
                record.missed = "no second relaunch seen"
                return
        with self.recorder.cond:
            record.relaunch_high = self.recorder.high

    def _kill(
        self, ray: Any, actors: list[Any], worker: int, record: KillRecord, pid: int = 0
    ) -> bool:
        """Kill ``actors[worker]`` (with ``pid``: ``SIGKILL`` to that process); False if
        the session had replaced ``actors`` already and the actor is not among its workers
        now (it was dead, or is no longer used: counted in ``record.stale``, and no
        relaunch follows it). An actor that outlived a failure and went on in the
        relaunched run is not stale."""
        target = actors[worker]
        current = self.session.actors
        stale = current is not actors and all(a._actor_id != target._actor_id for a in current)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                stale = True  # it had died already
        else:
            ray.kill(target, no_restart=True)
        record.kills += 1
        record.stale += stale
        return not stale

    def _relaunched(self, old: list[Any]) -> list[Any] | None:
        """Watch ``session.actors`` until the session has replaced ``old``: the new list."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and not self.stop.is_set():
            current: list[Any] = self.session.actors
            if current is not old:
                return current  # the same list: a later relaunch replaces it again
            self.stop.wait(0.001)
        return None


# -- runs ----------------------------------------------------------------------------------
@dataclass
class Outcome:
    """A run's outputs, and for chaos runs what the killer did and what the session did."""

    out: dict[int, list[Any]]
    duplicates: list[int]
    committed: list[int] = field(default_factory=list)
    """The latest commits (all of them in a run of fewer than ``HISTORY``)."""
    commits: int = 0
    """How many checkpoints were committed."""
    subsumed: list[int] = field(default_factory=list)
    """Checkpoints complete but committed as part of a later one (the driver found both
    complete at once)."""
    sink: list[tuple[int, Any]] | None = None
    restarts: int = 0
    records: list[KillRecord] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    """With ``run(..., catch=True)``: the exception that ended the run early."""
    longest_without_commit: float | None = None
    """The longest time the run went on without a new checkpoint commit, counted from its
    first output to its last, outside the recoveries (kill to next new output)."""
    longest_stretch: float | None = None
    """The longest time the run went on between recoveries (what bounds the above)."""
    mean_without_commit: float | None = None
    """The mean gap between commits over the same stretches."""
    commits_after_recoveries: int | None = None
    """Commits made after the last recovery's first new output (an order of events, not a
    duration): how often a run with ``checkpoint_interval`` committed once no kill
    interrupted it any more."""

    @property
    def kills(self) -> int:
        return sum(r.kills for r in self.records)


def build(
    case: Case, data: list[list[Any]], recorder: Recorder, sink_dir: Path | None
) -> tuple[Dataflow, Any]:
    """The dataflow of ``case`` over ``data``; returns it and its input handle (or None)."""
    flow = Dataflow(f"chaos-{case.name}")
    handle = None
    if case.feed == "driver":
        handle = flow.new_input()
        stream = handle.stream
    elif case.feed == "collection":
        items = [(e, x) for e, batch in enumerate(data) for x in batch]
        stream = flow.source(from_collection(items, epoch_of, partitions=4)).select(value_of)
    else:
        stream = flow.source(EpochSource(data, parts=3))
    result = case.body(stream)
    result.subscribe(recorder)
    if case.sink:
        assert sink_dir is not None
        result.sink(JsonLinesSink(sink_dir))
    return flow, handle


def drive(
    case: Case,
    handle: Any,
    data: list[list[Any]],
    session: Any,
    recorder: Recorder,
    holds: Callable[[int, float], bool],
) -> None:
    """Feed ``data``: ``case.burst`` epochs at a time without polling, then poll until at
    most ``case.lag`` epochs are outstanding. Before each epoch, poll while ``holds(epoch,
    due)``: the kills due before ``start - case.lag - 2`` (``start``: the burst's first
    epoch; the margin :func:`plan_kills` leaves before the last burst), or, in the last
    burst, every kill, are made first. Checked per epoch, not per burst: a kill whose
    recovery needs one more epoch gets just that one before the next kill is made."""
    n = len(data)
    for start in range(0, n, case.burst):
        stop = min(n, start + case.burst)
        due = math.inf if stop == n else start - case.lag - 2
        for e in range(start, stop):
            while holds(e, due):
                session.poll(timeout=0.02)
            handle.advance_to(e)
            handle.send(data[e])
            _pause(session, case.pace)
        while recorder.high < stop - 1 - case.lag:
            session.poll(timeout=0.02)
        _pause(session, case.quiet)
    handle.close()


def _pause(session: Any, seconds: float) -> None:
    """Poll the session for ``seconds`` (a paced or quiet driver: part of the schedule)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        session.poll(timeout=min(left, 0.02))


def run(
    case: Case,
    data: list[list[Any]],
    backend: str,
    tmp: Path,
    events: Sequence[KillEvent] = (),
    max_restarts: int | None = None,
    catch: bool = False,
) -> Outcome:
    """Run ``case`` on ``data``; on Ray with checkpoints in ``tmp`` and the kill schedule
    ``events``; inline (the oracle) without either. With ``catch``, an exception that
    ends the Ray run is returned in ``Outcome.error``, with what happened until then (the
    soak counts it and goes on); otherwise it is raised."""
    recorder = Recorder()
    sink_dir = tmp / f"sink-{backend}" if case.sink else None
    flow, handle = build(case, data, recorder, sink_dir)
    start = time.monotonic()
    if backend == "inline":
        if handle is not None:
            for e, batch in enumerate(data):
                handle.advance_to(e)
                handle.send(batch)
            handle.close()
        flow.run(workers=case.workers, backend="inline")
        return Outcome(
            recorder.out,
            recorder.duplicates,
            sink=sink_records(sink_dir),
            seconds=time.monotonic() - start,
        )
    options = dict(case.options)
    options.setdefault("max_restarts", max_restarts or 3 * len(events) + 3)
    session = flow.activate(
        workers=case.workers, backend="ray", checkpoint=str(tmp / "ckpt"), **options
    )
    observe = (lambda: sink_records(sink_dir)) if case.sink else None
    killer = Killer(session, recorder, events, observe)
    error = None
    try:
        killer.start()
        if handle is not None:
            drive(case, handle, data, session, recorder, killer.holds)
        session.join()
    except Exception as e:
        if not catch:
            raise
        error = f"{type(e).__name__}: {e}"
    finally:
        killer.stop.set()
        killer.join()
        session.close()
    if killer.error is not None:
        if not catch:
            raise killer.error
        error = error or f"the killer failed: {killer.error!r}"
    return Outcome(
        recorder.out,
        recorder.duplicates,
        committed=list(session.committed),
        commits=session.committed.total,
        subsumed=list(session.subsumed),
        sink=sink_records(sink_dir),
        restarts=session.restarts,
        records=killer.records,
        seconds=time.monotonic() - start,
        error=error,
        **cadence(recorder, killer.records, session.commit_times),
    )


def cadence(
    recorder: Recorder, records: list[KillRecord], commit_times: Recent[float]
) -> dict[str, Any]:
    """The longest gap between checkpoint commits while the dataflow ran, and the longest
    stretch it ran: stretches go from the first output to the first kill, from each
    recovery (the next new output) to the next kill, and from the last recovery to the
    last output. ``commit_times`` holds the latest commits' (a long run's record drops the
    oldest, ``.total`` counts them all): the time before the first of them is left out."""
    if not recorder.arrived:
        return {}
    start, end = min(recorder.arrived.values()), max(recorder.arrived.values())
    stretches = []
    for r in records:
        if r.latency is None:
            break  # the run did not recover from this one: what follows is not a stretch
        stretches.append((start, r.at))
        start = r.at + r.latency
    stretches.append((start, end))
    if commit_times.total > len(commit_times):
        known = commit_times[0]
        stretches = [(max(a, known), b) for a, b in stretches if b > known]
    worst, gaps = 0.0, 0
    for a, b in stretches:
        points = [a, *(t for t in commit_times if a < t < b), b]
        worst = max(worst, *(y - x for x, y in itertools.pairwise(points)))
        gaps += len(points) - 1
    return {
        "longest_without_commit": worst,
        "longest_stretch": max(b - a for a, b in stretches),
        "mean_without_commit": sum(b - a for a, b in stretches) / gaps,
        "commits_after_recoveries": sum(1 for t in commit_times if t > stretches[-1][0]),
    }


def sink_records(sink_dir: Path | None) -> list[tuple[int, Any]] | None:
    """What readers of the sink see as committed, as ``(epoch, json text)`` sorted."""
    if sink_dir is None:
        return None
    return sorted((e, json.dumps(r)) for e, r in read_committed(sink_dir))


# -- judging -------------------------------------------------------------------------------
@dataclass
class Verdict:
    """How a chaos run's outputs compare with the oracle's, epoch by epoch."""

    wrong: list[int]
    lost: list[int]
    extra: list[int]
    duplicated: list[int]
    sink_wrong: list[int]
    """Epochs whose committed sink output differs from the oracle's at the end."""
    sink_torn: int
    """Reads of the sink's committed output during the run that were not exactly the
    oracle's output up to their last epoch (a partial, lost or duplicated epoch)."""

    @property
    def ok(self) -> bool:
        return not (
            self.wrong
            or self.lost
            or self.extra
            or self.duplicated
            or self.sink_wrong
            or self.sink_torn
        )


def judge(expected: Outcome, got: Outcome) -> Verdict:
    want, have = expected.out, got.out
    sink_wrong: list[int] = []
    sink_torn = 0
    if expected.sink is not None:
        assert got.sink is not None
        epochs = {e for e, _ in expected.sink} | {e for e, _ in got.sink}
        sink_wrong = sorted(
            e
            for e in epochs
            if [r for x, r in expected.sink if x == e] != [r for x, r in got.sink if x == e]
        )
        for r in got.records:
            seen = r.observed
            if seen:
                top = seen[-1][0]
                sink_torn += seen != [x for x in expected.sink if x[0] <= top]
    return Verdict(
        wrong=sorted(e for e in want.keys() & have.keys() if want[e] != have[e]),
        lost=sorted(want.keys() - have.keys()),
        extra=sorted(have.keys() - want.keys()),
        duplicated=sorted(got.duplicates),
        sink_wrong=sink_wrong,
        sink_torn=sink_torn,
    )


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def latency_summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median_s": None, "p90_s": None, "max_s": None}
    return {
        "median_s": statistics.median(values),
        "p90_s": percentile(values, 0.9),
        "max_s": max(values),
    }
