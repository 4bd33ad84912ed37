"""Every table operator against a plain-Python reference, per epoch: random rows (nulls
included), empty batches, epochs, 1-4 workers and random delivery orders (hypothesis);
schema errors when the graph is built; one run on Ray."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, lit, table_input, when
from timely import Dataflow, GraphBuildError

SCHEMA = pa.schema([("k", pa.string()), ("x", pa.int64()), ("y", pa.float64())])

ROWS = st.fixed_dictionaries(
    {
        "k": st.none() | st.sampled_from(["a", "b", "c", "dd"]),
        "x": st.none() | st.integers(-5, 5),
        "y": st.none() | st.sampled_from([0.5, -1.0, 2.25]),
    }
)
EPOCHS = st.lists(st.lists(st.lists(ROWS, max_size=6), max_size=3), min_size=1, max_size=3)
"""Epochs of batches of rows (a batch may be empty)."""


def run(
    build: Any,
    epochs: list[list[list[dict[str, Any]]]],
    workers: int,
    seed: int,
    backend: str = "inline",
) -> dict[int, list[dict[str, Any]]]:
    flow = Dataflow("t")
    inp = table_input(flow, SCHEMA)
    build(inp.table).collect("out")
    for e, batches in enumerate(epochs):
        inp.advance_to(e)
        for rows in batches:
            inp.send(pa.Table.from_pylist(rows, schema=SCHEMA))
    options = {"seed": seed} if backend == "inline" else {}
    out = flow.run(workers=workers, backend=backend, **options)
    got: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e, table in out["out"]:
        got[e].extend(table.to_pylist())
    return dict(got)


def rows_of(epochs: list[list[list[dict[str, Any]]]]) -> dict[int, list[dict[str, Any]]]:
    return {e: [r for b in batches for r in b] for e, batches in enumerate(epochs)}


def same(got: dict[int, list[Any]], want: dict[int, list[Any]]) -> None:
    """Equal per epoch as multisets (row order within an epoch is not defined)."""

    def norm(rs: list[Any]) -> list[str]:
        return sorted(repr(sorted(r.items())) if isinstance(r, dict) else repr(r) for r in rs)

    g = {e: norm(rs) for e, rs in got.items() if rs}
    w = {e: norm(rs) for e, rs in want.items() if rs}
    assert g == w


COMMON = settings(max_examples=40, deadline=None)


@COMMON
@given(EPOCHS, st.integers(1, 4), st.integers(0, 9))
def test_select_where_with_columns(epochs: Any, workers: int, seed: int) -> None:
    def build(t: Any) -> Any:
        return (
            t.where((col("x") > 0) | col("k").is_null())
            .with_columns(z=col("x") * 2 + 1, big=when(col("y") > 1).then("big").otherwise("small"))
            .select("k", "z", "big", w=(col("x") // 2).fill_null(-1))
        )

    def ref(r: dict[str, Any]) -> dict[str, Any] | None:
        x, y = r["x"], r["y"]
        keep = (x is not None and x > 0) or r["k"] is None
        if not keep:
            return None
        return {
            "k": r["k"],
            "z": None if x is None else x * 2 + 1,
            "big": "big" if y is not None and y > 1 else "small",
            "w": -1 if x is None else x // 2,
        }

    want = {e: [o for r in rs if (o := ref(r)) is not None] for e, rs in rows_of(epochs).items()}
    same(run(build, epochs, workers, seed), want)


@COMMON
@given(EPOCHS, st.integers(1, 4), st.integers(0, 9))
def test_group_by_agg(epochs: Any, workers: int, seed: int) -> None:
    def build(t: Any) -> Any:
        return t.group_by("k").agg(
            count().alias("n"),
            col("x").sum().alias("sx"),
            col("x").min().alias("lo"),
            col("y").max().alias("hi"),
            col("x").count().alias("nx"),
            col("y").mean().alias("my"),
        )

    want: dict[int, list[dict[str, Any]]] = {}
    for e, rs in rows_of(epochs).items():
        groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for r in rs:
            groups[r["k"]].append(r)
        out = []
        for k, g in groups.items():
            xs = [r["x"] for r in g if r["x"] is not None]
            ys = [r["y"] for r in g if r["y"] is not None]
            out.append(
                {
                    "k": k,
                    "n": len(g),
                    "sx": sum(xs) if xs else None,
                    "lo": min(xs) if xs else None,
                    "hi": max(ys) if ys else None,
                    "nx": len(xs),
                    "my": sum(ys) / len(ys) if ys else None,
                }
            )
        want[e] = out
    same(run(build, epochs, workers, seed), want)


@COMMON
@given(EPOCHS, st.integers(1, 4), st.integers(0, 9))
def test_distinct_and_a_global_count(epochs: Any, workers: int, seed: int) -> None:
    got = run(lambda t: t.distinct("k", "x").select("k", "x"), epochs, workers, seed)
    want = {
        e: [dict(kx) for kx in {(("k", r["k"]), ("x", r["x"])) for r in rs}]
        for e, rs in rows_of(epochs).items()
    }
    same(got, want)
    total = run(lambda t: t.group_by().agg(count()), epochs, workers, seed)
    same(total, {e: [{"count": len(rs)}] for e, rs in rows_of(epochs).items() if rs})


@COMMON
@given(EPOCHS, st.integers(1, 4), st.integers(0, 9), st.integers(1, 5), st.booleans())
def test_top_k(epochs: Any, workers: int, seed: int, k: int, descending: bool) -> None:
    """The first ``k`` rows by ``x`` per epoch, in order, nulls last: the ``x`` values
    are those of a sort of all the epoch's rows, and every row is one of the epoch's."""
    got = run(lambda t: t.top_k(k, "x", descending=descending), epochs, workers, seed)
    for e, rs in rows_of(epochs).items():
        present = sorted((r["x"] for r in rs if r["x"] is not None), reverse=descending)
        nulls = [None] * sum(r["x"] is None for r in rs)
        assert [r["x"] for r in got.get(e, [])] == (present + nulls)[:k]
        pool = Counter(tuple(sorted(r.items())) for r in rs)
        pool.subtract(tuple(sorted(r.items())) for r in got.get(e, []))
        assert min(pool.values(), default=0) >= 0, "a row that was not in the epoch"


@COMMON
@given(
    EPOCHS,
    EPOCHS,
    st.integers(1, 4),
    st.sampled_from(["inner", "left", "semi", "anti"]),
    st.booleans(),
)
def test_join(left: Any, right: Any, workers: int, how: str, renamed: bool) -> None:
    """``renamed``: the right key has another name (``right_on``); the output is the
    same, without the right key (equal to the left's)."""
    flow = Dataflow("j")
    a = table_input(flow, SCHEMA, name="a")
    b = table_input(flow, SCHEMA, name="b")
    if renamed:
        other = b.table.select(rk=col("k"), r=col("x"))
        a.table.join(other, left_on="k", right_on="rk", how=how).collect("out")
    else:
        a.table.join(b.table.select("k", r=col("x")), on="k", how=how).collect("out")
    for inp, epochs in ((a, left), (b, right)):
        for e, batches in enumerate(epochs):
            inp.advance_to(e)
            for rows in batches:
                inp.send(pa.Table.from_pylist(rows, schema=SCHEMA))
    out = flow.run(workers=workers, backend="inline")
    got: dict[int, list[Any]] = defaultdict(list)
    for e, t in out["out"]:
        got[e].extend(t.to_pylist())
    ls, rs = rows_of(left), rows_of(right)
    want: dict[int, list[Any]] = {}
    for e in set(ls) | set(rs):
        rows = []
        for r in ls.get(e, []):
            matches = [s for s in rs.get(e, []) if r["k"] is not None and s["k"] == r["k"]]
            if how == "inner":
                rows += [{**r, "r": s["x"]} for s in matches]
            elif how == "left":
                rows += [{**r, "r": s["x"]} for s in matches] or [{**r, "r": None}]
            elif (how == "semi" and matches) or (how == "anti" and not matches):
                rows.append(r)
        want[e] = rows
    same(dict(got), want)


def test_explode_words_and_count_them() -> None:
    flow = Dataflow("wc")
    lines = table_input(flow, {"line": "string"})
    lines.table.select(word=col("line").str.split()).explode("word").group_by("word").agg(
        n=count()
    ).collect("out")
    text = [["a b a", "  c a  ", ""], ["b b", None]]
    for e, batch in enumerate(text):
        lines.advance_to(e)
        lines.send({"line": batch})
    out = flow.run(workers=3, backend="inline")
    got = {
        e: dict(zip(t.column("word").to_pylist(), t.column("n").to_pylist())) for e, t in out["out"]
    }
    want = {
        e: dict(Counter(w for line in b if line for w in line.split())) for e, b in enumerate(text)
    }
    assert got == want


def test_rows_in_and_out() -> None:
    flow = Dataflow("rows")
    nums = flow.new_input("nums")
    table = nums.stream.to_table({"x": "int64"})
    table.select(y=col("x") * 10).to_rows(tuples=True).collect("out")
    nums.send([{"x": 1}, {"x": 2}])
    assert sorted(flow.run(workers=2, backend="inline")["out"]) == [(0, (10,)), (0, (20,))]


def test_a_missing_column_or_a_type_that_does_not_fit_fails_when_building() -> None:
    with pytest.raises(GraphBuildError, match="'nope'"):
        table_input(Dataflow("t"), SCHEMA).table.top_k(3, "nope")
    with pytest.raises(GraphBuildError, match="k must be"):
        table_input(Dataflow("t"), SCHEMA).table.top_k(0, "x")
    flow = Dataflow("bad")
    t = table_input(flow, SCHEMA).table
    with pytest.raises(GraphBuildError, match=r"step 'select'.*'nope'"):
        t.select(col("nope"))
    with pytest.raises(GraphBuildError, match=r"step 'select'.*k: string"):
        t.select(z=col("k") + 1)
    with pytest.raises(GraphBuildError, match="not bool"):
        t.where(col("x") + 1)
    with pytest.raises(GraphBuildError, match="key 'k' is string but 'x' is int64"):
        t.join(t, left_on="k", right_on="x")
    with pytest.raises(GraphBuildError, match="no key column 'q'"):
        t.group_by("q").agg(count())
    with pytest.raises(TypeError, match=r"& \|"):
        bool(col("x") > 1)
    assert "x" in repr(lit(1) + col("x"))


@pytest.mark.usefixtures("ray_local")
def test_on_ray() -> None:
    epochs = [
        [[{"k": "a", "x": 1, "y": 2.0}, {"k": "b", "x": 2, "y": None}]],
        [[{"k": "a", "x": 3, "y": 1.0}]],
    ]
    got = run(lambda t: t.group_by("k").agg(col("x").sum().alias("s")), epochs, 2, 0, backend="ray")
    same(got, {0: [{"k": "a", "s": 1}, {"k": "b", "s": 2}], 1: [{"k": "a", "s": 3}]})
