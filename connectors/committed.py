"""The commit protocol of the file-per-epoch sinks (text, CSV, JSON lines, Parquet, Spark).

Layout: ``<dir>/epoch=<e>/part-<worker>-of-<workers>.<ext>``, and ``<dir>/_COMMITTED``
holding ``{"epoch": c}``: every epoch ``<= c`` is complete and final. A sink supplies
only how records become a file's bytes (:meth:`CommittedEpochSink.encode`) and the
extension; this module owns the rest, so that every such sink keeps the same promise.

Partitioning: each worker writes the records it holds when an epoch completes; the
sink moves no data between workers (exchange the stream first to choose who writes
what).

Delivery: exactly once for readers that honour the marker (:func:`committed_files`).
A part is written to a hidden temporary file and renamed into place, so a part is
whole or absent, and writing it again (a replay) replaces it. ``commit`` moves the
marker forward only, again by an atomic rename. ``abort_after(e)`` deletes the epoch
folders above ``e`` that are not committed, and temporary files failed writes left,
so a replay from a checkpoint at ``e`` cannot leave output behind twice. Writing an
epoch that is already committed is refused: committed output is final. Parts are not
fsync'ed: the guarantee covers worker and driver failures, not a machine losing its
page cache. A directory belongs to one job: a second, fresh job must not write into it.
"""

from __future__ import annotations

import json
import os
import re
from abc import abstractmethod
from typing import Any

import pyarrow.fs as pafs

from connectors._storage import is_temp, normalize, resolve, write_atomically
from timely import ConfigError, Sink

MARKER = "_COMMITTED"
_EPOCH_DIR = re.compile(r"epoch=(\d+)\Z")
_PART = re.compile(r"part-(\d+)-of-(\d+)\.")


def part_name(worker: int, workers: int, extension: str) -> str:
    """The file one worker writes for one epoch."""
    return f"part-{worker}-of-{workers}.{extension}"


class CommittedEpochSink(Sink):
    """One file per worker per epoch under ``path``, made visible by ``_COMMITTED``.

    Subclasses set ``extension`` and implement :meth:`encode`; see the module docstring
    for the layout and the guarantees.
    """

    extension: str

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.location = normalize(path)
        fs, root = resolve(self.location)
        if fs.get_file_info(root).type == pafs.FileType.File:
            raise ConfigError(f"{self.location!r} is a file; a sink writes into a directory")
        self._committed: int | None = None  # per process: the marker seen at the first write

    @abstractmethod
    def encode(self, records: list[Any]) -> bytes:
        """The part file holding ``records`` (raises, naming the record, for a bad one)."""

    def write(self, worker: int, workers: int, epoch: int, records: list[Any]) -> None:
        data = self.encode(records)
        if self._committed is None:
            self._committed = self.committed_epoch()
        if epoch <= self._committed:
            raise ValueError(
                f"epoch {epoch} is already committed in {self.location!r} (committed through "
                f"{self._committed}); write to a new directory or delete the old output"
            )
        fs, root = resolve(self.location)
        folder = f"{root}/epoch={epoch}"
        fs.create_dir(folder, recursive=True)
        write_atomically(fs, f"{folder}/{part_name(worker, workers, self.extension)}", data)

    def commit(self, epoch: int | None) -> None:
        fs, root = resolve(self.location)
        current = read_marker(fs, f"{root}/{MARKER}")
        if epoch is None:  # the run ended: commit what is there, even nothing (an empty output)
            epoch = max(epoch_dirs(fs, root), default=-1)
        if current is not None and current >= epoch:
            return
        fs.create_dir(root, recursive=True)
        write_marker(fs, f"{root}/{MARKER}", epoch)

    def abort_after(self, epoch: int) -> None:
        fs, root = resolve(self.location)
        keep = max(epoch, self.committed_epoch())
        for e, folder in epoch_dirs(fs, root).items():
            if e > keep:
                fs.delete_dir(folder)
            else:  # no worker runs now: temporary files there are from failed writes
                _delete_temps(fs, folder)
        _delete_temps(fs, root)  # a marker write that died

    def committed_epoch(self) -> int:
        """See :func:`committed_epoch`."""
        return committed_epoch(self.location)

    def committed_files(self) -> list[tuple[int, str]]:
        """See :func:`committed_files`."""
        return committed_files(self.location)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_committed"] = None  # each worker process reads the marker itself
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


def read_marker(fs: pafs.FileSystem, path: str) -> int | None:
    """The epoch a marker file (``{"epoch": e}``) holds, ``None`` if there is none."""
    try:
        with fs.open_input_stream(path) as f:
            data = f.read()
    except FileNotFoundError:
        return None
    epoch = json.loads(data)["epoch"]
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise ValueError(f"{path}: expected an integer epoch, found {data!r}")
    return epoch


def write_marker(fs: pafs.FileSystem, path: str, epoch: int) -> None:
    """Replace a marker file atomically: readers see the old epoch or the new one."""
    write_atomically(fs, path, json.dumps({"epoch": epoch}).encode())


def _delete_temps(fs: pafs.FileSystem, folder: str) -> None:
    for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        if info.type == pafs.FileType.File and is_temp(info.base_name):
            fs.delete_file(info.path)
