"""A key's bin is the same whichever path routes it (DESIGN.md, invariant 8): the
vectorised hash of key columns equals ``stable_hash`` of the row's key, for every type
a key column can have, nulls included, one column or several; the exchange's two-pass
bins of an int64 key (``int_bins``) equal ``stable_hash(key) % bins``, sliced columns
included, and a whole ``route_by`` sends each row to its bin's worker. Mutation checks:
a split that drops a slice, bins from the wrong byte or without the hash's high half.
Strings and bytes are hashed from their buffers in numpy (``text_hashes``): equal to
``stable_hash`` for every kind of text array, sliced, short and longer than
``LONGEST``; a hash that reads from the buffer's start instead of the slice's, or one
that stops at the shortest string's length, is caught. Each row's worker from its bin
(``workers_of``) is ``table[bin]`` for every table, bins dealt in turn or not; a lookup
that takes any table for bins dealt in turn, or one that checks only the first turn, is
caught, and so is a split that loses the last worker's rows or keeps a worker's rows out
of order. A channel keeps each routing table's lookup and follows every change of table
(a migration's): a lookup kept per number of bins is caught."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timely import stable_hash
from timely.routing import columns
from timely.routing.columns import (
    ColumnExchange,
    ColumnHasher,
    Lookup,
    int_bins,
    key_hashes,
    lookup,
    split_by,
    text_hashes,
    workers_of,
)
from timely.routing.hashing import LONGEST

INT64 = st.integers(-(2**63), 2**63 - 1)
COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int64": (pa.int64(), INT64),
    "int8": (pa.int8(), st.integers(-128, 127)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "bool": (pa.bool_(), st.booleans()),
    "float64": (
        pa.float64(),
        st.floats(allow_nan=False) | st.integers(-(2**53), 2**53).map(float),
    ),
    "string": (pa.string(), st.text(max_size=8)),
    "binary": (pa.binary(), st.binary(max_size=8)),
}


@st.composite
def tables(draw: st.DrawFn) -> tuple[pa.Table, list[str]]:
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=3))
    rows = draw(st.integers(0, 30))
    arrays, fields = [], []
    for i, kind in enumerate(names):
        t, values = COLUMNS[kind]
        arrays.append(pa.array(draw(st.lists(st.none() | values, min_size=rows, max_size=rows)), t))
        fields.append(f"c{i}")
    return pa.Table.from_arrays(arrays, names=fields), fields


@given(tables())
def test_key_hashes_equal_stable_hash_of_each_rows_key(data: tuple[pa.Table, list[str]]) -> None:
    table, keys = data
    hashers = [ColumnHasher() for _ in keys]
    got = key_hashes(table, tuple(keys), hashers)
    rows = table.to_pylist()
    want = [
        stable_hash(r[keys[0]]) if len(keys) == 1 else stable_hash(tuple(r[k] for k in keys))
        for r in rows
    ]
    assert got.tolist() == want
    again = key_hashes(table, tuple(keys), hashers)  # the remembered strings: the same
    assert again.tolist() == want


def test_a_dictionary_column_hashes_as_its_values() -> None:
    plain = pa.array(["a", "b", None, "a"])
    encoded = plain.dictionary_encode()
    h = ColumnHasher()
    assert h.hashes(encoded).tolist() == h.hashes(plain).tolist()
    assert h.hashes(plain).tolist() == [stable_hash(v) for v in plain.to_pylist()]


def test_strings_that_hardly_repeat_are_hashed_without_a_dictionary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A column whose last dictionary held nearly a value per row (a group's keys, as the
    partial aggregates before an exchange send) is hashed from its own buffers, with a
    dictionary again every ``_RECHECK`` batches; one whose values repeat (raw words) keeps
    the dictionary. The hashes are ``stable_hash``'s either way, nulls included. Caught:
    the dictionary built for every batch (its cost ~2x the hashing of distinct words),
    or never again once a column looked distinct."""
    encodes: list[int] = []
    real = columns.pc.dictionary_encode

    def counted(column: Any) -> Any:
        encodes.append(len(column))
        return real(column)

    monkeypatch.setattr(columns.pc, "dictionary_encode", counted)
    h = ColumnHasher()
    keys = pa.array([f"w{i}" for i in range(100)])
    words = pa.array([f"w{i % 7}" for i in range(100)])
    with_nulls = pa.array(["a", None, "b", "c"])
    for _ in range(1 + columns._RECHECK):
        assert h.hashes(keys).tolist() == [stable_hash(v) for v in keys.to_pylist()]
    assert encodes == [100]  # the first batch only
    assert h.hashes(keys).tolist() == [stable_hash(v) for v in keys.to_pylist()]
    assert encodes == [100, 100]  # the recheck
    assert h.hashes(with_nulls).tolist() == [stable_hash(v) for v in with_nulls.to_pylist()]
    assert encodes == [100, 100, 4]  # nulls: through the dictionary, which knows them
    h = ColumnHasher()
    for _ in range(3):
        assert h.hashes(words).tolist() == [stable_hash(v) for v in words.to_pylist()]
    assert encodes == [100, 100, 4, 100, 100, 100]  # 7 distinct in 100: every time


DESTS = (
    st.integers(1, 20)
    .flatmap(lambda workers: st.lists(st.integers(0, workers - 1), min_size=1, max_size=40))
    .map(lambda d: np.array(d, np.uint8))
)
"""Each row's worker, of up to 20: past ``_FEW`` the split sorts instead of a pass each."""


def check_split(split: Any, dest: np.ndarray[Any, Any]) -> None:
    batch = pa.RecordBatch.from_pydict({"i": list(range(len(dest))), "s": [str(d) for d in dest]})
    parts = split(batch, dest)
    assert [w for w, _ in parts] == sorted(set(dest.tolist()))
    for w, part in parts:
        assert part.column("i").to_pylist() == np.flatnonzero(dest == w).tolist()
        assert part.column("s").to_pylist() == [str(w)] * part.num_rows


@given(DESTS)
def test_split_by_keeps_every_row_once_in_order(dest: np.ndarray[Any, Any]) -> None:
    check_split(split_by, dest)


def drops_the_last_part(batch: Any, dest: Any) -> Any:
    return split_by(batch, dest)[:-1] if len(set(dest.tolist())) > 1 else split_by(batch, dest)


def out_of_order(batch: Any, dest: Any) -> Any:
    return [(w, p.take(pa.array(range(p.num_rows - 1, -1, -1)))) for w, p in split_by(batch, dest)]


@pytest.mark.parametrize("mutant", [drops_the_last_part, out_of_order])
def test_mutation_a_split_that_loses_or_reorders_rows_is_caught(mutant: Any) -> None:
    run = settings(max_examples=300)(given(DESTS)(lambda dest: check_split(mutant, dest)))
    with pytest.raises(AssertionError):
        run()


@st.composite
def routing_tables(draw: st.DrawFn) -> np.ndarray[Any, Any]:
    """A routing table (one worker per bin): bins dealt to the workers in turn, as
    ``default_table`` deals them, or in turn but for a few bins moved (a migration), or
    any workers at all."""
    bins = draw(st.sampled_from([1, 2, 4, 8, 64, 256, 512, 1 << 16]))
    workers = draw(st.sampled_from([w for w in (1, 2, 3, 4, 8, 16) if w <= bins]))
    table = np.arange(bins) % workers
    kind = draw(st.sampled_from(["dealt", "moved", "any"]))
    if kind == "moved":
        for b in draw(st.lists(st.integers(0, bins - 1), min_size=1, max_size=3)):
            table[b] = draw(st.integers(0, workers - 1))
    elif kind == "any":
        table = np.random.default_rng(draw(st.integers(0, 2**32))).integers(0, workers, bins)
    return table.astype(np.intp)


def check_workers_of(make: Any, table: np.ndarray[Any, Any], picks: list[int]) -> None:
    bins = len(table)
    keys = np.array(picks, np.uint64) % np.uint64(bins)
    ready = make(table)
    for key_bins in (
        columns._bins_of(keys, bins),  # as the hash path makes them (a strided view)
        keys.astype(np.uint16 if bins <= 1 << 16 else np.uint64),
        keys.astype(np.intp),
    ):
        assert workers_of(key_bins, ready).tolist() == table[keys.astype(np.intp)].tolist()


PICKS = st.lists(st.integers(0, 2**16 - 1), max_size=40)


@given(routing_tables(), PICKS)
def test_workers_of_is_the_tables_worker_of_each_bin(
    table: np.ndarray[Any, Any], picks: list[int]
) -> None:
    check_workers_of(lookup, table, picks)


def any_table_as_dealt(table: Any) -> Any:
    ready = lookup(table)
    workers = int(table.max()) + 1
    return Lookup(ready.table, workers - 1 if workers & (workers - 1) == 0 else None)


def first_turn_only(table: Any) -> Any:
    ready = lookup(table)
    workers = int(table.max()) + 1
    dealt = workers & (workers - 1) == 0 and (table[:workers] == np.arange(workers)).all()
    return Lookup(ready.table, workers - 1 if dealt else None)


@pytest.mark.parametrize("mutant", [any_table_as_dealt, first_turn_only])
def test_mutation_a_lookup_that_takes_a_moved_table_as_dealt_is_caught(mutant: Any) -> None:
    run = settings(max_examples=300)(
        given(routing_tables(), PICKS)(lambda t, p: check_workers_of(mutant, t, p))
    )
    with pytest.raises(AssertionError):
        run()


@st.composite
def configurations(draw: st.DrawFn) -> list[np.ndarray[Any, Any]]:
    """Routing tables of one run, in the order batches meet them: a few configurations
    of the same bins (dealt in turn, bins moved, any), each met again later (a fluid
    migration has several in flight), as ``Routing`` keeps them: one array each."""
    bins = draw(st.sampled_from([4, 16, 256]))
    workers = draw(st.sampled_from([2, 3, 4]))
    made = []
    for _ in range(draw(st.integers(2, 4))):
        table = np.arange(bins) % workers
        for b in draw(st.lists(st.integers(0, bins - 1), max_size=4)):
            table[b] = draw(st.integers(0, workers - 1))
        made.append(table.astype(np.intp))
    return draw(st.lists(st.sampled_from(made), min_size=2, max_size=8))


def check_follows_each_table(
    exchange: ColumnExchange, tables: list[np.ndarray[Any, Any]], keys: list[int]
) -> None:
    batch = pa.RecordBatch.from_pydict({"k": pa.array(keys, pa.int64()), "i": range(len(keys))})
    for table in tables:
        out = exchange.route_by([batch], table, 0)
        got = {
            int(i): w for w, parts in out.items() for p in parts for i in p.column("i").to_pylist()
        }
        assert got == {i: int(table[stable_hash(k) % len(table)]) for i, k in enumerate(keys)}


KEYS = st.lists(INT64, min_size=1, max_size=60)


@given(configurations(), KEYS)
def test_an_exchange_follows_every_change_of_its_routing_table(
    tables: list[np.ndarray[Any, Any]], keys: list[int]
) -> None:
    """A channel makes each table's lookup once and keeps it: a migration's new table
    (another array) is routed by, never the lookup of the table before it."""
    check_follows_each_table(ColumnExchange(("k",)), tables, keys)


class LookupPerBins(ColumnExchange):
    """Mutant: the lookup kept per number of bins, as if the table never changed."""

    def _lookup(self, table: np.ndarray[Any, Any]) -> Lookup:
        entry = self._lookups.get(len(table))
        if entry is None:
            entry = self._lookups[len(table)] = (table, lookup(table))
        return entry[1]


def test_mutation_a_lookup_kept_across_tables_is_caught() -> None:
    run = settings(max_examples=300)(
        given(configurations(), KEYS)(
            lambda t, k: check_follows_each_table(LookupPerBins(("k",)), t, k)
        )
    )
    with pytest.raises(AssertionError):
        run()


BINS = st.sampled_from([1, 2, 4, 8, 64, 128, 256])
SLICED_INTS = st.lists(INT64 | st.sampled_from([0, -1, 2**63 - 1, -(2**63)]), max_size=40).flatmap(
    lambda xs: st.tuples(st.just(xs), st.integers(0, len(xs)))
)
"""int64 keys (the extremes often) and where their column starts: a sliced column's
values start past its buffer's first, as after a ``take`` or an exchange."""


def check_int_bins(bins_of: Any, keys: list[int], start: int, bins: int) -> None:
    column = pa.array(keys, pa.int64()).slice(start)
    batch = pa.RecordBatch.from_arrays([column], names=["k"])
    got = bins_of(batch, ("k",), bins)
    assert got is not None
    assert got.tolist() == [stable_hash(k) % bins for k in keys[start:]]


@given(SLICED_INTS, BINS)
def test_int_bins_are_stable_hash_modulo_bins(case: tuple[list[int], int], bins: int) -> None:
    check_int_bins(int_bins, *case, bins)


def test_int_bins_leave_other_keys_to_the_hash() -> None:
    ints = pa.record_batch({"k": pa.array([1, 2], pa.int64()), "j": pa.array([3, 4], pa.int64())})
    assert int_bins(ints, ("k", "j"), 256) is None  # two key columns
    assert int_bins(ints, ("k",), 512) is None  # more bins than a byte holds
    assert int_bins(ints, ("k",), 96) is None  # not a power of two
    with_null = pa.record_batch({"k": pa.array([1, None], pa.int64())})
    assert int_bins(with_null, ("k",), 256) is None
    narrow = pa.record_batch({"k": pa.array([1, 2], pa.int32())})
    assert int_bins(narrow, ("k",), 256) is None


def bins_from_byte_3(batch: Any, keys: tuple[str, ...], bins: int) -> Any:
    h = batch.column(keys[0]).to_numpy().view(np.uint64) * columns._G
    return (h.view(np.uint8)[0::8] ^ h.view(np.uint8)[3::8]) & np.uint8(bins - 1)


def bins_without_the_high_half(batch: Any, keys: tuple[str, ...], bins: int) -> Any:
    h = batch.column(keys[0]).to_numpy().view(np.uint64) * columns._G
    return h.view(np.uint8)[0::8] & np.uint8(bins - 1)


@pytest.mark.parametrize("mutant", [bins_from_byte_3, bins_without_the_high_half])
def test_mutation_int_bins_from_the_wrong_bits_are_caught(mutant: Any) -> None:
    run = settings(max_examples=300)(
        given(SLICED_INTS, BINS)(lambda case, bins: check_int_bins(mutant, *case, bins))
    )
    with pytest.raises(AssertionError):
        run()


@given(st.lists(INT64, max_size=60), st.integers(2, 5), BINS, st.booleans())
def test_route_by_sends_each_row_to_its_bins_worker(
    keys: list[int], workers: int, bins: int, dealt: bool
) -> None:
    """Invariant 8 through a whole ``route_by``: bins dealt in turn (the default table,
    read from the bins' low bits for 2 and 4 workers) or shuffled."""
    table = np.array([(b if dealt else b * 7 + 3) % workers for b in range(bins)])
    batch = pa.RecordBatch.from_pydict({"k": pa.array(keys, pa.int64()), "i": range(len(keys))})
    load = np.zeros(bins, np.int64)
    out = ColumnExchange(("k",)).route_by([batch], table, 0, load)
    got = {int(i): w for w, parts in out.items() for p in parts for i in p.column("i").to_pylist()}
    assert got == {i: int(table[stable_hash(k) % bins]) for i, k in enumerate(keys)}
    assert (
        load.tolist() == np.bincount([stable_hash(k) % bins for k in keys], minlength=bins).tolist()
    )


TEXTS = {
    "string": (pa.string(), st.text(max_size=12)),
    "large_string": (pa.large_string(), st.text(max_size=12)),
    "binary": (pa.binary(), st.binary(max_size=12)),
    "large_binary": (pa.large_binary(), st.binary(max_size=12)),
}
LONG = st.sampled_from(["é" * 200, "x" * (LONGEST + 1), "y" * LONGEST])


@st.composite
def text_arrays(draw: st.DrawFn) -> tuple[pa.Array, list[Any]]:
    kind = draw(st.sampled_from(sorted(TEXTS)))
    t, values = TEXTS[kind]
    binary = kind.endswith("binary")
    long = LONG.map(lambda s: s.encode()) if binary else LONG
    items = draw(st.lists(values | long, max_size=30))
    start = draw(st.integers(0, len(items)))
    return pa.array(items, t).slice(start), items[start:]


def check_text_hashes(hashes: Any, case: tuple[pa.Array, list[Any]]) -> None:
    array, items = case
    got = hashes(array)
    assert got is not None
    assert got.tolist() == [stable_hash(v) for v in items]


@given(text_arrays())
def test_text_hashes_equal_stable_hash(case: tuple[pa.Array, list[Any]]) -> None:
    check_text_hashes(text_hashes, case)


def test_text_hashes_leave_nulls_and_other_types_to_the_caller() -> None:
    assert text_hashes(pa.array(["a", None])) is None
    assert text_hashes(pa.array([1, 2])) is None


def from_the_buffers_start(array: pa.Array) -> Any:
    whole = pa.Array.from_buffers(array.type, len(array), array.buffers())  # offset 0
    return text_hashes(whole)


def stops_at_the_shortest(array: pa.Array) -> Any:
    if not len(array):
        return text_hashes(array)
    if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
        shortest = int(pa.compute.min(pa.compute.binary_length(array)).as_py())
        return text_hashes(pa.compute.binary_slice(array, 0, shortest))
    shortest = int(pa.compute.min(pa.compute.utf8_length(array)).as_py())
    return text_hashes(pa.compute.utf8_slice_codeunits(array, 0, shortest))


@pytest.mark.parametrize("mutant", [from_the_buffers_start, stops_at_the_shortest])
def test_mutation_text_hashes_of_the_wrong_bytes_are_caught(mutant: Any) -> None:
    run = settings(max_examples=300)(given(text_arrays())(lambda c: check_text_hashes(mutant, c)))
    with pytest.raises(AssertionError):
        run()
