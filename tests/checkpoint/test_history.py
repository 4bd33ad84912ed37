"""A run's growing records (:mod:`timely.checkpoint.history`): the commits, their times,
the subsumed checkpoints and the cadence's windows keep their latest entries and a count
of all, so that a run checkpointing every epoch for days holds a bounded list, and the
kept checkpoints (the newest commits) are always among them."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timely import Dataflow
from timely.checkpoint import history
from timely.checkpoint.history import Recent
from timely.checkpoint.store import CheckpointStore


@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 300))
def test_a_record_holds_its_latest_entries_and_counts_them_all(
    keep: int, least: int, n: int
) -> None:
    """Against the whole list: the record is its tail, at least ``max(keep, least)``
    long when there were as many, less than twice that, and ``total`` is every append."""
    saved = history.HISTORY
    history.HISTORY = keep
    try:
        record: Recent[int] = Recent(least)
    finally:
        history.HISTORY = saved
    whole = []
    for i in range(n):
        record.append(i)
        whole.append(i)
        floor = max(keep, least)
        assert record == whole[len(whole) - len(record) :]
        assert min(len(whole), floor) <= len(record) < 2 * floor
        assert record.total == len(whole)


def test_a_record_that_drops_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: every entry kept (the list grows with the run)."""
    monkeypatch.setattr(Recent, "append", lambda self, e: (list.append(self, e), None)[1])
    with pytest.raises(AssertionError):
        test_a_record_holds_its_latest_entries_and_counts_them_all()


def test_a_record_that_drops_what_it_keeps_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: down to one entry fewer than it keeps."""

    def short(self: Recent[Any], entry: Any) -> None:
        list.append(self, entry)
        self.total += 1
        if len(self) >= 2 * self.keep:
            del self[: len(self) - self.keep + 1]

    monkeypatch.setattr(Recent, "append", short)
    with pytest.raises(AssertionError):
        test_a_record_holds_its_latest_entries_and_counts_them_all()


def running_sums(epochs: int, root: Path, keep: int) -> Any:
    """A running sum checkpointed every epoch, inline; its session once it ended."""
    flow = Dataflow("history")
    seen: list[int] = []
    inp = flow.new_input()
    inp.stream.running_reduce(lambda x: x % 7, lambda a, b: a + b).subscribe(
        lambda e, _: seen.append(e)
    )
    with flow.activate(
        workers=1,
        backend="inline",
        checkpoint=str(root),
        checkpoint_every=1,
        keep_checkpoints=keep,
    ) as session:
        for e in range(epochs):
            inp.advance_to(e)
            inp.send(list(range(e, e + 20)))
            session.poll()
        inp.close()
        session.join()
    assert sorted(set(seen)) == list(range(epochs))
    return session


def test_a_long_run_keeps_its_latest_commits_and_every_kept_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """193 commits with a history of 8 and 12 checkpoints kept: the 12 kept are on disk
    (a record of 8 would have dropped, after the 192nd, commits the last still keeps),
    and the session lists the newest (at least the 13 a commit needs, fewer than twice
    that), their times entry for entry, and counts all 193 (as the monitors do)."""
    monkeypatch.setattr(history, "HISTORY", 8)
    session = running_sums(193, tmp_path, keep=12)
    assert sorted(CheckpointStore(str(tmp_path)).manifests()) == list(range(181, 193))
    committed = session.committed
    assert committed.total == 193 and session.view.snapshot()["commits"] == 193
    assert 13 <= len(committed) < 26
    assert committed == list(range(193 - len(committed), 193))
    assert len(session.commit_times) == len(committed)
    assert session.commit_times == sorted(session.commit_times)


def test_commits_kept_fewer_than_the_checkpoints_kept_are_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant: the commits' record ignores how many checkpoints are kept (its
    ``least``), so a commit counts fewer kept and the collection deletes the rest."""
    init = Recent.__init__
    monkeypatch.setattr(Recent, "__init__", lambda self, least=1: init(self))
    with pytest.raises(AssertionError, match="181"):
        test_a_long_run_keeps_its_latest_commits_and_every_kept_checkpoint(tmp_path, monkeypatch)


def test_a_short_run_lists_every_commit() -> None:
    """Under :data:`~timely.checkpoint.history.HISTORY` commits, nothing is dropped."""
    with tempfile.TemporaryDirectory() as root:
        session = running_sums(30, Path(root), keep=3)
    assert session.committed == list(range(30)) and session.committed.total == 30
