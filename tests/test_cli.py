"""``python -m timely run``: flags, environment variables, module loading and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from connectors.files import read_committed
from timely.backends.ray_pool import release_workers
from timely.cli import main

ROOT = Path(__file__).resolve().parents[1]

WORDCOUNT = """
import os

from connectors.files import JsonLinesSink, TextSource
from timely import Dataflow


def words(line):
    return line.split()


def make():
    flow = Dataflow("cli-wordcount")
    lines = flow.source(TextSource(os.environ["CLI_IN"], records_per_epoch=4))
    counts = lines.select_many(words).count_by(lambda w: w)
    counts.sink(JsonLinesSink(os.environ["CLI_OUT"]))
    counts.collect("counts")
    return flow


flow = make()
"""

TEXT = ["the quick brown fox", "jumps over the lazy dog", "the end"] * 7


def reference(lines: list[str], per_epoch: int) -> Counter[tuple[int, str, int]]:
    """Word counts per epoch, where epoch = line index // per_epoch (one file, one range)."""
    out: Counter[tuple[int, str, int]] = Counter()
    for e in range(0, len(lines), per_epoch):
        for w, n in Counter(w for line in lines[e : e + per_epoch] for w in line.split()).items():
            out[(e // per_epoch, w, n)] += 1
    return out


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A module (unique name) with the word count, its input file and output folder."""
    name = f"cli_wc_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(WORDCOUNT)
    (tmp_path / "in.txt").write_text("\n".join(TEXT) + "\n")
    env = {"CLI_IN": str(tmp_path / "in.txt"), "CLI_OUT": str(tmp_path / "out")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for var in (
        "TIMELY_WORKERS",
        "TIMELY_BACKEND",
        "TIMELY_ADDRESS",
        "TIMELY_CHECKPOINT",
        "TIMELY_CHECKPOINT_EVERY",
    ):
        monkeypatch.delenv(var, raising=False)
    return {"dir": tmp_path, "name": name, "out": tmp_path / "out"}


def cli(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "timely", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=240,
    )


def parts(out: Path) -> set[str]:
    return {p.name for p in out.glob("epoch=*/part-*")}


def counts(out: Path) -> Counter[tuple[int, str, int]]:
    return Counter((e, w, n) for e, (w, n) in read_committed(out))


def test_run_a_module_by_name_in_a_subprocess(job: dict[str, Any]) -> None:
    proc = cli(["run", f"{job['name']}:flow", "--workers", "2", "--backend", "inline"], job["dir"])
    assert proc.returncode == 0, proc.stderr
    assert counts(job["out"]) == reference(TEXT, 4)
    assert parts(job["out"]) <= {"part-0-of-2.jsonl", "part-1-of-2.jsonl"}
    n = sum(reference(TEXT, 4).values())
    assert f"finished on 2 workers (inline); collected 'counts': {n} records" in proc.stderr


def test_environment_variables_and_a_file_path_to_a_function(job: dict[str, Any]) -> None:
    env = {"TIMELY_WORKERS": "3", "TIMELY_BACKEND": "inline"}
    elsewhere = job["dir"] / "elsewhere"
    elsewhere.mkdir()
    proc = cli(["run", f"../{job['name']}.py:make"], elsewhere, env)
    assert proc.returncode == 0, proc.stderr
    assert counts(job["out"]) == reference(TEXT, 4)
    assert parts(job["out"]) and all(p.endswith("-of-3.jsonl") for p in parts(job["out"]))


def test_help_names_every_flag_and_its_variable(tmp_path: Path) -> None:
    proc = cli(["run", "--help"], tmp_path)
    assert proc.returncode == 0
    for flag, var in [
        ("--workers", "TIMELY_WORKERS"),
        ("--backend", "TIMELY_BACKEND"),
        ("--address", "TIMELY_ADDRESS"),
        ("--checkpoint", "TIMELY_CHECKPOINT"),
        ("--checkpoint-every", "TIMELY_CHECKPOINT_EVERY"),
        ("--trace", "TIMELY_TRACE"),
        ("--metrics-port", "TIMELY_METRICS_PORT"),
        ("--verbose", "TIMELY_VERBOSE"),
    ]:
        assert flag in proc.stdout and var in proc.stdout


def test_a_flag_beats_its_environment_variable(
    job: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(job["dir"]))
    monkeypatch.setenv("TIMELY_WORKERS", "3")
    monkeypatch.setenv("TIMELY_BACKEND", "inline")
    assert main(["run", f"{job['name']}:make", "--workers", "1"]) == 0
    assert parts(job["out"]) == {"part-0-of-1.jsonl"}
    assert counts(job["out"]) == reference(TEXT, 4)


CHECKPOINT_PROBE = """
import json, os
from timely import Dataflow


class Recording(Dataflow):
    def run(self, **options):
        with open(os.environ["CLI_OPTIONS"], "w") as f:
            json.dump(options, f)
        return {}


flow = Recording("probe")
"""


FORWARDED = [
    # (option run() gets, its variable, flags, environment, value wanted; None: left out)
    ("checkpoint", "TIMELY_CHECKPOINT", ["--checkpoint", "/ckpt/a"], {}, "/ckpt/a"),
    ("checkpoint", "TIMELY_CHECKPOINT", [], {"TIMELY_CHECKPOINT": "s3://b/ck"}, "s3://b/ck"),
    (
        "checkpoint",
        "TIMELY_CHECKPOINT",
        ["--checkpoint", "flag"],
        {"TIMELY_CHECKPOINT": "env"},
        "flag",
    ),
    ("checkpoint", "TIMELY_CHECKPOINT", [], {}, None),
    ("metrics_port", "TIMELY_METRICS_PORT", ["--metrics-port", "9464"], {}, 9464),
    ("metrics_port", "TIMELY_METRICS_PORT", [], {"TIMELY_METRICS_PORT": "0"}, 0),
    ("metrics_port", "TIMELY_METRICS_PORT", [], {}, None),
    (
        "checkpoint_every",
        "TIMELY_CHECKPOINT_EVERY",
        ["--checkpoint", "c", "--checkpoint-every", "auto"],
        {},
        "auto",
    ),
    (
        "checkpoint_every",
        "TIMELY_CHECKPOINT_EVERY",
        ["--checkpoint", "c"],
        {"TIMELY_CHECKPOINT_EVERY": "4"},
        4,
    ),
    ("checkpoint_every", "TIMELY_CHECKPOINT_EVERY", ["--checkpoint", "c"], {}, None),
]


@pytest.mark.parametrize(("option", "variable", "argv", "env", "want"), FORWARDED)
def test_an_option_is_forwarded_to_run_only_when_given(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    option: str,
    variable: str,
    argv: list[str],
    env: dict[str, str],
    want: object,
) -> None:
    name = f"cli_probe_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(CHECKPOINT_PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CLI_OPTIONS", str(tmp_path / "options.json"))
    monkeypatch.delenv(variable, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["run", name, "--backend", "inline", "--workers", "4", *argv]) == 0
    options = json.loads((tmp_path / "options.json").read_text())
    assert options.get(option) == want and (option in options) == (want is not None)
    assert options["workers"] == 4 and options["backend"] == "inline"


BROKEN = {
    "not_a_flow": "flow = 42\ndef make(): return 'x'\ndef needs(n): pass\n",
    "raises": "raise RuntimeError('boom at import')\n",
    "missing_dep": "import no_such_dependency_xyz\n",
}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:flow", "cannot import module 'no_such_module_xyz'"),
        ("{dir}/nope.py:flow", "no such file"),
        ("{m}not_a_flow:other", "has no attribute 'other'; it defines make, needs"),
        ("{m}not_a_flow", "is a int, not a timely.Dataflow"),
        ("{m}not_a_flow:make", "make() returned a str, not a timely.Dataflow"),
        ("{m}not_a_flow:needs", "takes arguments (n)"),
        ("{m}raises:flow", "RuntimeError: boom at import"),
        ("{m}missing_dep:flow", "No module named 'no_such_dependency_xyz'"),
    ],
)
def test_a_bad_module_path_names_what_is_wrong(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spec: str,
    message: str,
) -> None:
    prefix = f"cli_bad_{uuid.uuid4().hex[:8]}_"
    for name, body in BROKEN.items():
        (tmp_path / f"{prefix}{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["run", spec.format(dir=tmp_path, m=prefix), "--backend", "inline"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--workers", "0"], {}, "expected a positive integer"),
        ([], {"TIMELY_WORKERS": "many"}, "TIMELY_WORKERS='many'"),
        (["--metrics-port", "http"], {}, "expected a TCP port"),
        ([], {"TIMELY_METRICS_PORT": "70000"}, "TIMELY_METRICS_PORT='70000'"),
        ([], {"TIMELY_BACKEND": "spark"}, "TIMELY_BACKEND='spark': unknown backend"),
        (["--checkpoint-every", "often"], {}, "a positive number of epochs or 'auto'"),
        (
            ["--backend", "inline", "--checkpoint-every", "auto"],
            {},
            "--checkpoint-every/TIMELY_CHECKPOINT_EVERY needs --checkpoint DIR",
        ),
        (
            ["--backend", "inline", "--address", "auto"],
            {},
            "--address/TIMELY_ADDRESS is for the ray",
        ),
    ],
)
def test_bad_flags_and_variables_fail_before_running(
    job: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    monkeypatch.syspath_prepend(str(job["dir"]))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        code = main(["run", job["name"], *argv])
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not job["out"].exists()


def test_a_failing_dataflow_exits_1_with_the_step_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"cli_fail_{uuid.uuid4().hex[:8]}"
    body = """
from connectors.collections import from_collection
from timely import Dataflow

flow = Dataflow("failing")
flow.source(from_collection([1, 0, 2])).select(lambda x: 10 // x, name="divide").collect("out")
"""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", name, "--backend", "inline", "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "the dataflow failed" in err and "'divide'" in err and "ZeroDivisionError" in err


def test_run_on_ray_ships_a_module_from_a_file_path(ray_local: Any, job: dict[str, Any]) -> None:
    """Joins the test session's Ray with --address; the workers cannot import the module by
    name (it is not on their path), so the CLI must ship it by value.

    The idle actors this test process keeps from its earlier Ray runs hold the session
    Ray's CPUs for up to their ``idle_timeout`` (30 s), and the CLI, another driver, cannot
    take them: its actors would wait for them to time out (9-30 s in CI, 2 s without)."""
    release_workers()
    address = ray_local.get_runtime_context().gcs_address
    elsewhere = job["dir"] / "elsewhere"
    elsewhere.mkdir()
    proc = cli(
        ["run", f"{job['dir']}/{job['name']}.py:make", "--workers", "2"],
        elsewhere,
        {"TIMELY_ADDRESS": address, "TIMELY_BACKEND": "ray"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts(job["out"]) == reference(TEXT, 4)
    assert "finished on 2 workers (ray)" in proc.stderr
