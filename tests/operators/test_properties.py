"""Property tests: each operator equals a plain-Python reference, epoch by epoch.

Random records (small ints and pairs of them) split at random into epochs, run on the
inline backend with 1-4 workers and a random delivery-order seed. One dataflow per
example carries several operators side by side, so one run checks them all.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from timely import Dataflow

Rec = tuple[int, int]
Feed = list[tuple[int, list[Any]]]

pairs = st.tuples(st.integers(0, 4), st.integers(0, 9))
ints = st.integers(0, 20)
workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)
state_backends = st.sampled_from(["memory", "disk"])
"""Where the tables kept across epochs live: half the runs put them on disk."""


def counter_loop(flow: Dataflow, starts: Any, limit: int) -> Any:
    """A loop in which each start goes round as a counter, x -> x + 1 while below
    ``limit``; returns the loop's head stream (every round's counters)."""
    loop = flow.loop("rounds")
    handle, again = loop.feedback()
    head = starts.enter(loop).concat(again)
    handle.connect(head.select(lambda x: x + 1).where(lambda x: x < limit))
    return head


def on(backend: str) -> dict[str, Any]:
    """A run's options for a state backend; on disk, every activation's values are
    written back (``state_cache=1``) so that every read after it comes from disk."""
    return {} if backend == "memory" else {"state_backend": "disk", "state_cache": 1}


def feeds(records: st.SearchStrategy[Any]) -> st.SearchStrategy[Feed]:
    """Epochs as ``(gap to the previous epoch, records)``; gaps of 0 merge into one epoch."""
    return st.lists(
        st.tuples(st.integers(0, 2), st.lists(records, max_size=8)), min_size=1, max_size=4
    )


def by_epoch(feed: Feed) -> dict[int, list[Any]]:
    """The records of each epoch, as the input sees them."""
    out: dict[int, list[Any]] = defaultdict(list)
    epoch = 0
    for gap, records in feed:
        epoch += gap
        out[epoch].extend(records)
    return dict(out)


def send(handle: Any, feed: Feed) -> None:
    epoch = 0
    for gap, records in feed:
        epoch += gap
        handle.advance_to(epoch)
        handle.send(records)


def per_epoch(results: list[tuple[int, Any]]) -> dict[int, Counter[Any]]:
    out: dict[int, Counter[Any]] = defaultdict(Counter)
    for epoch, record in results:
        out[epoch][record] += 1
    return dict(out)


def expect(
    data: dict[int, list[Any]], f: Callable[[list[Any]], list[Any]]
) -> dict[int, Counter[Any]]:
    """The reference: ``f`` applied to each epoch's records; empty outputs leave no epoch."""
    out = {e: Counter(f(rs)) for e, rs in data.items()}
    return {e: c for e, c in out.items() if c}


def groups(records: list[Rec]) -> dict[int, list[Rec]]:
    g: dict[int, list[Rec]] = defaultdict(list)
    for r in records:
        g[r[0]].append(r)
    return g


@given(feed=feeds(ints), w=workers, seed=seeds)
def test_stateless_operators_match_reference(feed: Feed, w: int, seed: int) -> None:
    flow = Dataflow("stateless")
    inp = flow.new_input()
    s = inp.stream
    s.select(lambda x: x * 3 + 1).collect("select")
    s.where(lambda x: x % 3 != 0).collect("where")
    s.select_many(lambda x: range(x % 4)).collect("select_many")
    s.distinct().collect("distinct")
    s.select(lambda x: (x % 5, x)).distinct(lambda r: r[0]).collect("distinct_key")
    s.select(lambda x: x + 1).where(lambda x: x % 2 == 0).select_many(lambda x: [x, x]).collect(
        "chain"
    )
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)
    data = by_epoch(feed)

    assert per_epoch(out["select"]) == expect(data, lambda rs: [x * 3 + 1 for x in rs])
    assert per_epoch(out["where"]) == expect(data, lambda rs: [x for x in rs if x % 3 != 0])
    assert per_epoch(out["select_many"]) == expect(
        data, lambda rs: [y for x in rs for y in range(x % 4)]
    )
    assert per_epoch(out["distinct"]) == expect(data, lambda rs: sorted(set(rs)))
    assert per_epoch(out["chain"]) == expect(
        data, lambda rs: [y for x in rs if (x + 1) % 2 == 0 for y in (x + 1, x + 1)]
    )
    # distinct by key keeps one record per key and time (which one arrives first is free).
    got: dict[int, list[Rec]] = defaultdict(list)
    for e, r in out["distinct_key"]:
        got[e].append(r)
    for e, rs in data.items():
        keys = {x % 5 for x in rs}
        assert sorted(r[0] for r in got.get(e, [])) == sorted(keys)
        assert all(r[1] in rs and r[1] % 5 == r[0] for r in got.get(e, []))
    assert set(got) <= set(data)


@given(feed=feeds(pairs), w=workers, seed=seeds, state=state_backends)
def test_keyed_operators_match_reference(feed: Feed, w: int, seed: int, state: str) -> None:
    """On both state backends (per-time tables stay in memory on either: nothing of a
    run on disk may differ)."""
    flow = Dataflow("keyed")
    inp = flow.new_input()
    s = inp.stream
    s.group_by(lambda r: r[0], lambda k, vs: [(k, tuple(sorted(v for _, v in vs)))]).collect(
        "group_by"
    )
    s.count_by(lambda r: r[0]).collect("count_by")
    s.count_by(lambda r: r).collect("count_by_record")
    s.aggregate(lambda r: r[0], int, lambda a, r: a + r[1], lambda a, b: a + b).collect("sum")
    s.aggregate(
        lambda r: r[1] % 3,
        list,
        lambda a, r: [*a, r[0]],
        lambda a, b: a + b,
    ).select(lambda kv: (kv[0], tuple(sorted(kv[1])))).collect("lists")
    s.min_by(lambda r: r[0], lambda r: r[1]).collect("min_by")
    s.max_by(lambda r: r[0], lambda r: r[1]).collect("max_by")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    data = by_epoch(feed)

    assert per_epoch(out["group_by"]) == expect(
        data, lambda rs: [(k, tuple(sorted(v for _, v in g))) for k, g in groups(rs).items()]
    )
    assert per_epoch(out["count_by"]) == expect(
        data, lambda rs: list(Counter(k for k, _ in rs).items())
    )
    assert per_epoch(out["count_by_record"]) == expect(data, lambda rs: list(Counter(rs).items()))
    assert per_epoch(out["sum"]) == expect(
        data, lambda rs: [(k, sum(v for _, v in g)) for k, g in groups(rs).items()]
    )

    def lists(rs: list[Rec]) -> list[tuple[int, tuple[int, ...]]]:
        g: dict[int, list[int]] = defaultdict(list)
        for k, v in rs:
            g[v % 3].append(k)
        return [(m, tuple(sorted(ks))) for m, ks in g.items()]

    assert per_epoch(out["lists"]) == expect(data, lists)
    # Records are (key, value) pairs, so the extreme record of a key is unique.
    assert per_epoch(out["min_by"]) == expect(
        data, lambda rs: [min(g, key=lambda r: r[1]) for g in groups(rs).values()]
    )
    assert per_epoch(out["max_by"]) == expect(
        data, lambda rs: [max(g, key=lambda r: r[1]) for g in groups(rs).values()]
    )


@given(feed=feeds(st.tuples(st.integers(0, 4), st.integers(0, 9), st.integers(0, 3))), w=workers)
def test_min_by_on_ties_picks_a_least_record(feed: Feed, w: int) -> None:
    flow = Dataflow("ties")
    inp = flow.new_input()
    inp.stream.min_by(lambda r: r[0], lambda r: r[2]).collect("min")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline")
    data = by_epoch(feed)
    got: dict[int, list[Any]] = defaultdict(list)
    for e, r in out["min"]:
        got[e].append(r)
    for e, rs in data.items():
        mins = {k: min(r[2] for r in rs if r[0] == k) for k in {r[0] for r in rs}}
        assert sorted(r[0] for r in got.get(e, [])) == sorted(mins)
        assert all(r in rs and r[2] == mins[r[0]] for r in got.get(e, []))


@given(
    left=feeds(pairs),
    right=feeds(st.tuples(st.integers(0, 4), st.integers(10, 19))),
    w=workers,
    seed=seeds,
    state=state_backends,
)
def test_join_matches_reference(left: Feed, right: Feed, w: int, seed: int, state: str) -> None:
    flow = Dataflow("join")
    a = flow.new_input("left")
    b = flow.new_input("right")
    a.stream.join(
        b.stream, lambda x: x[0], lambda r: r[0], lambda x, y: (x[0], x[1], y[1])
    ).collect("join")
    a.stream.join(b.stream, lambda x: x[1] % 2, lambda y: y[1] % 2).collect("pairs")
    send(a, left)
    send(b, right)
    out = flow.run(workers=w, backend="inline", seed=seed, **on(state))
    ls, rs = by_epoch(left), by_epoch(right)
    epochs = set(ls) | set(rs)
    data = {e: (ls.get(e, []), rs.get(e, [])) for e in epochs}

    def ref(f: Callable[[Any, Any], list[Any]]) -> dict[int, Counter[Any]]:
        out = {e: Counter(f(lefts, rights)) for e, (lefts, rights) in data.items()}
        return {e: c for e, c in out.items() if c}

    assert per_epoch(out["join"]) == ref(
        lambda lefts, rights: [(x[0], x[1], y[1]) for x in lefts for y in rights if x[0] == y[0]]
    )
    assert per_epoch(out["pairs"]) == ref(
        lambda lefts, rights: [(x, y) for x in lefts for y in rights if x[1] % 2 == y[1] % 2]
    )


@given(feed=feeds(st.integers(0, 64)), w=workers, seed=seeds)
def test_operators_inside_a_loop_work_per_iteration(feed: Feed, w: int, seed: int) -> None:
    """distinct inside iterate runs per (epoch, round): its times carry a loop counter."""
    flow = Dataflow("loop")
    inp = flow.new_input()
    body = lambda s: s.distinct().select(lambda x: x // 2).where(lambda x: x > 0)  # noqa: E731
    inp.stream.iterate(body).count_by(lambda x: x).collect("out")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)

    def ref(rs: list[int]) -> list[tuple[int, int]]:
        seen: list[int] = []
        cur = rs
        while cur:
            cur = [x // 2 for x in set(cur) if x // 2 > 0]
            seen += cur
        return list(Counter(seen).items())

    assert per_epoch(out["out"]) == expect(by_epoch(feed), ref)


def test_operators_are_found_through_the_entry_point() -> None:
    """timely loads the library on first use of an unknown Stream attribute, no import."""
    import subprocess
    import sys

    code = (
        "from timely import Dataflow\n"
        "f = Dataflow('ep'); i = f.new_input()\n"
        "i.stream.select(lambda x: x + 1).count_by(lambda x: x % 2).collect('o')\n"
        "i.send([1, 2, 3])\n"
        "print(sorted(f.run(workers=2, backend='inline').records('o')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[(0, 2), (1, 1)]"
