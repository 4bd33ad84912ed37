"""Batch-level fast paths: the user function sees a whole batch, not one record.

The runtime moves records in batches; ``select_batch`` and ``where_batch`` hand each
batch to the function in one call, so it can vectorise. ``form`` says what the
function receives:

- ``"list"`` (the default): the batch as the runtime holds it, a ``list`` of records;
- ``"numpy"``: ``numpy.asarray(batch)``: scalars give a 1-D array, equal-length tuples
  of numbers a 2-D one (a row per record);
- ``"arrow"``: one ``pyarrow.Table``: records that are dicts (column -> value) become
  its rows; records that are Arrow batches are concatenated (no copy).

**How records travel.** A stream's records are either plain values (ints, tuples,
dicts...: one list entry per record) or Arrow ``RecordBatch`` objects, each one record
that carries many rows (what a columnar source emits; a Parquet sink takes them as
they are). What the function returns becomes records again: a list (or any sequence)
gives its entries; a numpy array its rows as plain Python values (``.tolist()``;
2-D rows as tuples); a ``pyarrow.RecordBatch`` or ``Table`` travels as one Arrow
batch record, without being cut into rows (empty ones are not sent) -- return
``table.to_pylist()`` for dict records instead. Row-at-a-time operators downstream
(``select``, ``exchange``...) see an Arrow batch as one record; between workers it is
pickled, which for Arrow is its buffers, near their raw size.

``where_batch`` keeps the records' kind: its predicate returns one flag per record
(per row of the table when the records are Arrow batches and ``form="arrow"``, and
the table's filtered rows then go on as one Arrow batch). Flags may be a list of
bools, a boolean numpy array or a pyarrow boolean array (null counts as false).

How records are cut into batches is up to the runtime: a function must give the
same answer for a record whatever batch it comes in (map and filter, not per-batch
aggregates).

    import numpy as np
    import pyarrow.compute as pc

    s.select_batch(lambda xs: xs * 2 + 1, form="numpy")
    s.where_batch(lambda t: pc.greater(t["price"], 10), form="arrow")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from operators.stateless import _check
from progress import Timestamp
from timely import GraphBuildError, Stream, Vertex, stream_method
from timely.errors import function_location

if TYPE_CHECKING:
    import pyarrow as pa

Form = Literal["list", "numpy", "arrow"]
FORMS: tuple[str, ...] = ("list", "numpy", "arrow")


def _is_arrow(x: Any) -> bool:
    """Whether ``x`` is a pyarrow RecordBatch or Table (without importing pyarrow)."""
    t = type(x)
    return t.__name__ in ("RecordBatch", "Table") and t.__module__.startswith("pyarrow")


def as_form(records: list[Any], form: Form) -> Any:
    """The batch as the user function receives it in ``form``."""
    if form == "list":
        return records
    if records and _is_arrow(records[0]) and form == "numpy":
        raise TypeError(
            "the records are Arrow batches; use form='arrow' to receive them as one table"
        )
    if form == "numpy":
        return np.asarray(records)
    return as_table(records)


def as_table(records: list[Any]) -> pa.Table:
    """One ``pyarrow.Table`` from records that are all Arrow batches or all dicts."""
    import pyarrow as pa

    if records and _is_arrow(records[0]):
        tables = []
        for r in records:
            if isinstance(r, pa.RecordBatch):
                tables.append(pa.Table.from_batches([r]))
            elif isinstance(r, pa.Table):
                tables.append(r)
            else:
                raise TypeError(
                    f"form='arrow': a batch mixes Arrow batches with {type(r).__name__} "
                    "records; send one kind of record on a stream"
                )
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    if all(type(r) is dict for r in records):
        return pa.Table.from_pylist(records)
    odd = next(r for r in records if type(r) is not dict)
    raise TypeError(
        f"form='arrow' takes records that are Arrow batches or dicts (column -> value), "
        f"got {type(odd).__name__}; turn them into dicts with .select(...) first, or use "
        "form='numpy'"
    )


def as_records(out: Any) -> list[Any]:
    """The records a batch function's result stands for (see the module docstring)."""
    if isinstance(out, list):
        return out
    if _is_arrow(out):
        if not out.num_rows:
            return []
        if type(out).__name__ == "Table":
            batches: list[Any] = out.combine_chunks().to_batches()
            return batches
        return [out]
    tolist = getattr(out, "tolist", None)
    if callable(tolist):
        result = tolist()
        if not isinstance(result, list):
            return [result]
        if getattr(out, "ndim", 1) >= 2:
            return [tuple(row) for row in result]
        return result
    return list(out)


def _flags(mask: Any, n: int, what: str) -> Any:
    """``mask`` as a list of flags or a boolean numpy array, checked to be ``n`` long."""
    if not isinstance(mask, list | np.ndarray) and hasattr(mask, "__array__"):
        mask = np.asarray(mask)  # a pyarrow boolean array; nulls come out as None
        if mask.dtype != bool:
            mask = mask.astype(bool)
    if len(mask) != n:
        raise ValueError(
            f"where_batch: the predicate returned {len(mask)} flags for a batch of {n} "
            f"{what}; it must return one per {what[:-1]}"
        )
    return mask


class SelectBatch(Vertex):
    """Sends the records of ``f(batch)`` for every batch, ``batch`` in ``form``."""

    def __init__(self, f: Callable[[Any], Any], form: Form) -> None:
        self.f = f
        self.form = form

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        try:
            out = as_records(self.f(as_form(records, self.form)))
        except Exception as e:
            self.fail(e, time, _batch(records), self.f)
        if out:
            self.send_by(0, out, time)


class WhereBatch(Vertex):
    """Sends the records (or table rows) whose flag in ``pred(batch)`` is true."""

    def __init__(self, pred: Callable[[Any], Any], form: Form) -> None:
        self.pred = pred
        self.form = form

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        try:
            batch = as_form(records, self.form)
            mask = self.pred(batch)
            if self.form == "arrow" and records and _is_arrow(records[0]):
                out = as_records(batch.filter(_flags(mask, batch.num_rows, "rows")))
            else:
                mask = _flags(mask, len(records), "records")
                if isinstance(mask, np.ndarray):  # select by index, without a Python loop
                    out = [records[i] for i in mask.nonzero()[0].tolist()]
                else:
                    out = [r for r, keep in zip(records, mask) if keep]
        except Exception as e:
            self.fail(e, time, _batch(records), self.pred)
        if out:
            self.send_by(0, out, time)


def _batch(records: list[Any]) -> str:
    """A short description of a failing batch, for the error (batches can be large)."""
    head = ", ".join(_short(r) for r in records[:3])
    more = f", ... ({len(records)} records)" if len(records) > 3 else ""
    return f"batch [{head}{more}]"


def _short(record: Any) -> str:
    if _is_arrow(record):
        return f"<{type(record).__name__} of {record.num_rows} rows: {record.schema.names}>"
    return repr(record)


def _check_form(op: str, form: Any) -> Form:
    if form not in FORMS:
        raise GraphBuildError(
            f"{op}: form must be one of {', '.join(map(repr, FORMS))} (what the function "
            f"receives), got {form!r}"
        )
    return cast(Form, form)


@stream_method
def select_batch(
    stream: Stream,
    f: Callable[[Any], Sequence[Any] | Any],
    form: Form = "list",
    name: str = "select_batch",
) -> Stream:
    """The records of ``f(batch)`` for every batch; ``f`` gets the batch in ``form``.

    ``form`` is ``"list"`` (the records), ``"numpy"`` (``np.asarray`` of them) or
    ``"arrow"`` (one ``pyarrow.Table`` of dict records or Arrow batch records). ``f``
    returns a list, a numpy array (its rows become records) or a pyarrow
    ``RecordBatch``/``Table`` (sent on as one Arrow batch record). The outputs are
    sent at the batch's time. The batching is the runtime's, so ``f`` must treat
    records alone.
    """
    _check("select_batch", "f", f)
    fm = _check_form("select_batch", form)
    return stream.flow.vertex(
        [(stream, None)], lambda: SelectBatch(f, fm), name=name, where=function_location(f)
    )[0]


@stream_method
def where_batch(
    stream: Stream,
    pred: Callable[[Any], Sequence[Any] | Any],
    form: Form = "list",
    name: str = "where_batch",
) -> Stream:
    """The records whose flag in ``pred(batch)`` is true; ``pred`` gets the batch in ``form``.

    One flag per record (a list of bools, a boolean numpy or pyarrow array); with
    ``form="arrow"`` on Arrow batch records, one per row of the table, and the kept
    rows go on as one Arrow batch.
    """
    _check("where_batch", "pred", pred)
    fm = _check_form("where_batch", form)
    return stream.flow.vertex(
        [(stream, None)], lambda: WhereBatch(pred, fm), name=name, where=function_location(pred)
    )[0]
