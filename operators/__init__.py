"""The LINQ-like operator library, built on the vertex API.

Importing this package registers its operators as ``Stream`` methods (timely finds it
through the ``timely.operators`` entry point, so ``stream.select(f)`` works without an
import). Every operator is per time, as in Naiad: its output at time ``t`` reflects
only its input at ``t``. Stateful operators keep their state in
:class:`~operators.state.KeyedState` tables (see ``operators/state.py``).
"""

from operators.join import join
from operators.keyed import aggregate, count_by, group_by, max_by, min_by
from operators.state import KeyedState, Snapshot, StatefulVertex, owner, repartition
from operators.stateless import distinct, select, select_many, where

__all__ = [
    "KeyedState",
    "Snapshot",
    "StatefulVertex",
    "aggregate",
    "count_by",
    "distinct",
    "group_by",
    "join",
    "max_by",
    "min_by",
    "owner",
    "repartition",
    "select",
    "select_many",
    "where",
]
