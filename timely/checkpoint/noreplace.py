"""A rename that never replaces its target: Linux's ``renameat2(RENAME_NOREPLACE)``.

``os.rename`` of a folder replaces an empty folder at the target. When two writers make
a checkpoint's folder at once (each from a recycled one), the second replaces the
first's while the first may be creating a file in it: that file's path was resolved to
the folder now gone, and its creation fails. With no replacing, the second writer's
rename fails instead, and it uses the folder that is there."""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _load() -> Any:
    """libc's ``renameat2``, or None where there is none (not Linux, glibc < 2.28)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load()

SUPPORTED = _renameat2 is not None
"""This system has the call; a file system without the flag fails it with ``EINVAL``."""


def rename_noreplace(src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` unless ``dst`` exists. Raises as ``os.rename`` does, and
    :class:`FileExistsError` when ``dst`` exists; :class:`OSError` (``ENOSYS``) when the
    system has no such call, ``EINVAL`` when the file system has no such flag."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available", src)
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), src, None, dst)
