"""Batch-level operators: ``select_batch`` and ``where_batch`` with lists, numpy and Arrow.

Each is checked against the record-at-a-time reference on the same records."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from tests.operators.test_properties import Feed, by_epoch, expect, feeds, per_epoch, send
from timely import Dataflow, GraphBuildError, UserFunctionError

workers = st.integers(1, 4)
seeds = st.integers(0, 2**16)


def times3(xs: list[int]) -> Any:
    return np.asarray(xs, dtype=np.int64) * 3 + 1  # an ndarray: turned into a list


@given(feed=feeds(st.integers(-20, 20)), w=workers, seed=seeds)
def test_batch_operators_match_their_record_at_a_time_reference(
    feed: Feed, w: int, seed: int
) -> None:
    flow = Dataflow("batch")
    inp = flow.new_input()
    s = inp.stream
    s.select_batch(times3).collect("numpy_select")
    s.select_batch(lambda xs: [x * 3 + 1 for x in xs]).collect("list_select")
    s.where_batch(lambda xs: np.asarray(xs, dtype=np.int64) % 3 == 0).collect("numpy_where")
    s.where_batch(lambda xs: [x > 0 for x in xs]).collect("list_where")
    # Records that are numpy arrays, reduced per batch to plain ints.
    s.select(lambda x: np.array([x, x + 1])).select_batch(
        lambda arrs: [int(a.sum()) for a in arrs]
    ).collect("arrays")
    s.exchange(lambda x: x).select_batch(times3).where_batch(
        lambda xs: np.asarray(xs) % 2 == 0
    ).collect("chain")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)
    data = by_epoch(feed)

    assert per_epoch(out["numpy_select"]) == expect(data, lambda rs: [x * 3 + 1 for x in rs])
    assert per_epoch(out["list_select"]) == expect(data, lambda rs: [x * 3 + 1 for x in rs])
    assert per_epoch(out["numpy_where"]) == expect(data, lambda rs: [x for x in rs if x % 3 == 0])
    assert per_epoch(out["list_where"]) == expect(data, lambda rs: [x for x in rs if x > 0])
    assert per_epoch(out["arrays"]) == expect(data, lambda rs: [2 * x + 1 for x in rs])
    assert per_epoch(out["chain"]) == expect(
        data, lambda rs: [x * 3 + 1 for x in rs if (x * 3 + 1) % 2 == 0]
    )
    assert all(type(x) is int for _, x in out["numpy_select"])


def test_where_batch_refuses_a_mask_of_the_wrong_length() -> None:
    flow = Dataflow("bad_mask")
    inp = flow.new_input()
    inp.stream.where_batch(lambda xs: [True], name="mask").collect("out")
    inp.send([1, 2, 3, 4, 5])
    with pytest.raises(UserFunctionError) as info:
        flow.run(workers=1, backend="inline")
    assert info.value.step == "mask"
    assert "1 flags for a batch of 5 records" in str(info.value)
    assert info.value.record_repr.startswith("'batch [1, 2, 3, ... (5 records)]")


rows = st.fixed_dictionaries({"k": st.integers(0, 4), "x": st.integers(-50, 50)})


@given(feed=feeds(st.tuples(st.integers(-9, 9), st.integers(-9, 9))), w=workers, seed=seeds)
def test_numpy_form_gets_an_array_and_rows_come_back_as_tuples(
    feed: Feed, w: int, seed: int
) -> None:
    flow = Dataflow("numpy_form")
    inp = flow.new_input()
    s = inp.stream
    s.select_batch(lambda a: a[:, ::-1] * 2, form="numpy").collect("swap")
    s.where_batch(lambda a: a[:, 0] > a[:, 1], form="numpy").collect("above")
    s.select(lambda r: r[0]).select_batch(lambda a: a * 3 + 1, form="numpy").collect("ints")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)
    data = by_epoch(feed)
    assert per_epoch(out["swap"]) == expect(data, lambda rs: [(2 * b, 2 * a) for a, b in rs])
    assert per_epoch(out["above"]) == expect(data, lambda rs: [(a, b) for a, b in rs if a > b])
    assert per_epoch(out["ints"]) == expect(data, lambda rs: [3 * a + 1 for a, _ in rs])
    assert all(type(r) is tuple and type(r[0]) is int for _, r in out["swap"])


def _with_y(t: pa.Table) -> pa.Table:
    return t.append_column("y", pc.add(pc.multiply(t["x"], 2), t["k"]))


def _key(r: dict[str, int]) -> tuple[int, ...]:
    return tuple(sorted(r.items()))  # type: ignore[arg-type]


@given(feed=feeds(rows), w=workers, seed=seeds)
def test_arrow_form_on_dict_records_and_on_arrow_batch_records(
    feed: Feed, w: int, seed: int
) -> None:
    flow = Dataflow("arrow_form")
    inp = flow.new_input()
    s = inp.stream
    # Dict records in, a table to the function, dicts out.
    s.select_batch(lambda t: _with_y(t).to_pylist(), form="arrow").select(_key).collect("dicts")
    s.where_batch(lambda t: pc.greater(t["x"], 0), form="arrow").select(_key).collect("pos")
    # A table out travels as one Arrow batch record; the next steps filter it as a table
    # (a mask per row) and map it as a table, and rows come out at the end.
    batches = s.select_batch(_with_y, form="arrow")
    batches.select(lambda b: (type(b).__name__, tuple(sorted(b.schema.names)))).distinct().collect(
        "kinds"
    )
    batches.exchange(lambda b: b.num_rows).where_batch(
        lambda t: pc.equal(pc.bit_wise_and(t["y"], 1), 0), form="arrow"
    ).select_batch(lambda t: t.drop_columns(["k"]), form="arrow").select_many(
        lambda b: b.to_pylist()
    ).select(_key).collect("columnar")
    send(inp, feed)
    out = flow.run(workers=w, backend="inline", seed=seed)
    data = by_epoch(feed)

    def with_y(r: dict[str, int]) -> dict[str, int]:
        return {**r, "y": 2 * r["x"] + r["k"]}

    assert per_epoch(out["dicts"]) == expect(data, lambda rs: [_key(with_y(r)) for r in rs])
    assert per_epoch(out["pos"]) == expect(data, lambda rs: [_key(r) for r in rs if r["x"] > 0])
    assert per_epoch(out["columnar"]) == expect(
        data,
        lambda rs: [
            _key({"x": r["x"], "y": with_y(r)["y"]}) for r in rs if with_y(r)["y"] % 2 == 0
        ],
    )
    assert {r for _, r in out["kinds"]} <= {("RecordBatch", ("k", "x", "y"))}
    assert bool(out["kinds"]) == any(rs for _, rs in feed)


def test_where_batch_takes_a_pyarrow_mask_on_plain_records() -> None:
    flow = Dataflow("pa_mask")
    inp = flow.new_input()
    mask = lambda xs: pa.array([None if x == 0 else x > 0 for x in xs])  # noqa: E731
    inp.stream.where_batch(mask).collect("out")
    inp.send([3, -1, 0, 5])
    assert sorted(flow.run(workers=1, backend="inline")["out"]) == [(0, 3), (0, 5)]


def test_forms_are_checked() -> None:
    s = Dataflow("bad_form").new_input().stream
    with pytest.raises(GraphBuildError, match="form must be one of 'list', 'numpy', 'arrow'"):
        s.select_batch(lambda b: b, form="pandas")
    for form, records, match in (
        ("arrow", [1, 2], "takes records that are Arrow batches or dicts"),
        ("numpy", [pa.record_batch({"a": [1]})], "use form='arrow'"),
    ):
        flow = Dataflow("bad_records")
        inp = flow.new_input()
        inp.stream.select_batch(lambda b: b, form=form, name="conv").collect("out")
        inp.send(records)
        with pytest.raises(UserFunctionError, match=match) as info:
            flow.run(workers=1, backend="inline")
        assert info.value.step == "conv"
