"""The pointstamp tracker: occurrence counts in, frontiers at every location out.

Each location keeps two multisets of times: its own *pointstamps* (messages waiting
at a target, capabilities held at a source) and its *implications*: its pointstamps'
frontier plus the frontier of every predecessor moved along the one-step summary
between them. The frontier at a location is the frontier of its implications: the
minimal times that any live pointstamp could still result in there.

Only frontier changes travel. ``propagate_all`` pops them from a heap in timestamp
order, so a retraction and the addition it causes further round a loop meet at the
same ``(time, location)`` and cancel instead of chasing each other; the work done is
proportional to how many frontiers move, not to the size of the graph.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from progress.antichain import MutableAntichain
from progress.change_batch import ChangeBatch
from progress.location import Location, Pointstamp, source, target
from progress.reachability import Graph
from progress.summary import PathSummary
from progress.timestamp import Timestamp


class Tracker:
    """Frontiers at every location of ``graph``, maintained incrementally."""

    def __init__(self, graph: Graph, check_times: bool = True) -> None:
        self.graph = graph
        self._check = check_times
        n = len(graph.locations)
        self._pointstamps = [MutableAntichain() for _ in range(n)]
        self._implications = [MutableAntichain() for _ in range(n)]
        index = graph.index
        self._succ: list[tuple[tuple[int, PathSummary], ...]] = [
            tuple((index[nxt], s) for nxt, s in graph.successors(loc)) for loc in graph.locations
        ]
        self._pending: ChangeBatch[tuple[int, Timestamp]] = ChangeBatch()
        self._worklist: list[tuple[Timestamp, int, int]] = []
        self._live = 0
        self.worklist_pops = 0
        """How many heap entries propagation has processed: its cost, for tests and benchmarks."""

    # -- input ----------------------------------------------------------------------
    def update(self, loc: Location, time: Timestamp, delta: int) -> None:
        """Record ``delta`` occurrences at pointstamp ``(loc, time)``; applied on propagate."""
        if self._check:
            self.graph.check_time(loc, time)
        self._pending.update((self.graph.index[loc], time), delta)

    def update_source(self, node: int, port: int, time: Timestamp, delta: int) -> None:
        """Capabilities at output ``port`` of ``node``."""
        self.update(source(node, port), time, delta)

    def update_target(self, node: int, port: int, time: Timestamp, delta: int) -> None:
        """Messages at input ``port`` of ``node``."""
        self.update(target(node, port), time, delta)

    def update_all(self, updates: Iterable[tuple[Pointstamp, int]]) -> None:
        """Record many ``((loc, time), delta)`` updates."""
        for (loc, time), delta in updates:
            self.update(loc, time, delta)

    # -- propagation --------------------------------------------------------------------
    def propagate_all(self) -> list[tuple[Location, Timestamp, int]]:
        """Apply pending updates; return the net frontier changes ``(loc, time, ±1)``."""
        if self._pending.is_empty() and not self._worklist:
            return []
        worklist = self._worklist
        push = heapq.heappush
        for (i, time), delta in self._pending.drain():
            before = self._pointstamps[i].count_for(time)
            after = before + delta
            self._live += (after > 0) - (before > 0)
            for t, d in self._pointstamps[i].update(time, delta):
                push(worklist, (t, i, d))

        changes: dict[tuple[int, Timestamp], int] = {}  # net, as a ChangeBatch keeps them
        implications = self._implications
        succ = self._succ
        pop = heapq.heappop
        pops = 0
        while worklist:
            time, i, delta = pop(worklist)
            pops += 1
            while worklist and worklist[0][0] == time and worklist[0][1] == i:
                delta += pop(worklist)[2]
                pops += 1
            if not delta:
                continue
            for t, d in implications[i].update(time, delta):
                key = (i, t)
                net = changes.get(key, 0) + d
                if net:
                    changes[key] = net
                else:
                    del changes[key]
                for j, s in succ[i]:
                    r = s.results_in(t)
                    if r is not None:
                        push(worklist, (r, j, d))
        self.worklist_pops += pops
        locations = self.graph.locations
        return [(locations[i], t, d) for (i, t), d in changes.items()]

    # -- queries ----------------------------------------------------------------------
    def frontier(self, loc: Location) -> tuple[Timestamp, ...]:
        """Minimal times that could still reach ``loc`` (as of the last propagation)."""
        return self._implications[self.graph.index[loc]].frontier()

    def could_reach(self, loc: Location, time: Timestamp) -> bool:
        """Some time in the frontier at ``loc`` is ``<= time``: ``time`` may still be seen
        there (as of the last propagation)."""
        return self._implications[self.graph.index[loc]].less_equal(time)

    def pointstamp_frontier(self, loc: Location) -> tuple[Timestamp, ...]:
        """Minimal times of the live pointstamps at ``loc`` itself."""
        return self._pointstamps[self.graph.index[loc]].frontier()

    def count(self, loc: Location, time: Timestamp) -> int:
        """Occurrence count of ``(loc, time)`` (as of the last propagation)."""
        return self._pointstamps[self.graph.index[loc]].count_for(time)

    def is_idle(self) -> bool:
        """No live pointstamp anywhere and nothing pending: every frontier is empty."""
        return self._live == 0 and self._pending.is_empty() and not self._worklist
