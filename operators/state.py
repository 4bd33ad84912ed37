"""The state interface of the stateful operators (defined in :mod:`timely.state.keyed`, which the
checkpoint coordinator reads; re-exported here where the operators import it)."""

from timely.state.keyed import FORMAT, KeyedState, Snapshot, StatefulVertex, owner, repartition

__all__ = ["FORMAT", "KeyedState", "Snapshot", "StatefulVertex", "owner", "repartition"]
