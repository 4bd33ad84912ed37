"""Incremental checkpoints: a part holds what changed since the worker's part before; a
restore applies the chain on the whole part it starts from, and a damaged or missing
link makes it fall back to an older checkpoint whose chain holds."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import timely.state.keyed
from tests.checkpoint import mutable
from tests.checkpoint.pipelines import build
from timely import ConfigError, Dataflow, exchange
from timely.checkpoint import coordinator as coordinator_module
from timely.checkpoint import links
from timely.checkpoint.store import RECYCLE, CheckpointError, CheckpointStore
from timely.state.keyed import KeyedState, apply_delta

# -- the table level: a delta applied on its base is the whole snapshot ------------------------

ops_st = st.lists(
    st.tuples(
        st.sampled_from(["set", "del", "snap", "time", "batch"]),
        st.integers(0, 12),  # a key, or a per-time table's epoch
        st.integers(0, 99),
    ),
    max_size=60,
)


def replay(
    ops: list[tuple[str, int, int]], every: int, ordered: bool = True
) -> list[tuple[Any, Any, Any]]:
    """Run ``ops`` on an incremental table (changes reported, as the operators do);
    at each ``snap``, take a whole snapshot and a delta on the one ``every`` snapshots
    before (a chain) and return both, with the whole one the delta's base had."""
    state: KeyedState[int] = KeyedState(tracked=True, incremental=True)
    state.ordered = ordered
    state.keep_changes()
    carried = (0,)
    taken: dict[int, Any] = {}
    out = []
    for epoch, (op, key, value) in enumerate(ops):
        if op == "set":
            table = state.table(carried)
            table.pop(key, None)  # to the end, as map_with_state keeps its table
            table[key] = value
            if value % 2:
                state.touched(carried, [key])
            else:
                state.changed(carried, [(key, value)])  # the value reported with the key
        elif op == "batch":  # keys set at once, each once, their values in one list
            table = state.table(carried)
            pairs = []
            for k in range(key, key + 3):
                table.pop(k, None)
                table[k] = value + k
                pairs.append((k, value + k))
            state.changed(carried, pairs, distinct=True)
            pairs.clear()  # the caller's own list again (running_reduce sends it on)
        elif op == "del":
            if state.table(carried).pop(key, None) is not None:
                state.touched(carried, [key])
        elif op == "time":  # a per-time table made or dropped (its keys reported too)
            t = (key + 1,)
            if state.get(t) is None:
                state.table(t)[value] = key
                state.touched(t, [value])
            else:
                state.touched(t, list(state.pop(t)))
        else:
            whole = state.snapshot(epoch)
            bases = sorted(taken)
            base = bases[-every] if len(bases) >= every else None
            if base is not None:
                out.append((taken[base], state.delta(epoch, base), whole))
            taken[epoch] = whole
            state.taken(epoch)
    return out


@settings(max_examples=200, deadline=None)
@given(ops_st, st.integers(1, 3))
def test_a_delta_on_its_base_gives_the_whole_snapshot_in_order(
    ops: list[tuple[str, int, int]], every: int
) -> None:
    for base, delta, whole in replay(ops, every):
        assert apply_delta(base, delta) == whole


@settings(max_examples=100, deadline=None)
@given(ops_st, st.integers(1, 3))
def test_an_unordered_table_gets_its_contents_back(
    ops: list[tuple[str, int, int]], every: int
) -> None:
    """A table whose order does not matter (running_reduce's, join_streaming's) records
    its changes more cheaply; a delta gives back the same keys and values."""
    for base, delta, whole in replay(ops, every, ordered=False):
        got = apply_delta(base, delta)
        assert {tuple(t): dict(zip(k, v, strict=True)) for t, k, v in got["times"]} == {
            tuple(t): dict(zip(k, v, strict=True)) for t, k, v in whole["times"]
        }


@settings(max_examples=100, deadline=None)
@given(ops_st)
def test_a_chain_applied_in_one_pass_gives_the_last_whole_snapshot(
    ops: list[tuple[str, int, int]],
) -> None:
    """Each snapshot a delta on the one before: the first whole one with every delta
    applied in one pass (as a restore does) is the last whole one."""
    steps = replay(ops, 1)
    if steps:
        first = steps[0][0]
        assert timely.state.keyed.apply_deltas(first, [d for _, d, _ in steps]) == steps[-1][2]


_changed = KeyedState.changed


def _changed_once(self: KeyedState[Any], time: Any, pairs: Any, distinct: bool = False) -> None:
    """The mutant: a list of distinct pairs taken as every change at its time, over the
    changes recorded before it since the last snapshot."""
    if self._changes is not None and distinct:
        self._changes[time] = timely.state.keyed._Pairs(pairs)
    else:
        _changed(self, time, pairs)


def _changed_forgetting(
    self: KeyedState[Any], time: Any, pairs: Any, distinct: bool = False
) -> None:
    """The mutant: a change after a list of distinct pairs starts again from nothing."""
    if self._changes is not None and type(self._changes.get(time)) is timely.state.keyed._Pairs:
        del self._changes[time]
    _changed(self, time, pairs, distinct)


@pytest.mark.parametrize("mutant", [_changed_once, _changed_forgetting])
def test_mutation_a_list_of_changes_merged_wrongly_is_caught(
    monkeypatch: pytest.MonkeyPatch, mutant: Any
) -> None:
    """Changes reported as one list of distinct pairs (running_reduce's) are kept as that
    list until another change comes at the same time: one that drops the changes before
    the list, or the list itself, gives a delta that is not the whole snapshot."""
    ops = [
        *(("batch", k, 0) for k in (10, 13, 16, 19)),  # (a delta smaller than its table)
        ("set", 9, 2),
        ("snap", 0, 0),
        ("set", 8, 4),
        ("batch", 0, 1),
        ("set", 1, 6),
        ("snap", 0, 0),
        ("batch", 3, 5),
        ("set", 4, 8),
        ("snap", 0, 0),
    ]
    for every in (1, 2):
        for base, delta, whole in replay(ops, every):
            assert apply_delta(base, delta) == whole
    with monkeypatch.context() as m:
        m.setattr(KeyedState, "changed", mutant)
        steps = replay(ops, 1)
    assert any(apply_delta(base, delta) != whole for base, delta, whole in steps)


def test_mutation_applying_changes_in_place_loses_the_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table kept in order of last use (map_with_state's expiry pops its front) must
    come back in that order: applying a changed key in place, without moving it to the
    end, is caught."""
    ops = [("set", 1, 1), ("set", 2, 2), ("snap", 0, 0), ("set", 1, 5), ("snap", 0, 0)]

    def in_place(base: Any, delta: Any) -> Any:
        tables = {tuple(t): dict(zip(k, v, strict=True)) for t, k, v in base["times"]}
        for t, keys, values, _ in delta["patches"]:
            tables[tuple(t)].update(zip(keys, values, strict=True))
        return {**base, "times": [(t, list(d), list(d.values())) for t, d in tables.items()]}

    ((base, delta, whole),) = replay(ops, 1)
    assert apply_delta(base, delta) == whole
    assert in_place(base, delta) != whole


# -- the run level -----------------------------------------------------------------------------

EPOCHS = [[(e * 7 + i * 3) % 40 for i in range(e % 4 + 2)] for e in range(12)]


def manifests(root: Path) -> dict[int, dict[str, Any]]:
    """Every committed checkpoint's manifest, in a folder or a commit log (read during a
    run: old checkpoints are deleted meanwhile, off its thread)."""
    return CheckpointStore(str(root)).manifests()


def stopped_run(root: Path, pipeline: str, last: int, **options: Any) -> dict[int, Any]:
    """Epochs ``0..last`` complete with a checkpoint after each; the input stays open, as
    in a driver that died. Returns the outputs."""
    flow, out = build(pipeline, EPOCHS[: last + 1])
    flow._inputs[0].advance_to(last + 1)
    session = flow.activate(workers=2, backend="inline", checkpoint=str(root), **options)
    assert session.committed[-1] == last
    session.close()
    return out


def resumed(root: Path, pipeline: str, **options: Any) -> tuple[int, dict[int, Any]]:
    flow, got = build(pipeline, EPOCHS)
    session = flow.activate(workers=2, backend="inline", checkpoint=str(root), **options)
    for h in flow._inputs:
        h.close()
    session.join()
    return session.restored_epoch, got


@pytest.mark.parametrize("pipeline", ["running", "sessions"])
def test_a_chain_restores_what_a_whole_checkpoint_would(tmp_path: Path, pipeline: str) -> None:
    """Parts are deltas on the part before, a whole one after every three; the manifest
    names each part's base and the chain back to a whole part, with each file's size and
    checksum; resuming from the newest (a delta) gives the outputs of a run without
    a stop. Old checkpoints go, but not the parts a kept chain needs."""
    flow, expected = build(pipeline, EPOCHS)
    flow.run(workers=2, backend="inline")
    stopped_run(tmp_path, pipeline, 7, checkpoint_incremental=3, keep_checkpoints=1)
    found = manifests(tmp_path)
    part = found[7]["parts"][0]
    # Whole parts at 0 and 4, three deltas after each: 7 is on 6, on 5, on the whole 4.
    assert part["base"] == 6 and [link["epoch"] for link in part["chain"]] == [6, 5, 4]
    assert all("crc32" in link and link["size"] > 0 for link in part["chain"])
    # One checkpoint kept, 7, and the newest before its chain began, 3 (a damaged link
    # of 7's chain leaves 3 to fall back to), each with the chain it needs; the chains'
    # parts are no checkpoints of their own any more (no inputs are kept for them).
    assert list(found) == [3, 7]
    # The deltas are in a links file after each whole part, at their offsets, and their
    # commits in the log of their chains' folder (no folder or file of their own); the
    # whole parts' manifests wait in RECYCLE, to be written over by the next ones.
    links_file = part["path"]
    assert re.fullmatch(r"ckpt-000000000004/links-0-of-2-\w+\.bin", links_file)
    assert [(link["path"], link.get("offset")) for link in part["chain"][:2]] == [
        (links_file, part["chain"][1]["size"]),
        (links_file, 0),
    ]
    assert sorted(set(os.listdir(tmp_path)) - {RECYCLE}) == [
        "ckpt-000000000000",
        "ckpt-000000000004",
        "commits-000000000000.log",
        "commits-000000000004.log",
    ]
    restored, got = resumed(tmp_path, pipeline)
    assert restored == 7
    assert got == {e: r for e, r in expected.items() if e > 7}


STATE = {"memory": {}, "disk": {"state_backend": "disk", "state_cache": 1}}
"""The runs of the fault tests on both state backends."""


@pytest.mark.parametrize("state", sorted(STATE))
def test_a_torn_increment_falls_back_to_the_chain_before(tmp_path: Path, state: str) -> None:
    """A link of the newest chain fails its checksum: loading that checkpoint names the
    file, and a resume falls back to the newest checkpoint whose chain holds (one whose
    chain ends before the torn part), with nothing lost; the state on either backend."""
    flow, expected = build("running", EPOCHS)
    flow.run(workers=2, backend="inline")
    stopped_run(
        tmp_path, "running", 7, checkpoint_incremental=3, keep_checkpoints=8, **STATE[state]
    )
    link = manifests(tmp_path)[5]["parts"][1]  # worker 1's delta at 5, in a links file
    assert re.fullmatch(r"ckpt-000000000004/links-1-of-2-\w+\.bin", link["path"])
    assert link["offset"] == 0
    damage(tmp_path, link)
    store = CheckpointStore(str(tmp_path))
    for epoch in (5, 6, 7):
        with pytest.raises(
            CheckpointError, match=r"ckpt-000000000004/links-1-of-2-\w+\.bin \(at 0\) fails"
        ):
            store.load(epoch)
    restored, got = resumed(tmp_path, "running", **STATE[state])
    assert restored == 4
    assert got == {e: r for e, r in expected.items() if e > 4}


@pytest.mark.parametrize("state", sorted(STATE))
def test_a_missing_increment_falls_back_too(tmp_path: Path, state: str) -> None:
    flow, expected = build("running", EPOCHS)
    flow.run(workers=2, backend="inline")
    stopped_run(
        tmp_path, "running", 7, checkpoint_incremental=3, keep_checkpoints=8, **STATE[state]
    )
    (tmp_path / "ckpt-000000000004" / "part-0-of-2.bin").unlink()
    with pytest.raises(CheckpointError, match=r"ckpt-000000000004/part-0-of-2\.bin"):
        CheckpointStore(str(tmp_path)).load(6)
    restored, got = resumed(tmp_path, "running", **STATE[state])
    assert restored == 3  # 4..7 all need the missing part
    assert got == {e: r for e, r in expected.items() if e > 3}


@pytest.mark.parametrize("state", sorted(STATE))
@pytest.mark.parametrize("workers", [1, 3])
def test_a_chain_restores_on_another_worker_count(tmp_path: Path, workers: int, state: str) -> None:
    """A rescale on restore makes each old worker's chain whole before re-partitioning."""
    flow, expected = build("running", EPOCHS)
    flow.run(workers=2, backend="inline")
    # (a count: with True, this small state's deltas soon add up to half a whole part)
    stopped_run(tmp_path, "running", 6, checkpoint_incremental=10, **STATE[state])
    assert manifests(tmp_path)[6]["parts"][0]["chain"]  # a delta
    flow, got = build("running", EPOCHS)
    session = flow.activate(
        workers=workers, backend="inline", checkpoint=str(tmp_path), **STATE[state]
    )
    for h in flow._inputs:
        h.close()
    session.join()
    assert session.restored_epoch == 6
    assert got == {e: r for e, r in expected.items() if e > 6}


def test_delta_parts_write_what_changed(tmp_path: Path) -> None:
    """5,000 keys loaded, then each epoch touches 5: the deltas are a small fraction of
    a whole part (checkpoint bytes follow the keys touched, not the state)."""
    import operator

    flow = Dataflow("touched")
    handle = flow.new_input("keys")
    handle.stream.running_reduce(lambda k: k, operator.add, value=lambda k: 1).collect("c")
    with flow.activate(
        workers=1,
        backend="inline",
        checkpoint=str(tmp_path),
        checkpoint_incremental=5,
        keep_checkpoints=10,
    ) as session:
        handle.send(list(range(5000)))
        for e in range(1, 6):
            handle.advance_to(e)
            handle.send([e, e + 100, e + 200, e + 300, e + 400])
        handle.close()
        session.join()
    sizes = {e: m["parts"][0]["size"] for e, m in manifests(tmp_path).items()}
    assert manifests(tmp_path)[0]["parts"][0]["base"] is None
    assert all(manifests(tmp_path)[e]["parts"][0]["base"] == e - 1 for e in range(1, 6))
    assert all(sizes[e] * 20 < sizes[0] for e in range(1, 6)), sizes


def test_bad_incremental_option_is_refused_before_the_run(tmp_path: Path) -> None:
    flow, _ = build("running", EPOCHS[:2])
    with pytest.raises(ConfigError, match="checkpoint_incremental must be True"):
        flow.run(workers=2, backend="inline", checkpoint=str(tmp_path), checkpoint_incremental=0)
    with pytest.raises(ConfigError, match="need checkpoint="):
        flow.run(workers=2, backend="inline", checkpoint_incremental=True)


def test_unreported_keys_in_an_incremental_table_are_the_operators_contract() -> None:
    """The table trusts its operator: a key changed without ``touched`` is not in the
    delta (which is why only operators that report opt in with ``incremental=True``)."""
    state: KeyedState[int] = KeyedState(tracked=True, incremental=True)
    state.keep_changes()
    state.table((0,))[1] = 1
    state.touched((0,), [1])
    base = state.snapshot(0)
    state.taken(0)
    state.table((0,))[2] = 2  # unreported
    assert state.delta(1, 0)["patches"] == []
    assert timely.state.keyed.apply_delta(base, state.delta(1, 0)) != state.snapshot(1)


def test_a_delta_on_a_part_never_written_is_never_committed(tmp_path: Path) -> None:
    """A worker's delta on a part the driver never saw written (a part given up after a
    later one had begun on it) cannot be restored, nor can the deltas on it: none of them
    is committed, and the next whole part commits again."""
    from timely.checkpoint.config import CheckpointConfig
    from timely.checkpoint.coordinator import CheckpointCoordinator

    store = CheckpointStore(str(tmp_path))
    coordinator = CheckpointCoordinator(
        CheckpointConfig(uri=str(tmp_path), incremental=3), "flow", "fp", 1, []
    )

    def written(epoch: int, base: int | None) -> None:
        coordinator.part_written(epoch, store.write_part(epoch, 0, 1, b"part", base))

    written(1, None)
    written(2, 1)
    written(4, 3)  # 3 was given up, never written
    written(5, 4)
    written(6, None)
    assert coordinator.committed == [1, 2, 6]
    chain = manifests(tmp_path)[2]["parts"][0]["chain"]
    assert [link["epoch"] for link in chain] == [1]


def test_checkpoints_by_time_keep_committing(tmp_path: Path) -> None:
    """With checkpoint_interval a worker may begin a part the driver then gives up (another
    worker refused the epoch): the next part is whole, not a delta on a part never
    written, so checkpoints go on committing to the end of the run."""
    epochs = [[(e * 7 + i * 5) % 23 for i in range(4 + e % 3)] for e in range(150)]
    for seed in (3, 4, 5):
        flow, _ = build("running", epochs, True)
        session = flow.activate(
            workers=3,
            backend="inline",
            checkpoint=str(tmp_path / str(seed)),
            checkpoint_interval=1e-6,
            checkpoint_incremental=True,
            seed=seed,
        )
        session.join()
        committed = session.coordinator.committed
        assert len(committed) >= 3 and committed[-1] > 100, (seed, committed)


def test_a_restore_never_falls_back_to_a_chain_link(tmp_path: Path) -> None:
    """The parts a kept chain needs outlive their checkpoints, whose driver inputs are gone:
    when the newest chain is damaged (both kept checkpoints share the link), a restore in
    the same run must not use one of them (it would lack inputs to replay). It falls back
    to the checkpoint kept from before the chain began, and the outputs are right."""

    def go(damage: bool) -> list[Any]:
        root = tmp_path / ("damaged" if damage else "clean")
        fired: list[bool] = []

        def add(a: int, b: int) -> int:
            if damage and not fired and b >= 80:  # epoch 8: damage a link, then fail
                fired.append(True)
                newest = max(manifests(root))
                victim = root / manifests(root)[newest]["parts"][0]["chain"][0]["path"]
                data = bytearray(victim.read_bytes())
                data[len(data) // 2] ^= 0xFF
                victim.write_bytes(bytes(data))
                raise RuntimeError("a failure after the damage")
            return a + b

        flow = Dataflow("fallback")
        handle = flow.new_input("x")
        handle.stream.running_reduce(lambda x: x % 4, add).collect("c")
        session = flow.activate(
            workers=1,
            backend="inline",
            checkpoint=str(root),
            on_error="restore",
            checkpoint_incremental=3,
            keep_checkpoints=2,
        )
        for e in range(12):
            handle.send([e * 10 + i for i in range(4)])
            handle.advance_to(e + 1)
        handle.close()
        return sorted(session.join()["c"])

    assert go(True) == go(False)


def test_a_collection_run_late_keeps_what_its_commit_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old checkpoints are deleted on a thread of their own, so a collection may run after
    later commits are written. It must act as at its own commit: counting the later ones
    among the newest ``keep`` once dropped the checkpoint from before the chain began (the
    fallback the coordinator kept; CI saw a restore then find nothing). Every collection a
    run asked for is run here after the whole run: none may touch a later checkpoint, and
    the fallback it named must stay restorable."""
    asked: list[tuple[list[int], dict[int, frozenset[int]]]] = []

    def held(self: Any, kept: list[int], folders: dict[int, frozenset[int]]) -> None:
        # Nothing deleted during the run: all of it is left. Recorded as the coordinator
        # asks (the collector's thread runs only the newest request waiting, so how many
        # reached the store depended on the machine's load).
        asked.append((kept, folders))

    monkeypatch.setattr(coordinator_module._Collector, "collect", held)
    monkeypatch.setattr(coordinator_module, "COLLECT_EVERY", 1)  # a collection per commit
    flow = Dataflow("late")
    handle = flow.new_input("x")
    handle.stream.running_reduce(lambda x: x % 4, lambda a, b: a + b).collect("c")
    root = tmp_path / "store"
    session = flow.activate(
        workers=1,
        backend="inline",
        checkpoint=str(root),
        checkpoint_incremental=3,
        keep_checkpoints=2,
    )
    for e in range(12):
        handle.send([e * 10 + i for i in range(4)])
        handle.advance_to(e + 1)
    handle.close()
    session.join()
    monkeypatch.undo()
    everything = manifests(root)
    # (The commits' floors already hide some: a log's, and the one before it once the
    # commits move to another log.)
    assert max(everything) >= 11 and len(asked) >= 8
    store = CheckpointStore(str(root))
    fingerprint = everything[max(everything)]["fingerprint"]
    collector = coordinator_module._Collector(store, 2)
    for kept, folders in asked[:-1]:
        collector.collect(kept, folders)  # as the run would have had it done, one by one
        collector.settle()
        left = manifests(root)
        assert {e for e in everything if e > kept[-1]} <= set(left), (kept, sorted(left))
        # With everything after the oldest kept gone, that one is what a restore finds.
        fallback = tmp_path / f"fallback-{kept[-1]}"
        shutil.copytree(root, fallback)
        forget(fallback, kept[0])
        copy = CheckpointStore(str(fallback))
        found = copy.newest(fingerprint, "late")
        assert found is not None and found[0] == kept[0], (kept, sorted(left))


def test_a_restore_that_would_need_inputs_no_longer_kept_fails_clearly(tmp_path: Path) -> None:
    """Every kept checkpoint damaged, and the inputs before them gone: the recovery stops
    with an error naming the store and what to do, not with outputs from half the inputs."""
    from timely.checkpoint.config import CheckpointConfig
    from timely.checkpoint.coordinator import CheckpointCoordinator

    coordinator = CheckpointCoordinator(
        CheckpointConfig(uri=str(tmp_path), keep=1), "flow", "fp", 1, []
    )
    from timely.comm import serialization

    store = coordinator.store
    for epoch in range(3):
        part = {"format": 2, "epoch": epoch, "worker": 0, "workers": 1, "vertices": {}}
        coordinator.part_written(epoch, store.write_part(epoch, 0, 1, serialization.encode(part)))
    coordinator.settle()  # old checkpoints are deleted off the driver's thread
    assert sorted(manifests(tmp_path)) == [2]  # one kept; the inputs before it are gone
    damage(tmp_path, manifests(tmp_path)[2]["parts"][0])
    with pytest.raises(CheckpointError, match="keep_checkpoints="):
        coordinator.load_restore()


class _Watched(mutable.Tally):
    """A user's vertex with its own ``restore_at``: it must see its share whole."""

    restored_keys: ClassVar[list[int]] = []

    def restore_at(self, snapshot: dict[str, Any], epoch: int) -> None:
        super().restore_at(snapshot, epoch)
        table = self.lists.get((0,))
        _Watched.restored_keys.append(0 if table is None else len(table))


def test_a_rescale_gives_a_vertex_with_its_own_restore_its_share_at_once(tmp_path: Path) -> None:
    """Keyed vertices restore piece by piece on a rescale (each old part in turn); one
    that restores with its own code gets the pieces merged, in one call."""
    builders = {"watched": lambda s: s.flow.vertex([(s, exchange(lambda x: x % 4))], _Watched)[0]}
    flow, expected = build("watched", EPOCHS, builders=builders)
    flow.run(workers=2, backend="inline")
    flow, _ = build("watched", EPOCHS[:6], builders=builders)
    flow._inputs[0].advance_to(6)
    flow.activate(workers=2, backend="inline", checkpoint=str(tmp_path)).close()
    _Watched.restored_keys = []
    flow, got = build("watched", EPOCHS, builders=builders)
    session = flow.activate(workers=1, backend="inline", checkpoint=str(tmp_path))
    for h in flow._inputs:
        h.close()
    session.join()
    assert _Watched.restored_keys == [4]  # every key, from both old parts, in one call
    assert got == {e: r for e, r in expected.items() if e > session.restored_epoch}


def test_a_chain_that_is_not_its_base_s_is_skipped_for_the_one_before(tmp_path: Path) -> None:
    """The driver checks each part's chain against its base without decoding (the workers
    decode): a manifest whose chain does not match falls back to an older checkpoint."""
    stopped_run(tmp_path, "running", 7, checkpoint_incremental=3, keep_checkpoints=8)
    store = CheckpointStore(str(tmp_path))
    assert store.newest(*fingerprint_of(tmp_path))[0] == 7  # type: ignore[index]
    manifest = manifests(tmp_path)[7]
    manifest["parts"][0]["chain"] = manifest["parts"][0]["chain"][1:]  # skips its base
    # A later commit of 7 in its log (a later line for an epoch is the newer commit).
    log = tmp_path / links.log_name(4)
    with log.open("ab") as f:
        f.write(links.line("c", 7, json.dumps(manifest).encode()))
    assert manifests(tmp_path)[7] == manifest
    assert store.newest(*fingerprint_of(tmp_path))[0] == 6  # type: ignore[index]


def forget(root: Path, after: int) -> None:
    """Take the checkpoints after ``after`` out of the store, as if never committed: their
    folders, their lines in the commit logs, and the floors above ``after`` (only a later
    commit writes one: a floor is at the oldest checkpoint kept when it is written)."""
    for folder in root.glob("ckpt-*"):
        if int(folder.name.split("-")[1]) > after:
            shutil.rmtree(folder, ignore_errors=True)
    for log in root.glob(f"{links.LOG}*"):
        kept = [
            line
            for line in log.read_bytes().split(b"\n")
            if not (line[9:11] in (b"c ", b"f ") and int(line[11:].split(b" ", 1)[0]) > after)
        ]
        log.write_bytes(b"\n".join(kept))


def damage(root: Path, entry: dict[str, Any]) -> None:
    """Flip a byte in the middle of the bytes a manifest entry names (a part's file, or
    its share of a links file)."""
    path = root / entry["path"]
    data = bytearray(path.read_bytes())
    data[entry.get("offset", 0) + entry["size"] // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def fingerprint_of(root: Path) -> tuple[str, str]:
    manifest = next(iter(manifests(root).values()))
    return manifest["fingerprint"], manifest["dataflow"]


@pytest.mark.parametrize("incremental", [0, 2])
def test_old_checkpoints_are_collected_in_batches(tmp_path: Path, incremental: int) -> None:
    """Old checkpoints are deleted once every ``COLLECT_EVERY`` commits (issue 30: a
    collection per commit listed the store each time), so the store holds at most that
    many more than ``keep_checkpoints`` during the run, and exactly those kept once the
    coordinator settles (at the end of a run, and before a restore reads the store).
    Without incremental checkpoints, each commit retires the checkpoint it leaves unkept
    at once (no listing: ``CheckpointStore.retire``), so the store holds those kept.
    (Mutant: collecting never, or only at the end, lets the store grow with the run.)"""
    from timely.checkpoint.config import CheckpointConfig
    from timely.checkpoint.coordinator import COLLECT_EVERY, CheckpointCoordinator
    from timely.comm import serialization

    coordinator = CheckpointCoordinator(
        CheckpointConfig(uri=str(tmp_path), keep=2, incremental=incremental), "flow", "fp", 1, []
    )
    store = coordinator.store
    most = 0
    for epoch in range(5 * COLLECT_EVERY):
        part = {"format": 2, "epoch": epoch, "worker": 0, "workers": 1, "vertices": {}}
        coordinator.part_written(epoch, store.write_part(epoch, 0, 1, serialization.encode(part)))
        if coordinator._collector is not None:
            coordinator._collector.settle()  # what was asked for so far is done
        most = max(most, len(manifests(tmp_path)))
    if incremental:
        assert 2 < most <= 2 + COLLECT_EVERY
    else:
        assert most == 2
    coordinator.settle()
    assert sorted(manifests(tmp_path)) == [5 * COLLECT_EVERY - 2, 5 * COLLECT_EVERY - 1]


# -- checkpoint_incremental=True: chains end by size ---------------------------------------


def sized_chain_run(root: Path, touched: int, epochs: int = 16) -> dict[int, dict[str, Any]]:
    """2,000 keys loaded at epoch 0, then ``touched`` of them changed each epoch, with
    ``checkpoint_incremental=True``: the manifests of the run."""
    import operator

    flow = Dataflow("sized")
    handle = flow.new_input("keys")
    handle.stream.running_reduce(lambda k: k, operator.add, value=lambda k: 1).collect("c")
    with flow.activate(
        workers=1,
        backend="inline",
        checkpoint=str(root),
        checkpoint_incremental=True,
        keep_checkpoints=epochs + 1,
    ) as session:
        handle.send(list(range(2000)))
        for e in range(1, epochs):
            handle.advance_to(e)
            handle.send([(e * 37 + i) % 2000 for i in range(touched)])
        handle.close()
        session.join()
    return manifests(root)


def test_small_deltas_make_long_chains(tmp_path: Path) -> None:
    """A few keys touched an epoch: the deltas add up to half the whole part only after
    far more than the ten deltas a fixed count would allow, so no whole part is written
    again in 16 epochs; the last checkpoint restores through all 15 links."""
    found = sized_chain_run(tmp_path, touched=5)
    bases = [found[e]["parts"][0]["base"] for e in sorted(found)]
    assert bases == [None, *range(15)]
    assert len(found[15]["parts"][0]["chain"]) == 15
    store = CheckpointStore(str(tmp_path))
    epoch, parts = store.latest(found[15]["fingerprint"], "sized") or (None, [])
    assert epoch == 15
    state = parts[0]["vertices"]
    (vertex,) = [
        s for s in state.values() if s.get("kind") == "keyed" and s["tables"]["state"]["times"]
    ]
    keys, values = vertex["tables"]["state"]["times"][0][1:]
    counts = dict(zip(keys, values))
    expected = dict.fromkeys(range(2000), 1)
    for e in range(1, 16):
        for i in range(5):
            expected[(e * 37 + i) % 2000] += 1
    assert counts == expected


def test_large_deltas_end_chains_soon(tmp_path: Path) -> None:
    """A third of the keys touched an epoch (deltas, each a third of the whole part's
    size): a whole part again after two deltas, not ten."""
    found = sized_chain_run(tmp_path, touched=700, epochs=8)
    bases = [found[e]["parts"][0]["base"] for e in sorted(found)]
    assert bases[:4] == [None, 0, 1, None], bases
    assert max(len(m["parts"][0]["chain"]) for m in found.values()) <= 2


def test_a_count_for_chains_with_true_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: ``checkpoint_incremental=True`` a fixed ten deltas again."""
    from timely.worker.snapshots import Snapshots

    monkeypatch.setattr(
        Snapshots, "whole_next", lambda self: self.base is None or self.deltas >= 10
    )
    with pytest.raises(AssertionError):
        test_small_deltas_make_long_chains(tmp_path / "small")
    with pytest.raises(AssertionError):
        test_large_deltas_end_chains_soon(tmp_path / "large")
