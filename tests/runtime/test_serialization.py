"""The wire format round-trips values exactly: same types (tuples stay tuples, lists stay
lists), same contents, numpy arrays bit for bit, and progress as real Locations and Ports."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

import hypothesis.extra.numpy as hnp
import msgpack  # type: ignore[import-untyped]
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from progress import Location, Port, ProgressBatch, source, target
from timely.comm import serialization
from timely.comm.messages import WorkerMessage
from timely.comm.serialization import (
    AsBin,
    Embedded,
    PlainDataError,
    decode,
    decode_message,
    decode_plain,
    encode,
    encode_message,
    encode_message_parts,
    encode_pieces,
    encode_plain,
    encode_plain_one,
)


@dataclass(frozen=True)
class Point:
    x: int
    y: str


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (arrays bytewise, floats by repr)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return bool(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, np.generic):
        return bool(a.dtype == b.dtype and a.tobytes() == b.tobytes())
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=False)
    | st.text(st.characters(exclude_categories=[]), max_size=8)  # lone surrogates too
    | st.binary(max_size=8)
)
hashables = st.recursive(
    scalars,
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
dtypes = st.sampled_from(
    ["int8", "int64", "uint16", "float32", "float64", "bool", "complex128", "<U3", ">i4"]
)
arrays = hnp.arrays(
    dtype=dtypes, shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
)
numpy_scalars = st.builds(np.int32, st.integers(-(2**31), 2**31 - 1)) | st.builds(
    np.float64, st.floats()
)
others = (
    st.builds(Point, st.integers(), st.text(max_size=4))
    | st.fractions(max_denominator=100)
    | st.datetimes()
)
values = st.recursive(
    scalars | arrays | numpy_scalars | others,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.lists(hashables, max_size=6)  # often flat: the one-region fast path
        | st.tuples(inner, inner)
        | st.tuples(inner)
        | st.dictionaries(hashables, inner, max_size=4)
        | st.sets(hashables, max_size=4)
        | st.frozensets(hashables, max_size=4)
    ),
    max_leaves=20,
)


@given(values)
def test_values_round_trip_with_their_types(value: Any) -> None:
    assert same(decode(encode(value)), value)


times = st.lists(st.integers(0, 2**40), min_size=1, max_size=3).map(tuple)
locations = st.builds(
    lambda node, is_source, port: source(node, port) if is_source else target(node, port),
    st.integers(0, 500),
    st.booleans(),
    st.integers(0, 4),
)
updates = st.tuples(st.tuples(locations, times), st.integers(-5, 5).filter(bool))
batches = st.tuples(st.integers(0, 100), st.integers(0, 3), times, st.lists(values, max_size=5))
messages = st.builds(
    WorkerMessage,
    st.integers(0, 63),
    st.integers(0, 2**40),
    st.lists(batches, max_size=4),
    st.none()
    | st.builds(
        ProgressBatch,
        st.integers(0, 63),
        st.integers(0, 2**40),
        st.lists(updates, max_size=6).map(tuple),
    ),
)


@given(messages)
def test_worker_messages_round_trip_with_real_locations(msg: WorkerMessage) -> None:
    back = decode_message(encode_message(msg))
    assert (back.sender, back.seq) == (msg.sender, msg.seq)
    assert same(back.data, msg.data)
    if msg.progress is None:
        assert back.progress is None
        return
    assert back.progress == msg.progress
    assert back.progress is not None
    for ((loc, time), _), ((orig, _), _) in zip(back.progress.updates, msg.progress.updates):
        assert type(loc) is Location and type(loc.kind) is Port and loc.kind is orig.kind
        assert type(time) is tuple


def test_flat_batches_keep_nested_tuples_and_lists_apart() -> None:
    flat = [("a", 1), ("b", (2, (3, None))), "c", 4.5, 2**70]
    assert same(decode(encode(flat)), flat)
    mixed = [("a", [1, 2]), ("b", (2,)), [3], {"k": (1, [2])}]
    assert same(decode(encode(mixed)), mixed)
    nested = (["x", "y", "z", "w"], [("p", 1)] * 5)
    assert same(decode(encode(nested)), nested)


def test_arrays_arrive_zero_copy_and_read_only() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]  # not contiguous
    back = decode(encode(arr))
    assert same(back, np.ascontiguousarray(arr))
    assert not back.flags.writeable
    stamp = np.array(["2024-01-01T00:00"], dtype="datetime64[ns]")
    assert same(decode(encode(stamp)), stamp)
    objects = np.array([Point(1, "a"), None], dtype=object)  # no raw bytes: pickled
    back_objects = decode(encode(objects))
    assert back_objects.dtype == object and list(back_objects) == list(objects)


def test_progress_updates_travel_as_ints() -> None:
    batch = ProgressBatch(1, 2, (((target(3, 1), (0, 4)), -1),))
    payload = encode_message(WorkerMessage(1, 9, [], batch))
    raw = msgpack.unpackb(payload)
    assert raw == [1, 9, [], [1, 2, [[3, 0, 1, [0, 4], -1]]]]


def test_other_values_fall_back_to_pickle() -> None:
    value = [Fraction(1, 3), datetime(2024, 5, 6), Point(2, "b"), bytearray(b"ab")]
    back = decode(encode(value))
    assert back[:3] == value[:3]
    assert back[3] == b"ab"  # msgpack packs bytearray itself; it comes back as bytes


def test_unknown_ext_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="ext type 99"):
        decode(msgpack.packb(msgpack.ExtType(99, b"")))


def test_threads_encode_at_once() -> None:
    value = [(i, [("k", (i, [i]))] * 3, {i}) for i in range(50)]

    def round_trip(_: int) -> bool:
        return same(decode(encode(value)), value)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(round_trip, range(200)))


def test_a_column_of_words_with_a_lone_surrogate_round_trips() -> None:
    """Words are packed by a packer without an error handler first (twice as fast); one
    with a lone surrogate is packed as the surrogate-passing one packs it."""
    words = [f"w{i}" for i in range(10)] + ["a\udc80b"]
    assert decode(encode(words)) == words
    assert decode(encode(words[:10])) == words[:10]
    assert encode(words)[1:] != encode(words[:10])[1:]


def test_special_floats() -> None:
    back = decode(encode([-0.0, math.inf, -math.inf]))
    assert [repr(x) for x in back] == ["-0.0", "inf", "-inf"]
    assert math.isnan(decode(encode((math.nan,)))[0])


def _flat_reference(items: Any) -> bool:
    """Flat: every item a scalar, or a tuple whose items are flat (checked one by one)."""
    scalars = (str, int, float, bytes, bool, type(None))
    return all(type(x) in scalars or (type(x) is tuple and _flat_reference(x)) for x in items)


_leaf = st.one_of(st.integers(), st.text(max_size=3), st.none(), st.booleans(), st.floats())
_nested = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.tuples(inner, inner, inner),
        st.lists(inner, max_size=2),
        st.dictionaries(st.integers(), inner, max_size=1),
    ),
    max_leaves=6,
)


@given(st.lists(_nested, max_size=12))
def test_flatness_check_agrees_with_its_definition(items: list[Any]) -> None:
    """The column-wise check over tuples of one length answers as the record-wise one."""
    from timely.comm.serialization import _is_flat

    assert _is_flat(items) == _flat_reference(items)
    assert decode(encode(items)) == items or any(x != x for x in _leaves(items))


_odd = st.one_of(
    _nested,
    st.integers(min_value=2**64, max_value=2**70),  # an ext, not a msgpack int
    st.builds(lambda x: np.int64(x), st.integers(-5, 5)),
    st.builds(lambda x: _Str(x), st.text(max_size=2)),
    st.text(alphabet="\ud800x", max_size=2),
    st.none(),
    st.binary(max_size=2),
)


class _Str(str):
    """A str subclass: not a scalar of the flat region."""


@given(
    st.sampled_from([st.text(max_size=4), st.integers(-(2**63), 2**63 - 1), st.floats()]).flatmap(
        lambda kind: st.lists(kind, min_size=4, max_size=20)
    ),
    st.lists(st.tuples(st.integers(0, 19), _odd), max_size=2),
)
def test_column_fast_path_packs_as_the_checked_path(items: list[Any], odd: list[Any]) -> None:
    """A column of one kind of scalar is packed without a pass over its types first
    (issue 30); with any other value put in anywhere (a list or a dict, which a packer
    cannot refuse, a subclass, an int beyond 64 bits) it is what the checked path makes:
    the region's bytes are the same, or the list is left to the record-wise packing.
    (Mutant: without the ``sum``/``join`` pass, a nested list comes back a tuple.)"""
    from timely.comm.serialization import EXT_FLAT, _is_flat, _maybe_flat, _packers

    for at, value in odd:
        items.insert(min(at, len(items)), value)
    made = _maybe_flat(list(items))
    if _is_flat(items):
        assert made == msgpack.ExtType(EXT_FLAT, _packers.flat.pack(items))
    else:
        assert made == items
    assert same(decode(encode(items)), items) or any(x != x for x in _leaves(items))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, tuple | list):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


plain_values = st.recursive(
    scalars | arrays | numpy_scalars,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.lists(hashables, max_size=6)
        | st.tuples(inner, inner)
        | st.dictionaries(hashables, inner, max_size=4)
        | st.sets(hashables, max_size=4)
    ),
    max_leaves=12,
)


@given(st.lists(plain_values, max_size=8))
def test_plain_data_is_encoded_as_the_wire_codec_encodes_it(items: list[Any]) -> None:
    """What the disk backend keeps: each value alone, in the wire codec's bytes (keys
    written one at a time and in bulk must be the same bytes), and back with its types."""
    assert encode_plain(items) == [encode_plain([x])[0] for x in items]
    assert encode_plain(items) == [encode_plain_one(x) for x in items]
    assert all(same(a, b) for a, b in zip(decode_plain(encode_plain(items)), items))


@given(
    st.lists(
        st.one_of(
            st.integers(),
            st.text(),
            st.floats(allow_nan=False),
            st.binary(),
            st.booleans(),
            st.none(),
        ),
        max_size=8,
    )
)
def test_plain_scalars_take_the_short_way_to_the_same_bytes(items: list[Any]) -> None:
    """Lists of scalars skip the codec's hooks; the bytes are those the hooks give (an
    int beyond 64 bits, a lone surrogate go the long way)."""
    import timely.comm.serialization as ser

    hooked = []
    for x in items:
        ser._packers.plain = True
        try:
            hooked.append(ser._pack(x))
        finally:
            ser._packers.plain = False
    assert encode_plain(items) == hooked == [encode_plain_one(x) for x in items]


def test_plain_data_refuses_what_only_pickle_carries() -> None:
    with pytest.raises(PlainDataError, match=r"test_serialization\.Point is not plain"):
        encode_plain([("k", Point(1, "a"))])
    pickled = encode(Point(1, "a"))
    with pytest.raises(PlainDataError, match="not written by this run"):
        decode_plain([pickled])
    assert decode(pickled) == Point(1, "a")  # the wire codec itself still carries it


def test_arrow_batches_and_tables_travel_as_ipc_not_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table stream's records cross the wire as Arrow IPC: equal after the trip
    (nulls, lists, dictionaries, an empty batch), and never pickled."""
    import pyarrow as pa

    import timely.comm.serialization as wire

    def no_pickle(obj: Any) -> bytes:
        raise AssertionError(f"pickled {type(obj).__name__}")

    monkeypatch.setattr(wire, "_pickle_dumps", no_pickle)
    batch = pa.RecordBatch.from_pydict(
        {
            "n": [1, None, 3],
            "s": ["a", None, "ccc"],
            "l": [[1, 2], [], None],
            "d": pa.array(["x", "y", "x"]).dictionary_encode(),
        }
    )
    table = pa.Table.from_batches([batch, batch])
    empty = pa.RecordBatch.from_pylist([], schema=batch.schema)
    for value in (batch, table, empty):
        got = wire.decode(wire.encode([value]))
        assert type(got[0]) is type(value) and got[0].equals(value)


def test_arrow_records_travel_after_the_envelope_zero_copy() -> None:
    """A table stream's batches go as their IPC streams after the envelope, each at an
    offset that is a multiple of 8, and come back as views over the payload; other
    records of the same message travel in the envelope."""
    batch = pa.record_batch({"k": pa.array([1, 2, 3], pa.int64()), "s": ["a", None, "c"]})
    sliced = batch.slice(1, 2)
    table = pa.table({"x": [1.5, 2.5]})
    empty = batch.slice(0, 0)
    coded = pa.record_batch({"d": pa.array(["x", "y", "x"]).dictionary_encode()})
    progress = ProgressBatch(0, 1, (((target(3, 1), (0, 4)), -1),))
    msg = WorkerMessage(
        0,
        7,
        [(2, 0, (1,), [batch, sliced, empty, coded]), (3, 1, (0, 2), [table, ("row", 1)])],
        progress,
    )
    parts = encode_message_parts(msg)
    assert parts[0][0] == 0xC1
    assert len(parts) == 1  # small batches: metadata and buffers joined, one socket write
    payload = b"".join(bytes(p) for p in parts)
    assert payload == encode_message(msg)
    back = decode_message(payload)
    assert back.progress == progress and (back.sender, back.seq) == (0, 7)
    (v1, p1, t1, r1), (v2, p2, t2, r2) = back.data
    assert (v1, p1, t1, v2, p2, t2) == (2, 0, (1,), 3, 1, (0, 2))
    assert [type(r) for r in r1] == [pa.RecordBatch] * 4
    assert r1[0].equals(batch) and r1[1].equals(sliced) and r1[2].num_rows == 0
    assert r1[3].equals(coded)  # dictionary columns: through the IPC stream writer
    assert isinstance(r2[0], pa.Table) and r2[0].equals(table) and r2[1] == ("row", 1)
    base = np.frombuffer(payload, np.uint8).ctypes.data
    for column in r1[0].columns:
        for buf in column.buffers():
            if buf is not None:  # a view over the payload, aligned as Arrow wants
                assert base <= buf.address < base + len(payload)
                assert (buf.address - base) % 8 == 0


# -- encoded as pieces (checkpoint parts) ------------------------------------------------------

tables = st.builds(
    lambda n, batch: (pa.record_batch if batch else pa.table)(
        {"k": [f"w{i}" for i in range(n)], "n": list(range(n))}
    ),
    st.sampled_from([0, 1, 3, 300, 5000]),
    st.booleans(),
)
sized_bytes = st.sampled_from([0, 1, 16, 255, 256, 4095, 4096, 65535, 65536, 70000]).map(
    lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)
)
piece_values = st.recursive(
    scalars | tables | sized_bytes | arrays,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.lists(hashables, max_size=70)
        | st.tuples(inner, inner)
        | st.tuples(inner)
        | st.dictionaries(hashables, inner, max_size=4)
    ),
    max_leaves=12,
)


@given(piece_values, st.booleans())
def test_pieces_join_into_the_encoded_bytes(value: Any, embed: bool) -> None:
    """:func:`encode_pieces` writes what :func:`encode` does, byte for byte (so parts
    written by pieces read back as before), also around :class:`Embedded` pieces (a
    part's snapshots, each encoded on its own, carried as the ``bin`` of its bytes)."""
    check_pieces(value, embed)


def check_pieces(value: Any, embed: bool) -> None:
    if embed:
        want = encode({"format": 2, "vertices": {3: encode(value), 4: b"x"}})
        wrapped = {"format": 2, "vertices": {3: Embedded(encode_pieces(value)), 4: b"x"}}
        assert b"".join(encode_pieces(wrapped)) == want
        # encoded in the same pass as the part (a snapshot left as data: part_pieces)
        wrapped = {"format": 2, "vertices": {3: AsBin(value), 4: Embedded([b"x"])}}
        assert b"".join(encode_pieces(wrapped)) == want
    else:
        assert b"".join(encode_pieces(value)) == encode(value)


def arrow_type(leaf: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    return st.recursive(
        leaf,
        lambda inner: (
            st.builds(pa.list_, inner)
            | st.builds(lambda t: pa.struct([("a", t), ("b", pa.int8())]), inner)
            | st.builds(lambda t: pa.map_(pa.string(), t), inner)
        ),
        max_leaves=3,
    )


flat_types = st.sampled_from(
    [pa.int64(), pa.int8(), pa.float64(), pa.bool_(), pa.string(), pa.large_string()]
    + [pa.binary(), pa.timestamp("us"), pa.null(), pa.dictionary(pa.int32(), pa.string())]
)


def arrow_value(t: pa.DataType) -> st.SearchStrategy[Any]:
    """A value of a column of type ``t`` (as ``pa.array`` takes it), or None."""
    if pa.types.is_null(t):
        return st.none()
    if pa.types.is_list(t):
        inner = st.lists(arrow_value(t.value_type), max_size=3)
    elif pa.types.is_struct(t):
        inner = st.fixed_dictionaries({"a": arrow_value(t.field(0).type), "b": st.none()})
    elif pa.types.is_map(t):
        inner = st.lists(st.tuples(st.text(max_size=2), arrow_value(t.item_type)), max_size=2)
    elif pa.types.is_dictionary(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
        inner = st.sampled_from(["x", "y", "zz"])
    elif pa.types.is_binary(t):
        inner = st.binary(max_size=3)
    elif pa.types.is_boolean(t):
        inner = st.booleans()
    elif pa.types.is_floating(t):
        inner = st.floats(allow_nan=False)
    else:
        inner = st.integers(0, 100)
    return st.none() | inner


@st.composite
def arrow_records(draw: st.DrawFn) -> Any:
    """Tables (of one or more chunks, sliced or not) and record batches of random types,
    dictionary columns among them, with and without schema metadata."""
    types = draw(st.lists(arrow_type(flat_types), min_size=1, max_size=3))
    n = draw(st.integers(0, 20))
    columns = [pa.array([draw(arrow_value(t)) for _ in range(n)], type=t) for t in types]
    names = [f"c{i}" for i in range(len(columns))]
    metadata = draw(st.none() | st.just({b"k": b"v"}))
    batch = pa.record_batch(columns, names=names, metadata=metadata)
    if draw(st.booleans()):
        return batch.slice(draw(st.integers(0, n)), draw(st.integers(0, n)))
    chunks = draw(st.integers(1, 3))
    table = pa.Table.from_batches([batch] * chunks)
    if draw(st.booleans()):
        table = table.slice(draw(st.integers(0, n * chunks)))
    return table


@given(arrow_records())
def test_ipc_pieces_are_the_stream_writers_bytes(record: Any) -> None:
    """A table's IPC stream as its schema's and batches' messages (``serialize``) is what
    the stream writer writes (so what ``encode`` packs, and what restore reads), for any
    types, chunks and slices; with dictionaries it is the writer's own."""
    check_ipc(record)


def check_ipc(record: Any) -> None:
    pieces = serialization._arrow_pieces(record)
    assert b"".join(pieces) == serialization._arrow_bytes(record)
    back = decode(b"".join(encode_pieces([0, record, 1])))[1]
    assert type(back) is type(record) and back.equals(record)


def test_pieces_carry_a_tables_ipc_stream_as_it_is() -> None:
    """A table's IPC stream is a piece of its own, the buffer Arrow's writer filled: not
    copied again into ``bytes``, the snapshot's msgpack or the part's."""
    table = pa.table({"n": np.arange(100_000)})
    pieces = encode_pieces({"times": [((0,), table)]})
    assert any(isinstance(p, pa.Buffer) and p.size > table.nbytes for p in pieces)


def test_an_ext_header_off_by_its_size_class_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: every ext's header as a 32-bit one (msgpack uses the smallest that
    fits: a reader would still decode it, but the bytes differ from ``encode``'s)."""
    import struct

    from timely.comm import serialization

    monkeypatch.setattr(
        serialization,
        "_ext_header",
        lambda code, n: struct.pack(">BIb", 0xC9, n, code),
    )
    small = pa.table({"k": ["a", "b"]})  # an IPC stream of a few hundred bytes
    with pytest.raises(AssertionError):
        check_pieces({"times": [((0,), small)]}, embed=False)


def test_dictionaries_not_written_apart_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: every schema taken as plain, dictionary columns through ``serialize``
    too (which writes no dictionary batch: a reader could not decode the column)."""
    monkeypatch.setattr(serialization, "_plain_type", lambda t: True)
    coded = pa.table({"d": pa.array(["x", "y", "x"]).dictionary_encode()})
    with pytest.raises(AssertionError):
        check_ipc(coded)


class Marks:
    """Placeholder marks in a given order (``getrandbits``'s stand-in)."""

    def __init__(self, *marks: bytes) -> None:
        self.marks = list(marks)

    def getrandbits(self, k: int) -> int:
        return int.from_bytes(self.marks.pop(0), "little")


@pytest.mark.parametrize("index", [0, 1, 7])
def test_a_placeholders_mark_found_in_the_data_is_packed_again(
    monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    """Data that holds a placeholder's bytes (here the first mark, followed by a number
    in range, out of range, or the real placeholder's own) is not taken for it: packed
    again with the next mark, the same bytes as ``encode``."""
    first, second = b"\x01" * 12, b"\x02" * 12
    fake = bytes((0xD8, serialization.EXT_HOLE)) + first + index.to_bytes(4, "little")
    table = pa.table({"k": ["a", "b"]})
    for value in ({"a": fake, "t": [((0,), table)]}, {"t": [((0,), table)], "a": fake}):
        monkeypatch.setattr(serialization, "_random", Marks(first, second))
        assert b"".join(encode_pieces(value)) == encode(value)
        assert not serialization._random.marks  # type: ignore[attr-defined]  # both used
    monkeypatch.setattr(serialization, "_random", Marks(*[first] * serialization._TRIES))
    with pytest.raises(RuntimeError, match="random marks"):
        encode_pieces({"a": fake, "t": table})


def test_a_splice_that_trusts_every_mark_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: a splice that takes each mark it finds for a placeholder, a second
    find of one as well (data holding the mark is then spliced as if it were a table)."""
    splice = serialization._splice

    class Forgetful(list[bool]):
        def __getitem__(self, k: Any) -> Any:
            return False

    def trusting(data: bytes, holes: Any, mark: bytes, used: list[bool]) -> Any:
        out = splice(data, holes, mark, Forgetful(used))
        used[:] = [True] * len(used)
        return out

    monkeypatch.setattr(serialization, "_splice", trusting)
    with pytest.raises(AssertionError):
        test_a_placeholders_mark_found_in_the_data_is_packed_again(monkeypatch, 0)
