"""``join_streaming``: every matching pair once, across epochs, against a nested loop.

The reference pairs every left record with every right record of any epoch (within
``within`` epochs, if given) and stamps the match with the later epoch. The operator
is run on the inline backend with 1-4 workers, random epoch splits and delivery
orders; then driven by hand to check loop times, snapshots and re-partitioning.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from operators import owner, repartition
from operators.join import StreamingJoin
from tests.operators.test_properties import (
    Feed,
    by_epoch,
    counter_loop,
    feeds,
    on,
    per_epoch,
    send,
    state_backends,
)
from timely import Dataflow, GraphBuildError
from timely.comm import serialization

workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)
lefts = feeds(st.tuples(st.integers(0, 4), st.integers(0, 9)))
rights = feeds(st.tuples(st.integers(0, 4), st.integers(10, 19)))
withins = st.one_of(st.none(), st.integers(0, 3))


def nested_loop(
    left: dict[int, list[Any]],
    right: dict[int, list[Any]],
    keys: tuple[Callable[[Any], Any], Callable[[Any], Any]],
    result: Callable[[Any, Any], Any],
    within: int | None,
) -> dict[int, Counter[Any]]:
    """Every pair of records with equal keys, at the later of their epochs."""
    out: dict[int, Counter[Any]] = defaultdict(Counter)
    for el, ls in left.items():
        for er, rs in right.items():
            if within is not None and abs(el - er) > within:
                continue
            for x in ls:
                for y in rs:
                    if keys[0](x) == keys[1](y):
                        out[max(el, er)][result(x, y)] += 1
    return {e: c for e, c in out.items() if c}


def _triple(x: Any, y: Any) -> Any:
    return (x[0], x[1], y[1])


@given(left=lefts, right=rights, w=workers, seed=seeds, within=withins, state=state_backends)
def test_join_streaming_matches_a_nested_loop(
    left: Feed, right: Feed, w: int, seed: int, within: int | None, state: str
) -> None:
    flow = Dataflow("join_streaming")
    a = flow.new_input("left")
    b = flow.new_input("right")
    a.stream.join_streaming(
        b.stream, lambda x: x[0], lambda y: y[0], _triple, within=within
    ).collect("by_key")
    a.stream.join_streaming(b.stream, lambda x: x[1] % 2, lambda y: y[1] % 2).collect("pairs")
    send(a, left)
    send(b, right)
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    ls, rs = by_epoch(left), by_epoch(right)
    first = (lambda x: x[0], lambda y: y[0])
    parity = (lambda x: x[1] % 2, lambda y: y[1] % 2)
    assert per_epoch(out["by_key"]) == nested_loop(ls, rs, first, _triple, within)
    assert per_epoch(out["pairs"]) == nested_loop(ls, rs, parity, lambda x, y: (x, y), None)


def test_join_streaming_joins_a_table_sent_once_with_later_epochs() -> None:
    flow = Dataflow("table")
    events = flow.new_input("events")
    table = flow.new_input("table")
    events.stream.join_streaming(table.stream, lambda e: e[0], lambda t: t[0]).collect("out")
    table.send([("ad1", "c1"), ("ad2", "c2")])  # epoch 0 only
    for e in range(1, 4):
        events.advance_to(e)
        events.send([("ad1", e), ("ad3", e)])
    out = flow.run(workers=2, backend="inline")
    assert sorted(out["out"]) == [(e, (("ad1", e), ("ad1", "c1"))) for e in range(1, 4)]


def test_within_bounds_the_state() -> None:
    """With ``within=1``, a worker holds the records of the last two epochs at most."""
    flow = Dataflow("bounded")
    a = flow.new_input("left")
    b = flow.new_input("right")
    a.stream.join_streaming(b.stream, lambda x: x % 3, lambda y: y % 3, within=1).collect("out")
    for e in range(8):
        a.advance_to(e)
        b.advance_to(e)
        a.send([e, e + 1])
        b.send([e + 2])
    a.close()
    b.close()
    with flow.activate(workers=2, backend="inline", seed=1) as session:
        result = session.join()
        joins = [
            v
            for w in session.worker_list  # type: ignore[attr-defined]
            for v in w.vertices
            if isinstance(v, StreamingJoin)
        ]
    want = nested_loop(
        {e: [e, e + 1] for e in range(8)},
        {e: [e + 2] for e in range(8)},
        (lambda x: x % 3, lambda y: y % 3),
        lambda x, y: (x, y),
        1,
    )
    assert per_epoch(result["out"]) == want
    assert len(joins) == 2
    held = {s for v in joins for _, _, entry in v.stored.items() for side in entry for s, _ in side}
    assert held and held <= {(6,), (7,)}, held
    assert all(t[0] >= 6 for v in joins for t in v.arrived.times())  # type: ignore[union-attr]


@settings(max_examples=30)
@given(
    starts=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    table=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 8)), max_size=4),
    w=workers,
    seed=seeds,
    state=state_backends,
)
def test_join_streaming_in_a_loop_matches_at_the_least_upper_bound(
    starts: list[int], table: list[tuple[int, int]], w: int, seed: int, state: str
) -> None:
    """Round ``i`` of epoch 0 and round 0 of epoch 1 are incomparable times; their
    records match once, at ``(1, i)``, and leave the loop at epoch 1."""
    flow = Dataflow("loop_join")
    a = flow.new_input("counters")
    b = flow.new_input("table")
    head = counter_loop(flow, a.stream, 8)
    joined = head.join_streaming(b.stream.enter(head.scope), lambda x: x, lambda t: t[1])
    joined.leave().collect("out")
    a.send(starts)  # epoch 0
    b.advance_to(1)
    b.send(table)  # epoch 1
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    reached = [x for s in starts for x in range(s, 8)]
    want = Counter((1, (x, t)) for x in reached for t in table if t[1] == x)
    assert Counter(out["out"]) == want


def _driven(v: StreamingJoin, sent: list[tuple[Any, Any]]) -> StreamingJoin:
    v.notify_at = lambda t: None  # type: ignore[method-assign]
    v.send_by = lambda o, rs, t: sent.extend((t, r) for r in rs)  # type: ignore[method-assign]
    return v


def test_incomparable_loop_times_match_once_whichever_is_notified_first() -> None:
    for order in ([(1, 0), (0, 2)], [(0, 2), (1, 0)]):
        sent: list[tuple[Any, Any]] = []
        v = _driven(StreamingJoin(lambda x: x, lambda y: y, lambda x, y: (x, y), None), sent)
        v.on_recv(0, [5], (1, 0))
        v.on_recv(1, [5], (0, 2))
        for t in order:
            v.on_notify(t)
        assert sent == [((1, 2), (5, 5))], order


steps = st.lists(
    st.tuples(st.integers(0, 1), st.lists(st.integers(0, 9), max_size=4)), min_size=1, max_size=8
)


def _mod4_join(within: int | None, sent: list[tuple[Any, Any]]) -> StreamingJoin:
    return _driven(StreamingJoin(_mod4, _mod4, lambda x, y: (x, y), within), sent)


def _mod4(x: int) -> int:
    return x % 4


@given(steps=steps, cut=st.integers(0, 8), old=st.integers(1, 3), new=st.integers(1, 3))
def test_snapshot_and_repartition_continue_the_same_join(
    steps: list[tuple[int, list[int]]], cut: int, old: int, new: int
) -> None:
    """Epoch ``e`` of ``steps`` is the e-th entry. Run ``old`` workers to ``cut``, snapshot
    each (through the wire format), re-partition onto ``new`` workers and go on: the
    matches equal the nested loop, as if nothing had happened."""
    for within in (None, 1):
        sent: list[tuple[Any, Any]] = []

        shards = [_mod4_join(within, sent) for _ in range(old)]
        for e, (side, records) in enumerate(steps):
            if e == cut:
                snaps = [serialization.decode(serialization.encode(v.snapshot())) for v in shards]
                by_table = {name: repartition([s[name] for s in snaps], new) for name in snaps[0]}
                shards = [_mod4_join(within, sent) for _ in range(new)]
                for i, v in enumerate(shards):
                    v.restore({name: parts[i] for name, parts in by_table.items()})
            n = len(shards)
            for i, v in enumerate(shards):
                mine = [r for r in records if owner(r % 4, n) == i]
                if mine:
                    v.on_recv(side, mine, (e,))
                v.on_notify((e,))
        left = {e: rs for e, (side, rs) in enumerate(steps) if side == 0}
        right = {e: rs for e, (side, rs) in enumerate(steps) if side == 1}
        want = nested_loop(
            left, right, (lambda x: x % 4, lambda y: y % 4), lambda x, y: (x, y), within
        )
        assert per_epoch([(t[0], r) for t, r in sent]) == want


def test_join_streaming_checks_its_arguments() -> None:
    flow = Dataflow("bad")
    s = flow.new_input().stream
    with pytest.raises(GraphBuildError, match="within must be an int >= 0"):
        s.join_streaming(s, lambda x: x, lambda y: y, within=-1)
    with pytest.raises(GraphBuildError, match="left_key must be a function"):
        s.join_streaming(s, 3, lambda y: y)
    loop = flow.loop()
    inner = s.enter(loop)
    with pytest.raises(GraphBuildError, match="within counts epochs"):
        inner.join_streaming(inner, lambda x: x, lambda y: y, within=2)
