"""``group_by().agg`` on one worker aggregates once: the batches pass the pre-exchange
step unreduced and the step after it takes each partial of all the rows. Against the
two steps it replaces (the partials, then their merge), on random batches (dense and
sparse integer keys, string keys, no keys, nulls; hypothesis); a merge that takes the
merge functions instead of the partials' is caught."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, table_input
from operators.table import vertices as table_vertices
from timely import Dataflow

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("x", pa.int64())])
ROWS = st.lists(
    st.tuples(
        st.integers(0, 9) | st.sampled_from([1 << 40]),
        st.sampled_from(["a", "b"]),
        st.none() | st.integers(-5, 5),
    ),
    max_size=12,
)


def run(batches: list[Any], keys: tuple[str, ...]) -> Counter[Any]:
    flow = Dataflow("one")
    inp = table_input(flow, SCHEMA)
    aggs = [
        count().alias("n"),
        col("x").sum().alias("sx"),
        col("x").min().alias("lo"),
        col("x").max().alias("hi"),
        col("x").count().alias("nx"),
        col("x").mean().alias("mx"),
        col("x").first().alias("fx"),
        col("x").last().alias("la"),
    ]
    inp.table.group_by(*keys).agg(*aggs).collect("out")
    for rows in batches:
        inp.send(pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], SCHEMA))
    out = flow.run(workers=1, backend="inline")["out"]
    return Counter(tuple(r.values()) for _, t in out for r in t.to_pylist())


def two_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The partials and their merge, as on several workers."""
    init = table_vertices.Aggregate.__init__

    def plain(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, "alone": None, "pass_alone": False})

    monkeypatch.setattr(table_vertices.Aggregate, "__init__", plain)


@settings(max_examples=40, deadline=None)
@given(st.lists(ROWS, max_size=4), st.sampled_from([("k",), ("s",), ("k", "s"), ()]))
def test_one_step_equals_the_partials_and_their_merge(batches: Any, keys: Any) -> None:
    got = run(batches, keys)
    with pytest.MonkeyPatch.context() as mp:
        two_steps(mp)
        assert run(batches, keys) == got


def test_a_merge_of_unreduced_rows_by_the_merge_functions_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counting rows by summing them (the merge of counts) is wrong on raw rows."""
    batches = [[(1, "a", 3), (1, "a", 4)], [(2, "b", None)]]
    want = run(batches, ("k",))
    complete = table_vertices.Aggregate.complete

    def merged(self: Any, sides: Any) -> Any:
        if self.alone is not None:
            schema, aggs = self.alone
            self.alone = (schema, [(c, f, o) for (c, _, o), (_, f, _) in zip(aggs, self.aggs)])
        return complete(self, sides)

    monkeypatch.setattr(table_vertices.Aggregate, "complete", merged)
    with pytest.raises(Exception):  # noqa: B017 - a failure or a wrong answer, either
        assert run(batches, ("k",)) == want
