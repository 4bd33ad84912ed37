"""The progress exchange protocol as a state machine under random message orders.

W workers take steps (consume a message, send messages, keep, downgrade or drop
capabilities; every increment justified), flush progress batches, and the transport
delivers them in any order (as Ray may). Invariants after every rule:

* true occurrence counts are never negative;
* conservation: each worker's view + what is in flight to it + every sender's unsent
  buffer equals the true counts;
* Safe: every pointstamp live in the truth is could-be-reached from the worker's view
  (so no view ever thinks a time complete that is not);
* Mono: once a view says nothing can reach a pointstamp, neither the view nor the truth
  ever can again;
* the view's Naiad precursor counts give exactly the minimal live pointstamps.

At the end every worker drains its work and flushes only as the protocol decides:
accumulation must not hold anything back forever, and every view ends empty.

Mutants (a step's batch split in two, a receiver that ignores the per-sender order, an
accumulator that sends a decrement while holding back the increment it justifies) must
each be caught by the same invariants: that is how we know they are not vacuous.
"""

from __future__ import annotations

import functools
from collections import Counter, deque

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from progress import (
    Graph,
    Location,
    Pointstamp,
    ProgressBatch,
    Update,
    WorkerProgress,
    source,
)
from tests.conftest import state_machine_examples
from tests.progress.graphs import graphs


class SafetyViolation(AssertionError):
    """A progress invariant failed."""


MAX_TOKENS = 6


def _bump(data: st.DataObject, time: tuple[int, ...]) -> tuple[int, ...]:
    """``time`` or a later time (one coordinate advanced by 0..2)."""
    k = data.draw(st.integers(0, len(time) - 1))
    d = data.draw(st.sampled_from([0, 0, 1, 2]))
    return time[:k] + (time[k] + d,) + time[k + 1 :]


class ExchangeMachine(RuleBasedStateMachine):
    protocol: type[WorkerProgress] = WorkerProgress

    @initialize(
        graph=graphs(max_depth=2),
        workers=st.sampled_from([1, 2, 3]),
        accumulate=st.booleans(),
    )
    def start(self, graph: Graph, workers: int, accumulate: bool) -> None:
        self.graph = graph
        self.reach = functools.cache(graph.could_result_in)
        self.W = workers
        self.active: list[int] = list(range(workers))
        """The workers in the dataflow now (``test_membership`` adds and removes some)."""
        inputs = [n for n, spec in enumerate(graph.nodes) if not spec.input_depths]
        caps: list[Pointstamp] = [(source(n), (0,)) for n in inputs]
        self.protos = [
            self.protocol(w, workers, graph, capabilities=caps, accumulate=accumulate)
            for w in range(workers)
        ]
        self.truth: Counter[Pointstamp] = Counter({ps: workers for ps in caps})
        self.tokens: list[list[Pointstamp]] = [list(caps) for _ in range(workers)]
        self.queues: dict[tuple[int, int], deque[ProgressBatch]] = {
            (s, r): deque() for s in range(workers) for r in range(workers)
        }
        self.history: set[Pointstamp] = set(caps)
        self.released: list[set[Pointstamp]] = [set() for _ in range(workers)]

    # -- the world ------------------------------------------------------------------
    def _emit(
        self, data: st.DataObject, w: int, loc: Location, time: tuple[int, ...], ups: list[Update]
    ) -> None:
        """From output ``loc`` at ``time`` or later: send messages along its edges."""
        for dst, _ in self.graph.successors(loc):
            for _ in range(data.draw(st.integers(1, 2))):
                t = _bump(data, time)
                v = data.draw(st.sampled_from(self.active))
                ups.append(((dst, t), 1))
                self.tokens[v].append((dst, t))

    @precondition(lambda self: any(self.tokens))
    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        w = data.draw(st.sampled_from([w for w in self.active if self.tokens[w]]))
        tokens = self.tokens[w]
        idx = data.draw(st.integers(0, len(tokens) - 1))
        loc, time = tokens[idx]
        room = sum(map(len, self.tokens)) < MAX_TOKENS * len(self.active)
        ups: list[Update] = []
        if not loc.is_source:
            # Receive a message: consume it, maybe produce at the node's outputs.
            tokens.pop(idx)
            ups.append(((loc, time), -1))
            spec = self.graph.nodes[loc.node]
            for (i, o), summaries in spec.internal.items():
                if i != loc.port or not room:
                    continue
                for s in summaries:
                    r = s.results_in(time)
                    if r is None:
                        continue
                    out = source(loc.node, o)
                    how = data.draw(st.sampled_from(["nothing", "send", "hold"]))
                    if how == "send":
                        self._emit(data, w, out, _bump(data, r), ups)
                    elif how == "hold":
                        t = _bump(data, r)
                        ups.append(((out, t), 1))
                        tokens.append((out, t))
        else:
            # Use a capability: send while keeping it, downgrade it, or drop it.
            how = data.draw(st.sampled_from(["send", "downgrade", "drop", "send_drop"]))
            if how in ("send", "send_drop") and room:
                self._emit(data, w, loc, time, ups)
            if how in ("downgrade", "drop", "send_drop"):
                tokens.pop(idx)
                ups.append(((loc, time), -1))
                if how == "downgrade":
                    later = _bump(data, time)
                    ups.append(((loc, later), 1))
                    tokens.append((loc, later))
        for ps, delta in ups:
            self.truth[ps] += delta
            self.history.add(ps)
        self.protos[w].record(ups)
        if data.draw(st.booleans()):
            # A worker flushes after its step, idle or with more work queued this round.
            self._flush(w, force=False, idle=data.draw(st.booleans()))

    @rule(data=st.data(), force=st.booleans(), idle=st.booleans())
    def flush(self, data: st.DataObject, force: bool, idle: bool) -> None:
        self._flush(data.draw(st.sampled_from(self.active)), force, idle)

    def _flush(self, w: int, force: bool, idle: bool) -> None:
        for _ in range(4):
            batch = self.protos[w].flush(force, idle)
            if batch is None:
                break
            for r in self.active:
                self.queues[(w, r)].append(batch)

    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        busy = [k for k, q in self.queues.items() if q]
        if not busy:
            return
        key = data.draw(st.sampled_from(busy))
        queue = self.queues[key]
        # The transport may reorder (Ray does not promise order); the protocol must not care.
        i = data.draw(st.sampled_from([0, len(queue) - 1]))
        batch = queue[i]
        del queue[i]
        self.protos[key[1]].receive(batch)

    @rule(data=st.data())
    def deliver_permuted(self, data: st.DataObject) -> None:
        """Deliver everything queued on one channel in an arbitrary order."""
        busy = [k for k, q in self.queues.items() if len(q) > 1]
        if not busy:
            return
        key = data.draw(st.sampled_from(busy))
        batches = data.draw(st.permutations(list(self.queues[key])))
        self.queues[key].clear()
        for i, batch in enumerate(batches):
            self.protos[key[1]].receive(batch)
            self.queues[key].extend(batches[i + 1 :])
            self.conservation()
            self.safe_and_mono()
            self.queues[key].clear()

    # -- invariants ---------------------------------------------------------------------
    def _check(self, ok: bool, message: str) -> None:
        if not ok:
            raise SafetyViolation(message)

    @invariant()
    def counts_never_negative(self) -> None:
        if hasattr(self, "truth"):
            self._check(all(c >= 0 for c in self.truth.values()), f"negative truth {self.truth}")

    @invariant()
    def conservation(self) -> None:
        if not hasattr(self, "truth"):
            return
        truth = {ps: c for ps, c in self.truth.items() if c}
        unsent: Counter[Pointstamp] = Counter()
        for p in self.protos:
            for ps, d in p.pending():
                unsent[ps] += d
        for r in self.active:
            proto = self.protos[r]
            total: Counter[Pointstamp] = Counter(proto.view.counts())
            total.update(unsent)
            for s in self.active:
                for batch in self.queues[(s, r)]:
                    for ps, d in batch.updates:
                        total[ps] += d
            for batch in proto.early_batches():
                for ps, d in batch.updates:
                    total[ps] += d
            got = {ps: c for ps, c in total.items() if c}
            self._check(got == truth, f"worker {r}: view + in flight + unsent != truth")

    @invariant()
    def safe_and_mono(self) -> None:
        if not hasattr(self, "truth"):
            return
        reach = self.reach
        live_truth = [ps for ps, c in self.truth.items() if c > 0]
        for w in self.active:
            proto = self.protos[w]
            live_view = proto.view.live()
            for q in live_truth:
                self._check(
                    any(reach(v, q) for v in live_view),
                    f"Safe: worker {w}'s view cannot reach live {q}",
                )
            released = self.released[w]
            for p in released:
                self._check(
                    not any(reach(v, p) for v in live_view),
                    f"Mono: worker {w}'s view reaches {p} again",
                )
                self._check(
                    not any(reach(q, p) for q in live_truth), f"Mono: the truth reaches {p} again"
                )
            for p in self.history - released:
                if not any(reach(v, p) for v in live_view):
                    released.add(p)

    @invariant()
    def precursor_counts_give_the_frontier(self) -> None:
        if not hasattr(self, "truth"):
            return
        for w in self.active:
            live = self.protos[w].view.live()
            minimal = {p for p in live if not any(q != p and self.reach(q, p) for q in live)}
            self._check(set(self.protos[w].view.frontier()) == minimal, "precursor counts are off")

    def teardown(self) -> None:
        if not hasattr(self, "truth"):
            return
        # Drain: every worker consumes its messages and drops its capabilities.
        for w in self.active:
            ups = [(ps, -1) for ps in self.tokens[w]]
            for ps, d in ups:
                self.truth[ps] += d
            self.tokens[w].clear()
            self.protos[w].record(ups)
        # Flush only as the protocol decides; it must not hold anything back forever.
        for _ in range(4 * self.W + 4):
            for w in self.active:
                batch = self.protos[w].flush()
                if batch is not None:
                    for r in self.active:
                        self.queues[(w, r)].append(batch)
            for (_s, r), queue in self.queues.items():
                while queue:
                    self.protos[r].receive(queue.popleft())
        for w in self.active:
            proto = self.protos[w]
            self._check(not proto.pending(), f"worker {w} holds {proto.pending()} forever")
            self._check(not proto.view.live(), f"worker {w}'s view is not empty at the end")
            self._check(not proto.view.counts(), f"worker {w}'s counts are not zero at the end")


def _settings(examples: int, steps: int = 40) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def test_exchange_protocol_state_machine() -> None:
    run_state_machine_as_test(ExchangeMachine, settings=_settings(state_machine_examples()))


# -- mutants: each must be caught ---------------------------------------------------------


class SplitBatch(WorkerProgress):
    """Sends a step's decrements in one batch and its increments in the next."""

    def flush(self, force: bool = False, idle: bool = True) -> ProgressBatch | None:
        if self._buffer.is_empty() or not (force or self.must_flush()):
            return None
        held = self._buffer.drain()
        first = [u for u in held if u[1] < 0] or held
        self._buffer.extend(u for u in held if u not in first)
        batch = ProgressBatch(self.worker, self._next_send, tuple(first))
        self._next_send += 1
        return batch

    def must_flush(self, idle: bool = True) -> bool:
        return not self._buffer.is_empty()


class UnorderedReceiver(WorkerProgress):
    """Applies each batch on arrival, ignoring the sender's sequence numbers."""

    def receive(self, batch: ProgressBatch) -> list[Update]:
        self.view.apply(batch.updates)
        return list(batch.updates)


class HoldsJustifyingIncrement(WorkerProgress):
    """Accumulation gone wrong: sends decrements, keeps their justifying increments back."""

    def record(self, updates: object) -> None:
        super().record(updates)  # type: ignore[arg-type]
        self._partial = False

    def flush(self, force: bool = False, idle: bool = True) -> ProgressBatch | None:
        if getattr(self, "_partial", False) or self._buffer.is_empty():
            return None
        held = self._buffer.drain()
        decrements = [u for u in held if u[1] < 0]
        if decrements:
            self._buffer.extend(u for u in held if u[1] > 0)
            self._partial = True
        batch = ProgressBatch(self.worker, self._next_send, tuple(decrements or held))
        self._next_send += 1
        return batch


@pytest.mark.parametrize("mutant", [SplitBatch, UnorderedReceiver, HoldsJustifyingIncrement])
def test_mutants_are_caught(mutant: type[WorkerProgress]) -> None:
    machine = type(f"{mutant.__name__}Machine", (ExchangeMachine,), {"protocol": mutant})
    with pytest.raises(SafetyViolation):
        run_state_machine_as_test(machine, settings=mutant_search(steps=100))


def mutant_search(steps: int) -> settings:
    """The search a mutant check runs: fixed and reproducible (it must find the bug),
    stopping at the first one."""
    return settings(
        _settings(1000, steps=steps),
        phases=[Phase.generate],
        derandomize=True,
        report_multiple_bugs=False,
        print_blob=False,
        database=None,
    )
