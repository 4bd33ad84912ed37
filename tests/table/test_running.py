"""Running aggregates on tables (``group_by(...).running_agg(...)``) against a plain-Python
running reference: random rows with nulls, empty batches, epochs, 1-4 workers, random
delivery orders; graph errors; and ``agg`` with the same aggregation twice."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, table_input
from tests.checkpoint.pipelines import build
from tests.table.test_operators import COMMON, EPOCHS, SCHEMA, rows_of, run, same
from timely import Dataflow, GraphBuildError
from timely.checkpoint.store import CheckpointStore


def aggregates(k: Any, g: list[dict[str, Any]]) -> dict[str, Any]:
    """``AGGS`` of the rows ``g`` of key ``k``, in plain Python (nulls skipped)."""
    xs = [r["x"] for r in g if r["x"] is not None]
    ys = [r["y"] for r in g if r["y"] is not None]
    return {
        "k": k,
        "n": len(g),
        "sx": sum(xs) if xs else None,
        "lo": min(xs) if xs else None,
        "hi": max(ys) if ys else None,
        "nx": len(xs),
        "my": sum(ys) / len(ys) if ys else None,
        "sy": sum(ys) if ys else None,
    }


def _running(epochs: Any) -> dict[int, list[dict[str, Any]]]:
    """Per epoch, each key of the epoch with its aggregates over the epochs so far."""
    seen: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    want: dict[int, list[dict[str, Any]]] = {}
    for e, rs in rows_of(epochs).items():
        for r in rs:
            seen[r["k"]].append(r)
        out = []
        for k in {r["k"] for r in rs}:
            g = seen[k]
            out.append(aggregates(k, g))
        want[e] = out
    return want


AGGS = [
    count().alias("n"),
    col("x").sum().alias("sx"),
    col("x").min().alias("lo"),
    col("y").max().alias("hi"),
    col("x").count().alias("nx"),
    col("y").mean().alias("my"),
    col("y").sum().alias("sy"),
]


def _build(t: Any) -> Any:
    return t.group_by("k").running_agg(*AGGS)


@COMMON
@given(EPOCHS, st.integers(1, 4), st.integers(0, 9))
def test_running_agg_carries_each_key_across_epochs(epochs: Any, workers: int, seed: int) -> None:
    same(run(_build, epochs, workers, seed), _running(epochs))


def test_a_reference_that_forgets_earlier_epochs_is_told_apart() -> None:
    """The property can fail: the per-epoch ``agg`` (state dropped at each epoch) is not
    the running reference on data where a key comes back."""
    epochs = [[[{"k": "a", "x": 1, "y": 0.5}]], [[{"k": "a", "x": 2, "y": None}]]]
    per_epoch = run(lambda t: t.group_by("k").agg(*AGGS), epochs, 2, 0)
    with pytest.raises(AssertionError):
        same(per_epoch, _running(epochs))
    same(run(_build, epochs, 2, 0), _running(epochs))


FIRST_LAST = st.lists(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.none() | st.integers(0, 9), max_size=3),
    min_size=1,
    max_size=5,
)
"""Epochs of at most one row per key (first and last within an epoch are then defined)."""


@COMMON
@given(FIRST_LAST, st.integers(1, 3), st.integers(0, 9))
def test_running_first_and_last_are_the_first_and_last_values_seen(
    epochs: list[dict[str, int | None]], workers: int, seed: int
) -> None:
    batches = [[[{"k": k, "x": x, "y": None} for k, x in e.items()]] for e in epochs]
    got = run(
        lambda t: t.group_by("k").running_agg(
            col("x").first().alias("f"), col("x").last().alias("l")
        ),
        batches,
        workers,
        seed,
    )
    values: dict[str, list[int]] = defaultdict(list)
    want: dict[int, list[dict[str, Any]]] = {}
    for e, rows in enumerate(epochs):
        for k, x in rows.items():
            if x is not None:
                values[k].append(x)
        want[e] = [
            {
                "k": k,
                "f": values[k][0] if values[k] else None,
                "l": values[k][-1] if values[k] else None,
            }
            for k in rows
        ]
    same(got, want)


def test_running_agg_refuses_what_it_cannot_keep() -> None:
    flow = Dataflow("bad")
    t = table_input(flow, SCHEMA).table
    with pytest.raises(GraphBuildError, match=r"running_agg.*list"):
        t.group_by("k").running_agg(col("x").list())
    with pytest.raises(GraphBuildError, match="group_by keys"):
        t.group_by().running_agg(count())
    with pytest.raises(GraphBuildError, match="'nope'"):
        t.group_by("nope").running_agg(count())
    with pytest.raises(GraphBuildError, match="outside iterate"):
        t.iterate(lambda inner: inner.group_by("k").running_agg(count()).select("k"), rounds=2)


def test_agg_takes_the_same_aggregation_of_a_column_twice() -> None:
    """Arrow names both ``x_sum``: the outputs are named by position (a mean is a sum
    and a count of the same column, beside a sum of it)."""
    flow = Dataflow("twice")
    inp = table_input(flow, SCHEMA)
    inp.table.group_by("k").agg(s=col("x").sum(), m=col("x").mean(), s2=col("x").sum()).collect(
        "keyed"
    )
    inp.table.group_by().agg(s=col("x").sum(), m=col("x").mean(), s2=col("x").sum()).collect("all")
    inp.send(pa.Table.from_pylist([{"k": "a", "x": 1}, {"k": "a", "x": 4}], schema=SCHEMA))
    out = flow.run(workers=2, backend="inline")
    [(_, keyed)] = out["keyed"]
    [(_, whole)] = out["all"]
    assert keyed.to_pylist() == [{"k": "a", "s": 5, "m": 2.5, "s2": 5}]
    assert whole.to_pylist() == [{"s": 5, "m": 2.5, "s2": 5}]


@pytest.mark.parametrize("pipeline", ["table_running", "table_windowed", "table_joined"])
@pytest.mark.parametrize("incremental", [0, 2], ids=["whole", "chain"])
@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (2, 2)])
def test_table_state_resumes_with_other_worker_counts(
    tmp_path: Path, before: int, after: int, incremental: int, pipeline: str
) -> None:
    """A run of ``pipeline`` (running aggregates, or sliding windows whose epochs are
    kept at their times) stopped after epoch 5 resumes with ``after`` workers: each takes
    the rows of its bins from every old part (whole, or a chain of Arrow deltas applied
    first), and the outputs are those of a run never stopped."""
    epochs = [[(e * 7 + i * 3) % 40 for i in range(e % 4 + 2)] for e in range(10)]
    flow, expected = build(pipeline, epochs)
    flow.run(workers=2, backend="inline")

    options: dict[str, Any] = {"checkpoint": str(tmp_path), "checkpoint_every": 1}
    if incremental:
        options["checkpoint_incremental"] = incremental
    flow, first = build(pipeline, epochs[:6])
    flow._inputs[0].advance_to(6)  # epochs 0..5 complete; the input stays open
    session = flow.activate(workers=before, backend="inline", **options)
    assert session.committed and session.committed[-1] == 5
    session.close()
    manifest = CheckpointStore(str(tmp_path))._manifest(5)
    assert all(bool(p.get("chain")) == bool(incremental) for p in manifest["parts"])

    flow, second = build(pipeline, epochs)
    session = flow.activate(workers=after, backend="inline", **options)
    assert session.restored_epoch == 5
    for h in flow._inputs:
        h.close()
    session.join()
    assert {**first, **second} == expected
    assert set(second) == {e for e in expected if e > 5}
