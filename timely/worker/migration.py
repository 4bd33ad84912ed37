"""Megaphone's migration on one worker: configurations in, bins out and in.

A reconfigurable run (:meth:`timely.graph.plan.Plan.with_control`) broadcasts each routing
configuration, a table in force from epoch ``T`` on, to a hidden input of every keyed
vertex. On each worker, for each such vertex:

1. **Receiving** the configuration at ``T`` records the table
   (:class:`~timely.routing.bins.Routing`) and holds a capability at ``T``, so nothing
   downstream completes ``T`` (and no checkpoint after ``T`` is taken) before this
   worker's share of the migration is done.
2. **Routing.** A batch at epoch ``e`` bound for the vertex is routed by the table in force
   at ``e`` once every configuration up to ``e`` is known here: the frontier of the
   vertex's control input has passed ``e``. Until then it is held, counted at the
   sender's output like a capability (not at the receiver's input, where a receiver's
   consumption of part of it could cancel the count at a third worker before the
   release reaches it).
3. **Activation.** Once the control frontier has passed ``T``, the bins that change owner
   between the table before ``T`` and the table at ``T`` are known: those leaving this
   worker and those arriving.
4. **Shipping.** The old owner extracts a leaving bin's keys from every keyed table at a
   time before ``T`` once nothing at an epoch before ``T`` can still reach the vertex or
   be notified there: the state then reflects every epoch before ``T``. (Tables at
   ``T`` or later hold no such key, unless the bin comes back here by a later
   configuration: those are this worker's again.) It travels beside the data in the
   step's message to the new owner.
5. **Installing.** The new owner puts the bins into its tables once it too is done with
   the epochs before ``T`` (its own notifications before ``T`` must not see keys whose
   epochs before ``T`` were the old owner's to finish), and in epoch order: bins due at
   an earlier epoch from a slower old owner go in first, since the notifications their
   install asks for would otherwise come after a later install's keys. Its notifications at
   epochs ``>= T`` wait until every bin due by then has arrived (and the old owner's
   until the bins have left); records at ``>= T`` may meanwhile be received into
   per-time tables, because state carried across epochs only changes in ``on_notify``.
6. The capability at ``T`` is released once this worker has shipped and installed all of
   ``T``'s bins.

Fluid migration is a sequence of configurations at successive epochs, each moving a few
bins (:func:`timely.routing.bins.steps`): each epoch waits only for its own bins.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from progress import Timestamp, target
from timely.graph.plan import EdgeSpec
from timely.routing.channels import Exchange
from timely.state.keyed import StatefulVertex
from timely.worker.ports import MigrationHost

BinLoad = dict[str, Any]
"""``{"records": [per bin], "useful_ns": int}``: one worker's measure for a rebalance."""

Shipment = tuple[int, int, list[int], Any]
"""``(vertex, epoch T, bins, tables)``: keyed state moving to a new owner."""


class Migration:
    """One worker's side of every migration (see the module's docstring)."""

    def __init__(self, worker: MigrationHost, start: int) -> None:
        self.w = worker
        plan = worker.plan
        self.control = {
            s.index: s.control_port for s in plan.vertices if s.control_port is not None
        }
        self.active = bool(self.control)
        """Whether the run can reconfigure at all (else every method is skipped)."""
        self.migratable = {
            v for v in self.control if isinstance(worker.vertices[v], StatefulVertex)
        }
        """Keyed vertices whose state moves with their bins. A vertex that keeps state of
        its own kind is never moved: its inputs keep the run's first table."""
        self.follows = self.migratable | {
            v for v in self.control if getattr(worker.vertices[v], "state_per_time", False)
        }
        """Keyed vertices routed by the table in force at each epoch: the migratable ones
        and those that keep nothing across times (:attr:`timely.vertex.Vertex.state_per_time`)."""
        for v in self.migratable:
            vertex = worker.vertices[v]
            assert isinstance(vertex, StatefulVertex)
            for state in vertex.states().values():
                state.keep_bin_index(plan.bins)
        self.activated = dict.fromkeys(self.migratable, start - 1)
        """Per vertex, the latest configuration whose moves are known (restored ones are done)."""
        self.holding: dict[int, set[int]] = {v: set() for v in self.migratable}
        self.outgoing: dict[int, list[tuple[int, dict[int, int]]]] = {
            v: [] for v in self.migratable
        }
        self.incoming: dict[int, dict[int, set[int]]] = {v: {} for v in self.migratable}
        self.arrivals: list[Shipment] = []
        self.held: list[tuple[EdgeSpec, list[Any], Timestamp]] = []
        self.shipped: dict[int, list[Shipment]] = {}
        self.preparing: dict[int, float] = {}
        """Per vertex, the keys coming by activated configurations, as a share of those
        held: room to make in its tables in an idle step (:meth:`prepare`)."""
        self.dirty = False
        """Frontiers moved or state arrived since :meth:`advance` last ran."""
        self.load = np.zeros(plan.bins, dtype=np.int64) if self.migratable else None
        """Records this worker has routed to each bin of a migratable vertex (the
        session reads and clears it for :meth:`~timely.session.base.Session.rebalance`)."""
        self.useful_ns = 0
        """Time in the activations of :attr:`migratable` vertices (DS2's useful time), ns."""

    def keys_held(self) -> int:
        """How many keys the migratable steps hold in all (what a live change would move,
        bins' share of it): the driver sizes a change's fluid steps by it."""
        total = 0
        for v in self.migratable:
            vertex = self.w.vertices[v]
            assert isinstance(vertex, StatefulVertex)
            total += sum(len(state) for state in vertex.states().values())
        return total

    def take_load(self) -> BinLoad:
        """The records routed per bin and the useful time spent since the last call."""
        useful, self.useful_ns = self.useful_ns, 0
        if self.load is None:
            return {"records": [], "useful_ns": useful}
        records: list[int] = self.load.tolist()
        self.load[:] = 0
        return {"records": records, "useful_ns": useful}

    # -- routing -------------------------------------------------------------------------
    def table_for(self, dst: int, epoch: int) -> np.ndarray[Any, Any]:
        """The table that routes a batch at ``epoch`` to vertex ``dst``."""
        routing = self.w.routing
        if dst in self.follows:
            return routing.array_at(epoch)
        return routing.arrays[0]

    def known(self, v: int, epoch: int) -> bool:
        """Whether every configuration up to ``epoch`` has reached ``v`` on this worker."""
        frontier = self.w.tracker.frontier(target(v, self.control[v]))
        return all(f[0] > epoch for f in frontier)

    def must_hold(self, edge: EdgeSpec, time: Timestamp) -> bool:
        """Whether a batch on ``edge`` at ``time`` must wait for configurations."""
        return (
            edge.dst in self.follows
            and isinstance(edge.channel, Exchange)
            and not self.known(edge.dst, time[0])
        )

    def hold(self, edge: EdgeSpec, records: list[Any], time: Timestamp) -> None:
        """Keep a batch until its epoch's table is known (the worker counts it in flight)."""
        self.held.append((edge, records, time))

    # -- configurations ------------------------------------------------------------------
    def configure(self, v: int, records: list[Any], time: Timestamp) -> None:
        """Configurations for ``v`` at ``time``: each record is a whole table."""
        epoch = time[0]
        for table in records:
            self.w.routing.add(epoch, table)
        if v in self.migratable and epoch > self.activated[v] and epoch not in self.holding[v]:
            self.holding[v].add(epoch)
            self.w.contexts[v].hold((epoch,), 1)
        self.dirty = True

    def waiting(self, v: int, epoch: int) -> bool:
        """Whether ``v``'s notifications at ``epoch`` must wait: bins moving here by then
        have not arrived, or bins leaving by then have not left (a notification at or
        after their configuration must not see them)."""
        if v not in self.migratable:
            return False
        if any(t <= epoch for t in self.incoming[v]):
            return True
        if any(t <= epoch for t, _ in self.outgoing[v]):
            return True
        activated = self.activated[v]
        return any(activated < t <= epoch for t in self.w.routing.epochs)

    def pending(self) -> bool:
        """Whether any migration work is left on this worker."""
        return bool(
            self.held
            or self.arrivals
            or any(self.holding.values())
            or any(self.outgoing.values())
            or any(self.incoming.values())
        )

    def busy(self) -> bool:
        """Whether a step now may move a migration on (frontiers moved, state arrived)."""
        return self.dirty and self.pending()

    # -- the step ------------------------------------------------------------------------
    def advance(self) -> None:
        """Release held batches, activate, install, ship and release what can go now."""
        self.dirty = False
        w = self.w
        if self.held:
            held, self.held = self.held, []
            for edge, records, time in held:
                if self.must_hold(edge, time):
                    self.held.append((edge, records, time))
                else:
                    w.release_held(edge, records, time)
        changed = False
        for v in self.migratable:
            changed |= self._activate(v)
        changed |= self._install()
        for v in self.migratable:
            self._ship(v)
            changed |= self._release(v)
        if changed:
            w.recheck_notifications()

    def _activate(self, v: int) -> bool:
        routing, me = self.w.routing, self.w.index
        frontier = self.w.tracker.frontier(target(v, self.control[v]))
        limit = min((f[0] for f in frontier), default=None)
        changed = False
        owned, coming = 0, 0
        for i in range(1, len(routing.epochs)):
            epoch = routing.epochs[i]
            if epoch <= self.activated[v]:
                continue
            if limit is not None and epoch >= limit:
                break
            before, after = routing.tables[i - 1], routing.tables[i]
            if not changed:
                owned = before.count(me)
            leaving = {b: after[b] for b in range(len(after)) if before[b] == me != after[b]}
            arriving = {b for b in range(len(after)) if after[b] == me != before[b]}
            if leaving:
                self.outgoing[v].append((epoch, leaving))
            if arriving:
                self.incoming[v][epoch] = arriving
                coming += len(arriving)
            self.activated[v] = epoch
            changed = True
        if coming and owned:
            # Room in the tables for what is coming: made when the worker is idle, before
            # the first install (:meth:`prepare`).
            self.preparing[v] = self.preparing.get(v, 0.0) + coming / owned
        return changed

    def prepare(self, v: int | None = None) -> None:
        """Make room for the bins coming to ``v`` (or to the first vertex with some):
        growing a large table copies it whole, which is better done in an idle step than
        in an install that an epoch waits for (:meth:`KeyedState.reserve`)."""
        if v is None:
            v = next(iter(self.preparing))
        share = self.preparing.pop(v, None)
        if share is not None:
            vertex = self.w.vertices[v]
            assert isinstance(vertex, StatefulVertex)
            vertex.reserve_bins(share)

    def arrived(self, shipments: list[Shipment]) -> None:
        """State sent here by old owners (installed once its configuration is active)."""
        self.arrivals.extend(shipments)
        self.dirty = True

    def _install(self) -> bool:
        if not self.arrivals:
            return False
        w = self.w
        later: list[Shipment] = []
        # In epoch order, and each only once every bin due at an earlier epoch is in:
        # installing bins at ``T`` asks again for the notifications their times need
        # (:meth:`StatefulVertex.install_bins`), and one asked for at an epoch before a
        # later install would see that install's keys, whose epochs before it were their
        # old owner's to finish (a window sent twice).
        for v, epoch, bins, tables in sorted(self.arrivals, key=lambda a: a[1]):
            if (
                epoch > self.activated[v]
                or any(e < epoch for e in self.incoming[v])
                or not self.ready(v, epoch)
            ):
                later.append((v, epoch, bins, tables))
                continue
            self.prepare(v)  # not done in an idle step yet: done now
            vertex = w.vertices[v]
            assert isinstance(vertex, StatefulVertex)
            ctx = w.contexts[v]
            ctx.now = (-1, (epoch,))
            try:
                vertex.install_bins(tables, epoch)
            except Exception as e:
                ctx.user_error(e, (epoch,), None, type(vertex).install_bins)
            finally:
                ctx.now = None
            waiting = self.incoming[v][epoch]
            waiting.difference_update(bins)
            if not waiting:
                del self.incoming[v][epoch]
        installed = len(later) < len(self.arrivals)
        self.arrivals = later
        return installed

    def ready(self, v: int, epoch: int) -> bool:
        """Whether ``v`` here can no longer receive, or be notified at, an epoch before
        ``epoch`` (its state for the bins leaving at ``epoch`` is final), and has been
        snapshotted for every checkpoint before ``epoch`` (bins that leave or arrive
        after a checkpoint's snapshot would be in neither worker's part)."""
        w = self.w
        frontier = w.tracker.frontier
        for i in range(w.plan.vertices[v].inputs):
            if any(f[0] < epoch for f in frontier(target(v, i))):
                return False
        if any(t[0] < epoch for t in w.contexts[v].requests):
            return False
        if any(t[0] < epoch for _, t, _ in w.inbox[v]):
            return False
        return self.snapshotted(v, epoch)

    def snapshotted(self, v: int, epoch: int) -> bool:
        """Whether ``v`` has its snapshot for every checkpoint before ``epoch`` (taken
        now if it can be)."""
        snapshots = self.w.snapshots
        return snapshots is None or not snapshots.hold_back(v, epoch)

    def _ship(self, v: int) -> None:
        queue = self.outgoing[v]
        while queue and self.ready(v, queue[0][0]):
            epoch, leaving = queue.pop(0)
            by_dest: dict[int, list[int]] = {}
            for b, dest in leaving.items():
                by_dest.setdefault(dest, []).append(b)
            vertex = self.w.vertices[v]
            assert isinstance(vertex, StatefulVertex)
            for dest, bins in sorted(by_dest.items()):
                tables = vertex.extract_bins(set(bins), self.w.routing.bins, epoch)
                self.shipped.setdefault(dest, []).append((v, epoch, bins, tables))

    def _release(self, v: int) -> bool:
        done = [
            t
            for t in self.holding[v]
            if t <= self.activated[v]
            and t not in self.incoming[v]
            and all(e != t for e, _ in self.outgoing[v])
        ]
        for t in done:
            self.holding[v].discard(t)
            self.w.contexts[v].hold((t,), -1)
        return bool(done)

    def take_shipped(self) -> dict[int, list[Shipment]]:
        """State to send this step, by destination worker."""
        out, self.shipped = self.shipped, {}
        return out
