"""Bins and routing tables (Megaphone): where each key's records and state live.

A key hashes to one of ``bins`` bins (``stable_hash(key) % bins``, 256 by default); a
**routing table** maps each bin to a worker. Every ``exchange`` channel routes key →
bin → worker through the table in force at the batch's epoch, and every keyed table of
state is kept under the same keys, so moving a bin moves a set of keys with their state.

Why bins and not keys: a table of bins is small (it travels in a control record and in
every checkpoint) and fixed in size whatever the keys, and a bin is the unit a migration
moves. Why not ``stable_hash(key) % workers`` directly: with that, any change of the worker
count moves almost every key, and no part of the key space can move alone.

A **configuration** is a routing table that takes effect at an epoch: data at epochs
``>= T`` is routed by it. :class:`Routing` keeps a run's configurations in epoch order.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from timely.errors import ConfigError
from timely.routing.hashing import int_keys, mix_array, stable_hash

DEFAULT_BINS = 256
"""Bins per run unless ``bins=`` says otherwise."""

Table = tuple[int, ...]
"""A routing table: ``table[bin]`` is the worker that owns ``bin``."""


def check_bins(bins: Any) -> int:
    """``bins`` if it is a usable bin count, else a ``ConfigError`` with the fix."""
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 1 << 16:
        raise ConfigError(
            f"bins must be an int between 1 and 65536 (keys hash to that many bins), got "
            f"{bins!r}; the default is {DEFAULT_BINS}"
        )
    return bins


def check_bins_per_step(value: Any, where: str) -> int:
    """``value`` if it is a usable number of bins moved per epoch, else a
    ``ConfigError`` naming ``where`` it was given."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: bins_per_step must be an int >= 1, got {value!r}")
    return value


def default_table(bins: int, workers: int) -> Table:
    """Bins dealt to the workers in turn: bin ``b`` on worker ``b % workers``."""
    return tuple(b % workers for b in range(bins))


def bin_of(key: Any, bins: int) -> int:
    """The bin of ``key``."""
    return stable_hash(key) % bins


def bins_of(keys: Sequence[Any], bins: int) -> list[int]:
    """The bin of each key; a list of ints in one numpy pass."""
    arr = int_keys(keys)
    if arr is not None:
        out: list[int] = (mix_array(arr) % np.uint64(bins)).tolist()
        return out
    return [stable_hash(k) % bins for k in keys]


def keys_in_bins(keys: list[Any], nbins: int, bins: Iterable[int]) -> list[Any]:
    """The keys whose bin is one of ``bins`` (a batch of ints in one numpy pass)."""
    wanted = set(bins)
    arr = int_keys(keys)
    if arr is not None:
        key_bins = mix_array(arr) % np.uint64(nbins)
        chosen = np.flatnonzero(np.isin(key_bins, np.fromiter(wanted, np.uint64)))
        return [keys[i] for i in chosen.tolist()]
    return [k for k, b in zip(keys, bins_of(keys, nbins)) if b in wanted]


def check_table(table: Any, bins: int, workers: int) -> Table:
    """``table`` as a :data:`Table`, or ``ValueError`` saying what is wrong."""
    try:
        out = tuple(int(w) for w in table)
    except (TypeError, ValueError):
        raise ValueError(f"a routing table is one worker index per bin, got {table!r}") from None
    if len(out) != bins:
        raise ValueError(f"a routing table has one worker per bin: {bins} entries, got {len(out)}")
    bad = sorted({w for w in out if not 0 <= w < workers})
    if bad:
        raise ValueError(f"routing table names workers {bad}; this run has 0..{workers - 1}")
    return out


Assignment = Sequence[int] | Mapping[int, int] | Callable[[Table], Any]
"""What ``reconfigure`` takes: a whole table, the bins that move ``{bin: worker}``, or a
function of the current table that returns either."""


def resolve(assignment: Assignment, current: Table, workers: int) -> Table:
    """The table ``assignment`` makes of ``current`` (see :data:`Assignment`)."""
    if callable(assignment) and not isinstance(assignment, Mapping):
        assignment = assignment(current)
    bins = len(current)
    if isinstance(assignment, Mapping):
        new = list(current)
        for b, w in assignment.items():
            if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < bins:
                raise ValueError(f"bin {b!r} does not exist: this run has bins 0..{bins - 1}")
            new[b] = w
        return check_table(new, bins, workers)
    return check_table(assignment, bins, workers)


def steps(current: Table, new: Table, per_step: int | None) -> list[Table]:
    """The tables a migration from ``current`` to ``new`` goes through: one (all at once,
    ``per_step=None``) or one per ``per_step`` bins that move (fluid), in bin order."""
    moving = [b for b in range(len(current)) if current[b] != new[b]]
    if not moving:
        return []
    if per_step is None or per_step >= len(moving):
        return [new]
    out: list[Table] = []
    table = list(current)
    for i in range(0, len(moving), per_step):
        for b in moving[i : i + per_step]:
            table[b] = new[b]
        out.append(tuple(table))
    return out


def move(bins: Iterable[int], to: int) -> Callable[[Table], dict[int, int]]:
    """An assignment: these bins go to worker ``to``."""
    chosen = list(bins)
    return lambda current: dict.fromkeys(chosen, to)


def drain(worker: int) -> Callable[[Table], dict[int, int]]:
    """An assignment: every bin of ``worker`` goes to the other workers in turn."""

    def plan(current: Table) -> dict[int, int]:
        others = sorted(set(current) - {worker}) or sorted(set(range(max(current) + 2)) - {worker})
        mine = [b for b, w in enumerate(current) if w == worker]
        return {b: others[i % len(others)] for i, b in enumerate(mine)}

    return plan


def resize(current: Table, workers: int) -> dict[int, int]:
    """The fewest bin moves that spread the bins evenly over workers ``0..workers-1``
    (a live rescale's table): bins of workers at ``workers`` or above, then each
    worker's bins above its even share, go to the workers below theirs, fewest first."""
    bins = len(current)
    share = [bins // workers + (1 if w < bins % workers else 0) for w in range(workers)]
    held: dict[int, list[int]] = {w: [] for w in range(workers)}
    free: list[int] = []
    for b, w in enumerate(current):
        (held[w] if w < workers else free).append(b)
    for w in range(workers):
        while len(held[w]) > share[w]:
            free.append(held[w].pop())
    moves: dict[int, int] = {}
    for b in free:
        w = min(range(workers), key=lambda x: len(held[x]) - share[x])
        held[w].append(b)
        moves[b] = w
    return moves


def balance(
    loads: Sequence[float], current: Table, workers: int, tolerance: float = 1.2
) -> dict[int, int]:
    """Bins to move so that the busiest worker carries at most ``tolerance`` times the
    mean load, moving few bins: repeatedly the largest bin of the busiest worker that
    lowers the peak goes to the least loaded worker.

    Each move lowers the sum of squared worker loads, so it ends; it reaches the
    tolerance whenever no single bin is heavier than ``(tolerance - 1)`` times the mean
    (a hot bin no placement can spread is left where it is)."""
    if len(loads) != len(current):
        raise ValueError(f"{len(loads)} bin loads for {len(current)} bins")
    per_worker = [0.0] * workers
    for b, w in enumerate(current):
        per_worker[w] += loads[b]
    mean = sum(per_worker) / workers
    table = list(current)
    moves: dict[int, int] = {}
    while mean > 0:
        busiest = max(range(workers), key=per_worker.__getitem__)
        least = min(range(workers), key=per_worker.__getitem__)
        if per_worker[busiest] <= tolerance * mean:
            break
        gap = per_worker[busiest] - per_worker[least]
        fits = [b for b, w in enumerate(table) if w == busiest and 0 < loads[b] < gap]
        if not fits:
            break
        b = max(fits, key=loads.__getitem__)
        table[b] = least
        per_worker[busiest] -= loads[b]
        per_worker[least] += loads[b]
        moves[b] = least
    return {b: w for b, w in moves.items() if w != current[b]}


def per_worker(per_bin: Sequence[float], table: Table, workers: int) -> list[float]:
    """Per-bin amounts summed over each bin's worker in ``table``."""
    out: list[float] = [0] * workers
    for b, n in enumerate(per_bin):
        out[table[b]] += n
    return out


def useful_per_bin(records: Sequence[int], useful: Sequence[float], table: Table) -> list[float]:
    """Each bin's estimated useful time: its records times its owner's useful time per
    record (DS2's true cost), so that a worker whose records cost more (larger state, a
    costlier function) weighs more than its count. A worker with records but no time
    measured is costed at the mean; with no time measured anywhere, the records are the
    weights."""
    received = per_worker(records, table, len(useful))
    total_records, total_useful = sum(received), sum(useful)
    if total_records == 0 or total_useful <= 0:
        return [float(n) for n in records]
    mean = total_useful / total_records
    cost = [u / n if u > 0 and n else mean for u, n in zip(useful, received)]
    return [n * cost[table[b]] for b, n in enumerate(records)]


class Routing:
    """A run's configurations: the routing table in force at each epoch.

    Starts with one table from the first epoch on; :meth:`add` records a configuration
    at a later epoch (the same one again is ignored: every stateful vertex of a worker
    receives every configuration)."""

    __slots__ = ("arrays", "bins", "epochs", "tables")

    def __init__(self, bins: int, initial: Table) -> None:
        self.bins = bins
        self.epochs: list[int] = [-1]
        self.tables: list[Table] = [initial]
        self.arrays: list[np.ndarray[Any, Any]] = [np.asarray(initial, dtype=np.intp)]

    def add(self, epoch: int, table: Sequence[int]) -> bool:
        """Record ``table`` in force from ``epoch`` on; False if already known."""
        i = bisect.bisect_left(self.epochs, epoch)
        if i < len(self.epochs) and self.epochs[i] == epoch:
            if tuple(table) != self.tables[i]:
                raise ValueError(f"two different routing tables at epoch {epoch}")
            return False
        self.epochs.insert(i, epoch)
        self.tables.insert(i, tuple(table))
        self.arrays.insert(i, np.asarray(table, dtype=np.intp))
        return True

    def index_at(self, epoch: int) -> int:
        """The index of the configuration in force at ``epoch``."""
        return bisect.bisect_right(self.epochs, epoch) - 1

    def table_at(self, epoch: int) -> Table:
        """The table in force at ``epoch``."""
        return self.tables[self.index_at(epoch)]

    def array_at(self, epoch: int) -> np.ndarray[Any, Any]:
        """The table in force at ``epoch``, as a numpy array (for routing a batch)."""
        if len(self.epochs) == 1:
            return self.arrays[0]
        return self.arrays[self.index_at(epoch)]

    def upto(self, epoch: int) -> list[tuple[int, Table]]:
        """The configurations at epochs ``<= epoch`` (the first at -1), for a checkpoint."""
        return [(e, t) for e, t in zip(self.epochs, self.tables) if e <= epoch]

    def restore(self, configs: list[tuple[int, Table]]) -> None:
        """Replace the configurations by a checkpoint's (as :meth:`upto` listed them)."""
        if not configs or any(len(t) != self.bins for _, t in configs):
            raise ValueError(f"a checkpoint's routing tables do not have {self.bins} bins")
        self.epochs = [e for e, _ in configs]
        self.tables = [tuple(t) for _, t in configs]
        self.arrays = [np.asarray(t, dtype=np.intp) for t in self.tables]

    def owner(self, key: Any, epoch: int) -> int:
        """The worker that holds ``key`` at ``epoch``."""
        return self.table_at(epoch)[bin_of(key, self.bins)]
