"""Batch-level operators: ``select_batch`` and ``where_batch``, with lists and numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from tests.operators.test_properties import Feed, by_epoch, expect, feeds, per_epoch, send
from timely import Dataflow, UserFunctionError

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
