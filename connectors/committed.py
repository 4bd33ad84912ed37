"""The commit protocol of the file-per-epoch sinks (text, CSV, JSON lines, Parquet, Spark).

Layout: ``<dir>/epoch=<e>/part-<worker>-of-<workers>.<ext>``, and ``<dir>/_COMMITTED``
holding ``{"epoch": c, "dataflow", "fingerprint", "lineage", "checkpoint"}``: every
epoch ``<= c`` is complete and final, and was written by that dataflow (its plan's
fingerprint) in that checkpoint lineage (:class:`timely.sinks.SinkLineage`). A sink
supplies only how records become a file's bytes (:meth:`CommittedEpochSink.encode`),
how a file's bytes split into records (:meth:`CommittedEpochSink.row_bytes`) and the
extension; this module owns the rest, so that every such sink keeps the same promise.

Partitioning: each worker writes the records it holds when an epoch completes; the
sink moves no data between workers (exchange the stream first to choose who writes
what).

Delivery: exactly once for readers that honour the marker (:func:`committed_files`).
A part is written to a hidden temporary file and renamed into place, so a part is
whole or absent, and writing it again (a replay) replaces it. ``commit`` moves the
marker forward only, again by an atomic rename. ``abort_after(e)`` deletes the epoch
folders above ``e`` that are not committed, and temporary files failed writes left,
so a replay from a checkpoint at ``e`` cannot leave output behind twice. Committed
output is final. Parts are not fsync'ed: the guarantee covers worker and driver
failures, not a machine losing its page cache.

Replays of committed epochs. A run restores from the newest *usable* checkpoint, which
may be older than what the sink committed: the newest was damaged, every checkpoint
was (the run starts over), the driver died after a commit, or the last run ended past
its last checkpoint (``commit(None)`` commits every epoch written). The run then writes
epochs the marker already covers. What happens to such a write is decided by who
writes it, against the marker:

- *The same lineage* (the fingerprint and the lineage id match: a resume or a fallback
  of this dataflow from this checkpoint directory): the part is not written. The worker
  leaves ``epoch=<e>/_replay-<worker>-of-<workers>.json`` with a digest of the rows it
  would have written, and the driver, once the epoch is complete (the next commit),
  compares the replay's digests, summed over its workers, with a digest of the
  committed parts of that epoch. Equal: the replay files go, the committed output
  stands (Spark's file sink skips committed batch ids the same way). Different: a
  :class:`ReplayMismatch` stops the run, naming the epoch and the directory; the
  committed output is kept, and the replay files stay, so a later resume stops again.
- *Anyone else* (another dataflow, the same dataflow with another checkpoint directory
  or a run of it without checkpoints, a marker that records no lineage): an
  :class:`OutputConflict` refuses the run on the driver before any worker starts
  (``abort_after``), and any write of its workers, with the fix in the message. A
  directory holds one lineage's output.

The digest is a multiset hash: the sum, modulo 2**128, of a 128-bit BLAKE2b of each
row's bytes, with the row count. It is compared per epoch, not per part, because a
replay may run on another number of workers (a rescale, a resume on other workers) or
route keys to other workers, and then the parts differ while the epoch's rows do not;
and a sum does not depend on the order rows come in, which differs from run to run.
A row's bytes are what the sink wrote for it: a line of a text or JSON-lines part, a
CSV part's line less the header, a Parquet row read back. So the check compares what a
reader would see, and needs nothing recorded when an epoch is first written: the
committed parts themselves are the record, read back only when a replay needs them.
What it cannot see: when a resumed run ends (``commit(None)``) before reaching some
committed epochs, those are not compared (an input that ended sooner and a replay that
wrote nothing there look alike).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from connectors._storage import is_temp, normalize, resolve, write_atomically
from timely import ConfigError, Sink, SinkLineage, TimelyError

MARKER = "_COMMITTED"
_EPOCH_DIR = re.compile(r"epoch=(\d+)\Z")
_PART = re.compile(r"part-(\d+)-of-(\d+)\.")
_REPLAY = re.compile(r"_replay-(\d+)-of-(\d+)\.json\Z")
_MOD = 1 << 128


class OutputConflict(TimelyError, ValueError):
    """A sink's directory holds epochs committed by another dataflow or lineage."""


class ReplayMismatch(TimelyError, ValueError):
    """A replay of an epoch this lineage committed wrote other rows than the commit holds."""


def part_name(worker: int, workers: int, extension: str) -> str:
    """The file one worker writes for one epoch."""
    return f"part-{worker}-of-{workers}.{extension}"


def replay_name(worker: int, workers: int) -> str:
    """The digest a worker leaves for a committed epoch it computed again."""
    return f"_replay-{worker}-of-{workers}.json"


@dataclass(frozen=True)
class Marker:
    """What ``_COMMITTED`` says: epochs ``<= epoch`` are final (-1: none), written by
    ``lineage`` (None: the marker records none)."""

    epoch: int
    lineage: SinkLineage | None
    present: bool = True
    """False: there is no marker file (nothing was ever committed)."""


@dataclass(frozen=True)
class Digest:
    """A multiset of rows, as a count and a sum of 128-bit hashes: digests of parts add
    up to the digest of their union, whatever the order or split."""

    rows: int = 0
    sum: int = 0

    def __add__(self, other: Digest) -> Digest:
        return Digest(self.rows + other.rows, (self.sum + other.sum) % _MOD)


def digest(rows: Iterable[bytes]) -> Digest:
    """The :class:`Digest` of ``rows`` (each row's bytes)."""
    n = total = 0
    for row in rows:
        total += int.from_bytes(hashlib.blake2b(row, digest_size=16).digest(), "little")
        n += 1
    return Digest(n, total % _MOD)


@dataclass
class _Pending:
    """Driver side: the committed epochs this run replays and the driver still compares."""

    after: int
    """The checkpoint the workers started from (-1: from scratch): epochs after it are
    written again."""
    through: int
    """The marker's epoch when they started: the last epoch replayed rather than written."""
    leftover: list[int]
    """Epochs ``<= after`` with replay digests an earlier attempt left unchecked."""
    checked: int
    """Epochs in ``(after, checked]`` are compared."""


class CommittedEpochSink(Sink):
    """One file per worker per epoch under ``path``, made visible by ``_COMMITTED``.

    Subclasses set ``extension`` and implement :meth:`encode` (and :meth:`row_bytes` when a
    part is not one record per line); see the module docstring for the layout and the
    guarantees.
    """

    extension: str

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.location = normalize(path)
        fs, root = resolve(self.location)
        if fs.get_file_info(root).type == pafs.FileType.File:
            raise ConfigError(f"{self.location!r} is a file; a sink writes into a directory")
        self.lineage: SinkLineage | None = None
        """Who writes this run (:meth:`bind`); None for a sink used outside a run."""
        self._marker: Marker | None = None
        """Per process: the marker as last read (at the first write, or by the driver)."""
        self._pending: _Pending | None = None

    @abstractmethod
    def encode(self, records: list[Any]) -> bytes:
        """The part file holding ``records`` (raises, naming the record, for a bad one)."""

    def row_bytes(self, data: bytes) -> Iterable[bytes]:
        """Each row's bytes in a part :meth:`encode` made, in any order: what a replay is
        compared by. Here one record per line; override for other layouts."""
        return _lines(data)

    def bind(self, lineage: SinkLineage) -> None:
        self.lineage = lineage
        self._marker = None
        self._pending = None

    # -- workers ------------------------------------------------------------------------------
    def write(self, worker: int, workers: int, epoch: int, records: list[Any]) -> None:
        data = self.encode(records)
        if self._marker is None:
            self._marker = self.marker()
        marker = self._marker
        fs, root = resolve(self.location)
        folder = f"{root}/epoch={epoch}"
        if self.lineage is not None and marker.epoch >= 0 and not self.lineage.same(marker.lineage):
            raise OutputConflict(self._refusal(marker, epoch))
        if epoch <= marker.epoch:
            if self._skips_replays():  # our own committed epoch, computed again: compare
                self._write_replay(fs, folder, worker, workers, data)
                return
            raise ValueError(  # a sink used outside a run knows no lineage
                f"epoch {epoch} is already committed in {self.location!r} (committed through "
                f"{marker.epoch}); write to a new directory or delete the old output"
            )
        fs.create_dir(folder, recursive=True)
        write_atomically(fs, f"{folder}/{part_name(worker, workers, self.extension)}", data)

    def _skips_replays(self) -> bool:
        """Whether a write of a committed epoch (by this lineage: others are refused
        before) is a replay to compare rather than a mistake: when the run said who it
        is (:meth:`bind`)."""
        return self.lineage is not None

    def _write_replay(
        self, fs: pafs.FileSystem, folder: str, worker: int, workers: int, data: bytes
    ) -> None:
        """Leave the digest of what this worker would have written, for the driver."""
        assert self.lineage is not None
        d = digest(self.row_bytes(data))
        record = {
            "worker": worker,
            "workers": workers,
            "rows": d.rows,
            "sum": f"{d.sum:032x}",
            "lineage": self.lineage.lineage,
        }
        fs.create_dir(folder, recursive=True)  # an epoch committed empty has no folder
        write_atomically(
            fs, f"{folder}/{replay_name(worker, workers)}", json.dumps(record).encode()
        )

    # -- the driver ---------------------------------------------------------------------------
    def commit(self, epoch: int | None) -> None:
        fs, root = resolve(self.location)
        marker = self.marker()
        if self.lineage is not None and marker.epoch >= 0 and not self.lineage.same(marker.lineage):
            raise OutputConflict(self._refusal(marker, None))  # another job committed since
        dirs = epoch_dirs(fs, root) if epoch is None or self._pending is not None else {}
        upto = epoch
        if epoch is None:  # the run ended: commit what is there, even nothing (an empty output)
            upto = max(dirs, default=-1)
        self._check_replays(fs, dirs, epoch)
        assert upto is not None
        same = self.lineage is None or self.lineage.same(marker.lineage)
        if marker.present and marker.epoch >= upto and same:
            self._marker = marker
            return
        fs.create_dir(root, recursive=True)
        upto = max(upto, marker.epoch)
        extra = None if self.lineage is None else self.lineage.to_json()
        write_marker(fs, f"{root}/{MARKER}", upto, extra)
        self._marker = Marker(upto, self.lineage)

    def abort_after(self, epoch: int) -> None:
        fs, root = resolve(self.location)
        marker = self.marker()
        self._marker = marker  # workers of the inline backend share this object
        own = self.lineage is not None and marker.epoch >= 0
        if own and self.lineage is not None and not self.lineage.same(marker.lineage):
            raise OutputConflict(self._refusal(marker, None))  # before any worker starts
        keep = max(epoch, marker.epoch)
        leftover = []
        for e, folder in epoch_dirs(fs, root).items():
            if e > keep:
                fs.delete_dir(folder)
            # No worker runs now: temporary files there are from failed writes, and
            # replay digests of epochs after ``epoch`` are written again.
            elif _clean(fs, folder, replays=e > epoch):
                leftover.append(e)
        _delete_temps(fs, root)  # a marker write that died
        self._pending = None
        if own and (marker.epoch > epoch or leftover):
            self._pending = _Pending(epoch, marker.epoch, leftover, epoch)

    def _check_replays(self, fs: pafs.FileSystem, dirs: dict[int, str], epoch: int | None) -> None:
        """Compare the replayed epochs that are complete (``<= epoch``; ``None``: the run
        ended) with what was committed; raise :class:`ReplayMismatch` at the first that
        differs."""
        p = self._pending
        if p is None:
            return
        if epoch is None:
            # The run ended. Epochs after the last it reached were not computed again.
            if max(dirs, default=-1) > p.through:
                upto = p.through
            else:
                replayed = (e for e, f in dirs.items() if p.after < e and _has_replays(fs, f))
                upto = max(replayed, default=p.after)
        else:
            upto = min(epoch, p.through)
        todo = [e for e in p.leftover if e <= upto]
        todo += [e for e in dirs if p.checked < e <= upto]
        for e in todo:
            self._check_epoch(fs, e, dirs.get(e), p.after)
        p.leftover = [e for e in p.leftover if e > upto]
        p.checked = max(p.checked, upto)
        if epoch is None or (p.checked >= p.through and not p.leftover):
            self._pending = None

    def _check_epoch(self, fs: pafs.FileSystem, epoch: int, folder: str | None, after: int) -> None:
        if folder is None:
            return  # committed empty, and nothing replayed: the same
        committed, replayed, replays = Digest(), Digest(), []
        for info in fs.get_file_info(pafs.FileSelector(folder)):
            if info.type != pafs.FileType.File:
                continue
            if _PART.match(info.base_name):
                with fs.open_input_stream(info.path) as f:
                    committed += digest(self.row_bytes(f.readall()))
            elif _REPLAY.match(info.base_name):
                replays.append(info.path)
                with fs.open_input_stream(info.path) as f:
                    record = json.loads(f.readall())
                replayed += Digest(int(record["rows"]), int(record["sum"], 16))
        if committed != replayed:
            start = (
                "the run started over (no usable checkpoint, or resume=False)"
                if after < 0
                else f"the run restored the checkpoint at epoch {after}"
            )
            raise ReplayMismatch(
                f"epoch {epoch} in {self.location!r} was committed by this dataflow's lineage, "
                f"and its replay ({start}) differs from it ({committed.rows} "
                f"rows committed, {replayed.rows} replayed, digests "
                f"{committed.sum:032x} and {replayed.sum:032x}): the dataflow computed "
                "that epoch differently (a user function that reads the clock, draws "
                "random numbers or depends on arrival order?). The committed output is "
                "kept; make the dataflow deterministic, or delete the output directory "
                "and the checkpoints and run again"
            )
        for path in replays:
            fs.delete_file(path)

    def _refusal(self, marker: Marker, epoch: int | None) -> str:
        """Why this run may not write into what ``marker`` committed, and the fix."""
        assert self.lineage is not None
        mine, theirs = self.lineage, marker.lineage
        start = (
            f"epoch {epoch} is already committed in {self.location!r} (committed through "
            f"{marker.epoch})"
            if epoch is not None
            else f"{self.location!r} holds epochs committed through {marker.epoch}"
        )
        fix = "write to a new directory or delete the old output"
        if theirs is None:
            return (
                f"{start} by a run that recorded no lineage; this run ({mine.describe()}) "
                f"cannot tell its output from another job's: {fix}"
            )
        if theirs.fingerprint != mine.fingerprint:
            return (
                f"{start} by {theirs.describe()}; this run is {mine.describe()}, another "
                f"dataflow: {fix}"
            )
        resume = (
            f"resume with checkpoint={theirs.checkpoint!r} to continue that output, or "
            if theirs.checkpoint is not None
            else ""
        )
        return (
            f"{start} by {theirs.describe()}; this run is the same dataflow in another "
            f"lineage ({mine.lineage}: another checkpoint directory, or none): {resume}{fix}"
        )

    # -- reading ------------------------------------------------------------------------------
    def marker(self) -> Marker:
        """The directory's ``_COMMITTED`` marker, read now."""
        fs, root = resolve(self.location)
        record = read_marker_record(fs, f"{root}/{MARKER}")
        if record is None:
            return Marker(-1, None, present=False)
        return Marker(record["epoch"], SinkLineage.from_json(record))

    def committed_epoch(self) -> int:
        """See :func:`committed_epoch`."""
        return committed_epoch(self.location)

    def committed_files(self) -> list[tuple[int, str]]:
        """See :func:`committed_files`."""
        return committed_files(self.location)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_marker"] = None  # each worker process reads the marker itself
        state["_pending"] = None  # the driver's alone
        return state


def committed_epoch(path: str | os.PathLike[str]) -> int:
    """The highest committed epoch of a sink's directory; ``-1``: none (or no directory).

    An ``int``, not ``None`` for none: epochs are ``>= 0``, so ``-1`` is "before every
    epoch", the value ``abort_after(-1)`` takes, and ``e <= committed_epoch(...)`` is
    right without a special case.
    """
    fs, root = resolve(normalize(path))
    found = read_marker(fs, f"{root}/{MARKER}")
    return -1 if found is None else found


def committed_files(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """``(epoch, file)`` for every part of a committed epoch, by epoch, then by worker.

    Epochs above the marker, other files and temporary files are left out. Paths are on
    the filesystem of ``path`` (for a URI, without its scheme). A missing directory
    raises ``FileNotFoundError``: a mistyped path is not an empty output.
    """
    location = normalize(path)
    fs, root = resolve(location)
    if fs.get_file_info(root).type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{location!r} does not exist")
    last = committed_epoch(location)
    out: list[tuple[int, str]] = []
    for e, folder in epoch_dirs(fs, root).items():
        if e > last:
            break
        parts = []
        for info in fs.get_file_info(pafs.FileSelector(folder)):
            m = _PART.match(info.base_name)
            if m and info.type == pafs.FileType.File:
                parts.append((int(m.group(1)), info.base_name, info.path))
        out.extend((e, p) for _, _, p in sorted(parts))
    return out


def epoch_dirs(fs: pafs.FileSystem, root: str) -> dict[int, str]:
    """The ``epoch=<e>`` folders under ``root``: epoch -> path, in epoch order."""
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        return {}
    out = {}
    for info in fs.get_file_info(pafs.FileSelector(root)):
        m = _EPOCH_DIR.match(info.base_name)
        if m and info.type == pafs.FileType.Directory:
            out[int(m.group(1))] = info.path
    return dict(sorted(out.items()))


def read_marker_record(fs: pafs.FileSystem, path: str) -> dict[str, Any] | None:
    """A marker file as written (``{"epoch": e, ...}``), ``None`` if there is none."""
    try:
        with fs.open_input_stream(path) as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        record = None
    epoch = record.get("epoch") if isinstance(record, dict) else None
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise ValueError(f"{path}: expected an integer epoch, found {data!r}")
    assert isinstance(record, dict)
    return record


def read_marker(fs: pafs.FileSystem, path: str) -> int | None:
    """The epoch a marker file (``{"epoch": e, ...}``) holds, ``None`` if there is none."""
    record = read_marker_record(fs, path)
    return None if record is None else int(record["epoch"])


def write_marker(
    fs: pafs.FileSystem, path: str, epoch: int, extra: dict[str, Any] | None = None
) -> None:
    """Replace a marker file atomically: readers see the old epoch or the new one."""
    write_atomically(fs, path, json.dumps({"epoch": epoch, **(extra or {})}).encode())


def _lines(data: bytes) -> list[bytes]:
    """The lines of a part (without the line end the last one has)."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def _clean(fs: pafs.FileSystem, folder: str, replays: bool) -> bool:
    """Delete ``folder``'s temporary files (and replay digests if ``replays``); whether
    replay digests are left."""
    left = False
    for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        if is_temp(info.base_name) or (replays and _REPLAY.match(info.base_name)):
            fs.delete_file(info.path)
        elif _REPLAY.match(info.base_name):
            left = True
    return left


def _has_replays(fs: pafs.FileSystem, folder: str) -> bool:
    return any(
        _REPLAY.match(info.base_name)
        for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    )


def _delete_temps(fs: pafs.FileSystem, folder: str) -> None:
    for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        if info.type == pafs.FileType.File and is_temp(info.base_name):
            fs.delete_file(info.path)
