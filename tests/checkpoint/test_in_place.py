"""A part is written in place, under its own name (no temporary file and rename): the
manifest, written last and atomically, decides what exists, and a part that is not
whole fails its size or checksum.

The property: whatever file an earlier run left under a part's name (longer, shorter,
or none), a committed checkpoint reads back as exactly the bytes written; a part torn
after its commit (a crash mid-write of a later run) makes the store fall back to the
checkpoint before; a part's folder is made before the part is moved into it. Mutants: a
part written over a file without cutting it keeps a longer stale file's tail; a store that takes a
part's folder for made moves a recycled file into a missing folder first; a collection
that recycles the files of a checkpoint never committed hands out a part a late writer
still writes. All are caught.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timely.checkpoint import store as store_module
from timely.checkpoint.store import CheckpointStore, epoch_dir, part_name

pytestmark = pytest.mark.usefixtures("folders_only")
"""The layout of a store not on a local disk (parts in folders of their own); on a local disk
parts go into links files (``test_links.py``)."""


def write_over_stale(root: Path, stale: int | None, size: int) -> None:
    """A part of ``size`` bytes written where an earlier run left ``stale`` bytes (None:
    nothing), committed and read back; the folder holds no other file."""
    store = CheckpointStore(str(root))
    if stale is not None:
        os.makedirs(root / epoch_dir(3), exist_ok=True)
        (root / epoch_dir(3) / part_name(0, 1)).write_bytes(b"\xff" * stale)
    data = bytes(range(256)) * (size // 256) + b"\x01" * (size % 256)
    info = store.write_part(3, 0, 1, data)
    store.commit(3, 1, "fp", "flow", [info])
    _, parts = store.load(3)
    assert parts == [data]
    assert sorted(os.listdir(root / epoch_dir(3))) == ["MANIFEST.json", part_name(0, 1)]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stale=st.none() | st.integers(0, 5000), size=st.integers(0, 5000))
def test_a_part_written_in_place_reads_back(
    tmp_path_factory: pytest.TempPathFactory, stale: int | None, size: int
) -> None:
    write_over_stale(tmp_path_factory.mktemp("store"), stale, size)


def test_a_part_torn_in_place_falls_back(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    for epoch in (1, 2):
        info = store.write_part(epoch, 0, 1, bytes([epoch]) * 1000)
        store.commit(epoch, 1, "fp", "flow", [info])
    part = tmp_path / epoch_dir(2) / part_name(0, 1)
    part.write_bytes(part.read_bytes()[:500])  # torn: the write stopped half way
    with pytest.raises(store_module.CheckpointError, match="checksum"):
        store.load(2)
    found = store.newest("fp", "flow")
    assert found is not None and found[0] == 1


def test_a_part_not_cut_to_length_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a part written over the file left under its name, not cut to its
    length (as a retired checkpoint's folder leaves its parts' files)."""

    def not_cut(path: str, data: list[bytes]) -> bool:
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            return False
        os.write(fd, b"".join(data))
        os.close(fd)
        return True

    monkeypatch.setattr(store_module, "_write_existing", not_cut)
    with pytest.raises((AssertionError, store_module.CheckpointError)):
        write_over_stale(tmp_path, 3000, 100)


def failed_renames(root: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Renames that failed while a store wrote 12 one-part checkpoints, collecting old
    ones after each (so folders and files come from :data:`RECYCLE`)."""
    failed = 0
    rename = os.rename

    def counted(src: str, dst: str) -> None:
        nonlocal failed
        try:
            rename(src, dst)
        except OSError:
            failed += 1
            raise

    monkeypatch.setattr(os, "rename", counted)
    store = CheckpointStore(str(root))
    for epoch in range(12):
        info = store.write_part(epoch, 0, 1, bytes([epoch]) * 100)
        store.commit(epoch, 1, "fp", "flow", [info])
        store.collect_garbage(2)
        assert store.load(epoch)[1] == [bytes([epoch]) * 100]
    return failed


def test_a_part_makes_its_folder_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A part in a folder not yet made has it made first (a recycled folder renamed to
    it), not after its file's rename into the missing folder failed."""
    assert failed_renames(tmp_path, monkeypatch) == 0


def test_a_part_moved_before_its_folder_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: the store takes every part's folder for made already."""
    write = CheckpointStore.write

    def folder_taken_for_made(
        self: CheckpointStore, relpath: str, data: bytes, in_place: bool = False
    ) -> None:
        self._folder = self._path(relpath).rsplit("/", 1)[0]
        write(self, relpath, data, in_place)

    monkeypatch.setattr(CheckpointStore, "write", folder_taken_for_made)
    assert failed_renames(tmp_path, monkeypatch) > 0


def recycled_while_written(root: Path) -> bool:
    """A part of a checkpoint never committed is still being written (its file open)
    when old checkpoints are collected: whether its file went to :data:`RECYCLE`, where
    the next writer would write over it while the first still writes."""
    store = CheckpointStore(str(root))
    store.write_part(0, 0, 1, b"x" * 100)  # never committed: a late worker's part
    fd = os.open(root / epoch_dir(0) / part_name(0, 1), os.O_WRONLY)
    try:
        for epoch in range(1, 5):
            info = store.write_part(epoch, 0, 1, b"y" * 100)
            store.commit(epoch, 1, "fp", "flow", [info])
        store.collect_garbage(1)
        assert store.epochs() == [4]
        pool = root / ".recycle"
        inodes = {os.stat(pool / n).st_ino for n in os.listdir(pool)}
        return os.fstat(fd).st_ino in inodes
    finally:
        os.close(fd)


def test_a_part_of_an_uncommitted_checkpoint_is_never_recycled(tmp_path: Path) -> None:
    assert not recycled_while_written(tmp_path)


def test_an_uncommitted_part_recycled_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: collection recycles every deleted folder's files."""
    delete = CheckpointStore._delete_dir

    def greedy(self: CheckpointStore, relpath: str, room: list[int]) -> None:
        delete(self, relpath, room if room != [0, 0] else [16, 8])

    monkeypatch.setattr(CheckpointStore, "_delete_dir", greedy)
    assert recycled_while_written(tmp_path)


# -- the checksum: CRC-32, and SHA-256 in older manifests ------------------------------------


def flipped_part_is_refused(root: Path) -> bool:
    """A committed part with one byte changed (its size the same) is refused, and the
    store falls back to the checkpoint before."""
    store = CheckpointStore(str(root))
    for epoch in (1, 2):
        info = store.write_part(epoch, 0, 1, bytes(range(256)) * 8)
        store.commit(epoch, 1, "fp", "flow", [info])
    part = root / epoch_dir(2) / part_name(0, 1)
    data = bytearray(part.read_bytes())
    data[1000] ^= 0x10
    part.write_bytes(bytes(data))
    found = store.newest("fp", "flow")
    return found is not None and found[0] == 1


def test_a_part_with_a_byte_changed_is_refused(tmp_path: Path) -> None:
    assert flipped_part_is_refused(tmp_path)


def test_a_store_that_checks_no_checksum_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_checksum_matches", lambda data, entry: True)
    assert not flipped_part_is_refused(tmp_path)


def test_a_manifest_with_sha256_still_reads(tmp_path: Path) -> None:
    """Manifests written before issue 30 name each part's SHA-256: such a checkpoint
    still restores, and a part that does not match it is still refused."""
    import hashlib
    import json

    store = CheckpointStore(str(tmp_path))
    data = b"part" * 100
    info = store.write_part(4, 0, 1, data)
    del info["crc32"]
    info["sha256"] = hashlib.sha256(data).hexdigest()
    store.commit(4, 1, "fp", "flow", [info])
    manifest = tmp_path / epoch_dir(4) / "MANIFEST.json"
    old = json.loads(manifest.read_text())
    assert old["format"] == 2  # what a manifest checked by CRC-32 says it is
    old["format"] = 1
    manifest.write_text(json.dumps(old))
    assert store.load(4)[1] == [data]
    old["parts"][0]["sha256"] = hashlib.sha256(b"other").hexdigest()
    manifest.write_text(json.dumps(old))
    with pytest.raises(store_module.CheckpointError, match="checksum"):
        store.load(4)
    old["format"] = 4  # a newer timely's: refused by its format, not misread
    manifest.write_text(json.dumps(old))
    with pytest.raises(store_module.CheckpointError, match="format 4"):
        store.load(4)
