"""A local store writes over the files and folders of deleted checkpoints
(:data:`timely.checkpoint.store.RECYCLE`) instead of making new ones.

The property: whatever the sizes written and however often old checkpoints are
collected, every committed checkpoint still kept reads back as exactly the bytes its
parts were written with, and a recycled file or folder is never one a kept checkpoint
uses; checkpoints retired whole when no longer kept (``retire``) too, and a run that
retires them makes no new file once it has what it keeps. The store runs against a dict
of what each kept checkpoint holds. Six broken variants must be caught: a recycled file
not cut to its new length, a kept checkpoint's part handed out for reuse, a recycled
folder renamed over one in use, one renamed over a folder another writer has just made
(still empty), a folder retired with its manifest in it, and a run that retires none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.checkpoint.pipelines import build
from tests.checkpoint.test_incremental import EPOCHS, resumed, stopped_run
from timely.checkpoint import store as store_module
from timely.checkpoint.store import RECYCLE, CheckpointStore, epoch_dir

# Per checkpoint: the parts' sizes (a worker's part each), then whether old checkpoints
# are collected after its commit.
plans = st.lists(
    st.tuples(st.lists(st.integers(0, 3000), min_size=1, max_size=3), st.booleans()),
    min_size=1,
    max_size=25,
)

pytestmark = pytest.mark.usefixtures("folders_only")
"""The layout of a store not on a local disk (folders retired whole and recycled); on a local disk
parts go into links files (``test_links.py``)."""


def counting_store(root: Path) -> tuple[CheckpointStore, list[int]]:
    """A store at ``root`` that counts its writes over a recycled file (in the one item of
    the list returned)."""
    store = CheckpointStore(str(root))
    reused = [0]
    reuse = store._reuse

    def counted(tmp: str) -> bool:
        took = reuse(tmp)
        reused[0] += took
        return took

    store._reuse = counted  # type: ignore[method-assign]
    return store, reused


def check_store(
    root: Path, plan: list[tuple[list[int], bool]], keep: int = 2, retire: bool = False
) -> int:
    """Run ``plan`` against a store at ``root``; return how many writes reused a file.
    ``retire``: the checkpoint each commit leaves unkept is retired at once
    (:meth:`CheckpointStore.retire`, as the coordinator does), besides collections."""
    store, reused = counting_store(root)
    written: dict[int, list[bytes]] = {}
    committed: list[int] = []
    for epoch, (sizes, collect) in enumerate(plan):
        datas = [bytes([(epoch * 7 + w) % 251]) * size for w, size in enumerate(sizes)]
        infos = [store.write_part(epoch, w, len(datas), d) for w, d in enumerate(datas)]
        # Written, not committed yet (a crash now): no manifest in its folder.
        assert not (root / epoch_dir(epoch) / "MANIFEST.json").exists()
        store.commit(epoch, len(datas), "fp", "flow", infos)
        written[epoch] = datas
        committed.append(epoch)
        if retire and len(committed) > keep:
            store.retire(committed.pop(0))
        if collect:
            store.collect_garbage(keep, upto=epoch)
            committed = committed[-keep:]
        for kept in committed:
            manifest, parts = store.load(kept)
            assert parts == written[kept], f"checkpoint {kept} does not read back"
            assert manifest["epoch"] == kept
        assert store.epochs()[-len(committed) :] == committed
        for other in set(store.epochs()) - set(committed):  # no manifest but its own
            path = root / epoch_dir(other) / "MANIFEST.json"
            assert not path.exists() or store.load(other)[0]["epoch"] == other
    return reused[0]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=plans)
@example(plan=[([3000], True), ([10], True), ([2000, 5], True), ([7], True), ([1], True)])
def test_kept_checkpoints_read_back_whatever_was_recycled(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[list[int], bool]]
) -> None:
    check_store(tmp_path_factory.mktemp("store"), plan)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plan=plans, keep=st.integers(1, 3))
def test_kept_checkpoints_read_back_whatever_was_retired(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[list[int], bool]], keep: int
) -> None:
    """The same with each checkpoint no longer kept retired whole at once: its folder and
    files written over by the next checkpoints, before or after collections."""
    check_store(tmp_path_factory.mktemp("store"), plan, keep, retire=True)


def test_a_folder_retired_with_its_manifest_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a checkpoint retired with its manifest still in its folder (the next
    checkpoint's folder then holds a manifest that is not its own)."""

    def with_manifest(self: CheckpointStore, epoch: int) -> bool:
        moved = f"{store_module._DIR}{epoch}"
        os.makedirs(self._path(RECYCLE), exist_ok=True)
        os.rename(self._path(epoch_dir(epoch)), self._path(RECYCLE, moved))
        self._recycled.append(moved)
        return True

    monkeypatch.setattr(CheckpointStore, "retire", with_manifest)
    with pytest.raises((AssertionError, store_module.CheckpointError)):
        check_store(tmp_path, [([100], False)] * 6, retire=True)


def count_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every folder made and every new file written from now on (until
    ``monkeypatch.undo()``), in the one item of the list returned."""
    made = [0]
    real_mkdir, real_local = os.mkdir, store_module._write_local

    def mkdir(path: str, *args: Any) -> None:
        real_mkdir(path, *args)
        made[0] += 1

    def write_local(*args: Any) -> None:
        made[0] += 1
        real_local(*args)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(store_module, "_write_local", write_local)
    return made


def created(root: Path, epochs: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Files and folders a run with a checkpoint every epoch made in its store."""
    made = count_made(monkeypatch)
    flow, _ = build("running", [[1, 2, 3]] * epochs)
    flow.run(workers=2, backend="inline", checkpoint=str(root), keep_checkpoints=2)
    monkeypatch.undo()
    return made[0]


def test_a_run_makes_no_file_once_it_has_what_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a checkpoint every epoch, each checkpoint no longer kept is retired and
    written over: a run of 40 epochs makes no more files and folders than one of 12."""
    short = created(tmp_path / "short", 12, monkeypatch)
    assert created(tmp_path / "long", 40, monkeypatch) == short


def test_a_run_without_retiring_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: nothing retired, old checkpoints only collected (every few commits)."""
    monkeypatch.setattr(CheckpointStore, "retire", lambda self, epoch: False)
    short = created(tmp_path / "short", 12, monkeypatch)
    monkeypatch.setattr(CheckpointStore, "retire", lambda self, epoch: False)
    assert created(tmp_path / "long", 40, monkeypatch) > short


def test_files_and_folders_are_reused(tmp_path: Path) -> None:
    """Collected checkpoints' files and folders are written over: no new inode for them."""
    plan = [([500, 600], True)] * 12
    assert check_store(tmp_path, plan) > 0
    waiting = os.listdir(tmp_path / RECYCLE)
    assert len(waiting) <= store_module.RECYCLE_FILES + store_module.RECYCLE_DIRS
    made: list[str] = []
    real = os.makedirs

    def spy(path: str, *args: object, **kwargs: object) -> None:
        made.append(path)
        real(path, *args, **kwargs)  # type: ignore[arg-type]

    store = CheckpointStore(str(tmp_path))
    os.makedirs = spy  # type: ignore[assignment]
    try:
        store.write_part(99, 0, 1, b"x")
    finally:
        os.makedirs = real
    assert any(n.startswith(store_module._DIR) for n in waiting)
    assert made == []  # the folder was a recycled one


def test_large_files_are_deleted_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "RECYCLE_BYTES", 1000)
    check_store(tmp_path, [([3000], True)] * 5)
    waiting = os.listdir(tmp_path / RECYCLE)
    files = [n for n in waiting if not n.startswith(store_module._DIR)]
    # Only the manifests (small) wait; the 3,000-byte parts were deleted.
    assert files and all((tmp_path / RECYCLE / n).stat().st_size <= 1000 for n in files)


def test_a_run_recycles_and_resumes(tmp_path: Path) -> None:
    """A run with a checkpoint every epoch and one kept recycles (16 commits: two
    collections), and a run resuming from its last checkpoint gives the outputs of a run
    without a stop; incremental chains too."""
    flow, expected = build("running", EPOCHS)
    flow.run(workers=2, backend="inline")
    for options in ({}, {"checkpoint_incremental": 3}):
        root = tmp_path / str(len(options))
        stopped_run(root, "running", 10, keep_checkpoints=1, **options)
        assert os.listdir(root / RECYCLE)
        restored, got = resumed(root, "running", keep_checkpoints=1, **options)
        assert restored == 10
        assert got == {e: r for e, r in expected.items() if e > 10}


# -- the mutants -----------------------------------------------------------------------------

MUTANT_PLAN = [([3000], True), ([10], True), ([2000, 5], True), ([7], True), ([1], True)]


def test_a_recycled_file_not_cut_to_length_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_truncate(path: str, tmp: str, data: list[bytes]) -> None:
        fd = os.open(tmp, os.O_WRONLY)
        try:
            os.write(fd, b"".join(data))
        finally:
            os.close(fd)
        os.replace(tmp, path)

    monkeypatch.setattr(store_module, "_write_over", no_truncate)
    with pytest.raises((AssertionError, store_module.CheckpointError)):
        check_store(tmp_path, MUTANT_PLAN * 3)


def test_a_kept_part_recycled_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Collection hands the newest checkpoint's part out for reuse as well."""
    collect = CheckpointStore.collect_garbage

    def greedy(self: CheckpointStore, keep: int, *args: object, **kwargs: object) -> None:
        collect(self, keep, *args, **kwargs)  # type: ignore[arg-type]
        newest = self.epochs()[-1]
        os.makedirs(self._path(RECYCLE), exist_ok=True)
        os.link(
            self._path(epoch_dir(newest), "part-0-of-1.bin"),
            self._path(RECYCLE, f"stolen-{newest}"),
        )

    monkeypatch.setattr(CheckpointStore, "collect_garbage", greedy)
    with pytest.raises((AssertionError, store_module.CheckpointError)):
        check_store(tmp_path, [([50], True)] * 6)


def test_a_folder_renamed_over_one_in_use_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recycled folder put in place of a checkpoint's even when it exists (its files
    then gone: a rename that replaces what it should not)."""
    import shutil

    def clobber(self: CheckpointStore, folder: str) -> None:
        names = [n for n in self._recycled_names() if n.startswith(store_module._DIR)]
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        if names:
            self._recycled.remove(names[0])
            os.rename(self._path(RECYCLE, names[0]), folder)
        else:
            os.makedirs(folder, exist_ok=True)

    monkeypatch.setattr(CheckpointStore, "_make_dir", clobber)
    # Two parts a checkpoint: the second part's write must not lose the first.
    monkeypatch.setattr(store_module, "_RELIST", 0)

    def missing_dir_every_time(self: CheckpointStore, tmp: str) -> bool:
        self._make_dir(os.path.dirname(tmp))
        return False

    monkeypatch.setattr(CheckpointStore, "_reuse", missing_dir_every_time)
    with pytest.raises((AssertionError, store_module.CheckpointError)):
        check_store(tmp_path, [([40, 40], True)] * 8)


def pooled_folder(root: Path) -> None:
    """One folder waiting in :data:`RECYCLE`, as a collection leaves one."""
    os.makedirs(root / RECYCLE / f"{store_module._DIR}{len(os.listdir(root / RECYCLE))}")


def test_a_folder_another_writer_made_is_never_replaced(tmp_path: Path) -> None:
    """Two writers (two workers' stores) make one checkpoint's folder at once, each with
    a recycled folder at hand. The second must use the first's folder, even while it is
    still empty: the first may be creating its file in it, by a path already resolved to
    that folder, and a folder renamed over it would make that creation fail (seen as an
    ``ENOENT`` part write on Ray, ~1 run in 40)."""
    (tmp_path / RECYCLE).mkdir()
    pooled_folder(tmp_path)
    pooled_folder(tmp_path)
    first, second = CheckpointStore(str(tmp_path)), CheckpointStore(str(tmp_path))
    folder = str(tmp_path / epoch_dir(3))
    first._make_dir(folder)
    made = os.stat(folder).st_ino
    assert len(os.listdir(tmp_path / RECYCLE)) == 1  # the first took a recycled folder
    second._make_dir(folder)
    assert os.stat(folder).st_ino == made, "a writer replaced the folder another one made"
    assert len(os.listdir(tmp_path / RECYCLE)) == 1  # the second's stays for later
    # A part written by each lands in the one folder.
    second.write(f"{epoch_dir(3)}/{store_module.part_name(1, 2)}", b"b")
    first.write(f"{epoch_dir(3)}/{store_module.part_name(0, 2)}", b"a")
    assert sorted(os.listdir(folder)) == ["part-0-of-2.bin", "part-1-of-2.bin"]


def test_a_writer_replacing_an_empty_folder_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: the recycled folder moved in with ``os.rename``, which replaces an
    empty folder (the code before the fix)."""
    monkeypatch.setattr(store_module, "rename_noreplace", os.rename)
    with pytest.raises(AssertionError, match="replaced the folder"):
        test_a_folder_another_writer_made_is_never_replaced(tmp_path)


def collections_asked(root: Path, monkeypatch: pytest.MonkeyPatch, retire: bool) -> int:
    """Collections a coordinator asks for over 8 * COLLECT_EVERY commits of small whole
    checkpoints (``retire=False``: a store that cannot retire them)."""
    from timely.checkpoint import coordinator as coordinator_module
    from timely.checkpoint.config import CheckpointConfig

    asked = 0

    def count(self: Any, kept: list[int], folders: dict[int, frozenset[int]]) -> None:
        nonlocal asked
        asked += 1

    monkeypatch.setattr(coordinator_module._Collector, "collect", count)
    if not retire:
        monkeypatch.setattr(CheckpointStore, "retire", lambda self, epoch: False)
    coordinator = coordinator_module.CheckpointCoordinator(
        CheckpointConfig(uri=str(root), keep=2), "flow", "fp", 1, []
    )
    store = coordinator.store
    for epoch in range(8 * coordinator_module.COLLECT_EVERY):
        coordinator.part_written(epoch, store.write_part(epoch, 0, 1, b"p" * 100))
    monkeypatch.undo()
    return asked


def test_a_run_that_retires_is_swept_rarely(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits that retire every checkpoint they leave unkept need the collection only for
    what an earlier run or a superseded part left: once early, then every
    ``SWEEP_EVERY`` times ``COLLECT_EVERY`` commits; a run whose checkpoints are left to
    the collection has one every ``COLLECT_EVERY`` (a coordinator that swept rarely
    whatever it retired, or collected as often either way, is caught)."""
    assert collections_asked(tmp_path / "a", monkeypatch, retire=True) == 1
    assert collections_asked(tmp_path / "b", monkeypatch, retire=False) == 8


def made_apart(root: Path, epochs: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Files and folders made over ``epochs`` checkpoints in Ray's layout: each of two
    workers writes its parts through a store of its own, and the driver, through a third,
    commits each checkpoint and retires the one no longer kept (keep 2). Each checkpoint
    is checked to read back."""
    made = count_made(monkeypatch)
    driver = CheckpointStore(str(root))
    workers = [CheckpointStore(str(root)) for _ in range(2)]
    for epoch in range(epochs):
        datas = [bytes([epoch % 251, w]) * 50 for w in range(2)]
        infos = [s.write_part(epoch, w, 2, d) for w, (s, d) in enumerate(zip(workers, datas))]
        driver.commit(epoch, 2, "fp", "flow", infos)
        if epoch >= 2:
            assert driver.retire(epoch - 2), f"checkpoint {epoch - 2} not retired"
        assert driver.load(epoch)[1] == datas
    monkeypatch.undo()
    return made[0]


def test_stores_apart_reuse_what_the_driver_retired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Ray the driver retires and the workers take: the driver keeps retiring (it
    counts what waits in the folder, not names it noted) and the workers find the folders
    it left (they list again when the names they knew are gone), so 40 checkpoints make
    no more files and folders than 12."""
    short = made_apart(tmp_path / "short", 12, monkeypatch)
    assert made_apart(tmp_path / "long", 40, monkeypatch) == short


def test_workers_that_never_list_again_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a writer that only ever tries the names it listed last (the folders
    the driver retired since are never found, and each checkpoint makes a new folder)."""
    with pytest.raises(AssertionError):  # (folders pile up unused: retiring stops)
        monkeypatch.setattr(CheckpointStore, "_relist", lambda self: self._recycled)
        short = made_apart(tmp_path / "short", 12, monkeypatch)
        monkeypatch.setattr(CheckpointStore, "_relist", lambda self: self._recycled)
        assert made_apart(tmp_path / "long", 40, monkeypatch) == short
