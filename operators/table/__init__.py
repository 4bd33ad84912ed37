"""The table API: columnar dataflows on Arrow batches, with expressions.

``col``, ``lit``, ``when`` and ``count`` build expressions; :func:`table_input`,
``stream.as_table(schema)`` and ``stream.to_table(schema)`` make a :class:`Table`,
whose operators (``select``, ``with_columns``, ``where``, ``explode``,
``group_by(...).agg(...)``, ``distinct``, ``join``...) run whole columns through
Arrow's kernels. See :mod:`operators.table.stream`.
"""

from operators.table.expr import Agg, Expr, col, count, lit, when
from operators.table.stream import GroupedTable, Table, TableInput, as_table, table_input, to_table
from timely import stream_method

stream_method(as_table)
stream_method(to_table)

__all__ = [
    "Agg",
    "Expr",
    "GroupedTable",
    "Table",
    "TableInput",
    "as_table",
    "col",
    "count",
    "lit",
    "table_input",
    "to_table",
    "when",
]
