"""What travels between the driver and the workers, and between workers: typed messages.

A worker's step produces one :class:`WorkerMessage` per peer (data batches and the
step's progress batch); the driver feeds each input with :data:`InputCommand`\\ s. On the
wire a command is a small tuple (:func:`command_to_wire`), so that no class needs to be
pickled to cross a process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from progress import ProgressBatch, Timestamp

DataBatch = tuple[int, int, Timestamp, list[Any]]
"""``(vertex, input port, time, records)``."""


@dataclass
class WorkerMessage:
    """Everything one worker sends one peer in one step: data batches, progress and
    migrating state."""

    sender: int
    seq: int
    data: list[DataBatch] = field(default_factory=list)
    progress: ProgressBatch | None = None
    state: list[Any] = field(default_factory=list)
    """Bins of keyed state moving to this peer (:data:`timely.worker.migration.Shipment`)."""


@dataclass(frozen=True)
class Send:
    """Records for an input, at its current epoch."""

    records: list[Any]


@dataclass(frozen=True)
class Advance:
    """The input moves to ``epoch``: the epochs before it are complete from its side."""

    epoch: int


@dataclass(frozen=True)
class Close:
    """No more records from the input."""


InputCommand = Send | Advance | Close

_SEND, _ADVANCE, _CLOSE = 0, 1, 2


def command_to_wire(cmd: InputCommand) -> tuple[int, Any]:
    """``cmd`` as ``(tag, argument)`` plain data."""
    if isinstance(cmd, Send):
        return _SEND, cmd.records
    if isinstance(cmd, Advance):
        return _ADVANCE, cmd.epoch
    return _CLOSE, None


def command_from_wire(wire: Any) -> InputCommand:
    """The command :func:`command_to_wire` made ``wire`` of."""
    tag, arg = wire
    if tag == _SEND:
        return Send(list(arg))
    if tag == _ADVANCE:
        return Advance(int(arg))
    if tag == _CLOSE:
        return Close()
    raise ValueError(f"not an input command: {wire!r}")
