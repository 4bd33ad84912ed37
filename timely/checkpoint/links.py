"""A worker's parts appended to one file, and their commits to one log.

With a checkpoint every epoch, each commit made a folder, a part file in it and a
manifest file, or, where the last kept checkpoint's folder was retired to be written
over, renamed them into place: on ext4 in a run holding 1M keys, a new folder cost
~0.2-0.4 ms of system time and a new file ~0.1 ms (issue 30), as much as the ~160 KB
delta's encoding and write together, and a word count's ~38 system calls a checkpoint
left the next epoch's kernels colder. On a local store a part goes instead into its
worker's *links file*, and a checkpoint all of whose parts are there is committed by a
line in a *commit log*, so that a part costs a write at an offset and its commit an
append:

    ckpt-000000000040/part-0-of-2.bin       worker 0's part at 40, written to a folder:
                                            its first, the first after a restore or a
                                            change of the worker count, a whole part
                                            after a delta or once its links file is
                                            full, or a delta whose base is not last in
                                            a links file
    ckpt-000000000040/links-0-of-2-<tag>.bin  worker 0's parts after it, one after the
                                            other (``tag``: its writer's own): the deltas
                                            of its incremental chain, or whole parts (up
                                            to :data:`FILE_BYTES`, :data:`FILE_PARTS`);
                                            a manifest entry names the ``offset``
    commits-000000000040.log                the commits of checkpoints whose parts are all
                                            in links files, the oldest of their folders 40

A log's line is ``<crc32 of the rest, 8 hex digits> <kind> <epoch> <payload>``, written
whole by one ``write`` between newlines (a line torn by a crash is cut off by the next
writer's leading newline and fails its checksum): kind ``c`` commits the checkpoint at
``epoch`` (the payload is its manifest, as ``MANIFEST.json`` would hold it), kind ``f``
sets a floor (the commits above it in the file at epochs below it are checkpoints no
more, as a manifest deleted): a commit writes one after its line, at the oldest
checkpoint kept (and into the log it wrote to before, when that is another), and the
collection one where a commit's did not reach. A later line for an epoch is the newer
commit.

A links file belongs to the folder of the part it continues, under a name of its
writer's own: the collection keeps that folder while a kept checkpoint has bytes in it
(a part, or a link of a part's chain), and never recycles a links file, so nothing else
is ever written where a part was, even by a worker lost but still running. A log is
deleted with its folder. Only a
directory on a local disk (:func:`appendable`) has links files and logs: they stay open.
"""

from __future__ import annotations

import os
import re
import zlib
from typing import Any

LINKS = "links-"
"""The names of links files start with it (never recycled: :func:`is_links_file`)."""
LOG = "commits-"
"""The names of commit logs start with it, followed by the epoch of their chains' folder."""
_SUFFIX = ".log"
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
FILE_BYTES = 8 << 20
"""A whole part goes into a worker's links file (after the part it last wrote to a folder)
only while the file stays within this many bytes; else to a folder of its own, where a
new links file begins (as after :data:`FILE_PARTS` parts). A folder is deleted once no
kept checkpoint has bytes in it (by the collection after the next few commits), so this
bounds what a run keeps on disk beyond its kept checkpoints to about this much a worker
(a delta always follows its base, in whatever file that is)."""
FILE_PARTS = 256
"""Nor more whole parts than this: a folder's commit log holds a line per checkpoint, of
every worker's part (~200 bytes each), and a collection and a restore read it whole, so
a worker whose parts are small (one with little state) begins a folder this often too,
and lets the older ones go."""
_OCTAL = re.compile(r"\\([0-7]{3})")
"""An escape in the mount table (a space, a tab, a newline, a backslash in a path)."""
_IOV_MAX = 1024
"""The most pieces one ``writev`` takes (POSIX's least ``IOV_MAX``)."""


def links_name(worker: int, workers: int, tag: str) -> str:
    """A links file's name: ``tag`` is unique to the chain (its writer's), so that no
    two writers ever append to one file (a worker lost but still running keeps its own)."""
    return f"{LINKS}{worker}-of-{workers}-{tag}.bin"


def is_links_file(name: str) -> bool:
    return name.startswith(LINKS)


def log_name(root: int) -> str:
    return f"{LOG}{root:012d}{_SUFFIX}"


def log_root(name: str) -> int | None:
    """The chains' folder epoch a commit log is named for (None: not a log's name)."""
    if not (name.startswith(LOG) and name.endswith(_SUFFIX)):
        return None
    digits = name[len(LOG) : -len(_SUFFIX)]
    return int(digits) if digits.isdigit() else None


class _Open:
    """A file this process keeps open for writing, closed with its owner."""

    __slots__ = ("_fd",)

    def __init__(self) -> None:
        self._fd: int | None = None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class Chain(_Open):
    """One worker's links file: its parts after the one in the folder ``folder`` (a path
    under the store's root), appended in order, the latest at ``last``. Only one thread writes
    a worker's parts at a time (the loop, or the writer thread while parts wait there)."""

    __slots__ = ("deltas", "end", "home", "last", "parts", "path", "relpath", "workers")

    def __init__(
        self, root: str, folder: str, worker: int, workers: int, last: int, tag: str
    ) -> None:
        super().__init__()
        self.relpath = f"{folder}/{links_name(worker, workers, tag)}"
        self.home = last
        """The epoch of the folder (of the part the file continues)."""
        self.path = f"{root}/{self.relpath}"
        self.workers = workers
        self.last = last
        """The epoch of the latest part on this chain: the next delta continues it only if
        this is its base."""
        self.end = 0
        self.parts = 0
        """Parts written here."""
        self.deltas = False
        """Whether a delta is in the file: a whole part then begins a folder of its own,
        so that each incremental chain has its own folder and log, and a log's commits
        the collection keeps are its newest (a chain's and the one before it, kept to
        fall back to, are in two logs)."""

    def takes_whole(self, size: int) -> bool:
        """Whether a whole part of ``size`` bytes goes here next: the file holds no delta,
        has room, and is still there (the collection deletes a folder no kept checkpoint
        has bytes in: a worker that left the run live and joined it again finds its old
        chain's gone)."""
        if self.deltas or self.end + size > FILE_BYTES or self.parts >= FILE_PARTS:
            return False
        return self._fd is None or os.fstat(self._fd).st_nlink > 0

    def append(self, epoch: int, pieces: list[Any], size: int, delta: bool) -> int:
        """Write the part at ``epoch`` (``pieces``, ``size`` bytes; a ``delta`` or whole)
        after the last; returns its offset. The file is made on first use."""
        if self._fd is None:
            self._fd = os.open(self.path, _NEW, 0o666)
        offset = self.end
        write_all(self._fd, pieces, offset)
        self.end = offset + size
        self.last = epoch
        self.deltas = self.deltas or delta
        self.parts += 1
        return offset


def write_all(fd: int, pieces: list[Any], offset: int | None = None) -> None:
    """Write every piece to ``fd`` in order, where it stands or from ``offset``: one
    ``writev`` (``pwritev``) for them all, more when the kernel takes less than all of it,
    or there are more than :data:`_IOV_MAX`."""
    views = [memoryview(p).cast("B") for p in pieces if len(p)]
    while views:
        if offset is None:
            n = os.writev(fd, views[:_IOV_MAX])
        else:
            n = os.pwritev(fd, views[:_IOV_MAX], offset)
            offset += n
        done = 0
        while done < len(views) and n >= len(views[done]):
            n -= len(views[done])
            done += 1
        del views[:done]
        if n:
            views[0] = views[0][n:]


def line(kind: str, epoch: int, payload: bytes = b"") -> bytes:
    """A log line, with the newlines around it."""
    body = b"%s %d %s" % (kind.encode(), epoch, payload)
    return b"\n%08x %s\n" % (zlib.crc32(body), body)


def append(path: str, data: bytes) -> None:
    """Append ``data`` to the log at ``path`` (made if need be), in one write."""
    fd = os.open(path, _APPEND, 0o666)
    try:
        _write_once(fd, data)
    finally:
        os.close(fd)


def _write_once(fd: int, data: bytes) -> None:
    n = os.write(fd, data)
    if n != len(data):  # (a full disk: the rest would be a line of its own, torn)
        raise OSError(f"a short write to a commit log ({n} of {len(data)} bytes)")


class Log(_Open):
    """The commit log a coordinator appends to, kept open while its chains' folder is the
    same (a commit a write, not an open, a write and a close)."""

    __slots__ = ("floor", "path")

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.floor = -1
        """The highest floor appended through this object."""
        self._fd = os.open(path, _APPEND, 0o666)

    def append(self, data: bytes) -> None:
        if self._fd is None:
            raise OSError(f"the commit log {self.path} is closed")
        _write_once(self._fd, data)


def read_log(data: bytes) -> tuple[dict[int, bytes], int]:
    """A log's commits still standing, ``{epoch: manifest JSON}`` (the last line for an
    epoch), and its floor (the highest). A floor leaves out the commits before it in the
    file at epochs below it, not those written after it (a later run's, whose chain's
    folder had the same epoch). Lines that fail their checksum (torn, damaged) are
    skipped."""
    commits: dict[int, bytes] = {}
    floor = -1
    for raw in data.split(b"\n"):
        if len(raw) < 13 or raw[8:9] != b" ":
            continue
        body = raw[9:]
        try:
            if int(raw[:8], 16) != zlib.crc32(body):
                continue
            kind, epoch_text, payload = body.split(b" ", 2)
            epoch = int(epoch_text)
        except ValueError:
            continue
        if kind == b"c":
            commits[epoch] = payload
        elif kind == b"f":
            floor = max(floor, epoch)
            commits = {e: m for e, m in commits.items() if e >= epoch}
    return commits, floor


LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "bcachefs", "jfs", "reiserfs"}
    | {"nilfs2", "tmpfs", "ramfs", "overlay"}
)
"""Filesystems of one machine's disks or memory. On any other (NFS, SMB, a FUSE mount,
Lustre, CephFS) a file's data reaches other nodes when it is closed, and links files and
commit logs stay open: there every part is a file of its own, closed when written."""


def appendable(path: str, mounts: str | None = None) -> bool:
    """Whether links files and commit logs may be kept at ``path``: it is on one of
    :data:`LOCAL_FILESYSTEMS`, by the longest mount point that holds it in ``mounts``
    (``/proc/self/mounts`` as read; where that cannot be read, no)."""
    if mounts is None:
        try:
            with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
                mounts = f.read()
        except OSError:
            return False
    target = os.path.realpath(path)
    best, kind = "", ""
    for entry in mounts.splitlines():
        fields = entry.split()
        if len(fields) < 3:
            continue
        point = _OCTAL.sub(lambda m: chr(int(m[1], 8)), fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind in LOCAL_FILESYSTEMS
