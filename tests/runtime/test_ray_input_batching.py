"""What the driver sent before a Ray run started travels together: one frame per worker
(the closes of ``run`` included) instead of one frame, and one credit, per command; a
frame of held commands goes out once its records weigh ``BATCH_BYTES``. Frames are
counted on the driver's connections, not timed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import operators  # noqa: F401 - registers the stream methods
from operators.table import table_input
from timely import Dataflow
from timely.backends import ray as ray_backend
from timely.comm.driver import DriverLinks
from timely.comm.messages import Advance, Send

pytestmark = pytest.mark.usefixtures("ray_local")

SEEDS = pa.schema([("part", pa.int64())])


@pytest.fixture
def frames(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[int]]:
    """Frames the driver sends, per worker."""
    sent: Counter[int] = Counter()
    send = DriverLinks.send

    def counting(self: DriverLinks, w: int, payload: bytes, waiting: Callable[[], None]) -> None:
        sent[w] += 1
        send(self, w, payload, waiting)

    monkeypatch.setattr(DriverLinks, "send", counting)
    yield sent


def summed(epochs: int, sends: int) -> tuple[Dataflow, Any]:
    """Row input: ``sends`` sends of 4 numbers per epoch, summed per epoch."""
    flow = Dataflow("batched-inputs")
    nums = flow.new_input("nums")
    nums.stream.select(lambda x: x).collect("nums")
    for e in range(epochs):
        for _ in range(sends):
            nums.send([1, 2, 3, 4])
        nums.advance_to(e + 1)
    return flow, nums


def test_commands_sent_before_the_run_go_in_one_frame_per_worker(frames: Counter[int]) -> None:
    flow, _ = summed(epochs=20, sends=8)  # 160 sends and 20 advances, then the close
    out = flow.run(workers=2, backend="ray", max_inflight=2)
    per_epoch = Counter(e for e, _ in out["nums"])
    assert per_epoch == {e: 8 * 4 for e in range(20)}
    assert sorted(frames) == [0, 1] and max(frames.values()) == 1, frames


def test_commands_sent_while_running_still_go_one_by_one(frames: Counter[int]) -> None:
    flow = Dataflow("live-inputs")
    nums = flow.new_input("nums")
    nums.stream.select(lambda x: x).collect("nums")
    with flow.activate(workers=2, backend="ray") as session:
        for e in range(5):
            nums.send([e])
            nums.advance_to(e + 1)
        sent = sum(frames.values())
        nums.close()
        out = session.join()
    assert sorted(r for _, r in out["nums"]) == list(range(5))
    assert sent >= 10  # a send and an advance each: nothing held back for later


def test_held_commands_go_once_they_weigh_the_cap(
    frames: Counter[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tables of 8 rows (64 bytes) against a cap of 100 bytes: a frame every 2 sends."""
    monkeypatch.setattr(ray_backend, "BATCH_BYTES", 100)
    flow = Dataflow("capped")
    seeds = table_input(flow, SEEDS, name="seeds")
    seeds.table.collect("seeds")
    for i in range(12):
        seeds.send(pa.table({"part": list(range(8 * i, 8 * i + 8))}, SEEDS))
    out = flow.run(workers=2, backend="ray")
    got = sorted(p for _, t in out["seeds"] for p in t.column("part").to_pylist())
    assert got == list(range(96))
    assert sum(frames.values()) >= 6, frames  # 12 sends of 64 bytes: capped at 2 a frame
    assert sum(frames.values()) <= 8, frames  # and still held: not one frame a send


def test_held_commands_run_no_check_of_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command held in a batch reaches no worker before the batch's frames go, so the
    driver does not check the workers (heartbeats, loops) for it: a run's first
    commands go out while the workers wait for them. Sending the frames still watches
    the workers, and a command sent alone still checks them. Caught: a check for every
    command, held or not (the first command of a run always made one)."""
    checks: list[bool] = []
    check = ray_backend.RaySession._check

    def counted(self: Any, closed: bool = False) -> None:
        checks.append(bool(self._batching))
        check(self, closed)

    monkeypatch.setattr(ray_backend.RaySession, "_check", counted)
    flow, nums = summed(epochs=20, sends=8)
    with flow.activate(workers=2, backend="ray") as session:
        assert checks.count(True) == 0, checks  # the 180 held commands: no check
        checks.clear()
        session._last_check = 0.0  # type: ignore[attr-defined]  # due: 10 ms have passed
        nums.send([5])
        assert checks.count(False) >= 1, checks  # one alone is checked for
        nums.close()
        out = session.join()
    assert Counter(e for e, _ in out["nums"])[20] == 1


def test_weights_are_arrow_sizes_or_64_bytes_a_row() -> None:
    table = pa.table({"part": list(range(10))}, SEEDS)
    assert ray_backend._weight(Send([table, table])) == 2 * table.nbytes
    assert ray_backend._weight(Send([(1, "a")] * 10)) == 640
    assert ray_backend._weight(Advance(3)) == 16
