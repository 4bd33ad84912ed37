"""Checkpoints: where they are stored, how a commit is made atomic, and how one is read back.

Layout under the checkpoint root (a local directory, or any URI pyarrow's filesystems
accept: ``file://``, ``s3://``, ``gs://``, ``hdfs://``)::

    ckpt-000000000041/part-0-of-2.bin      worker 0's snapshot after epoch 41 (msgpack)
    ckpt-000000000041/part-1-of-2.bin
    ckpt-000000000041/MANIFEST.json        written last: the commit
    ckpt-000000000041/links-0-of-2-<tag>.bin  on a local disk, worker 0's later parts
    commits-000000000041.log               after part-0, and their commits (below)
    LINEAGE.json                           the directory's lineage id, written once
    .recycle/                              a local store's files of deleted checkpoints,
                                           kept to be written over (:data:`RECYCLE`)

Why a manifest: every worker writes its part on its own, off its step loop, whenever its
vertices have passed the epoch. Only the coordinator (on the driver) knows when all parts
are durable; it then writes the manifest, which names each part with its size and
CRC-32 (SHA-256 before issue 30: those manifests still read). A checkpoint without a
manifest, or whose parts do not match it, was never
committed and is never used: :meth:`CheckpointStore.latest` falls back to the previous
one. So a part is written in place, under its own name (no temporary file and rename: a
rename is a system call, and on an object store a copy): a torn part has no manifest, or
fails its size and checksum. The manifest and ``LINEAGE.json`` are written to a temporary
name and renamed, so a reader never sees half of one on a local or POSIX store (object
stores write whole objects anyway).

On a local disk a worker's parts are appended to a links file after the part it last
wrote to a folder (an incremental chain's deltas, and whole parts while the file is
small), and a checkpoint made only of such parts is committed by a line in a commit log
rather than a manifest in a folder of its own (:mod:`timely.checkpoint.links`: no folder
or file made per checkpoint, issue 30). The collection treats a log's lines
as the manifests they hold; where a folder's manifest and a log's line commit the same
epoch (two runs'), the later committed is the checkpoint.

``LINEAGE.json`` names the lineage every run resuming from this directory belongs to,
whichever of its checkpoints it restores (or none, when all are damaged): sinks record
it with their commits, so that such a run's replay of epochs they committed is told
from another job's writes (:class:`timely.sinks.SinkLineage`). A run with
``resume=False`` is of the same lineage: it computes every epoch again.

Parts are decoded only after their checksum matches a manifest this dataflow wrote, so
nothing is unpickled (the wire format's fallback for exotic values) that the run did
not write itself. The checksum is a check against damage (a torn or corrupted file),
not against a forger: whoever can write a part here can write its manifest too, so a
cryptographic digest bought nothing, and cost twice a CRC's time (~57 us against ~25 us
for a 100 KB part, on the step loop inline).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from timely.checkpoint import links
from timely.checkpoint.noreplace import rename_noreplace
from timely.comm import serialization
from timely.errors import ConfigError, TimelyError
from timely.routing.bins import DEFAULT_BINS, bins_of, default_table
from timely.state.columnar import is_columnar, merge_snapshots, share_of
from timely.state.keyed import _keys, apply_deltas

FORMAT = 3
"""A manifest's format: 3 names parts in links files by ``offset``
(:mod:`timely.checkpoint.links`), 2 checks parts by CRC-32 (issue 30), 1 by SHA-256. A
manifest with no such part is still written as 2. Every earlier format is still read; a
timely that knows fewer refuses a later one with its format named, rather than failing on
what it lacks."""
READABLE = (1, 2, 3)
_PREFIX = "ckpt-"
LINEAGE = "LINEAGE.json"
RECYCLE = ".recycle"
"""A local store's folder of files from deleted checkpoints, written over by the next
writes instead of new files (issue 30: on ext4 a new file's inode and blocks cost ~0.25 ms
of system time for a 60 KB part, written over an old file's ~0.04 ms). Nothing reads it:
a file is taken out of it by a rename to a part's name, or to a writer's temporary name
for a manifest (atomic: of two writers, one gets it), then written and cut to its new
length (a manifest then renamed into place, as a new one is)."""
RECYCLE_FILES = 16
"""At most this many files wait in :data:`RECYCLE`; the others are deleted."""
RECYCLE_DIRS = 8
"""At most this many checkpoint folders wait there, to be renamed to new ones: empty, or
retired whole with their parts (each part at most :data:`RECYCLE_BYTES`), which stay on
disk after the run until written over."""
RECYCLE_BYTES = 1 << 20
"""Larger files are deleted, not kept (their write costs far more than a new inode)."""
_RELIST = 1
"""Writes that create new files before a writer lists :data:`RECYCLE` again after
finding it empty (a listing of an empty folder is ~5 us; the collection that fills it
runs on another thread, or in another process)."""
_DIR = "d-"
"""The names of folders in :data:`RECYCLE` start with it."""


class CheckpointError(TimelyError):
    """A checkpoint could not be written or used (the message says why and what to do)."""


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in uri:
        uri = os.path.abspath(uri)
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except Exception as e:
        raise ConfigError(
            f"checkpoint store {uri!r} is not usable ({e}); give a local directory or a URI "
            "pyarrow can open (file://, s3://, gs://, hdfs://) that every node can reach"
        ) from e
    return fs, path.rstrip("/")


def epoch_dir(epoch: int) -> str:
    return f"{_PREFIX}{epoch:012d}"


def part_name(worker: int, workers: int) -> str:
    return f"part-{worker}-of-{workers}.bin"


class CheckpointStore:
    """Reads and writes checkpoint files under one root; picklable (workers get a copy)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._fs: pafs.FileSystem | None = None
        self._root = ""
        self._local = False
        """The store is a local directory: files are written with ``os`` calls directly
        (a part and a manifest at every checkpoint: pyarrow's file system took ~0.1 ms
        more a file, on the step loop inline)."""
        self._recycled: list[str] = []
        """Names in :data:`RECYCLE` as last listed, not yet tried."""
        self._unlisted = 0
        """New files to create before listing :data:`RECYCLE` again (it was empty)."""
        self._listed = False
        """Whether :meth:`_relist` ran since :meth:`_make_dir` began."""
        self._folder = ""
        """The checkpoint folder this store last made or found, for parts written in
        place: a part in another one has its folder made first (a rename of a recycled
        folder), not after a rename of a file into it failed and a look for it."""
        self._id = uuid.uuid4().hex[:12]
        self._count = 0
        self._folder_full = False
        """``_folder`` may hold files already: it was a retired checkpoint's
        (:meth:`retire`), with its parts, or another writer made it."""
        self._appends = False
        """Links files and commit logs are kept here (:mod:`timely.checkpoint.links`): a
        directory on a local disk (:func:`~timely.checkpoint.links.appendable`)."""
        self._kept = _Kept()
        """What the coordinator's last commit kept (:meth:`kept`): shared with
        :meth:`sibling` stores."""
        self._chains: dict[int, links.Chain] = {}
        """Per worker writing here, the links file its next part may go to: after the
        part it last wrote to a folder. Shared with :meth:`sibling` stores (a worker's
        parts go through one or the other, in order)."""
        self._log: links.Log | None = None
        """The commit log this store (a coordinator's) last appended to, kept open."""

    @property
    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            self._fs, self._root = _filesystem(self.uri)
            self._local = isinstance(self._fs, pafs.LocalFileSystem)
            self._appends = self._local and links.appendable(self._root)
        return self._fs

    def sibling(self) -> CheckpointStore:
        """A store on the same root for another thread: a list of recycled files of its
        own, the same links files (a worker's parts go through one store or the other,
        in order: a delta goes after its base wherever that was written)."""
        other = CheckpointStore(self.uri)
        other._chains = self._chains
        other._kept = self._kept
        return other

    def close(self) -> None:
        """Close the files kept open (links files, a commit log): at the end of a run, or
        before a restore (the next delta after it goes after a part written again)."""
        chains = list(self._chains.values())
        self._chains.clear()
        for chain in chains:
            chain.close()
        log, self._log = self._log, None
        if log is not None:
            log.close()

    def kept(self, epoch: int, folders: frozenset[int]) -> None:
        """The commit at ``epoch`` keeps checkpoints with bytes in ``folders`` (the
        coordinator's, where parts are written through this store or a sibling: inline).
        A whole part then continues a links file only in one of those folders, or in one
        made after that commit: a worker that left the run live and joined it again must
        not continue the file it left, whose folder the collection may be deleting."""
        self._kept.epoch, self._kept.folders = epoch, folders

    @property
    def appends(self) -> bool:
        """Whether parts go into links files here (:mod:`timely.checkpoint.links`): a
        checkpoint's folder may then hold later checkpoints' parts, so none is retired
        whole (:meth:`retire`); the collection deletes a folder once no kept checkpoint
        has bytes in it."""
        _ = self.fs
        return self._appends

    @property
    def root(self) -> str:
        _ = self.fs
        return self._root

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["uri"])  # type: ignore[misc]

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def _unique(self) -> str:
        """A name no other writer uses: this store's random id and a count (a random id
        per file read ``os.urandom``, a system call, each time)."""
        self._count += 1
        return f"{self._id}{self._count}"

    def write(self, relpath: str, data: Data, in_place: bool = False) -> None:
        """Write a whole file under a temporary name, then rename it into place (or, with
        ``in_place``, under its own name: for parts, which the manifest's size and
        checksum check). ``data``: bytes, or pieces that join into them (written by one
        ``writev``). A write that fails (a full disk, a file size limit, no permission)
        leaves no file behind and raises :class:`CheckpointError` naming the file: the
        checkpoint is not committed, and the ones committed before stay usable."""
        data = _as_pieces(data)
        path = self._path(relpath)
        tmp = path if in_place else f"{path}.tmp-{self._unique()}"
        try:
            if self._local:
                if in_place and (folder := path.rsplit("/", 1)[0]) != self._folder:
                    self._folder_full = self._make_dir(folder)
                    self._folder = folder
                if in_place and self._folder_full and _write_existing(path, data):
                    pass  # over the file of the same name a retired checkpoint left
                elif self._reuse(tmp):
                    _write_over(path, tmp, data)
                else:
                    _write_local(path, tmp, data, self._make_dir)
            else:
                self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
                with self.fs.open_output_stream(tmp) as out:
                    for piece in data:
                        out.write(piece)
                if tmp != path:
                    self.fs.move(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):
                if self._local:
                    os.unlink(tmp)
                else:
                    self.fs.delete_file(tmp)
            raise CheckpointError(
                f"cannot write checkpoint file {path} ({_size(data):,} bytes): {e}; the "
                "checkpoints committed before it are kept (free space, or give another "
                "checkpoint= directory, and resume)"
            ) from e

    def _recycled_names(self) -> list[str]:
        """The names in :data:`RECYCLE` not yet tried (listed again when none are left,
        once :data:`_RELIST` writes have passed since it was found empty)."""
        if not self._recycled:
            if self._unlisted:
                self._unlisted -= 1
                return self._recycled
            if not self._relist():
                self._unlisted = _RELIST
        return self._recycled

    def _relist(self) -> list[str]:
        """:data:`RECYCLE` listed now (what other writers and the retiring driver left)."""
        self._listed = True
        try:
            self._recycled = os.listdir(self._path(RECYCLE))
        except OSError:
            self._recycled = []
        return self._recycled

    def _reuse(self, tmp: str) -> bool:
        """Move a file of :data:`RECYCLE` to ``tmp`` (a temporary name, or a part's own;
        its folder made if need be), to be written over; False when there is none."""
        names = self._recycled_names()
        files = [n for n in names if not n.startswith(_DIR)]
        for name in reversed(files):
            names.remove(name)
            try:
                os.rename(self._path(RECYCLE, name), tmp)
                return True
            except FileNotFoundError:
                folder = os.path.dirname(tmp)
                if os.path.isdir(folder):
                    continue  # another writer took it
                self._make_dir(folder)
                try:
                    os.rename(self._path(RECYCLE, name), tmp)
                    return True
                except FileNotFoundError:
                    continue
            except OSError:
                return False
        return False

    def _make_dir(self, folder: str) -> bool:
        """Make a checkpoint's folder: a folder of :data:`RECYCLE` renamed to it when there
        is one (a new folder costs ~0.1-0.3 ms on ext4, a rename ~0.01 ms), else a new one.
        The rename never replaces a folder another writer made at the same time, even an
        empty one: that writer may be creating its file in it
        (:mod:`timely.checkpoint.noreplace`); the folder there is used. Returns whether
        the folder may hold files already (recycled, or made by another writer)."""
        self._listed = False
        names = self._recycled_names()
        for fresh in (False, True):
            if fresh:  # none of the names known was a folder still there: list again
                if self._listed:
                    break  # (listed just now; a listing of no folder raises, ~13 us)
                names = self._relist()  # (~10 us; a new folder costs ~0.1-0.3 ms)
            for name in [n for n in names if n.startswith(_DIR)]:
                names.remove(name)
                try:
                    rename_noreplace(self._path(RECYCLE, name), folder)
                    return True
                except FileExistsError:
                    names.append(name)  # (still there, for the next folder)
                    return True  # another writer made it: never replaced
                except FileNotFoundError:
                    continue  # another writer took it (or the store's root is not made yet)
                except OSError:
                    break  # the folder is there, made by another writer; or no renameat2
            else:
                continue
            break
        try:
            os.mkdir(folder)
            return False
        except FileExistsError:
            return True
        except FileNotFoundError:
            os.makedirs(folder, exist_ok=True)
            return True

    def retire(self, epoch: int, committed: bool = True) -> bool:
        """Move the committed checkpoint at ``epoch``, no longer kept, into :data:`RECYCLE`
        whole, its manifest first (from then on it is no checkpoint); with ``committed``
        False, a complete checkpoint that was never committed (subsumed, see
        ``CheckpointCoordinator.parts_written``): its folder alone. The next checkpoint
        folder made is this one, renamed, and each part written there goes over the file
        of the same name in it, and the next manifest over this one's. A run that
        checkpoints every epoch then makes no file and no folder once it has as many
        as it keeps (issue 30: a new file or folder costs ~0.15-0.5 ms of system time on
        ext4, a rename ~0.01 ms; a collection only every few commits had made the first
        dozen checkpoints' anew). A local store only, and never beyond
        :data:`RECYCLE_DIRS` folders waiting; False when not moved (the collection
        deletes it then)."""
        _ = self.fs  # (which kind of store: known once opened)
        if not self._local:
            return False
        folder = self._path(epoch_dir(epoch))
        pool = self._path(RECYCLE)
        # What waits there now, listed (~10 us): on Ray the driver retires and the workers
        # take, so a list this store kept would only ever grow.
        try:
            names = self._recycled = os.listdir(pool)
        except FileNotFoundError:
            names = self._recycled = []
        if sum(1 for n in names if n.startswith(_DIR)) >= RECYCLE_DIRS:
            return False
        try:
            if committed:
                manifest = self._unique()
                try:
                    os.rename(f"{folder}/MANIFEST.json", f"{pool}/{manifest}")
                except FileNotFoundError:
                    if not os.path.isdir(folder):
                        return False
                    os.makedirs(pool, exist_ok=True)  # (the first time: no pool yet)
                    os.rename(f"{folder}/MANIFEST.json", f"{pool}/{manifest}")
                names.append(manifest)
            else:
                # Never committed, but an earlier run's checkpoint of the same epoch may
                # have left its manifest here (resume=False, or a newest one skipped as
                # damaged): it must not come along into the folder's next checkpoint.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{folder}/MANIFEST.json")
                if not names:
                    os.makedirs(pool, exist_ok=True)  # (perhaps the first time: no pool yet)
            moved = f"{_DIR}{self._unique()}"
            os.rename(folder, f"{pool}/{moved}")
        except OSError:
            return False  # (the collection deletes what is left)
        names.append(moved)
        return True

    def drop_commit(self, epoch: int) -> None:
        """The committed checkpoint at ``epoch``, no longer kept, is a checkpoint no more:
        its ``MANIFEST.json`` goes. Its parts stay, for the collection (in a store that
        keeps links files, later checkpoints' parts may be in its folder)."""
        with contextlib.suppress(FileNotFoundError):
            self._drop_manifest(epoch_dir(epoch), [0, 0])  # (deleted: no room to recycle)

    def _drop_manifest(self, relpath: str, room: list[int]) -> None:
        """Take a checkpoint's manifest away (its parts stay, links of a chain): on a
        local store into :data:`RECYCLE` while ``room[0]`` allows (counted down), for the
        next manifest to be written over (an incremental run makes a folder and a part
        file at every checkpoint, whose links are kept; its manifests need not be new
        files too), else deleted."""
        path = self._path(relpath, "MANIFEST.json")
        if self._local and room[0] > 0:
            os.makedirs(self._path(RECYCLE), exist_ok=True)
            os.rename(path, self._path(RECYCLE, uuid.uuid4().hex))
            room[0] -= 1
        else:
            self.fs.delete_file(path)

    def _delete_dir(self, relpath: str, room: list[int]) -> None:
        """Delete a checkpoint's folder; on a local store its files (``room[0]`` of them,
        counted down) and the folder itself (``room[1]``) go to :data:`RECYCLE`, the rest
        is deleted."""
        path = self._path(relpath)
        if not self._local:
            self.fs.delete_dir(path)
            return
        pool = self._path(RECYCLE)
        if room[0] > 0 or room[1] > 0:
            os.makedirs(pool, exist_ok=True)
        for entry in os.scandir(path):
            if (
                room[0] > 0
                and ".tmp-" not in entry.name  # a writer may hold it open
                and not links.is_links_file(entry.name)  # (a lost worker may append to it)
                and entry.is_file(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_size <= RECYCLE_BYTES
            ):
                with contextlib.suppress(OSError):
                    os.rename(entry.path, f"{pool}/{uuid.uuid4().hex}")
                    room[0] -= 1
                    continue
            if entry.is_dir(follow_symlinks=False):
                self.fs.delete_dir(entry.path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
        if room[1] > 0 and not os.listdir(path):  # (else a writer's file came in)
            with contextlib.suppress(OSError):
                os.rename(path, f"{pool}/{_DIR}{uuid.uuid4().hex}")
                room[1] -= 1
                return
        os.rmdir(path)

    def read(self, relpath: str) -> bytes:
        with self.fs.open_input_stream(self._path(relpath)) as f:
            data: bytes = f.readall()
        return data

    def write_part(
        self,
        epoch: int,
        worker: int,
        workers: int,
        data: Data,
        base: int | None = None,
        moved: bool = False,
    ) -> dict[str, Any]:
        """Write one worker's part (bytes, or pieces that join into them); return what the
        manifest records of it (``base``: the epoch of the worker's earlier part that this
        one's deltas are on; ``moved``: its sources' partitions are not those a restore on
        as many workers gives it).

        On a local disk a part goes to the links file after the part this store (or a
        :meth:`sibling`) last wrote to a folder for the worker (``offset`` in what is
        returned): no folder and no file made (:mod:`timely.checkpoint.links`). A delta
        goes there when its base is the last part in that file, a whole part while the
        file holds no delta and stays within :data:`~timely.checkpoint.links.FILE_BYTES`
        (:meth:`~timely.checkpoint.links.Chain.takes_whole`); any other part, to a folder
        of its own."""
        _ = self.fs
        pieces = _as_pieces(data)
        size = _size(pieces)
        chain = self._chains.get(worker)
        if (
            chain is not None
            and chain.workers == workers
            and (
                chain.last == base
                if base is not None
                else chain.takes_whole(size) and self._kept.continues(chain.home)
            )
        ):
            try:
                offset = chain.append(epoch, pieces, size, delta=base is not None)
            except (FileExistsError, FileNotFoundError):
                # A tag taken, or the folder gone (collected: the chain was left long ago):
                # the part goes to a folder, a new chain.
                self._chains.pop(worker, None)
                chain.close()
                return self.write_part(epoch, worker, workers, pieces, base, moved)
            except OSError as e:
                self._chains.pop(worker, None)
                chain.close()
                raise CheckpointError(
                    f"cannot write checkpoint file {chain.path} ({size:,} bytes at "
                    f"{chain.end:,}): {e}; the checkpoints committed before it are kept "
                    "(free space, or give another checkpoint= directory, and resume)"
                ) from e
            name = chain.relpath
        else:
            old = self._chains.pop(worker, None)
            if old is not None:
                old.close()
            folder = epoch_dir(epoch)
            name = f"{folder}/{part_name(worker, workers)}"
            self.write(name, pieces, in_place=True)
            if self._appends:
                self._chains[worker] = links.Chain(
                    self.root, folder, worker, workers, epoch, self._unique()
                )
            offset = None
        crc = 0
        for piece in pieces:
            crc = zlib.crc32(piece, crc)
        info: dict[str, Any] = {"worker": worker, "path": name, "size": size, "crc32": crc}
        if offset is not None:
            info["offset"] = offset
        info["base"] = base
        if moved:
            info["moved"] = True
        return info

    def commit(
        self,
        epoch: int,
        workers: int,
        fingerprint: str,
        name: str,
        parts: list[dict[str, Any]],
        floor: int | None = None,
    ) -> bool:
        """Write the manifest: from now on the checkpoint at ``epoch`` exists. One whose
        parts are all in links files (:meth:`write_part`) is committed by a line in the
        commit log of the oldest folder they are in, followed by a floor line at
        ``floor`` if given (the oldest checkpoint kept: the log's commits before it stop
        being checkpoints in the same write, not at the next collection; and those of the
        log it last wrote to, when that is another); another by a ``MANIFEST.json`` in its
        own folder. Returns whether it was the latter."""
        entries = sorted(parts, key=lambda p: p["worker"])
        # A part or a link of its chain in a links file: what a timely before them misreads.
        linked = any("offset" in e for p in entries for e in (p, *(p.get("chain") or ())))
        manifest = {
            "format": FORMAT if linked else 2,
            "dataflow": name,
            "fingerprint": fingerprint,
            "epoch": epoch,
            "workers": workers,
            "parts": entries,
            "committed_at": time.time(),
        }
        # Compact: json's C encoder (indent= takes the pure-Python one, ~0.2 ms a commit).
        data = json.dumps(manifest, separators=(",", ":")).encode()
        _ = self.fs
        if not (self._appends and entries and all("offset" in p for p in entries)):
            self.write(f"{epoch_dir(epoch)}/MANIFEST.json", data)
            if self._log is not None:
                self._floor(self._log, floor)  # (the commits have moved on from it)
            return True
        path = self._path(links.log_name(min(home(p) for p in entries)))
        old = self._log
        log = old if old is not None and old.path == path else None
        try:
            if log is None:
                log = links.Log(path)
            record = links.line("c", epoch, data)
            if floor is not None and log.floor < floor <= epoch:
                # After the commit, in the same write: torn, it hides nothing kept (a
                # floor hides only the lines before it, at epochs below it).
                log.append(record + links.line("f", floor))
                log.floor = floor
            else:
                log.append(record)
        except OSError as e:
            if log is not None:
                log.close()  # (opened again at the next commit)
            if log is old:
                self._log = None
            raise CheckpointError(f"cannot append to the commit log {path}: {e}") from e
        if old is not None and old is not log:
            self._floor(old, floor)  # (committed: the commits have moved on from it)
            old.close()
        self._log = log
        return False

    @staticmethod
    def _floor(log: links.Log, floor: int | None) -> None:
        """The floor in a log the commits have moved on from (another folder's now): its
        commits before it stop being checkpoints now, not at the next collection (which
        writes it if this fails)."""
        if floor is not None and log.floor < floor:
            with contextlib.suppress(OSError):
                log.append(links.line("f", floor))
                log.floor = floor

    def lineage(self, name: str, fingerprint: str) -> str:
        """The lineage id of this directory, made (a random id) on first use. Every run
        with this ``checkpoint=`` is of it, whichever checkpoint it starts from (none:
        all damaged, or ``resume=False``). An unreadable file is an error, not a new
        lineage: sinks would then refuse the output this directory's runs wrote."""
        path = self._path(LINEAGE)
        try:
            data = json.loads(self.read(LINEAGE))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            raise CheckpointError(
                f"cannot read the checkpoint lineage {path}: {e}; restore the file, or "
                "delete it to start a new lineage (sinks holding this lineage's output "
                "will then refuse the run)"
            ) from e
        else:
            lineage = data.get("lineage") if isinstance(data, dict) else None
            if not isinstance(lineage, str) or not lineage:
                raise CheckpointError(
                    f"checkpoint lineage {path} holds no lineage id ({data!r}); restore "
                    "the file, or delete it to start a new lineage"
                )
            return lineage
        lineage = uuid.uuid4().hex
        record = {
            "format": FORMAT,
            "lineage": lineage,
            "dataflow": name,
            "fingerprint": fingerprint,
            "created_at": time.time(),
        }
        self.write(LINEAGE, json.dumps(record, indent=1).encode())
        return lineage

    def epochs(self, logged: dict[int, bytes] | None = None) -> list[int]:
        """The epochs with a checkpoint folder (committed or not) or a commit in a log
        (``logged``, if read already: :meth:`_logged`), ascending."""
        return sorted({*self._folders(), *(self._logged() if logged is None else logged)})

    def _folders(self) -> list[int]:
        """The epochs with a checkpoint folder (committed or not)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        except Exception as e:
            raise CheckpointError(f"cannot list checkpoint store {self.uri!r}: {e}") from e
        out = []
        for info in infos:
            base = info.base_name
            if info.type == pafs.FileType.Directory and base.startswith(_PREFIX):
                suffix = base[len(_PREFIX) :]
                if suffix.isdigit():
                    out.append(int(suffix))
        return out

    def _logs(self, strict: bool = False) -> dict[int, tuple[dict[int, bytes], int]]:
        """Every commit log here: per chains' folder epoch, its commits standing and its
        floor (:func:`~timely.checkpoint.links.read_log`). Only a local store has any. A
        log that cannot be read is left out (its commits are no checkpoints to restore
        from, as an unreadable manifest's), or with ``strict`` (the collection, which must
        not take its links as unneeded) raises :class:`CheckpointError`."""
        _ = self.fs
        if not self._local:
            return {}
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise CheckpointError(f"cannot list checkpoint store {self.uri!r}: {e}") from e
        out = {}
        for name in names:
            root = links.log_root(name)
            if root is None:
                continue
            try:
                data = self.read(name)
            except FileNotFoundError:
                continue  # (deleted by a collection meanwhile)
            except OSError as e:
                if strict:
                    raise CheckpointError(
                        f"cannot read the commit log {self._path(name)}: {e}"
                    ) from e
                continue
            out[root] = links.read_log(data)
        return out

    def _logged(
        self, logs: dict[int, tuple[dict[int, bytes], int]] | None = None
    ) -> dict[int, bytes]:
        """The commits in logs, ``{epoch: manifest JSON}``; of two logs' for one epoch (two
        runs'), the later committed."""
        out: dict[int, bytes] = {}
        for commits, _ in (self._logs() if logs is None else logs).values():
            for epoch, data in commits.items():
                other = out.get(epoch)
                if other is None or _committed_at(data) >= _committed_at(other):
                    out[epoch] = data
        return out

    def manifests(self) -> dict[int, dict[str, Any]]:
        """Every committed checkpoint's manifest, by epoch (in a folder or a log; those
        that cannot be read are left out): for tools and tests, nothing checked."""
        logged = self._logged()
        out = {}
        for epoch in self.epochs(logged):
            with contextlib.suppress(CheckpointError):
                out[epoch] = self._manifest(epoch, logged)
        return out

    def load(self, epoch: int) -> tuple[dict[str, Any], list[bytes]]:
        """The manifest and verified parts of the checkpoint at ``epoch``; raise
        :class:`CheckpointError` if it is not committed or any part, or any part of an
        incremental part's chain, is damaged."""
        manifest, datas, _ = self._load(epoch)
        return manifest, datas

    def _load(
        self, epoch: int, logged: dict[int, bytes] | None = None
    ) -> tuple[dict[str, Any], list[bytes], list[list[bytes]]]:
        """:meth:`load`, and each part's chain as read and verified, newest first."""
        manifest = self._manifest(epoch, logged)
        datas = []
        chains = []
        for part in manifest["parts"]:
            datas.append(self._verified(epoch, part))
            # The parts its deltas are on: all must hold.
            chains.append([self._verified(epoch, link) for link in part.get("chain", [])])
        return manifest, datas, chains

    def _read_manifest(self, epoch: int, logged: dict[int, bytes], strict: bool = False) -> Any:
        """The manifest that commits ``epoch`` (None: none), as read: its folder's, or its
        commit log's line (``logged``, as :meth:`_logged` found them), whichever was
        committed later if both are there; the line where the folder's cannot be read.
        Raises ``ValueError`` when the folder's manifest is damaged and no line commits
        the epoch, ``OSError`` when it cannot be read for now and no line does, or
        (``strict``: the collection, which then deletes nothing) even if one does."""
        record = logged.get(epoch)
        manifest: Any = None
        try:
            manifest = json.loads(self.read(f"{epoch_dir(epoch)}/MANIFEST.json"))
        except FileNotFoundError:
            pass
        except ValueError:
            if record is None:
                raise
        except OSError:
            if record is None or strict:
                raise
        if record is not None and (
            not isinstance(manifest, dict) or _committed_at(record) >= _committed_at(manifest)
        ):
            manifest = json.loads(record)
        return manifest

    def _manifest(self, epoch: int, logged: dict[int, bytes] | None = None) -> dict[str, Any]:
        """The committed manifest of the checkpoint at ``epoch`` (:meth:`_read_manifest`),
        checked for its format and its number of parts."""
        try:
            manifest = self._read_manifest(epoch, self._logged() if logged is None else logged)
        except (OSError, ValueError) as e:
            raise CheckpointError(f"checkpoint {epoch}: unreadable manifest ({e})") from e
        if manifest is None:
            raise CheckpointError(f"checkpoint {epoch} has no manifest (never committed)")
        if not isinstance(manifest, dict) or manifest.get("format") not in READABLE:
            format_ = manifest.get("format") if isinstance(manifest, dict) else None
            raise CheckpointError(f"checkpoint {epoch}: format {format_!r}")
        if manifest.get("epoch") != epoch:  # (another checkpoint's, in a folder reused)
            raise CheckpointError(
                f"checkpoint {epoch}: its manifest is checkpoint {manifest.get('epoch')!r}'s"
            )
        if len(manifest["parts"]) != manifest["workers"]:
            raise CheckpointError(
                f"checkpoint {epoch}: {len(manifest['parts'])} parts for a run of "
                f"{manifest['workers']} workers"
            )
        return manifest

    def whole_part(self, epoch: int, part: dict[str, Any]) -> dict[str, Any]:
        """One worker's part of the checkpoint at ``epoch`` (its manifest entry), read,
        verified and decoded whole (its chain applied): what a worker restoring reads."""
        data = self._verified(epoch, part)
        chain = [self._verified(epoch, link) for link in part.get("chain", [])]
        return self._whole(data, chain)

    def _verified(self, epoch: int, entry: dict[str, Any]) -> bytes:
        """The bytes a manifest entry names (a file, or ``size`` bytes at ``offset`` in a
        links file), if they have the recorded size and checksum."""
        path = entry["path"]
        offset = entry.get("offset")
        where = path if offset is None else f"{path} (at {offset:,})"
        try:
            if offset is None:
                data = self.read(path)
            else:
                with self.fs.open_input_file(self._path(path)) as f:
                    data = f.read_at(entry["size"], offset)
        except OSError as e:
            raise CheckpointError(f"checkpoint {epoch}: {where} unreadable: {e}") from e
        if len(data) != entry["size"] or not _checksum_matches(data, entry):
            raise CheckpointError(f"checkpoint {epoch}: {where} fails its checksum")
        return data

    @staticmethod
    def _whole(data: bytes, chain: list[bytes]) -> dict[str, Any]:
        """A part decoded whole: an incremental one with the deltas of its chain (the
        parts it is on, newest first, as :meth:`_load` verified them) applied on the
        whole part the chain starts from."""
        part = decode_part(data)
        if not chain:
            return part
        return apply_chain([*(decode_part(d) for d in reversed(chain)), part])

    def newest(
        self, fingerprint: str, name: str, upto: int | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        """The newest usable checkpoint (at ``upto`` or before, if given): ``(epoch,
        manifest)``, every file it needs read and checked but nothing decoded (each worker
        decodes its own share, :class:`Share`); damaged or uncommitted ones are skipped.
        Refuses checkpoints of another dataflow."""
        logged = self._logged()
        for epoch in reversed([e for e in self.epochs(logged) if upto is None or e <= upto]):
            try:
                manifest = self._manifest(epoch, logged)
                for part in manifest["parts"]:
                    _check_chain(epoch, part)
                    for entry in (part, *part.get("chain", [])):
                        self._verified(epoch, entry)  # read, hashed and let go
            except CheckpointError:
                continue
            self._same_dataflow(manifest, fingerprint, name)
            return epoch, manifest
        return None

    def _same_dataflow(self, manifest: dict[str, Any], fingerprint: str, name: str) -> None:
        if manifest["fingerprint"] != fingerprint:
            raise CheckpointError(
                f"the checkpoints in {self.uri!r} are of dataflow "
                f"{manifest.get('dataflow')!r} with a different graph (fingerprint "
                f"{manifest['fingerprint']}, this one {fingerprint}); {name!r} cannot resume "
                "from them: use another checkpoint directory, or delete this one to start over"
            )

    def latest(self, fingerprint: str, name: str) -> tuple[int, list[dict[str, Any]]] | None:
        """The newest usable checkpoint: ``(epoch, decoded parts)``; damaged or uncommitted
        ones are skipped. Refuses checkpoints of a different dataflow."""
        logged = self._logged()
        for epoch in reversed(self.epochs(logged)):
            try:
                manifest, datas, chains = self._load(epoch, logged)
            except CheckpointError:
                continue
            self._same_dataflow(manifest, fingerprint, name)
            try:
                parts = [self._whole(d, c) for d, c in zip(datas, chains)]
            except CheckpointError:
                continue  # a chain that does not hold a vertex's base: the one before, then
            return epoch, parts
        return None

    def collect_garbage(
        self,
        keep: int,
        also: Iterable[int] = (),
        folders: dict[int, frozenset[int]] | None = None,
        upto: int | None = None,
    ) -> None:
        """Delete all but the newest ``keep`` committed checkpoints (and those in ``also``),
        and any uncommitted directory older than the oldest one kept. The parts a kept
        checkpoint's chain needs stay, without their manifest: they are no checkpoint to
        restore from any more (the driver's inputs before the oldest kept one are gone).
        ``folders``: per committed checkpoint, the folders its bytes are in (its parts'
        and their chains' links': :func:`home`), as the coordinator knows them (a kept one
        it does not know has its manifest read).
        ``upto``: the newest commit when the collection was asked for; later checkpoints
        are left out, as if not yet written (a collection run late, on another thread,
        would otherwise count them among the newest ``keep`` and drop an older one that
        ``also`` names as the fallback of the commit it was asked for)."""
        try:
            logs = self._logs(strict=True)
        except CheckpointError:
            return  # a commit log unreadable for now: its links may be needed (see below)
        logged = self._logged(logs)
        present = set(self._folders())
        epochs = sorted(e for e in {*present, *logged} if upto is None or e <= upto)
        committed = [e for e in epochs if e in logged or self._has_manifest(e)]
        kept = sorted({*committed[-keep:], *(e for e in also if e in committed)})
        # ``also`` is the coordinator's kept commits: one that a later commit retired while
        # this ran (its folder moved away whole) still marks everything older as stale.
        marks = sorted({*kept, *also})
        if not marks or (len(committed) <= keep and (not epochs or epochs[0] >= marks[0])):
            return  # (with no more than ``keep`` commits, only older folders are left over)
        oldest_kept, newest_kept = marks[0], marks[-1]
        needed: set[int] = set()  # the folders the kept checkpoints have bytes in
        known = folders or {}
        # ``also`` counts even when no longer listed: a later commit's floor may hide it
        # (the commits after ``upto`` are not looked at, and may have bytes in the same
        # folders as it: a worker's whole parts one after the other in its links file).
        for epoch in sorted({*kept, *also}):
            if epoch in known:
                needed.update(known[epoch])
                continue
            if epoch not in kept:
                continue  # (neither listed nor known: nothing to read)
            try:
                manifest = self._read_manifest(epoch, logged, strict=True)  # (a restore's)
                if manifest is None:
                    continue  # retired by a commit meanwhile: no longer kept
                needed.update(home(e) for p in manifest["parts"] for e in (p, *p.get("chain", [])))
            except OSError:
                # Unreadable now (a permission, an I/O error, a store that timed out), not
                # damaged: the links it names may be needed. Delete nothing; the next
                # collection tries again.
                return
            except (ValueError, KeyError, TypeError):
                continue  # damaged: no checkpoint to restore from, nor are its links
        room = [0, 0]
        if self._local:
            try:
                waiting = os.listdir(self._path(RECYCLE))
            except FileNotFoundError:
                waiting = []
            dirs = sum(1 for n in waiting if n.startswith(_DIR))
            room = [RECYCLE_FILES - (len(waiting) - dirs), RECYCLE_DIRS - dirs]
        for epoch in epochs:
            if epoch in kept or epoch not in present:
                continue  # (a commit in a log only: see the logs below)
            if epoch < newest_kept and epoch in needed:
                # Kept for the chains only: no longer a checkpoint to restore from (the
                # driver's inputs before the oldest kept checkpoint are gone).
                with contextlib.suppress(OSError):
                    self._drop_manifest(epoch_dir(epoch), room)
            elif epoch < oldest_kept or (epoch < newest_kept and epoch in committed):
                # On failure (a concurrent reader, an eventual store) try again next time.
                # Only a committed checkpoint's files are recycled: every part of it was
                # written before its commit. A part of one never committed may still be
                # being written, in place (a leaving worker's, a lost one's): its file is
                # deleted, never handed to the next writer while the last still writes.
                with contextlib.suppress(OSError):
                    self._delete_dir(epoch_dir(epoch), room if epoch in committed else [0, 0])
        for root, (commits, floor) in logs.items():
            self._collect_log(root, commits, floor, kept, needed, oldest_kept, upto)

    def _collect_log(
        self,
        root: int,
        commits: dict[int, bytes],
        floor: int,
        kept: list[int],
        needed: set[int],
        oldest_kept: int,
        upto: int | None,
    ) -> None:
        """The collection's part in one commit log (:mod:`timely.checkpoint.links`): its
        commits not kept are checkpoints no more (a floor after them, as a folder's
        manifest is dropped), and the log goes with its chains' folder. The kept commits
        of one log are its newest (its chains' folder is needed until they go), so one
        floor, below the first of them, leaves exactly those; a commit after ``upto``
        (made while this ran) is left alone."""
        path = self._path(links.log_name(root))
        mine = [e for e in commits if upto is None or e <= upto]
        here = [e for e in mine if e in kept]
        if len(mine) == len(commits) and not here and root < oldest_kept and root not in needed:
            with contextlib.suppress(OSError):  # (tried again at the next collection)
                os.unlink(path)  # (its chains' folder goes with the folders above)
            return
        cut = min(here) if here else max(mine, default=floor) + 1
        if any(e < cut for e in mine):  # (``mine`` holds no line a floor hides already)
            with contextlib.suppress(OSError):  # (tried again at the next collection)
                links.append(path, links.line("f", cut))

    def _has_manifest(self, epoch: int) -> bool:
        info = self.fs.get_file_info(self._path(epoch_dir(epoch), "MANIFEST.json"))
        return bool(info.type == pafs.FileType.File)


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_IN_PLACE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
"""A part under its own name: a file left there by an earlier run (a checkpoint never
committed, or one a run with ``resume=False`` writes again) is written over."""
_OVER = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)


class _Kept:
    """What the coordinator's last commit kept, as :meth:`CheckpointStore.kept` says."""

    __slots__ = ("epoch", "folders")

    def __init__(self) -> None:
        self.epoch = -1
        """The last commit (-1: none known here: a Ray worker's store)."""
        self.folders: frozenset[int] = frozenset()

    def continues(self, folder: int) -> bool:
        """Whether a links file in ``folder`` may take a whole part."""
        return self.epoch < 0 or folder > self.epoch or folder in self.folders


def home(entry: dict[str, Any]) -> int:
    """The epoch of the checkpoint folder that holds a manifest entry's bytes (a part, a
    link of its chain): its own, or the one whose links file it is in."""
    folder = entry["path"].split("/", 1)[0]
    return int(folder[len(_PREFIX) :])


def _write_local(
    path: str, tmp: str, data: list[Any], make_dir: Callable[[str], object] = os.makedirs
) -> None:
    """:meth:`CheckpointStore.write` on a local directory: ``data`` into ``tmp`` (its
    directory made on first use, by ``make_dir``), then renamed to ``path`` (unless
    ``tmp`` is ``path``: written in place)."""
    flags = _IN_PLACE if tmp == path else _CREATE
    try:
        fd = os.open(tmp, flags, 0o666)
    except FileNotFoundError:
        make_dir(os.path.dirname(tmp))
        fd = os.open(tmp, flags, 0o666)
    _fill(fd, data, tmp, path, cut=False)


def _write_existing(path: str, data: list[Any]) -> bool:
    """Write ``data`` over the file at ``path`` and cut it to length, if there is one
    (False: there is none)."""
    try:
        fd = os.open(path, _OVER)
    except FileNotFoundError:
        return False
    _fill(fd, data, path, path, cut=True)
    return True


def _write_over(path: str, tmp: str, data: list[Any]) -> None:
    """:meth:`CheckpointStore.write` over a recycled file moved to ``tmp``: ``data`` from
    its start, the file cut to its length, then renamed to ``path`` (unless in place)."""
    _fill(os.open(tmp, _OVER), data, tmp, path, cut=True)


def _fill(fd: int, data: list[Any], tmp: str, path: str, cut: bool) -> None:
    """Write the pieces ``data`` to the open file ``fd`` (``tmp``) from its start, cut it
    to that length if ``cut`` (a file written over), close it and rename it to ``path``
    (if ``tmp`` is another name)."""
    try:
        links.write_all(fd, data)
        if cut:
            os.ftruncate(fd, _size(data))
    finally:
        os.close(fd)
    if tmp != path:
        os.replace(tmp, path)


def _committed_at(manifest: bytes | dict[str, Any]) -> float:
    """When a manifest (JSON, or read) says it was committed (0: it does not say)."""
    if not isinstance(manifest, dict):
        try:
            manifest = json.loads(manifest)
        except ValueError:
            return 0.0
    at = manifest.get("committed_at") if isinstance(manifest, dict) else None
    return float(at) if isinstance(at, int | float) else 0.0


def _checksum_matches(data: bytes, entry: dict[str, Any]) -> bool:
    """Whether a part read back has the checksum its manifest entry records: CRC-32
    (``crc32``), or SHA-256 (``sha256``) in manifests written before issue 30."""
    if "crc32" in entry:
        return bool(zlib.crc32(data) == entry["crc32"])
    return "sha256" in entry and hashlib.sha256(data).hexdigest() == entry["sha256"]


Data = bytes | list[Any]
"""A file's contents: bytes, or pieces (``bytes``, ``pyarrow.Buffer``, anything with the
buffer protocol and bytes for items) that join into them."""


def _as_pieces(data: Data) -> list[Any]:
    return [data] if isinstance(data, bytes | bytearray | memoryview) else data


def _size(pieces: list[Any]) -> int:
    return sum(map(len, pieces))


def decode_part(data: bytes) -> dict[str, Any]:
    """A worker's part as written (checksum already verified), each vertex's snapshot
    decoded: parts of format 2 carry every vertex's snapshot encoded on its own, format 1
    (older runs) as plain data."""
    part: dict[str, Any] = serialization.decode(data)
    if part.get("format") not in (1, 2):
        raise CheckpointError(f"checkpoint part of format {part.get('format')!r}: not readable")
    part["vertices"] = {
        int(v): serialization.decode(s) if isinstance(s, bytes) else s
        for v, s in part["vertices"].items()
    }
    return part


def apply_chain(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The last of ``parts`` (a worker's decoded parts along a chain, the whole one first)
    made whole: each keyed snapshot that is a delta gets the snapshots of its chain, back
    to a whole one, applied in one pass (:func:`timely.state.keyed.apply_deltas`); every other
    snapshot stands as it is."""
    by_epoch = {p["epoch"]: p for p in parts}
    last = parts[-1]
    vertices = {}
    for v, snap in last["vertices"].items():
        if isinstance(snap, dict) and snap.get("kind") == "keyed" and "base" in snap:
            chain = [snap]
            while "base" in chain[-1]:
                earlier = by_epoch.get(chain[-1]["base"], {}).get("vertices", {}).get(v)
                if not isinstance(earlier, dict):
                    raise CheckpointError(
                        f"checkpoint part {last['epoch']}: vertex {v} is a delta on epoch "
                        f"{chain[-1]['base']}, which its chain does not hold"
                    )
                chain.append(earlier)
            whole, *deltas = reversed(chain)
            tables = {
                name: apply_deltas(whole["tables"][name], [d["tables"][name] for d in deltas])
                for name in snap["tables"]
            }
            snap = {k: x for k, x in snap.items() if k != "base"} | {"tables": tables}
        vertices[v] = snap
    return {**last, "base": None, "vertices": vertices}


def _check_chain(epoch: int, part: dict[str, Any]) -> None:
    """A manifest entry's chain is the one its base says, newest first, epochs falling
    (what the worker will apply without the driver decoding anything)."""
    chain = part.get("chain") or []
    epochs = [link.get("epoch") for link in chain]
    base = part.get("base")
    if (
        (base is None) != (not chain)
        or (chain and epochs[0] != base)
        or any(
            not isinstance(a, int) or not isinstance(b, int) or a <= b
            for a, b in itertools.pairwise(epochs)
        )
    ):
        raise CheckpointError(
            f"checkpoint {epoch}: {part.get('path')} has base {base!r} but its chain is {epochs!r}"
        )


@dataclass(frozen=True)
class Share:
    """Worker ``worker`` of ``workers``' share of the checkpoint at ``epoch``, which the
    worker reads from the store itself: the driver only checks the files, so no process
    holds more of the state than one old part and its own share, whatever the state's
    size (the disk backend's point).

    With the worker count and bins the checkpoint was written with, the share is the
    worker's own part. Otherwise (a rescale) every old part is read in turn and the keys
    whose bin the default table of ``workers`` gives to this worker are kept; sources'
    offsets are merged (worker ``w`` reads the partitions ``p % workers == w``).
    """

    store: CheckpointStore
    epoch: int
    parts: tuple[dict[str, Any], ...]
    worker: int
    workers: int
    bins: int = DEFAULT_BINS

    def pieces(self) -> Iterator[dict[int, Any]]:
        """The share, one old part at a time: per vertex, its snapshot (keyed ones with
        only this worker's keys)."""
        parts = sorted(self.parts, key=lambda p: p["worker"])
        if len(parts) == self.workers:
            own = self.store.whole_part(self.epoch, parts[self.worker])
            if all(
                s.get("bins") == self.bins  # older parts, without bins, placed keys by hash
                for s in own["vertices"].values()
                if isinstance(s, dict) and s.get("kind") == "keyed"
            ):
                yield {int(v): s for v, s in own["vertices"].items()}
                if any(p.get("moved") for p in parts):  # partitions moved live: every
                    for p in parts:  # worker takes every part's offsets (p % workers)
                        if p is not parts[self.worker]:
                            other = self.store.whole_part(self.epoch, p)["vertices"]
                            yield {
                                int(v): s
                                for v, s in other.items()
                                if isinstance(s, dict) and s.get("kind") == "offsets"
                            }
                return
        table = default_table(self.bins, self.workers)
        for i, p in enumerate(parts):
            part = self.store.whole_part(self.epoch, p)
            yield _share_of(part, self.worker, table, self.bins, first=i == 0, parts=len(parts))


def _share_of(
    part: dict[str, Any], worker: int, table: Any, bins: int, first: bool, parts: int
) -> dict[int, Any]:
    """What of one old worker's part belongs to ``worker`` under routing ``table``."""
    out: dict[int, Any] = {}
    for v, snap in part["vertices"].items():
        kind = snap.get("kind") if isinstance(snap, dict) else None
        if kind == "keyed":
            tables = {}
            for name, t in snap["tables"].items():
                if t.get("replicated"):  # every worker had the same table: one copy
                    tables[name] = t if first else {**t, "times": []}
                    continue
                if is_columnar(t):  # Arrow rows: one mask of their bins
                    tables[name] = share_of(t, np.asarray(table) == worker, bins)
                    continue
                times = []
                for time, keys, values in t["times"]:
                    keys = _keys(keys)
                    mine = [i for i, b in enumerate(bins_of(keys, bins)) if table[b] == worker]
                    if mine:
                        times.append((time, [keys[i] for i in mine], [values[i] for i in mine]))
                tables[name] = {"format": t["format"], "replicated": False, "times": times}
            out[int(v)] = {"kind": "keyed", "tables": tables}
        elif kind == "offsets":
            out[int(v)] = snap
        else:
            raise CheckpointError(
                f"vertex {v} keeps state of kind {kind!r}, which cannot be re-partitioned; "
                f"restore it with the {parts} workers it was written with"
            )
    return out


def merge_pieces(snaps: list[Any]) -> Any:
    """One vertex's snapshots from several old parts (a rescale), as one: keyed tables
    with every piece's keys (replicated ones from the first). For a vertex that restores
    with its own code, which must see the share whole."""
    if len(snaps) == 1:
        return snaps[0]
    first = snaps[0]
    tables: dict[str, Any] = {}
    for name, t in first["tables"].items():
        if t.get("replicated"):
            tables[name] = t
            continue
        if is_columnar(t):
            tables[name] = merge_snapshots([snap["tables"][name] for snap in snaps])
            continue
        times: dict[Any, tuple[list[Any], list[Any]]] = {}
        for snap in snaps:
            for at, keys, values in snap["tables"][name]["times"]:
                ks, vs = times.setdefault(tuple(at), ([], []))
                ks.extend(keys)
                vs.extend(values)
        tables[name] = {**t, "times": [(t_, k, v) for t_, (k, v) in sorted(times.items())]}
    return {**first, "tables": tables}
