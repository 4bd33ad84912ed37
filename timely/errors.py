"""Errors a user sees: each names the step, the user function's file:line, the time, the record."""

from __future__ import annotations

import os
import reprlib
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

_PACKAGES = tuple(
    os.path.dirname(os.path.abspath(__file__)).rsplit(os.sep, 1)[0] + os.sep + p + os.sep
    for p in ("timely", "progress", "operators")
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


class UserFunctionError(TimelyError):
    """A user function raised while the dataflow ran."""

    def __init__(
        self,
        step: str,
        where: str,
        time: tuple[int, ...] | None,
        record: Any,
        cause: BaseException,
        worker: int | None = None,
    ) -> None:
        self.step = step
        self.where = where
        self.time = time
        self.record_repr = _repr.repr(record)
        self.worker = worker
        self.cause_repr = f"{type(cause).__name__}: {cause}"
        at = f" on worker {worker}" if worker is not None else ""
        super().__init__(
            f"step {step!r} failed at {where}{at}, time {time}, record {self.record_repr}: "
            f"{self.cause_repr}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Survives pickling (Ray ships it to the driver) without the original traceback.
        err = RuntimeError(self.cause_repr)
        return (_rebuild, (self.step, self.where, self.time, self.record_repr, err, self.worker))


def _rebuild(
    step: str, where: str, time: Any, record_repr: str, cause: BaseException, worker: Any
) -> UserFunctionError:
    e = UserFunctionError(step, where, time, None, cause, worker)
    e.record_repr = record_repr
    e.args = (str(e).replace("record None", f"record {record_repr}"),)
    return e


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
        path = os.path.abspath(frame.filename)
        if not path.startswith(_PACKAGES):
            where = f"{frame.filename}:{frame.lineno}"
    return where


def failing_record(tb: TracebackType | None, records: list[Any], limit: int = 10_000) -> Any:
    """The record a batch-processing user function was on when it raised, if it can be told.

    Looks through the locals of the user's own frames (innermost first) for a value that
    *is* one of ``records``; falls back to the whole batch.
    """
    if not records or len(records) > limit:
        return records
    ids = {id(r) for r in records}
    frames = []
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not path.startswith(_PACKAGES):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for name, value in frame.f_locals.items():
            if id(value) in ids and value is not records and not name.startswith("__"):
                return value
    return records
