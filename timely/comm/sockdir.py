"""Where a worker's Unix socket lives: a fresh 0700 directory named after its process,
and the directories of dead processes swept away.

A worker removes its socket directory when its run ends. A worker process that is
killed (a failure, a test's kill, Ray ending a dead driver's actors) cannot: Ray kills
with SIGKILL, so no ``atexit`` or signal handler runs. The driver removes those of the
actors it kills itself (``RaySession._remove_sockets``), but not of a driver that died,
nor on other nodes. So each directory is named ``timely-sock-<pid>-<8 random>``
(``mkdtemp``'s form), and the first listen of each process removes the directories of
that exact form, of this user, whose process no longer exists and which hold nothing but
sockets (:func:`sweep_stale`), on its own node, once: a process lives for many runs.

Nothing else is touched: another name (a user's ``timely-20240501-results``), a link, a
file, another user's directory, a live process's (its own, or an unrelated one by pid
reuse: then the stale directory stays), or one holding anything but sockets. Two
containers that share a temporary directory but not their process ids would see each
other's workers as dead: give them their own ``TMPDIR``.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile

PREFIX = "timely-sock-"
_NAME = re.compile(r"timely-sock-([0-9]{1,7})-[a-z0-9_]{8}", re.ASCII)
"""A socket directory's name, as :func:`socket_dir` makes it (``mkdtemp`` adds eight
characters of ``[a-z0-9_]``); a process id has at most 7 digits (``pid_max`` is at
most 4,194,304)."""
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
    longer exist; returns how many. See the module's docstring for what is left alone."""
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
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or _alive(pid):
                continue
            removed += _remove(entry.path)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
    return removed


def _remove(path: str) -> int:
    """Remove the directory ``path`` if it holds only sockets (1), else leave it (0)."""
    inside = list(os.scandir(path))
    if not all(stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode) for e in inside):
        return 0
    for e in inside:
        os.unlink(e.path)
    os.rmdir(path)
    return 1


def _pid_of(name: str) -> int | None:
    """The process id in a socket directory's name (None: not one)."""
    match = _NAME.fullmatch(name)
    return None if match is None else int(match.group(1))


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    if pid <= 0:
        return True  # never a worker's: 0 names the process group
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, another user's
        return True
    return True
