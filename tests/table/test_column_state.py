"""Columnar keyed state (:class:`timely.state.columnar.ColumnState`) against a dict model:
random upserts and removals of keys of two columns (nulls, NaN, strings), then a snapshot
through the wire format, bins taken out and put back, incremental deltas along a chain
and a worker's share on a rescale, each compared with the model. Mutation checks: a
lookup that misses keys whose hashes collide, bins computed by another hash, an upsert
that trusts a lookup's places after the table changed, and one that ignores them.

The property and the spine tests run twice: in memory, and with the disk backend's
layout (:mod:`timely.state.spill`) with a spill threshold of a few rows, so that runs
really go to files, which must exist while held and be gone once dropped or closed."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import timely.state.columnar as columnar
import timely.state.spill as spill
from timely.checkpoint.writer import encode_part
from timely.comm import serialization
from timely.routing.bins import bins_of, default_table
from timely.state.columnar import Arranged, ColumnState, apply_deltas, merge_snapshots, share_of
from timely.state.disk import StateStore, StoreConfig
from timely.worker.snapshots import frozen

SCHEMA = pa.schema([("k", pa.string()), ("f", pa.float64()), ("v", pa.int64())])
KEYS = ("k", "f")
T = (0,)

KEY = st.tuples(
    st.none() | st.sampled_from(["a", "b", "ü", ""]),
    st.none() | st.sampled_from([0.0, 1.5, -2.0, math.nan]),
)
OPS = st.lists(
    st.tuples(st.sampled_from(["put", "del"]), st.lists(st.tuples(KEY, st.integers(0, 99)))),
    max_size=8,
)


def _norm(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A key as the model holds it (NaN equal to itself)."""
    return tuple("nan" if isinstance(x, float) and math.isnan(x) else x for x in key)


def _table(pairs: dict[tuple[Any, ...], int]) -> pa.Table:
    rows = [{"k": k[0], "f": math.nan if k[1] == "nan" else k[1], "v": v} for k, v in pairs.items()]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _model_of(table: pa.Table | None) -> dict[tuple[Any, ...], int]:
    if table is None:
        return {}
    out = {}
    for r in table.to_pylist():
        key = _norm((r["k"], r["f"]))
        assert key not in out, f"key {key} twice"
        out[key] = r["v"]
    return out


def _apply(state: ColumnState, model: dict[Any, int], ops: Any) -> None:
    for i, (op, pairs) in enumerate(ops):
        batch = {_norm(k): v for k, v in pairs}  # keys unique in one batch
        if op == "put":
            rows = _table(batch)
            if i % 2:  # as a fold does: the keys looked up first, the upsert told where
                state.upsert(T, rows, found=state.find(T, rows))
            else:
                state.upsert(T, rows)
            model.update(batch)
        else:
            state.remove(T, _table(batch))
            for k in batch:
                model.pop(k, None)


def _wire(snapshot: Any) -> Any:
    return serialization.decode(serialization.encode(snapshot))


LAYOUTS = ["memory", "disk"]
SPILL = 4
"""Rows from which a run goes to a file in the disk layout's tests."""


@contextmanager
def _layout(layout: str) -> Iterator[StateStore | None]:
    """A worker's store to put states on disk with (None in memory), closed after:
    its directory, run files included, must be gone then. Merges plan 3 rows of a run
    at a time and files are written 2 rows a slice, so that runs of a few rows take
    the paths of large ones (a plan in pieces, a file of many slices)."""
    pieces, slices = columnar.PIECE_ROWS, spill.SLICE_ROWS
    columnar.PIECE_ROWS, spill.SLICE_ROWS = 3, 2
    try:
        if layout == "memory":
            yield None
            return
        with tempfile.TemporaryDirectory() as d:
            store = StateStore(StoreConfig(d).made(), 0)
            try:
                yield store
            finally:
                store.close()
                assert not os.path.exists(store.path), "the store's files outlive it"
    finally:
        columnar.PIECE_ROWS, spill.SLICE_ROWS = pieces, slices


def _state(store: StateStore | None, spill: int = SPILL, **kwargs: Any) -> ColumnState:
    state = ColumnState(KEYS, SCHEMA, **kwargs)
    if store is not None:
        state.on_disk(store, spill)
    return state


def _files(store: StateStore | None) -> set[str]:
    if store is None:
        return set()
    d = store.columns_dir()
    return {os.path.join(d, f) for f in os.listdir(d)}


def _check_files(state: ColumnState, store: StateStore | None) -> None:
    """The runs' files are on disk, owner-only, and no others of this state are."""
    held = {p for f in state.spilled() for p in f.paths}
    if store is None:
        assert not held
        return
    for p in held:
        assert os.stat(p).st_mode & 0o777 == 0o600
    assert held <= _files(store)


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(deadline=None)
@given(OPS, OPS, st.sampled_from([2, 4, 16]))
def test_column_state_is_a_keyed_table(layout: str, first: Any, then: Any, nbins: int) -> None:
    with _layout(layout) as store:
        _keyed_table(store, first, then, nbins)
        assert _files(store) == set(), "files of states dropped are left"


def _keyed_table(store: StateStore | None, first: Any, then: Any, nbins: int) -> None:
    state = _state(store, incremental=True)
    state.keep_changes()
    model: dict[Any, int] = {}
    _apply(state, model, first)
    assert _model_of(state.get(T)) == model
    _check_files(state, store)
    base = _wire(state.snapshot(0))
    state.taken(0)
    _apply(state, model, then)
    assert _model_of(state.get(T)) == model
    assert len(state) == len(model)
    _check_files(state, store)

    # a snapshot through the wire restores the same table
    again = _state(store)
    again.restore(_wire(state.snapshot(1)))
    assert _model_of(again.get(T)) == model
    _check_files(again, store)
    again.drop()

    # a delta on the base, applied to it, is the same table
    delta = _wire(state.delta(1, 0))
    assert _model_of(_rows(apply_deltas(base, [delta]))) == model

    # bins: the rows taken out are exactly the keys of those bins by the row path's hash
    bins = set(range(0, nbins, 2))
    taken = state.extract(bins, nbins)
    moved = _model_of(_rows(taken))
    keys = list(model)
    row_bins = dict(zip(keys, bins_of([_hashable(k) for k in keys], nbins)))
    assert set(moved) == {k for k in keys if row_bins[k] in bins}
    assert _model_of(state.get(T)) == {k: v for k, v in model.items() if k not in moved}
    assert len(state) == len(model) - len(moved)  # (counted as rows change, not by a pass)
    state.install(_wire(taken))
    assert _model_of(state.get(T)) == model
    assert len(state) == len(model)

    # a rescale: every worker's share, merged, is the whole; each holds its bins only
    table = default_table(nbins, 3)
    shares = [share_of(_wire(state.snapshot()), np.asarray(table) == w, nbins) for w in range(3)]
    for w, share in enumerate(shares):
        assert all(table[row_bins[k]] == w for k in _model_of(_rows(share)))
    assert _model_of(_rows(merge_snapshots(shares))) == model
    _check_files(state, store)
    state.pop(T)
    assert state.spilled() == []


def _hashable(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(math.nan if x == "nan" else x for x in key)


def _rows(snapshot: Any) -> pa.Table | None:
    times = snapshot["times"]
    if not times:
        return None
    assert len(times) == 1 and tuple(times[0][0]) == T
    table = times[0][1]
    return pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table


def test_keys_whose_hashes_collide_are_told_apart() -> None:
    """Every key hashed alike: a lookup must compare the keys themselves. The mutant,
    a lookup that trusts the first row of a hash, makes a second row for a key."""
    rows = _table({("a", 1.5): 1, ("b", 1.5): 2, ("c", None): 3})
    same = np.zeros(3, dtype=np.uint64)
    arranged = Arranged(rows, same, KEYS)
    probe = _table({("c", None): 9, ("z", 0.0): 9})
    assert arranged.find(probe, np.zeros(2, dtype=np.uint64)).tolist() == [2, -1]
    grown = arranged.upsert(probe, np.zeros(2, dtype=np.uint64))
    assert _model_of(grown.table) == {("a", 1.5): 1, ("b", 1.5): 2, ("c", None): 9, ("z", 0.0): 9}


def test_mutation_a_lookup_that_ignores_collisions_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Arranged, "_scan", lambda self, rows, i, h, start: -1)
    with pytest.raises(AssertionError):
        test_keys_whose_hashes_collide_are_told_apart()


def test_mutation_bins_by_another_hash_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 8: a columnar table whose bins are not the row path's would move keys a
    routing table did not send it. Reversing the hash's bytes is caught."""
    original = columnar.key_hashes
    monkeypatch.setattr(columnar, "key_hashes", lambda *a: original(*a).byteswap())
    ops = [("put", [(("a", 1.5), 1), (("b", None), 2), (("ü", 0.0), 3), ((None, -2.0), 4)])]
    with pytest.raises(AssertionError):
        for nbins in (2, 4, 16):
            _keyed_table(None, ops, [], nbins)


def test_install_refuses_keys_already_held() -> None:
    state = ColumnState(KEYS, SCHEMA)
    state.upsert(T, _table({("a", 1.5): 1}))
    with pytest.raises(ValueError, match="not keyed state"):
        state.install(state.snapshot())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_snapshot_keeps_what_it_saw(layout: str) -> None:
    """A snapshot is not copied (it is encoded later, off the step), so the state must
    never change what a snapshot or a user's batch holds: later upserts and removals
    leave both as they were (Arrow's buffers are never written in place here; a run's
    file deleted by a merge stays readable through the views mapped from it)."""
    with _layout(layout) as store:
        state = _state(store, spill=1)
        given = _table({("a", 1.5): 1, ("b", None): 2})
        state.upsert(T, given)
        assert len(state.spilled()) == (layout == "disk")
        snap = state.snapshot()
        before = _model_of(_rows(snap))
        state.upsert(T, _table({("a", 1.5): 7, ("c", 0.0): 3}))
        state.remove(T, _table({("b", None): 0}))
        state.pop(T)
        assert _files(store) == set()
        assert _model_of(_rows(snap)) == before == _model_of(given)


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(deadline=None, max_examples=40)
@given(OPS, OPS, OPS)
def test_a_snapshot_left_for_the_writer_encodes_as_when_taken(
    layout: str, first: Any, second: Any, then: Any
) -> None:
    """A host leaves a columnar snapshot, whole or a delta, to its writer thread, which
    encodes it later (issue 30): by then the state may have changed, and what is written
    must be what encoding it when taken gave."""
    with _layout(layout) as store:
        state = _state(store, incremental=True)
        state.keep_changes()
        _apply(state, {}, first)
        whole = state.snapshot(0)
        state.taken(0)
        _apply(state, {}, second)
        delta = state.delta(1, 0)
        state.taken(1)
        snaps = [{"kind": "keyed", "tables": {"s": s}} for s in (whole, delta)]
        assert all(frozen(s, rows=False) for s in snaps)
        now = [serialization.encode(s) for s in snaps]
        _apply(state, {}, then)
        state.pop(T)
        assert [encode_part({"vertices": {0: s}}) for s in snaps] == [
            encode_part({"vertices": {0: b}}) for b in now
        ]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_small_changes_to_a_large_table_go_to_runs_of_their_own(layout: str) -> None:
    """A spine: 1% of a large table changed per epoch lands in small runs (the large one
    is not rewritten), runs merge as they grow, and the table is the model's throughout.
    On disk (runs of 50 rows or more in files), the large run stays in one file, the
    files of runs merged away are deleted, and a dropped time leaves none."""
    with _layout(layout) as store:
        state = _state(store, spill=50)
        _spine(state, store)
        if store is not None:
            big = state._times[T].runs[0][0].file
            assert big is not None and all(os.path.exists(p) for p in big.paths)
            assert {p for f in state.spilled() for p in f.paths} == _files(store)
        state.pop(T)
        assert _files(store) == set()


def _spine(state: ColumnState, store: StateStore | None) -> None:
    rng = np.random.default_rng(3)
    first: Any = None
    model: dict[Any, int] = {(f"k{i}", 1.5): i for i in range(2000)}
    state.upsert(T, _table(model))
    most_runs = 1
    for epoch in range(40):
        picked = rng.choice(2200, 20, replace=False)  # some new keys, most held
        batch = {(f"k{i}", 1.5): epoch for i in picked.tolist()}
        state.upsert(T, _table(batch))
        model.update(batch)
        gone = {(f"k{i}", 1.5): 0 for i in rng.choice(2200, 5, replace=False).tolist()}
        state.remove(T, _table(gone))
        for k in gone:
            model.pop(k, None)
        most_runs = max(most_runs, len(state._times[T].runs))
        assert _model_of(state.get(T)) == model
        _check_files(state, store)
        if store is not None:
            held = {p for f in state.spilled() for p in f.paths}
            assert held == _files(store), "a merged run's files are left"
            first = first or state._times[T].runs[0][0].file
            assert state._times[T].runs[0][0].file is first  # the large run's file stays
        found, held = state.lookup(T, _table(batch))
        assert len(found) == sum(k in model for k in batch)
        assert all(model[(r["k"], r["f"])] == r["v"] for r in held.to_pylist())
    assert most_runs >= 3  # the large run was left alone while the small ones grew
    assert len(state._times[T].runs[0][0]) >= 2000  # and never rewritten for 20 keys


def test_an_upsert_told_where_its_keys_are_replaces_them_there() -> None:
    """A fold: ``find`` the epoch's keys, then ``upsert`` them told where they are (no
    second lookup). The places given are used: the keys' old rows go, none twice."""
    state = ColumnState(KEYS, SCHEMA)
    model = {(f"k{i}", 1.5): i for i in range(100)}
    state.upsert(T, _table(model))
    batch = {(f"k{i}", 1.5): -i for i in range(90, 130)}  # 10 held, 30 new
    rows = _table(batch)
    found = state.find(T, rows)
    assert len(found.index) == 10
    state.upsert(T, rows, found=found)
    model.update(batch)
    assert _model_of(state.get(T)) == model
    assert len(state) == len(model)


def test_a_stale_lookup_is_not_trusted() -> None:
    """Places from before a change (here an upsert of new keys, merged into the run) are
    stale: the upsert looks its keys up again instead of killing what is there now."""
    state = ColumnState(KEYS, SCHEMA)
    model = {(f"k{i}", 1.5): i for i in range(100)}
    state.upsert(T, _table(model))
    rows = _table({(f"k{i}", 1.5): 7 for i in range(0, 100, 3)})
    found = state.find(T, rows)
    other = {(f"k{i}", 1.5): i for i in range(100, 160)}
    state.upsert(T, _table(other))  # new keys, over half as many: merged, places moved
    model.update(other)
    state.upsert(T, rows, found=found)
    model.update({(f"k{i}", 1.5): 7 for i in range(0, 100, 3)})
    assert _model_of(state.get(T)) == model


def test_mutation_a_stale_lookup_trusted_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant trusts a lookup's places whatever changed since (no version check):
    they are masks of a run merged away, the keys' rows now held elsewhere stay, twice."""
    monkeypatch.setattr(
        columnar.Found,
        "covers",
        lambda self, spine, h: self.spine is spine and self.count == len(h),
    )
    with pytest.raises(AssertionError):
        test_a_stale_lookup_is_not_trusted()


def test_mutation_an_upsert_that_ignores_where_its_keys_are_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Told where its keys are, an upsert that kills nothing there keeps both rows."""

    def kill_nothing(self: Any, rows: pa.Table, h: Any, found: Any = None) -> int:
        return 0 if found is not None else int(ORIGINAL_KILL(self, rows, h))

    monkeypatch.setattr(columnar.Spine, "_kill", kill_nothing)
    with pytest.raises(AssertionError):
        test_an_upsert_told_where_its_keys_are_replaces_them_there()


ORIGINAL_KILL = columnar.Spine._kill


def _finds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the lookups of keys in a run from now on (in the one item returned)."""
    calls = [0]
    real = Arranged.find

    def find(self: Arranged, rows: pa.Table, h: Any) -> Any:
        calls[0] += 1
        return real(self, rows, h)

    monkeypatch.setattr(Arranged, "find", find)
    return calls


def test_a_fold_looks_its_keys_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Told where its keys are, an upsert looks none up; a ``Found`` of other keys (one
    more, or the same keys repeated) or from before a change is not trusted: those keys
    are looked up again, and the table stays the model's, its count of rows too."""
    state = ColumnState(KEYS, SCHEMA)
    model = {(f"k{i}", 1.5): i for i in range(100)}
    state.upsert(T, _table(model))
    finds = _finds(monkeypatch)

    def put(batch: dict[Any, int], looked_up: pa.Table) -> int:
        found = state.find(T, looked_up)
        before = finds[0]
        state.upsert(T, _table(batch), found=found)
        model.update(batch)
        assert _model_of(state.get(T)) == model
        assert len(state) == len(model)
        return finds[0] - before

    batch = {(f"k{i}", 1.5): -i for i in range(95, 105)}  # 5 held, 5 new
    assert put(batch, _table(batch)) == 0
    more = {(f"k{i}", 1.5): 7 for i in range(3)}
    assert put(more, _table(dict(list(more.items())[:2]))) > 0  # k2 not looked up
    again = {(f"k{i}", 1.5): 8 for i in range(10, 12)}
    twice = pa.concat_tables([_table(again), _table(again)])  # the keys repeated
    assert put(again, twice) > 0


def test_mutation_a_found_trusted_for_other_keys_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mutant trusts any ``Found`` of this spine's version: a key upserted that the
    lookup did not cover keeps its old row, and is held twice."""
    monkeypatch.setattr(
        columnar.Found,
        "covers",
        lambda self, spine, h: self.spine is spine and self.version == spine._version,
    )
    with pytest.raises(AssertionError):
        test_a_fold_looks_its_keys_up_once(monkeypatch)
