"""Socket directories of dead worker processes are swept (``timely.comm.sockdir``).

A killed worker cannot remove its own socket directory (Ray kills with SIGKILL), and
the driver removes only those of the actors it kills itself, on its own node. The next
worker process's first listen removes this user's directories whose process is gone.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from timely.comm import sockdir


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    for _ in range(10):
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        if not sockdir._alive(child.pid):
            return child.pid
    raise AssertionError("every exited child's id was in use again at once")


def _socket(path: Path) -> None:
    """A Unix socket file at ``path``, as a listener leaves it."""
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A fresh directory with a short path: a Unix socket's path has at most 107 bytes,
    more than pytest's ``tmp_path`` leaves under a worker process of its own."""
    path = Path(tempfile.mkdtemp(prefix="sockdir-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_sweep_removes_the_directories_of_dead_processes_and_nothing_else(
    short_tmp: Path,
) -> None:
    """Caught: a live process's directory taken (the liveness check turned round), a
    file or a link counted as a directory, a directory with a user's file in it emptied,
    a name not of ``socket_dir``'s exact form matched (a user's ``timely-20240501-x``,
    a non-ASCII digit, a pid too long: none may stop the sweep either)."""
    dead = _dead_pid()
    gone = short_tmp / f"timely-sock-{dead}-abc_1234"
    gone.mkdir()
    _socket(gone / "worker-0.sock")
    kept = [
        short_tmp / f"timely-sock-{os.getpid()}-abcdefgh",  # this process's: alive
        short_tmp / f"timely-sock-{os.getppid()}-abcdefgh",  # alive too
        short_tmp / f"timely-sock-{dead}-abc",  # not mkdtemp's eight characters
        short_tmp / f"timely-sock-{dead}-ABCDEFGH",
        short_tmp / "timely-sock-\u00b2-abcdefgh",  # a digit, but not an ASCII one
        short_tmp / "timely-sock-99999999-abcdefgh",  # longer than any pid
        short_tmp / f"timely-{dead}-abcdefgh",  # another name: a user's, or the old form
        short_tmp / "timely-20240501-results",
        short_tmp / "timely-spark-abcdefgh",
    ]
    for path in kept:
        path.mkdir()
        (path / "data.csv").write_bytes(b"1,2\n")
    mixed = short_tmp / f"timely-sock-{dead}-mixed___"  # a user's file beside the socket
    mixed.mkdir()
    _socket(mixed / "worker-1.sock")
    (mixed / "notes.txt").write_bytes(b"keep")
    other = short_tmp / "elsewhere"
    other.mkdir()
    link = short_tmp / f"timely-sock-{dead}-link____"
    link.symlink_to(other)
    plain = short_tmp / f"timely-sock-{dead}-file____"
    plain.write_bytes(b"")
    assert sockdir.sweep_stale(str(short_tmp)) == 1
    assert not gone.exists()
    assert all((path / "data.csv").is_file() for path in kept)
    assert (mixed / "notes.txt").is_file() and (mixed / "worker-1.sock").exists()
    assert link.is_symlink() and other.is_dir() and plain.is_file()
    assert sockdir.sweep_stale(str(short_tmp)) == 0
    assert sockdir.sweep_stale(str(short_tmp / "missing")) == 0


def test_a_sockets_directory_names_its_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first directory a process makes comes after a sweep, later ones do not."""
    swept: list[str] = []
    monkeypatch.setattr(sockdir, "_swept", False)
    monkeypatch.setattr(sockdir, "sweep_stale", lambda base: swept.append(base) or 0)
    first, second = sockdir.socket_dir(), sockdir.socket_dir()
    try:
        for path in (first, second):
            name = os.path.basename(path)
            assert sockdir._pid_of(name) == os.getpid()
            assert os.stat(path).st_mode & 0o777 == 0o700
        assert swept == [os.path.dirname(first)]
    finally:
        os.rmdir(first)
        os.rmdir(second)


@ray.remote(num_cpus=0)
class _Lister:
    """A process of its own that makes a socket directory, as a worker's listen does."""

    def make(self) -> tuple[int, str]:
        return os.getpid(), sockdir.socket_dir()


def test_a_killed_actors_directory_goes_at_the_next_processs_first_listen(
    ray_local: Any,
) -> None:
    """Real Ray: an actor killed with no driver to clean after it leaves its directory;
    a new actor process removes it when it makes its own. Caught: no sweep."""
    victim = _Lister.remote()  # type: ignore[attr-defined]
    pid, folder = ray.get(victim.make.remote())
    assert os.path.isdir(folder)
    ray.kill(victim, no_restart=True)
    # The kill is asynchronous; then the raylet reaps the process. One that never goes
    # fails this test under the run's timeout (pytest-timeout), not on a clock here.
    while sockdir._alive(pid):
        time.sleep(0.05)
    # (Not asserted here that the directory is still there: any worker process started
    # meanwhile, by another test process on this machine, sweeps it as well.)
    fresh = _Lister.remote()  # type: ignore[attr-defined]
    _, own = ray.get(fresh.make.remote())
    try:
        assert not os.path.exists(folder)
        assert os.path.isdir(own)
    finally:
        ray.kill(fresh, no_restart=True)
        shutil.rmtree(own, ignore_errors=True)
