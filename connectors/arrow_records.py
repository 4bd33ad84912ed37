"""Records <-> Arrow: the conversion every columnar connector shares, with errors that help.

Why here and not in each connector: a sink gets records of whatever shape the
dataflow made (dicts, tuples, Arrow batches) and must turn them into one typed
table; a source hands rows back in the shape the user asked for. When a value does
not fit, the error names the column, the value, the record and the fix, because
"ArrowInvalid: Could not convert 'x' with type str" alone leaves the user guessing
which of twenty columns it was.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any, Literal

import pyarrow as pa

from timely import TimelyError

RecordShape = Literal["tuples", "dicts", "arrow"]
SHAPES: tuple[str, ...] = ("tuples", "dicts", "arrow")

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80


class SchemaError(TimelyError, ValueError):
    """Records or files do not match the schema; the message names the column and the fix."""


def check_shape(records: str) -> RecordShape:
    """``records`` if it is a known shape, else a ``ValueError`` listing them."""
    if records not in SHAPES:
        raise ValueError(f"records must be one of {', '.join(map(repr, SHAPES))}, got {records!r}")
    return records  # type: ignore[return-value]


def from_table(table: pa.Table, records: RecordShape) -> list[Any]:
    """The table's rows as a list of tuples or dicts, or as one Arrow record batch."""
    if records == "arrow":
        return table.combine_chunks().to_batches()[:1] if table.num_rows else []
    if records == "dicts":
        out: list[Any] = table.to_pylist()
        return out
    return list(zip(*(col.to_pylist() for col in table.columns)))


def check_fits(sink: str, ours: pa.Schema, table: pa.Schema) -> None:
    """That a table stream of schema ``table`` can be written by a sink of schema ``ours``,
    when the graph is built: the same column names with the same types. Order and
    nullability may differ (:func:`conform` reorders the batches' columns and checks
    their nulls with one Arrow call each); anything else would fail on a worker."""
    for field in table:
        if ours.get_field_index(field.name) < 0:
            raise SchemaError(
                f"{sink}: the table's column {field.name!r} is not in the sink's schema "
                f"({ours.names}); select the sink's columns first (table.select"
                f"({', '.join(map(repr, ours.names))})), or drop schema= to write the table's"
            )
    for field in table:
        want = ours.field(field.name).type
        if field.type != want:
            raise SchemaError(
                f"{sink}: column {field.name!r} is {field.type} in the table but {want} in "
                f"the sink's schema; cast it first: table.with_columns({field.name}="
                f"col({field.name!r}).cast({str(want)!r})), or drop schema= to write the "
                "table's"
            )
    missing = [n for n in ours.names if table.get_field_index(n) < 0]
    if missing:
        raise SchemaError(
            f"{sink}: the sink's schema has column {missing[0]!r}, which the table "
            f"({table.names}) lacks; add it first (table.with_columns({missing[0]}=...)) "
            "or select the sink's columns first"
        )


def to_table(records: Sequence[Any], schema: pa.Schema | None = None) -> pa.Table:
    """One table from records that are all dicts, all tuples, or all Arrow batches/tables.

    With ``schema`` the result has exactly that schema (values are converted to its
    types; Arrow input is cast); without one, dicts give the columns in order of first
    appearance and types Arrow infers, and tuples are refused (they have no names).
    """
    if not records:
        return (schema or pa.schema([])).empty_table()
    first = records[0]
    if isinstance(first, pa.RecordBatch | pa.Table):
        return _from_arrow(records, schema)
    if isinstance(first, dict):
        return _from_dicts(records, schema)
    if isinstance(first, tuple | list):
        return _from_tuples(records, schema)
    raise SchemaError(
        f"cannot write {_repr.repr(first)} ({type(first).__name__}) as a table row: records "
        "must be dicts (column -> value), tuples (with a schema) or Arrow record batches; "
        "turn them into one of those with .select(...) first"
    )


def _from_arrow(records: Sequence[Any], schema: pa.Schema | None) -> pa.Table:
    tables = []
    for i, r in enumerate(records):
        if isinstance(r, pa.RecordBatch):
            r = pa.Table.from_batches([r])
        elif not isinstance(r, pa.Table):
            raise SchemaError(
                f"record #{i} is {type(r).__name__}, but record #0 is an Arrow batch; "
                "send one kind of record to a sink"
            )
        tables.append(conform(r, schema) if schema is not None else r)
    try:
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaError(
            f"the Arrow batches have different schemas ({e}); give the sink a schema "
            "so every batch is cast to it"
        ) from None


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types, or a :class:`SchemaError`."""
    names = set(table.column_names)
    missing = [f.name for f in schema if f.name not in names]
    if missing:
        raise SchemaError(
            f"column {missing[0]!r} of the schema is missing (the data has "
            f"{table.column_names}); add it to the records or drop it from the schema"
        )
    extra = [n for n in table.column_names if schema.get_field_index(n) < 0]
    if extra:
        raise SchemaError(
            f"column {extra[0]!r} is not in the schema ({schema.names}); drop it from the "
            "records or add it to the schema"
        )
    columns = []
    for field in schema:
        col = table.column(field.name)
        if col.type != field.type:
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise SchemaError(
                    f"column {field.name!r}: cannot cast {col.type} to the schema's "
                    f"{field.type} ({e}); convert the values in the dataflow or change the "
                    f"schema's type for {field.name!r}"
                ) from None
        columns.append(_check_nulls(field, col))
    return pa.Table.from_arrays(columns, schema=schema)


def _from_dicts(records: Sequence[Any], schema: pa.Schema | None) -> pa.Table:
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise SchemaError(
                f"record #{i} is {type(r).__name__} ({_repr.repr(r)}), but record #0 is a "
                "dict; send one kind of record to a sink"
            )
    keys: dict[str, None] = {}
    for r in records:
        keys.update(dict.fromkeys(r))
    if schema is None:
        bad = [k for k in keys if not isinstance(k, str)]
        if bad:
            raise SchemaError(f"column names must be strings; got the key {bad[0]!r}")
        fields: list[tuple[str, pa.DataType | None]] = [(k, None) for k in keys]
    else:
        extra = [k for k in keys if schema.get_field_index(k) < 0]
        if extra:
            i = next(i for i, r in enumerate(records) if extra[0] in r)
            raise SchemaError(
                f"record #{i} ({_repr.repr(records[i])}) has column {extra[0]!r}, which the "
                f"schema ({schema.names}) lacks; drop it from the records or add it to the schema"
            )
        fields = [(f.name, f.type) for f in schema]
    arrays = [_column(name, typ, [r.get(name) for r in records], records) for name, typ in fields]
    if schema is None:
        return pa.Table.from_arrays(arrays, names=[n for n, _ in fields])
    for field, arr in zip(schema, arrays):
        _check_nulls(field, arr)
    return pa.Table.from_arrays(arrays, schema=schema)


def _from_tuples(records: Sequence[Any], schema: pa.Schema | None) -> pa.Table:
    if schema is None:
        raise SchemaError(
            f"records are tuples ({_repr.repr(records[0])}) and tuples have no column names; "
            "give the sink a schema, e.g. schema=pa.schema([('word', pa.string()), "
            "('count', pa.int64())]), or send dicts"
        )
    width = len(schema)
    for i, r in enumerate(records):
        if not isinstance(r, tuple | list) or len(r) != width:
            raise SchemaError(
                f"record #{i} ({_repr.repr(r)}) does not have the schema's {width} columns "
                f"{schema.names}; make every record a tuple of {width} values"
            )
    columns = list(zip(*records))
    arrays = [
        _check_nulls(f, _column(f.name, f.type, list(col), records))
        for f, col in zip(schema, columns)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(
    name: str, typ: pa.DataType | None, values: list[Any], records: Sequence[Any]
) -> pa.Array:
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as e:
        i, value = _first_bad(values, typ)
        target = f"the schema's {typ}" if typ is not None else "one Arrow type"
        fix = (
            f"convert it in the dataflow (e.g. with .select) or change the schema's type "
            f"for {name!r}"
            if typ is not None
            else f"give the sink a schema that says the type of {name!r}, or make the values agree"
        )
        where = f" in record #{i} ({_repr.repr(records[i])})" if i is not None else ""
        raise SchemaError(
            f"column {name!r}: cannot convert {_repr.repr(value)} ({type(value).__name__})"
            f"{where} to {target} ({e}); {fix}"
        ) from None


def _first_bad(values: list[Any], typ: pa.DataType | None) -> tuple[int | None, Any]:
    """The first value that does not convert alone (or, untyped, does not fit with the first)."""
    if typ is None:
        start = next((i for i, v in enumerate(values) if v is not None), 0)
        for i in range(start + 1, len(values)):
            try:
                pa.array([values[start], values[i]])
            except Exception:
                return i, values[i]
        return None, values[start] if values else None
    for i, v in enumerate(values):
        try:
            pa.array([v], type=typ)
        except Exception:
            return i, v
    return None, None


def _check_nulls(field: pa.Field, arr: pa.Array | pa.ChunkedArray) -> Any:
    if not field.nullable and arr.null_count:
        raise SchemaError(
            f"column {field.name!r} is not nullable in the schema but has {arr.null_count} "
            "null value(s); fill them in the dataflow or make the field nullable"
        )
    return arr
