"""Checkpoint and restore on the inline backend: crashes at random scheduling events, under
random delivery orders, must give exactly the outputs of a run without failures."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.checkpoint.layout import committed, damage
from tests.checkpoint.pipelines import PIPELINES, build
from timely import Dataflow
from timely.checkpoint.store import CheckpointStore

epochs_st = st.lists(st.lists(st.integers(0, 40), max_size=6), min_size=1, max_size=8)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pipeline=st.sampled_from(sorted(PIPELINES)),
    epochs=epochs_st,
    workers=st.integers(1, 3),
    crashes=st.lists(st.integers(1, 400), max_size=3, unique=True),
    every=st.sampled_from([1, 2, 3, None, "auto"]),
    seed=st.integers(0, 1000),
    use_source=st.booleans(),
)
def test_crashes_change_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    pipeline: str,
    epochs: list[list[int]],
    workers: int,
    crashes: list[int],
    every: int | str | None,
    seed: int,
    use_source: bool,
) -> None:
    flow, expected = build(pipeline, epochs, use_source)
    flow.run(workers=workers, backend="inline", seed=seed)
    flow, got = build(pipeline, epochs, use_source)
    session = flow.activate(
        workers=workers,
        backend="inline",
        seed=seed + 1,
        checkpoint=str(tmp_path_factory.mktemp("ckpt")),
        **({"checkpoint_every": every} if every else {"checkpoint_interval": 1e-6}),
        crash_at=tuple(crashes),
        max_restarts=len(crashes),
    )
    for h in flow._inputs:
        h.close()
    session.join()
    assert got == expected
    assert session.restarts <= len(crashes)


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 2), (2, 2)])
@pytest.mark.parametrize("pipeline", ["running", "sliding", "sessions"])
def test_resume_with_other_worker_counts(
    tmp_path: Path, pipeline: str, before: int, after: int
) -> None:
    """A run stopped after epoch 5 resumes, with ``after`` workers, where it left off."""
    epochs = [[(e * 7 + i * 3) % 40 for i in range(e % 4 + 2)] for e in range(10)]
    flow, expected = build(pipeline, epochs)
    flow.run(workers=2, backend="inline")

    flow, first = build(pipeline, epochs[:6])
    handle = flow._inputs[0]
    handle.advance_to(6)  # epochs 0..5 complete; the input stays open, as in a driver that died
    session = flow.activate(workers=before, backend="inline", checkpoint=str(tmp_path))
    assert session.committed and session.committed[-1] == 5
    session.close()

    flow, second = build(pipeline, epochs)
    session = flow.activate(workers=after, backend="inline", checkpoint=str(tmp_path))
    assert session.restored_epoch == 5
    for h in flow._inputs:
        h.close()
    session.join()
    assert {**first, **second} == expected
    assert set(second) == {e for e in expected if e > 5}


def test_damaged_checkpoint_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    epochs = [[e, e + 1] for e in range(8)]
    flow, expected = build("running", epochs)
    flow.run(workers=2, backend="inline")
    flow, _ = build("running", epochs[:6])
    flow._inputs[0].advance_to(6)
    flow.activate(workers=2, backend="inline", checkpoint=str(tmp_path)).close()
    newest = committed(tmp_path)[-1]
    damage(tmp_path, newest, worker=1)
    partial = tmp_path / "ckpt-000000000099"  # written by a worker, never committed
    partial.mkdir()
    (partial / "part-0-of-2.bin").write_bytes(b"half")

    flow, got = build("running", epochs)
    session = flow.activate(workers=2, backend="inline", checkpoint=str(tmp_path))
    assert session.restored_epoch == newest - 1
    for h in flow._inputs:
        h.close()
    session.join()
    assert got == {e: r for e, r in expected.items() if e > session.restored_epoch}


_FULL_DISK = """
import operator, resource, signal, sys
sys.path.insert(0, {root!r})
import operators
from timely import Dataflow
from timely.checkpoint.store import CheckpointError

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
flow = Dataflow("grows")
handle = flow.new_input("x")
handle.stream.running_reduce(lambda x: x, operator.add, value=lambda x: 1).collect("c")
for e, batch in enumerate({epochs!r}[:6]):
    handle.advance_to(e)
    handle.send(batch)
handle.advance_to(6)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:  # the parts grow with the state: a few epochs in, one is larger than the limit
    flow.activate(workers=1, backend="inline", checkpoint={ckpt!r},
                  checkpoint_incremental={incremental!r}).close()
except CheckpointError as e:
    print("ERROR", e)
else:
    print("NO ERROR")
"""


def grows(epochs: list[list[int]]) -> tuple[Any, Any]:
    import operator

    flow = Dataflow("grows")
    handle = flow.new_input("x")
    handle.stream.running_reduce(lambda x: x, operator.add, value=lambda x: 1).collect("c")
    for e, batch in enumerate(epochs):
        handle.advance_to(e)
        handle.send(batch)
    handle.close()
    return flow, handle


@pytest.mark.parametrize("incremental", [False, True])
def test_a_full_disk_fails_clearly_and_a_resume_uses_the_last_good_checkpoint(
    tmp_path: Path, incremental: bool
) -> None:
    """A real limit on file size (RLIMIT_FSIZE, in a process of its own) makes writing a
    part fail, as a full disk does: the run stops with an error naming the file, nothing
    half-written is left to restore from, and a resume restores the last checkpoint that
    was committed and gives the failure-free outputs."""
    import subprocess
    import sys

    # Each epoch adds keys, so the parts grow past the limit after a few epochs.
    epochs = [[e * 10000 + i for i in range(200 * (e + 1))] for e in range(10)]
    flow, _ = grows(epochs)
    expected = sorted(flow.run(workers=1, backend="inline")["c"])
    root = Path(__file__).resolve().parents[2]
    code = _FULL_DISK.format(
        root=str(root), epochs=epochs, ckpt=str(tmp_path), incremental=incremental, limit=2000
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert "ERROR cannot write checkpoint file" in done.stdout, done.stdout + done.stderr
    assert re.search(r"(part-0-of-1|links-0-of-1-\w+)\.bin", done.stdout)
    assert [p.name for p in tmp_path.rglob("*") if ".tmp-" in p.name] == []
    flow, _ = grows(epochs)
    session = flow.activate(workers=1, backend="inline", checkpoint=str(tmp_path))
    restored = session.restored_epoch
    got = session.join()["c"]
    assert 0 <= restored < 5  # a checkpoint from before the limit was hit
    assert sorted(got) == [r for r in expected if r[0] > restored]


def running_sums(
    root: Path,
    batches: list[list[int]],
    keys: int = 3,
    add: Callable[[int, int], int] = operator.add,
    **options: Any,
) -> tuple[Any, dict[str, Any]]:
    """A running sum per key (``x % keys``) of ``batches``, one an epoch, inline on one
    worker with incremental checkpoints in ``root`` (and ``options``): the session,
    joined, and its outputs."""
    flow = Dataflow("started-over")
    handle = flow.new_input("x")
    handle.stream.running_reduce(lambda x: x % keys, add).collect("c")
    session = flow.activate(
        workers=1, backend="inline", checkpoint=str(root), checkpoint_incremental=True, **options
    )
    for e, batch in enumerate(batches):
        handle.send(batch)
        handle.advance_to(e + 1)
    handle.close()
    return session, session.join()


def started_over(root: Path, fail_at: int | None) -> tuple[list[Any], int]:
    """A run over ``root`` (an earlier run, with other inputs, left checkpoints up to
    epoch 9 there) started over with ``resume=False``, failing once at ``fail_at``: its
    outputs, and the epoch its recovery restored."""
    fired: list[bool] = []

    def add(a: int, b: int) -> int:
        if fail_at is not None and not fired and b == 1000 * fail_at:
            fired.append(True)
            raise RuntimeError("a failure once")
        return a + b

    batches = [[1000 * e + i for i in range(3)] for e in range(6)]
    session, out = running_sums(root, batches, add=add, resume=False, on_error="restore")
    return sorted(out["c"]), session.restored_epoch


def test_a_run_started_over_recovers_from_its_own_checkpoints(tmp_path: Path) -> None:
    """An earlier run of the same dataflow left newer checkpoints (up to 9); a run that
    started over fails at epoch 4 and recovers from its own last commit, not from those
    (they hold none of its inputs): its outputs are a run's without the failure."""
    for root in (tmp_path / "clean", tmp_path / "failed"):
        running_sums(root, [[7 * e + i for i in range(3)] for e in range(10)])
    expected, _ = started_over(tmp_path / "clean", None)
    got, restored = started_over(tmp_path / "failed", 4)
    assert 0 <= restored < 4
    assert got == expected


def test_a_recovery_from_another_runs_newer_checkpoint_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a recovery takes the newest checkpoint in the store, whoever wrote it
    (as before: the run restored the earlier run's epoch and lost its own inputs)."""
    newest = CheckpointStore.newest

    def unbounded(self: CheckpointStore, fingerprint: str, name: str, upto: Any = None) -> Any:
        return newest(self, fingerprint, name)

    monkeypatch.setattr(CheckpointStore, "newest", unbounded)
    with pytest.raises(AssertionError):
        test_a_run_started_over_recovers_from_its_own_checkpoints(tmp_path)
