"""The LINQ-like operator library, built on the vertex API.

Importing this package registers its operators as ``Stream`` methods (timely finds it
through the ``timely.operators`` entry point, so ``stream.select(f)`` works without an
import). The operators are per time, as in Naiad (the output at time ``t`` reflects
only the input at ``t``), except the windowed ones (``window``, ``reduce_by_window``:
epochs ``(w - size, w]`` at the window end ``w``), the running ones
(``running_reduce``, ``map_with_state``: every epoch up to ``t``) and ``join_streaming``
(every pair of records across times, at the later one). Stateful operators
keep their state in :class:`~operators.state.KeyedState` tables (see ``operators/state.py``).
The table API (columnar streams of Arrow batches, with expressions) is
:mod:`operators.table`; ``as_table`` and ``to_table`` lead into it.
"""

from operators.batch import select_batch, where_batch
from operators.columnar import count_columns, where_columns
from operators.join import join, join_streaming
from operators.keyed import aggregate, count_by, group_by, max_by, min_by
from operators.loops import fixpoint
from operators.running import map_with_state, running_reduce
from operators.state import KeyedState, Snapshot, StatefulVertex, owner, repartition
from operators.stateless import distinct, select, select_many, where
from operators.table import as_table, to_table
from operators.windows import reduce_by_window, window

__all__ = [
    "KeyedState",
    "Snapshot",
    "StatefulVertex",
    "aggregate",
    "as_table",
    "count_by",
    "count_columns",
    "distinct",
    "fixpoint",
    "group_by",
    "join",
    "join_streaming",
    "map_with_state",
    "max_by",
    "min_by",
    "owner",
    "reduce_by_window",
    "repartition",
    "running_reduce",
    "select",
    "select_batch",
    "select_many",
    "to_table",
    "where",
    "where_batch",
    "where_columns",
    "window",
]
