"""Expressions over the columns of a table stream, in the style of Polars and PySpark.

An expression is a tree (``col("a") + 1 > col("b")``) that an operator compiles once,
into a Python closure of ``pyarrow.compute`` calls, and evaluates once per batch: the
work per row is all in Arrow's C++ kernels. Compiling against the stream's schema
evaluates the closure on an empty batch of that schema, so a missing column, a type
that does not fit a function or a bad cast fails when the graph is built, naming the
expression, before anything runs.

Nulls propagate as in Arrow (and SQL): ``null + 1`` is null, a comparison with null is
null, and ``where`` drops rows whose predicate is null (``fill_null`` decides otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.table.ascii import split_ascii

Value = Any
"""What an expression evaluates to on a batch: a ``pyarrow.Array`` (or a scalar, for a
literal alone, broadcast by the functions that take it)."""

Compiled = Callable[[pa.RecordBatch], Value]


class ExprError(ValueError):
    """An expression does not fit the schema it is compiled against."""


class Expr:
    """A column expression. Build with :func:`col`, :func:`lit` and :func:`when`."""

    def _compile(self) -> Compiled:  # pragma: no cover - every subclass has one
        raise NotImplementedError

    @property
    def name(self) -> str:
        """The output column's name: the alias, else the first column it reads."""
        return "literal"

    def __repr__(self) -> str:
        return self._show()

    def _show(self) -> str:  # pragma: no cover - every subclass has one
        raise NotImplementedError

    def columns(self) -> set[str]:
        """The columns the expression reads."""
        return set()

    # -- operators -----------------------------------------------------------------------
    def _bin(self, fn: str, other: Any, symbol: str, swap: bool = False) -> Expr:
        a, b = self, _expr(other)
        if swap:
            a, b = b, a
        return Call(fn, (a, b), symbol)

    def __add__(self, other: Any) -> Expr:
        return self._bin("add_checked", other, "+")

    def __radd__(self, other: Any) -> Expr:
        return self._bin("add_checked", other, "+", swap=True)

    def __sub__(self, other: Any) -> Expr:
        return self._bin("subtract_checked", other, "-")

    def __rsub__(self, other: Any) -> Expr:
        return self._bin("subtract_checked", other, "-", swap=True)

    def __mul__(self, other: Any) -> Expr:
        return self._bin("multiply_checked", other, "*")

    def __rmul__(self, other: Any) -> Expr:
        return self._bin("multiply_checked", other, "*", swap=True)

    def __truediv__(self, other: Any) -> Expr:
        return TrueDiv(self, _expr(other))

    def __rtruediv__(self, other: Any) -> Expr:
        return TrueDiv(_expr(other), self)

    def __floordiv__(self, other: Any) -> Expr:
        return FloorDiv(self, _expr(other))

    def __mod__(self, other: Any) -> Expr:
        return Mod(self, _expr(other))

    def __pow__(self, other: Any) -> Expr:
        return self._bin("power_checked", other, "**")

    def __neg__(self) -> Expr:
        return Call("negate_checked", (self,), "-")

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._bin("equal", other, "==")

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._bin("not_equal", other, "!=")

    def __lt__(self, other: Any) -> Expr:
        return self._bin("less", other, "<")

    def __le__(self, other: Any) -> Expr:
        return self._bin("less_equal", other, "<=")

    def __gt__(self, other: Any) -> Expr:
        return self._bin("greater", other, ">")

    def __ge__(self, other: Any) -> Expr:
        return self._bin("greater_equal", other, ">=")

    def __and__(self, other: Any) -> Expr:
        return self._bin("and_kleene", other, "&")

    def __rand__(self, other: Any) -> Expr:
        return self._bin("and_kleene", other, "&", swap=True)

    def __or__(self, other: Any) -> Expr:
        return self._bin("or_kleene", other, "|")

    def __ror__(self, other: Any) -> Expr:
        return self._bin("or_kleene", other, "|", swap=True)

    def __invert__(self) -> Expr:
        return Call("invert", (self,), "~")

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise TypeError(
            f"the truth of {self!r} is known only per row: combine conditions with & | ~ "
            "(not and / or / not), and compare with == inside where(...)"
        )

    # -- methods -------------------------------------------------------------------------
    def alias(self, name: str) -> Expr:
        """The same values under the column name ``name``."""
        return Alias(self, name)

    def is_null(self) -> Expr:
        return Call("is_null", (self,), "is_null")

    def is_not_null(self) -> Expr:
        return Call("is_valid", (self,), "is_not_null")

    def fill_null(self, value: Any) -> Expr:
        """Nulls replaced by ``value`` (a literal or an expression)."""
        return Call("coalesce", (self, _expr(value)), "fill_null")

    def cast(self, to: pa.DataType | str) -> Expr:
        """The values as type ``to`` (a ``pyarrow`` type or its name: ``"int64"``...);
        a value that does not fit fails the step, naming it."""
        return Cast(self, to if isinstance(to, pa.DataType) else pa.type_for_alias(to))

    def is_in(self, values: Sequence[Any]) -> Expr:
        return IsIn(self, tuple(values))

    def abs(self) -> Expr:
        return Call("abs_checked", (self,), "abs")

    def round(self, digits: int = 0) -> Expr:
        return Call("round", (self,), "round", {"ndigits": digits})

    @property
    def str(self) -> StrNamespace:
        """String functions: ``col("w").str.lower()``..."""
        return StrNamespace(self)

    # -- aggregations (for group_by(...).agg) ---------------------------------------------
    def sum(self) -> Agg:
        return Agg("sum", self)

    def min(self) -> Agg:
        return Agg("min", self)

    def max(self) -> Agg:
        return Agg("max", self)

    def mean(self) -> Agg:
        return Agg("mean", self)

    def first(self) -> Agg:
        return Agg("first", self)

    def last(self) -> Agg:
        return Agg("last", self)

    def list(self) -> Agg:
        return Agg("list", self)

    def count(self) -> Agg:
        """The rows of the group where this expression is not null."""
        return Agg("count", self)


class StrNamespace:
    """``expr.str``: string functions (UTF-8)."""

    def __init__(self, expr: Expr) -> None:
        self._e = expr

    def lower(self) -> Expr:
        return Call("utf8_lower", (self._e,), "str.lower")

    def upper(self) -> Expr:
        return Call("utf8_upper", (self._e,), "str.upper")

    def len(self) -> Expr:
        return Call("utf8_length", (self._e,), "str.len")

    def strip(self) -> Expr:
        return Call("utf8_trim_whitespace", (self._e,), "str.strip")

    def contains(self, pattern: str, literal: bool = True) -> Expr:
        """Whether the string holds ``pattern`` (a regular expression with
        ``literal=False``)."""
        fn = "match_substring" if literal else "match_substring_regex"
        return Call(fn, (self._e,), "str.contains", {"pattern": pattern})

    def starts_with(self, prefix: str) -> Expr:
        return Call("starts_with", (self._e,), "str.starts_with", {"pattern": prefix})

    def split(self, sep: str | None = None) -> Expr:
        """A list of the parts; ``sep=None`` splits on runs of whitespace (and drops
        empty parts), as ``str.split()`` does."""
        if sep is None:
            return SplitWhitespace(self._e)
        return Call("split_pattern", (self._e,), "str.split", {"pattern": sep})

    def slice(self, start: int, stop: int | None = None) -> Expr:
        """Characters ``start`` up to ``stop`` (Python's slice, for one string)."""
        return Call(
            "utf8_slice_codeunits",
            (self._e,),
            "str.slice",
            {"start": start, "stop": stop if stop is not None else 2**31 - 1},
        )


# -- the node types ----------------------------------------------------------------------
@dataclass(eq=False, repr=False)
class Col(Expr):
    column: str

    @property
    def name(self) -> str:
        return self.column

    def columns(self) -> set[str]:
        return {self.column}

    def _show(self) -> str:
        return f"col({self.column!r})"

    def _compile(self) -> Compiled:
        name = self.column

        def column(batch: pa.RecordBatch) -> Value:
            return batch.column(name)

        return column


@dataclass(eq=False, repr=False)
class Lit(Expr):
    value: Any

    def _show(self) -> str:
        return f"lit({self.value!r})"

    def _compile(self) -> Compiled:
        scalar = self.value if isinstance(self.value, pa.Scalar) else pa.scalar(self.value)
        return lambda batch: scalar


@dataclass(eq=False, repr=False)
class Alias(Expr):
    inner: Expr
    alias_name: str

    @property
    def name(self) -> str:
        return self.alias_name

    def columns(self) -> set[str]:
        return self.inner.columns()

    def _show(self) -> str:
        return f"{self.inner!r}.alias({self.alias_name!r})"

    def _compile(self) -> Compiled:
        return self.inner._compile()


@dataclass(eq=False, repr=False)
class Call(Expr):
    fn: str
    args: tuple[Expr, ...]
    symbol: str
    options: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        for a in self.args:
            if not isinstance(a, Lit):
                return a.name
        return "literal"

    def columns(self) -> set[str]:
        return set().union(*(a.columns() for a in self.args))

    def _show(self) -> str:
        if len(self.args) == 2 and not self.symbol[0].isalpha():
            return f"({self.args[0]!r} {self.symbol} {self.args[1]!r})"
        if len(self.args) == 1 and self.symbol in ("-", "~"):
            return f"{self.symbol}{self.args[0]!r}"
        extra = "" if not self.options else ", ".join(f"{v!r}" for v in self.options.values())
        rest = ", ".join(repr(a) for a in self.args[1:])
        inside = ", ".join(x for x in (rest, extra) if x)
        return f"{self.args[0]!r}.{self.symbol}({inside})"

    def _compile(self) -> Compiled:
        fn = pc.get_function(self.fn)  # fails here for a function Arrow lacks
        parts = [a._compile() for a in self.args]
        options = self.options
        call = fn.call
        if len(parts) == 1:
            (only,) = parts
            if options:
                opts = _options(self.fn, options)
                return lambda batch: call([only(batch)], opts)
            return lambda batch: call([only(batch)])
        if len(parts) == 2:
            a, b = parts
            return lambda batch: call([a(batch), b(batch)])
        return lambda batch: call([p(batch) for p in parts])


def _options(fn: str, options: dict[str, Any]) -> Any:
    kinds = {
        "match_substring": pc.MatchSubstringOptions,
        "match_substring_regex": pc.MatchSubstringOptions,
        "starts_with": pc.MatchSubstringOptions,
        "split_pattern": pc.SplitPatternOptions,
        "utf8_slice_codeunits": pc.SliceOptions,
        "round": pc.RoundOptions,
    }
    return kinds[fn](**options)


@dataclass(eq=False, repr=False)
class SplitWhitespace(Expr):
    inner: Expr

    @property
    def name(self) -> str:
        return self.inner.name

    def columns(self) -> set[str]:
        return self.inner.columns()

    def _show(self) -> str:
        return f"{self.inner!r}.str.split()"

    def _compile(self) -> Compiled:
        inner = self.inner._compile()
        # ASCII text by numpy passes over its bytes (no empty parts arise); other text
        # by Arrow's code-point kernel, then the empty strings that leading and trailing
        # blanks leave dropped.
        split = pc.get_function("utf8_split_whitespace").call

        def words(batch: pa.RecordBatch) -> Value:
            text = inner(batch)
            fast = split_ascii(text)
            if fast is not None:
                return fast
            parts = split([text])
            flat = parts.flatten() if hasattr(parts, "flatten") else parts
            if len(flat) and pc.any(pc.equal(flat, "")).as_py():
                return _drop_empty(parts)
            return parts

        return words


def _drop_empty(lists: pa.Array) -> pa.Array:
    """A list array without its empty strings (rare: leading or trailing blanks)."""
    import numpy as np

    flat = lists.flatten()
    keep = pc.not_equal(flat, "")
    parents = pc.list_parent_indices(lists).filter(keep).to_numpy()
    sizes = np.bincount(parents, minlength=len(lists))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(keep), mask=lists.is_null())


@dataclass(eq=False, repr=False)
class Cast(Expr):
    inner: Expr
    to: pa.DataType

    @property
    def name(self) -> str:
        return self.inner.name

    def columns(self) -> set[str]:
        return self.inner.columns()

    def _show(self) -> str:
        return f"{self.inner!r}.cast({self.to})"

    def _compile(self) -> Compiled:
        inner, to = self.inner._compile(), self.to
        return lambda batch: pc.cast(inner(batch), to)


@dataclass(eq=False, repr=False)
class IsIn(Expr):
    inner: Expr
    values: tuple[Any, ...]

    @property
    def name(self) -> str:
        return self.inner.name

    def columns(self) -> set[str]:
        return self.inner.columns()

    def _show(self) -> str:
        return f"{self.inner!r}.is_in({list(self.values)!r})"

    def _compile(self) -> Compiled:
        inner = self.inner._compile()
        values = pa.array(self.values)
        return lambda batch: pc.is_in(inner(batch), value_set=values)


@dataclass(eq=False, repr=False)
class _Binary(Expr):
    """An operator of two expressions computed by Python's rules (``/``, ``//``, ``%``):
    named after its column operand, shown as ``(a op b)``."""

    a: Expr
    b: Expr
    symbol = ""

    @property
    def name(self) -> str:
        return self.a.name if not isinstance(self.a, Lit) else self.b.name

    def columns(self) -> set[str]:
        return self.a.columns() | self.b.columns()

    def _show(self) -> str:
        return f"({self.a!r} {self.symbol} {self.b!r})"


@dataclass(eq=False, repr=False)
class TrueDiv(_Binary):
    """``a / b``: a float quotient, whatever the operands' types (as Python's ``/``)."""

    symbol = "/"

    def _compile(self) -> Compiled:
        a, b = self.a._compile(), self.b._compile()

        def divide(batch: pa.RecordBatch) -> Value:
            x, y = a(batch), b(batch)
            return pc.divide(_float(x), _float(y))

        return divide


def _float(v: Value) -> Value:
    t = v.type
    if pa.types.is_floating(t):
        return v
    return pc.cast(v, pa.float64())


@dataclass(eq=False, repr=False)
class FloorDiv(_Binary):
    """``a // b``: the floor of the quotient, as Python's ``//`` (also for negatives)."""

    symbol = "//"

    def _compile(self) -> Compiled:
        a, b = self.a._compile(), self.b._compile()

        def floordiv(batch: pa.RecordBatch) -> Value:
            x, y = a(batch), b(batch)
            if pa.types.is_integer(x.type) and pa.types.is_integer(y.type):
                q = pc.divide_checked(x, y)  # truncates toward zero
                r = pc.subtract(x, pc.multiply(q, y))
                # one less where the remainder is not zero and the signs differ
                fix = pc.and_(pc.not_equal(r, 0), pc.not_equal(pc.less(r, 0), pc.less(y, 0)))
                return pc.subtract(q, pc.cast(fix, q.type))
            return pc.floor(pc.divide(_float(x), _float(y)))

        return floordiv


@dataclass(eq=False, repr=False)
class Mod(_Binary):
    """``a % b`` with the sign of ``b``, as Python's ``%``."""

    symbol = "%"

    def _compile(self) -> Compiled:
        floordiv = FloorDiv(self.a, self.b)._compile()
        a, b = self.a._compile(), self.b._compile()

        def mod(batch: pa.RecordBatch) -> Value:
            x, y = a(batch), b(batch)
            return pc.subtract(x, pc.multiply(floordiv(batch), y))

        return mod


@dataclass(eq=False, repr=False)
class When(Expr):
    """``when(c1).then(v1).when(c2).then(v2).otherwise(v)``."""

    cases: tuple[tuple[Expr, Expr], ...]
    default: Expr | None = None

    def when(self, condition: Any) -> _Then:
        return _Then(self, _expr(condition))

    def otherwise(self, value: Any) -> Expr:
        return When(self.cases, _expr(value))

    @property
    def name(self) -> str:
        return self.cases[0][1].name

    def columns(self) -> set[str]:
        out: set[str] = set()
        for c, v in self.cases:
            out |= c.columns() | v.columns()
        return out | (self.default.columns() if self.default is not None else set())

    def _show(self) -> str:
        text = "".join(f".when({c!r}).then({v!r})" for c, v in self.cases)[1:]
        return text + (f".otherwise({self.default!r})" if self.default is not None else "")

    def _compile(self) -> Compiled:
        conds = [c._compile() for c, _ in self.cases]
        values = [v._compile() for _, v in self.cases]
        default = self.default._compile() if self.default is not None else None

        def choose(batch: pa.RecordBatch) -> Value:
            n = batch.num_rows
            out = default(batch) if default is not None else pa.nulls(n)
            for cond, value in zip(reversed(conds), reversed(values)):
                c = pc.fill_null(as_array(cond(batch), n), False)
                v, o = value(batch), out  # a literal stays a scalar: if_else broadcasts it
                if o.type == pa.null():
                    o = pc.cast(o, v.type)
                out = pc.if_else(c, v, o)
            return out

        return choose


@dataclass
class _Then:
    head: When
    condition: Expr

    def then(self, value: Any) -> When:
        return When((*self.head.cases, (self.condition, _expr(value))), self.head.default)


def when(condition: Any) -> _Then:
    """Start a conditional: ``when(col("x") > 0).then("pos").otherwise("neg")``."""
    return _Then(When(()), _expr(condition))


def as_array(v: Value, n: int) -> pa.Array:
    """``v`` as an array of ``n`` rows: an array as it is, a scalar repeated (numbers by
    numpy's ``full``)."""
    if isinstance(v, pa.Scalar):
        t = v.type
        if v.is_valid and (pa.types.is_integer(t) or pa.types.is_floating(t)):
            return pa.array(np.full(n, v.as_py(), dtype=t.to_pandas_dtype()), t)  # ~5x repeat's
        return pa.repeat(v, n)
    return v


@dataclass(eq=False, repr=False)
class Agg:
    """An aggregation for ``group_by(...).agg(...)``: ``col("x").sum().alias("total")``."""

    kind: str
    of: Expr | None
    alias_name: str | None = None

    def alias(self, name: str) -> Agg:
        return Agg(self.kind, self.of, name)

    @property
    def name(self) -> str:
        if self.alias_name is not None:
            return self.alias_name
        return "count" if self.of is None else self.of.name

    def __repr__(self) -> str:
        inner = "" if self.of is None else f"{self.of!r}."
        return f"{inner}{self.kind}()" + (f".alias({self.alias_name!r})" if self.alias_name else "")


def count() -> Agg:
    """The rows of the group."""
    return Agg("count_all", None)


# -- entry points --------------------------------------------------------------------------
def col(name: str) -> Expr:
    """The column ``name``."""
    if not isinstance(name, str):
        raise TypeError(f"col takes a column name, got {name!r}")
    return Col(name)


def lit(value: Any) -> Expr:
    """A constant, broadcast to every row."""
    return Lit(value)


def _expr(value: Any) -> Expr:
    return value if isinstance(value, Expr) else Lit(value)


def compile_expr(expr: Any, schema: pa.Schema, step: str) -> tuple[Compiled, pa.DataType]:
    """Compile ``expr`` for batches of ``schema``: the evaluator and its result type.

    Raises :class:`ExprError` naming the step, the expression and the column (a missing
    one, or the types a function has no kernel for), before anything runs."""
    e = _expr(expr)
    missing = sorted(e.columns() - set(schema.names))
    if missing:
        raise ExprError(
            f"{step}: {e!r} reads column {missing[0]!r}, which the stream does not have "
            f"(its columns: {', '.join(schema.names)})"
        )
    try:
        fn = e._compile()
        empty = pa.RecordBatch.from_pylist([], schema=schema)
        result = fn(empty)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as err:
        types = ", ".join(f"{c}: {schema.field(c).type}" for c in sorted(e.columns()))
        raise ExprError(f"{step}: {e!r} does not fit the columns ({types}): {err}") from None
    return fn, result.type


def evaluate(fn: Compiled, batch: pa.RecordBatch) -> pa.Array:
    """``fn`` on ``batch`` as an array of the batch's length (a literal broadcast)."""
    return as_array(fn(batch), batch.num_rows)
