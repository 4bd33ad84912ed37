"""A representative subset of the operators on Ray (2 workers), against the same references."""

from __future__ import annotations

from collections import Counter

import pytest

import operators  # noqa: F401 - registers the Stream methods
from timely import Dataflow

pytestmark = pytest.mark.usefixtures("ray_local")

LEFT = [(0, [(1, 10), (2, 20), (1, 11)]), (1, [(3, 30), (1, 12)]), (3, [(2, 21)])]
RIGHT = [(0, [(1, "a"), (3, "c")]), (1, [(1, "b"), (1, "bb")]), (3, [(2, "x"), (2, "y")])]


def test_count_by_join_and_min_by_on_ray() -> None:
    flow = Dataflow("ray-operators")
    a = flow.new_input("left")
    b = flow.new_input("right")
    a.stream.count_by(lambda r: r[0]).collect("count")
    a.stream.join(b.stream, lambda x: x[0], lambda y: y[0], lambda x, y: (x[1], y[1])).collect(
        "join"
    )
    a.stream.select(lambda x: x[1]).where(lambda v: v % 2 == 0).collect("even")
    a.stream.min_by(lambda r: r[0], lambda r: r[1]).collect("min")
    for handle, feed in ((a, LEFT), (b, RIGHT)):
        for epoch, records in feed:
            handle.advance_to(epoch)
            handle.send(records)
    out = flow.run(workers=2, backend="ray")

    want_count = Counter()
    want_join = Counter()
    want_min = Counter()
    want_even = Counter()
    right = dict(RIGHT)
    for epoch, records in LEFT:
        want_count.update((epoch, (k, n)) for k, n in Counter(k for k, _ in records).items())
        want_join.update(
            (epoch, (v, w)) for k, v in records for k2, w in right.get(epoch, []) if k == k2
        )
        want_even.update((epoch, v) for _, v in records if v % 2 == 0)
        mins: dict[int, tuple[int, int]] = {}
        for r in records:
            if r[0] not in mins or r[1] < mins[r[0]][1]:
                mins[r[0]] = r
        want_min.update((epoch, r) for r in mins.values())
    assert Counter(out["count"]) == want_count
    assert Counter(out["join"]) == want_join
    assert Counter(out["even"]) == want_even
    assert Counter(out["min"]) == want_min


def test_join_streaming_on_ray() -> None:
    """Matches across epochs, with and without a retention bound, on two Ray workers."""
    flow = Dataflow("ray-join-streaming")
    a = flow.new_input("left")
    b = flow.new_input("right")
    key = (lambda x: x[0], lambda y: y[0])
    a.stream.join_streaming(b.stream, *key, lambda x, y: (x[1], y[1])).collect("all")
    a.stream.join_streaming(b.stream, *key, lambda x, y: (x[1], y[1]), within=1).collect("near")
    for handle, feed in ((a, LEFT), (b, RIGHT)):
        for epoch, records in feed:
            handle.advance_to(epoch)
            handle.send(records)
    out = flow.run(workers=2, backend="ray")

    want_all: Counter[tuple[int, tuple[int, str]]] = Counter()
    want_near: Counter[tuple[int, tuple[int, str]]] = Counter()
    for el, lefts in LEFT:
        for er, rights in RIGHT:
            for k, v in lefts:
                for k2, w in rights:
                    if k == k2:
                        want_all[(max(el, er), (v, w))] += 1
                        if abs(el - er) <= 1:
                            want_near[(max(el, er), (v, w))] += 1
    assert want_near != want_all  # the bound drops some pairs here
    assert Counter(out["all"]) == want_all
    assert Counter(out["near"]) == want_near


def test_arrow_batches_cross_ray_workers() -> None:
    """Tables made from dict records travel between actors as Arrow batch records."""
    import pyarrow.compute as pc

    flow = Dataflow("ray-arrow")
    inp = flow.new_input()
    tables = inp.stream.select_batch(
        lambda t: t.append_column("y", pc.multiply(t["x"], 10)), form="arrow"
    )
    tables.exchange(lambda b: b.num_rows % 2).where_batch(
        lambda t: pc.greater(t["y"], 100), form="arrow"
    ).select_many(lambda b: [(r["x"], r["y"]) for r in b.to_pylist()]).collect("rows")
    tables.select(lambda b: type(b).__name__).collect("kinds")
    for epoch in range(3):
        inp.advance_to(epoch)
        inp.send([{"x": epoch * 10 + i} for i in range(12)])
    out = flow.run(workers=2, backend="ray")
    want = Counter(
        (e, (x, 10 * x)) for e in range(3) for x in range(e * 10, e * 10 + 12) if 10 * x > 100
    )
    assert Counter(out["rows"]) == want
    assert {k for _, k in out["kinds"]} == {"RecordBatch"}
