"""Windows over epochs, like Spark Streaming's windowed DStreams.

A window of ``size`` epochs that moves by ``slide`` epochs ends at every epoch ``w`` that
is a multiple of ``slide`` (``w = 0, slide, 2*slide, ...``) and covers the epochs
``w - size + 1 .. w``, that is ``(w - size, w]``.

**Stamping.** A window's output is stamped with the epoch that ends it, ``w``. So an
epoch ``e`` belongs to the windows ending at each multiple of ``slide`` in
``[e, e + size)``; with ``slide == size`` (tumbling windows) that is exactly one, the
first multiple of ``size`` at or after ``e``. A window with no record sends nothing,
and a window may end after the last epoch that was sent (the input closing completes it).

- :func:`window` re-sends each record at every window end that covers its epoch, so
  every per-time operator downstream (``count_by``, ``group_by``, ``join``, ...) sees
  whole windows.
- :func:`reduce_by_window` reduces each key's values per window, either recomputed from
  per-epoch partials or, given ``inverse``, updated incrementally as the window slides.

Both work on top-level streams: windows are over epochs, not loop rounds. Both keep
each epoch's records (or partial reductions) in keyed state and send a window from
``on_notify(w)`` once every epoch in it is complete. Sending at a later epoch straight
from ``on_recv`` would be shorter, but a checkpoint after epoch ``e`` could then miss
records of epoch ``e`` already sent at ``w > e`` and not yet received: state carried
across epochs must be in a snapshot, not in flight.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, MutableMapping
from typing import Any

from operators.state import StatefulVertex
from operators.stateless import _check, _identity
from progress import Timestamp
from timely import GraphBuildError, Stream, Vertex, exchange, stream_method
from timely.errors import function_location


def _sizes(op: str, size: int, slide: int | None) -> int:
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise GraphBuildError(f"{op}: size must be an int >= 1 (epochs), got {size!r}")
    if slide is None:
        return size
    if not isinstance(slide, int) or isinstance(slide, bool) or slide < 1:
        raise GraphBuildError(f"{op}: slide must be an int >= 1 (epochs), got {slide!r}")
    if slide > size:
        raise GraphBuildError(
            f"{op}: slide {slide} > size {size} would skip epochs that no window covers; "
            "use slide <= size"
        )
    return slide


def _top_level(op: str, stream: Stream) -> None:
    if stream.scope.depth:
        raise GraphBuildError(
            f"{op}: windows are over epochs; call .leave() to bring {stream.name!r} out of "
            f"loop {stream.scope.name!r} first"
        )


def window_ends(epoch: int, size: int, slide: int) -> range:
    """The ends of the windows that cover ``epoch``: the multiples of ``slide`` in
    ``[epoch, epoch + size)``."""
    first = -(-epoch // slide) * slide
    return range(first, epoch + size, slide)


class Window(StatefulVertex):
    """Keeps each epoch's records and sends them at every window end that covers the epoch.

    State: ``epochs`` holds, per epoch ``(e,)``, this worker's records under the key of the
    worker that received them (the input is not exchanged, so records have no other key;
    on a rescale each worker's list moves whole).
    """

    def __init__(self, size: int, slide: int) -> None:
        super().__init__()
        self.size = size
        self.slide = slide
        self.epochs = self.keyed_state("epochs")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        table = self.epochs.get(time)
        if table is None:
            table = self.epochs.table(time)
            for w in window_ends(time[0], self.size, self.slide):
                self.notify_at((w,))
        table.setdefault(self.worker, []).extend(records)

    def on_notify(self, time: Timestamp) -> None:
        w = time[0]
        out: list[Any] = []
        for e in range(w - self.size + 1, w + 1):
            table = self.epochs.get((e,))
            if table is not None:
                for records in table.values():
                    out.extend(records)
        for t in self.epochs.times():  # what no later window covers
            if t[0] <= w + self.slide - self.size:
                self.epochs.pop(t)
        self.send_by(0, out, time)

    def restored(self, epoch: int) -> None:
        _request_windows(self, self.epochs.times(), epoch, self.size, self.slide)


def _request_windows(
    vertex: StatefulVertex, times: list[Timestamp], after: int, size: int, slide: int
) -> None:
    """Ask again for the ends after ``after`` of the windows covering the epochs kept."""
    ends = {w for t in times for w in window_ends(t[0], size, slide) if w > after}
    for w in sorted(ends):
        vertex.notify_at((w,))


@stream_method
def window(stream: Stream, size: int, slide: int | None = None, name: str = "window") -> Stream:
    """Each record again at the end ``w`` of every window that covers its epoch.

    Windows end at the multiples ``w`` of ``slide`` (``size`` by default: tumbling
    windows) and cover the epochs ``(w - size, w]``; a record at epoch ``e`` is sent at
    each such ``w`` in ``[e, e + size)``. Downstream, the time ``w`` carries the
    window's records, so ``stream.window(3).count_by(k)`` counts per 3-epoch window.
    """
    sl = _sizes("window", size, slide)
    _top_level("window", stream)
    return stream.flow.vertex(
        [(stream, None)], lambda: Window(size, sl), name=name, where="window"
    )[0]


class PreReduce(Vertex):
    """Reduces each batch per key: sends ``(key, partial)`` pairs, one per key."""

    def __init__(
        self, key: Callable[[Any], Any], value: Callable[[Any], Any], f: Callable[[Any, Any], Any]
    ) -> None:
        self.key = key
        self.value = value
        self.f = f

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        key, value, f = self.key, self.value, self.f
        partial: dict[Any, Any] = {}
        record = None
        try:
            for record in records:
                k = key(record)
                v = value(record)
                partial[k] = f(partial[k], v) if k in partial else v
        except Exception as e:
            self.fail(e, time, record, f)
        self.send_by(0, list(partial.items()), time)


def pre_reduced(
    stream: Stream,
    key: Callable[[Any], Any],
    value: Callable[[Any], Any],
    f: Callable[[Any, Any], Any],
    name: str,
) -> Stream:
    """``(key, partial)`` per key and batch, before the exchange by key."""
    return stream.flow.vertex(
        [(stream, None)],
        lambda: PreReduce(key, value, f),
        name=f"{name}.combine",
        where=function_location(f),
    )[0]


_first = operator.itemgetter(0)
"""A pair's key: an exchange's key function, called per record in C."""


class WindowReduce(StatefulVertex):
    """Per key, the reduction of each window's values, sent at the window's end.

    State: ``partials`` holds, per epoch ``(e,)``, each key's reduction of that epoch;
    ``window`` holds, at the time ``(w,)`` of the last window sent, each key's
    ``[value, epochs]`` over that window (``epochs``: how many of its epochs had the
    key), which the incremental mode slides forward.
    """

    def __init__(
        self,
        f: Callable[[Any, Any], Any],
        size: int,
        slide: int,
        inverse: Callable[[Any, Any], Any] | None,
    ) -> None:
        super().__init__()
        self.f = f
        self.size = size
        self.slide = slide
        self.inverse = inverse
        self.partials = self.keyed_state("partials")
        self.window = self.keyed_state("window")

    def on_recv(self, input: int, records: list[Any], time: Timestamp) -> None:
        table = self.partials.get(time)
        if table is None:
            table = self.partials.table(time)
            for w in window_ends(time[0], self.size, self.slide):
                self.notify_at((w,))
        self.fold_pairs(table, self.f, records, time)

    def restored(self, epoch: int) -> None:
        _request_windows(self, self.partials.times(), epoch, self.size, self.slide)

    def install_bins(self, tables: dict[str, Any], epoch: int) -> None:
        """Bins moved here keep their partials, but the last window sent is per worker
        (a worker is notified only at the ends its own keys had epochs in), so the two
        workers' cannot be slid as one: the next window is recomputed from the partials
        instead, which hold every epoch it covers."""
        super().install_bins(tables, epoch)
        for t in self.window.times():
            self.window.pop(t)

    def _epochs(self, lo: int, hi: int) -> list[MutableMapping[Any, Any]]:
        """The partial tables of the epochs in ``(lo, hi]``, in epoch order."""
        return [t for e in range(lo + 1, hi + 1) if (t := self.partials.get((e,))) is not None]

    def on_notify(self, time: Timestamp) -> None:
        w = time[0]
        size, f, inverse = self.size, self.f, self.inverse
        held = self.window.times()
        last = held[0][0] if held else None
        item: Any = None
        try:
            if inverse is not None and last is not None and w - size < last:
                acc = self.window.pop((last,))
                for table in self._epochs(last - size, w - size):  # leaving the window
                    for item in table.items():
                        k, v = item
                        entry = acc[k]
                        if entry[1] == 1:
                            del acc[k]
                        else:
                            entry[0] = inverse(entry[0], v)
                            entry[1] -= 1
                entering = self._epochs(last, w)
            else:
                if last is not None:
                    self.window.pop((last,))
                acc = {}
                entering = self._epochs(w - size, w)
            for table in entering:
                for item in table.items():
                    k, v = item
                    entry = acc.get(k)
                    if entry is None:
                        acc[k] = [v, 1]
                    else:
                        entry[0] = f(entry[0], v)
                        entry[1] += 1
        except Exception as e:
            self.fail(e, time, item, inverse if inverse is not None else f)
        # Keep what later windows need: all of (w - size, w] for the incremental mode (it
        # subtracts those epochs as they leave), else only what the next window covers.
        keep_after = w - size if inverse is not None else w + self.slide - size
        for t in self.partials.times():
            if t[0] <= keep_after:
                self.partials.pop(t)
        if inverse is not None and acc:
            self.window.table(time).update(acc)
        self.send_by(0, [(k, entry[0]) for k, entry in acc.items()], time)


@stream_method
def reduce_by_window(
    stream: Stream,
    key: Callable[[Any], Any],
    f: Callable[[Any, Any], Any],
    size: int,
    slide: int | None = None,
    inverse: Callable[[Any, Any], Any] | None = None,
    value: Callable[[Any], Any] | None = None,
    name: str = "reduce_by_window",
) -> Stream:
    """Per window and key, ``(key, v)``: ``f`` over the key's values in the window.

    The value of a record is ``value(record)`` (the record itself by default);
    ``f(a, b)`` combines two values and must be associative and commutative (each worker
    reduces each batch before the exchange by key). Windows are as in :func:`window`:
    the output for the window ``(w - size, w]`` is stamped with its end epoch ``w``, a
    multiple of ``slide``, and is sent once every epoch up to ``w`` is complete; a key
    with no value in a window has no output for it.

    Without ``inverse`` each window is reduced from the per-epoch partials it covers.
    With ``inverse(a, b)`` (``a`` with ``b`` taken out again, so that
    ``inverse(f(a, b), b) == a``), a sliding window is updated from the previous one:
    the partials of the epochs that enter are added and those of the epochs that leave
    are taken out, as Spark's ``reduceByKeyAndWindow(func, invFunc)``. A key leaves the
    window when none of its epochs is left in it (its epochs are counted, so no filter
    is needed). If a window has nothing in common with the previous one sent on the
    worker, it is recomputed.
    """
    sl = _sizes("reduce_by_window", size, slide)
    _top_level("reduce_by_window", stream)
    _check("reduce_by_window", "key", key)
    _check("reduce_by_window", "f", f)
    if inverse is not None:
        _check("reduce_by_window", "inverse", inverse)
    val = _identity if value is None else value
    _check("reduce_by_window", "value", val)
    partial = pre_reduced(stream, key, val, f, name)
    return stream.flow.vertex(
        [(partial, exchange(_first))],
        lambda: WindowReduce(f, size, sl, inverse),
        name=name,
        where=function_location(f),
    )[0]
