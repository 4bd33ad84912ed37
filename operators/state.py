"""The state interface of the stateful operators (defined in :mod:`timely.state`, which the
checkpoint coordinator reads; re-exported here where the operators import it)."""

from timely.state import FORMAT, KeyedState, Snapshot, StatefulVertex, owner, repartition

__all__ = ["FORMAT", "KeyedState", "Snapshot", "StatefulVertex", "owner", "repartition"]
