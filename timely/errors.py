"""Errors a user sees: each names the step, the user function's file:line (or timely's own,
for a bug in timely), the time, the record."""

from __future__ import annotations

import dis
import os
import pickle
import reprlib
import sys
import traceback
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

_PACKAGES = tuple(
    os.path.dirname(os.path.abspath(__file__)).rsplit(os.sep, 1)[0] + os.sep + p + os.sep
    for p in ("timely", "progress", "operators", "connectors")
)
_repr = reprlib.Repr()
_repr.maxstring = 200
_repr.maxother = 200
_repr.maxlist = 10


class TimelyError(Exception):
    """Base class of the errors timely raises."""


class GraphBuildError(TimelyError, ValueError):
    """The dataflow is malformed; raised while building, before anything runs."""


class ConfigError(TimelyError, ValueError):
    """Bad configuration; raised before anything starts, with the fix in the message."""


class WorkerDied(TimelyError):
    """A worker process stopped (its Ray actor died or stopped answering)."""


class StateStoreError(WorkerDied):
    """A worker's disk state store failed (an I/O error, a full disk, a damaged file).

    The store is the worker's own scratch copy of its state, so this is handled as the
    worker's loss: with checkpoints the run restores from the last one into new stores;
    without, it stops with this error, which names the store and RocksDB's reason (the
    file, where RocksDB gives it)."""


class StepError(TimelyError):
    """An exception stopped a step while the dataflow ran: the step, where, the time, the
    record and the worker, with the exception as ``__cause__``.

    The two kinds tell whose code failed, since that decides what to do about it:
    :class:`UserFunctionError` (fix the function) and :class:`InternalError` (report it).
    """

    def __init__(
        self,
        step: str,
        where: str,
        time: tuple[int, ...] | None,
        record: Any,
        cause: BaseException,
        worker: int | None = None,
    ) -> None:
        self._fill(step, where, time, _repr.repr(record), cause, worker)

    def _fill(
        self,
        step: str,
        where: str,
        time: tuple[int, ...] | None,
        record_repr: str,
        cause: BaseException,
        worker: int | None,
        cause_repr: str | None = None,
    ) -> None:
        self.step = step
        self.where = where
        self.time = time
        self.record_repr = record_repr
        self.worker = worker
        self.cause_repr = cause_repr or f"{type(cause).__name__}: {cause}"
        self.__cause__ = cause
        super().__init__(self._message())

    def _message(self) -> str:
        raise NotImplementedError

    def _at(self) -> str:
        at = f" on worker {self.worker}" if self.worker is not None else ""
        return f"{at}, time {self.time}, record {self.record_repr}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Ray pickles the error to ship it to the driver; the traceback stays behind, the
        # cause goes along (pickled on its own, so that one that will not pickle or
        # unpickle becomes a RuntimeError naming its type instead of failing the trip).
        # Ray's cloudpickle, on a Ray worker, also carries classes the driver defined in
        # its script or in a function, and gives the driver back its own class.
        cloudpickle = sys.modules.get("ray.cloudpickle")
        try:
            cause: bytes | None = getattr(cloudpickle, "dumps", pickle.dumps)(self.__cause__)
        except Exception:
            cause = None
        return (
            _rebuild,
            (
                type(self),
                self.step,
                self.where,
                self.time,
                self.record_repr,
                self.cause_repr,
                self.worker,
                cause,
            ),
        )


def _rebuild(
    cls: type[StepError],
    step: str,
    where: str,
    time: Any,
    record_repr: str,
    cause_repr: str,
    worker: Any,
    pickled: bytes | None,
) -> StepError:
    # Only ever called while unpickling the error itself (Ray's channel), so this reads
    # nothing that was not already being unpickled.
    cause: Any = None
    if pickled is not None:
        try:
            cause = pickle.loads(pickled)
        except Exception:  # the driver cannot rebuild it (no such module, odd __init__)
            cause = None
    if not isinstance(cause, BaseException):
        cause = RuntimeError(cause_repr)
    e = cls.__new__(cls)
    e._fill(step, where, time, record_repr, cause, worker, cause_repr)
    return e


class UserFunctionError(StepError):
    """A user function raised while the dataflow ran.

    ``where`` is the user's ``file:line`` (the innermost frame of user code) and
    ``__cause__`` the user's own exception, on the driver of a Ray run too: a
    ``ValueError`` raised in a worker is ``err.__cause__``, a ``ValueError`` (so
    ``isinstance(err.__cause__, ValueError)``; the error itself stays a
    ``UserFunctionError``, which is what ``on_error`` and ``except`` clauses look for).
    Only an exception that cannot be pickled, or not rebuilt from its ``args`` (say, one
    holding a lock, or whose ``__init__`` takes other arguments), arrives as a
    ``RuntimeError`` carrying its type's name and its message.
    """

    def _message(self) -> str:
        return f"step {self.step!r} failed at {self.where}{self._at()}: {self.cause_repr}"


class InternalError(StepError):
    """timely's own code (an operator, a connector, the runtime) raised: a bug in timely,
    not in the user's functions. ``where`` is the innermost frame's ``file:line``.

    Unlike a :class:`UserFunctionError` it does not restore from a checkpoint under
    ``on_error="restore"``: the replay would run into the same bug.
    """

    def _message(self) -> str:
        return (
            f"step {self.step!r}: internal error in timely at {self.where} (a bug: please "
            f"report it){self._at()}: {self.cause_repr}"
        )


def function_location(fn: Callable[..., Any] | None) -> str:
    """``file:line`` where ``fn`` is defined (``?`` when unknown)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        call = type(fn).__dict__.get("__call__") if fn is not None else None
        code = getattr(call, "__code__", None)
    if code is None:
        return "?"
    return f"{code.co_filename}:{code.co_firstlineno}"


def failure_location(tb: TracebackType | None, fallback: str) -> str:
    """``file:line`` of the innermost frame outside timely's own packages: the user's code."""
    where = fallback
    for frame in traceback.extract_tb(tb):
        if not _ours(frame.filename):
            where = f"{frame.filename}:{frame.lineno}"
    return where


def _ours(filename: str) -> bool:
    """Whether code in ``filename`` is timely's own (its packages), not the user's."""
    return os.path.abspath(filename).startswith(_PACKAGES)


_RAISE = dis.opmap["RAISE_VARARGS"]


def is_internal(error: BaseException, fn: Callable[..., Any] | None) -> bool:
    """Whether ``error``, caught in timely's code around a call of the user function ``fn``
    (``None``: a vertex method), came from timely's own code rather than the user's.

    It did if no frame between the catch and the raise is user code (outside timely's
    packages; the standard library counts as the user's, as in :func:`failure_location`),
    except when the cause may still be the user's:

    - ``fn`` is a builtin (``int``, ``len``, ``operator.itemgetter``): it leaves no frame;
    - timely raised it on purpose (a ``raise`` statement, not an ``assert``): it checks
      what user code gave it, such as an exchange key without a stable hash;
    - a key the user's function made is not hashable (``TypeError: unhashable type``);
    - ``fn`` does not take the arguments timely calls it with (``TypeError: f() takes 1
      positional argument but 2 were given``): the mistake is in its signature.
    """
    tb = error.__traceback__
    if tb is None:
        return False
    while True:
        if not _ours(tb.tb_frame.f_code.co_filename):
            return False
        if tb.tb_next is None:
            break
        tb = tb.tb_next
    if fn is not None and function_location(fn) == "?":
        return False
    code, at = tb.tb_frame.f_code.co_code, tb.tb_lasti
    if 0 <= at < len(code) and code[at] == _RAISE and not isinstance(error, AssertionError):
        return False
    if isinstance(error, TypeError):
        text = str(error)
        if text.startswith("unhashable type"):
            return False
        name = getattr(fn, "__qualname__", None)
        if name and text.startswith(f"{name}()"):
            return False  # called with arguments its signature does not take
    return True


def innermost_location(tb: TracebackType | None, fallback: str) -> str:
    """``file:line`` of the innermost frame of ``tb``: where it was raised."""
    frames = traceback.extract_tb(tb)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else fallback


def step_error(
    step: str,
    error: BaseException,
    time: tuple[int, ...] | None,
    record: Any,
    fn: Callable[..., Any] | None,
    fallback: str,
    worker: int | None,
) -> StepError:
    """The error to stop the run with when ``error`` stopped ``step``: an
    :class:`InternalError` at timely's line if it came from timely's code (see
    :func:`is_internal`), else a :class:`UserFunctionError` at the user's line."""
    tb = error.__traceback__
    if is_internal(error, fn):
        return InternalError(step, innermost_location(tb, fallback), time, record, error, worker)
    where = failure_location(tb, function_location(fn) if fn else fallback)
    return UserFunctionError(step, where, time, record, error, worker)


def failing_record(tb: TracebackType | None, records: list[Any], limit: int = 10_000) -> Any:
    """The record a batch-processing user function was on when it raised, if it can be told.

    Looks through the locals of the user's own frames (innermost first; timely's own
    past the first when there are none: a bug in timely) for a value that *is* one of
    ``records``; falls back to the whole batch.
    """
    if not records or len(records) > limit:
        return records
    ids = {id(r) for r in records}
    frames: list[FrameType] = []
    ours: list[FrameType] = []
    while tb is not None:
        (ours if _ours(tb.tb_frame.f_code.co_filename) else frames).append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames or ours[1:]):
        for name, value in frame.f_locals.items():
            if id(value) in ids and value is not records and not name.startswith("__"):
                return value
    return records
