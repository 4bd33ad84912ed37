"""The wire format between workers (and the driver) on the ray backend.

msgpack, with ext types for what msgpack alone would lose or could not carry:
tuples come back as tuples and lists as lists (records are arbitrary Python values,
timestamps are tuples), numpy arrays and scalars travel as dtype + shape + raw bytes,
sets and frozensets keep their type, integers beyond 64 bits survive, Arrow record
batches and tables travel as Arrow IPC streams (their buffers as they are: a table
stream's batches cost no per-row encoding, and no pickle), and anything else falls
back to (cloud)pickle, so a record of any picklable type round-trips.

Two shortcuts keep batches cheap. A list whose items hold only scalars and tuples
of scalars (the common batch: words, ``(key, value)`` pairs) is packed in one go as
plain msgpack arrays and read back with every array as a tuple, instead of one ext
per record. Progress updates ``((Location, time), delta)`` travel as small int lists
and are rebuilt as real ``Location``/``Port`` values on arrival.

Arrays are decoded zero-copy: they are read-only views over the received bytes; copy
one (``a.copy()``) before changing it in place. ``bytearray`` and ``memoryview``
values arrive as ``bytes`` (msgpack packs them natively).
"""

from __future__ import annotations

import importlib
import pickle
import random
import struct
import threading
from collections.abc import Callable
from operator import itemgetter
from typing import Any, NamedTuple

import msgpack  # type: ignore[import-untyped]
import numpy as np

from progress import Port, ProgressBatch, source, target
from timely.comm.messages import WorkerMessage

EXT_TUPLE = 1
EXT_SET = 2
EXT_FROZENSET = 3
EXT_NDARRAY = 4
EXT_NPSCALAR = 5
EXT_BIGINT = 6
EXT_FLAT = 7
EXT_PICKLE = 8
EXT_ARROW_BATCH = 9
EXT_ARROW_TABLE = 10
EXT_ARROW_BLOB = 11
"""A record batch or table of a message's data carried after its envelope (see
:func:`encode_message_parts`): the ext holds its kind and length."""

_SCALARS = frozenset({str, int, float, bytes, bool, type(None)})
_FLAT_MIN = 4
"""Lists shorter than this are not worth a flatness check and a separate region."""
_HEADER = struct.Struct("<I")
_BLOB = struct.Struct("<BQ")
"""A blob's ext: its kind (``EXT_ARROW_BATCH`` or ``EXT_ARROW_TABLE``) and length."""
_WITH_BLOBS = 0xC1
"""The byte msgpack never uses: a message payload that starts with it is
``<u8 0xC1><u32 envelope length>``, the envelope, then its blobs, each at an offset
that is a multiple of 8 (Arrow's alignment). Any other payload is the envelope alone."""
_PREFIX = struct.Struct("<BI")
_ZEROS = bytes(8)
_UNICODE = "surrogatepass"
"""Strings with lone surrogates are valid Python strings: carry them as they are."""


class _Packers(threading.local):
    """Per-thread packers, one per nesting depth: ``Packer.pack`` is not reentrant,
    and an actor encodes on its step thread and its event loop at once."""

    def __init__(self) -> None:
        self.nested: list[msgpack.Packer] = []
        self.depth = 0
        self.flat = msgpack.Packer(default=_default, datetime=False, unicode_errors=_UNICODE)
        self.scalar = msgpack.Packer(datetime=False)
        """Packs a scalar as :func:`_pack` does (no ext type involved), without its hooks."""
        self.scalars = msgpack.Packer(
            default=_not_scalar, strict_types=True, datetime=False, unicode_errors=_UNICODE
        )
        """Packs a list of scalars alone as ``flat`` does, and raises at anything else (a
        tuple, a subclass, an int beyond 64 bits): :func:`_maybe_flat`'s first try."""
        self.scalars_utf8 = msgpack.Packer(default=_not_scalar, strict_types=True, datetime=False)
        """``scalars`` for strings without lone surrogates, which raise here: the same bytes,
        twice as fast (msgpack encodes strings with an error handler through a slower
        path; a checkpoint of 5,000 words took ~0.1 ms more, issue 30)."""
        self.plain = False
        """Set while encoding or decoding plain data (:func:`encode_plain`): no pickle."""
        self.hook: Callable[[Any], Any] = _default
        """The hook of the packers :func:`_pack` makes for ``nested``."""
        self.pieces: list[msgpack.Packer] = []
        """``nested`` while :func:`encode_pieces` packs (hook :func:`_default_pieces`)."""
        self.holes: list[tuple[int, Any]] = []
        """While :func:`encode_pieces` packs: the values it carries apart, each packed as a
        placeholder (:func:`_hole`) that it splices out afterwards."""
        self.nonce = b""
        """The placeholders' mark in this :func:`encode_pieces` (random)."""


_dumps: Callable[[Any], bytes] | None = None


def _pickle_dumps(obj: Any) -> bytes:
    """cloudpickle when available (classes defined in a driver's ``__main__`` travel by
    value), else the standard pickle."""
    global _dumps
    if _dumps is None:
        for module in ("cloudpickle", "ray.cloudpickle"):
            try:
                _dumps = importlib.import_module(module).dumps
                break
            except ImportError:
                continue
        else:  # pragma: no cover - ray, a dependency, ships cloudpickle
            _dumps = pickle.dumps
    return _dumps(obj)


def _pack(obj: Any) -> bytes:
    p = _packers
    depth = p.depth
    if depth == len(p.nested):
        p.nested.append(
            msgpack.Packer(
                default=p.hook, strict_types=True, datetime=False, unicode_errors=_UNICODE
            )
        )
    p.depth = depth + 1
    try:
        data: bytes = p.nested[depth].pack(obj)
        return data
    finally:
        p.depth = depth


def _unpack(data: bytes | bytearray | memoryview) -> Any:
    return msgpack.unpackb(
        data, ext_hook=_ext_hook, strict_map_key=False, use_list=True, unicode_errors=_UNICODE
    )


def _is_flat(items: list[Any] | tuple[Any, ...]) -> bool:
    """Only scalars and tuples (of scalars and tuples) inside: no list, dict, set or other type."""
    types = set(map(type, items))  # one pass in C: cheap even for long batches
    if types <= _SCALARS:
        return True
    if tuple not in types or not types - {tuple} <= _SCALARS:
        return False
    tuples = items if len(types) == 1 else [x for x in items if type(x) is tuple]
    lengths = set(map(len, tuples))
    if len(lengths) == 1:
        # Tuples of one length (the common batch: pairs): check column by column, each
        # column taken and typed in one pass in C, instead of one Python call per record.
        return all(_is_flat(list(map(itemgetter(i), tuples))) for i in range(lengths.pop()))
    return all(_is_flat(x) for x in tuples)


def _not_scalar(obj: Any) -> Any:
    raise _NotScalar


class _NotScalar(Exception):
    """Raised by the ``scalars`` packer at a value it does not pack itself."""


def _maybe_flat(items: list[Any]) -> Any:
    """``items`` as one flat region when it qualifies, else unchanged.

    The common region is a column of one kind of scalar (a keyed snapshot's words, or
    its counts): it is packed at once, with no pass over the items' types first (that
    pass cost as much as the packing). ``"".join`` or ``sum`` (one pass in C, a quarter
    of the type pass) rules out lists and dicts, which a packer cannot refuse, and the
    ``scalars`` packer stops at anything else (a tuple, a subclass, an int beyond 64
    bits, a value of another type): those take the checked path. The bytes are those
    the ``flat`` packer writes for the same list."""
    if len(items) < _FLAT_MIN:
        return items
    p = _packers
    first = type(items[0])
    if first is str or first is int or first is float:
        try:
            if first is str:
                "".join(items)
                try:
                    return msgpack.ExtType(EXT_FLAT, p.scalars_utf8.pack(items))
                except UnicodeEncodeError:  # a lone surrogate: packed as it is, below
                    p.scalars_utf8.reset()
            else:
                # numpy scalars among them may overflow, or add inf to -inf: only the type matters
                with np.errstate(over="ignore", invalid="ignore"):
                    sum(items)
            return msgpack.ExtType(EXT_FLAT, p.scalars.pack(items))
        except Exception:  # not one kind of scalar alone: the checked path
            p.scalars_utf8.reset()
            p.scalars.reset()
    if _is_flat(items):
        return msgpack.ExtType(EXT_FLAT, p.flat.pack(items))
    return items


def _default(obj: Any) -> Any:
    """msgpack's hook for what it does not pack itself (strict types: tuples come here)."""
    t = type(obj)
    if t is tuple:
        return msgpack.ExtType(
            EXT_TUPLE, _pack([_maybe_flat(x) if type(x) is list else x for x in obj])
        )
    if t is int:  # beyond 64 bits
        return msgpack.ExtType(
            EXT_BIGINT, obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True)
        )
    if t is set or t is frozenset:
        items = list(obj)
        if _packers.plain and len(items) > 1:
            # Plain data may be a key on disk: equal sets must be equal bytes, whatever
            # order they iterate in (which depends on how they were built).
            packed = [_pack(x) for x in items]
            items = [items[i] for i in sorted(range(len(items)), key=packed.__getitem__)]
        return msgpack.ExtType(EXT_SET if t is set else EXT_FROZENSET, _pack(items))
    if t is np.ndarray and not obj.dtype.hasobject and obj.dtype.fields is None:
        return msgpack.ExtType(EXT_NDARRAY, _array_bytes(obj))
    if isinstance(obj, np.generic) and not obj.dtype.hasobject and obj.dtype.fields is None:
        return msgpack.ExtType(EXT_NPSCALAR, _array_bytes(np.asarray(obj)))
    if t.__module__ == "pyarrow.lib" and t.__name__ in ("RecordBatch", "Table"):
        # Arrow IPC: the columns' buffers as they are, no per-row encoding (and no pickle)
        code = EXT_ARROW_BATCH if t.__name__ == "RecordBatch" else EXT_ARROW_TABLE
        return msgpack.ExtType(code, _arrow_bytes(obj))
    if _packers.plain:
        raise PlainDataError(
            f"a value of type {t.__module__}.{t.__qualname__} is not plain data: kept on disk, "
            "state holds what msgpack carries (None, bool, int, float, str, bytes, and lists, "
            "tuples, dicts, sets of those, numpy arrays and scalars)"
        )
    return msgpack.ExtType(EXT_PICKLE, _pickle_dumps(obj))


def _array_bytes(arr: np.ndarray[Any, Any]) -> bytes:
    """Header (dtype, shape) then the raw data: one copy, straight from the array's buffer."""
    header = msgpack.packb([arr.dtype.str, list(arr.shape)])
    raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    return b"".join((_HEADER.pack(len(header)), header, raw.data))


def _arrow_buffer(obj: Any) -> Any:
    """A record batch or table as one Arrow IPC stream (schema, then its batches), in
    the ``pyarrow.Buffer`` the writer filled: the one copy of the columns' bytes."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, obj.schema) as writer:
        writer.write(obj)
    return sink.getvalue()


def _arrow_bytes(obj: Any) -> bytes:
    """:func:`_arrow_buffer` as ``bytes`` (what msgpack's ext types carry)."""
    return bytes(_arrow_buffer(obj))


def _arrow_from(data: bytes | memoryview, code: int) -> Any:
    """The batch or table of an IPC stream, its buffers views over ``data`` (no copy)."""
    import pyarrow as pa

    table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    if code == EXT_ARROW_TABLE:
        return table
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    return (
        table.combine_chunks().to_batches()[0]
        if table.num_rows
        else (pa.RecordBatch.from_pylist([], schema=table.schema))
    )


def _array_from(data: bytes) -> np.ndarray[Any, Any]:
    """A read-only view over ``data`` (no copy)."""
    (n,) = _HEADER.unpack_from(data)
    start = _HEADER.size + n
    dtype_str, dims = msgpack.unpackb(data[_HEADER.size : start])
    dtype = np.dtype(dtype_str)
    shape = tuple(int(d) for d in dims)
    count = 1
    for d in shape:
        count *= d
    if count == 0:
        empty: np.ndarray[Any, Any] = np.empty(shape, dtype)
        return empty
    arr: np.ndarray[Any, Any] = np.frombuffer(data, dtype=dtype, count=count, offset=start)
    return arr.reshape(shape)


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_TUPLE:
        return tuple(_unpack(data))
    if code == EXT_FLAT:
        return list(
            msgpack.unpackb(
                data,
                ext_hook=_ext_hook,
                strict_map_key=False,
                use_list=False,
                unicode_errors=_UNICODE,
            )
        )
    if code == EXT_SET:
        return set(_unpack(data))
    if code == EXT_FROZENSET:
        return frozenset(_unpack(data))
    if code == EXT_NDARRAY:  # plain data is state: an array the operator may change
        return _array_from(data).copy() if _packers.plain else _array_from(data)
    if code == EXT_NPSCALAR:
        return _array_from(data)[()]
    if code == EXT_BIGINT:
        return int.from_bytes(data, "little", signed=True)
    if code in (EXT_ARROW_BATCH, EXT_ARROW_TABLE):
        return _arrow_from(data, code)
    if code == EXT_ARROW_BLOB:
        return _Blob(*_BLOB.unpack(data))
    if code == EXT_PICKLE:
        if _packers.plain:
            raise PlainDataError("plain data holds a pickled value: not written by this run")
        return pickle.loads(data)
    raise ValueError(f"unknown msgpack ext type {code}: sender and receiver run different timely")


_packers = _Packers()  # after _default, which its packers call


# -- public -----------------------------------------------------------------------------------
def encode(obj: Any) -> bytes:
    """Any picklable value to bytes; ``decode`` gives back an equal value of the same types."""
    if type(obj) is list:
        obj = _maybe_flat(obj)
    return _pack(obj)


def decode(data: bytes | bytearray | memoryview) -> Any:
    """The value ``encode`` packed."""
    return _unpack(data)


class PlainDataError(TypeError):
    """A value that plain data (:func:`encode_plain`) cannot carry without pickling."""

    vertex = -1
    """The vertex whose state held it (-1: not known)."""
    key: Any = None
    """The key it was kept under."""


def encode_plain(objs: list[Any]) -> list[bytes]:
    """Each of ``objs`` encoded as :func:`encode` does, but refusing what only pickle
    carries (:class:`PlainDataError`): for bytes kept on disk, which are then read back
    without unpickling anything."""
    p = _packers
    if set(map(type, objs)) <= _SCALARS:  # keys and values of one scalar each: no hooks
        try:
            return list(map(p.scalar.pack, objs))
        except (OverflowError, UnicodeEncodeError):  # an int beyond 64 bits, a lone surrogate
            p.scalar.reset()
    p.plain = True
    try:
        return [_pack(_maybe_flat(o) if type(o) is list else o) for o in objs]
    finally:
        p.plain = False


def encode_plain_one(obj: Any) -> bytes:
    """:func:`encode_plain` of one value (a key looked up): the same bytes."""
    t = type(obj)
    if t is str or t is int:
        scalar = _packers.scalar
        try:
            data: bytes = scalar.pack(obj)
            return data
        except (OverflowError, UnicodeEncodeError):
            scalar.reset()
    return encode_plain([obj])[0]


def decode_plain(blobs: list[bytes]) -> list[Any]:
    """The values :func:`encode_plain` packed; a pickled one is refused, not loaded."""
    p = _packers
    p.plain = True
    try:
        return [_unpack(b) for b in blobs]
    finally:
        p.plain = False


class _Blob(NamedTuple):
    """Where a blob stands in the envelope until :func:`decode_message` reads it."""

    code: int
    size: int


def _pad(n: int) -> int:
    return -n % 8


def _is_arrow(record: Any) -> bool:
    t = type(record)
    return t.__module__ == "pyarrow.lib" and t.__name__ in ("RecordBatch", "Table")


_BIG = PIECE = 1 << 12
"""A buffer Arrow's IPC writer hands over that is at least this large (a column's
values, offsets, bitmap) goes to the socket as it is; smaller ones (the messages'
metadata, padding, small columns) are copied into the frame's runs of small bytes
(:func:`_coalesce`), one socket write each instead of one per piece."""


class _IpcSink:
    """The file Arrow's IPC stream writer writes to (through ``pyarrow.PythonFile``),
    keeping what it is handed as it is: the metadata as ``bytes``, each body buffer as
    the ``pyarrow.Buffer`` the writer passes, which for a column's values is a view
    over the column's own memory (a sliced column's too: the writer slices the buffer
    at the column's offset, and rebuilds only what a slice cannot carry, such as a
    bitmap starting mid-byte or a string column's offsets). No copy of the columns."""

    __slots__ = ("closed", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        n = len(data)
        if n:
            self.parts.append(data)
            self.size += n
        return n

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _ipc_parts(record: Any) -> _IpcSink:
    """A record batch or table as the pieces of one Arrow IPC stream (the schema's
    message, any dictionaries, each batch's message, the end-of-stream marker), the
    same bytes ``pa.ipc.new_stream`` writes, with the columns' buffers not copied."""
    import pyarrow as pa

    sink = _IpcSink()
    with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), record.schema) as writer:
        writer.write(record)
    return sink


def _coalesce(parts: list[Any]) -> list[Any]:
    """``parts`` with every run of pieces smaller than :data:`_BIG` joined into one
    ``bytes``; larger pieces stay as they are (not copied), in order."""
    out: list[Any] = []
    run = bytearray()
    for part in parts:
        if len(part) < _BIG:
            run += part
            continue
        if run:
            out.append(bytes(run))
            run.clear()
        out.append(part)
    if run:
        out.append(bytes(run))
    return out


def _records(records: list[Any], blobs: list[_IpcSink]) -> Any:
    """A batch's records as the envelope carries them: Arrow records (a table stream's
    batches) moved out to ``blobs`` (each as the pieces of its IPC stream), the rest as
    :func:`encode` packs them."""
    if not any(map(_is_arrow, records)):
        return _maybe_flat(records)
    out = []
    for r in records:
        if _is_arrow(r):
            sink = _ipc_parts(r)
            blobs.append(sink)
            size = sink.size
            code = EXT_ARROW_BATCH if type(r).__name__ == "RecordBatch" else EXT_ARROW_TABLE
            out.append(msgpack.ExtType(EXT_ARROW_BLOB, _BLOB.pack(code, size)))
        else:
            out.append(r)
    return out


def encode_message(msg: WorkerMessage) -> bytes:
    """:func:`encode_message_parts` joined: one ``bytes``."""
    parts = encode_message_parts(msg)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_message_parts(msg: WorkerMessage) -> list[Any]:
    """One worker-to-worker message as the buffers of one frame's payload, in order:
    a msgpack envelope ``[sender, seq, data, progress]``, and ``state`` after them when
    a migration ships some; then, if the data holds Arrow record batches or tables,
    each one's IPC stream as Arrow's stream writer writes it (``_ipc_parts``): its
    columns' buffers as they are, views over the columns' own memory, written to the
    socket as they are (no copy into msgpack, the frame, ``bytes`` or an IPC buffer),
    and the small pieces between them (metadata, padding) joined (``_coalesce``).
    The batches must not change until the frame is sent: Arrow's arrays are
    immutable (one built zero-copy over a numpy array its owner then changes in
    place would not be, on the wire or in the ``inline`` backend either).

    Data batches are ``[vertex, port, time, records]`` with the time as an int list;
    progress is ``[sender, seq, [[node, kind, port, time, delta], ...]]`` (and ``after``,
    ``[worker, seq]``, for a joining worker's first batch); state is
    ``[[vertex, epoch, bins, tables], ...]``.
    """
    blobs: list[_IpcSink] = []
    envelope = _envelope(msg, blobs)
    if not blobs:
        return [envelope]
    head = _PREFIX.pack(_WITH_BLOBS, len(envelope))
    parts: list[Any] = [head, envelope, _ZEROS[: _pad(len(head) + len(envelope))]]
    for blob in blobs:
        parts.extend(blob.parts)
        parts.append(_ZEROS[: _pad(blob.size)])
    return _coalesce(parts)


def _envelope(msg: WorkerMessage, blobs: list[_IpcSink]) -> bytes:
    data = [[v, port, list(time), _records(records, blobs)] for v, port, time, records in msg.data]
    progress = None
    batch = msg.progress
    if batch is not None:
        updates = [
            [loc.node, int(loc.kind), loc.port, list(time), delta]
            for (loc, time), delta in batch.updates
        ]
        progress = [batch.sender, batch.seq, updates]
        if batch.after:
            progress.append([x for pair in batch.after for x in pair])
    if msg.state:
        return _pack([msg.sender, msg.seq, data, progress, [list(s) for s in msg.state]])
    return _pack([msg.sender, msg.seq, data, progress])


def decode_message(data: bytes | bytearray | memoryview) -> WorkerMessage:
    """The message ``encode_message`` packed, with real tuples, ``Location``s and ``Port``s;
    its Arrow records are views over ``data`` (no copy)."""
    view = memoryview(data).cast("B")
    if view[0] == _WITH_BLOBS:
        _, size = _PREFIX.unpack_from(view)
        start = _PREFIX.size
        sender, seq, batches, progress, *state = _unpack(view[start : start + size])
        at = start + size
        at += _pad(at)
        for batch in batches:
            records = batch[3]
            for i, r in enumerate(records):
                if type(r) is _Blob:
                    records[i] = _arrow_from(view[at : at + r.size], r.code)
                    at += r.size + _pad(r.size)
    else:
        sender, seq, batches, progress, *state = _unpack(data)
    out = WorkerMessage(
        sender, seq, [(v, port, tuple(time), records) for v, port, time, records in batches]
    )
    if state:
        out.state = [(v, epoch, list(bins), tables) for v, epoch, bins, tables in state[0]]
    if progress is not None:
        p_sender, p_seq, updates, *after = progress
        src = int(Port.SOURCE)
        out.progress = ProgressBatch(
            p_sender,
            p_seq,
            tuple(
                (
                    (source(node, port) if kind == src else target(node, port), tuple(time)),
                    delta,
                )
                for node, kind, port, time, delta in updates
            ),
            tuple(zip(after[0][::2], after[0][1::2], strict=True)) if after else (),
        )
    return out


# -- encoded as pieces (checkpoint parts) -------------------------------------------------------
EXT_HOLE = 12
"""Never in bytes that leave :func:`encode_pieces`: the ext type of its placeholders."""
_BIN = -1
"""A placeholder's kind for what is carried as a msgpack ``bin`` (not an ext)."""
_BIN8 = struct.Struct(">BB")
_BIN16 = struct.Struct(">BH")
_BIN32 = struct.Struct(">BI")
_EXT8 = struct.Struct(">BBb")
_EXT16 = struct.Struct(">BHb")
_EXT32 = struct.Struct(">BIb")
_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
"""An Arrow IPC stream's end: a continuation marker and a zero length."""
_random = random.Random()
"""Where placeholders' marks come from (seeded by the OS)."""


class Embedded:
    """Bytes already encoded, as pieces that join into them: :func:`encode_pieces` carries
    them as the one msgpack ``bin`` that :func:`encode` writes for those bytes, without
    joining them."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: list[Any]) -> None:
        self.pieces = pieces
        self.size = sum(map(len, pieces))


class AsBin:
    """A value :func:`encode_pieces` carries as the msgpack ``bin`` of its own encoding
    (``encode(value)``), its Arrow tables' IPC streams still pieces of their own: a
    checkpoint part's snapshot left as data."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def encode_pieces(obj: Any, join: bool = True) -> list[Any]:
    """:func:`encode`'s bytes for ``obj`` as pieces that join into them, for a file
    written by one ``os.writev`` and checksummed piece by piece: an Arrow table's IPC
    stream and :class:`Embedded` pieces as they are, not copied into the rest; runs of
    small pieces joined (:func:`_coalesce`; not with ``join=False``: pieces to embed in
    others). ``obj`` may hold :class:`Embedded` and :class:`AsBin` values, which
    :func:`encode` cannot pack. The pieces must not change until they are written, as for
    :func:`encode_message_parts`.

    msgpack's C packer walks ``obj`` (a walk in Python, one call per dict, list and
    value, took a third of a table word count's part encoding, ~55 of ~160 µs of a
    loop's CPU per checkpoint, issue 30); what is carried apart (a table, an
    :class:`Embedded`, and each ext or ``bin`` holding one: a tuple, an :class:`AsBin`)
    it packs as a placeholder, an ext of type :data:`EXT_HOLE` holding a random mark and
    the value's number, which :func:`_splice` then replaces by the value's header and
    pieces. Should the mark occur in the data by chance as well (each placeholder must
    be found once, and nothing else), it packs again with another. ``bytes`` are packed
    with the rest (copied): carry large ones apart as :class:`Embedded`."""
    if type(obj) is list:
        obj = _maybe_flat(obj)
    p = _packers
    outer = p.nested, p.depth, p.hook, p.holes, p.nonce
    p.nested, p.depth, p.hook = p.pieces, 0, _default_pieces
    try:
        for _ in range(_TRIES):
            holes: list[tuple[int, Any]] = []
            p.holes = holes
            p.nonce = nonce = _random.getrandbits(96).to_bytes(12, "little")
            data = _pack(obj)
            if not holes:
                return [data]
            used = [False] * len(holes)
            out = _splice(data, holes, bytes((0xD8, EXT_HOLE)) + nonce, used)
            if out is not None and all(used):
                return _coalesce(out) if join else out
    finally:
        p.nested, p.depth, p.hook, p.holes, p.nonce = outer
    raise RuntimeError(f"encode_pieces: {_TRIES} random marks all found in the data")


_TRIES = 4
"""Marks :func:`encode_pieces` tries (one is found in the data by chance once in 2**96)."""


def _default_pieces(obj: Any) -> Any:
    """:func:`_default` for :func:`encode_pieces`: a placeholder for what is carried apart."""
    t = type(obj)
    if t is tuple or t is set or t is frozenset:
        holes = _packers.holes
        n = len(holes)
        ext = _default(obj)  # its items packed by packers with this hook
        return _hole(ext.code, ext.data) if len(holes) > n else ext
    if t is Embedded:
        return _hole(_BIN, obj.pieces)
    if t is AsBin:
        holes = _packers.holes
        n = len(holes)
        value = obj.value
        data = _pack(_maybe_flat(value) if type(value) is list else value)
        return _hole(_BIN, data) if len(holes) > n else data  # bytes: packed as a bin
    if _is_arrow(obj):
        return _hole(EXT_ARROW_BATCH if t.__name__ == "RecordBatch" else EXT_ARROW_TABLE, obj)
    return _default(obj)


def _hole(code: int, content: Any) -> msgpack.ExtType:
    """The placeholder of a value carried apart (``code``: the ext type it is packed as,
    or :data:`_BIN`; ``content``: its packed bytes holding placeholders of their own, an
    Arrow record batch or table, or pieces that join into its bytes)."""
    p = _packers
    holes = p.holes
    holes.append((code, content))
    return msgpack.ExtType(EXT_HOLE, p.nonce + (len(holes) - 1).to_bytes(4, "little"))


def _splice(data: bytes, holes: list[tuple[int, Any]], mark: bytes, used: list[bool]) -> Any:
    """``data`` as pieces, each placeholder in it replaced by its value's header and
    pieces (None: a placeholder's mark found twice or out of range, by chance in the data)."""
    out: list[Any] = []
    view = memoryview(data)
    at = 0
    end = len(mark)
    while (i := data.find(mark, at)) >= 0:
        k = int.from_bytes(data[i + end : i + end + 4], "little")
        if k >= len(holes) or used[k]:
            return None
        used[k] = True
        if i > at:
            out.append(view[at:i])
        code, content = holes[k]
        if type(content) is bytes:
            inner = _splice(content, holes, mark, used)
            if inner is None:
                return None
        elif type(content) is list:
            inner = content
        else:
            inner = _arrow_pieces(content)
        size = sum(map(len, inner))
        out.append(_bin_header(size) if code == _BIN else _ext_header(code, size))
        out.extend(inner)
        at = i + end + 4
    if at < len(data):
        out.append(view[at:] if at else data)
    return out


def _arrow_pieces(obj: Any) -> list[Any]:
    """A record batch or table as the pieces of the IPC stream :func:`_arrow_buffer`
    writes: its schema's message, each batch's (metadata and body: the one copy of its
    columns' bytes, in C++), the end; through the stream writer where it writes more
    (dictionaries) or an extension type might."""
    schema = obj.schema
    if not all(map(_plain_type, schema.types)):
        return [_arrow_buffer(obj)]
    batches = [obj] if type(obj).__name__ == "RecordBatch" else obj.to_batches()
    return [schema.serialize(), *[b.serialize() for b in batches], _EOS]


def _plain_type(t: Any) -> bool:
    """Whether an IPC stream of a column of type ``t`` is its schema and batches alone:
    no dictionary, no extension type, in it or in its fields."""
    import pyarrow as pa

    if isinstance(t, pa.DictionaryType | pa.BaseExtensionType):
        return False
    return t.num_fields == 0 or all(_plain_type(t.field(i).type) for i in range(t.num_fields))


def _bin_header(n: int) -> bytes:
    """msgpack's header of a ``bin`` of ``n`` bytes."""
    if n < 0x100:
        return _BIN8.pack(0xC4, n)
    if n < 0x10000:
        return _BIN16.pack(0xC5, n)
    return _BIN32.pack(0xC6, n)


def _ext_header(code: int, n: int) -> bytes:
    """msgpack's header of an ext of type ``code`` holding ``n`` bytes."""
    fixed = _FIXEXT.get(n)
    if fixed is not None:
        return bytes((fixed, code))
    if n < 0x100:
        return _EXT8.pack(0xC7, n, code)
    if n < 0x10000:
        return _EXT16.pack(0xC8, n, code)
    return _EXT32.pack(0xC9, n, code)
