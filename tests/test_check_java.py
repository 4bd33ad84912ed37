"""scripts/check_java.sh under a fake PATH: fake java, apt-get, sudo and id record what the
script does, so each case (Java there, too old, missing as root, as a sudoer, with no way
to install) runs without touching the machine's Java."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_java.sh"
BASH = shutil.which("bash") or "/bin/bash"


def fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def java(version: str) -> str:
    return f"echo 'openjdk version \"{version}\" 2024-01-01' >&2"


def run(tmp_path: Path, *, java_version: str | None, uid: int, sudo: str | None, apt: bool):
    """Run the script with only the fakes and a few real tools on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    log.write_text("")
    for tool in ("sed", "head", "env"):
        os.symlink(shutil.which(tool), bin_dir / tool)  # type: ignore[arg-type]
    fake(bin_dir, "id", f"echo {uid}")
    if java_version is not None:
        fake(bin_dir, "java", java("17.0.9" if java_version == "17" else java_version))
    if apt:  # "installing" puts a Java 17 on PATH
        fake(tmp_path, "java17", java("17.0.9"))
        installs = f"/bin/cp {tmp_path}/java17 {bin_dir}/java"
        fake(
            bin_dir,
            "apt-get",
            f'echo "apt-get $*" >> {log}; case "$*" in *install*) {installs};; esac',
        )
    if sudo == "ok":
        fake(
            bin_dir, "sudo", f'echo "sudo $*" >> {log}; shift; [ "$1" = true ] && exit 0; exec "$@"'
        )
    elif sudo == "password":
        fake(bin_dir, "sudo", f'echo "sudo $*" >> {log}; exit 1')
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    proc = subprocess.run([BASH, str(SCRIPT)], env=env, capture_output=True, text=True)
    return proc.returncode, proc.stderr, log.read_text().splitlines()


def test_java_17_present_needs_nothing(tmp_path: Path) -> None:
    rc, _, log = run(tmp_path, java_version="17", uid=1000, sudo=None, apt=True)
    assert (rc, log) == (0, [])


def test_java_21_present_needs_nothing(tmp_path: Path) -> None:
    rc, _, log = run(tmp_path, java_version="21.0.1", uid=1000, sudo=None, apt=True)
    assert (rc, log) == (0, [])


@pytest.mark.parametrize(("old", "major"), [("11.0.2", 11), ("1.8.0_292", 8)])
def test_old_java_as_root_installs_openjdk_17(tmp_path: Path, old: str, major: int) -> None:
    rc, err, log = run(tmp_path, java_version=old, uid=0, sudo=None, apt=True)
    assert rc == 0, err
    assert f"found: Java {major} at" in err
    assert log[0] == "apt-get update -qq"
    assert log[1] == "apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless"
    assert "Java 17 is ready" in err


def test_missing_java_as_a_sudoer_installs_through_sudo(tmp_path: Path) -> None:
    rc, err, log = run(tmp_path, java_version=None, uid=1000, sudo="ok", apt=True)
    assert rc == 0, err
    assert "found: none" in err
    assert log[0] == "sudo -n true"
    assert log[1].startswith("sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update")
    assert "apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless" in log


def test_no_root_and_no_passwordless_sudo_says_what_to_do(tmp_path: Path) -> None:
    rc, err, log = run(tmp_path, java_version=None, uid=1000, sudo="password", apt=True)
    assert rc == 2
    assert "needs root" in err and "sudo apt-get install openjdk-17-jre-headless" in err
    assert not any(line.startswith("apt-get") for line in log)


def test_no_apt_get_says_what_to_do(tmp_path: Path) -> None:
    rc, err, _ = run(tmp_path, java_version="11.0.2", uid=0, sudo=None, apt=False)
    assert rc == 2
    assert "found: Java 11" in err and "no apt-get" in err and "JAVA_HOME" in err
