"""Batch-level fast paths: the user function sees a whole batch, not one record.

The runtime moves records in batches; ``select_batch`` and ``where_batch`` hand each
batch (a ``list``) to the function in one call, so it can vectorise, with numpy say:

    import numpy as np

    s.select_batch(lambda xs: (np.asarray(xs) * 2 + 1).tolist())
    s.where_batch(lambda xs: np.asarray(xs) % 3 == 0)

numpy in and out works: a batch may hold numpy arrays or scalars as records (the wire
format carries them); ``f`` may return any sequence, and a ``numpy.ndarray`` (anything
with ``.tolist()``) is turned into a list of plain Python values with ``.tolist()``.
A mask may be a list of bools or a boolean numpy array. How records are cut into
batches is up to the runtime: a function must give the same answer for a record
whatever batch it comes in (map and filter, not per-batch aggregates).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from operators.stateless import _check
from progress import Timestamp
from timely import Stream, Vertex, stream_method
from timely.errors import function_location


def _as_list(out: Any) -> list[Any]:
    if isinstance(out, list):
        return out
    tolist = getattr(out, "tolist", None)
    if callable(tolist):
        result = tolist()
        return result if isinstance(result, list) else [result]
    return list(out)


class SelectBatch(Vertex):
    """Sends ``f(batch)`` for every batch."""

    def __init__(self, f: Callable[[list[Any]], Sequence[Any]]) -> None:
        self.f = f

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        try:
            out = _as_list(self.f(records))
        except Exception as e:
            self._ctx.user_error(e, time, _batch(records), self.f)
        self.send_by(0, out, time)


class WhereBatch(Vertex):
    """Sends the records of each batch whose entry of ``pred(batch)`` is true."""

    def __init__(self, pred: Callable[[list[Any]], Sequence[Any]]) -> None:
        self.pred = pred

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        try:
            mask = self.pred(records)
            n = len(mask)
            if n != len(records):
                raise ValueError(
                    f"where_batch: the predicate returned {n} flags for a batch of "
                    f"{len(records)} records; it must return one per record"
                )
            nonzero = getattr(mask, "nonzero", None)
            if callable(nonzero):  # a numpy mask: select by index, without a Python loop
                out = [records[i] for i in nonzero()[0].tolist()]
            else:
                out = [r for r, keep in zip(records, mask) if keep]
        except Exception as e:
            self._ctx.user_error(e, time, _batch(records), self.pred)
        self.send_by(0, out, time)


def _batch(records: list[Any]) -> str:
    """A short description of a failing batch, for the error (batches can be large)."""
    head = ", ".join(repr(r) for r in records[:3])
    more = f", ... ({len(records)} records)" if len(records) > 3 else ""
    return f"batch [{head}{more}]"


@stream_method
def select_batch(
    stream: Stream, f: Callable[[list[Any]], Sequence[Any]], name: str = "select_batch"
) -> Stream:
    """``f(batch)`` for every batch: ``f`` takes a list of records and returns the outputs.

    The outputs are sent at the batch's time; a numpy array returned is converted with
    ``.tolist()``. The batching is the runtime's, so ``f`` must treat records alone.
    """
    _check("select_batch", "f", f)
    return stream.flow.vertex(
        [(stream, None)], lambda: SelectBatch(f), name=name, where=function_location(f)
    )[0]


@stream_method
def where_batch(
    stream: Stream, pred: Callable[[list[Any]], Sequence[Any]], name: str = "where_batch"
) -> Stream:
    """The records whose flag in ``pred(batch)`` is true; ``pred`` returns one per record.

    The flags may be a list of bools or a boolean numpy array of the batch's length.
    """
    _check("where_batch", "pred", pred)
    return stream.flow.vertex(
        [(stream, None)], lambda: WhereBatch(pred), name=name, where=function_location(pred)
    )[0]
