"""Where a worker's Unix socket lives: a fresh 0700 directory named after its process,
and the directories of dead processes swept away.

A worker removes its socket directory when its run ends. A worker process that is
killed (a failure, a test's kill, Ray ending a dead driver's actors) cannot: Ray kills
with SIGKILL, so no ``atexit`` or signal handler runs. The driver removes those of the
actors it kills itself (``RaySession._remove_sockets``), but not of a driver that died,
nor on other nodes. So each directory is named ``timely-<pid>-<random>``, and the first
listen of each process removes the directories of this user whose process no longer
exists (:func:`sweep_stale`), on its own node, once: a process lives for many runs.

A process id is reused in time; a directory whose id belongs to a live process (its
own, or an unrelated one by reuse) is kept, so the sweep never takes a live worker's.
Two containers that share a temporary directory but not their process ids would see
each other's workers as dead: give them their own ``TMPDIR``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

PREFIX = "timely-"
_MAX_BASE = 60
"""A Unix socket path has at most 107 bytes: a longer temporary directory is not used."""

_swept = False


def socket_dir() -> str:
    """A new 0700 directory for this process's socket, after a sweep of stale ones (the
    first time in this process)."""
    global _swept
    base = tempfile.gettempdir()
    if len(base) > _MAX_BASE:
        base = "/tmp"
    if not _swept:
        _swept = True
        sweep_stale(base)
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)


def sweep_stale(base: str) -> int:
    """Remove the socket directories under ``base`` of this user's processes that no
    longer exist; returns how many. Anything else under ``base`` is left alone: other
    names, files, links, other users' directories, live processes'."""
    uid = os.getuid()
    removed = 0
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    for entry in entries:
        pid = _pid_of(entry.name)
        if pid is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or _alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed


def _pid_of(name: str) -> int | None:
    """The process id in a socket directory's name (None: not one)."""
    if not name.startswith(PREFIX):
        return None
    digits, dash, rest = name[len(PREFIX) :].partition("-")
    if not dash or not rest or not digits.isdigit():
        return None
    return int(digits)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    if pid <= 0:
        return True  # never a worker's: 0 and negatives name process groups
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, another user's
        return True
    return True
