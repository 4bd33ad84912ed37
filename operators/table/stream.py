"""Table streams: timely streams whose records are Arrow batches of a known schema.

A :class:`Table` pairs a :class:`~timely.Stream` with the ``pyarrow.Schema`` every one
of its batches has, known when the graph is built: each operator checks its
expressions against it and computes the schema it sends (a missing column, or a type
that does not fit, is a :class:`~timely.GraphBuildError` naming the step and the
column). Operators are per time, as the row LINQ's are; keyed ones exchange batches by
their key columns (:func:`timely.exchange_columns`: the same bins as the row path).

Ways in: :func:`table_input` (driver-fed), ``stream.as_table(schema)`` (a stream of
batches, e.g. a source that reads batches) and ``stream.to_table(schema)`` (rows);
``table.to_rows()`` goes back to the row LINQ.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from operators.table.expr import Agg, Col, Expr, ExprError, col, compile_expr, lit
from operators.table.loops import ArrangedJoin, LeastOnly, LeastPerTime, RoundSplit
from operators.table.running import RunningAggregate
from operators.table.streaming import StreamingJoin
from operators.table.vertices import (
    Aggregate,
    Distinct,
    Explode,
    GatherTables,
    Join,
    MapBatches,
    Project,
    TopK,
    ToRows,
    ToTable,
    first_k,
    group_aggregate,
    to_batch,
)
from operators.table.windows import WindowAggregate
from operators.windows import _sizes
from timely import (
    Dataflow,
    GraphBuildError,
    InputHandle,
    Sink,
    Stream,
    broadcast,
    exchange,
    exchange_columns,
    pipeline,
)


def _schema(schema: Any) -> pa.Schema:
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, Mapping):
        return pa.schema([(name, _type(t)) for name, t in schema.items()])
    raise GraphBuildError(
        f"a table's schema is a pyarrow.Schema or a mapping of column names to types "
        f"(pyarrow types or their names, e.g. {{'word': 'string', 'n': 'int64'}}), got {schema!r}"
    )


def _type(t: Any) -> pa.DataType:
    if isinstance(t, pa.DataType):
        return t
    try:
        return pa.type_for_alias(t)
    except (ValueError, TypeError):
        raise GraphBuildError(f"{t!r} is not an Arrow type (e.g. 'int64', 'string')") from None


def _compile(expr: Any, schema: pa.Schema, step: str) -> tuple[Any, pa.DataType]:
    try:
        return compile_expr(expr, schema, step)
    except ExprError as e:
        raise GraphBuildError(str(e)) from None


def _named(exprs: tuple[Any, ...], named: Mapping[str, Any]) -> list[tuple[str, Expr]]:
    out: list[tuple[str, Expr]] = []
    for e in exprs:
        e = col(e) if isinstance(e, str) else e
        if not isinstance(e, Expr):
            raise GraphBuildError(
                f"select takes column names and expressions (col, lit, when...), got {e!r}; "
                "give a constant a name: select(k=lit(3))"
            )
        out.append((e.name, e))
    for name, e in named.items():
        e = e if isinstance(e, Expr) else col(e) if isinstance(e, str) else None
        if e is None:
            raise GraphBuildError(f"select: {name}= takes an expression, got {named[name]!r}")
        out.append((name, e))
    names = [n for n, _ in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise GraphBuildError(
            f"select: column {dupes[0]!r} given twice; name one of them with .alias(...)"
        )
    return out


class Table:
    """A stream of Arrow record batches of one schema (see the module docstring)."""

    def __init__(self, stream: Stream, schema: pa.Schema, demand: Demand | None = None) -> None:
        self.stream = stream
        self.schema = schema
        self.demand = demand
        """For a step that can send fewer columns (a join: projection push-down), what
        its readers use; ``select`` says which columns it reads."""

    @property
    def flow(self) -> Dataflow:
        return self.stream.flow

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name}: {f.type}" for f in self.schema)
        return f"Table({cols})"

    def _then(
        self, factory: Callable[[], Any], schema: pa.Schema, name: str, channel: Any = None
    ) -> Table:
        out = self.flow.vertex([(self.stream, channel or pipeline())], factory, name=name)[0]
        return Table(out, schema)

    # -- stateless -----------------------------------------------------------------------
    def select(self, *exprs: Any, name: str = "select", **named: Any) -> Table:
        """Columns computed from each row: ``select("word", n=col("n") * 2)``."""
        cols = _named(exprs, named)
        compiled, fields = [], []
        for out_name, e in cols:
            fn, t = _compile(e, self.schema, f"step {name!r}")
            compiled.append((out_name, fn))
            fields.append(pa.field(out_name, t))
        schema = pa.schema(fields)
        out = self._then(lambda: Project(compiled, schema), schema, name)
        if self.demand is not None:
            self.demand.uses[out.stream.vertex] = set().union(*(e.columns() for _, e in cols))
        return out

    def with_columns(self, *exprs: Any, name: str = "with_columns", **named: Any) -> Table:
        """Every column, with the given ones added (or replaced, by name)."""
        new = _named(exprs, named)
        replaced = {n for n, _ in new}
        keep = [(n, col(n)) for n in self.schema.names if n not in replaced]
        ordered = [(n, e) for n, e in [*keep, *new]]
        ordered.sort(key=lambda ne: self._position(ne[0]))
        return self.select(**dict(ordered), name=name)

    def _position(self, column: str) -> int:
        names = self.schema.names
        return names.index(column) if column in names else len(names)

    def where(self, predicate: Any, name: str = "where") -> Table:
        """The rows whose ``predicate`` is true (null counts as false)."""
        fn, t = _compile(predicate, self.schema, f"step {name!r}")
        if not pa.types.is_boolean(t):
            raise GraphBuildError(
                f"step {name!r}: the predicate {predicate!r} gives {t}, not bool; compare "
                "it (== != < ...) or test it (is_null(), str.contains(...))"
            )
        schema = self.schema
        return self._then(lambda: Project([], schema, fn), schema, name)

    def explode(self, column: str, name: str = "explode") -> Table:
        """One row per item of the list column ``column`` (rows with an empty or null
        list go)."""
        if column not in self.schema.names:
            raise GraphBuildError(f"step {name!r}: no column {column!r} to explode")
        t = self.schema.field(column).type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
            raise GraphBuildError(f"step {name!r}: column {column!r} is {t}, not a list")
        schema = self.schema.set(
            self.schema.get_field_index(column), pa.field(column, t.value_type)
        )
        return self._then(lambda: Explode(column, schema), schema, name)

    def map_batches(
        self, fn: Callable[[pa.RecordBatch], Any], schema: Any, name: str = "map_batches"
    ) -> Table:
        """The escape hatch: ``fn(batch)`` returns a batch or table of ``schema``."""
        out = _schema(schema)
        return self._then(lambda: MapBatches(fn, out), out, name)

    def map_rows(
        self, fn: Callable[[dict[str, Any]], dict[str, Any]], schema: Any, name: str = "map_rows"
    ) -> Table:
        """``fn`` per row (a dict in, a dict out): the slow path, Python per row."""
        out = _schema(schema)

        def per_row(batch: pa.RecordBatch) -> pa.RecordBatch:
            return pa.RecordBatch.from_pylist([fn(r) for r in batch.to_pylist()], schema=out)

        return self._then(lambda: MapBatches(per_row, out), out, name)

    def concat(self, *others: Table, name: str = "concat") -> Table:
        """The batches of this table and of ``others`` (which must have its schema)."""
        for o in others:
            if o.schema != self.schema:
                raise GraphBuildError(
                    f"step {name!r}: concat needs one schema; {o!r} is not {self!r}"
                )
        return Table(self.stream.concat(*(o.stream for o in others)), self.schema)

    def exchange(self, *keys: str, name: str = "exchange") -> Table:
        """Move each row to the worker of its key (the same bins as the row path)."""
        self._check_keys(keys, name)
        schema = self.schema
        return self._then(lambda: Project([], schema), schema, name, exchange_columns(*keys))

    def _check_keys(self, keys: Iterable[str], step: str) -> None:
        for k in keys:
            if k not in self.schema.names:
                raise GraphBuildError(
                    f"step {step!r}: no key column {k!r} (the columns: "
                    f"{', '.join(self.schema.names)})"
                )

    # -- per time ------------------------------------------------------------------------
    def group_by(self, *keys: str) -> GroupedTable:
        """``group_by("ad").agg(count(), col("price").sum())``: per time."""
        return GroupedTable(self, list(keys))

    def distinct(self, *keys: str, name: str = "distinct") -> Table:
        """Per time, one row per distinct value of ``keys`` (every column by default)."""
        ks = list(keys) or list(self.schema.names)
        self._check_keys(ks, name)
        schema = self.schema
        pre = self._then(lambda: Distinct(ks, schema, per_time=False), schema, f"{name}.local")
        return pre._then(lambda: Distinct(ks, schema), schema, name, exchange_columns(*ks))

    def join(
        self,
        other: Table,
        on: str | list[str] | None = None,
        left_on: str | list[str] | None = None,
        right_on: str | list[str] | None = None,
        how: str = "inner",
        suffix: str = "_right",
        name: str = "join",
    ) -> Table:
        """Per time, the rows of this table joined with ``other``'s on equal keys:
        ``how`` is ``"inner"``, ``"left"`` (nulls where ``other`` has no match),
        ``"semi"`` (rows with a match) or ``"anti"`` (rows without). The output has this
        table's columns, then ``other``'s but its keys (equal to this table's), suffixed
        with ``suffix`` where a name is taken.

        ``how="cross"`` (no keys): every row of this table with every row of ``other``
        of the same time. ``other`` is sent whole to every worker (a broadcast: put the
        small table there, a one-row aggregate to add a scalar to every row); this
        table's rows stay where they are. An empty side makes an empty output."""
        if how not in ("inner", "left", "semi", "anti", "cross"):
            raise GraphBuildError(
                f"step {name!r}: how must be 'inner', 'left', 'semi', 'anti' or 'cross', "
                f"got {how!r}"
            )
        if how == "cross":
            if on is not None or left_on is not None or right_on is not None:
                raise GraphBuildError(
                    f"step {name!r}: a cross join pairs every row with every row of the "
                    "time; it takes no keys (on=, left_on=, right_on=)"
                )
            lk: list[str] = []
            rk: list[str] = []
            out, right_names = self._join_schema(other, rk, how, suffix, name)
            inputs = [(self.stream, pipeline()), (other.stream, broadcast())]
        else:
            lk, rk, out, right_names = self._join_plan(
                other, on, left_on, right_on, how, suffix, name
            )
            inputs = [(self.stream, exchange_columns(*lk)), (other.stream, exchange_columns(*rk))]
        left_schema = self.schema
        schemas = (left_schema, other.schema)
        depths = (self.stream.scope.depth, other.stream.scope.depth)
        if depths[0] != depths[1]:
            # One side comes from outside the loop the other is in: it is arranged once
            # per epoch instead of sent again (and hashed again) at every round.
            outer = 0 if depths[0] < depths[1] else 1
            if how not in ("inner", "cross") and outer == 0:
                raise GraphBuildError(
                    f"step {name!r}: a {how!r} join keeps the left side's rows, and the "
                    "left side here is from outside the loop; put the loop's table on the "
                    "left"
                )
            d = depths[outer] + 1
            demand = Demand(self.flow)
            s = self.flow.vertex(
                inputs,
                lambda: ArrangedJoin(
                    outer, (lk, rk), how, schemas, out, right_names, d, demand.needed()
                ),
                name=name,
                loop_invariant=False,
            )[0]
            demand.stream = s
            return Table(s, out, demand)
        demand = Demand(self.flow)
        s = self.flow.vertex(
            inputs,
            lambda: Join(lk, rk, how, schemas, out, right_names, demand.needed()),
            name=name,
        )[0]
        demand.stream = s
        return Table(s, out, demand)

    def _join_plan(
        self,
        other: Table,
        on: str | list[str] | None,
        left_on: str | list[str] | None,
        right_on: str | list[str] | None,
        how: str,
        suffix: str,
        name: str,
    ) -> tuple[list[str], list[str], pa.Schema, dict[str, str]]:
        """The keys of both sides (checked: present, of one type), the output schema and
        the right side's output names."""
        lk = _keys(on if on is not None else left_on, name, "left_on")
        rk = _keys(on if on is not None else right_on, name, "right_on")
        if len(lk) != len(rk):
            raise GraphBuildError(f"step {name!r}: {len(lk)} left keys but {len(rk)} right keys")
        self._check_keys(lk, name)
        other._check_keys(rk, name)
        for a, b in zip(lk, rk):
            ta, tb = self.schema.field(a).type, other.schema.field(b).type
            if ta != tb:
                raise GraphBuildError(
                    f"step {name!r}: key {a!r} is {ta} but {b!r} is {tb}; cast one "
                    f"(select(..., {b}=col({b!r}).cast('{ta}')))"
                )
        out, right_names = self._join_schema(other, rk, how, suffix, name)
        return lk, rk, out, right_names

    def _join_schema(
        self, other: Table, rk: list[str], how: str, suffix: str, name: str
    ) -> tuple[pa.Schema, dict[str, str]]:
        """A join's output schema and the right side's output names: this table's
        columns, then ``other``'s but its keys ``rk`` (none for a semi or anti join)."""
        left_schema = self.schema
        if how in ("semi", "anti"):
            out = left_schema
            right_names: dict[str, str] = {}
        else:
            fields = list(left_schema)
            right_names = {}
            for f in other.schema:
                if f.name in rk:
                    continue  # a key: equal to the left's (coalesced into it, as Polars does)
                out_name = f.name if f.name not in left_schema.names else f.name + suffix
                right_names[f.name] = out_name
                nullable_type = f.type
                fields.append(pa.field(out_name, nullable_type))
            names = [f.name for f in fields]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise GraphBuildError(
                    f"step {name!r}: output column {twice[0]!r} twice (a column of "
                    f"{other!r} suffixed {suffix!r} is one of this table's); rename one "
                    "with select, or give another suffix="
                )
            out = pa.schema(fields)
        return out, right_names

    def join_streaming(
        self,
        other: Table,
        on: str | list[str] | None = None,
        left_on: str | list[str] | None = None,
        right_on: str | list[str] | None = None,
        within: int | None = None,
        suffix: str = "_right",
        name: str = "join_streaming",
    ) -> Table:
        """Rows joined with ``other``'s on equal keys **across epochs**: each matching
        pair once, at the later of the two epochs, when it completes (a static table
        sent at epoch 0 joins every later epoch). Both sides are kept, as Arrow, in the
        run's state; ``within=w`` keeps only pairs whose epochs differ by at most ``w``
        and forgets rows ``w`` epochs after theirs. The output is ``join``'s (inner)."""
        if within is not None and (
            not isinstance(within, int) or isinstance(within, bool) or within < 0
        ):
            raise GraphBuildError(
                f"step {name!r}: within must be an int >= 0 (epochs) or None, got {within!r}"
            )
        if self.stream.scope.depth or other.stream.scope.depth:
            raise GraphBuildError(
                f"step {name!r}: join_streaming keeps rows across epochs, which a loop's "
                "rounds do not have; use join inside iterate"
            )
        lk, rk, out, right_names = self._join_plan(
            other, on, left_on, right_on, "inner", suffix, name
        )
        schemas = (self.schema, other.schema)
        s = self.flow.vertex(
            [(self.stream, exchange_columns(*lk)), (other.stream, exchange_columns(*rk))],
            lambda: StreamingJoin((lk, rk), schemas, out, right_names, within),
            name=name,
            loop_invariant=False,
        )[0]
        return Table(s, out)

    def top_k(
        self, k: int, by: str | list[str], descending: bool = True, name: str = "top_k"
    ) -> Table:
        """Per time, the ``k`` rows first when sorted by ``by`` (largest first, unless
        ``descending=False``; nulls last; ties in arrival order), sorted, on worker 0.
        Each batch is cut to its own first ``k`` before the exchange, so only ``k`` rows a
        batch travel. ``top_k(n, by)`` with ``n`` at least the rows of a time is a sort."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise GraphBuildError(f"step {name!r}: k must be an int >= 1, got {k!r}")
        columns = _keys(by, name, "by")
        self._check_keys(columns, name)
        direction = "descending" if descending else "ascending"
        order = [(c, direction) for c in columns]
        schema = self.schema
        cut = self._then(
            lambda: MapBatches(lambda b: first_k(b, k, order), schema), schema, f"{name}.cut"
        )
        return cut._then(lambda: TopK(k, order, schema), schema, name, exchange(_zero))

    # -- loops ---------------------------------------------------------------------------
    def iterate(
        self,
        body: Callable[[Table], Table],
        until: str = "fixpoint",
        min_by: tuple[str, str] | None = None,
        rounds: int | None = None,
        name: str = "iterate",
    ) -> Table:
        """Per epoch, ``body`` applied round after round in a loop: one of two kinds.

        - ``min_by=(key, value)``: the least fixpoint keeping each key's least row.
          ``body`` gets, each round, the rows that lowered their ``key``'s least
          ``value`` in the epoch (at round 0: the input's least row per key) and returns
          rows of the same schema derived from them; those that lower their key's value
          again go round. The result is each key's least row (label propagation,
          shortest paths).
        - ``rounds=n``: ``body`` applied ``n`` times to the whole table (each round's
          output is the next round's input); the result is the last round's output
          (power iterations: PageRank).

        A table from outside the loop used by a ``join`` in ``body`` is arranged once per
        epoch (sorted by key), not sent again every round.
        """
        if (min_by is None) == (rounds is None) or until != "fixpoint":
            raise GraphBuildError(
                f"{name}: a table loop takes min_by=(key, value) (a least fixpoint) or "
                f"rounds=n (n applications), one of them (got min_by={min_by!r}, "
                f"rounds={rounds!r}, until={until!r}); for other loops go through rows "
                "(to_rows().iterate(...))"
            )
        if rounds is not None:
            if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
                raise GraphBuildError(f"{name}: rounds must be an int >= 0, got {rounds!r}")
            if rounds == 0:
                return self
        schema = self.schema
        flow = self.flow
        loop = flow.loop(name=name, parent=self.stream.scope)
        handle, again = loop.feedback()
        entered = self.stream.enter(loop)
        if rounds is not None:
            head = Table(entered.concat(again, name=f"{name}.head"), schema)
            result = self._body_result(body, head, loop, name)
            n = rounds
            again_out, done = flow.vertex(
                [(result.stream, pipeline())],
                lambda: RoundSplit(n),
                name=f"{name}.rounds",
                outputs=2,
            )
            handle.connect(again_out)
            return Table(done.leave(), schema)
        if not (isinstance(min_by, tuple) and len(min_by) == 2):
            raise GraphBuildError(f"{name}: min_by must be (key column, value column)")
        key, value = min_by
        self._check_keys([key, value], name)
        for column in (key, value):
            t = self.schema.field(column).type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
                raise GraphBuildError(
                    f"{name}: min_by column {column!r} is {t}; it must be a number "
                    f"(cast it: select(..., {column}=col({column!r}).cast('int64')))"
                )
        least = flow.vertex(
            [(entered, exchange_columns(key)), (again, exchange_columns(key))],
            lambda: LeastOnly(key, value, schema),
            name=f"{name}.least",
        )[0]
        result = self._body_result(body, Table(least, schema), loop, name)
        handle.connect(result.stream)
        out = flow.vertex(
            [(least.leave(), exchange_columns(key))],
            lambda: LeastPerTime(key, value, schema),
            name=f"{name}.least_of_epoch",
        )[0]
        return Table(out, schema)

    def _body_result(
        self, body: Callable[[Table], Table], head: Table, loop: Any, name: str
    ) -> Table:
        result = body(head)
        if not isinstance(result, Table):
            raise GraphBuildError(f"{name}: the body must return a Table, got {result!r}")
        if result.stream.scope is not loop:
            raise GraphBuildError(
                f"{name}: the body must return a table derived from the one it was given"
            )
        if not result.schema.equals(self.schema):
            raise GraphBuildError(
                f"{name}: the body must return the schema it was given ({self.schema}); it "
                f"returned {result.schema} (select the same columns, cast to the same types)"
            )
        return result

    # -- ways out ------------------------------------------------------------------------
    def to_rows(self, tuples: bool = False, name: str = "to_rows") -> Stream:
        """The rows as Python records: dicts, or tuples in column order."""
        return self.flow.vertex([(self.stream, pipeline())], lambda: ToRows(tuples), name=name)[0]

    def tables(self, name: str = "tables") -> Stream:
        """One ``pyarrow.Table`` per time, on worker 0, with every row of that time."""
        schema = self.schema
        return self.flow.vertex(
            [(self.stream, exchange(_zero))], lambda: GatherTables(schema), name=name
        )[0]

    def collect(self, name: str) -> None:
        """The driver's ``results[name]``: ``(epoch, pyarrow.Table)`` once per epoch."""
        self.tables(name=f"tables:{name}").collect(name)

    def sink(self, sink: Sink, name: str = "sink") -> None:
        """Write the batches to ``sink`` epoch by epoch, exactly once, as they are: no rows.

        The sink's ``write`` gets ``RecordBatch`` records of :attr:`schema` (e.g.
        ``connectors.parquet.ParquetSink``, which writes them with one Arrow call). A sink
        that wants the schema before it starts takes it in ``Sink.bind_schema``, called
        here, when the graph is built; a schema it refuses fails here, naming the step.
        """
        try:
            sink.bind_schema(self.schema)
        except ValueError as e:
            raise GraphBuildError(f"step {name!r}: {e}") from None
        self.stream.sink(sink, name=name)

    def subscribe(self, callback: Callable[[int, pa.Table], None]) -> None:
        """``callback(epoch, table)`` on the driver, once per epoch, in epoch order."""
        self.tables().subscribe(lambda epoch, tables: callback(epoch, _one(tables, self.schema)))


class Demand:
    """The columns the readers of a step's output use, for the step to send no others
    (projection push-down: a join gathers only the columns the next ``select`` reads).
    Known when the run starts, once the graph is whole: the readers' columns if every
    reader said which it reads (``select`` does), else ``None`` (all of them)."""

    def __init__(self, flow: Dataflow) -> None:
        self.flow: Dataflow | None = flow
        self.stream: Stream | None = None
        self.uses: dict[int, set[str]] = {}
        """Per reading vertex, the columns it reads."""
        self._resolved: set[str] | None = None

    def needed(self) -> set[str] | None:
        if self.flow is None or self.stream is None:
            return self._resolved
        readers = self.flow.readers(self.stream)
        if not readers or any(r not in self.uses for r in readers):
            return None
        return set().union(*(self.uses[r] for r in readers))

    def __getstate__(self) -> dict[str, Any]:
        # A factory goes to the workers once the graph is whole: the answer, no graph.
        return {"flow": None, "stream": None, "uses": {}, "_resolved": self.needed()}


def _zero(record: Any) -> int:
    return 0


def _one(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _keys(keys: str | list[str] | None, step: str, what: str) -> list[str]:
    if keys is None:
        raise GraphBuildError(f"step {step!r}: give on= (or left_on= and right_on=)")
    return [keys] if isinstance(keys, str) else list(keys)


_PARTIAL = {
    "count_all": [("count_all", "sum")],
    "count": [("count", "sum")],
    "sum": [("sum", "sum")],
    "min": [("min", "min")],
    "max": [("max", "max")],
    "mean": [("sum", "sum"), ("count", "sum")],
    "first": [("first", "first")],
    "last": [("last", "last")],
}
"""Per aggregation: the partials taken before the exchange, and how each merges after."""


class GroupedTable:
    """``table.group_by(keys)``: finish with :meth:`agg`."""

    def __init__(self, table: Table, keys: list[str]) -> None:
        self.table = table
        self.keys = keys

    def agg(self, *aggs: Agg, name: str = "group_by", **named: Agg) -> Table:
        """Per time, one row per key: the keys, then one column per aggregation
        (``count()``, ``col(x).sum()``, ``.min()``, ``.max()``, ``.mean()``,
        ``.first()``, ``.last()``, ``.list()``, ``.count()``). Aggregated before the
        exchange on each batch, merged per time after it."""
        keys = self.keys
        specs, pre, source_of = self._inputs(aggs, named, name)
        channel = exchange_columns(*keys) if keys else exchange(_zero)
        in_schema = pre.schema
        if any(a.kind == "list" for a in specs):
            # Lists do not merge in Arrow's hash aggregation (no hash_list of lists):
            # the rows cross the exchange, and each key's worker aggregates them.
            direct = [(src, a.kind, a.name) for a, src in zip(specs, source_of)]
            out_schema = _partial_schema(
                in_schema, keys, [(c, f"hash_{k}", n) for c, k, n in direct]
            )
            return pre._then(
                lambda: Aggregate(keys, direct, in_schema, out_schema, per_time=True),
                out_schema,
                name,
                channel,
            )
        partial, final_aggs, out_schema, post = self._partials(
            pre, specs, source_of, name, pass_alone=True
        )
        partial_schema = partial.schema
        # On one worker the partials pass: each merged column is its partial of all rows.
        parts = [(src, part) for src, a in zip(source_of, specs) for part, _ in _PARTIAL[a.kind]]
        alone = (in_schema, [(c, p, f) for (c, p), (_, _, f) in zip(parts, final_aggs)])
        return partial._then(
            lambda: Aggregate(
                keys,
                _arrow(final_aggs),
                partial_schema,
                out_schema,
                post=post,
                per_time=True,
                alone=alone,
            ),
            out_schema,
            name,
            channel,
        )

    def running_agg(self, *aggs: Agg, name: str = "running_agg", **named: Agg) -> Table:
        """Per epoch with rows, one row per key of that epoch: its aggregates over every
        epoch so far (the table API's ``running_reduce``; the state is kept across epochs,
        as Arrow columns, and checkpoints, migrates and rescales with the run). The same
        aggregations as :meth:`agg`, but ``list``; top-level streams only."""
        partial, merges, out_schema, post = self._kept(aggs, named, name, "running_agg")
        keys, partial_schema = self.keys, partial.schema
        return partial._then(
            lambda: RunningAggregate(keys, merges, partial_schema, out_schema, post),
            out_schema,
            name,
            exchange_columns(*keys),
        )

    def window_agg(
        self,
        size: int,
        *aggs: Agg,
        slide: int | None = None,
        name: str = "window_agg",
        **named: Agg,
    ) -> Table:
        """Per window of ``size`` epochs, one row per key with rows in it: its aggregates
        over the window (the table API's ``reduce_by_window``). Windows end at the
        multiples ``w`` of ``slide`` (``size`` by default: tumbling windows), cover the
        epochs ``(w - size, w]`` and are sent at ``w``; a window with no rows sends
        nothing. Each epoch's partials are kept as Arrow columns at the epoch (they
        checkpoint, migrate and rescale with the run). The same aggregations as
        :meth:`agg`, but ``list``; top-level streams only."""
        sl = _sizes("window_agg", size, slide)
        partial, merges, out_schema, post = self._kept(aggs, named, name, "window_agg")
        keys, partial_schema = self.keys, partial.schema
        return partial._then(
            lambda: WindowAggregate(keys, merges, partial_schema, out_schema, post, size, sl),
            out_schema,
            name,
            exchange_columns(*keys),
        )

    def _kept(
        self, aggs: tuple[Agg, ...], named: Mapping[str, Agg], name: str, op: str
    ) -> tuple[Table, list[tuple[str, str]], pa.Schema, Callable[[pa.Table], pa.Table]]:
        """For an aggregation whose partials are kept across epochs (``op``): the partials
        per batch, how each merges, the output schema, and the step from merged partials
        (named as the partials) to the outputs. Refuses loops, no keys and ``list``."""
        if self.table.stream.scope.depth:
            raise GraphBuildError(
                f"step {name!r}: {op} keeps state across epochs, which a loop's rounds "
                "do not have; use it outside iterate"
            )
        if not self.keys:
            raise GraphBuildError(f"step {name!r}: {op} needs group_by keys")
        specs, pre, source_of = self._inputs(aggs, named, name)
        if any(a.kind == "list" for a in specs):
            raise GraphBuildError(
                f"step {name!r}: {op} cannot keep list() (it would grow without end); "
                "use agg per epoch"
            )
        partial, final_aggs, out_schema, post = self._partials(pre, specs, source_of, name)
        merges = [(c, fn[5:]) for c, fn, _ in final_aggs]
        renamed = {c: out for c, _, out in final_aggs}

        def post_kept(table: pa.Table) -> pa.Table:
            return post(table.rename_columns([renamed.get(n, n) for n in table.column_names]))

        return partial, merges, out_schema, post_kept

    def _inputs(
        self, aggs: tuple[Agg, ...], named: Mapping[str, Agg], name: str
    ) -> tuple[list[Agg], Table, list[str]]:
        """The aggregations checked, and the step computing their inputs as columns
        (only what is not a column already); per aggregation, its input column."""
        t = self.table
        keys = self.keys
        t._check_keys(keys, name)
        specs = [*aggs, *(a.alias(n) for n, a in named.items())]
        if not specs:
            raise GraphBuildError(
                f"step {name!r}: agg needs at least one aggregation, e.g. count()"
            )
        for a in specs:
            if not isinstance(a, Agg):
                raise GraphBuildError(
                    f"step {name!r}: agg takes aggregations (count(), col('x').sum()...), got {a!r}"
                )
        names = [a.name for a in specs]
        clash = sorted({n for n in [*keys, *names] if [*keys, *names].count(n) > 1})
        if clash:
            raise GraphBuildError(
                f"step {name!r}: output column {clash[0]!r} twice; name the aggregations "
                "with .alias(...)"
            )
        inputs: dict[str, Any] = {k: col(k) for k in keys}
        source_of: list[str] = []
        for i, a in enumerate(specs):
            if a.of is None:
                source_of.append("")
            elif isinstance(a.of, Col):
                inputs.setdefault(a.of.name, a.of)
                source_of.append(a.of.name)
            else:
                inputs[f"_agg{i}"] = a.of
                source_of.append(f"_agg{i}")
        if not inputs:  # count() alone, no keys: a column to count the rows of
            inputs["_rows"] = lit(True)
        return specs, t.select(**inputs, name=f"{name}.inputs"), source_of

    def _partials(
        self,
        pre: Table,
        specs: list[Agg],
        source_of: list[str],
        name: str,
        pass_alone: bool = False,
    ) -> tuple[Table, list[tuple[str, str, str]], pa.Schema, Callable[[pa.Table], pa.Table]]:
        """Partial aggregates per batch, before the exchange; how they merge after
        (``(partial, hash_<merge>, merged name)``), the output schema, and the step from
        the merged partials to the outputs (a mean is a sum over a count)."""
        keys = self.keys
        in_schema = pre.schema
        partial_aggs: list[tuple[str, str, str]] = []
        final_aggs: list[tuple[str, str, str]] = []
        for i, (a, src) in enumerate(zip(specs, source_of)):
            for j, (part, merge) in enumerate(_PARTIAL[a.kind]):
                pname = f"_p{i}_{j}"
                partial_aggs.append((src, f"hash_{part}", pname))
                final_aggs.append((pname, f"hash_{merge}", f"_f{i}_{j}"))
        partial_schema = _partial_schema(in_schema, keys, partial_aggs)
        partial = pre._then(
            lambda: Aggregate(
                keys,
                _arrow(partial_aggs),
                in_schema,
                partial_schema,
                per_time=False,
                pass_alone=pass_alone,
            ),
            partial_schema,
            f"{name}.combine",
        )
        merged_schema = _partial_schema(partial_schema, keys, final_aggs)
        out_fields = [partial_schema.field(k) for k in keys]
        posts: list[Callable[[pa.Table], pa.Array]] = []
        for i, a in enumerate(specs):
            if a.kind == "mean":
                out_fields.append(pa.field(a.name, pa.float64()))
                posts.append(_mean(f"_f{i}_0", f"_f{i}_1"))
            else:
                out_fields.append(pa.field(a.name, merged_schema.field(f"_f{i}_0").type))
                posts.append(_column(f"_f{i}_0"))
        out_schema = pa.schema(out_fields)

        def post(table: pa.Table) -> pa.Table:
            return pa.Table.from_arrays(
                [*(table.column(k) for k in keys), *(p(table) for p in posts)],
                schema=out_schema,
            )

        return partial, final_aggs, out_schema, post


def _arrow(aggs: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Arrow names its hash aggregates without the ``hash_`` prefix in ``group_by``."""
    return [(c, fn[5:], out) for c, fn, out in aggs]


def _partial_schema(
    schema: pa.Schema, keys: list[str], aggs: list[tuple[str, str, str]]
) -> pa.Schema:
    """The schema ``group_by(keys).aggregate(aggs)`` gives, found on an empty table."""
    if keys:
        types = _aggregate_types(schema, tuple(keys), tuple(aggs))
    else:
        types = tuple(_scalar_type(schema, c, fn[5:]) for c, fn, _ in aggs)
    fields = [schema.field(k) for k in keys]
    fields += [pa.field(out, t) for (_, _, out), t in zip(aggs, types)]
    return pa.schema(fields)


@functools.lru_cache(maxsize=256)
def _aggregate_types(
    schema: pa.Schema, keys: tuple[str, ...], aggs: tuple[tuple[str, str, str], ...]
) -> tuple[pa.DataType, ...]:
    """The types of ``aggs`` by ``keys`` over ``schema``'s columns: Arrow's group_by of an
    empty table (~0.2 ms, twice a ``group_by``), once per schema a process builds."""
    got = group_aggregate(schema.empty_table(), list(keys), _arrow(list(aggs)))
    return tuple(got.schema.field(out).type for _, _, out in aggs)


def _scalar_type(schema: pa.Schema, column: str, fn: str) -> pa.DataType:
    if fn in ("count", "count_all"):
        return pa.int64()
    t = schema.field(column).type
    if fn == "list":
        return pa.list_(t)
    if fn == "sum":
        return pc.sum(pa.array([], t)).type
    return t


def _mean(sums: str, counts: str) -> Callable[[pa.Table], pa.Array]:
    def mean(table: pa.Table) -> pa.Array:
        return pc.divide(pc.cast(table.column(sums), pa.float64()), table.column(counts))

    return mean


def _column(name: str) -> Callable[[pa.Table], pa.Array]:
    return lambda table: table.column(name)


# -- ways in -------------------------------------------------------------------------------
class TableInput:
    """A driver-fed table: ``send`` a ``pyarrow.Table``, a ``RecordBatch``, a dict of
    columns or rows (dicts or tuples); it is checked against the schema on the driver."""

    def __init__(self, handle: InputHandle, schema: pa.Schema) -> None:
        self.handle = handle
        self.schema = schema
        self.table = Table(handle.stream, schema)

    def send(self, data: Any) -> None:
        if isinstance(data, Mapping):
            data = pa.table(dict(data))
        try:
            batch = to_batch(data, self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as e:
            raise GraphBuildError(
                f"input {self.handle.name!r}: the data does not fit the schema ({self.schema}): {e}"
            ) from None
        if batch.num_rows:
            self.handle.send([batch])

    def advance_to(self, epoch: int) -> None:
        self.handle.advance_to(epoch)

    def close(self) -> None:
        self.handle.close()


def table_input(flow: Dataflow, schema: Any, name: str = "table") -> TableInput:
    """A driver-fed table input of ``schema``; its stream is ``input.table``."""
    return TableInput(flow.new_input(name), _schema(schema))


def as_table(stream: Stream, schema: Any) -> Table:
    """``stream``'s records are already record batches of ``schema`` (a source that
    reads batches): the stream as a table, without a step."""
    return Table(stream, _schema(schema))


def to_table(stream: Stream, schema: Any, name: str = "to_table") -> Table:
    """Rows (dicts, or tuples in column order) as a table of ``schema``: one batch per
    message."""
    out = _schema(schema)
    s = stream.flow.vertex([(stream, pipeline())], lambda: ToTable(out), name=name)[0]
    return Table(s, out)
