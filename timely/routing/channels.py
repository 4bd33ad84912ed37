"""Channels: how records travel from an output to an input across workers.

``pipeline`` keeps records on the worker that made them; ``exchange(key)`` sends each
record to the worker that owns the bin ``stable_hash(key(record)) % bins`` in the routing
table (:mod:`timely.routing.bins`); ``broadcast`` sends every record to every worker.
The hash (:mod:`timely.routing.hashing`) is the same in every process and every run, so
that a key's records meet on one worker and a replay routes them the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_
from typing import Any

import numpy as np

from timely.routing.bins import DEFAULT_BINS, default_table
from timely.routing.hashing import int_keys, mix_array, stable_hash

_OWNER_CACHE = 1 << 16
"""How many keys an exchange channel remembers the owner of (cleared when full)."""
_COMPRESS_UP_TO = 16
"""Up to this many workers, a batch is split with one C-level pass per worker."""


class Channel:
    """How records move along one edge."""

    kind = "pipeline"

    def route(self, records: list[Any], workers: int, here: int) -> dict[int, list[Any]]:
        """Split ``records`` by destination worker."""
        return {here: records}

    def __repr__(self) -> str:
        return self.kind


class Pipeline(Channel):
    """Records stay on the worker that produced them."""


@dataclass(repr=False)
class Exchange(Channel):
    """Records go to the worker that owns their key's bin (:mod:`timely.routing.bins`)."""

    key: Callable[[Any], Any] | None
    """``None``: the record is its own key."""
    kind = "exchange"
    _bins: dict[Any, int] = field(default_factory=dict, init=False, compare=False)
    """Key -> bin, remembered across batches (keys repeat; hashing them is the cost).
    A key's bin never changes in a run; where the bin lives is the routing table's."""
    _bins_for: int = field(default=0, init=False, compare=False)

    def route(self, records: list[Any], workers: int, here: int) -> dict[int, list[Any]]:
        if workers == 1:
            return {here: records}
        return self.route_by(records, _default_array(workers), here)

    def route_by(
        self,
        records: list[Any],
        table: np.ndarray[Any, Any],
        here: int,
        load: np.ndarray[Any, Any] | None = None,
    ) -> dict[int, list[Any]]:
        """Split ``records`` by the worker ``table[bin(key)]`` (``table``: one worker per
        bin); with ``load``, add each record to its bin's count there."""
        bins = len(table)
        if not records:
            return {}
        if bins == 1:
            if load is not None:
                load[0] += len(records)
            return {int(table[0]): records}
        keys = records if self.key is None else list(map(self.key, records))
        arr = int_keys(keys)
        if arr is not None:
            # Vectorised: the same hash as stable_hash, for a whole batch of int keys.
            key_bins = (mix_array(arr) % np.uint64(bins)).astype(np.intp)
        else:
            try:
                listed = self._bins_of(keys, bins)
            except TypeError:  # an unhashable key: stable_hash says why, or hashes a frozenset
                listed = [stable_hash(k) % bins for k in keys]
            key_bins = np.fromiter(listed, np.intp, len(keys))
        dest = table[key_bins]
        if load is not None:
            load += np.bincount(key_bins, minlength=bins)
        workers = int(dest.max()) + 1 if len(dest) else 0
        if workers > _COMPRESS_UP_TO:
            return _split(records, dest.tolist(), workers)
        # Per worker, a mask made by numpy and one C-level pass of `compress`: no
        # Python-level step per record.
        out = {}
        for w in range(workers):
            mask = dest == w
            if mask.any():
                out[w] = records if mask.all() else list(compress(records, mask.tolist()))
        return out

    def _bins_of(self, keys: list[Any], bins: int) -> list[int]:
        """Each key's bin, from the remembered bins; only keys never seen before (or
        since the memory filled up and was cleared) are hashed. Raises TypeError for an
        unhashable key."""
        cache = self._bins
        if self._bins_for != bins:
            cache.clear()
            self._bins_for = bins
        try:
            return list(map(cache.__getitem__, keys))
        except KeyError:  # keys not seen before: hash each once
            known = list(map(cache.get, keys))
            new = set(compress(keys, map(is_, known, repeat(None))))
            if len(cache) + len(new) > _OWNER_CACHE:
                cache.clear()
                new = set(keys)
            for k in new:
                cache[k] = stable_hash(k) % bins
            return list(map(cache.__getitem__, keys))


@functools.lru_cache(maxsize=64)
def _default_array(workers: int) -> np.ndarray[Any, Any]:
    return np.asarray(default_table(DEFAULT_BINS, workers), dtype=np.intp)


def _split(records: list[Any], owners: list[int], workers: int) -> dict[int, list[Any]]:
    """``records`` by owner, one Python step per record (for many workers)."""
    lists: list[list[Any]] = [[] for _ in range(workers)]
    for record, w in zip(records, owners):
        lists[w].append(record)
    return {w: part for w, part in enumerate(lists) if part}


class Broadcast(Channel):
    """Every worker receives every record."""

    kind = "broadcast"

    def route(self, records: list[Any], workers: int, here: int) -> dict[int, list[Any]]:
        return {w: records for w in range(workers)}


def pipeline() -> Channel:
    """Keep records on their worker."""
    return Pipeline()


def exchange(key: Callable[[Any], Any] | None = None) -> Channel:
    """Partition records by ``stable_hash(key(record))``; without ``key``, by the record
    itself (no Python call per record: a batch of ints is hashed in one numpy pass)."""
    if key is not None and not callable(key):
        raise TypeError(
            f"exchange needs a key function record -> hashable value, got {key!r}; "
            "for example exchange(lambda r: r[0])"
        )
    return Exchange(key)


def broadcast() -> Channel:
    """Send every record to every worker."""
    return Broadcast()


class Gather(Channel):
    """Every record goes to one worker (outputs that the driver reads)."""

    kind = "gather"

    def __init__(self, worker: int = 0) -> None:
        self.worker = worker

    def route(self, records: list[Any], workers: int, here: int) -> dict[int, list[Any]]:
        return {self.worker: records}
