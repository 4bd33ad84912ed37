"""The driver's side of workers that join and leave a running dataflow (issue 29).

The driver decides every change of members and the epoch it takes effect at, and routes
its input commands by it: a joiner gets records of epochs from its join on (it holds its
inputs' capabilities there, minted by a donor); a leaver gets none from its leave on,
and a ``Close`` of each input once the input reaches that epoch, so it drops its
capabilities only after its bins have left. :func:`live_blocker` says when a change
cannot be made live, and why (the session then stops and restores instead).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from timely.comm.messages import Advance, Close, InputCommand, Send
from timely.graph.plan import Plan
from timely.routing.channels import Exchange
from timely.routing.members import Members

LEAVING = "the last change is still under way (workers leaving, source partitions moving)"
"""Why a worker cannot join yet (the session makes the change once it is done)."""


class Membership:
    """Who takes part from which epoch, and where each input command goes."""

    def __init__(self, workers: int, first_epoch: int) -> None:
        self.members = Members(workers)
        self.alive: list[int] = list(range(workers))
        """Workers running now (a leaver stays until it has gone)."""
        self.first = first_epoch
        self.epochs: dict[int, int] = {}
        """Per driver input, the epoch it is at (from its ``Advance`` commands)."""
        self.closed: set[int] = set()
        """Inputs the driver closed."""
        self.leaving: dict[int, int] = {}
        """Workers leaving, and the epoch they leave at."""
        self._closed_for: set[tuple[int, int]] = set()
        """``(worker, input)``: a leaver's input closed ahead of the others'."""
        self._launched = workers
        self.sent: dict[int, int] = {}
        """Per index of a worker that left, how many progress batches it sent."""
        self.owners: dict[int, dict[int, int]] = {}
        """Per source vertex, the worker reading each partition (``p % workers`` at the
        launch, as :class:`~timely.graph.system.SourceVertex` deals them, until a change)."""

    def deal(
        self, vertex: int, partitions: int, staying: Sequence[int]
    ) -> list[tuple[int, list[int], int]]:
        """Re-deal source ``vertex``'s partitions over the workers ``staying``, partition
        ``p`` to the ``p % n``-th of them: the moves ``(from, partitions, to)`` to make,
        recorded as made."""
        owners = self.owners.setdefault(vertex, {p: p % self._launched for p in range(partitions)})
        moves: dict[tuple[int, int], list[int]] = {}
        for p in range(partitions):
            to = staying[p % len(staying)]
            if owners[p] != to:
                moves.setdefault((owners[p], to), []).append(p)
                owners[p] = to
        return [(a, ps, b) for (a, b), ps in moves.items()]

    def epoch_of(self, vertex: int) -> int:
        """The epoch input ``vertex`` is at."""
        return self.epochs.get(vertex, self.first)

    def open_inputs(self, roots: Sequence[int]) -> tuple[int, ...]:
        """The inputs among ``roots`` not yet closed by the driver."""
        return tuple(r for r in roots if r not in self.closed)

    def route(self, vertex: int, cmd: InputCommand, turn: int) -> list[tuple[int, InputCommand]]:
        """Where a driver command for input ``vertex`` goes: ``(worker, command)`` pairs in
        order. Records go to the workers taking part at the input's epoch; an advance
        and a close to every worker running, but a leaver's input closes instead once
        it reaches the leave's epoch."""
        if isinstance(cmd, Send):
            epoch = self.epoch_of(vertex)
            members = [w for w in self.members.at(epoch) if (w, vertex) not in self._closed_for]
            return route_input(cmd, members, turn)
        if isinstance(cmd, Advance):
            self.epochs[vertex] = max(cmd.epoch, self.epoch_of(vertex))
        else:
            self.closed.add(vertex)
        out: list[tuple[int, InputCommand]] = []
        for w in self.alive:
            if (w, vertex) in self._closed_for:
                continue
            if w in self.leaving and (
                isinstance(cmd, Close) or self.epoch_of(vertex) >= self.leaving[w]
            ):
                self._closed_for.add((w, vertex))
                out.append((w, Close()))
                continue
            out.append((w, cmd))
        return out

    def join(self, worker: int, epoch: int) -> None:
        """``worker`` takes part from ``epoch`` on."""
        self.members.join(worker, epoch)
        self.alive.append(worker)

    def leave(
        self, worker: int, epoch: int, roots: Sequence[int]
    ) -> list[tuple[int, int, InputCommand]]:
        """``worker`` takes no part from ``epoch`` on: the ``(worker, input, Close)``
        commands to send it now, for the inputs already at ``epoch`` or later."""
        self.members.leave(worker, epoch)
        self.leaving[worker] = epoch
        out: list[tuple[int, int, InputCommand]] = []
        for r in self.open_inputs(roots):
            if self.epoch_of(r) >= epoch:
                self._closed_for.add((worker, r))
                out.append((worker, r, Close()))
        return out

    def gone(self, worker: int, sent: int) -> None:
        """``worker`` has left, after sending ``sent`` progress batches: one that joins
        with its index later numbers its batches on from there."""
        self.sent[worker] = sent
        self.alive.remove(worker)
        self.leaving.pop(worker, None)
        self._closed_for = {(w, v) for w, v in self._closed_for if w != worker}


def live_blocker(
    plan: Plan,
    old: int,
    new: int,
    migratable: Collection[int],
    *,
    backend: str | None,
    inputs_closed: bool,
    leaving: bool = False,
) -> str | None:
    """Why going from ``old`` to ``new`` workers cannot be done live (None: it can).
    ``migratable``: the keyed steps whose keys may move (their state moves with their
    bins, or they keep none across times); ``backend``:
    the backend's name when it cannot add or remove workers live."""
    if backend is not None:
        return f"{backend} does not add or remove workers live yet"
    if plan.control is None:
        return (
            "bins move only in a reconfigurable run: start it with "
            "flow.activate(..., reconfigurable=True)"
        )
    if inputs_closed:
        return "the run's inputs are closed"
    if leaving and new > old:
        return LEAVING
    if new < old:
        for outputs in plan.out_edges:
            for edges in outputs:
                for edge in edges:
                    if isinstance(edge.channel, Exchange) and edge.dst not in migratable:
                        name = plan.vertices[edge.dst].name
                        return (
                            f"step {name!r} receives records by key but its state does not "
                            "move with its bins (state of its own kind kept across epochs, "
                            "or inside a loop): its keys cannot leave a worker live"
                        )
    return None


def driver_inputs(plan: Plan) -> tuple[int, ...]:
    """The roots the driver feeds (not the sources, which workers read themselves)."""
    return tuple(r for r in plan.roots if plan.vertices[r].kind == "input")


def route_input(
    cmd: InputCommand, members: Sequence[int], turn: int
) -> list[tuple[int, InputCommand]]:
    """Where a driver input command goes among ``members``: ``(worker, command)`` pairs.

    ``send`` spreads its records over the members in contiguous chunks, starting at the
    member ``turn`` (callers rotate it so small sends do not all land on one worker);
    ``advance`` and ``close`` go to every member.
    """
    if not isinstance(cmd, Send):
        return [(w, cmd) for w in members]
    records = cmd.records
    n = len(members)
    size = -(-len(records) // n) if records else 0
    out: list[tuple[int, InputCommand]] = []
    for i in range(n):
        chunk = records[i * size : (i + 1) * size]
        if chunk:
            out.append((members[(turn + i) % n], Send(chunk)))
    return out
