"""Table loops: connected components and shortest paths by ``Table.iterate(min_by=...)``
against plain-Python references (union-find, Bellman-Ford), per epoch, on random
graphs, 1-3 workers and random delivery orders (hypothesis); the arranged join of a
table from outside the loop; errors when the graph is
built; a mutant of the least-value table is caught."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, table_input
from operators.table import loops as table_loops
from tests.examples import load_example
from timely import Dataflow, GraphBuildError

union_find = load_example("linq_graphs").reference_cc  # least node per component

EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
LABELS = pa.schema([("node", pa.int64()), ("label", pa.int64())])
WEIGHTED = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("w", pa.float64())])
DIST = pa.schema([("node", pa.int64()), ("d", pa.float64())])

GRAPHS = st.lists(
    st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), max_size=25),
    min_size=1,
    max_size=3,
)
"""Per epoch, the edges of an undirected graph on nodes 0-12."""


def components(flow: Dataflow, edges: Any) -> Any:
    """Each node's component: the least node id it is connected to."""
    both = edges.concat(edges.select(src=col("dst"), dst=col("src")))
    labels = both.select(node=col("src"), label=col("src"))
    return labels.iterate(
        lambda t: t.join(both, left_on="node", right_on="src").select(
            node=col("dst"), label=col("label")
        ),
        min_by=("node", "label"),
    )


def run_components(epochs: list[list[tuple[int, int]]], workers: int, seed: int) -> Any:
    flow = Dataflow("cc")
    inp = table_input(flow, EDGES)
    components(flow, inp.table).collect("out")
    for e, edges in enumerate(epochs):
        inp.advance_to(e)
        half = len(edges) // 2
        for part in (edges[:half], edges[half:]):  # two batches an epoch
            inp.send(pa.Table.from_pylist([{"src": a, "dst": b} for a, b in part], schema=EDGES))
    out = flow.run(workers=workers, backend="inline", seed=seed)
    got: dict[int, dict[int, int]] = defaultdict(dict)
    for e, table in out["out"]:
        for row in table.to_pylist():
            assert row["node"] not in got[e], f"node {row['node']} twice in epoch {e}"
            got[e][row["node"]] = row["label"]
    return dict(got)


COMMON = settings(max_examples=25, deadline=None)


IDS = {
    "small": lambda n: n,
    "large": lambda n: n << 35,
    "negative": lambda n: n - 6,
    "mixed": lambda n: n if n < 7 else n << 35,
}
"""Node ids: dense (an array indexed by id), sparse (sorted, searchsorted), and dense
ones that turn sparse when a large id comes."""


@COMMON
@given(GRAPHS, st.integers(1, 3), st.integers(0, 9), st.sampled_from(sorted(IDS)))
def test_components_equal_union_find(epochs: Any, workers: int, seed: int, ids: str) -> None:
    to = IDS[ids]
    epochs = [[(to(a), to(b)) for a, b in edges] for edges in epochs]
    got = run_components(epochs, workers, seed)
    want = {e: union_find(edges) for e, edges in enumerate(epochs) if edges}
    assert got == want


def test_a_mutant_that_keeps_the_first_value_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The least-value table must lower a key's value: a variant that keeps the first
    value it saw for a key gives wrong components on a path graph."""

    def keep_first(self: Any, keys: Any, values: Any) -> Any:
        seen = self.__dict__.setdefault("seen", set())
        new = np.array([k not in seen for k in keys.tolist()], dtype=bool)
        seen.update(keys.tolist())
        return new

    path = [[(4, 3), (3, 2), (2, 1), (1, 0)]]
    assert run_components(path, 1, 0) == {0: dict.fromkeys(range(5), 0)}
    monkeypatch.setattr(table_loops._Best, "improve", keep_first)
    assert run_components(path, 1, 0) != {0: dict.fromkeys(range(5), 0)}


@COMMON
@given(
    st.lists(
        st.tuples(st.integers(0, 8), st.integers(0, 8), st.sampled_from([0.5, 1.0, 2.0, 3.5])),
        max_size=30,
    ),
    st.integers(1, 3),
    st.integers(0, 9),
)
def test_shortest_paths_equal_bellman_ford(edges: Any, workers: int, seed: int) -> None:
    """Distances from node 0, the edges joined from outside the loop (arranged)."""
    flow = Dataflow("sssp")
    inp = table_input(flow, WEIGHTED)
    roots = table_input(flow, DIST)
    graph = inp.table

    def step(t: Any) -> Any:
        return t.join(graph, left_on="node", right_on="src").select(
            node=col("dst"), d=col("d") + col("w")
        )

    roots.table.iterate(step, min_by=("node", "d")).collect("out")
    inp.advance_to(0)
    roots.advance_to(0)
    inp.send(pa.Table.from_pylist([{"src": a, "dst": b, "w": w} for a, b, w in edges], WEIGHTED))
    roots.send(pa.Table.from_pylist([{"node": 0, "d": 0.0}], DIST))
    out = flow.run(workers=workers, backend="inline", seed=seed)
    got = {r["node"]: r["d"] for _, t in out["out"] for r in t.to_pylist()}
    want = {0: 0.0}
    for _ in range(len(edges) + 1):
        for a, b, w in edges:
            if a in want and want[a] + w < want.get(b, float("inf")):
                want[b] = want[a] + w
    assert got == want


def test_a_loop_needs_min_by_numbers_and_the_same_schema() -> None:
    flow = Dataflow("bad")
    labels = table_input(flow, LABELS).table
    with pytest.raises(GraphBuildError, match="min_by"):
        labels.iterate(lambda t: t)
    with pytest.raises(GraphBuildError, match="'nope'"):
        labels.iterate(lambda t: t, min_by=("node", "nope"))
    named = table_input(flow, pa.schema([("node", pa.string()), ("label", pa.int64())])).table
    with pytest.raises(GraphBuildError, match="must be a number"):
        named.iterate(lambda t: t, min_by=("node", "label"))
    with pytest.raises(GraphBuildError, match="the schema it was given"):
        labels.iterate(lambda t: t.select(node=col("node")), min_by=("node", "label"))


@COMMON
@given(
    st.lists(
        st.dictionaries(
            st.integers(-3, 40) | st.sampled_from([1 << 20, 1 << 40]), st.integers(0, 9)
        ),
        max_size=6,
    )
)
def test_the_least_value_table_equals_a_dict(batches: Any) -> None:
    """Batches of distinct keys, sorted, as ``LeastOnly`` gives them: dense, sorted, and
    a dense table that turns sorted when a key out of its bound comes."""
    best = table_loops._Best(pa.int64(), pa.int64())
    best.DENSE_MIN = 16  # small, so that a key of 40 already falls outside
    want: dict[int, int] = {}
    for batch in batches:
        if not batch:
            continue
        keys = np.array(sorted(batch), dtype=np.int64)
        values = np.array([batch[k] for k in sorted(batch)], dtype=np.int64)
        taken = best.improve(keys, values)
        expect = [k not in want or batch[k] < want[k] for k in sorted(batch)]
        assert taken.tolist() == expect
        for k in sorted(batch):
            want[k] = min(want.get(k, batch[k]), batch[k])
    if best.dense:
        got = dict(zip(np.flatnonzero(best.present).tolist(), best.values[best.present].tolist()))
    else:
        got = dict(zip(best.keys.tolist(), best.values.tolist()))
    assert got == want


@COMMON
@given(
    st.lists(
        st.tuples(
            st.none() | st.integers(0, 30) | st.sampled_from([-4, 1 << 40]),
            st.none() | st.integers(-3, 3),
        ),
        max_size=40,
    )
)
def test_least_rows_keep_one_least_row_per_key(rows: Any) -> None:
    """Dense keys (``minimum.at``) and others (a sort) alike: one row per key with a
    value, holding the key's least value; rows with a null key or value dropped."""
    table = pa.table(
        {
            "k": pa.array([k for k, _ in rows], pa.int64()),
            "v": pa.array([v for _, v in rows], pa.int64()),
            "row": pa.array(range(len(rows)), pa.int64()),
        }
    )
    got = table_loops.least_rows(table, "k", "v").to_pylist()
    want: dict[int, int] = {}
    for k, v in rows:
        if k is not None and v is not None:
            want[k] = min(want.get(k, v), v)
    assert [r["k"] for r in got] == sorted(want)
    for r in got:
        assert r["v"] == want[r["k"]] and rows[r["row"]] == (r["k"], r["v"])


def test_a_loop_of_rounds_applies_its_body_that_many_times() -> None:
    """``rounds=n``: ``x -> x + 1`` applied n times to every row; 0 rounds is the input;
    bad counts and both kinds at once fail when the graph is built."""
    for n in (0, 1, 4):
        flow = Dataflow("rounds")
        inp = table_input(flow, LABELS)
        inp.table.iterate(lambda t: t.select("node", label=col("label") + 1), rounds=n).collect(
            "out"
        )
        inp.send(pa.Table.from_pylist([{"node": 1, "label": 10}, {"node": 2, "label": 20}]))
        ((_, table),) = flow.run(workers=2, backend="inline")["out"]
        assert sorted(table.column("label").to_pylist()) == [10 + n, 20 + n]
    labels = table_input(Dataflow("bad"), LABELS).table
    with pytest.raises(GraphBuildError, match="rounds must be"):
        labels.iterate(lambda t: t, rounds=-1)
    with pytest.raises(GraphBuildError, match="one of them"):
        labels.iterate(lambda t: t, rounds=2, min_by=("node", "label"))
