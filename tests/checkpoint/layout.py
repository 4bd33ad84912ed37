"""Reading and damaging checkpoints wherever their bytes are: a folder's part file and
``MANIFEST.json``, or a links file and a commit log's line (:mod:`timely.checkpoint.links`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timely.checkpoint import links
from timely.checkpoint.store import CheckpointStore, epoch_dir


def committed(root: str | Path) -> list[int]:
    """The epochs of the committed checkpoints, ascending."""
    return sorted(CheckpointStore(str(root)).manifests())


def part_entry(root: str | Path, epoch: int, worker: int = 0) -> dict[str, Any]:
    """The manifest entry of ``worker``'s part of the checkpoint at ``epoch``."""
    manifest = CheckpointStore(str(root)).manifests()[epoch]
    return next(p for p in manifest["parts"] if p["worker"] == worker)


def damage(root: str | Path, epoch: int, worker: int = 0) -> None:
    """Flip 8 bytes in the middle of ``worker``'s part of the checkpoint at ``epoch``
    (its file, or its share of a links file)."""
    entry = part_entry(root, epoch, worker)
    path = Path(root) / entry["path"]
    data = bytearray(path.read_bytes())
    middle = entry.get("offset", 0) + entry["size"] // 2
    for i in range(middle, min(middle + 8, entry.get("offset", 0) + entry["size"])):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def uncommit(root: str | Path, epoch: int) -> None:
    """Take the commit of the checkpoint at ``epoch`` away, as if the driver had died
    before making it: its folder's manifest, or its line in a commit log."""
    manifest = Path(root) / epoch_dir(epoch) / "MANIFEST.json"
    if manifest.exists():
        manifest.unlink()
        return
    prefix = b"c %d " % epoch
    for log in Path(root).glob(f"{links.LOG}*"):
        lines = log.read_bytes().split(b"\n")
        kept = [line for line in lines if not line[9:].startswith(prefix)]
        if len(kept) != len(lines):
            log.write_bytes(b"\n".join(kept))
            return
    raise AssertionError(f"no commit of epoch {epoch} in {root}")
