"""A compiled expression runs once per batch, never once per row (the brief's "Python
runs per batch"): the kernel calls of an evaluation are counted, and must not grow
with the batch's rows, for arithmetic, comparisons, string functions,
``when/then/otherwise`` and ``fill_null``, alone and in a dataflow's ``select`` and
``where``. Mutation checks: a compile that evaluates row by row (the whole expression,
or each function call of it) gives the same values and must be caught by the same
check. Calls are counted, not timed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, expr, lit, stream, table_input, when
from timely import Dataflow

SCHEMA = pa.schema([("x", pa.int64()), ("y", pa.float64()), ("s", pa.string()), ("t", pa.string())])
ROWS = [
    {"x": 3, "y": 0.5, "s": "Ab c", "t": "p"},
    {"x": -7, "y": None, "s": " b,a ", "t": None},
    {"x": None, "y": 2.25, "s": None, "t": "q"},
    {"x": 0, "y": -1.0, "s": "abc\td", "t": "r"},
    {"x": 12, "y": 4.0, "s": "", "t": None},
]
"""A few rows with a null in every column; a batch of ``m`` is these repeated, so every
size takes the same branches of every function."""

EXPRESSIONS = {
    "arithmetic": (col("x") + 1) * col("x") - col("y") * 2,
    "true division": col("x") / col("y"),
    "floor division and modulo": col("x") // 3 + col("x") % -4,
    "power, negation, abs, round": (-col("x")).abs() ** 2 + col("y").round(1),
    "comparisons and logic": (col("x") > 0) & (col("y") <= 1.0) | ~(col("s") == "abc\td"),
    "null tests and is_in": col("x").is_null() | col("t").is_not_null() & col("x").is_in([3, 0]),
    "cast": col("x").cast("float64") + col("y"),
    "string functions": col("s").str.strip().str.upper().str.len() + col("s").str.lower().str.len(),
    "string matching": col("s").str.contains("b")
    | col("s").str.starts_with("A")
    | col("s").str.contains("^a.c", literal=False),
    "split on whitespace": col("s").str.split(),
    "split on a separator, slice": col("s").str.slice(0, 3).str.split(","),
    "when/then/otherwise": when(col("x") > 0)
    .then(lit("pos"))
    .when(col("x") < 0)
    .then(col("t"))
    .otherwise("zero"),
    "when/then without otherwise": when(col("y") > 1).then(col("y") * 2),
    "fill_null with a literal": col("x").fill_null(0) + col("y").fill_null(-1.5),
    "fill_null with a column": col("t").fill_null(col("s")),
}

SIZES = (1, 10, 200)
"""Batches of these many copies of :data:`ROWS`."""


def batch_of(copies: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(ROWS * copies, schema=SCHEMA)


class Kernels:
    """Counts the calls into ``pyarrow.compute`` while :attr:`on`: every public function
    of the module, and the ``call`` of every function object ``get_function`` gives
    (what a compiled ``Call`` holds)."""

    def __init__(self) -> None:
        self.calls = 0
        self.on = False

    def counted(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.on:
                self.calls += 1
            return fn(*args, **kwargs)

        return call

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.on = True
        try:
            yield
        finally:
            self.on = False

    def count(self, fn: Callable[[], Any]) -> int:
        before = self.calls
        with self.counting():
            fn()
        return self.calls - before


class _CountedFunction:
    """A ``pyarrow.compute.Function`` whose ``call`` is counted."""

    def __init__(self, fn: Any, kernels: Kernels) -> None:
        self._fn = fn
        self.call = kernels.counted(fn.call)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch) -> Kernels:
    k = Kernels()
    for name in dir(pc):
        value = getattr(pc, name)
        if name.startswith("_") or isinstance(value, type) or not callable(value):
            continue
        monkeypatch.setattr(pc, name, k.counted(value))
    get_function = pc.get_function
    monkeypatch.setattr(pc, "get_function", lambda name: _CountedFunction(get_function(name), k))
    return k


def calls_per_size(kernels: Kernels, e: expr.Expr) -> dict[int, int]:
    """Kernel calls of one evaluation of ``e`` (compiled as the operators compile it, by
    ``expr.compile_expr`` as it is now) on a batch of each of :data:`SIZES`."""
    fn, _ = expr.compile_expr(e, SCHEMA, "test")
    out = {}
    for copies in SIZES:
        batch = batch_of(copies)
        out[copies] = kernels.count(lambda batch=batch: expr.evaluate(fn, batch))
    return out


def per_batch(counts: dict[int, int]) -> bool:
    """The check: some kernel runs, and as often on 200 copies as on one."""
    return counts[SIZES[0]] > 0 and len(set(counts.values())) == 1


@pytest.mark.parametrize("what", sorted(EXPRESSIONS))
def test_an_expression_costs_the_same_calls_whatever_the_rows(kernels: Kernels, what: str) -> None:
    e = EXPRESSIONS[what]
    counts = calls_per_size(kernels, e)
    assert per_batch(counts), counts
    # ... and the values are right: those of the expression on each row alone.
    fn, _ = expr.compile_expr(e, SCHEMA, "test")
    whole = expr.evaluate(fn, batch_of(2)).to_pylist()
    alone = [expr.evaluate(fn, batch_of(2).slice(i, 1)).to_pylist()[0] for i in range(10)]
    assert whole == alone


def test_calls_grow_with_the_batches(kernels: Kernels) -> None:
    """The count is a count of batches: k batches cost k times one."""
    fn, _ = expr.compile_expr(EXPRESSIONS["when/then/otherwise"], SCHEMA, "test")
    batches = [batch_of(n) for n in (1, 3, 50, 7)]
    one = kernels.count(lambda: expr.evaluate(fn, batches[0]))
    assert kernels.count(lambda: [expr.evaluate(fn, b) for b in batches]) == 4 * one


# -- the mutants ---------------------------------------------------------------------------
def _row_by_row(fn: expr.Compiled) -> expr.Compiled:
    """``fn`` applied to each row of a batch alone, the results put together: the same
    values, one evaluation per row."""

    def rows(batch: pa.RecordBatch) -> Any:
        if batch.num_rows == 0:
            return fn(batch)
        parts = [expr.evaluate(fn, batch.slice(i, 1)) for i in range(batch.num_rows)]
        return pa.concat_arrays(parts)

    return rows


def _compile_per_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole expression evaluated per row (``compile_expr``, where operators get it)."""
    compile_expr = expr.compile_expr

    def per_row(e: Any, schema: pa.Schema, step: str) -> tuple[expr.Compiled, pa.DataType]:
        fn, t = compile_expr(e, schema, step)
        return _row_by_row(fn), t

    monkeypatch.setattr(expr, "compile_expr", per_row)
    monkeypatch.setattr(stream, "compile_expr", per_row)


def _calls_per_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each function call of an expression (``Call``: arithmetic, comparisons, string
    functions, ``fill_null``) evaluated per row, the rest per batch."""
    compile_call = expr.Call._compile

    def per_row(self: expr.Call) -> expr.Compiled:
        inner = compile_call(self)

        def rows(batch: pa.RecordBatch) -> Any:
            if batch.num_rows == 0:
                return inner(batch)
            parts = [expr.as_array(inner(batch.slice(i, 1)), 1) for i in range(batch.num_rows)]
            return pa.concat_arrays(parts)

        return rows

    monkeypatch.setattr(expr.Call, "_compile", per_row)


MUTANTS = {"compile_expr per row": _compile_per_row, "each Call per row": _calls_per_row}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
@pytest.mark.parametrize(
    "what",
    [
        "arithmetic",
        "comparisons and logic",
        "string functions",
        "when/then/otherwise",
        "fill_null with a literal",
    ],
)
def test_an_expression_evaluated_per_row_is_caught(
    kernels: Kernels, monkeypatch: pytest.MonkeyPatch, mutant: str, what: str
) -> None:
    e = EXPRESSIONS[what]
    fn, _ = expr.compile_expr(e, SCHEMA, "test")
    want = expr.evaluate(fn, batch_of(2)).to_pylist()
    MUTANTS[mutant](monkeypatch)
    counts = calls_per_size(kernels, e)
    assert not per_batch(counts), counts
    assert counts[SIZES[-1]] >= SIZES[-1] * len(ROWS)  # at least one call a row
    fn, _ = expr.compile_expr(e, SCHEMA, "test")
    assert expr.evaluate(fn, batch_of(2)).to_pylist() == want  # only the count tells


# -- in a dataflow -------------------------------------------------------------------------
def flow_calls(kernels: Kernels, monkeypatch: pytest.MonkeyPatch, copies: int) -> int:
    """The kernel calls inside compiled expressions over a run of ``select`` after
    ``where`` (each operator's expressions as ``stream.compile_expr`` gives them, counted
    only while they run) on 4 batches of ``copies`` copies of :data:`ROWS`, on one
    inline worker; the run's output is checked against the rows."""
    compile_expr = stream.compile_expr

    def counted(e: Any, schema: pa.Schema, step: str) -> tuple[expr.Compiled, pa.DataType]:
        fn, t = compile_expr(e, schema, step)

        def run(batch: pa.RecordBatch) -> Any:
            with kernels.counting():
                return fn(batch)

        return run, t

    with monkeypatch.context() as m:
        m.setattr(stream, "compile_expr", counted)
        flow = Dataflow("per-batch")
        inp = table_input(flow, SCHEMA)
        out = inp.table.where(col("s").is_not_null() & (col("x") != 0)).select(
            band=EXPRESSIONS["when/then/otherwise"],
            n=EXPRESSIONS["arithmetic"],
            u=col("s").str.upper(),
            f=col("y").fill_null(0.0) > 1,
        )
        out.collect("out")
    for _ in range(4):
        inp.send(pa.Table.from_batches([batch_of(copies)]))
    before = kernels.calls
    result = flow.run(workers=1, backend="inline")
    rows = [r for _, table in result["out"] for r in table.to_pylist()]
    assert len(rows) == 4 * copies * 3  # the rows with a string and x != 0
    assert sorted({r["u"] for r in rows}) == ["", " B,A ", "AB C"]
    return kernels.calls - before


def test_a_dataflow_evaluates_expressions_per_batch(
    kernels: Kernels, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = {copies: flow_calls(kernels, monkeypatch, copies) for copies in SIZES}
    assert per_batch(counts), counts


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_dataflow_whose_expressions_run_per_row_is_caught(
    kernels: Kernels, monkeypatch: pytest.MonkeyPatch, mutant: str
) -> None:
    MUTANTS[mutant](monkeypatch)
    counts = {copies: flow_calls(kernels, monkeypatch, copies) for copies in SIZES}
    assert not per_batch(counts), counts
