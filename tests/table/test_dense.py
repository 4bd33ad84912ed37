"""The dense ``group_by`` (``operators/table/dense.py``) against Arrow's hash aggregation:
random integer keys (dense and sparse, negative, null), int and float values with
nulls, NaN, infinities and sums past 2**53, several batches a time (empty ones too),
every function it covers, value columns cut into chunks unlike the keys (hypothesis).
The same table but for the row order (key order here); mutants that shift the keys by
one, drop the last key or misalign a value column's chunks are caught by the same
property; a ``group_by().agg(...)`` dataflow gives the same rows with the fast path as
without it, and takes it on node numbers."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, table_input
from operators.table import dense as dense_mod
from operators.table import vertices as table_vertices
from operators.table.dense import DENSE_SLACK, FAST, dense_group_by
from timely import Dataflow

KEY_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64()]
VALUES = {
    "i": (
        pa.int64(),
        st.integers(-9, 9)
        | st.sampled_from([2**53 + 1, 2**63 - 1, -(2**63)])  # inexact in float, wrapping
        | st.integers(-(2**63), 2**63 - 1),
    ),
    "j": (pa.int32(), st.integers(-(2**31), 2**31 - 1) | st.integers(-3, 3)),
    "u": (pa.uint16(), st.integers(0, 2**16 - 1)),
    "f": (
        pa.float64(),
        st.floats(allow_nan=True, allow_infinity=True, width=64)
        | st.sampled_from([0.5, -0.25, 1e300, 3.0]),
    ),
    "g": (pa.float32(), st.floats(width=32, allow_nan=True) | st.sampled_from([0.5, 2.0])),
}
"""Value columns: name -> (type, values)."""

GroupBy = Callable[[pa.Table, str, list[tuple[str, str]]], "pa.Table | None"]


@st.composite
def cases(draw: Any) -> tuple[pa.Table, list[tuple[str, str]], bool]:
    """A table of several batches (its key column ``k``), the aggregations, and whether
    the fast path must apply (keys without nulls, at most ``DENSE_SLACK`` slots a row)."""
    ktype = draw(st.sampled_from(KEY_TYPES))
    bits = ktype.bit_width
    lo_type = -(2 ** (bits - 1)) if pa.types.is_signed_integer(ktype) else 0
    hi_type = 2 ** (bits - 1) - 1 if pa.types.is_signed_integer(ktype) else 2**bits - 1
    dense = draw(st.booleans())
    if dense:
        low = draw(st.integers(max(lo_type, -60), min(hi_type, 60) - 20))
        key = st.integers(low, low + 20)
    else:
        key = st.integers(lo_type, hi_type)
    null_keys = draw(st.booleans()) and not dense
    names = draw(st.lists(st.sampled_from(sorted(VALUES)), unique=True, max_size=3))
    null_values = draw(st.booleans())

    def row() -> Any:
        fields: dict[str, Any] = {"k": (st.none() | key) if null_keys else key}
        for n in names:
            fields[n] = (st.none() | VALUES[n][1]) if null_values else VALUES[n][1]
        return st.fixed_dictionaries(fields)

    schema = pa.schema([("k", ktype), *((n, VALUES[n][0]) for n in names)])
    batches = draw(st.lists(st.lists(row(), max_size=12), min_size=1, max_size=4))
    table = pa.Table.from_batches(
        [pa.RecordBatch.from_pylist(rows, schema=schema) for rows in batches], schema=schema
    )
    if draw(st.booleans()):  # value columns cut otherwise than the keys: one chunk each
        table = pa.table(
            [c if n == "k" else c.combine_chunks() for n, c in zip(schema.names, table.columns)],
            schema=schema,
        )
    every = [("", "count_all")] + [(n, fn) for n in names for fn in sorted(FAST - {"count_all"})]
    aggs = draw(st.lists(st.sampled_from(every), min_size=1, max_size=6, unique=True))
    keys = table.column("k").to_pylist()
    fits = dense and bool(keys) and max(keys) - min(keys) < DENSE_SLACK * len(keys)
    return table, aggs, fits


def same_values(a: list[Any], b: list[Any]) -> bool:
    """Equal lists, NaN equal to NaN (and 0.0 to -0.0, as ``==`` has it)."""

    def nan(x: Any) -> bool:
        return isinstance(x, float) and math.isnan(x)

    return len(a) == len(b) and all(x == y or (nan(x) and nan(y)) for x, y in zip(a, b))


def check(group_by: GroupBy, case: tuple[pa.Table, list[tuple[str, str]], bool]) -> None:
    """``group_by`` gives Arrow's table, in key order, wherever it applies."""
    table, aggs, must = case
    got = group_by(table, "k", aggs)
    if got is None:
        assert not must, "the fast path declined dense integer keys"
        return
    want = table.group_by(["k"], use_threads=False).aggregate(
        [(c if c else [], fn) for c, fn in aggs]
    )
    want = want.sort_by("k")
    assert got.schema == want.schema
    for name in want.schema.names:
        assert same_values(got.column(name).to_pylist(), want.column(name).to_pylist()), name


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_the_dense_group_by_equals_arrows(case: Any) -> None:
    check(dense_group_by, case)


def shifted(table: pa.Table, key: str, aggs: list[tuple[str, str]]) -> pa.Table | None:
    """A mutant: the keys off by one (as if the offset were ``min - 1``)."""
    got = dense_group_by(table, key, aggs)
    if got is None:
        return None
    keys = got.column(key)
    return got.set_column(0, key, pc.add(keys, pa.scalar(1, keys.type)))  # type kept


def drops_last(table: pa.Table, key: str, aggs: list[tuple[str, str]]) -> pa.Table | None:
    """A mutant: the greatest key's row lost (as if the array were one slot short)."""
    got = dense_group_by(table, key, aggs)
    return None if got is None else got.slice(0, max(got.num_rows - 1, 0))


@pytest.mark.parametrize("mutant", [shifted, drops_last])
def test_the_property_catches_mutants(mutant: GroupBy) -> None:
    """The property above fails for a group_by that is wrong by one key."""
    prop = settings(max_examples=300, deadline=None, database=None, derandomize=True)(
        given(cases())(lambda case: check(mutant, case))
    )
    with pytest.raises(AssertionError):
        prop()


def test_the_property_catches_pieces_cut_unlike_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that takes a value column's chunks as they are, cut unlike the keys'
    (the rows are no longer beside their keys), fails the property above."""
    monkeypatch.setattr(
        dense_mod, "_pieces", lambda column, slots: [c for c in column.chunks if len(c)]
    )
    prop = settings(
        max_examples=300,
        deadline=None,
        database=None,
        derandomize=True,
        phases=(Phase.generate,),
        report_multiple_bugs=False,
    )(given(cases())(lambda case: check(dense_group_by, case)))
    with pytest.raises((AssertionError, ValueError, IndexError)):
        prop()


def test_sparse_keys_and_other_functions_fall_back() -> None:
    """Keys too spread out, null keys, ``first``, or a bool value: Arrow's path."""
    t = pa.table({"k": [0, 10**9], "x": [1, 2], "b": [True, False]})
    assert dense_group_by(t, "k", [("x", "sum")]) is None
    t = pa.table({"k": [0, 1, 1], "x": [1, 2, 3], "b": [True, False, True]})
    assert dense_group_by(t, "k", [("x", "first")]) is None
    assert dense_group_by(t, "k", [("b", "sum")]) is None
    t = pa.table({"k": [0, None], "x": [1, 2]})
    assert dense_group_by(t, "k", [("x", "sum")]) is None
    empty = pa.table({"k": pa.array([], pa.int64())})
    assert dense_group_by(empty, "k", [("", "count_all")]) is None


NODES = pa.schema([("node", pa.int64()), ("x", pa.int64()), ("y", pa.float64())])


def run_agg(batches: list[list[dict[str, Any]]], workers: int, seed: int) -> list[Any]:
    flow = Dataflow("dense_agg")
    inp = table_input(flow, NODES)
    inp.table.group_by("node").agg(
        count().alias("n"),
        col("x").sum().alias("sx"),
        col("x").min().alias("lo"),
        col("y").max().alias("hi"),
        col("y").mean().alias("my"),
        col("x").count().alias("nx"),
    ).collect("out")
    for rows in batches:
        inp.send(pa.Table.from_pylist(rows, schema=NODES))
    out = flow.run(workers=workers, backend="inline", seed=seed)
    rows = [r for _, t in out["out"] for r in t.to_pylist()]
    return sorted(rows, key=lambda r: r["node"])


ROWS = st.fixed_dictionaries(
    {
        "node": st.integers(0, 30),
        "x": st.none() | st.integers(-5, 5),
        "y": st.none() | st.sampled_from([0.5, -1.0, 2.25]),
    }
)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(ROWS, max_size=8), max_size=3), st.integers(1, 3), st.integers(0, 9))
def test_a_dataflow_gives_the_same_rows_with_and_without_it(
    batches: Any, workers: int, seed: int
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(table_vertices, "dense_group_by", lambda *a: None)
        want = run_agg(batches, workers, seed)
    assert run_agg(batches, workers, seed) == want


def test_node_numbers_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both the partials and their merge go through it on keys ``0 .. n-1``."""
    taken: list[int] = []

    def spy(table: pa.Table, key: str, aggs: list[tuple[str, str]]) -> pa.Table | None:
        got = dense_mod.dense_group_by(table, key, aggs)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(table_vertices, "dense_group_by", spy)
    rows = [{"node": i % 7, "x": i, "y": 0.5 * i} for i in range(40)]
    got = run_agg([rows], 2, 0)
    assert [r["n"] for r in got] == [6, 6, 6, 6, 6, 5, 5]
    assert taken and all(taken)


@st.composite
def sums_only(draw: Any) -> tuple[pa.Table, list[tuple[str, str]], bool]:
    """Sums of columns without nulls, over dense keys with and without gaps, values that
    often cancel to 0 (or -0.0), or floats all > 0 (the smallest subnormal, the largest
    finite, infinity): the case that skips counting rows per key when one column's sums
    are non-zero in every slot, or when a column's values are all > 0, and must find
    the keys with rows otherwise."""
    low = draw(st.integers(-5, 5))
    keys = st.integers(low, low + draw(st.integers(0, 12)))
    if draw(st.booleans()):
        floats = st.sampled_from([0.0, -0.0, 0.5, -0.5, 1.0, float("nan")])
    else:  # every value > 0: a slot's sum is non-zero iff it has rows
        floats = st.sampled_from([0.5, 1.0, 5e-324, 1e308, float("inf")])
    ints = st.integers(-2, 2)
    names = draw(st.lists(st.sampled_from(["f", "i"]), min_size=1, max_size=2, unique=True))
    schema = pa.schema([("k", pa.int64()), *((n, VALUES[n][0]) for n in names)])
    row = st.fixed_dictionaries({"k": keys, **{n: floats if n == "f" else ints for n in names}})
    batches = draw(st.lists(st.lists(row, min_size=1, max_size=12), min_size=1, max_size=3))
    table = pa.Table.from_batches(
        [pa.RecordBatch.from_pylist(rows, schema=schema) for rows in batches], schema=schema
    )
    return table, [(n, "sum") for n in names], False


@SETTINGS
@given(sums_only())
def test_sums_find_the_keys_present_without_counting_them(case: Any) -> None:
    check(dense_group_by, case)


def test_the_sums_property_catches_keys_taken_as_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that trusts the sums whatever they are (a slot without rows taken as
    a key summing to 0) fails the property above."""
    monkeypatch.setattr(dense_mod, "every_slot_used", lambda sums, top: bool(sums))
    prop = settings(
        max_examples=300, deadline=None, database=None, derandomize=True, phases=(Phase.generate,)
    )(given(sums_only())(lambda case: check(dense_group_by, case)))
    with pytest.raises(AssertionError):
        prop()


def test_the_sums_property_catches_keys_seen_in_one_batch_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sums alone find the keys present by marking their slots, batch by batch, not
    by counting rows: a mutant that marks only the first batch's keys (the keys only
    later batches have are lost) fails the property above."""
    real = dense_mod._seen
    monkeypatch.setattr(dense_mod, "_seen", lambda slots, top: real(slots[:1], top))
    prop = settings(
        max_examples=300, deadline=None, database=None, derandomize=True, phases=(Phase.generate,)
    )(given(sums_only())(lambda case: check(dense_group_by, case)))
    with pytest.raises(AssertionError):
        prop()


def test_the_sums_property_catches_any_float_column_taken_as_positive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mutant that takes every float column as > 0 (its zero sums as slots without
    rows: a key whose values cancel, or are 0.0, is lost) fails the property above."""
    monkeypatch.setattr(dense_mod, "_positive", lambda column: pa.types.is_floating(column.type))
    prop = settings(
        max_examples=300, deadline=None, database=None, derandomize=True, phases=(Phase.generate,)
    )(given(sums_only())(lambda case: check(dense_group_by, case)))
    with pytest.raises(AssertionError):
        prop()
