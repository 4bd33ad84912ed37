"""``join(other, how="cross")`` against a plain-Python product per time: random rows
(nulls included), empty batches and empty sides, epochs, 1-4 workers and random
delivery orders (hypothesis); at the top level, in a loop with either side from
outside it (held once per epoch), and with a one-row aggregate of the loop's own rows
(a scalar added to every row, round after round). Mutants caught: the other side not
broadcast (each worker crosses only the rows it has), rows paired wrongly, and a side
from outside the loop kept across epochs. Errors when the graph is built."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, table_input
from operators.table import loops as table_loops
from operators.table import stream as table_stream
from operators.table import vertices as table_vertices
from timely import Dataflow, GraphBuildError, pipeline

LEFT = pa.schema([("k", pa.string()), ("x", pa.int64())])
RIGHT = pa.schema([("x", pa.int64()), ("y", pa.float64())])

LEFT_ROWS = st.tuples(st.none() | st.sampled_from(["a", "b", "c"]), st.none() | st.integers(-5, 5))
RIGHT_ROWS = st.tuples(st.none() | st.integers(-5, 5), st.none() | st.sampled_from([0.5, -2.0]))


def epochs_of(rows: Any) -> Any:
    """Epochs of batches of rows (a batch, an epoch or a whole side may be empty)."""
    return st.lists(st.lists(st.lists(rows, max_size=4), max_size=3), max_size=3)


def send(handle: Any, schema: pa.Schema, epochs: list[list[list[tuple[Any, ...]]]]) -> None:
    for e, batches in enumerate(epochs):
        handle.advance_to(e)
        for rows in batches:
            handle.send(pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema))


def per_epoch(epochs: list[list[list[tuple[Any, ...]]]]) -> dict[int, list[tuple[Any, ...]]]:
    return {e: [r for b in batches for r in b] for e, batches in enumerate(epochs)}


def collected(out: Any) -> dict[int, Counter[tuple[Any, ...]]]:
    got: dict[int, Counter[tuple[Any, ...]]] = {}
    for e, table in out:
        got.setdefault(e, Counter()).update(tuple(r.values()) for r in table.to_pylist())
    return {e: c for e, c in got.items() if c}


def product(
    left: dict[int, list[tuple[Any, ...]]], right: dict[int, list[tuple[Any, ...]]]
) -> dict[int, Counter[tuple[Any, ...]]]:
    """Per epoch, every left row with every right row of the epoch."""
    want = {
        e: Counter(a + b for a in left.get(e, []) for b in right.get(e, []))
        for e in set(left) | set(right)
    }
    return {e: c for e, c in want.items() if c}


def run_top(left: Any, right: Any, workers: int, seed: int) -> dict[int, Counter[Any]]:
    flow = Dataflow("cross")
    a = table_input(flow, LEFT, name="a")
    b = table_input(flow, RIGHT, name="b")
    joined = a.table.join(b.table, how="cross")
    assert joined.columns == ["k", "x", "x_right", "y"]
    joined.collect("out")
    send(a, LEFT, left)
    send(b, RIGHT, right)
    return collected(flow.run(workers=workers, backend="inline", seed=seed)["out"])


def check_top(left: Any, right: Any, workers: int, seed: int) -> None:
    assert run_top(left, right, workers, seed) == product(per_epoch(left), per_epoch(right))


COMMON = settings(max_examples=40, deadline=None)
TOP = (epochs_of(LEFT_ROWS), epochs_of(RIGHT_ROWS), st.integers(1, 4), st.integers(0, 9))


@COMMON
@given(*TOP)
def test_a_cross_join_pairs_every_row_of_a_time(
    left: Any, right: Any, workers: int, seed: int
) -> None:
    check_top(left, right, workers, seed)


LOOP = pa.schema([("v", pa.int64())])
OUTER = pa.schema([("w", pa.int64())])
VALUES = st.tuples(st.integers(-3, 3))
OUTER_VALUES = st.tuples(st.none() | st.integers(-3, 3))


def run_loop(
    loop: Any, outer: Any, side: str, rounds: int, workers: int, seed: int
) -> dict[int, Counter[Any]]:
    """``rounds`` rounds of a body that crosses the loop's rows with the rows from
    outside (``side``: which side of the join they are) and adds ``w`` to ``v``."""
    flow = Dataflow("cross_loop")
    a = table_input(flow, LOOP, name="loop")
    b = table_input(flow, OUTER, name="outer")

    def body(t: Any) -> Any:
        joined = t.join(b.table, how="cross") if side == "right" else b.table.join(t, how="cross")
        return joined.select(v=col("v") * 2 + col("w").fill_null(7))

    a.table.iterate(body, rounds=rounds).collect("out")
    send(a, LOOP, loop)
    send(b, OUTER, outer)
    return collected(flow.run(workers=workers, backend="inline", seed=seed)["out"])


def loop_reference(loop: Any, outer: Any, rounds: int) -> dict[int, Counter[Any]]:
    vs, ws = per_epoch(loop), per_epoch(outer)
    want: dict[int, Counter[Any]] = {}
    for e, rows in vs.items():
        values = [v for (v,) in rows]
        for _ in range(rounds):
            values = [v * 2 + (7 if w is None else w) for v in values for (w,) in ws.get(e, [])]
        if values:
            want[e] = Counter((v,) for v in values)
    return want


def check_loop(loop: Any, outer: Any, side: str, rounds: int, workers: int, seed: int) -> None:
    got = run_loop(loop, outer, side, rounds, workers, seed)
    assert got == loop_reference(loop, outer, rounds)


LOOPS = (
    epochs_of(VALUES),
    epochs_of(OUTER_VALUES),
    st.sampled_from(["left", "right"]),
    st.integers(1, 2),
    st.integers(1, 3),
    st.integers(0, 9),
)


@COMMON
@given(*LOOPS)
def test_a_side_from_outside_the_loop_crosses_every_round(
    loop: Any, outer: Any, side: str, rounds: int, workers: int, seed: int
) -> None:
    """The side from outside comes once an epoch (at round 0) and is held; every
    round's rows of the loop cross that epoch's rows, on the left or on the right."""
    check_loop(loop, outer, side, rounds, workers, seed)


def run_scalar(loop: Any, rounds: int, workers: int, seed: int) -> dict[int, Counter[Any]]:
    """Each round adds the round's row count to every ``v``: a cross join with a
    one-row aggregate (no keys) of the loop's own rows."""
    flow = Dataflow("scalar")
    a = table_input(flow, LOOP)

    def body(t: Any) -> Any:
        n = t.group_by().agg(n=count())
        return t.join(n, how="cross").select(v=col("v") + col("n"))

    a.table.iterate(body, rounds=rounds).collect("out")
    send(a, LOOP, loop)
    return collected(flow.run(workers=workers, backend="inline", seed=seed)["out"])


@COMMON
@given(epochs_of(VALUES), st.integers(1, 3), st.integers(1, 4), st.integers(0, 9))
def test_a_one_row_aggregate_is_added_to_every_row_each_round(
    loop: Any, rounds: int, workers: int, seed: int
) -> None:
    want = {}
    for e, rows in per_epoch(loop).items():
        if rows:
            want[e] = Counter((v + rounds * len(rows),) for (v,) in rows)
    assert run_scalar(loop, rounds, workers, seed) == want


def fails(prop: Any, *given_args: Any) -> None:
    test = settings(
        max_examples=100,
        deadline=None,
        database=None,
        derandomize=True,
        phases=(Phase.generate,),
        report_multiple_bugs=False,
    )(given(*given_args)(prop))
    with pytest.raises(AssertionError):
        test()


def test_a_cross_join_whose_other_side_is_not_broadcast_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mutant that sends the other side down the pipeline (each worker crosses its
    rows with the other side's rows it happens to have) fails the property."""
    monkeypatch.setattr(table_stream, "broadcast", pipeline)
    fails(check_top, *TOP)


def test_rows_paired_wrongly_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that pairs the i-th row of each side's repetition wrongly (both sides
    repeated row by row: some pairs twice, others never) fails the property."""

    def wrong(left: Any, right: Any, out: Any, schema: pa.Schema) -> Any:
        nl, nr = left.num_rows, right.num_rows
        if nl == 0 or nr == 0:
            return schema.empty_table()
        each_left = np.repeat(np.arange(nl), nr)
        each_right = np.repeat(np.arange(nr), nl)
        columns = [left.column(n).take(each_left) for n in out[0]]
        columns += [right.column(n).take(each_right) for n in out[1]]
        return pa.Table.from_arrays(columns, schema=schema)

    monkeypatch.setattr(table_vertices, "cross_tables", wrong)
    fails(check_top, *TOP)


def test_a_side_from_outside_kept_across_epochs_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that holds the outside side under one time for every epoch (so an
    epoch's rounds cross the rows of earlier epochs too) fails the loop property."""
    monkeypatch.setattr(table_loops.ArrangedJoin, "_base", lambda self, time: (0,) * len(time))
    fails(check_loop, *LOOPS)


def test_a_cross_join_takes_no_keys_and_a_known_how() -> None:
    flow = Dataflow("bad")
    a = table_input(flow, LEFT, name="a").table
    b = table_input(flow, RIGHT, name="b").table
    with pytest.raises(GraphBuildError, match=r"step 'pairs'.*no keys"):
        a.join(b, on="x", how="cross", name="pairs")
    with pytest.raises(GraphBuildError, match=r"step 'join'.*'cross', got 'outer'"):
        a.join(b, on="x", how="outer")
    with pytest.raises(GraphBuildError, match=r"step 'pairs'.*column 'x_right' twice"):
        a.select("k", "x", x_right=col("x")).join(b, how="cross", name="pairs")
