"""Workers that join and leave a running dataflow, in the progress protocol (issue 29):
the exchange state machine (``test_exchange``) with two more rules, and the same
invariants (Safe, Mono, conservation, precursor counts, an empty end) after each.

- **join**: a worker that holds a capability mints one at the same output and a time
  at or after it (the agreed epoch), in a step of its own, flushes that batch, and
  hands the capability to a new worker, whose view is a copy of the donor's
  (``WorkerProgress.joining``) and which is sent whatever was on its way to the donor;
  every other worker adds it as a peer. The joiner's first batch is applied only after
  the donor's minting batch (``ProgressBatch.after``).
- **leave**: a worker with no capability and no message left, its last batch flushed,
  leaves once every peer has applied all its batches (``remove_peer``).

Mutants, each caught by the same invariants: a joiner whose capability is counted a
step late (by its own first batch instead of the donor's), receivers that apply a
joiner's batches without waiting for their ``after`` (the joiner's drop of a capability
then cancels, in one count, the donor's own capability at the same pointstamp), and a
worker that leaves while it still holds capabilities or messages.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from progress import (
    Graph,
    GraphBuilder,
    Pointstamp,
    ProgressBatch,
    Update,
    WorkerProgress,
    source,
    target,
)
from tests.conftest import state_machine_examples
from tests.progress.test_exchange import (
    ExchangeMachine,
    SafetyViolation,
    _bump,
    _settings,
    mutant_search,
)

MAX_WORKERS = 4


class MembershipMachine(ExchangeMachine):
    late_joiner = False
    leave_holding = False

    def _capabilities(self) -> list[tuple[int, Pointstamp]]:
        return [(w, ps) for w in self.active for ps in self.tokens[w] if ps[0].is_source]

    @precondition(
        lambda self: (
            hasattr(self, "truth")
            and self.W < MAX_WORKERS + 2
            and len(self.active) < MAX_WORKERS
            and bool(self._capabilities())
        )
    )
    @rule(data=st.data())
    def join(self, data: st.DataObject) -> None:
        donor, (loc, time) = data.draw(st.sampled_from(self._capabilities()))
        at = _bump(data, time)
        handed: Pointstamp = (loc, at)
        d = self.protos[donor]
        j = self.W
        self.W += 1
        self.truth[handed] += 1  # the joiner holds it from now on
        self.history.add(handed)
        if self.late_joiner:  # mutant: the joiner counts it itself, in its first batch
            joiner = self.protocol.joining(j, d)
            joiner._owned.update(handed, 1)
            joiner.record([(handed, 1)])
        else:
            d.record([(handed, 1)])  # minted from the donor's capability at `time`
            self._flush_all(donor)
            d.hand_over(handed)
            joiner = self.protocol.joining(j, d, [handed], after=d.next_seq() - 1)
        for w in self.active:
            self.protos[w].add_peer(j)
            self.queues[(w, j)] = deque(self.queues[(w, donor)])  # on its way to the donor
            self.queues[(j, w)] = deque()
        self.queues[(j, j)] = deque()
        self.protos.append(joiner)
        self.tokens.append([handed])
        self.released.append(set(self.released[donor]))
        self.active.append(j)

    def _flush_all(self, w: int) -> None:
        while (batch := self.protos[w].flush(force=True)) is not None:
            for r in self.active:
                self.queues[(w, r)].append(batch)

    @precondition(
        lambda self: (
            hasattr(self, "truth")
            and len(self.active) > 1
            and any(self._may_leave(w) for w in self.active)
        )
    )
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        w = data.draw(st.sampled_from([w for w in self.active if self._may_leave(w)]))
        if self.leave_holding:  # mutant: what it still held goes with it, unreported
            self.tokens[w].clear()
        self._flush_all(w)
        proto = self.protos[w]
        self.active.remove(w)
        # A leave waits until every peer has applied its batches (which may wait, in
        # turn, for the batch their `after` names): deliver what is on its way.
        for (_s, r), queue in self.queues.items():
            while queue and r in self.active:
                self.protos[r].receive(queue.popleft())
        for r in self.active:
            self.queues.pop((w, r))
        self.queues.pop((w, w), None)
        for r in self.active:
            self.queues.pop((r, w), None)
            self.protos[r].remove_peer(w, proto.next_seq())

    def _may_leave(self, w: int) -> bool:
        if self.leave_holding:
            return True
        return not self.tokens[w] and not self.protos[w].pending()


def test_joins_and_leaves_keep_the_progress_invariants() -> None:
    run_state_machine_as_test(MembershipMachine, settings=_settings(state_machine_examples()))


class LateJoiner(MembershipMachine):
    late_joiner = True


class LeavesHolding(MembershipMachine):
    leave_holding = True


class IgnoresAfter(WorkerProgress):
    """A receiver that applies a joiner's batches without waiting for their ``after``."""

    def receive(self, batch: ProgressBatch) -> list[Update]:
        return super().receive(ProgressBatch(batch.sender, batch.seq, batch.updates))


class IgnoresAfterMachine(MembershipMachine):
    protocol = IgnoresAfter


@pytest.mark.parametrize(
    "machine",
    [
        LateJoiner,
        LeavesHolding,
        # ~25 s of search: CI's profile. The quick one catches the same mutant with the
        # schedule written out (test_a_joiners_drop_waits_for_the_batch_that_minted_it).
        pytest.param(IgnoresAfterMachine, marks=pytest.mark.ci),
    ],
)
def test_mutants_of_joins_and_leaves_are_caught(machine: Any) -> None:
    with pytest.raises(SafetyViolation):
        run_state_machine_as_test(machine, settings=mutant_search(steps=60))


def _one_output() -> Graph:
    """An input feeding an output."""
    b = GraphBuilder()
    inp = b.add_operator("input", inputs=0, outputs=1)
    out = b.add_operator("output", inputs=1, outputs=0)
    b.add_edge(source(inp), target(out))
    return b.build()


@pytest.mark.parametrize("protocol", [WorkerProgress, IgnoresAfter])
def test_a_joiners_drop_waits_for_the_batch_that_minted_it(protocol: Any) -> None:
    """The schedule hypothesis needs thousands of examples to find, written out: the
    donor mints the joiner's capability at the pointstamp of its own, the joiner drops
    it, and the joiner's batch reaches the donor's view first. Applied at once, the
    drop cancels the donor's own capability in the one count: the view's frontier is
    empty while the donor still holds it. Waiting for ``after`` keeps it."""
    graph = _one_output()
    cap: Pointstamp = (source(0, 0), (0,))
    donor = protocol(0, 1, graph, capabilities=[cap])
    donor.record([(cap, 1)])  # minted, in a step of the donor's
    mint = donor.flush(force=True)
    assert mint is not None
    donor.hand_over(cap)
    joiner = protocol.joining(1, donor, [cap], after=mint.seq)
    donor.add_peer(1)
    joiner.record([(cap, -1)])  # the joiner drops it at once
    drop = joiner.flush(force=True)
    assert drop is not None
    donor.receive(drop)  # overtakes the minting batch
    held = donor.view.count(cap)
    donor.receive(mint)
    assert donor.view.count(cap) == 1  # the donor's own, in the end, either way
    if protocol is WorkerProgress:
        assert held == 1  # the drop waited: the donor's capability stayed counted
    else:
        assert held == 0  # the mutant: nothing counted while the donor holds one


def test_after_crosses_the_wire() -> None:
    """A joiner's first batch keeps its ``after`` through the workers' message codec."""
    from timely.comm.messages import WorkerMessage
    from timely.comm.serialization import decode_message, encode_message

    cap: Pointstamp = (source(0, 0), (3,))
    for after in ((), ((0, 7),), ((0, 7), (2, 3))):
        msg = WorkerMessage(1, 0)
        msg.progress = ProgressBatch(1, 0, ((cap, -1),), after)
        assert decode_message(encode_message(msg)).progress == msg.progress


@pytest.mark.parametrize("ignores_after", [False, True])
def test_an_adopters_drop_waits_for_the_batch_that_minted_it(ignores_after: bool) -> None:
    """A source partition handed between two running workers, written out: the owner
    mints the new owner's capability at the pointstamp of its own, the new owner drops
    it, and its batch reaches a third view before the minting batch. Waiting for the
    ``after`` that :meth:`WorkerProgress.adopt` sets keeps the owner's capability
    counted there; a batch without it (the mutant) cancels it."""
    graph = _one_output()
    cap: Pointstamp = (source(0, 0), (4,))
    owner, adopter, third = (WorkerProgress(w, 3, graph, capabilities=[cap]) for w in range(3))
    for w in (adopter, third):  # every worker's input capability, counted everywhere
        w.record([(cap, -1)])
        batch = w.flush(force=True)
        assert batch is not None
        for view in (owner, adopter, third):
            view.receive(batch)
    owner.record([(cap, 1)])  # minted, in a step of the owner's
    mint = owner.flush(force=True)
    assert mint is not None
    owner.hand_over(cap)
    adopter.adopt([cap], owner=0, after=mint.seq)
    adopter.record([(cap, -1)])  # the new owner drops it at once
    drop = adopter.flush(force=True)
    assert drop is not None and drop.after == ((0, mint.seq),)
    if ignores_after:
        drop = ProgressBatch(drop.sender, drop.seq, drop.updates)
    third.receive(drop)  # overtakes the minting batch
    held = third.view.count(cap)
    third.receive(mint)
    assert third.view.count(cap) == 1  # the owner's own, in the end, either way
    assert held == (0 if ignores_after else 1)


def test_an_adoption_is_not_the_owners_own() -> None:
    cap: Pointstamp = (source(0, 0), (0,))
    with pytest.raises(ValueError, match="its own"):
        WorkerProgress(0, 1, _one_output()).adopt([cap], owner=0, after=0)
