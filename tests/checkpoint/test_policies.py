"""Recovery policies and the guarantees around them: exactly-once file sinks, the
user-error policy, a changed dataflow refused, bad configuration, and a resume after the
driver process itself died."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.files import JsonLinesSink, read_committed
from tests.checkpoint.pipelines import build
from timely import ConfigError, Dataflow, UserFunctionError
from timely.backends.ray_pool import release_workers
from timely.checkpoint.store import CheckpointError

ROOT = Path(__file__).resolve().parents[2]


def running_to_sink(epochs: list[list[int]], out: str) -> Dataflow:
    flow = Dataflow("sink-ckpt")
    handle = flow.new_input()
    handle.stream.running_reduce(lambda x: x % 4, lambda a, b: a + b).sink(JsonLinesSink(out))
    for e, records in enumerate(epochs):
        handle.advance_to(e)
        handle.send(records)
    return flow


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    epochs=st.lists(st.lists(st.integers(0, 30), max_size=5), min_size=1, max_size=7),
    workers=st.integers(1, 3),
    crashes=st.lists(st.integers(1, 300), max_size=3, unique=True),
    seed=st.integers(0, 100),
)
def test_file_sink_output_is_exactly_once_across_crashes(
    tmp_path_factory: pytest.TempPathFactory,
    epochs: list[list[int]],
    workers: int,
    crashes: list[int],
    seed: int,
) -> None:
    ref_dir = str(tmp_path_factory.mktemp("ref"))
    running_to_sink(epochs, ref_dir).run(workers=workers, backend="inline", seed=seed)
    out = str(tmp_path_factory.mktemp("out"))
    running_to_sink(epochs, out).run(
        workers=workers,
        backend="inline",
        seed=seed + 1,
        checkpoint=str(tmp_path_factory.mktemp("ckpt")),
        crash_at=tuple(crashes),
        max_restarts=len(crashes),
    )

    def committed(path: str) -> list[Any]:
        return sorted(read_committed(path), key=repr)

    assert committed(out) == committed(ref_dir)


class Flaky:
    """Fails on the record 13 the first ``failures`` times it sees it."""

    failures = 0

    def __call__(self, x: int) -> int:
        if x == 13 and Flaky.failures > 0:
            Flaky.failures -= 1
            raise RuntimeError("flaky")
        return x


def flaky_flow() -> tuple[Dataflow, dict[int, list[Any]]]:
    flow = Dataflow("flaky")
    out: dict[int, list[Any]] = {}
    handle = flow.new_input()
    handle.stream.select(Flaky()).count_by(lambda x: x % 2).subscribe(
        lambda e, r: out.setdefault(e, sorted(r))
    )
    for e in range(4):
        handle.advance_to(e)
        handle.send([e, 13, e + 20])
    return flow, out


def test_user_errors_fail_the_run_by_default(tmp_path: Path) -> None:
    Flaky.failures = 1
    flow, _ = flaky_flow()
    with pytest.raises(UserFunctionError, match="flaky"):
        flow.run(workers=2, backend="inline", checkpoint=str(tmp_path))


def test_user_errors_restore_and_retry_when_asked(tmp_path: Path) -> None:
    Flaky.failures = 0
    flow, expected = flaky_flow()
    flow.run(workers=2, backend="inline")
    Flaky.failures = 2
    flow, got = flaky_flow()
    flow.run(
        workers=2, backend="inline", checkpoint=str(tmp_path), on_error="restore", max_restarts=2
    )
    assert got == expected and Flaky.failures == 0


def test_restarts_are_bounded(tmp_path: Path) -> None:
    Flaky.failures = 5
    flow, _ = flaky_flow()
    with pytest.raises(Exception, match=r"giving up after 2 restarts \(max_restarts=2\)"):
        flow.run(
            workers=2,
            backend="inline",
            checkpoint=str(tmp_path),
            on_error="restore",
            max_restarts=2,
        )


def test_a_changed_dataflow_is_refused(tmp_path: Path) -> None:
    flow, _ = build("running", [[1, 2], [3]])
    flow.run(workers=2, backend="inline", checkpoint=str(tmp_path))
    flow, _ = build("counts", [[1, 2], [3]])
    with pytest.raises(CheckpointError, match="different graph"):
        flow.run(workers=2, backend="inline", checkpoint=str(tmp_path))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"checkpoint_every": 2}, "need checkpoint="),
        ({"checkpoint": "x", "checkpoint_every": 0}, "checkpoint_every must be"),
        ({"checkpoint": "x", "keep_checkpoints": 0}, "keep_checkpoints must be"),
        ({"checkpoint": "x", "on_error": "ignore"}, "on_error must be"),
        ({"checkpoint": "nosuchscheme://bucket/x"}, "checkpoint store"),
    ],
)
def test_bad_checkpoint_configuration(options: dict[str, Any], message: str) -> None:
    flow, _ = build("counts", [[1]])
    with pytest.raises((ConfigError, CheckpointError), match=message):
        flow.run(workers=1, backend="inline", **options)


DRIVER = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {root!r})
    from tests.checkpoint.pipelines import build

    epochs = [[(e * 5 + i) % 17 for i in range(4)] for e in range(10)]
    flow, out = build("sliding", epochs[: int(sys.argv[2])])
    session = flow.activate(workers=2, backend="ray", checkpoint=sys.argv[1])
    if sys.argv[3] == "die":
        flow._inputs[0].advance_to(int(sys.argv[2]))
        while not session.committed or session.committed[-1] < int(sys.argv[2]) - 1:
            session.poll(timeout=0.05)
        print(json.dumps(session.committed[-1]), flush=True)
        os._exit(3)  # the driver dies: no close, no cleanup
    flow._inputs[0].close()
    session.join()
    print(json.dumps({{"restored": session.restored_epoch, "out": sorted(out.items())}}))
    """
)


@pytest.mark.slow
def test_resume_after_the_driver_process_died(ray_local: Any, tmp_path: Path) -> None:
    """Each driver process joins the test session's Ray (``RAY_ADDRESS``) instead of
    starting a Ray of its own (the two drivers took 8.5 s that way, 3.3 s joined): Ray
    kills a dead driver's actors, so the second driver has only the checkpoint to resume
    from either way. This process's idle actors are released first: they would hold the
    CPUs the drivers' workers need (see ``timely.backends.ray_pool``)."""
    release_workers()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(root=str(ROOT)))
    ckpt = str(tmp_path / "ckpt")
    # os.environ as it is now: joining needs what ray.init set there (RAY_AUTH_MODE)
    env = {**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address}
    first = subprocess.run(
        [sys.executable, str(script), ckpt, "6", "die"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert first.returncode == 3, first.stderr[-2000:]
    assert json.loads(first.stdout.strip().splitlines()[-1]) == 5
    second = subprocess.run(
        [sys.executable, str(script), ckpt, "10", "finish"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert second.returncode == 0, second.stderr[-2000:]
    got = json.loads(second.stdout.strip().splitlines()[-1])
    assert got["restored"] == 5
    epochs = [[(e * 5 + i) % 17 for i in range(4)] for e in range(10)]
    flow, expected = build("sliding", epochs)
    flow.run(workers=2, backend="inline")
    assert {e: [list(r) for r in recs] for e, recs in got["out"]} == {
        e: [list(r) for r in recs] for e, recs in expected.items() if e > 5
    }
