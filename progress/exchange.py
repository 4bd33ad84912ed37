"""The progress exchange protocol: how workers agree on occurrence counts.

Every worker keeps a *view* of the global occurrence counts. A worker's step (receive
some messages, send some, keep or drop capabilities) yields one batch of updates;
the batch is broadcast to every worker, the sender included, and receivers apply
each sender's batches in sequence order. Two rules keep every view safe (never
ahead of the truth):

1. A step's updates travel as one atomic batch, so the increments a step makes are
   never seen without the decrements that justify them.
2. Batches from one sender are applied in the order they were sent (``seq``); a
   batch that arrives early waits for its predecessors.

*Accumulation* (Naiad's local accumulation) holds a worker's batches back and merges
them, so that a message sent and consumed between two flushes never costs traffic.
Holding back is safe while every held increment at ``p`` is justified: some ``q != p``
that could result in ``p`` is either held back as a decrement (so every view still
counts it) or a capability this worker owns (so it stays live until this worker says
otherwise, through this same buffer). Safety aside, a worker about to go idle
flushes as soon as one of its held decrements is at a pointstamp in the view's
frontier, since others may be waiting on exactly that pointstamp; a worker with more
local work in the same scheduling round keeps accumulating and flushes at its end.

The view keeps Naiad's bookkeeping: an occurrence count per pointstamp and, for each
live one, a *precursor count*, the number of other live pointstamps that could result
in it. The live pointstamps with no precursor are the global frontier.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from progress.change_batch import ChangeBatch
from progress.location import Pointstamp
from progress.reachability import Graph

Update = tuple[Pointstamp, int]


@dataclass(frozen=True)
class ProgressBatch:
    """One flush of one worker's updates: ``seq`` counts that sender's batches from 0.

    ``after``: ``(worker, seq)`` of batches each receiver must have applied first: a
    batch sent once capabilities were handed to its sender names the batch that counted
    them (:meth:`WorkerProgress.joining`, :meth:`WorkerProgress.adopt`)."""

    sender: int
    seq: int
    updates: tuple[Update, ...]
    after: tuple[tuple[int, int], ...] = ()


class ProgressView:
    """A worker's view of global occurrence counts, with Naiad's precursor counts."""

    def __init__(self, graph: Graph, initial: Iterable[Update] = ()) -> None:
        self.graph = graph
        self._occurrence: dict[Pointstamp, int] = {}
        self._precursors: dict[Pointstamp, int] = {}  # live pointstamps only
        self.apply(initial)

    def apply(self, updates: Iterable[Update]) -> None:
        """Apply updates, keeping precursor counts of the live pointstamps exact."""
        occurrence = self._occurrence
        for ps, delta in updates:
            if not delta:
                continue
            before = occurrence.get(ps, 0)
            after = before + delta
            if after:
                occurrence[ps] = after
            else:
                del occurrence[ps]
            if before <= 0 < after:
                self._activate(ps)
            elif after <= 0 < before:
                self._deactivate(ps)

    def _activate(self, ps: Pointstamp) -> None:
        reach = self.graph.could_result_in
        count = 0
        for other in self._precursors:
            if reach(other, ps):
                count += 1
            if reach(ps, other):
                self._precursors[other] += 1
        self._precursors[ps] = count

    def _deactivate(self, ps: Pointstamp) -> None:
        del self._precursors[ps]
        reach = self.graph.could_result_in
        for other in self._precursors:
            if reach(ps, other):
                self._precursors[other] -= 1

    def count(self, ps: Pointstamp) -> int:
        """Occurrence count of ``ps`` in this view (may be negative for a while)."""
        return self._occurrence.get(ps, 0)

    def counts(self) -> dict[Pointstamp, int]:
        """All non-zero occurrence counts."""
        return dict(self._occurrence)

    def live(self) -> list[Pointstamp]:
        """Pointstamps with a positive count."""
        return list(self._precursors)

    def precursor_count(self, ps: Pointstamp) -> int:
        """How many other live pointstamps could result in live ``ps``."""
        return self._precursors[ps]

    def frontier(self) -> list[Pointstamp]:
        """The live pointstamps that nothing else live could result in."""
        return [ps for ps, n in self._precursors.items() if n == 0]

    def in_frontier(self, ps: Pointstamp) -> bool:
        return self._precursors.get(ps) == 0

    def could_be_reached(self, ps: Pointstamp) -> bool:
        """Some live pointstamp (``ps`` itself included) could result in ``ps``."""
        reach = self.graph.could_result_in
        return any(reach(live, ps) for live in self._precursors)


class WorkerProgress:
    """One worker's end of the protocol: its view, its outgoing buffer, its receive order."""

    def __init__(
        self,
        worker: int,
        peers: int,
        graph: Graph,
        capabilities: Sequence[Pointstamp] = (),
        accumulate: bool = True,
    ) -> None:
        """``capabilities``: what every worker holds at the start (each worker builds the
        same dataflow, so each starts with one of each; every view starts knowing all)."""
        if not 0 <= worker < peers:
            raise ValueError(f"worker index {worker} is not in 0..{peers - 1}")
        for loc, time in capabilities:
            if not loc.is_source:
                raise ValueError(f"capabilities are held at sources (outputs), not {loc!r}")
            graph.check_time(loc, time)
        self.worker = worker
        self.peers = peers
        self.graph = graph
        self.accumulate = accumulate
        self.view = ProgressView(graph, [(ps, peers) for ps in capabilities])
        self._buffer: ChangeBatch[Pointstamp] = ChangeBatch()
        self._owned: ChangeBatch[Pointstamp] = ChangeBatch((ps, 1) for ps in capabilities)
        self._next_send = 0
        self._next_recv: dict[int, int] = dict.fromkeys(range(peers), 0)
        """Per sender (workers may join and leave), the seq of its next batch to apply."""
        self._early: dict[tuple[int, int], ProgressBatch] = {}
        self._after: dict[int, int] = {}
        """Per worker that handed capabilities to this one: the batch that minted them,
        which this worker's next batch is applied after (:meth:`adopt`, a joiner's first)."""
        self._has_copy = False
        """A joining worker's: its view is a copy of a donor's, which may already hold
        batches that reach it too (they are ignored here)."""

    # -- sending -------------------------------------------------------------------------
    def record(self, updates: Iterable[Update]) -> None:
        """Record one step's updates; they leave together in the next flush."""
        for ps, delta in updates:
            self._buffer.update(ps, delta)
            if ps[0].is_source:
                self._owned.update(ps, delta)

    def pending(self) -> list[Update]:
        """Updates recorded but not yet flushed."""
        return self._buffer.items()

    def owned(self, ps: Pointstamp) -> int:
        """This worker's own capability count at ``ps`` (flushed or not)."""
        return self._owned.get(ps)

    def must_flush(self, idle: bool = True) -> bool:
        """Whether holding the buffer back any longer would be unsafe or stall others.

        ``idle``: the worker has no more local work this round. Only then does a held
        decrement at a frontier pointstamp force a flush (liveness); safety never waits.
        """
        if self._buffer.is_empty():
            return False
        if not self.accumulate:
            return True
        held = self._buffer.items()
        if idle:
            for ps, delta in held:
                if delta < 0 and self.view.in_frontier(ps):
                    return True
        reach = self.graph.could_result_in
        owned = self._owned.items()
        for ps, delta in held:
            if delta <= 0:
                continue
            justified = any(q != ps and d < 0 and reach(q, ps) for q, d in held) or any(
                q != ps and c > 0 and reach(q, ps) for q, c in owned
            )
            if not justified:
                return True
        return False

    def flush(self, force: bool = False, idle: bool = True) -> ProgressBatch | None:
        """The batch to broadcast now (to every worker, this one included), if any.

        Call it after every step, with ``idle=False`` while the worker still has work
        queued for this scheduling round.
        """
        if self._buffer.is_empty() or not (force or self.must_flush(idle)):
            return None
        after = tuple(sorted(self._after.items()))
        self._after.clear()
        batch = ProgressBatch(self.worker, self._next_send, tuple(self._buffer.drain()), after)
        self._next_send += 1
        return batch

    # -- receiving ---------------------------------------------------------------------
    def receive(self, batch: ProgressBatch) -> list[Update]:
        """Accept a batch; apply it and any successors it unblocks, in per-sender order.

        Returns the updates applied, in order, for the worker's tracker.
        """
        sender = batch.sender
        expected = self._next_recv.get(sender)
        if expected is None:
            raise ValueError(
                f"worker {self.worker}: a progress batch from worker {sender}, which is not a "
                "peer (it has not joined, or it left)"
            )
        if batch.seq < expected or (sender, batch.seq) in self._early:
            if self._has_copy:
                return []  # in the donor's view when it was copied: applied already
            raise ValueError(
                f"worker {self.worker}: duplicate progress batch {batch.seq} from worker {sender}"
            )
        self._early[(sender, batch.seq)] = batch
        applied: list[Update] = []
        self._apply_ready(sender, applied)
        if self._early and applied:  # a joiner's first batch may have waited for these
            for other in {s for s, _ in self._early}:
                self._apply_ready(other, applied)
        return applied

    def _apply_ready(self, sender: int, applied: list[Update]) -> None:
        """Apply ``sender``'s batches next in its order whose ``after`` is applied here."""
        expected = self._next_recv[sender]
        while (ready := self._early.get((sender, expected))) is not None:
            if any(w in self._next_recv and self._next_recv[w] <= seq for w, seq in ready.after):
                break  # (a worker that left had every batch applied here first)
            del self._early[(sender, expected)]
            self.view.apply(ready.updates)
            applied.extend(ready.updates)
            expected += 1
        self._next_recv[sender] = expected

    def early_batches(self) -> list[ProgressBatch]:
        """Batches received ahead of a missing predecessor, not yet applied."""
        return list(self._early.values())

    # -- workers that join and leave ---------------------------------------------------
    def next_seq(self) -> int:
        """The seq this worker's next flushed batch will have."""
        return self._next_send

    def hand_over(self, ps: Pointstamp) -> None:
        """Give one capability this worker owns at ``ps`` to a joining worker: the count
        stays as it is (the joiner holds it now), so no update is sent.

        Mint it first, in a step of this worker's: record ``(ps, +1)`` while holding a
        capability at the same output and a time at or before ``ps``'s, and flush it.
        Every view then counts the joiner's capability before it could see this
        worker drop the one it came from (one sender's batches apply in order). The
        joiner's batches must not overtake that batch at any view: its drop of ``ps``
        would cancel, in the count of ``ps``, this worker's own capability there (the
        model test found it), so the joiner's first batch names the minting batch as
        its ``after``."""
        if self._owned.get(ps) <= 0:
            raise ValueError(f"worker {self.worker} owns no capability at {ps} to hand over")
        if any(q == ps and d > 0 for q, d in self._buffer.items()):
            raise ValueError(
                f"worker {self.worker}: flush the batch that counts {ps} before handing it over"
            )
        self._owned.update(ps, -1)

    @classmethod
    def joining(
        cls,
        worker: int,
        donor: WorkerProgress,
        capabilities: Sequence[Pointstamp] = (),
        after: int | None = None,
        first_seq: int = 0,
    ) -> WorkerProgress:
        """A worker added to a running dataflow, from ``donor``'s state at the join.

        Its view is a copy of the donor's, and it expects each sender's batches from
        where the donor is (the transport must deliver it whatever was still on its way
        to the donor), so it is exactly as safe as the donor's. It owns
        ``capabilities``, handed over by the donor (:meth:`hand_over`) and counted in
        the donor's batch ``after``, which every view applies before the joiner's
        first batch. Every other worker calls :meth:`add_peer`.

        The donor may count the joiner as a peer already (a host that cannot copy what
        is on its way to the donor has every worker send to the joiner first, and the
        donor wait for what they sent before): the joiner then ignores the batches it
        receives that the copy holds.

        ``first_seq``: the seq its batches start from: where an earlier worker of the same
        index stopped (its batches may still be named in others' ``after``)."""
        if donor._next_recv.get(worker, first_seq) != first_seq or any(
            s == worker for s, _ in donor._early
        ):
            raise ValueError(f"worker {worker} is a peer already")
        new = cls(worker, worker + 1, donor.graph, accumulate=donor.accumulate)
        new.peers = donor.peers + 1
        new.view = ProgressView(donor.graph, donor.view.counts().items())
        new._next_recv = {**donor._next_recv, worker: first_seq}
        new._next_send = first_seq
        new._early = dict(donor._early)
        new._has_copy = True
        new._owned = ChangeBatch((ps, 1) for ps in capabilities)
        if capabilities and after is None:
            raise ValueError("a joiner handed capabilities needs the batch that minted them")
        if after is not None:
            new._after[donor.worker] = after
        return new

    def adopt(self, capabilities: Sequence[Pointstamp], owner: int, after: int) -> None:
        """Take capabilities ``owner`` minted and handed over (:meth:`hand_over`) in its
        batch ``after``: this worker's next batch, which may drop them, is applied after
        that one everywhere."""
        if owner == self.worker:
            raise ValueError(f"worker {self.worker} cannot adopt its own capabilities")
        for ps in capabilities:
            self._owned.update(ps, 1)
        self._after[owner] = max(after, self._after.get(owner, -1))

    def senders(self) -> list[int]:
        """The workers whose batches this one applies (itself included), in index order:
        those it broadcasts its own batches to."""
        return sorted(self._next_recv)

    def applied_from(self, worker: int) -> int:
        """How many of ``worker``'s batches are applied here."""
        return self._next_recv[worker]

    def add_peer(self, worker: int, first_seq: int = 0) -> None:
        """Worker ``worker`` joined: expect its batches, from seq ``first_seq``."""
        if worker in self._next_recv:
            raise ValueError(f"worker {worker} is a peer already")
        self._next_recv[worker] = first_seq
        self.peers += 1

    def remove_peer(self, worker: int, sent: int) -> None:
        """Worker ``worker`` left after flushing ``sent`` batches and dropping every
        capability; once they are all applied here it is forgotten."""
        if self._next_recv.get(worker) != sent or any(s == worker for s, _ in self._early):
            raise ValueError(
                f"worker {self.worker}: worker {worker} left, but its batches up to "
                f"{sent} are not all applied here"
            )
        del self._next_recv[worker]
        self.peers -= 1
