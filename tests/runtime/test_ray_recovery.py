"""Recovery on Ray without starting processes: the workers that outlive a failure are
reset and host the restored run, and a warm standby takes the place of the one that
died; counted (processes kept, actors started), never timed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import ray

import operators  # noqa: F401 - registers the stream methods
from timely import ConfigError, Dataflow
from timely.backends.ray import RaySession
from timely.backends.ray_pool import release_workers

pytestmark = pytest.mark.usefixtures("ray_local")


def counting(checkpoint: Path | None, **options: Any) -> tuple[RaySession, Any, dict[int, Any]]:
    flow = Dataflow("recover")
    nums = flow.new_input("nums")
    out: dict[int, Any] = {}

    def record(epoch: int, records: list[Any]) -> None:
        assert epoch not in out, f"epoch {epoch} delivered twice"
        out[epoch] = sorted(records)

    nums.stream.running_reduce(lambda x: x % 5, lambda a, b: a + b).subscribe(record)
    session = flow.activate(
        workers=2,
        backend="ray",
        **({} if checkpoint is None else {"checkpoint": str(checkpoint)}),
        **options,
    )
    assert isinstance(session, RaySession)
    return session, nums, out


def feed(session: RaySession, nums: Any, epochs: range, out: dict[int, Any]) -> None:
    for e in epochs:
        nums.advance_to(e)
        nums.send([e, e + 1, e + 2])
    nums.advance_to(epochs.stop)
    while len(out) < epochs.stop:
        session.poll(0.05)


def kill(session: RaySession, worker: int) -> None:
    """Kill ``worker`` once a checkpoint is committed, and wait until the session has
    recovered (a kill is asynchronous: outputs may come first). The dead worker's socket
    directory is gone with it (a killed process cannot remove its own)."""
    while not session.committed:
        session.poll(0.05)
    restarts = session.restarts
    folder = os.path.dirname(session.addresses[worker].path)
    assert os.path.isdir(folder)
    ray.kill(session.actors[worker], no_restart=True)
    while session.restarts == restarts:
        session.poll(0.05)
    assert not os.path.exists(folder)


def expected(epochs: int) -> dict[int, Any]:
    sums: dict[int, int] = {}
    out = {}
    for e in range(epochs):
        touched = set()
        for x in (e, e + 1, e + 2):
            sums[x % 5] = sums.get(x % 5, 0) + x
            touched.add(x % 5)
        out[e] = sorted((k, sums[k]) for k in touched)
    return out


def test_a_death_is_replaced_by_the_standby_and_the_survivor_goes_on(tmp_path: Path) -> None:
    release_workers()
    session, nums, out = counting(tmp_path)
    try:
        feed(session, nums, range(0, 5), out)
        assert len(session.standby_actors) == 1  # with checkpoints: one by default
        before = list(session.pids)
        kill(session, 1)
        feed(session, nums, range(5, 10), out)
        assert session.restarts == 1 and session.lost == 1
        assert session.cold_starts == 0  # the standby took worker 1's place
        assert before[0] in session.pids  # the survivor's process hosts a worker again
        assert before[1] not in session.pids
        while len(session.standby_actors) < 1:  # made up again in the background
            session.poll(0.05)
        nums.close()
        session.join()
    finally:
        session.close()
    assert out == expected(10)


def test_without_standbys_a_death_starts_one_process(tmp_path: Path) -> None:
    session, nums, out = counting(tmp_path, standbys=0)
    try:
        feed(session, nums, range(0, 4), out)
        assert session.standby_actors == []
        before = list(session.pids)
        kill(session, 0)
        feed(session, nums, range(4, 8), out)
        assert session.cold_starts == 1 and session.lost == 1
        assert before[1] in session.pids and before[0] not in session.pids
        nums.close()
        session.join()
    finally:
        session.close()
    assert out == expected(8)


def test_a_user_error_restores_on_the_same_processes(tmp_path: Path) -> None:
    """Nothing died: every actor is reset and hosts the restored run."""
    flow = Dataflow("flaky")
    nums = flow.new_input("nums")
    marker = tmp_path / "failed-once"

    def once(x: int) -> int:
        if x == 7 and not marker.exists():
            marker.write_text("x")
            raise ValueError("once")
        return x

    out: dict[int, Any] = {}
    nums.stream.select(once).count_by(lambda x: x % 2).subscribe(
        lambda e, rs: out.__setitem__(e, sorted(rs))
    )
    session = flow.activate(
        workers=2, backend="ray", checkpoint=str(tmp_path / "c"), on_error="restore"
    )
    assert isinstance(session, RaySession)
    try:
        nums.send(range(5))
        nums.advance_to(1)
        while 0 not in out:
            session.poll(0.05)
        before = sorted(session.pids)
        nums.send(range(5, 10))
        nums.close()
        session.join()
        assert session.restarts == 1 and session.lost == 0 and session.cold_starts == 0
        assert sorted(session.pids) == before
    finally:
        session.close()
    assert out == {0: [(0, 3), (1, 2)], 1: [(0, 2), (1, 3)]}


def test_bad_standbys_fail_before_anything_starts() -> None:
    flow = Dataflow("bad")
    flow.new_input("x").stream.collect("out")
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="standbys must be an integer >= 0"):
            flow.run(workers=2, backend="ray", standbys=bad)


def test_a_recovery_logs_one_line_and_prints_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """Who died, what was restored and how long it took: one INFO line per recovery (the
    details in the event log's ``driver.trace``); no traceback reaches the terminal."""
    import gc
    import logging

    from timely.eventlog import read_driver_log

    trace = tmp_path / "trace"
    session, nums, out = counting(tmp_path / "c", trace=str(trace))
    with caplog.at_level(logging.INFO, logger="timely"):
        try:
            feed(session, nums, range(0, 4), out)
            kill(session, 0)
            feed(session, nums, range(4, 6), out)
            kill(session, 1)
            feed(session, nums, range(6, 8), out)
            nums.close()
            session.join()
        finally:
            session.close()
    gc.collect()
    lines = [r for r in caplog.records if r.name == "timely" and "recovered" in r.getMessage()]
    assert len(lines) == session.restarts == 2
    assert all(r.levelno == logging.INFO for r in lines)
    assert "restored the checkpoint at epoch" in lines[0].getMessage()
    assert "worker" in lines[0].getMessage()  # who died
    logged = [e for e in read_driver_log(str(trace)) if e[0] == "recovery"]
    assert [e[3]["restart"] for e in logged] == [1, 2]
    assert all(e[3]["lost"] == 1 and e[3]["restored"] is not None for e in logged)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "WorkerDied" not in err, err[-3000:]
    # Nor a write to a dead peer's socket, nor a failed start nobody read.
    assert "socket.send() raised" not in err and "Unhandled error" not in err, err[-3000:]
    assert out == expected(8)
