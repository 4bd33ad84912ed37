"""The disk state backend: a :class:`~timely.state.disk.DiskTable` behaves as the dict it
replaces, and the operators whose tables it holds give the memory backend's outputs.

The table is checked against a dict under random operations, with flushes (the worker's
between activations) at random points, in both of its orders; two broken variants show
that the check can fail. The operators' own property tests run on both backends
(``tests/operators/test_running.py``, ``test_join_streaming.py``); here the runs force a
flush after every activation (``state_cache=1``), so every value really goes through disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from timely import ConfigError, Dataflow
from timely.comm.serialization import PlainDataError
from timely.errors import StateStoreError
from timely.routing.bins import bins_of
from timely.state.disk import _DELETED, DiskTable, StateStore, StoreConfig, canonical, state_options
from timely.state.keyed import StatefulVertex

keys = st.one_of(
    st.integers(-1, 3),
    st.sampled_from(["a", ("t", 1)]),
    # equal in Python, other types: one key, as in a dict (and for stable_hash)
    st.sampled_from([1.0, True, np.int64(2), -0.0, ("t", 1.0), frozenset({1, 2})]),
    st.sampled_from([frozenset({2.0, 1}), frozenset({True, 2})]),
)
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("set"), keys, st.integers(0, 9)),
        st.tuples(st.just("del"), keys, st.just(0)),
        st.tuples(st.just("pop"), keys, st.just(0)),
        st.tuples(st.just("append"), keys, st.integers(0, 9)),  # a value changed in place
        st.tuples(st.just("get"), keys, st.just(0)),
        st.tuples(st.just("update"), keys, st.integers(0, 9)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        st.tuples(st.just("front"), st.just(0), st.just(0)),  # map_with_state's expiry
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
        st.tuples(st.just("popitem"), st.just(0), st.just(0)),
        st.tuples(st.just("hold"), keys, st.integers(0, 9)),  # changed after an update
    ),
    max_size=40,
)


small_ops = st.lists(
    st.tuples(
        st.sampled_from(["set", "del", "pop", "append", "flush", "front", "popitem", "hold"]),
        st.sampled_from([0, 1, 1.0]),
        st.integers(0, 3),
    ),
    max_size=12,
)
"""Few keys, so that a mutant's defect shows in few operations."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateStore]:
    s = StateStore(StoreConfig(root=str(tmp_path_factory.mktemp("disk"))), 0)
    yield s
    s.close()


def agrees(
    store: StateStore, ops: list[tuple[str, Any, int]], ordered: bool, nbins: int = 0
) -> bool:
    """Whether a disk table and a dict give the same answers under ``ops``."""
    table = store.table("test", ordered, nbins)
    model: dict[Any, Any] = {}
    try:
        for op, k, v in ops:
            if op == "set":
                table[k] = [v]
                model[k] = [v]
            elif op == "del":
                if (k in model) != (k in table):
                    return False
                if k in model:
                    del table[k]
                    del model[k]
            elif op == "pop":
                if table.pop(k, None) != model.pop(k, None):
                    return False
            elif op == "append":
                got = table.get(k)
                if got is not None:
                    got.append(v)
                if k in model:
                    model[k].append(v)
            elif op == "get":
                if table.get(k) != model.get(k):
                    return False
            elif op == "update":
                table.update({k: [v], "u": [v]})
                model.update({k: [v], "u": [v]})
            elif op == "flush":
                table.flush()
            elif op == "front" and model:
                if next(iter(table)) != next(iter(model)) if ordered else False:
                    return False
            elif op == "clear":
                table.clear()
                model.clear()
            elif op == "popitem" and ordered and model:
                got_key, got_value = table.popitem()
                want_key, want_value = model.popitem()
                if got_key != want_key or got_value != want_value:
                    return False
            elif op == "hold":
                held, kept = table.get(k), model.get(k)
                table.update({"u": [v]})
                model.update({"u": [v]})
                if held is not None and k != "u":
                    held.append(v)
                if kept is not None and k != "u":
                    kept.append(v)
            if len(table) != len(model) or bool(table) != bool(model):
                return False
        table.flush()
        model = {canonical(k): v for k, v in model.items()}  # what a key reads back as
        if ordered:
            if list(table) != list(model) or list(table.items()) != list(model.items()):
                return False
        elif sorted(map(repr, table.items())) != sorted(map(repr, model.items())):
            return False
        keys_, values = table.columns()
        return dict(zip(keys_, values)) == model and list(table.values()) == [
            table[k] for k in keys_
        ]
    finally:
        table.drop()


@settings(max_examples=300, deadline=None)
@given(ops_st, st.booleans(), st.sampled_from([0, 3]))
def test_a_disk_table_behaves_as_a_dict(
    store: StateStore, ops: list[tuple[str, Any, int]], ordered: bool, nbins: int
) -> None:
    """Also with its keys grouped by bin (a run whose bins may move)."""
    assert agrees(store, ops, ordered, nbins)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(keys | st.integers(0, 500), st.integers(), max_size=60),
    st.sets(st.integers(0, 7), max_size=8),
    st.booleans(),
)
def test_taking_bins_out_takes_exactly_their_keys(
    store: StateStore, contents: dict[Any, int], bins: set[int], ordered: bool
) -> None:
    """A migration's extract on disk: the keys of the bins, grouped by bin with their
    runs, and the table keeps the others, in their order."""
    table = store.table("bins", ordered, 8)
    try:
        items = list(contents.items())
        half = len(items) // 2
        table.update(items[:half])  # some in bulk, some through the cache
        for k, v in items[half:]:
            table[k] = v
        keys, values, runs = table.take_bins(bins)
        assert sum(n for _, n in runs) == len(keys)
        assert [b for b, _ in runs] == sorted({b for b, _ in runs})
        key_bins = bins_of(keys, 8) if keys else []
        assert key_bins == [b for b, n in runs for _ in range(n)]
        assert set(key_bins) <= bins
        assert dict(zip(keys, values)) == {k: v for k, v in contents.items() if k in set(keys)}
        kept = [(k, v) for k, v in items if k not in set(keys)]
        assert len(table) == len(kept) and len(keys) + len(kept) == len(items)
        assert all(b not in bins for b in bins_of([k for k, _ in kept], 8)) if kept else True
        if ordered:
            assert list(table.items()) == kept
        else:
            assert dict(table.items()) == dict(kept)
    finally:
        table.drop()


class _NoWriteBack(DiskTable):
    """Broken: writes back only what was set, not values read and changed in place."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.written: set[Any] = set()

    def __setitem__(self, key: Any, value: Any) -> None:
        self.written.add(key)
        super().__setitem__(key, value)

    def _sync(self) -> None:
        for k, v in list(self._cache.items()):
            if isinstance(v, list) and k not in self.written:
                del self._cache[k]
        self.written.clear()
        super()._sync()


class _KeepsPlace(DiskTable):
    """Broken: a key deleted and set again keeps its old place in the order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seqs: dict[Any, int] = {}

    def pop(self, key: Any, *default: Any) -> Any:
        v = self._load(key)
        if isinstance(v, list):
            self.seqs[key] = v[0]
        return super().pop(key, *default)

    def __delitem__(self, key: Any) -> None:
        v = self._load(key)
        if isinstance(v, list):
            self.seqs[key] = v[0]
        super().__delitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._load(key) is _DELETED and key in self.seqs:
            seq = self.seqs.pop(key)
            self._stale.remove(seq)
            self._cache[key] = [seq, value]
            self._len += 1
            return
        super().__setitem__(key, value)


def _not_canonical(key: Any) -> Any:
    return key


@pytest.mark.parametrize(
    ("mutant", "ordered"),
    [(_NoWriteBack, False), (_NoWriteBack, True), (_KeepsPlace, True), (None, False)],
)
def test_mutation_a_broken_table_is_caught(
    store: StateStore,
    monkeypatch: pytest.MonkeyPatch,
    mutant: type[DiskTable] | None,
    ordered: bool,
) -> None:
    if mutant is None:  # broken: keys equal in Python but of other types stored apart
        monkeypatch.setattr("timely.state.disk.canonical", _not_canonical)
        monkeypatch.setattr("timely.state.disk._CANONICAL", frozenset({str, int, bytes, float}))
    else:
        monkeypatch.setattr("timely.state.disk.DiskTable", mutant)
        made = store.table("probe", ordered)
        assert type(made) is mutant
        made.drop()
    hypothesis.find(
        small_ops,
        lambda ops: not agrees(store, ops, ordered),
        settings=settings(max_examples=5000, database=None, derandomize=True),
    )


def test_state_values_come_back_as_they_went_in(store: StateStore) -> None:
    """Arrays come back writable (an operator may change its state in place); sets and
    frozensets equal as keys are one key whatever order they were built in."""
    table = store.table("values", False)
    table["a"] = np.zeros(3)
    table.flush()
    table["a"][0] += 1
    table.flush()
    assert table["a"].tolist() == [1.0, 0.0, 0.0]
    built = [
        frozenset(f"{c}{i}" for i in order) for c in "xy" for order in (range(9), range(8, -1, -1))
    ]
    for n, fs in enumerate(built):
        table[fs] = n
        table.flush()
    assert len(table) == 3 and table[built[0]] == 1 and table[built[2]] == 3
    table.drop()


def test_values_that_only_pickle_carries_are_refused_by_name(store: StateStore) -> None:
    table = store.table("step 'x', table 'state'", False)
    table["k"] = object()
    with pytest.raises(PlainDataError, match=r"step 'x', table 'state': the value of key 'k'"):
        table.flush()
    table._cache.clear()
    table["a"] = (1, {2: [3.5, "s"]}, {4}, frozenset({5}), b"b", None, 1 << 70)
    table["n"] = np.arange(3)
    table.flush()
    assert table["a"] == (1, {2: [3.5, "s"]}, {4}, frozenset({5}), b"b", None, 1 << 70)
    assert table["n"].tolist() == [0, 1, 2]
    table.drop()


# -- runs ---------------------------------------------------------------------------------------


def wordcount_and_sessions(epochs: int = 12) -> tuple[Dataflow, Any]:
    flow = Dataflow("disk")
    inp = flow.new_input()
    s = inp.stream
    s.running_reduce(lambda r: r[0], lambda a, b: a + b, value=lambda r: r[1]).collect("sum")
    s.map_with_state(lambda r: r[0], int, lambda k, r, n: (n + 1, [(k, n + 1)]), timeout=2).collect(
        "mws"
    )
    s.join_streaming(s, lambda r: r[0] % 7, lambda r: r[1] % 7, within=3).collect("js")
    for e in range(epochs):
        inp.send([((e * 13 + i * 7) % 40, (e + i) % 10) for i in range(30)])
        inp.advance_to(e + 1)
    return flow, inp


def outputs(built: tuple[Dataflow, Any], **options: Any) -> dict[str, list[str]]:
    out = built[0].run(workers=2, backend="inline", **options)
    return {n: sorted(map(repr, out.records(n))) for n in ("sum", "mws", "js")}


def test_a_run_on_disk_gives_the_memory_outputs_and_leaves_nothing(tmp_path: Path) -> None:
    want = outputs(wordcount_and_sessions())
    got = outputs(
        wordcount_and_sessions(), state_backend="disk", state_dir=str(tmp_path), state_cache=1
    )
    assert got == want and all(want.values())
    assert os.listdir(tmp_path) == []  # the run's directory is gone


def test_the_tables_kept_across_epochs_are_on_disk(tmp_path: Path) -> None:
    """Not vacuous: the operators' long-lived tables really are disk tables, with their
    entries in the worker's store, while per-time tables stay dicts."""
    flow, inp = wordcount_and_sessions(3)
    with flow.activate(
        workers=1, backend="inline", state_backend="disk", state_dir=str(tmp_path)
    ) as session:
        worker = session.worker_list[0]  # type: ignore[attr-defined]
        states = [v.states() for v in worker.vertices if isinstance(v, StatefulVertex)]
        on_disk = [s for tables in states for s in tables.values() if s.incremental]
        assert len(on_disk) == 3  # running_reduce's, map_with_state's, join_streaming's
        assert all(isinstance(s.get(t), DiskTable) for s in on_disk for t in s.times())
        assert sum(len(s) for s in on_disk) > 0
        in_memory = [s for tables in states for s in tables.values() if not s.incremental]
        assert all(type(s.get(t)) is dict for s in in_memory for t in s.times())
        assert os.listdir(worker.store.path)  # RocksDB's files
        inp.close()
        session.join()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"state_backend": "rocks"}, "state_backend must be one of 'memory', 'disk'"),
        ({"state_dir": "/tmp/x"}, 'state_dir is for state_backend="disk"'),
        ({"state_cache": 5}, 'state_cache is for state_backend="disk"'),
        ({"state_backend": "disk", "state_cache": 0}, "state_cache must be the number of keys"),
        ({"state_backend": "disk", "state_dir": 3}, "state_dir must be a directory"),
    ],
)
def test_bad_state_options_fail_before_anything_starts(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        state_options(dict(options))


def test_an_unwritable_state_dir_fails_before_anything_starts(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    flow, _ = wordcount_and_sessions(2)
    with pytest.raises(ConfigError, match="cannot make the run's directory there"):
        flow.run(workers=1, backend="inline", state_backend="disk", state_dir=str(blocked / "x"))


def test_a_value_that_only_pickle_carries_fails_the_run_naming_the_step(tmp_path: Path) -> None:
    flow = Dataflow("opaque")
    inp = flow.new_input()
    inp.stream.running_reduce(lambda r: r, lambda a, b: a, value=lambda r: object()).collect("o")
    inp.send([1, 2])
    with pytest.raises(Exception, match=r"step 'running_reduce', table 'state': the value of key"):
        flow.run(
            workers=1,
            backend="inline",
            state_backend="disk",
            state_dir=str(tmp_path),
            state_cache=1,
        )
    assert os.listdir(tmp_path) == []


def _counts(handle: Any) -> Any:
    out: dict[int, list[Any]] = {}
    handle.stream.running_reduce(lambda x: x % 50, lambda a, b: a + b).subscribe(
        lambda e, rs: out.setdefault(e, []).extend(sorted(rs))
    )
    return out


def _damage(session: Any) -> list[Path]:
    """Write each worker's memtable out to files, then zero the middle of every file."""
    damaged = []
    for worker in session.worker_list:
        worker.store._db.flush()
        for f in Path(worker.store.path).glob("*.sst"):
            data = bytearray(f.read_bytes())
            data[len(data) // 8 : len(data) // 2] = bytes(len(data) // 2 - len(data) // 8)
            f.write_bytes(bytes(data))
            damaged.append(f)
    return damaged


EPOCHS = [[e * 7 + i for i in range(60)] for e in range(10)]


@pytest.mark.parametrize("checkpointed", [True, False])
def test_a_damaged_store_file_restores_from_the_last_checkpoint(
    tmp_path: Path, checkpointed: bool
) -> None:
    """Real RocksDB files damaged mid-run: the next read fails its checksum. With
    checkpoints the worker is lost and restored into new stores, giving the failure-free
    outputs; without, the run stops with an error naming the store and the file."""
    flow = Dataflow("damaged")
    handle = flow.new_input()
    expected = _counts(handle)
    for e, batch in enumerate(EPOCHS):
        handle.advance_to(e)
        handle.send(batch)
    flow.run(workers=2, backend="inline")

    flow = Dataflow("damaged")
    handle = flow.new_input()
    got = _counts(handle)
    options: dict[str, Any] = {"state_backend": "disk", "state_dir": str(tmp_path / "state")}
    if checkpointed:
        options |= {"checkpoint": str(tmp_path / "ckpt")}
    session = flow.activate(workers=2, backend="inline", state_cache=1, **options)
    for e, batch in enumerate(EPOCHS[:5]):
        handle.advance_to(e)
        handle.send(batch)
    assert _damage(session)
    if not checkpointed:
        with pytest.raises(StateStoreError, match=r"state store .*worker-\d.*Corruption.*\.sst"):
            for e, batch in enumerate(EPOCHS[5:], start=5):
                handle.advance_to(e)
                handle.send(batch)
            handle.close()
            session.join()
        session.close()
        assert os.listdir(tmp_path / "state") == []
        return
    for e, batch in enumerate(EPOCHS[5:], start=5):
        handle.advance_to(e)
        handle.send(batch)
    handle.close()
    session.join()
    assert session.restarts == 1
    assert got == expected


_FULL = """
import resource, signal, sys
sys.path.insert(0, {root!r})
from timely.state.disk import StateStore, StoreConfig
from timely.errors import StateStoreError

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
store = StateStore(StoreConfig(root={root_dir!r}), 0)
table = store.table("step 'x', table 'state'", False)
table["a"] = 1
table.flush()  # the store's first files, under no limit
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    for i in range(20):
        table.update((f"k{{j}}", "v" * 100) for j in range(i * 1000, (i + 1) * 1000))
        try:  # what RocksDB does once a write buffer fills: write it out as a file
            store._db.flush()
        except Exception:
            pass
except StateStoreError as e:
    print("ERROR", e)
else:
    print("NO ERROR")
"""


def test_a_full_disk_under_the_store_fails_naming_the_store_and_the_file(tmp_path: Path) -> None:
    """A real limit on file size (RLIMIT_FSIZE, in a process of its own) stands for a full
    disk: RocksDB cannot write its next file, and the next write to the table fails with
    the worker's loss, naming the store and the file."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    code = _FULL.format(root=str(root), root_dir=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert "ERROR step 'x', table 'state': the state store" in done.stdout, (
        done.stdout + done.stderr
    )
    assert ".sst: File too large" in done.stdout


@pytest.mark.parametrize("new_workers", [1, 3])
def test_a_rescale_on_disk_is_read_by_each_worker_one_old_part_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_workers: int
) -> None:
    """The driver checks the checkpoint's files but decodes none (``whole_part`` is the
    only decoding read, and the workers make it): each new worker reads every old part
    itself, one at a time, keeps its bins' keys (into its store, on disk), and the run
    goes on with the outputs of a run without a stop."""
    from tests.checkpoint.pipelines import build
    from tests.checkpoint.sweep import epochs_for
    from timely.checkpoint import store as checkpoint_store

    epochs = epochs_for(10, 3)
    flow, expected = build("session_ends", epochs)
    flow.run(workers=2, backend="inline")
    ckpt, disk = str(tmp_path / "ckpt"), {"state_backend": "disk", "state_dir": str(tmp_path)}
    flow, _ = build("session_ends", epochs[:6])
    flow._inputs[0].advance_to(6)
    session = flow.activate(workers=2, backend="inline", checkpoint=ckpt, **disk)
    assert session.committed[-1] == 5
    session.close()  # the driver stops with the sessions open

    reads: list[tuple[int, int]] = []  # (reading worker, old part)
    whole_part = checkpoint_store.CheckpointStore.whole_part

    def counted(self: Any, epoch: int, part: dict[str, Any]) -> Any:
        reads.append(part["worker"])
        return whole_part(self, epoch, part)

    monkeypatch.setattr(checkpoint_store.CheckpointStore, "whole_part", counted)
    flow, got = build("session_ends", epochs)
    session = flow.activate(workers=new_workers, backend="inline", checkpoint=ckpt, **disk)
    for h in flow._inputs:
        h.close()
    session.join()
    assert session.restored_epoch == 5
    assert got == {e: r for e, r in expected.items() if e > 5}
    assert sorted(reads) == sorted([0, 1] * new_workers)  # every old part, once per worker
