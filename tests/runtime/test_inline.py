"""End-to-end property tests on the inline backend: random dataflows, epochs, orders."""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import assume, given
from hypothesis import strategies as st

from progress import less_equal, target
from tests.runtime.dataflows import MAX_VOLUME, Data, Log, Step, build, reference, steps
from timely import Dataflow
from timely.backends.inline import InlineSession

epochs = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.integers(0, 96), max_size=6)), min_size=1, max_size=4
)


def fed(feed: list[tuple[int, list[int]]]) -> Data:
    """The records of ``feed`` by time (an epoch gap, then the epoch's records)."""
    data: Data = {}
    epoch = 0
    for gap, records in feed:
        epoch += gap
        data.setdefault((epoch,), Counter()).update(records)
    return data


def _run(
    chain: list[Step], feed: list[tuple[int, list[int]]], workers: int, seed: int, accumulate: bool
):  # type: ignore[no-untyped-def]
    log = Log()
    flow = Dataflow("random")
    inp = flow.new_input()
    build(inp.stream, chain, log).collect("out")
    session = flow.activate(workers=workers, backend="inline", seed=seed, accumulate=accumulate)
    assert isinstance(session, InlineSession)
    epoch = 0
    for gap, records in feed:
        epoch += gap
        inp.advance_to(epoch)
        inp.send(records)
    inp.close()
    results = session.join()
    return results, log, session


@given(
    chain=steps(),
    feed=epochs,
    workers=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    accumulate=st.booleans(),
)
def test_random_dataflows_match_the_reference(
    chain: list[Step], feed: list[tuple[int, list[int]]], workers: int, seed: int, accumulate: bool
) -> None:
    # A chain that would move more records than a test should hold is left out
    # (MAX_VOLUME): one such drawn in CI's profile took its test process's memory.
    tally = [0]
    expected = reference(chain, fed(feed), workers, tally)
    assume(tally[0] <= MAX_VOLUME)
    results, log, session = _run(chain, feed, workers, seed, accumulate)

    # Output equals the plain-Python reference, epoch by epoch.
    want = {t[0]: c for t, c in expected.items()}
    got: dict[int, Counter[int]] = defaultdict(Counter)
    for epoch, record in results["out"]:
        got[epoch][record] += 1
    assert dict(got) == want

    # Collected epochs arrive in order.
    arrived = [e for e, _ in results["out"]]
    assert arrived == sorted(arrived)

    # Every delivered batch was at a time its input's frontier still permitted.
    assert log.violations == []

    # on_notify(t): once per requested time, in order, after every batch at times <= t.
    per_worker: dict[tuple[int, int], list[tuple[str, tuple[int, ...]]]] = defaultdict(list)
    for worker, vertex, kind, time in log.events:
        per_worker[(worker, vertex)].append((kind, time))
    for events in per_worker.values():
        notified = [t for k, t in events if k == "notify"]
        assert len(notified) == len(set(notified)), "a time was notified twice"
        for i, (kind, t) in enumerate(events):
            if kind != "notify":
                continue
            later = [u for k, u in events[i + 1 :] if k == "recv" and len(u) == len(t)]
            assert not any(less_equal(u, t) for u in later), f"batch at <= {t} after its notify"
        for i, t1 in enumerate(notified):
            for t2 in notified[i + 1 :]:
                if len(t1) == len(t2):
                    assert not (t2 != t1 and less_equal(t2, t1)), f"{t2} notified after {t1}"
        # Each recorder asks at every time it sees: every one of them was notified.
        assert set(notified) == {t for k, t in events if k == "recv"}

    # The run ends with every frontier empty on every worker.
    for worker in session.worker_list:
        assert worker.idle()
        for loc in worker.plan.graph.locations:
            if not loc.is_source:
                assert worker.tracker.frontier(loc) == ()


def test_iterate_counts_down_to_zero() -> None:
    """A loop without max_iters ends when the body stops emitting."""
    from timely import Vertex

    class Dec(Vertex):
        def on_recv(self, input, records, time):  # type: ignore[no-untyped-def]
            self.send_by(0, [x - 1 for x in records if x > 0], time)

    flow = Dataflow("countdown")
    inp = flow.new_input()
    inp.stream.iterate(lambda s: s.unary(Dec)).collect("out")
    inp.send([3, 1])
    out = flow.run(workers=2, backend="inline", seed=3)
    assert sorted(out.records("out")) == [0, 0, 1, 2]


def test_notify_exactly_once_per_time_across_workers() -> None:
    log = Log()
    flow = Dataflow("notify")
    inp = flow.new_input()
    build(inp.stream, [("exchange", 3), ("record",)], log).collect("out")
    for e in range(3):
        inp.advance_to(e)
        inp.send(list(range(10)))
    out = flow.run(workers=3, backend="inline", seed=11)
    assert len(out["out"]) == 30
    asked = {(w, t) for w, _, k, t in log.events if k == "recv"}
    told = [(w, t) for w, _, k, t in log.events if k == "notify"]
    assert sorted(told) == sorted(asked)


@given(st.integers(0, 50), st.integers(1, 3))
def test_a_notification_asked_for_in_on_notify_comes_in_time_order(seed: int, workers: int) -> None:
    """A vertex that, notified at ``e``, asks for ``e + 1`` while the frontier has passed
    later epochs it asked for already gets ``e + 1`` before them: notifications go in
    time order (``map_with_state``'s timeouts rely on it; the runtime once delivered the
    times it had listed first, so a session ended an epoch or more late)."""
    from timely import Vertex

    order: dict[int, list[int]] = defaultdict(list)

    class Chain(Vertex):
        def on_recv(self, input: int, records: list[object], time: tuple[int, ...]) -> None:
            for e in (0, 4, 8):  # asked for at once: all ready together once the input ends
                self.notify_at((time[0] + e,))

        def on_notify(self, time: tuple[int, ...]) -> None:
            order[id(self)].append(time[0])
            if time[0] % 4 == 0:
                self.notify_at((time[0] + 1,))

    flow = Dataflow("chain")
    inp = flow.new_input()
    inp.stream.unary(Chain).collect("out")
    inp.send(list(range(6)))  # at epoch 0 only; the input then ends
    flow.run(workers=workers, backend="inline", seed=seed)
    assert order, "no vertex was notified"
    for times in order.values():
        assert times == [0, 1, 4, 5, 8, 9], times


def test_frontier_is_empty_after_the_run() -> None:
    flow = Dataflow("empty")
    inp = flow.new_input()
    probe = inp.stream.exchange(lambda x: x).probe()
    session = flow.activate(workers=2, backend="inline")
    inp.send([1, 2, 3])
    assert probe.frontier() == [(0,)]
    assert not probe.done(0)
    inp.advance_to(2)
    assert probe.frontier() == [(2,)]
    assert probe.done(1)
    inp.close()
    session.join()
    assert all(w.frontier(probe.vertex) == () for w in session.worker_list)  # type: ignore[attr-defined]
    assert target(probe.vertex, 0) in session.plan.graph.locations
