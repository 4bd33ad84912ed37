"""A worker message's Arrow batches go to the socket as their columns' own buffers
(``timely.comm.serialization``: ``_IpcSink``, ``_coalesce``): the bytes are those
Arrow's IPC stream writer writes, whatever the schema (nulls, strings, lists,
dictionaries), for empty batches and slices starting anywhere, and the large buffers
are not copies. Broken variants (a slice's offset dropped, the last run of small bytes
lost, a buffer sent before the writer is done with it) are caught."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import timely.comm.serialization as wire
from progress import ProgressBatch, target
from timely.comm.messages import WorkerMessage

TYPES: list[pa.DataType] = [
    pa.int8(),
    pa.int64(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.binary(),
    pa.list_(pa.int64()),
    pa.timestamp("us"),
    pa.dictionary(pa.int32(), pa.string()),
]


def _values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_dictionary(t):
        return st.sampled_from(["x", "yy", "zzz"])
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_int8(t):
        return st.integers(-128, 127)
    if pa.types.is_integer(t) or pa.types.is_timestamp(t):
        return st.integers(-(2**62), 2**62)
    if pa.types.is_floating(t):
        return st.floats(allow_nan=False)
    if pa.types.is_string(t):
        return st.text(max_size=6)
    if pa.types.is_binary(t):
        return st.binary(max_size=6)
    return st.lists(st.integers(-5, 5), max_size=4)


def _column(t: pa.DataType, rows: int, nulls: bool) -> st.SearchStrategy[pa.Array]:
    if not nulls and rows > 100 and (pa.types.is_int64(t) or pa.types.is_float64(t)):
        # long enough for buffers past _BIG: drawn as numpy, not one value at a time
        return st.integers(0, 2**32 - 1).map(
            lambda seed: pa.array(
                np.random.default_rng(seed)
                .integers(-(2**40), 2**40, rows)
                .astype(t.to_pandas_dtype())
            )
        )
    value = _values(t)
    item = st.one_of(st.none(), value) if nulls else value
    if pa.types.is_dictionary(t):
        return st.lists(item, min_size=rows, max_size=rows).map(
            lambda xs: pa.array(xs, pa.string()).dictionary_encode()
        )
    return st.lists(item, min_size=rows, max_size=rows).map(lambda xs: pa.array(xs, t))


@st.composite
def batches(draw: st.DrawFn) -> pa.RecordBatch:
    """A batch of a random schema (1-4 columns, nulls or not), possibly empty, often a
    slice starting at any row (offsets that are not a multiple of 8 included)."""
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))
    rows = draw(st.one_of(st.integers(0, 40), st.integers(600, 1200)))
    columns = [draw(_column(t, rows, draw(st.booleans()))) for t in types]
    batch = pa.record_batch(columns, names=[f"c{i}" for i in range(len(columns))])
    if rows and draw(st.booleans()):
        start = draw(st.integers(0, rows))
        batch = batch.slice(start, draw(st.integers(0, rows - start)))
    return batch


@contextlib.contextmanager
def big(n: int) -> Iterator[None]:
    """Buffers of ``n`` bytes and more go as they are (1: every one of them)."""
    old, wire._BIG = wire._BIG, n
    try:
        yield
    finally:
        wire._BIG = old


def message(records: list[Any], seq: int = 1) -> WorkerMessage:
    progress = ProgressBatch(0, seq, (((target(3, 1), (0, 4)), -1),))
    return WorkerMessage(0, seq, [(2, 0, (1,), records)], progress)


def reference_stream(record: Any) -> bytes:
    """What the code before sent: the IPC stream written into one buffer by Arrow."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, record.schema) as writer:
        writer.write(record)
    return sink.getvalue().to_pybytes()


def value_starts(record: Any) -> set[int]:
    """Where the values of each fixed-width column of ``record`` (a batch) start in the
    column's memory, for those of ``_BIG`` bytes or more: the pieces sent from there."""
    if not isinstance(record, pa.RecordBatch):
        return set()
    out = set()
    for c in record.columns:
        t = c.type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t):
            width = t.bit_width // 8
            if len(c) * width >= wire._BIG:
                out.add(c.buffers()[1].address + c.offset * width)
    return out


def check_round_trip(records: list[Any]) -> None:
    """Several messages encoded (all of them before any is decoded: a piece that the
    writer reused would show), then each checked: the records come back equal, of their
    types; the stream of each is byte for byte what Arrow's writer makes; pieces of
    ``_BIG`` or more are views over the records' own memory; small pieces are joined."""
    msgs = [message([r, ("row", i)], seq=i) for i, r in enumerate(records)]
    encoded = [wire.encode_message_parts(m) for m in msgs]
    for record, parts in zip(records, encoded, strict=True):
        payload = b"".join(bytes(memoryview(p)) for p in parts)
        back = wire.decode_message(payload)
        got = back.data[0][3]
        assert got[1] == ("row", back.seq)
        assert type(got[0]) is type(record)
        assert got[0].schema == record.schema and got[0].equals(record), (got[0], record)
        head = wire._PREFIX.size + wire._PREFIX.unpack_from(payload)[1]
        start = head + wire._pad(head)
        stream = reference_stream(record)
        assert payload[start : start + len(stream)] == stream
        assert len(payload) == start + len(stream) + wire._pad(len(stream))
        for a, b in itertools.pairwise(parts):
            assert len(a) >= wire._BIG or len(b) >= wire._BIG  # no two small ones apart
        # a fixed-width column's values go from the column's own memory, not a copy
        sent = {p.address for p in parts if isinstance(p, pa.Buffer)}
        assert value_starts(record) <= sent


@given(st.lists(batches(), min_size=1, max_size=3), st.sampled_from([1, 64, wire._BIG]))
@settings(deadline=None)
def test_batches_round_trip_as_arrows_own_stream(records: list[pa.RecordBatch], n: int) -> None:
    with big(n):
        check_round_trip(records)


@given(st.lists(batches(), min_size=1, max_size=3))
@settings(deadline=None)
def test_tables_of_several_batches_round_trip(records: list[pa.RecordBatch]) -> None:
    schema = records[0].schema
    same = [r for r in records if r.schema == schema]
    with big(1):
        check_round_trip([pa.Table.from_batches(same, schema=schema)])


def test_large_columns_go_uncopied() -> None:
    """A 64k-row int64 batch sliced at an odd row: its values' pieces start at the
    slice's first value in the column's own memory, and the message is a handful of
    socket writes."""
    rows = 1 << 16
    batch = pa.record_batch(
        [pa.array(np.arange(rows, dtype=np.int64)), pa.array(np.arange(rows) * 2.0)],
        names=["k", "v"],
    )
    part = batch.slice(12_345, 30_001)
    parts = wire.encode_message_parts(message([part]))
    starts = {c.buffers()[1].address + c.offset * 8 for c in part.columns}
    assert {p.address for p in parts if isinstance(p, pa.Buffer)} == starts == value_starts(part)
    assert len(parts) == 4  # envelope and metadata, values, metadata, values, end
    check_round_trip([part, batch, batch.slice(rows, 0)])


class _NoOffset(wire._IpcSink):
    """Mutant: a slice's buffer sent from its parent's start (its offset dropped)."""

    def write(self, data: Any) -> int:
        if isinstance(data, pa.Buffer) and data.parent is not None:
            return super().write(data.parent[: len(data)])
        return super().write(data)


class _Borrowed(wire._IpcSink):
    """Mutant: metadata kept as a view over the writer's memory, which it reuses."""

    scratch = bytearray(1 << 12)

    def write(self, data: Any) -> int:
        if isinstance(data, bytes):
            self.scratch[: len(data)] = data
            return super().write(memoryview(self.scratch)[: len(data)])
        return super().write(data)


def _drops_last_run(parts: list[Any]) -> list[Any]:
    """Mutant of ``_coalesce``: the run of small pieces at the end is not kept."""
    out: list[Any] = []
    run = bytearray()
    for part in parts:
        if len(part) < wire._BIG:
            run += part
            continue
        if run:
            out.append(bytes(run))
            run.clear()
        out.append(part)
    return out


def _mutant_cases() -> list[Any]:
    rows = 5000
    batch = pa.record_batch(
        [
            pa.array(np.arange(rows, dtype=np.int64)),
            pa.array([None if i % 7 == 0 else f"s{i}" for i in range(rows)]),
        ],
        names=["k", "s"],
    )
    return [batch.slice(1001, 2000), batch, batch.slice(3, 0)]


@pytest.mark.parametrize(
    ("attr", "mutant"),
    [("_IpcSink", _NoOffset), ("_IpcSink", _Borrowed), ("_coalesce", _drops_last_run)],
)
def test_the_checks_catch_broken_variants(
    monkeypatch: pytest.MonkeyPatch, attr: str, mutant: Any
) -> None:
    check_round_trip(_mutant_cases())  # the real code passes them
    monkeypatch.setattr(wire, attr, mutant)
    with pytest.raises((AssertionError, pa.ArrowInvalid)):
        check_round_trip(_mutant_cases())
