"""Checkpoints the driver finds complete together: the newest is committed, the others
subsumed (``CheckpointCoordinator.parts_written``, as Flink's coordinator subsumes a
pending checkpoint once a later one completes).

What must hold: the committed one is the newest complete and restorable one; a
checkpoint still missing a part is neither committed nor subsumed (its folder is left
alone: the part may still be being written); a subsumed whole checkpoint's folder goes
to be written over, and the files a later run writes there read back; an incremental
one's parts stay, links of the committed one's chain, and it restores; one that
cannot be written over (too large) is deleted by the next collection, not the rare
sweep; a subsumed folder takes no earlier run's manifest along to its next
checkpoint, and a manifest of another epoch is no checkpoint; the newest is committed
before the others go. Broken variants caught: the oldest committed instead of the
newest, a checkpoint subsumed before it was complete, a subsumed chain link recycled, a
subsumed checkpoint left without asking for a collection soon; and, checked by hand,
the store's collection returning while no more than ``keep`` commits were on disk
whatever older folders were left (or when a commit retired its only reference while it
ran: 11 runs in 60), a stale manifest moved along, no epoch check, the others retired
before the commit, and a kept manifest that cannot be read taken as naming no links.
On Ray, the driver reports the parts of every frame it reads in one intake together, and
those read before a callback raised or a worker was found lost in it (the driver's
intake run on stand-ins of its connections and callbacks); the variant that dropped
them is caught.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from timely.checkpoint import coordinator as coordinator_module
from timely.checkpoint.config import CheckpointConfig
from timely.checkpoint.coordinator import CheckpointCoordinator
from timely.checkpoint.store import RECYCLE, CheckpointError, CheckpointStore, epoch_dir
from timely.comm import serialization

pytestmark = pytest.mark.usefixtures("folders_only")
"""The layout of a store not on a local disk (subsumed folders retired whole); on a local
disk parts go into links files (``test_links.py``)."""


def part(epoch: int, worker: int, workers: int, pad: int = 0) -> bytes:
    """A worker's part, as encoded bytes (the store checks sizes and checksums only),
    ``pad`` bytes longer."""
    return serialization.encode(
        {"format": 2, "epoch": epoch, "worker": worker, "workers": workers, "vertices": {}}
    ) + bytes(pad)


def written(
    stores: list[CheckpointStore],
    epoch: int,
    workers: list[int],
    base: int | None = None,
    pad: int = 0,
) -> list[tuple[int, dict[str, Any]]]:
    """Each of ``workers`` writes its part of the checkpoint at ``epoch`` through a store of
    its own (as on Ray); their reports."""
    return [
        (epoch, stores[w].write_part(epoch, w, len(stores), part(epoch, w, len(stores), pad), base))
        for w in workers
    ]


def manifests(root: Path) -> list[int]:
    """The epochs with a manifest in the store (in a folder or a commit log), ascending."""
    return sorted(CheckpointStore(str(root)).manifests())


def coordinator_at(
    root: Path, **config: Any
) -> tuple[CheckpointCoordinator, list[CheckpointStore]]:
    coordinator = CheckpointCoordinator(CheckpointConfig(uri=str(root), **config), "f", "fp", 2, [])
    return coordinator, [CheckpointStore(str(root)) for _ in range(2)]


def test_of_checkpoints_complete_together_the_newest_is_committed(tmp_path: Path) -> None:
    coordinator, stores = coordinator_at(tmp_path)
    reports = [r for e in (1, 2, 3, 4) for r in written(stores, e, [0, 1])]
    coordinator.parts_written(reports)
    assert coordinator.committed == [4]
    assert coordinator.subsumed == [1, 2, 3]
    assert manifests(tmp_path) == [4]
    # Their folders went to be written over; the newest reads back.
    assert coordinator.store.epochs() == [4]
    assert len([n for n in (tmp_path / RECYCLE).iterdir() if n.name.startswith("d-")]) == 3
    _, parts = coordinator.store.load(4)
    assert [serialization.decode(p)["epoch"] for p in parts] == [4, 4]
    # The next checkpoints write over them, and read back.
    for e in (5, 6, 7):
        coordinator.parts_written(written(stores, e, [0, 1]))
    assert coordinator.committed == [4, 5, 6, 7]
    for e in (5, 6, 7):
        _, parts = coordinator.store.load(e)
        assert [serialization.decode(p)["epoch"] for p in parts] == [e, e]


def test_a_checkpoint_missing_a_part_is_neither_committed_nor_subsumed(tmp_path: Path) -> None:
    coordinator, stores = coordinator_at(tmp_path)
    reports = [
        *written(stores, 1, [0, 1]),
        *written(stores, 2, [0]),  # worker 1 still writes its part
        *written(stores, 3, [0, 1]),
        *written(stores, 4, [1]),
    ]
    coordinator.parts_written(reports)
    assert coordinator.committed == [3]
    assert coordinator.subsumed == [1]
    assert (tmp_path / epoch_dir(2)).is_dir()  # left where worker 1 writes into it
    # Its part comes in after the commit: too late, nothing more is committed.
    coordinator.parts_written(written(stores, 2, [1]))
    assert coordinator.committed == [3] and coordinator.subsumed == [1]
    coordinator.parts_written(written(stores, 4, [0]))
    assert coordinator.committed == [3, 4]


def test_one_report_at_a_time_commits_each(tmp_path: Path) -> None:
    """Inline reports each part as it is written: nothing is ever subsumed there."""
    coordinator, stores = coordinator_at(tmp_path)
    for e in (1, 2, 3):
        for report in written(stores, e, [0, 1]):
            coordinator.part_written(*report)
    assert coordinator.committed == [1, 2, 3] and coordinator.subsumed == []


def test_subsumed_links_of_a_chain_stay_and_the_chain_restores(tmp_path: Path) -> None:
    """Incremental: the checkpoints subsumed are links of the committed one's chain; their
    parts stay through the collections, and the committed one loads with its chain."""
    coordinator, stores = coordinator_at(tmp_path, incremental=10, keep=1)
    reports = [
        *written(stores, 1, [0, 1]),
        *written(stores, 2, [0, 1], base=1),
        *written(stores, 3, [0, 1], base=2),
    ]
    coordinator.parts_written(reports)
    assert coordinator.committed == [3] and coordinator.subsumed == [1, 2]
    chain = coordinator.store.load(3)[0]["parts"][0]["chain"]
    assert [link["epoch"] for link in chain] == [2, 1]
    for e in (4, 5, 6):
        coordinator.parts_written(written(stores, e, [0, 1], base=e - 1))
    coordinator.settle()
    manifest, _, chains = coordinator.store._load(6)
    assert [link["epoch"] for link in manifest["parts"][0]["chain"]] == [5, 4, 3, 2, 1]
    assert [len(c) for c in chains] == [5, 5]  # every link read and verified


def test_mutation_the_oldest_committed_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordinator_module, "max", min, raising=False)
    with pytest.raises(AssertionError):
        test_of_checkpoints_complete_together_the_newest_is_committed(tmp_path)


def test_mutation_subsuming_what_is_not_complete_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = CheckpointCoordinator._record

    def eager(self: CheckpointCoordinator, epoch: int, info: dict[str, Any]) -> bool:
        record(self, epoch, info)
        return True  # complete as soon as one part is in

    monkeypatch.setattr(CheckpointCoordinator, "_record", eager)
    with pytest.raises((AssertionError, KeyError)):
        test_a_checkpoint_missing_a_part_is_neither_committed_nor_subsumed(tmp_path)


def test_mutation_a_subsumed_link_recycled_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def recycled(self: CheckpointCoordinator, epoch: int, parts: list[dict[str, Any]]) -> None:
        self.subsumed.append(epoch)
        self.store.retire(epoch, committed=False)

    monkeypatch.setattr(CheckpointCoordinator, "_subsume", recycled)
    with pytest.raises(Exception):  # noqa: B017 - a link gone: unreadable or failing its checksum
        test_subsumed_links_of_a_chain_stay_and_the_chain_restores(tmp_path)


def subsumed_left(root: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``COLLECT_EVERY`` commits one at a time (the collection runs after them, then
    rarely while every commit retires its predecessor), a batch of 6 checkpoints complete
    at once, the 5 subsumed too large to be written over (``RECYCLE_BYTES``), then
    ``COLLECT_EVERY`` small commits one at a time again: the subsumed checkpoints'
    folders still in the store then (the collections asked for so far done)."""
    monkeypatch.setattr(coordinator_module, "RECYCLE_BYTES", 200)
    every = coordinator_module.COLLECT_EVERY
    coordinator, stores = coordinator_at(root, keep=1)
    for e in range(every):
        coordinator.parts_written(written(stores, e, [0, 1]))
    batch = range(every, every + 6)
    large = [r for e in batch[:-1] for r in written(stores, e, [0, 1], pad=300)]
    coordinator.parts_written([*large, *written(stores, batch[-1], [0, 1])])
    assert coordinator.subsumed == list(batch)[:-1]
    for e in range(batch[-1] + 1, batch[-1] + 1 + every):
        coordinator.parts_written(written(stores, e, [0, 1]))
    assert coordinator._collector is not None
    coordinator._collector.settle()  # (what was asked for: settle() would ask for more)
    return [e for e in coordinator.store.epochs() if e in batch[:-1]]


def test_subsumed_checkpoints_not_retired_are_collected_soon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert subsumed_left(tmp_path, monkeypatch) == []


def test_mutation_subsumed_checkpoints_left_for_the_rare_sweep_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def quiet(self: CheckpointCoordinator, epoch: int, parts: list[dict[str, Any]]) -> None:
        self.subsumed.append(epoch)
        if all(p["size"] <= coordinator_module.RECYCLE_BYTES for p in parts):
            self.store.retire(epoch, committed=False)  # (one left not noted)

    monkeypatch.setattr(CheckpointCoordinator, "_subsume", quiet)
    assert subsumed_left(tmp_path, monkeypatch) != []


def test_a_subsumed_folder_takes_no_earlier_runs_manifest_along(tmp_path: Path) -> None:
    """An earlier run in the same directory committed epochs 1-4; this one (not resuming)
    finds 2 and 3 complete together: 2's folder, subsumed, goes to be written over
    without the earlier run's manifest of epoch 2, so the checkpoint whose folder it
    becomes (7) has none until it is committed (it would count as committed, and a
    restore could read it)."""
    earlier, stores = coordinator_at(tmp_path)
    for e in (1, 2, 3, 4):
        earlier.parts_written(written(stores, e, [0, 1]))
    coordinator, stores = coordinator_at(tmp_path)
    coordinator.parts_written([r for e in (2, 3) for r in written(stores, e, [0, 1])])
    assert coordinator.subsumed == [2]  # (its folder held the earlier run's manifest)
    assert not list((tmp_path / RECYCLE).glob("d-*/MANIFEST.json"))
    written(stores, 7, [0])  # worker 0 takes a recycled folder for epoch 7
    assert not (tmp_path / epoch_dir(7) / "MANIFEST.json").exists()


def test_a_manifest_of_another_epoch_is_no_checkpoint(tmp_path: Path) -> None:
    coordinator, stores = coordinator_at(tmp_path)
    coordinator.parts_written(written(stores, 1, [0, 1]))
    (tmp_path / epoch_dir(5)).mkdir()
    manifest = (tmp_path / epoch_dir(1) / "MANIFEST.json").read_bytes()
    (tmp_path / epoch_dir(5) / "MANIFEST.json").write_bytes(manifest)
    with pytest.raises(CheckpointError, match="checkpoint 5: its manifest is checkpoint 1's"):
        coordinator.store.load(5)
    found = coordinator.store.newest("fp", "f")
    assert found is not None and found[0] == 1


def test_the_newest_is_committed_before_the_others_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that fails leaves the batch's other complete checkpoints where they are."""
    coordinator, stores = coordinator_at(tmp_path)

    def full(*_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(coordinator.store, "commit", full)
    with pytest.raises(CheckpointError, match="cannot commit the checkpoint at epoch 3"):
        coordinator.parts_written([r for e in (1, 2, 3) for r in written(stores, e, [0, 1])])
    assert coordinator.subsumed == []
    assert coordinator.store.epochs() == [1, 2, 3]


class _Intake:
    """What ``RaySession._collect`` reads of its session: the driver's connections'
    frames, the callbacks' delivery (``fail_on``: the key whose callback raises) and the
    parts' report, recorded."""

    def __init__(self, frames: list[tuple[int, bytes | None]], fail_on: str = "") -> None:
        import collections
        import threading
        from types import SimpleNamespace

        self.reported: list[list[tuple[int, dict[str, Any]]]] = []
        self.delivered: list[tuple[str, int]] = []
        self._delivering = False
        self._links = SimpleNamespace(
            frames=collections.deque(frames),
            arrived=threading.Event(),
            lost=lambda w: "closed",
        )
        self.membership = SimpleNamespace(alive={0, 1})
        self._ended: set[int] = set()
        self.loop_watch = SimpleNamespace(observe=lambda loops: list(loops))
        self.fail_on = fail_on

    def _check(self) -> None:
        return None

    def _deliver(self, key: str, epoch: int, records: Any) -> None:
        if key == self.fail_on:
            raise ValueError(f"the callback of {key!r} raised")
        self.delivered.append((key, epoch))

    def _parts_reported(self, reports: list[tuple[int, dict[str, Any]]], handling: float) -> None:
        self.reported.append(list(reports))


def frame(outputs: list[tuple[str, int, list[Any]]], parts: list[tuple[int, int]]) -> bytes:
    """A worker's frame to the driver: its outputs, then its parts' reports (``(epoch,
    worker)`` each, with a stand-in of what the manifest records)."""
    reports = [(e, {"worker": w, "path": f"p{e}-{w}", "size": 1, "crc32": 0}) for e, w in parts]
    return serialization.encode([outputs, reports, False, []])


def collect(intake: _Intake) -> bool:
    """``RaySession._collect`` on ``intake``, the frames there already (no wait)."""
    from timely.backends.ray import RaySession

    return RaySession._collect(intake, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["a callback raises", "a worker is lost"])
def test_on_ray_parts_taken_in_before_a_failure_are_reported(how: str) -> None:
    """The driver reads every frame that has arrived, then reports their parts together.
    When a callback raises, or a worker's connection turns out lost, in the same intake,
    the parts of the frames read before are still reported (a restore, or a caller that
    goes on, may start from the checkpoints they complete), the error still reaches the
    caller, and the driver is ready to deliver again. Dropping them (the driver's code
    before the review) fails this."""
    from timely.errors import WorkerDied

    first = frame([("out", 1, [1])], [(1, 0), (1, 1)])
    second = frame([("bad", 2, [2])], []) if how == "a callback raises" else None
    intake = _Intake([(0, first), (1, second)], fail_on="bad")
    with pytest.raises(ValueError if how == "a callback raises" else WorkerDied):
        collect(intake)
    assert [[(e, i["worker"]) for e, i in r] for r in intake.reported] == [[(1, 0), (1, 1)]]
    assert intake.delivered == [("out", 1)] and not intake._delivering


def test_on_ray_the_parts_of_every_frame_of_an_intake_are_reported_together() -> None:
    """One report for every frame read in an intake, in the order they were read."""
    intake = _Intake([(0, frame([], [(1, 0), (2, 0)])), (1, frame([("out", 2, [])], [(1, 1)]))])
    assert collect(intake)  # (an output delivered)
    assert [[(e, i["worker"]) for e, i in r] for r in intake.reported] == [[(1, 0), (2, 0), (1, 1)]]
