"""scripts/check_browser.sh under a fake PATH: fake apt-get, apt-cache, sudo and id record
what the script does, and CHROMIUM/CHROMEDRIVER point into a temp dir, so each case (both
there, installed as root from fresh or stale lists, through sudo, no way to install) runs
without touching the machine's browser."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_browser.sh"
BASH = shutil.which("bash") or "/bin/bash"
INSTALL = "apt-get install -y -qq --no-install-recommends chromium chromium-driver"


def fake(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def run(
    tmp_path: Path,
    *,
    present: bool = False,
    uid: int = 0,
    sudo: str | None = None,
    apt: bool = True,
    lists: bool = True,
    stale: bool = False,
    broken: bool = False,
) -> tuple[int, str, list[str]]:
    """Run the script with only the fakes on PATH. ``lists``: apt-cache knows the packages;
    ``stale``: an install fails until apt-get update has run; ``broken``: it always fails."""
    bin_dir, opt = tmp_path / "bin", tmp_path / "opt"
    bin_dir.mkdir()
    opt.mkdir()
    log = tmp_path / "log"
    log.write_text("")
    chromium, driver = opt / "chromium", opt / "chromedriver"
    browser = "echo 'Chromium 150.0 built on Debian'"
    if present:
        fake(chromium, browser)
        fake(driver, "exit 0")
    os.symlink(shutil.which("env"), bin_dir / "env")  # type: ignore[arg-type]
    fake(bin_dir / "id", f"echo {uid}")
    fake(bin_dir / "apt-cache", f'echo "apt-cache $*" >> {log}; exit {0 if lists else 100}')
    if apt:
        (tmp_path / "browser").write_text("#!/bin/sh\n" + browser + "\n")
        installs = (
            f"/bin/cp {tmp_path}/browser {chromium}; /bin/chmod +x {chromium}; "
            f"/bin/cp {tmp_path}/browser {driver}; /bin/chmod +x {driver}"
        )
        gate = "exit 100; " if broken else ""
        gate = gate or (f"[ -f {tmp_path}/updated ] || exit 100; " if stale else "")
        fake(
            bin_dir / "apt-get",
            f'echo "apt-get $*" >> {log}; case "$*" in '
            f"*update*) : > {tmp_path}/updated;; *install*) {gate}{installs};; esac",
        )
    if sudo == "ok":
        fake(
            bin_dir / "sudo",
            f'echo "sudo $*" >> {log}; shift; [ "$1" = true ] && exit 0; exec "$@"',
        )
    elif sudo == "password":
        fake(bin_dir / "sudo", f'echo "sudo $*" >> {log}; exit 1')
    env = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        "CHROMIUM": str(chromium),
        "CHROMEDRIVER": str(driver),
    }
    proc = subprocess.run([BASH, str(SCRIPT)], env=env, capture_output=True, text=True)
    return proc.returncode, proc.stderr, log.read_text().splitlines()


def test_browser_and_driver_present_need_nothing(tmp_path: Path) -> None:
    assert run(tmp_path, present=True)[::2] == (0, [])


def test_missing_as_root_installs_both_without_an_update_the_lists_do_not_need(
    tmp_path: Path,
) -> None:
    rc, err, log = run(tmp_path)
    assert rc == 0, err
    assert log == ["apt-cache show chromium chromium-driver", INSTALL]
    assert "missing:" in err and "Chromium is ready: Chromium 150.0" in err


def test_empty_package_lists_are_updated_first(tmp_path: Path) -> None:
    rc, err, log = run(tmp_path, lists=False)
    assert rc == 0, err
    assert log[1:] == ["apt-get update -qq", INSTALL]


def test_an_install_from_stale_lists_is_retried_after_an_update(tmp_path: Path) -> None:
    rc, err, log = run(tmp_path, stale=True)
    assert rc == 0, err
    assert log[1:] == [INSTALL, "apt-get update -qq", INSTALL]


def test_a_sudoer_installs_through_sudo(tmp_path: Path) -> None:
    rc, err, log = run(tmp_path, uid=1000, sudo="ok")
    assert rc == 0, err
    assert log[0] == "sudo -n true"
    assert f"sudo -n env DEBIAN_FRONTEND=noninteractive {INSTALL}" in log


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ({"uid": 1000, "sudo": "password"}, "needs root"),
        ({"uid": 1000, "sudo": None}, "needs root"),
        ({"apt": False}, "no apt-get"),
    ],
)
def test_no_way_to_install_says_what_to_do(
    tmp_path: Path, case: dict[str, Any], message: str
) -> None:
    rc, err, log = run(tmp_path, **case)
    assert rc == 2
    assert message in err and "sudo apt-get install chromium chromium-driver" in err
    assert "CHROMIUM and\nCHROMEDRIVER" in err
    assert not any(line.startswith(("apt-get", "sudo -n env")) for line in log)


def test_an_install_that_fails_after_an_update_says_what_to_do(tmp_path: Path) -> None:
    rc, err, log = run(tmp_path, broken=True)
    assert rc == 2
    assert "apt-get could not install chromium chromium-driver" in err
    assert log[1:] == [INSTALL, "apt-get update -qq", INSTALL]
