"""Quiet by default, ``--verbose`` to see the libraries' own lines
(:mod:`timely.session.verbosity`).

The real runs are subprocesses: what reaches a terminal is the point, and Ray prints its
banner only once per process. One quiet and one verbose ``python -m timely run`` on local
Ray (a few seconds each), one quiet local SparkSession; the rest is checked in-process.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from timely import ConfigError, Dataflow
from timely.cli import main
from timely.session.verbosity import VERBOSE_ENV, parse_verbose, resolve_verbose, verbose_from_env

ROOT = Path(__file__).resolve().parents[1]

RAY_NOISE = [
    "Started a local Ray instance",  # Ray's banner (INFO)
    "Token authentication is enabled",  # Ray's notice on every local start
    "(WorkerActor pid=",  # a worker's output forwarded to the driver
    "user print in a vertex",  # ... such as this job's own print()
]
SPARK_NOISE = [
    "Using Spark's default log4j profile",
    "Setting default log level",
    "To adjust logging level",
    " WARN ",  # log4j's WARN lines: Utils (hostname), NativeCodeLoader, ...
]

JOB = """
from connectors.collections import from_collection
from timely import Dataflow


def divide(x):
    print("user print in a vertex", x, flush=True)
    return 10 // x


flow = Dataflow("quiet-job")
flow.source(from_collection([1, 0, 2])).select(divide, name="divide").collect("out")
"""
FAILING_LINE = 8
"""The line of ``10 // x`` in JOB (which starts with a newline)."""


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would change what Ray prints or where it runs."""
    drop = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_LOG_TO_DRIVER", VERBOSE_ENV)
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TIMELY_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def timely_run(job: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "timely", "run", str(job), "--workers", "1", *flags],
        cwd=job.parent,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )


# The verbose case runs in CI's profile (7 s, a Ray run of its own; the quick profile
# keeps the quiet one, which also checks that errors always show).
@pytest.mark.parametrize(
    "verbose", [False, pytest.param(True, marks=pytest.mark.ci)], ids=["quiet", "verbose"]
)
def test_a_ray_run_is_quiet_unless_verbose_and_errors_always_show(
    tmp_path: Path, verbose: bool
) -> None:
    """A user function fails on Ray: the error names its file:line either way; Ray's
    banner, token notice and forwarded worker output show only with --verbose."""
    job = tmp_path / "quiet_job.py"
    job.write_text(textwrap.dedent(JOB))
    proc = timely_run(job, *(["--verbose"] if verbose else []))
    err = proc.stderr
    assert proc.returncode == 1, err[-3000:]
    assert f"step 'divide' failed at {job}:{FAILING_LINE} on worker 0" in err, err[-3000:]
    assert "ZeroDivisionError" in err
    if verbose:
        # Worker output is forwarded asynchronously and may miss a fast exit: not asserted.
        for line in RAY_NOISE[:2]:
            assert line in err, f"--verbose lost {line!r}:\n{err[-3000:]}"
    else:
        noise = [n for n in RAY_NOISE if n in err + proc.stdout]
        assert not noise, f"noise {noise} in a quiet run:\n{err[-3000:]}"
        # Nothing but the error (and, once a line, nothing from Ray at all).
        assert [line for line in err.splitlines() if line.strip()] == [
            line for line in err.splitlines() if line.startswith("timely: the dataflow failed")
        ], err[-3000:]


@pytest.mark.ci  # a Spark session of its own (13 s): in CI's profile
def test_a_quiet_spark_session_shows_errors_but_no_warnings(tmp_path: Path) -> None:
    """The project's SparkSession (``spark_session``) at its first start in a process: no
    start-up WARN lines or notes on the log profile, and a failing job's ERROR still shows."""
    script = tmp_path / "spark_quiet.py"
    script.write_text(
        textwrap.dedent(
            """
            from pyspark.sql import SparkSession

            from connectors.spark import spark_session

            builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
            spark = spark_session(builder)
            assert spark.range(10).count() == 10
            try:
                spark.sql("select raise_error('boom from the test')").collect()
            except Exception as e:
                print("raised", type(e).__name__)
            spark.stop()
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "raised" in proc.stdout
    noise = [n for n in SPARK_NOISE if n in proc.stderr]
    assert not noise, f"noise {noise}:\n{proc.stderr[-3000:]}"
    assert "ERROR Executor" in proc.stderr and "boom from the test" in proc.stderr


def test_spark_log_options_point_the_driver_at_the_quiet_config() -> None:
    from connectors.spark import QUIET_LOG4J, spark_log_options

    options = spark_log_options(verbose=False)
    assert options == {
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}"
    }
    assert " " not in options["spark.driver.extraJavaOptions"]  # Spark splits on spaces
    assert "rootLogger.level = error" in QUIET_LOG4J.read_text()
    assert spark_log_options(verbose=True) == {}


def test_ray_init_options_quiet_and_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    from timely.backends.ray import _init_logging

    monkeypatch.delenv("RAY_LOG_TO_DRIVER", raising=False)
    assert _init_logging(False) == {"logging_level": logging.WARNING, "log_to_driver": False}
    assert _init_logging(True) == {"logging_level": logging.INFO, "log_to_driver": True}
    monkeypatch.setenv("RAY_LOG_TO_DRIVER", "1")  # the user's own choice is left to Ray
    assert _init_logging(False) == {"logging_level": logging.WARNING}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def token_logger() -> Iterator[tuple[logging.Logger, _Records]]:
    """Ray's token-setup logger with a handler of our own (filters act before handlers)."""
    from timely.backends.ray import _TOKEN_LOGGER

    logger = logging.getLogger(_TOKEN_LOGGER)
    records = _Records()
    logger.addHandler(records)
    try:
        yield logger, records
    finally:
        logger.removeHandler(records)


def test_only_the_token_notice_is_dropped_and_only_while_quiet(
    token_logger: tuple[logging.Logger, _Records],
) -> None:
    from timely.backends.ray import _quiet_token_notice

    logger, records = token_logger
    notice = "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=..."
    with _quiet_token_notice(True):
        logger.warning(notice)
        logger.warning("Token authentication is disabled for this Ray cluster. Anyone ...")
    with _quiet_token_notice(False):
        logger.warning(notice)
    logger.warning(notice)  # the filter is gone after the quiet ray.init
    assert records.messages == [
        "Token authentication is disabled for this Ray cluster. Anyone ...",
        notice,
        notice,
    ]


def test_the_logger_filtered_is_the_one_ray_logs_the_notice_on() -> None:
    """If Ray moves the notice, this says so (the notice would show again, harmlessly)."""
    module = pytest.importorskip("ray._private.authentication.authentication_token_setup")
    from timely.backends.ray import _TOKEN_LOGGER, _TOKEN_NOTICE

    assert module.logger.name == _TOKEN_LOGGER
    assert _TOKEN_NOTICE in Path(module.__file__).read_text()


@pytest.mark.parametrize(
    ("text", "want"),
    [("1", True), ("TRUE", True), (" on ", True), ("0", False), ("", False), ("off", False)],
)
def test_timely_verbose_values(text: str, want: bool) -> None:
    assert parse_verbose(text) is want
    assert verbose_from_env({VERBOSE_ENV: text}) is want


def test_bad_verbose_values_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"TIMELY_VERBOSE='loud': expected 1/true"):
        verbose_from_env({VERBOSE_ENV: "loud"})
    assert verbose_from_env({}) is False
    monkeypatch.setenv(VERBOSE_ENV, "yes")
    assert resolve_verbose(None) is True and resolve_verbose(False) is False
    flow = Dataflow("verbose-option")
    flow.new_input().stream.collect("out")
    with pytest.raises(ConfigError, match="verbose must be True or False, got 'yes'"):
        flow.run(workers=1, backend="inline", verbose="yes")


def test_every_backend_takes_verbose() -> None:
    """The inline backend has nothing to quiet, but takes the option: a run can switch
    backends without changing its options."""
    flow = Dataflow("verbose-inline")
    h = flow.new_input()
    h.stream.select(lambda x: x * 2).collect("out")
    h.send([1, 2])
    assert sorted(flow.run(workers=2, backend="inline", verbose=True).records("out")) == [2, 4]


def test_cli_verbose_flag_and_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from timely.cli import parser

    assert parser({}).parse_args(["run", "m"]).verbose is False
    assert parser({}).parse_args(["run", "m", "--verbose"]).verbose is True
    assert parser({VERBOSE_ENV: "1"}).parse_args(["run", "m"]).verbose is True
    monkeypatch.setenv(VERBOSE_ENV, "loud")
    assert main(["run", "whatever", "--backend", "inline"]) == 2
    assert "TIMELY_VERBOSE='loud'" in capsys.readouterr().err
