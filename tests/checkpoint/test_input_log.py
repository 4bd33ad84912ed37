"""The driver's input log (what a restore replays to new workers) is trimmed as
checkpoints are committed, and stays short however long the run.

``trim_inputs`` drops the sends at epochs up to the oldest checkpoint kept and each
input's advances up to it but the last. Checked with hypothesis: for random logs of
several inputs and any restore from a checkpoint at or after the trim, replaying the
trimmed log leaves every input where the whole log does (its epoch, whether it is
closed, and what it sent at which epoch). Mutation checks: a trim that drops each
input's last advance too, and one that drops the sends one epoch too far. A run of many
epochs with a checkpoint at every one keeps its log bounded (it grew by an advance an
epoch before, and every commit went over all of it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from tests.conftest import MUTANT_SEARCH
from timely import Dataflow
from timely.checkpoint import coordinator as coordinator_module
from timely.checkpoint.coordinator import TRIM_AT, InputEntry, trim_inputs
from timely.comm.messages import Advance, Close, Send

Trim = Callable[[list[InputEntry], int], list[InputEntry]]


@st.composite
def logs(draw: st.DrawFn) -> list[InputEntry]:
    """Commands of up to three inputs, interleaved; each input's epoch only grows, and
    nothing follows its close."""
    epochs: dict[int, int] = {}
    closed: set[int] = set()
    log: list[InputEntry] = []
    steps = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), max_size=40))
    for vertex, roll in steps:
        if vertex in closed:
            continue
        epoch = epochs.get(vertex, 0)
        if roll < 4:
            log.append((vertex, Send([len(log)]), epoch))
        elif roll < 9:
            epochs[vertex] = epoch = epoch + (roll - 3) // 2
            log.append((vertex, Advance(epoch), epoch))
        else:
            closed.add(vertex)
            log.append((vertex, Close(), epoch))
    return log


def effect(log: list[InputEntry], restored: int) -> dict[int, tuple[int, bool, list[Any]]]:
    """Where a replay after a restore at ``restored`` leaves each input (as
    ``CheckpointCoordinator.replay`` picks the commands, and a new input vertex takes
    them): its epoch, whether closed, and its sends with their epochs."""
    state: dict[int, tuple[int, bool, list[Any]]] = {}
    for vertex, cmd, epoch in log:
        if isinstance(cmd, Send) and epoch <= restored:
            continue
        at, closed, sent = state.get(vertex, (0, False, []))
        if isinstance(cmd, Advance):
            at = cmd.epoch
        elif isinstance(cmd, Send):
            sent = [*sent, (at, cmd.records)]
        else:
            closed = True
        state[vertex] = (at, closed, sent)
    return state


def check(trim: Trim, log: list[InputEntry], upto: int, later: int) -> None:
    trimmed = trim(log, upto)
    restored = upto + later
    assert effect(trimmed, restored) == effect(log, restored)
    # What it keeps up to the trim: at most one advance an input (and the closes).
    old = [e for e in trimmed if e[2] <= upto]
    assert not any(isinstance(cmd, Send) for _, cmd, _ in old)
    advances = [v for v, cmd, _ in old if isinstance(cmd, Advance)]
    assert len(advances) == len(set(advances))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[InputEntry], int, int]:
    """A log, the epoch it is trimmed to (most often just before one of its epochs, where
    an off-by-one shows) and how far after it the restore is."""
    log = draw(logs())
    near = sorted({e - 1 for _, _, e in log} | {-1})
    upto = draw(st.sampled_from(near) | st.integers(-1, 12))
    return log, upto, draw(st.integers(0, 2))


@given(cases())
def test_a_trimmed_log_replays_as_the_whole_one(case: tuple[list[InputEntry], int, int]) -> None:
    log, upto, later = case
    check(trim_inputs, log, upto, later)


def without_last_advance(log: list[InputEntry], upto: int) -> list[InputEntry]:
    """The mutant: every advance up to the trim goes, the last one too."""
    return [e for e in trim_inputs(log, upto) if not (isinstance(e[1], Advance) and e[2] <= upto)]


def one_too_far(log: list[InputEntry], upto: int) -> list[InputEntry]:
    """The mutant: the sends at the epoch after the trim go too."""
    return [e for e in trim_inputs(log, upto) if not (isinstance(e[1], Send) and e[2] <= upto + 1)]


@pytest.mark.parametrize("mutant", [without_last_advance, one_too_far])
def test_mutation_is_caught(mutant: Trim) -> None:
    @MUTANT_SEARCH
    @given(cases())
    def run(case: tuple[list[InputEntry], int, int]) -> None:
        check(mutant, *case)

    with pytest.raises(AssertionError):
        run()


def long_run(tmp_path: Path, epochs: int) -> tuple[int, list[int]]:
    """A running count with a checkpoint at every epoch: the longest the replay was
    along the run, and the output's last counts."""
    flow = Dataflow("long")
    lines = flow.new_input()
    out: list[int] = []
    lines.stream.select_many(str.split).running_reduce(
        lambda w: w, lambda a, b: a + b, lambda w: 1
    ).subscribe(lambda e, records: out.extend(n for _, n in records))
    longest = 0
    with flow.activate(workers=1, backend="inline", checkpoint=str(tmp_path)) as session:
        for e in range(epochs):
            lines.advance_to(e)
            lines.send(["a b", "a"])
            session.poll()
            longest = max(longest, len(session.coordinator.replay()))
        lines.close()
        session.join()
    return longest, out[-2:]


def test_a_long_run_keeps_its_log_short(tmp_path: Path) -> None:
    epochs = 3 * TRIM_AT
    longest, last = long_run(tmp_path, epochs)
    assert sorted(last) == [epochs, 2 * epochs]
    assert longest <= 2 * TRIM_AT + 2  # (two commands an epoch: 2 * epochs without trims)


def test_a_log_never_trimmed_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator_module, "trim_inputs", lambda log, upto: log)
    with pytest.raises(AssertionError):
        test_a_long_run_keeps_its_log_short(tmp_path)
