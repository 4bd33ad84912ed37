"""Running state across epochs: ``running_reduce`` and ``map_with_state``.

The references walk the epochs in order with a plain dict. Update functions are chosen
so that the multiset of an epoch's outputs does not depend on the order of a key's
records within the epoch, which the operators leave unspecified.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from operators.running import MapWithState
from tests.operators.test_properties import Feed, by_epoch, on, per_epoch, send, state_backends
from timely import Dataflow, GraphBuildError, UserFunctionError

workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)
pairs = st.tuples(st.integers(0, 3), st.integers(0, 4))
feeds = st.lists(st.tuples(st.integers(0, 3), st.lists(pairs, max_size=6)), min_size=1, max_size=6)


def firsts(k: int, r: tuple[int, int], seen: frozenset[int]) -> tuple[frozenset[int], list[Any]]:
    """Sends each value the first time its key sees it (since the state was last reset)."""
    v = r[1]
    return (seen, []) if v in seen else (seen | {v}, [(k, v)])


def counter(k: int, r: tuple[int, int], n: int) -> tuple[int, list[Any]]:
    """Sends the key's running count at each record."""
    return n + 1, [(k, n + 1)]


def reference(
    data: dict[int, list[tuple[int, int]]], timeout: int | None, update: Any, initial: Any
) -> dict[int, Counter[Any]]:
    state: dict[int, Any] = {}
    last: dict[int, int] = {}
    out: dict[int, Counter[Any]] = {}
    for e in sorted(data):
        got: Counter[Any] = Counter()
        for k in list(state):
            if timeout is not None and e - last[k] > timeout:
                del state[k]
        for r in data[e]:
            k = r[0]
            if k not in state:
                state[k] = initial()
            state[k], outs = update(k, r, state[k])
            got.update(outs)
        for r in data[e]:
            last[r[0]] = e
        if got:
            out[e] = got
    return out


@given(
    feed=feeds,
    w=workers,
    seed=seeds,
    timeout=st.one_of(st.none(), st.integers(0, 3)),
    state=state_backends,
)
def test_running_operators_match_an_in_order_reference(
    feed: Feed, w: int, seed: int, timeout: int | None, state: str
) -> None:
    flow = Dataflow("running")
    inp = flow.new_input()
    s = inp.stream
    s.running_reduce(lambda r: r[0], lambda a, b: a + b, value=lambda r: r[1]).collect("sum")
    s.select(lambda r: r[1]).running_reduce(lambda v: v % 2, max).collect("max")
    s.map_with_state(lambda r: r[0], frozenset, firsts, timeout=timeout).collect("firsts")
    s.map_with_state(lambda r: r[0], int, counter, timeout=timeout).collect("counter")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    data = by_epoch(feed)

    sums: dict[int, int] = {}
    maxes: dict[int, int] = {}
    want_sum: dict[int, Counter[Any]] = {}
    want_max: dict[int, Counter[Any]] = {}
    for e in sorted(data):
        for k, v in data[e]:
            sums[k] = sums.get(k, 0) + v
            maxes[v % 2] = max(maxes.get(v % 2, v), v)
        if data[e]:
            want_sum[e] = Counter((k, sums[k]) for k in {k for k, _ in data[e]})
            want_max[e] = Counter((m, maxes[m]) for m in {v % 2 for _, v in data[e]})
    assert per_epoch(out["sum"]) == want_sum
    assert per_epoch(out["max"]) == want_max
    assert per_epoch(out["firsts"]) == reference(data, timeout, firsts, frozenset)
    assert per_epoch(out["counter"]) == reference(data, timeout, counter, int)


def test_map_with_state_keeps_state_in_keyed_state_and_expires_in_order() -> None:
    """The running state is one KeyedState table; a snapshot restores it, expiry and all."""
    v = MapWithState(lambda r: r[0], int, counter, timeout=1)
    sent: list[tuple[Any, ...]] = []
    v.notify_at = lambda t: None  # type: ignore[method-assign]
    v.send_by = lambda o, rs, t: sent.extend((t, r) for r in rs)  # type: ignore[method-assign]
    v.on_recv(0, [(1, 0), (2, 0)], (0,))
    v.on_notify((0,))
    v.on_recv(0, [(1, 0)], (1,))
    v.on_notify((1,))
    snap = v.snapshot()
    back = MapWithState(lambda r: r[0], int, counter, timeout=1)
    back.restore(snap)
    back.notify_at = v.notify_at  # type: ignore[method-assign]
    back.send_by = v.send_by  # type: ignore[method-assign]
    back.on_recv(0, [(1, 0), (2, 0)], (3,))  # key 1 was last seen at 1, key 2 at 0
    back.on_notify((3,))
    assert sent == [((0,), (1, 1)), ((0,), (2, 1)), ((1,), (1, 2)), ((3,), (1, 1)), ((3,), (2, 1))]
    back.on_recv(0, [(2, 0)], (4,))
    back.on_notify((4,))
    assert sent[-1] == ((4,), (2, 2))
    # The table keeps [state, last epoch] in order of last use (expiry pops its front).
    assert [(k, v) for _, k, v in back.states()["state"].items()] == [(1, [1, 3]), (2, [2, 4])]


def test_running_arguments_are_checked_when_building() -> None:
    s = Dataflow("bad").new_input().stream
    with pytest.raises(GraphBuildError, match="initial must be a zero-argument function"):
        s.map_with_state(lambda r: r, 0, counter)
    with pytest.raises(GraphBuildError, match="timeout must be an int >= 0"):
        s.map_with_state(lambda r: r, int, counter, timeout=-1)
    with pytest.raises(GraphBuildError, match="leave"):
        s.iterate(lambda t: t.running_reduce(lambda r: r, max))


def test_failing_update_names_the_step_time_and_record() -> None:
    from timely import UserFunctionError

    def bad(k: int, r: tuple[int, int], n: int) -> tuple[int, list[Any]]:
        return n // r[1], []

    flow = Dataflow("fails")
    inp = flow.new_input()
    inp.stream.map_with_state(lambda r: r[0], int, bad, name="divide").collect("out")
    inp.advance_to(2)
    inp.send([(1, 0)])
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=2, backend="inline")
    assert (info.value.step, info.value.time, info.value.record_repr) == ("divide", (2,), "(1, 0)")
    assert "ZeroDivisionError" in str(info.value)


def session_reference(
    data: dict[int, list[tuple[int, int]]], timeout: int, start: dict[int, int]
) -> dict[int, Counter[Any]]:
    """Per key, runs of epochs no more than ``timeout`` apart; each run's record count
    (from ``start[key]``, else 0) at one epoch past its last + ``timeout``."""
    out: dict[int, Counter[Any]] = {}
    epochs_of: dict[int, list[int]] = {}
    for e in sorted(data):
        for r in data[e]:
            epochs_of.setdefault(r[0], []).append(e)
    for k, es in epochs_of.items():
        n, last = start.get(k, 0), None
        for e in es:
            if last is not None and e - last > timeout:
                out.setdefault(last + timeout + 1, Counter())[(k, n)] += 1
                n = start.get(k, 0)
            n += 1
            last = e
        assert last is not None
        out.setdefault(last + timeout + 1, Counter())[(k, n)] += 1
    return out


@given(feed=feeds, w=workers, seed=seeds, timeout=st.integers(0, 3), state=state_backends)
def test_each_session_ends_once_at_its_epoch_with_its_summary(
    feed: Feed, w: int, seed: int, timeout: int, state: str
) -> None:
    """``on_timeout``: a key's session ends ``timeout`` + 1 epochs after its last record
    (whether or not anything happens then, and after the input ends), and its summary is
    sent there exactly once; ``initial_state`` starts a key's sessions."""
    flow = Dataflow("sessions")
    inp = flow.new_input()
    start = {0: 100, 2: 7}
    inp.stream.map_with_state(
        lambda r: r[0],
        int,
        lambda k, r, n: (n + 1, []),
        timeout=timeout,
        on_timeout=lambda k, n: [(k, n)],
        initial_state=start,
    ).collect("ends")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    assert per_epoch(out["ends"]) == session_reference(by_epoch(feed), timeout, start)


@given(feed=feeds, w=workers, seed=seeds, state=state_backends)
def test_every_key_sends_every_running_value_at_every_epoch_with_records(
    feed: Feed, w: int, seed: int, state: str
) -> None:
    """``every_key=True`` (``updateStateByKey``): at each epoch with records anywhere,
    every key's running value, on every worker (those without a key of the epoch too)."""
    flow = Dataflow("every")
    inp = flow.new_input()
    start = {1: 50}
    inp.stream.running_reduce(
        lambda r: r[0],
        lambda a, b: a + b,
        value=lambda r: r[1],
        every_key=True,
        initial_state=start,
    ).collect("all")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    want: dict[int, Counter[Any]] = {}
    sums: dict[int, int] = {}
    for e, records in sorted(by_epoch(feed).items()):
        if not records:
            continue
        for k, v in records:
            sums[k] = sums.get(k, start.get(k, 0)) + v
        want[e] = Counter(sums.items())
    assert per_epoch(out["all"]) == want


def test_new_options_are_checked_when_building() -> None:
    flow = Dataflow("bad")
    s = flow.new_input().stream
    with pytest.raises(GraphBuildError, match="on_timeout is called when a key times out"):
        s.map_with_state(lambda r: r, int, counter, on_timeout=lambda k, n: [])
    with pytest.raises(GraphBuildError, match="on_timeout must be a function"):
        s.map_with_state(lambda r: r, int, counter, timeout=1, on_timeout=3)
    with pytest.raises(GraphBuildError, match="initial_state must be a dict"):
        s.map_with_state(lambda r: r, int, counter, initial_state=5)
    with pytest.raises(GraphBuildError, match="every_key must be True or False"):
        s.running_reduce(lambda r: r, max, every_key="yes")


def test_a_failing_on_timeout_names_the_step_time_and_key() -> None:
    flow = Dataflow("fails")
    inp = flow.new_input()
    inp.stream.map_with_state(
        lambda r: r, int, counter, timeout=0, on_timeout=lambda k, n: [1 / 0]
    ).collect("o")
    inp.send([3])
    with pytest.raises(UserFunctionError, match=r"time \(1,\), record \(3, 1\)"):
        flow.run(workers=1, backend="inline")


def test_mutation_sessions_that_end_only_when_records_come_are_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the notification at each session's end epoch, a session ends only at the
    next epoch that has records (or never, after the input's last one): caught."""
    monkeypatch.setattr(MapWithState, "_due_at", lambda self, epoch: None)

    def wrong(feed: Feed) -> bool:
        flow = Dataflow("lazy")
        inp = flow.new_input()
        inp.stream.map_with_state(
            lambda r: r[0],
            int,
            lambda k, r, n: (n + 1, []),
            timeout=1,
            on_timeout=lambda k, n: [(k, n)],
        ).collect("ends")
        send(inp, feed)
        out = flow.run(workers=2, backend="inline", seed=1)
        return per_epoch(out["ends"]) != session_reference(by_epoch(feed), 1, {})

    find(feeds, wrong, settings=settings(max_examples=500, database=None, derandomize=True))
