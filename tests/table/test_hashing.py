"""A key's bin is the same whichever path routes it (DESIGN.md, invariant 8): the
vectorised hash of key columns equals ``stable_hash`` of the row's key, for every type
a key column can have, nulls included, one column or several."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from timely import stable_hash
from timely.routing.columns import ColumnHasher, key_hashes, split_by

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


@given(st.lists(st.integers(0, 3), min_size=1, max_size=40))
def test_split_by_keeps_every_row_once_in_order(dest: list[int]) -> None:
    batch = pa.RecordBatch.from_pydict({"i": list(range(len(dest)))})
    parts = split_by(batch, np.array(dest))
    assert sorted(w for w, _ in parts) == sorted(set(dest))
    for w, part in parts:
        assert part.column("i").to_pylist() == [i for i, d in enumerate(dest) if d == w]


def test_mutation_a_split_that_drops_the_last_slice_is_caught() -> None:
    """The property above catches a partition that loses a worker's slice."""
    dest = np.array([0, 1, 1, 2])
    batch = pa.RecordBatch.from_pydict({"i": [0, 1, 2, 3]})
    broken = split_by(batch, dest)[:-1]
    assert sum(p.num_rows for _, p in broken) < batch.num_rows
