"""Columnar operators: ``where_columns`` and ``count_columns`` over numpy and Arrow chunks.

The reference flattens the chunks back into Python rows and counts them with
``collections.Counter``, per epoch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from operators.columnar import SumCounts, _count_rows, _key_table, _sum_counts
from timely import Dataflow, UserFunctionError
from timely.comm import serialization

workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)
Chunks = list[tuple[int, list[list[int]]]]
"""Epochs as ``(gap to the previous epoch, chunks)``; a chunk is a list of ints."""

chunked = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.lists(st.lists(st.integers(-50, 50), min_size=0, max_size=12), max_size=4),
    ),
    min_size=1,
    max_size=4,
)


def rows_by_epoch(feed: Chunks) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    epoch = 0
    for gap, chunks in feed:
        epoch += gap
        for chunk in chunks:
            out[epoch].extend(chunk)
    return out


def send_chunks(handle: Any, feed: Chunks, make: Any) -> None:
    epoch = 0
    for gap, chunks in feed:
        epoch += gap
        handle.advance_to(epoch)
        handle.send([make(c) for c in chunks])


def pairs_by_epoch(results: list[tuple[int, Any]]) -> dict[int, Counter[Any]]:
    """``(key, n)`` outputs added up per epoch; a key sent twice in an epoch is an error."""
    out: dict[int, Counter[Any]] = defaultdict(Counter)
    for epoch, (key, n) in results:
        assert key not in out[epoch], f"key {key!r} counted on two workers at {epoch}"
        out[epoch][key] = n
    return dict(out)


def tables_by_epoch(results: list[tuple[int, Any]]) -> dict[int, Counter[Any]]:
    out: dict[int, Counter[Any]] = defaultdict(Counter)
    for epoch, table in results:
        assert isinstance(table, pa.Table) and table.column_names == ["key", "count"]
        for key, n in zip(table["key"].to_pylist(), table["count"].to_pylist()):
            assert key not in out[epoch]
            out[epoch][key] = n
    return dict(out)


def reference(data: dict[int, list[int]], key: Any) -> dict[int, Counter[Any]]:
    out = {e: Counter(key(x) for x in rows) for e, rows in data.items()}
    return {e: c for e, c in out.items() if c}


def _ints(c: list[int]) -> np.ndarray[Any, Any]:
    return np.asarray(c, dtype=np.int64)


@given(feed=chunked, w=workers, seed=seeds)
def test_count_columns_equals_counter_on_numpy_and_arrow_chunks(
    feed: Chunks, w: int, seed: int
) -> None:
    flow = Dataflow("columnar")
    inp = flow.new_input()
    s = inp.stream
    s.count_columns().collect("ints")
    s.count_columns(lambda a: pa.array([f"w{x % 7}" for x in a.tolist()])).collect("strings")
    s.count_columns(lambda a: (a % 3, pa.array(a > 0))).collect("compound")
    s.count_columns(lambda a: a * 10**15, columnar=True).collect("wide")  # beyond bincount
    s.where_columns(lambda a: a % 2 == 0).count_columns().collect("even")
    send_chunks(inp, feed, _ints)
    out = flow.run(workers=w, backend="inline", seed=seed)
    data = rows_by_epoch(feed)

    assert pairs_by_epoch(out["ints"]) == reference(data, lambda x: x)
    assert pairs_by_epoch(out["strings"]) == reference(data, lambda x: f"w{x % 7}")
    assert pairs_by_epoch(out["compound"]) == reference(data, lambda x: (x % 3, x > 0))
    assert tables_by_epoch(out["wide"]) == reference(data, lambda x: x * 10**15)
    assert pairs_by_epoch(out["even"]) == reference(
        {e: [x for x in rows if x % 2 == 0] for e, rows in data.items()}, lambda x: x
    )
    assert all(type(k) is int for _, (k, _) in out["ints"])


@given(feed=chunked, w=workers, seed=seeds)
def test_where_columns_keeps_the_selected_rows_of_arrow_tables(
    feed: Chunks, w: int, seed: int
) -> None:
    flow = Dataflow("where_columns")
    inp = flow.new_input()
    inp.stream.where_columns(lambda t: pc.greater(t["x"], 10)).select(
        lambda t: t["x"].to_pylist()
    ).collect("kept")
    send_chunks(inp, feed, lambda c: pa.table({"x": pa.array(c, pa.int64())}))
    out = flow.run(workers=w, backend="inline", seed=seed)
    got: dict[int, Counter[int]] = defaultdict(Counter)
    for epoch, xs in out["kept"]:
        assert xs, "an emptied chunk was sent on"
        got[epoch].update(xs)
    assert dict(got) == reference(
        {e: [x for x in rows if x > 10] for e, rows in rows_by_epoch(feed).items()}, lambda x: x
    )


@given(
    cols=st.integers(1, 3).flatmap(
        lambda k: st.lists(
            st.tuples(*[st.integers(-(2**40), 2**40) | st.integers(-3, 3)] * k), max_size=40
        )
    )
)
def test_packed_integer_counting_matches_a_plain_count(cols: list[tuple[int, ...]]) -> None:
    if not cols:
        return
    k = len(cols[0])
    columns = tuple(np.asarray([row[i] for row in cols], dtype=np.int64) for i in range(k))
    table = _count_rows(_key_table(columns if k > 1 else columns[0]))
    names = table.column_names
    assert names[-1] == "count"
    got = Counter()
    for row in table.to_pylist():
        key = tuple(row[n] for n in names[:-1])
        assert key not in got
        got[key] = row["count"]
    assert got == Counter(cols)


@given(
    parts=st.lists(
        st.dictionaries(st.sampled_from(["a", "b", "c", None, "ü"]), st.integers(1, 5)),
        min_size=1,
        max_size=4,
    )
)
def test_summing_partial_counts_matches_a_dict_sum(parts: list[dict[Any, int]]) -> None:
    tables = [
        pa.table(
            [pa.array(list(p), pa.string()), pa.array(list(p.values()), pa.int64())],
            names=["key", "count"],
        )
        for p in parts
    ]
    want: Counter[Any] = Counter()
    for p in parts:
        for k, n in p.items():
            want[k] += n
    summed = _sum_counts(tables)
    assert dict(zip(summed["key"].to_pylist(), summed["count"].to_pylist())) == dict(want)
    assert summed.num_rows == len(want)


class _Ctx:
    """Just enough of a worker's vertex context to drive one vertex by hand."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.notified: list[tuple[int, ...]] = []

    def notify_at(self, time: tuple[int, ...]) -> None:
        self.notified.append(time)

    def send(self, output: int, records: Any, time: Any, held: Any) -> None:
        self.sent.extend((time, r) for r in records)


def test_sum_counts_snapshot_folds_pending_partials_into_keyed_state() -> None:
    def partial(pairs: dict[Any, int]) -> pa.Table:
        firsts, seconds = zip(*pairs)
        counts = pa.array(list(pairs.values()), pa.int64())
        return pa.table(
            [pa.array(firsts), pa.array(seconds), counts], names=["key0", "key1", "count"]
        )

    v = SumCounts(columnar=False)
    v._ctx = _Ctx()  # type: ignore[assignment]
    v.on_recv(0, [partial({("x", 1): 2, ("y", 2): 1})], (3,))
    v.on_recv(0, [partial({("x", 1): 5})], (3,))
    snap = serialization.decode(serialization.encode(v.snapshot()))
    assert snap["counts"]["times"] == [((3,), [("x", 1), ("y", 2)], [7, 1])]

    fresh = SumCounts(columnar=False)
    fresh._ctx = ctx = _Ctx()  # type: ignore[assignment]
    fresh.restore(snap)
    fresh.on_recv(0, [partial({("y", 2): 4, ("z", 0): 1})], (3,))  # arrives after the restore
    fresh.on_notify((3,))
    assert sorted(ctx.sent) == [((3,), (("x", 1), 7)), ((3,), (("y", 2), 5)), ((3,), (("z", 0), 1))]


def test_where_columns_refuses_a_mask_of_the_wrong_length() -> None:
    flow = Dataflow("bad_mask")
    inp = flow.new_input()
    inp.stream.where_columns(lambda a: np.ones(1, dtype=bool), name="mask").collect("out")
    inp.send([np.arange(3)])
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=1, backend="inline")
    assert info.value.step == "mask"
    assert "1 flags for a chunk of 3 rows" in str(info.value)
    assert "ndarray of 3 rows" in info.value.record_repr


def test_count_columns_names_the_key_function_that_fails() -> None:
    flow = Dataflow("bad_keys")
    inp = flow.new_input()

    def keys(chunk: Any) -> Any:
        return chunk["missing"]

    inp.stream.count_columns(keys, name="count").collect("out")
    inp.send([pa.table({"x": [1, 2]})])
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=1, backend="inline")
    assert info.value.step == "count.combine"
    assert "Table of 2 rows" in str(info.value) and "missing" in str(info.value)


def test_count_columns_on_ray(ray_local: Any) -> None:
    """Partial counts cross real actors as Arrow tables and meet at their key's owner."""
    rng = np.random.default_rng(7)
    chunks = {e: [rng.integers(0, 30, size=200) for _ in range(3)] for e in range(3)}
    flow = Dataflow("columnar_ray")
    inp = flow.new_input()
    inp.stream.count_columns(lambda a: (a % 5, pa.array([f"k{x}" for x in a.tolist()]))).collect(
        "pairs"
    )
    inp.stream.count_columns(columnar=True).collect("tables")
    with flow.activate(workers=2, backend="ray") as session:
        for e, cs in chunks.items():
            inp.advance_to(e)
            inp.send(cs)
        inp.close()
        out = session.join()
    data = {e: np.concatenate(cs).tolist() for e, cs in chunks.items()}
    assert pairs_by_epoch(out["pairs"]) == reference(data, lambda x: (x % 5, f"k{x}"))
    assert tables_by_epoch(out["tables"]) == reference(data, lambda x: x)
