"""Socket directories of dead worker processes are swept (``timely.comm.sockdir``).

A killed worker cannot remove its own socket directory (Ray kills with SIGKILL), and
the driver removes only those of the actors it kills itself, on its own node. The next
worker process's first listen removes this user's directories whose process is gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
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


def test_a_sweep_removes_the_directories_of_dead_processes_and_nothing_else(
    tmp_path: Path,
) -> None:
    """Caught: a live process's directory taken (the liveness check turned round), a
    file or a link counted as a directory, a name without the process id matched."""
    dead = _dead_pid()
    gone = tmp_path / f"timely-{dead}-abc"
    gone.mkdir()
    (gone / "worker-0.sock").write_bytes(b"")
    kept = [
        tmp_path / f"timely-{os.getpid()}-abc",  # this process's: alive
        tmp_path / f"timely-{os.getppid()}-abc",  # alive too
        tmp_path / "timely-spark-abc",  # another use of the prefix
        tmp_path / "timely-trace-abc",
        tmp_path / f"timely-{dead}",  # the old naming: no process id to check
        tmp_path / f"timely-{dead}-",
    ]
    for path in kept:
        path.mkdir()
    other = tmp_path / "elsewhere"
    other.mkdir()
    link = tmp_path / f"timely-{dead}-link"
    link.symlink_to(other)
    plain = tmp_path / f"timely-{dead}-file"
    plain.write_bytes(b"")
    assert sockdir.sweep_stale(str(tmp_path)) == 1
    assert not gone.exists()
    assert all(path.is_dir() for path in kept)
    assert link.is_symlink() and other.is_dir() and plain.is_file()
    assert sockdir.sweep_stale(str(tmp_path)) == 0
    assert sockdir.sweep_stale(str(tmp_path / "missing")) == 0


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
    deadline = time.monotonic() + 60
    while sockdir._alive(pid):  # the kill is asynchronous; then the raylet reaps it
        assert time.monotonic() < deadline, f"actor process {pid} still alive"
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
