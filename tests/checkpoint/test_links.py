"""Links files and commit logs (:mod:`timely.checkpoint.links`): a worker's parts appended
after the part it last wrote to a folder (an incremental chain's deltas, or whole parts),
and the commits of checkpoints made only of such parts as lines of a log, on a real local
directory.

The log's reader is checked against a model under damage (a crash that tears the last
line before more are appended, a flipped byte anywhere), with mutants of the reader and
the writer that the property must catch."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.checkpoint.test_incremental import damage
from tests.checkpoint.test_inline_recovery import running_sums
from tests.checkpoint.test_subsume import manifests, part
from timely.checkpoint import coordinator as coordinator_module
from timely.checkpoint import links
from timely.checkpoint.config import CheckpointConfig
from timely.checkpoint.coordinator import CheckpointCoordinator
from timely.checkpoint.store import RECYCLE, CheckpointError, CheckpointStore, epoch_dir

# -- the commit log, against a model ----------------------------------------------------------

Op = tuple[str, int, bytes]
"""``("c", epoch, manifest)`` or ``("f", floor, b"")``."""

ops = st.lists(
    st.tuples(
        st.sampled_from(["c", "c", "c", "f"]),
        st.integers(0, 30),
        st.binary(max_size=40).map(lambda b: json.dumps(b.hex()).encode()),
    ).map(lambda op: op if op[0] == "c" else ("f", op[1], b"")),
    max_size=12,
)


def written(lines: list[Op], line: Any = links.line) -> tuple[bytes, list[tuple[int, int]]]:
    """The log's bytes and each line's span in them."""
    data = b""
    spans = []
    for kind, epoch, payload in lines:
        piece = line(kind, epoch, payload)
        spans.append((len(data), len(data) + len(piece)))
        data += piece
    return data, spans


def model(lines: list[Op]) -> tuple[dict[int, bytes], int]:
    """What a reader must find in these intact lines: a floor hides the commits before
    it in the file at epochs below it."""
    commits: dict[int, bytes] = {}
    floor = -1
    for kind, epoch, payload in lines:
        if kind == "c":
            commits[epoch] = payload
        else:
            floor = max(floor, epoch)
            commits = {e: m for e, m in commits.items() if e >= epoch}
    return commits, floor


@given(before=ops, after=ops, cut=st.floats(0, 1), flip=st.none() | st.floats(0, 1))
def test_a_log_reads_back_its_intact_lines(
    before: list[Op], after: list[Op], cut: float, flip: float | None
) -> None:
    """Lines ``before``, the last of them torn at ``cut`` (a crash mid-write), then
    ``after`` appended by the next writer, and perhaps one byte flipped anywhere: the
    reader finds exactly the lines that are whole, the later line for an epoch winning
    and each floor hiding the commits above it below its epoch."""
    check_log(before, after, cut, flip)


def check_log(
    before: list[Op],
    after: list[Op],
    cut: float,
    flip: float | None,
    line: Any = links.line,
    read: Any = links.read_log,
) -> None:
    head, spans = written(before, line)
    whole = list(before)
    if before:  # the last line torn: at least its last byte and newline never written
        start, end = spans.pop()
        head = head[: start + int((end - start - 2) * cut)]
        whole.pop()
    tail, tail_spans = written(after, line)
    spans += [(s + len(head), e + len(head)) for s, e in tail_spans]
    whole += after
    data = bytearray(head + tail)
    if flip is not None and data:
        at = int(flip * (len(data) - 1))
        data[at] ^= 0xFF  # (CRC-32 catches any one byte changed in a line)
        whole = [op for op, (s, e) in zip(whole, spans, strict=True) if not s <= at < e]
    assert read(bytes(data)) == model(whole)


def test_a_floor_hides_only_the_commits_before_it() -> None:
    """A run's collection left a floor at 28 in the log of the chains from 25; a later
    run (started over, or resumed from before 25) wrote a whole part at 25 again and
    appends its commits 26 and 27 to the same log: they are checkpoints."""
    data = b"".join(
        [
            links.line("c", 27, b"{}"),
            links.line("c", 28, b"{}"),
            links.line("f", 28),
            links.line("c", 26, b'"later"'),
            links.line("c", 27, b'"later"'),
        ]
    )
    assert links.read_log(data) == ({26: b'"later"', 27: b'"later"', 28: b"{}"}, 28)


def test_a_floor_over_the_whole_log_is_caught() -> None:
    """The mutant: the highest floor applied to every line, wherever it is (a later run's
    commits 26 and 27 vanish)."""

    def whole(data: bytes) -> tuple[dict[int, bytes], int]:
        commits, floor = links.read_log(data)
        return {e: m for e, m in commits.items() if e >= floor}, floor

    with pytest.raises(AssertionError):
        check_log([], [("f", 28, b""), ("c", 26, b"1")], 0, None, read=whole)


def test_only_a_local_disk_keeps_links_files() -> None:
    """Links files and commit logs stay open, so only a filesystem of this machine's
    disks or memory has them (by the longest mount point holding the path): on NFS, SMB
    or a FUSE mount a file's data reaches other nodes when it is closed."""
    mounts = "\n".join(
        [
            "/dev/vda / ext4 rw,relatime 0 0",
            "server:/export /mnt/shared nfs4 rw 0 0",
            "tmpfs /dev/shm tmpfs rw 0 0",
            "s3fs /mnt/bucket fuse.s3fs rw 0 0",
            "/dev/vdb /mnt/shared/local\\040disk xfs rw 0 0",
        ]
    )
    assert links.appendable("/tmp/ckpt", mounts)
    assert links.appendable("/dev/shm/ckpt", mounts)
    assert not links.appendable("/mnt/shared/ckpt", mounts)
    assert not links.appendable("/mnt/shared", mounts)
    assert not links.appendable("/mnt/bucket/x", mounts)
    assert links.appendable("/mnt/shared/local disk/ckpt", mounts)
    assert not links.appendable("/mnt/sharedness", "server:/x /mnt/sharedness nfs rw 0 0")
    assert not links.appendable("/anything", "")
    # Tabs, newlines and backslashes in a mount point are escaped as spaces are.
    escaped = "/dev/vda / ext4 rw 0 0\nsrv:/x /mnt/a\\134b\\011c nfs rw 0 0"
    assert not links.appendable("/mnt/a\\b\tc/ckpt", escaped)


def test_a_reader_that_skips_the_checksum_is_caught() -> None:
    """The mutant: a line is taken on its looks, without its CRC-32 (a flipped byte in a
    manifest is then read as a commit)."""

    def trusting(data: bytes) -> tuple[dict[int, bytes], int]:
        commits: dict[int, bytes] = {}
        floor = -1
        for raw in data.split(b"\n"):
            parts = raw[9:].split(b" ", 2)
            if len(parts) == 3 and parts[1].isdigit():
                if parts[0] == b"c":
                    commits[int(parts[1])] = parts[2]
                elif parts[0] == b"f":
                    floor = max(floor, int(parts[1]))
        return {e: m for e, m in commits.items() if e >= floor}, floor

    caught = False
    for flip in (0.5, 0.6, 0.7, 0.8, 0.9):
        try:
            check_log([], [("c", 3, b'"abcdefgh"')], 0, flip, read=trusting)
        except AssertionError:
            caught = True
    assert caught


def test_a_writer_without_the_leading_newline_is_caught() -> None:
    """The mutant: a line written without a newline before it. After a crash tore the last
    line, the next writer's first line runs on from the torn one, and both are lost."""

    def bare(kind: str, epoch: int, payload: bytes = b"") -> bytes:
        return links.line(kind, epoch, payload)[1:]

    with pytest.raises(AssertionError):
        check_log([("c", 1, b"1")], [("c", 2, b"2")], 0.5, None, line=bare)


# -- a store's links and logs -----------------------------------------------------------------


def chained(store: CheckpointStore, epochs: range, whole_every: int) -> None:
    """One worker's parts at ``epochs``, whole every ``whole_every`` (a delta on the one
    before otherwise), each committed with its chain as the coordinator records it."""
    chain: list[dict[str, Any]] = []
    for epoch in epochs:
        whole = (epoch - epochs.start) % whole_every == 0
        info = store.write_part(epoch, 0, 1, bytes([epoch]) * 50, base=None if whole else epoch - 1)
        chain = [] if whole else chain
        store.commit(epoch, 1, "fp", "flow", [{**info, "chain": chain}])
        chain = [{"epoch": epoch, **{k: v for k, v in info.items() if k != "base"}}, *chain]


def test_a_log_goes_with_its_chain_and_a_floor_hides_what_is_not_kept(tmp_path: Path) -> None:
    """Three chains of four (a whole part, three links), one checkpoint kept: the
    collection keeps 11 and, to fall back to, 7 (the newest before 11's chain began); the
    first chain's folder and log go, the second's log keeps only 7 (a floor below it),
    the third's only 11. Both restore."""
    store = CheckpointStore(str(tmp_path))
    chained(store, range(12), whole_every=4)
    folders = {e: frozenset({e - e % 4}) for e in range(12)}
    store.collect_garbage(1, also=[7, 11], folders=folders, upto=11)
    assert sorted(store.manifests()) == [7, 11]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != RECYCLE) == [
        "ckpt-000000000004",
        "ckpt-000000000008",
        "commits-000000000004.log",
        "commits-000000000008.log",
    ]
    for epoch in (7, 11):
        manifest, parts = store.load(epoch)
        assert manifest["format"] == 3 and parts == [bytes([epoch]) * 50]


def test_a_later_commit_of_an_epoch_wins_wherever_it_is(tmp_path: Path) -> None:
    """Two runs committed epoch 2, one in its folder, the other in a log (a run that
    resumed from an older checkpoint, or started over): the later commit is the one."""
    store = CheckpointStore(str(tmp_path))
    chained(store, range(3), whole_every=3)  # 2's commit: a line in the log of 0
    logged = store.manifests()[2]
    assert not (tmp_path / epoch_dir(2)).exists()
    info = store.write_part(2, 0, 1, b"whole again")  # another run's whole part at 2
    store.commit(2, 1, "fp", "flow", [{**info, "chain": []}])
    assert store.manifests()[2]["parts"][0]["path"] == f"{epoch_dir(2)}/part-0-of-1.bin"
    assert store.load(2)[1] == [b"whole again"]
    # And the other way round: a later line in the log wins over the folder's manifest.
    with (tmp_path / links.log_name(0)).open("ab") as f:
        f.write(links.line("c", 2, json.dumps({**logged, "committed_at": 1e12}).encode()))
    assert store.load(2)[1] == [bytes([2]) * 50]


def test_links_files_are_never_recycled(tmp_path: Path) -> None:
    """A collection moves small files of deleted checkpoints to ``.recycle/`` to be
    written over; never a links file: a worker lost but still running may append to it,
    and would write into whatever part took its place."""
    assert recycled_after_a_collection(tmp_path) == []


def test_links_files_recycled_are_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: links files recycled like any other small file."""
    monkeypatch.setattr(links, "is_links_file", lambda name: False)
    assert recycled_after_a_collection(tmp_path) != []


def recycled_after_a_collection(root: Path) -> list[str]:
    """The sizes of the links files' length found in ``.recycle/`` after a collection that
    deletes two old chains (each part 50 bytes, each links file 150)."""
    store = CheckpointStore(str(root))
    chained(store, range(12), whole_every=4)
    store.collect_garbage(
        1, also=[11], folders={e: frozenset({e - e % 4}) for e in range(12)}, upto=11
    )
    assert not (root / epoch_dir(0)).exists() and not (root / epoch_dir(4)).exists()
    pool = root / RECYCLE
    return sorted(p.name for p in pool.iterdir() if p.is_file() and p.stat().st_size == 150)


def test_a_delta_follows_its_base_through_either_store_of_a_host(tmp_path: Path) -> None:
    """Inline, a worker's small parts go through the session's store and its large ones
    through the writer thread's (:meth:`CheckpointStore.sibling`). A delta goes after its
    base wherever that was written: after a restore (a whole part at 12 again, written by
    the thread's store), the delta at 13 is in the links file after that part, not after
    the attempt before's part at 12 (whose chain's folder the collection would not keep
    for it)."""
    assert delta_after_a_whole_part_elsewhere(tmp_path).startswith(f"{epoch_dir(12)}/links-")


def test_stores_of_one_host_with_chains_of_their_own_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: the thread's store keeps chains of its own."""
    monkeypatch.setattr(CheckpointStore, "sibling", lambda self: CheckpointStore(self.uri))
    assert delta_after_a_whole_part_elsewhere(tmp_path).startswith(f"{epoch_dir(10)}/links-")


def delta_after_a_whole_part_elsewhere(root: Path) -> str:
    """Where the delta at 13 goes: the first attempt wrote a whole part at 10 and deltas
    at 11 and 12 through the loop's store; the second, a whole part at 12 through the
    thread's."""
    loop = CheckpointStore(str(root))
    thread = loop.sibling()
    loop.write_part(10, 0, 1, b"whole")
    assert "offset" in loop.write_part(11, 0, 1, b"11", base=10)
    assert "offset" in loop.write_part(12, 0, 1, b"12", base=11)
    thread.write_part(12, 0, 1, b"whole again")  # the second attempt's
    info = loop.write_part(13, 0, 1, b"13", base=12)
    assert "offset" in info
    path: str = info["path"]
    return path


def test_an_unreadable_log_is_skipped_by_a_restore_and_stops_a_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit log that cannot be read for now: a restore takes the newest checkpoint it
    can read (as past an unreadable manifest), and the collection deletes nothing (the
    links its commits need may be in any folder)."""
    store = CheckpointStore(str(tmp_path))
    chained(store, range(8), whole_every=4)
    read = CheckpointStore.read

    def flaky(self: CheckpointStore, relpath: str) -> bytes:
        if relpath == links.log_name(4):
            raise OSError(5, "Input/output error", relpath)
        return read(self, relpath)

    monkeypatch.setattr(CheckpointStore, "read", flaky)
    found = store.newest("fp", "flow")
    assert found is not None and found[0] == 4  # 5-7 are in the log that cannot be read
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    store.collect_garbage(1, folders={e: frozenset({e - e % 4}) for e in range(8)}, upto=7)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    monkeypatch.setattr(CheckpointStore, "read", read)
    assert store.newest("fp", "flow")[0] == 7  # type: ignore[index]


def test_a_network_filesystem_writes_every_part_to_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory that is not on a local disk (:func:`links.appendable` says no, as for
    NFS) keeps a part and a manifest per checkpoint, each file closed when written."""
    monkeypatch.setattr(links, "appendable", lambda path, mounts=None: False)
    store = CheckpointStore(str(tmp_path))
    chained(store, range(4), whole_every=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [epoch_dir(e) for e in range(4)]
    manifest = store.manifests()[3]
    assert manifest["format"] == 2 and "offset" not in manifest["parts"][0]
    assert store.load(3)[1] == [bytes([3]) * 50]


def test_an_object_store_writes_every_part_to_a_folder(tmp_path: Path) -> None:
    """A store that is not a local directory (here pyarrow's in-memory one) cannot append:
    every delta is a part of its own and every commit a manifest, as before."""
    store = CheckpointStore("mock:///store")
    chained(store, range(4), whole_every=4)
    manifest = store.manifests()[3]
    assert manifest["format"] == 2
    assert [p["path"] for p in manifest["parts"]] == [f"{epoch_dir(3)}/part-0-of-1.bin"]
    assert "offset" not in manifest["parts"][0]
    assert store.load(3)[1] == [bytes([3]) * 50]
    assert os.listdir(tmp_path) == []


def test_a_later_runs_commits_after_an_old_floor_are_collected_too(tmp_path: Path) -> None:
    """Run A committed 1-5 on the chain from 0 and its collection left a floor at 5; run
    B (started over) wrote its part at 0 again and committed 1-3 after it. B's collection
    (one kept) hides B's 1 and 2 by a floor of its own, though a higher one is in the
    log already (that one hides only the lines before it)."""
    chained(CheckpointStore(str(tmp_path)), range(6), whole_every=6)
    a = CheckpointStore(str(tmp_path))
    a.collect_garbage(1, folders=dict.fromkeys(range(6), frozenset({0})), upto=5)
    assert sorted(a.manifests()) == [5]
    b = CheckpointStore(str(tmp_path))
    chained(b, range(4), whole_every=6)
    assert {1, 2, 3} <= set(b.manifests())
    b.collect_garbage(1, folders=dict.fromkeys(range(4), frozenset({0})), upto=3)
    assert sorted(b.manifests()) == [3, 5]  # (A's 5 is another run's: see the docs)


def test_a_log_line_stands_where_its_folders_manifest_cannot_be_read(tmp_path: Path) -> None:
    """Epoch 2 committed by a log line, and a folder manifest for 2 that cannot be read
    for now (here a folder in its place): a restore takes the line, as before; the
    collection, which cannot tell which is newer, deletes nothing."""
    store = CheckpointStore(str(tmp_path))
    chained(store, range(3), whole_every=3)
    (tmp_path / epoch_dir(2) / "MANIFEST.json").mkdir(parents=True)
    found = store.newest("fp", "flow")
    assert found is not None and found[0] == 2
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    store.collect_garbage(1, also=[2], upto=2)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_two_writers_never_share_a_links_file(tmp_path: Path) -> None:
    """Two stores (two attempts of a worker, or a lost one still running beside its
    replacement) continuing parts in one folder write links files of their own; a name
    taken already (a tag that collides) sends the part to a folder of its own."""
    first, second = CheckpointStore(str(tmp_path)), CheckpointStore(str(tmp_path))
    for store in (first, second):
        store.write_part(4, 0, 1, b"whole")
    one = first.write_part(5, 0, 1, b"5", base=4)
    two = second.write_part(5, 0, 1, b"five", base=4)
    assert one["path"] != two["path"] and one["offset"] == two["offset"] == 0
    third = CheckpointStore(str(tmp_path))
    third._unique = lambda: first._chains[0].relpath.rsplit("-", 1)[1][:-4]  # type: ignore[method-assign]
    third.write_part(4, 0, 1, b"whole")
    taken = third.write_part(5, 0, 1, b"again", base=4)
    assert taken["path"] == f"{epoch_dir(5)}/part-0-of-1.bin" and "offset" not in taken


def test_a_session_closes_the_files_it_kept_open(tmp_path: Path) -> None:
    """Links files and the commit log are closed when the session closes (not when its
    objects happen to be collected)."""
    assert open_under(tmp_path, run_incremental(tmp_path)) == []


def test_a_session_leaving_its_files_open_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a store whose ``close`` does nothing."""
    monkeypatch.setattr(CheckpointStore, "close", lambda self: None)
    assert open_under(tmp_path, run_incremental(tmp_path)) != []


def run_incremental(root: Path) -> Any:
    """An inline session with incremental checkpoints every epoch, closed, and kept
    (its store, coordinator and writer alive)."""
    session, _ = running_sums(root, [list(range(e, e + 3)) for e in range(6)], keys=50)
    assert any(p.name.startswith(links.LINKS) for p in root.rglob("*"))
    return session


def open_under(root: Path, keep: Any) -> list[str]:
    """This process's open files under ``root`` (``keep``: what holds them)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            out.append(target)
    assert keep is not None
    return out


def test_a_manifest_naming_a_link_in_a_links_file_says_format_3(tmp_path: Path) -> None:
    """A part written to a folder whose chain runs through a links file (its delta could
    not follow the links file: a tag taken) is committed by a manifest in its folder;
    that manifest names an offset, so it says format 3 (a timely before links files
    refuses it by its format rather than misreading the link)."""
    store = CheckpointStore(str(tmp_path))
    whole = store.write_part(4, 0, 1, b"whole")
    link = store.write_part(5, 0, 1, b"5", base=4)
    store._chains.clear()  # (as when the delta at 6 could not follow it)
    part = store.write_part(6, 0, 1, b"6", base=5)
    assert "offset" in link and "offset" not in part
    chain = [
        {"epoch": 5, **{k: v for k, v in link.items() if k != "base"}},
        {"epoch": 4, **{k: v for k, v in whole.items() if k != "base"}},
    ]
    store.commit(6, 1, "fp", "flow", [{**part, "chain": chain}])
    assert json.loads((tmp_path / epoch_dir(6) / "MANIFEST.json").read_text())["format"] == 3
    assert store.load(6)[1] == [b"6"]


def chain_run(root: Path, epochs: int = 12, keep: int = 2) -> list[str]:
    """Parts of one incremental chain (each a delta on the one before, with its chain as
    the coordinator records it), committed one by one and collected every fourth commit,
    as the coordinator does; what the store holds then. Every checkpoint kept reads
    back."""
    store = CheckpointStore(str(root))
    chain: list[dict[str, Any]] = []
    for epoch in range(epochs):
        data = bytes([epoch]) * 100
        info = store.write_part(epoch, 0, 1, data, base=None if epoch == 0 else epoch - 1)
        store.commit(epoch, 1, "fp", "flow", [{**info, "chain": chain}])
        chain = [{"epoch": epoch, **{k: v for k, v in info.items() if k != "base"}}, *chain]
        if epoch % 4 == 3:
            store.collect_garbage(
                keep, folders=dict.fromkeys(range(epoch + 1), frozenset({0})), upto=epoch
            )
    assert store.epochs() == [0, *range(epochs - keep, epochs)]
    for kept in range(epochs - keep, epochs):
        manifest, parts = store.load(kept)
        assert manifest["epoch"] == kept and parts[-1] == bytes([kept]) * 100
    # (a links file's name ends with its writer's own tag)
    return sorted(
        re.sub(r"-\w+\.bin$", "-<tag>.bin", str(p.relative_to(root)))
        if p.name.startswith("links-")
        else str(p.relative_to(root))
        for p in root.rglob("*")
        if RECYCLE not in p.parts
    )


def test_a_chains_links_and_commits_make_no_file_of_their_own(tmp_path: Path) -> None:
    """An incremental chain's deltas go to one links file after its whole part, and their
    commits to one log (:mod:`timely.checkpoint.links`): eleven checkpoints after the
    first make no folder or file, and the commits no longer kept are checkpoints no more
    (a floor in the log; the whole part's manifest gone, its part a link)."""
    assert chain_run(tmp_path) == [
        "ckpt-000000000000",
        "ckpt-000000000000/links-0-of-1-<tag>.bin",
        "ckpt-000000000000/part-0-of-1.bin",
        "commits-000000000000.log",
    ]


def test_deltas_written_to_folders_of_their_own_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a store that never continues a links file (each delta in a folder of
    its own, with its manifest, as before)."""

    class Forgetful(dict[int, Any]):
        def __setitem__(self, key: int, value: Any) -> None:
            pass

    init = CheckpointStore.__init__

    def forgetful(self: CheckpointStore, uri: str) -> None:
        init(self, uri)
        self._chains = Forgetful()

    monkeypatch.setattr(CheckpointStore, "__init__", forgetful)
    with pytest.raises((AssertionError, CheckpointError)):  # (or its deltas' folders go)
        test_a_chains_links_and_commits_make_no_file_of_their_own(tmp_path)


def test_a_kept_manifest_unreadable_for_now_deletes_none_of_its_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept checkpoint of an earlier run (the collection reads its manifest for the
    links its chain needs) whose manifest cannot be read for now: the collection deletes
    nothing, and the checkpoint still loads with its whole chain. Taking the error as
    "no links" (as the collection once did) deleted the chain's older parts."""
    store = CheckpointStore(str(tmp_path))
    linked: dict[int, dict[str, Any]] = {}
    for e in range(1, 5):  # a whole part, then deltas, each on the one before
        info = store.write_part(e, 0, 1, part(e, 0, 1), base=e - 1 if e > 1 else None)
        chain = [{"epoch": b, **linked[b]} for b in range(e - 1, 0, -1)]
        linked[e] = {k: info[k] for k in ("path", "size", "crc32", "offset") if k in info}
        if e in (1, 4):
            store.commit(e, 1, "fp", "f", [{**info, "chain": chain}])
    # 4's parts are all links (in the links file after the whole part at 1): its commit is
    # a line in the log of that folder, which cannot be read for now.
    manifest = links.log_name(1)
    assert (tmp_path / manifest).exists() and not (tmp_path / epoch_dir(4)).exists()
    read = CheckpointStore.read

    def flaky(self: CheckpointStore, relpath: str) -> bytes:
        if relpath == manifest:
            raise OSError(5, "Input/output error", relpath)
        return read(self, relpath)

    monkeypatch.setattr(CheckpointStore, "read", flaky)
    store.collect_garbage(1)
    monkeypatch.setattr(CheckpointStore, "read", read)
    chains = store._load(4)[2]
    assert [len(c) for c in chains] == [3]  # links 3, 2 and 1, read and verified
    assert (tmp_path / epoch_dir(1) / "MANIFEST.json").exists()  # nothing touched
    store.collect_garbage(1)  # readable again: the links stay, 1 is no checkpoint now
    assert [len(c) for c in store._load(4)[2]] == [3]
    assert manifests(tmp_path) == [4]


# -- whole parts: a run without incremental checkpoints ----------------------------------------


def whole_run(
    root: Path, epochs: int, keep: int = 2, sizes: tuple[int, ...] = (100, 100)
) -> tuple[CheckpointCoordinator, list[tuple[int, list[int]]]]:
    """A checkpoint of whole parts every epoch, each worker (one a size in ``sizes``)
    writing through a store of its own (as on Ray), committed by a coordinator; after each
    commit, the epochs listed as checkpoints. Every kept checkpoint reads back at the
    end."""
    workers = len(sizes)
    coordinator = CheckpointCoordinator(
        CheckpointConfig(uri=str(root), keep=keep), "flow", "fp", workers, []
    )
    stores = [CheckpointStore(str(root)) for _ in range(workers)]
    seen = []
    for epoch in range(epochs):
        for w, store in enumerate(stores):
            data = bytes([epoch % 251, w]) * (sizes[w] // 2)
            coordinator.part_written(epoch, store.write_part(epoch, w, workers, data))
        seen.append((epoch, sorted(manifests(root))))
    coordinator.settle()
    for epoch in coordinator.committed[-keep:]:
        assert coordinator.store.load(epoch)[1] == [
            bytes([epoch % 251, w]) * (sizes[w] // 2) for w in range(workers)
        ]
    return coordinator, seen


def layout(root: Path) -> list[str]:
    """What a store holds, links files' tags taken out."""
    return sorted(
        re.sub(r"-\w+\.bin$", "-<tag>.bin", str(p.relative_to(root)))
        if p.name.startswith(links.LINKS)
        else str(p.relative_to(root))
        for p in root.rglob("*")
        if RECYCLE not in p.parts
    )


def test_whole_parts_go_into_links_files_and_their_commits_into_a_log(tmp_path: Path) -> None:
    """After each worker's first part, every whole part goes after it in its links file
    and every commit into one log: 30 checkpoints make no other folder or file. Each
    commit's floor leaves exactly the checkpoints kept listed, and the first one's
    manifest goes as soon as it is not kept."""
    _, seen = whole_run(tmp_path, 30)
    assert seen[:3] == [(0, [0]), (1, [0, 1]), (2, [1, 2])]
    assert all(listed == [max(0, e - 1), e][-(e + 1) :] for e, listed in seen)
    assert layout(tmp_path) == [
        "ckpt-000000000000",
        "ckpt-000000000000/links-0-of-2-<tag>.bin",
        "ckpt-000000000000/links-1-of-2-<tag>.bin",
        "ckpt-000000000000/part-0-of-2.bin",
        "ckpt-000000000000/part-1-of-2.bin",
        "commits-000000000000.log",
    ]


def test_commits_without_a_floor_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a commit that writes no floor (the commits no longer kept stay listed
    as checkpoints until a collection, every few dozen commits)."""
    commit = CheckpointStore.commit

    def without_floor(self: CheckpointStore, *args: Any, floor: int | None = None) -> bool:
        return commit(self, *args)

    monkeypatch.setattr(CheckpointStore, "commit", without_floor)
    with pytest.raises(AssertionError):
        test_whole_parts_go_into_links_files_and_their_commits_into_a_log(tmp_path)


def test_a_full_links_file_begins_a_folder_and_the_old_one_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole part that would take a links file past ``FILE_BYTES`` begins a folder of
    its own; once no kept checkpoint has bytes in the older folder, the collection soon
    deletes it with its log, and every kept checkpoint reads back."""
    monkeypatch.setattr(links, "FILE_BYTES", 1000)  # a folder's part, then 10 in its file
    coordinator, seen = whole_run(tmp_path, 40)
    folders = sorted(p.name for p in tmp_path.glob("ckpt-*"))
    assert folders == [epoch_dir(33)]  # (0, 11, 22 and 33 were made)
    assert sorted(p.name for p in tmp_path.glob("commits-*")) == [links.log_name(33)]
    assert sorted(coordinator.store.manifests()) == [38, 39]
    # Whichever folder and log a commit went to, only the kept ones were listed after it.
    assert all(listed == [e - 1, e] for e, listed in seen[1:])


def test_a_worker_with_small_parts_keeps_no_other_workers_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker's parts are small (little state), the other's fill a links file every
    other checkpoint: the small one's folder stays while kept checkpoints have bytes in
    it, but the large one's older folders go (the collection keeps each kept
    checkpoint's own folders, not every folder since the oldest of them; before, 60
    checkpoints left 30 folders). After ``FILE_PARTS`` parts the small one moves on too."""
    monkeypatch.setattr(links, "FILE_BYTES", 1000)
    monkeypatch.setattr(links, "FILE_PARTS", 40)
    whole_run(tmp_path, 60, sizes=(10, 400))
    folders = sorted(int(p.name.split("-")[1]) for p in tmp_path.glob("ckpt-*"))
    assert folders[0] == 41 and len(folders) <= 3, folders  # (the small one's, since 41)
    assert len(list(tmp_path.glob("commits-*"))) <= 3


def test_a_collection_keeping_every_folder_since_the_oldest_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: each kept checkpoint keeping every folder from its oldest one on (as
    the collection once kept a chain's range of folders)."""
    collect = coordinator_module._Collector.collect

    def ranges(self: Any, kept: list[int], folders: dict[int, frozenset[int]]) -> None:
        collect(self, kept, {e: frozenset(range(min(f), e + 1)) for e, f in folders.items()})

    monkeypatch.setattr(coordinator_module._Collector, "collect", ranges)
    with pytest.raises(AssertionError):
        test_a_worker_with_small_parts_keeps_no_other_workers_folders(tmp_path, monkeypatch)


def test_a_commit_torn_by_a_full_disk_hides_no_checkpoint_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit's line and its floor go in one write; a short one (a full disk) fails the
    commit. Whatever part of it reached the log, the checkpoints kept before stay listed
    and restorable (the floor comes after the line: torn, it hides nothing kept)."""
    store = CheckpointStore(str(tmp_path))
    for epoch in range(5):  # keep 1: each commit's floor at itself
        parts = [store.write_part(epoch, w, 2, bytes([epoch, w]) * 50) for w in (0, 1)]
        store.commit(epoch, 2, "fp", "flow", parts, floor=epoch)
    store.drop_commit(0)  # (the first, in its folder: as the coordinator drops it)
    assert sorted(store.manifests()) == [4]
    write = links._write_once

    def short(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) - 5])
        raise OSError(28, "No space left on device")

    parts = [store.write_part(5, w, 2, bytes([5, w]) * 50) for w in (0, 1)]
    assert all("offset" in p for p in parts)  # (committed by a line in the log)
    monkeypatch.setattr(links, "_write_once", short)
    with pytest.raises(CheckpointError):
        store.commit(5, 2, "fp", "flow", parts, floor=5)
    monkeypatch.setattr(links, "_write_once", write)
    assert sorted(store.manifests()) == [4, 5]  # (5's line whole, its floor torn)
    assert store.load(4)[1] == [bytes([4, w]) * 50 for w in (0, 1)]


def test_a_floor_before_its_commit_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: the floor written before the commit's line, so that a write torn in
    the line leaves the floor, which hides the checkpoint kept before."""
    append = links.Log.append

    def floor_first(self: links.Log, data: bytes) -> None:
        lines = [line for line in data.split(b"\n") if line]
        append(self, b"".join(b"\n%s\n" % line for line in reversed(lines)))

    monkeypatch.setattr(links.Log, "append", floor_first)
    with pytest.raises(AssertionError):
        test_a_commit_torn_by_a_full_disk_hides_no_checkpoint_kept(tmp_path, monkeypatch)


def test_a_collection_that_takes_a_part_for_its_own_folders_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: the coordinator taking a checkpoint's bytes to be in its own folder
    (its chain's start, as before whole parts went into links files): the collection
    deletes the folder the kept checkpoints' links files are in."""
    monkeypatch.setattr(links, "FILE_BYTES", 1000)
    monkeypatch.setattr(coordinator_module, "home", lambda entry: entry.get("epoch", 10**9))
    with pytest.raises((AssertionError, CheckpointError)):
        whole_run(tmp_path, 40)


def test_a_whole_part_after_a_delta_begins_a_folder() -> None:
    """Each incremental chain keeps its own folder and log (so that the commits a
    collection keeps in a log are its newest): a links file that holds a delta takes no
    whole part; one of whole parts alone takes them while within ``FILE_BYTES``."""
    chain = links.Chain("/nowhere", epoch_dir(0), 0, 1, 0, "t")
    assert chain.takes_whole(100)
    chain.end, chain.deltas = 100, True
    assert not chain.takes_whole(100)
    chain.deltas = False
    assert not chain.takes_whole(links.FILE_BYTES - 99)
    chain.end, chain.parts = 0, links.FILE_PARTS  # (a log of that many lines: enough)
    assert not chain.takes_whole(100)


def test_whole_parts_after_deltas_in_one_file_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: a whole part appended after a chain's deltas (chains share a log, and
    a collection keeping a chain and the checkpoint before it leaves the commits between
    them listed)."""
    monkeypatch.setattr(
        links.Chain, "takes_whole", lambda self, size: self.end + size <= links.FILE_BYTES
    )
    with pytest.raises(AssertionError):
        test_a_log_goes_with_its_chain_and_a_floor_hides_what_is_not_kept(tmp_path)


def test_a_collection_run_late_deletes_nothing_a_later_commit_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collection runs on a thread of its own, so it may run after later commits,
    whose floors hide the checkpoints it was asked to keep. Those were in the folder the
    later ones are in too (each worker's whole parts one after the other in its links
    file): every collection the run asked for, run after the whole run, leaves the newest
    checkpoints readable. (Caught: a collection that looked only at the checkpoints still
    listed, and deleted the folder as no kept one's.)"""
    asked: list[tuple[list[int], dict[int, frozenset[int]]]] = []

    def held(self: Any, kept: list[int], folders: dict[int, frozenset[int]]) -> None:
        asked.append((kept, folders))

    monkeypatch.setattr(coordinator_module._Collector, "collect", held)
    coordinator, _ = whole_run(tmp_path, 30)
    monkeypatch.undo()
    assert len(asked) >= 2
    collector = coordinator_module._Collector(coordinator.store, 2)
    for kept, folders in asked:
        collector.collect(kept, folders)
        collector.settle()
        for epoch in coordinator.committed[-2:]:
            assert coordinator.store.load(epoch)[1] == [bytes([epoch, w]) * 50 for w in (0, 1)]


def test_a_worker_that_left_and_joined_again_begins_a_folder(tmp_path: Path) -> None:
    """Inline, every worker's parts go through one store. Worker 2 of 3 leaves the run
    live; the collection deletes the folder of its links file once no kept checkpoint has
    bytes there; a worker 2 of 3 joins again: its parts go to a folder of their own, not
    after its old chain in a file no longer there, and the checkpoints restore."""
    members: dict[int, int] = {}
    coordinator = CheckpointCoordinator(
        CheckpointConfig(uri=str(tmp_path), keep=2), "flow", "fp", 3, []
    )
    coordinator.workers_at = members.__getitem__
    store = coordinator.store
    for epoch, n in enumerate([3] * 5 + [2] * 20 + [3] * 3):
        members[epoch] = n
        for w in range(n):
            data = bytes([epoch, w]) * 50
            coordinator.part_written(epoch, store.write_part(epoch, w, n, data))
    coordinator.settle()
    for epoch in coordinator.committed[-2:]:
        assert store.load(epoch)[1] == [bytes([epoch, w]) * 50 for w in range(3)]


def test_a_commit_that_fails_in_a_new_log_hides_nothing_in_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit whose parts moved to another folder's log writes the floor into the old
    log only once its own line is in: when the new log cannot be written (a full disk),
    the checkpoints kept before stay listed."""
    store = CheckpointStore(str(tmp_path))
    committed: list[int] = []

    def commit(epoch: int) -> None:
        parts = [store.write_part(epoch, w, 2, bytes([epoch, w]) * 50) for w in (0, 1)]
        store.commit(epoch, 2, "fp", "flow", parts, floor=[*committed[-1:], epoch][0])
        committed.append(epoch)

    for epoch in range(5):
        commit(epoch)
    store._chains.pop(0).close()  # (worker 0's links file full: its next part to a folder)
    commit(5)
    commit(6)  # (its parts in folders 0 and 5: log 0)
    store._chains.pop(1).close()
    commit(7)
    parts = [store.write_part(8, w, 2, bytes([8, w]) * 50) for w in (0, 1)]  # (log 5)
    write = links._write_once

    def full(fd: int, data: bytes) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(links.log_name(5)):
            raise OSError(28, "No space left on device")
        write(fd, data)

    monkeypatch.setattr(links, "_write_once", full)
    with pytest.raises(CheckpointError, match="commit log"):
        store.commit(8, 2, "fp", "flow", parts, floor=7)
    assert {6, 7} <= set(store.manifests())


def test_the_incremental_fallback_is_one_the_last_commit_kept(tmp_path: Path) -> None:
    """keep 1, incremental: when the oldest chain starts again, the newest commit before it
    may be a link by now (its manifest dropped by a collection): the fallback is the newest
    before the chain of those the last commit kept, which restores."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(coordinator_module, "COLLECT_EVERY", 1)
    try:
        coordinator = CheckpointCoordinator(
            CheckpointConfig(uri=str(tmp_path), keep=1, incremental=3), "f", "fp", 2, []
        )
        stores = [coordinator.store.sibling(), coordinator.store.sibling()]
        last: list[int | None] = [None, None]

        def checkpoint(epoch: int, whole: tuple[bool, bool]) -> None:
            for w in (0, 1):
                base = None if whole[w] else last[w]
                info = stores[w].write_part(epoch, w, 2, bytes([epoch, w]) * 20, base=base)
                coordinator.part_written(epoch, info)
                last[w] = epoch
            coordinator.settle()

        checkpoint(0, (True, True))
        checkpoint(1, (True, True))
        for epoch in range(2, 6):
            checkpoint(epoch, (False, False))
        checkpoint(6, (False, True))  # worker 1 begins a chain; worker 0's from 1 goes on
        checkpoint(7, (False, False))
        checkpoint(8, (True, False))  # worker 0 begins one: the oldest chain is from 6
        listed = sorted(coordinator.store.manifests())
        assert len(listed) == 2 and listed[-1] == 8
        for epoch in listed:  # the fallback too
            coordinator.store.load(epoch)
    finally:
        monkeypatch.undo()


def test_a_run_resumed_from_an_earlier_ones_checkpoint_never_starts_over_silently(
    tmp_path: Path,
) -> None:
    """A run resumed from an earlier run's checkpoint at 5 logs none of the driver's
    inputs up to 5. Once its own commit left 5 unkept, a recovery that finds that commit
    damaged cannot start from nothing: it stops with an error naming what to do."""

    def run(epochs: range) -> CheckpointCoordinator:
        coordinator = CheckpointCoordinator(
            CheckpointConfig(uri=str(tmp_path), keep=1), "f", "fp", 1, []
        )
        coordinator.initial_restore()
        for epoch in epochs:
            info = coordinator.store.write_part(epoch, 0, 1, bytes([epoch]) * 40)
            coordinator.part_written(epoch, info)
        coordinator.settle()
        return coordinator

    run(range(6)).store.close()
    coordinator = run(range(6, 7))
    assert coordinator.restored_epoch == 5 and sorted(coordinator.store.manifests()) == [6]
    damage(tmp_path, coordinator.store.manifests()[6]["parts"][0])
    with pytest.raises(CheckpointError, match="keep_checkpoints="):
        coordinator.load_restore()


def test_after_a_restore_that_fell_back_the_fallback_is_the_one_restored(
    tmp_path: Path,
) -> None:
    """keep 1, incremental: the newest checkpoint is damaged, a recovery restores the
    fallback before it; when a chain begins after the damaged one, the next fallback is
    the checkpoint restored, not the damaged one (which the last commit had kept)."""
    coordinator = CheckpointCoordinator(
        CheckpointConfig(uri=str(tmp_path), keep=1, incremental=3), "f", "fp", 1, []
    )
    store = coordinator.store.sibling()
    last: list[int | None] = [None]

    def checkpoint(epoch: int, whole: bool) -> None:
        info = store.write_part(epoch, 0, 1, bytes([epoch]) * 30, base=None if whole else last[0])
        coordinator.part_written(epoch, info)
        last[0] = epoch

    for epoch in range(6):
        checkpoint(epoch, epoch in (0, 4))
    coordinator.settle()
    damage(tmp_path, coordinator.store.manifests()[5]["parts"][0])
    restored = coordinator.load_restore()
    assert restored is not None and restored[0] == 3
    store.close()
    last[0] = None
    for epoch in range(4, 8):
        checkpoint(epoch, epoch == 6)  # (4 and 5 again: not committed; a chain from 6)
    coordinator.settle()
    assert coordinator.committed[-1] == 7
    for epoch in sorted(coordinator.store.manifests()):
        if epoch in (3, 7):
            coordinator.store.load(epoch)
    assert 3 in coordinator.store.manifests()
