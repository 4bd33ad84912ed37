r"""Sessions: a running dataflow the driver feeds, reads and joins (Naiad's Activate/Join).

:class:`Session` is the driver's side of a run whatever hosts its workers: inputs routed
to the workers, outputs delivered once per epoch, checkpoints coordinated, recovery,
rescale and reconfiguration. A backend (:mod:`timely.backends`) subclasses it to host the
workers; :mod:`timely.session.start` checks a run's options and starts one. The session
shows what it does in its :class:`~timely.session.view.RunView` and calls its
:class:`Monitor`\ s, which it never imports (they are made from run options by
:mod:`timely.session.monitors`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from progress import Antichain
from timely.checkpoint.cadence import Measurement
from timely.checkpoint.config import CheckpointConfig
from timely.checkpoint.coordinator import CheckpointCoordinator, Restore
from timely.checkpoint.history import Recent
from timely.comm.messages import Advance, Close, InputCommand, Send
from timely.errors import ConfigError, UserFunctionError, WorkerDied
from timely.eventlog import (
    EventLog,
    clock,
    open_driver_log,
    remove_trace,
)
from timely.graph.spec import RunSpec
from timely.graph.system import SourceVertex
from timely.routing.bins import (
    Assignment,
    Table,
    balance,
    check_bins_per_step,
    default_table,
    per_worker,
    resize,
    resolve,
    steps,
    useful_per_bin,
)
from timely.session.lead import SourceLead
from timely.session.loopwatch import LoopWatch
from timely.session.membership import LEAVING, Membership, live_blocker
from timely.session.view import RunView
from timely.sinks import SinkLineage
from timely.state.disk import remove_store
from timely.worker.migration import BinLoad


class Results(dict[str, list[tuple[int, Any]]]):
    """What ``collect`` gathered: name -> ``[(epoch, record), ...]`` in epoch order."""

    def records(self, name: str) -> list[Any]:
        """Just the records collected under ``name``, in epoch order."""
        return [r for _, r in self[name]]


LIVE_STEPS = 8
"""A live rescale moves its bins in at most this many configurations, one an epoch."""

LIVE_KEYS_PER_STEP = 4096
"""A live rescale moves about this many keys a configuration (fewer configurations when
fewer keys move: none, one): Megaphone's fluid steps bound what an epoch pays for
extracting, encoding and installing state (~2 us a key each side on Ray), and a change
whose keys are few needs no more than one (it then ends an epoch after it starts, not
:data:`LIVE_STEPS`)."""

SOURCE_LEAD = 4
"""How many epochs past the latest one its sources read a reconfigurable run's control
input is kept (:meth:`Session._follow_sources`): records wait for it only when the
sources outrun the driver's look at them by more. A backend whose driver looks at the
sources now and then (Ray) keeps a lead in time instead, from the sources' pace
(:mod:`timely.session.lead`), starting from this."""


def live_steps(keys: int | None, moving: int, bins: int) -> int:
    """In how many configurations a live change moves ``moving`` of ``bins`` bins when
    the migratable steps hold ``keys`` keys: about :data:`LIVE_KEYS_PER_STEP` keys each
    (bins hold about equal shares of the keys), at least one, at most :data:`LIVE_STEPS`."""
    if keys is None:
        return LIVE_STEPS
    if moving <= 0:
        return 1
    share = keys * moving / bins
    return max(1, min(LIVE_STEPS, moving, math.ceil(share / LIVE_KEYS_PER_STEP)))


class _RescaleNow(Exception):
    """The checkpoint a rescale waited for is committed: stop and restore at ``workers``."""

    def __init__(self, workers: int) -> None:
        self.workers = workers


class Monitor(Protocol):
    """Watches one session from the driver's process. It may also have
    ``check(workers, backend, checkpoint, plan)``, called before anything starts, to
    refuse a run it cannot serve with a :class:`~timely.errors.ConfigError` (a controller
    that rescales needs checkpoints, or a run that can change live)."""

    needs_trace: bool
    """Whether it reads the event log (the session then keeps one)."""

    def attach(self, session: Session) -> None:
        """The session's workers run: start watching ``session.view``."""

    def close(self) -> None:
        """The session ended (or failed to start): stop, free ports and threads."""


class Session(ABC):
    """A running dataflow. Use as a context manager; ``join()`` waits for the end.

    A thin loop around a backend: it hands the driver's inputs to the workers, delivers
    outputs once per epoch and output key (across restarts too), and on a worker's
    failure has the backend start new workers from the last checkpoint. With
    checkpointing (``checkpoint=`` given) it holds a
    :class:`~timely.checkpoint.coordinator.CheckpointCoordinator` for commits, requests, the input
    log and restores.
    """

    concurrent = True
    """Whether the workers run at the same time (the inline backend steps them one after
    another in one thread): when ``checkpoint_every="auto"`` has no CPU time of the run
    for a window, the window's wall time on every worker running at once stands for it."""

    def __init__(
        self,
        spec: RunSpec,
        workers: int,
        checkpoint: CheckpointConfig | None = None,
        trace: str | None = None,
    ) -> None:
        self.spec = spec
        self.trace = trace
        """The event log's directory (``trace=``), or None: no event log."""
        self.plan = spec.plan
        self.workers = workers
        self.results = Results({name: [] for name in spec.collects})
        self._callbacks = dict(spec.callbacks)
        self._closed = False
        self.checkpoint = checkpoint
        self.coordinator = (
            CheckpointCoordinator(
                checkpoint,
                spec.name,
                spec.plan.fingerprint(),
                workers,
                spec.sinks,
                parallel=workers if self.concurrent else 1,
            )
            if checkpoint is not None
            else None
        )
        if self.coordinator is not None:
            self.coordinator.bins = spec.plan.bins
            # Workers that join and leave live: a checkpoint's parts are its epoch's members'.
            self.coordinator.workers_at = self._members_at
        if spec.sinks:
            # Before any worker starts (and before the plan is shipped to them).
            lineage = (
                self.coordinator.sink_lineage()
                if self.coordinator is not None
                else SinkLineage(
                    spec.name, spec.plan.fingerprint(), f"run-{uuid.uuid4().hex}", None
                )
            )
            for sink in spec.sinks:
                sink.bind(lineage)
        self.restarts = 0
        self.attempt = 0
        """Launches of the workers so far after the first (restarts and rescales): the
        event log's attempt number."""
        self.rescales: list[dict[str, Any]] = []
        """Every rescale done: ``from``, ``to`` (workers), ``path`` (``"live"`` or
        ``"restart"``, with ``why`` it could not go live), ``epoch`` (live: the epoch
        joiners take part from; restart: the checkpoint it restored from), ``epochs``
        (live: the configurations moving bins), ``waited_s`` (from the request to that
        commit), ``seconds`` (stopping and restoring, or deciding and starting), ``at``
        (``time.time()`` when done)."""
        self._rescale_lock = threading.Lock()
        self._rescale_to: int | None = None
        self._rescale_after = 0
        self._rescale_asked = 0.0
        self._restart_why = ""
        self._live_deferred: int | None = None
        """A live rescale asked for while workers were leaving, or from another thread (a
        controller's): made on the driver's thread, once no worker is leaving."""
        self._changing = False
        self._commanding = 0
        """Driver input commands under way (:meth:`input_command`): no live change meanwhile."""
        self._driver_thread = threading.get_ident()
        self._live_target: int | None = None
        """The worker count the last live rescale of this launch went to (a recovery
        restores on it)."""
        self._delivered: dict[str, int] = {}
        self.view = RunView(spec.name, spec.plan.describe(), workers, trace)
        """What monitors read of this session (:mod:`timely.session.monitors`)."""
        self.loop_watch = LoopWatch(spec.plan, self.view)
        """Warns about loops past ``loop_warning`` rounds (:mod:`timely.session.loopwatch`); the
        backends hand it what their workers report."""
        self.monitors: list[Monitor] = []
        self._temporary_trace: str | None = None
        self._driver_log: EventLog | None = None
        self._driver_log_lock = threading.Lock()
        self.metrics_url: str | None = None
        """Where the Prometheus endpoint serves (``metrics_port=``), or None."""
        self.ui_url: str | None = None
        """Where the live page is (``ui=True``), or None."""
        self.routing_table: Table = default_table(spec.plan.bins, workers)
        """The routing table of the latest configuration asked for (:meth:`reconfigure`)."""
        self.migrations: list[dict[str, Any]] = []
        """Every reconfiguration asked for: ``epochs`` (one per step), ``bins`` (how many
        move), ``strategy``, ``at`` (``time.time()``)."""
        self._control_epoch = 0
        self._has_sources = self.plan.live_control and any(
            v.kind == "source" for v in self.plan.vertices
        )
        """The control input follows sources (:meth:`_follow_sources`)."""
        self._lead = SourceLead(SOURCE_LEAD)
        """The pace of the sources' reading, for :meth:`_source_lead`."""
        self._joining = False
        """:meth:`join` was called: the control input closes once the sources are read."""
        self._control_closed = spec.plan.control is None
        self._batching = 0
        self.membership = Membership(workers, 0)
        """Who takes part from which epoch (workers joining and leaving live); backends
        route input commands by it and start it afresh at each launch."""

    # -- what the coordinator knows, for the driver -------------------------------------------
    @property
    def restored_epoch(self) -> int:
        """The epoch of the checkpoint the workers last started from (-1: none)."""
        return -1 if self.coordinator is None else self.coordinator.restored_epoch

    @property
    def committed(self) -> Recent[int]:
        """Epochs of the checkpoints committed in this session, in order: all of them, or
        in a long run the latest :data:`~timely.checkpoint.history.HISTORY` or more (and at
        least the newest ``keep_checkpoints``); ``.total`` counts them all."""
        return Recent() if self.coordinator is None else self.coordinator.committed

    @property
    def subsumed(self) -> Recent[int]:
        """Epochs of the checkpoints complete but not committed in this session, in order:
        the driver found a later one complete with each and committed that one instead
        (on Ray, when it falls behind its workers). The latest, as :attr:`committed`."""
        return Recent() if self.coordinator is None else self.coordinator.subsumed

    @property
    def commit_times(self) -> Recent[float]:
        """When each of ``committed`` was committed (``time.monotonic()``), entry for entry."""
        return Recent() if self.coordinator is None else self.coordinator.commit_times

    @property
    def cadence(self) -> list[Measurement]:
        """With ``checkpoint_every`` (``"auto"`` or a fixed ``k``), the windows of commits
        measured, in order, the latest as :attr:`committed`
        (:class:`~timely.checkpoint.cadence.Measurement`: the interval it ran under, the
        share of the run's CPU checkpointing cost, the interval chosen after it: with a
        fixed ``k``, ``k``); empty with ``checkpoint_interval`` or no checkpoints."""
        if self.coordinator is None or self.coordinator.cadence is None:
            return []
        return self.coordinator.cadence.measurements

    # -- backends implement ---------------------------------------------------------------
    @abstractmethod
    def _send_command(self, vertex: int, cmd: InputCommand) -> None:
        """Route a driver input command (send, advance, close) to the workers."""

    @abstractmethod
    def _probe(self, vertex: int) -> list[tuple[int, ...]]:
        """The frontier at a probe, merged over the workers."""

    @abstractmethod
    def _wait(self) -> None:
        """Drive or wait for the workers until every input is closed and all work is done."""

    def _poll(self, timeout: float) -> None:  # noqa: B027 - a no-op where outputs are synchronous
        """Deliver the outputs that have arrived, waiting up to ``timeout`` for some."""

    def _relaunch(self, restore: Restore | None) -> None:
        """Replace every worker by a new one started from ``restore`` (None: from scratch)."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart workers")

    def _request_checkpoint(
        self, epoch: int, every: int | None = None, fraction: float | None = None
    ) -> tuple[bool, int]:
        """Ask every worker for a checkpoint after ``epoch`` (and every ``every`` epochs
        after it; ``fraction`` is what made the driver choose ``every``, for the workers'
        event logs): whether all agreed, and the highest
        :meth:`~timely.worker.loop.Worker.checkpoint_floor` among them (to ask for a later
        epoch if not)."""
        raise NotImplementedError(f"{type(self).__name__} cannot checkpoint on request")

    def _stop(self) -> None:  # noqa: B027 - optional hook; most backends have nothing to free
        """Release workers and resources (idempotent)."""

    # -- the driver's API -------------------------------------------------------------------
    def input_command(self, vertex: int, cmd: InputCommand) -> None:
        """Hand a driver input command (send, advance, close) to the workers."""
        if self._live_deferred is not None and vertex != self.plan.control:
            # Not before the control input's own commands: the driver moved it (its
            # epoch, a configuration) and the workers must get that before a change
            # starts at it. The driver's next loop check makes the change instead.
            self._guarded(self._apply_live, retry=False)
        self._commanding += 1
        try:
            if isinstance(cmd, Advance) and vertex != self.plan.control:
                # Configurations stay one epoch ahead of the data: a batch is never held
                # for one.
                self._control_to(cmd.epoch + 1)
            if self.coordinator is not None and not self.coordinator.log_input(vertex, cmd):
                return  # resumed after this epoch: the checkpoint already reflects it
            if isinstance(cmd, Advance) and vertex != self.plan.control:
                self.view.advanced(cmd.epoch)
            self._guarded(self._send_command, vertex, cmd, retry=False)
        finally:
            self._commanding -= 1

    def input_commands(self, commands: Sequence[tuple[int, InputCommand]]) -> None:
        """Hand several commands that are ready at once (what was sent before the run
        started, say): they travel together, one frame per worker where the backend's
        commands are frames, instead of one frame and one credit each."""
        with self._batched():
            for vertex, cmd in commands:
                self.input_command(vertex, cmd)

    @contextlib.contextmanager
    def _batched(self) -> Iterator[None]:
        """Commands sent meanwhile travel together, one frame per worker: a reconfiguration's
        steps (a table and an advance each) cost two frames of credit per step otherwise,
        and a driver that runs out of credit waits for workers busy with their steps."""
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching:
                self._guarded(self._flush_commands, retry=False)

    def _flush_commands(self) -> None:
        """Send what :meth:`_batched` held (backends whose commands are frames hold some)."""
        return None

    # -- reconfiguration (Megaphone) ----------------------------------------------------------
    def _control_to(self, epoch: int) -> None:
        """Move the control input to ``epoch``: no configuration before it any more."""
        control = self.plan.control
        if control is None or self._control_closed or epoch <= self._control_epoch:
            return
        self._control_epoch = epoch
        self.input_command(control, Advance(epoch))

    def _require_control(self, what: str) -> None:
        if self.plan.control is None:
            raise ConfigError(
                f"{what} needs a reconfigurable run: start it with "
                "flow.activate(..., reconfigurable=True)"
            )

    def _close_control(self) -> None:
        control = self.plan.control
        if control is not None and not self._control_closed:
            self._control_closed = True
            self.input_command(control, Close())

    def reconfigure(
        self,
        assignment: Assignment,
        strategy: str = "fluid",
        bins_per_step: int = 8,
    ) -> list[int]:
        """Move bins of keyed state between workers while the dataflow runs (Megaphone).

        ``assignment``: the new routing table (one worker per bin), the bins that move
        (``{bin: worker}``), or a function of the current table that returns either
        (:func:`timely.routing.bins.move`, :func:`timely.routing.bins.drain`). The new table takes
        effect at the next epoch the driver has not opened: data from then on goes to the
        new owners, which receive each moving bin's state once no earlier record for it
        can arrive. ``strategy="all-at-once"`` moves every bin under one configuration;
        ``"fluid"`` moves ``bins_per_step`` bins per epoch, so that each epoch waits for
        a few bins only. Returns the epochs the steps take effect at (empty: nothing
        moves). Needs ``flow.activate(..., reconfigurable=True)``."""
        self._require_control("reconfigure")
        if self._control_closed:
            raise ConfigError("reconfigure: the run's inputs are closed; nothing moves any more")
        if strategy not in ("fluid", "all-at-once"):
            raise ConfigError(
                f"reconfigure: strategy must be 'fluid' or 'all-at-once', got {strategy!r}"
            )
        check_bins_per_step(bins_per_step, "reconfigure")
        try:
            new = resolve(assignment, self.routing_table, self.workers)
        except ValueError as e:
            raise ConfigError(f"reconfigure: {e}") from None
        tables = steps(
            self.routing_table, new, None if strategy == "all-at-once" else bins_per_step
        )
        return self._configure(tables, strategy)

    def _bin_loads(self) -> list[BinLoad]:
        """Each worker's records routed per bin and useful time in keyed steps since the
        last call (backends that can reach their workers override this)."""
        raise NotImplementedError(f"{type(self).__name__} cannot measure bin loads")

    def rebalance(
        self,
        tolerance: float = 1.2,
        strategy: str = "fluid",
        bins_per_step: int = 8,
        by: str = "useful",
    ) -> dict[str, Any]:
        """Move bins so that the busiest worker carries at most ``tolerance`` times the
        mean load, measured since the session started (or since the last ``rebalance``):
        few bins move, the heaviest first that help (:func:`timely.routing.bins.balance`), by
        :meth:`reconfigure`.

        ``by="useful"`` weighs each bin by its records times its owner's useful time per
        record in the keyed steps (:func:`timely.routing.bins.useful_per_bin`);
        ``by="records"`` by its records alone. Returns what it measured and did:
        ``records`` and ``useful_s`` per worker, ``loads`` (the weights per worker
        before), ``expected`` (after the moves, by the same weights), ``moves``
        ``{bin: worker}`` and ``epochs`` (the steps). A bin heavier than
        ``(tolerance - 1)`` times the mean (a hot key) stays where it is: no placement
        spreads one bin."""
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance < 1:
            raise ConfigError(f"rebalance: tolerance must be a number >= 1, got {tolerance!r}")
        if by not in ("useful", "records"):
            raise ConfigError(f"rebalance: by must be 'useful' or 'records', got {by!r}")
        self._require_control("rebalance")
        per_bin = [0] * self.plan.bins
        useful = [0.0] * self.workers
        for w, load in enumerate(self._guarded(self._bin_loads)):
            for b, n in enumerate(load["records"]):
                per_bin[b] += n
            useful[w] = load["useful_ns"] / 1e9
        table = self.routing_table
        weights: list[float] = (
            useful_per_bin(per_bin, useful, table)
            if by == "useful"
            else [float(n) for n in per_bin]
        )
        moves = balance(weights, table, self.workers, tolerance)
        after = list(table)
        for b, w in moves.items():
            after[b] = w
        epochs = self.reconfigure(moves, strategy, bins_per_step) if moves else []
        return {
            "records": per_worker(per_bin, table, self.workers),
            "useful_s": useful,
            "loads": per_worker(weights, table, self.workers),
            "expected": per_worker(weights, tuple(after), self.workers),
            "moves": moves,
            "epochs": epochs,
        }

    def _configure(self, tables: list[Table], strategy: str) -> list[int]:
        control = self.plan.control
        assert control is not None
        epochs = []
        moved = sum(a != b for a, b in zip(self.routing_table, tables[-1])) if tables else 0
        restarts = self.restarts
        changing, self._changing = self._changing, True  # the control input stays open
        try:
            with self._batched():
                for table in tables:
                    if self.restarts != restarts:
                        # A worker died meanwhile and the run restored: these tables were
                        # for workers that are no more (a restore deals the bins afresh).
                        break
                    epoch = self._control_epoch
                    self.input_command(control, Send([list(table)]))
                    if self.restarts != restarts:
                        break
                    epochs.append(epoch)
                    self._control_to(epoch + 1)
                    self.routing_table = table
        finally:
            self._changing = changing
        if tables:
            record = {"epochs": epochs, "bins": moved, "strategy": strategy, "at": time.time()}
            self.migrations.append(record)
            self.log_event("reconfigure", record)
        return epochs

    def _schedule(self, schedule: list[tuple[int, Table, int | None]]) -> None:
        """A batch run's reconfigurations (``reconfigure=``), sent before anything else
        and followed by the control input's close."""
        for epoch, table, per_step in schedule:
            self._control_to(epoch)
            self._configure(
                steps(self.routing_table, table, per_step),
                "all-at-once" if per_step is None else "fluid",
            )
        self._close_control()

    def probe_frontier(self, vertex: int) -> list[tuple[int, ...]]:
        """The frontier at a probe, merged over the workers."""
        out: list[tuple[int, ...]] = self._guarded(self._probe, vertex)
        return out

    def poll(self, timeout: float = 0.0) -> None:
        """Deliver outputs that have arrived (subscribe callbacks run here), waiting up to
        ``timeout`` seconds for some."""
        self._guarded(self._poll, timeout)

    # -- checkpoints and recovery -------------------------------------------------------------
    @property
    def _incremental(self) -> int:
        """Workers' ``checkpoint_incremental``: deltas between whole parts (0: none)."""
        return 0 if self.coordinator is None else self.coordinator.config.incremental

    @property
    def _every(self) -> int | None:
        """Workers' ``checkpoint_every`` (None: no checkpoints, or on request)."""
        return None if self.coordinator is None else self.coordinator.every

    def _maybe_request_checkpoint(self) -> None:
        """Let the coordinator ask for a checkpoint if ``checkpoint_interval`` says so;
        once the checkpoint a rescale waits for is committed, stop for it (the backends
        call this from the driver's loop)."""
        coordinator = self.coordinator
        if coordinator is None:
            return
        coordinator.maybe_request(self._request_checkpoint)
        target = self._rescale_to
        if target is not None and coordinator.committed.total > self._rescale_after:
            raise _RescaleNow(target)

    # -- rescaling ----------------------------------------------------------------------------
    live_backend = False
    """Whether this backend adds and removes workers while the dataflow runs."""

    def rescale(self, workers: int, live: bool | None = None) -> None:
        """Run on ``workers`` workers.

        Live where it can be (:meth:`live_blocker` says when not): new workers join at the
        control input's next epoch, or the last ones leave, and bins move to or from them
        fluidly (Megaphone), while the run goes on; done before this returns.

        Otherwise from the next checkpoint on: once a checkpoint taken after this call
        is committed, the workers stop and ``workers`` new ones restore from it (state
        re-partitioned by key), the driver's inputs after it are replayed, and the run
        goes on; returns at once, and safe to call from another thread (a
        controller's). That path needs ``checkpoint=``.

        Either way outputs stay exactly as without the change; each change is recorded
        in :attr:`rescales` with the path it took and, for a restart, why. ``live``:
        None takes the live path when it can; False always stops and restores; True
        refuses (a ``ConfigError`` saying why) what cannot go live."""
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"rescale: workers must be a positive integer, got {workers!r}")
        if live not in (None, True, False):
            raise ConfigError(f"rescale: live must be None, True or False, got {live!r}")
        self._live_deferred = None
        if workers == self.workers - len(self.membership.leaving) and self._rescale_to is None:
            return
        blocker = "asked for (live=False)" if live is False else self.live_blocker(workers)
        if live and blocker is not None and blocker != LEAVING:
            raise ConfigError(f"rescale(live=True): it cannot go live: {blocker}")
        if blocker is None and threading.get_ident() == self._driver_thread:
            self._guarded(self._rescale_live, workers, retry=False)
            return
        if blocker is None or blocker == LEAVING:
            self._live_deferred = workers  # made on the driver's thread (_apply_live)
            return
        coordinator = self.coordinator
        if coordinator is None:
            raise ConfigError(
                f"rescale cannot go live ({blocker}), and otherwise it restores from a "
                "checkpoint: run with checkpoint=DIR"
            )
        self._restart_why = blocker
        with self._rescale_lock:
            if workers == self.workers and self._rescale_to is None:
                return
            self._rescale_after = coordinator.committed.total
            self._rescale_asked = time.monotonic()
            self._rescale_to = workers
        coordinator.request_soon()

    def live_blocker(self, workers: int) -> str | None:
        """Why a change to ``workers`` workers cannot be made live now (None: it can)."""
        if self._moving_sources() and self.plan.control is not None:
            return LEAVING
        return live_blocker(
            self.plan,
            self.workers - len(self.membership.leaving),
            workers,
            self._migratable() if workers < self.workers else (),
            backend=None if self.live_backend else type(self).__name__,
            inputs_closed=self._control_closed,
            leaving=bool(self.membership.leaving),
        )

    def _members_at(self, epoch: int) -> int:
        """How many workers take part at ``epoch`` (a checkpoint's parts there)."""
        return len(self.membership.members.at(epoch))

    def _workers_changed(self) -> None:
        """A worker joined or left live: the view and the checkpoints' restores follow."""
        self.view.rescaled(self.workers)
        if self.coordinator is not None:
            self.coordinator.workers = self.workers

    def _keys_held(self) -> int | None:
        """How many keys the migratable steps hold over every worker (None: not known,
        and a live change takes :data:`LIVE_STEPS`)."""
        return None

    def _migratable(self) -> set[int]:
        """The keyed steps whose keys may move live: their state moves with their bins,
        or they keep none across times (backends that run live)."""
        return set()

    def _join_worker(self, worker: int, epoch: int) -> None:
        """Start worker ``worker`` (the next index) in the running dataflow, taking part
        from ``epoch`` (backends that run live)."""
        raise NotImplementedError(f"{type(self).__name__} cannot add workers live")

    def _leave_worker(self, worker: int, epoch: int) -> None:
        """Worker ``worker`` takes no part from ``epoch`` on, and goes once it holds
        nothing (backends that run live)."""
        raise NotImplementedError(f"{type(self).__name__} cannot remove workers live")

    def _partitions(self, vertex: int) -> int:
        """How many partitions source ``vertex`` has."""
        made = self.plan.vertices[vertex].factory()
        assert isinstance(made, SourceVertex)
        return made.source.partitions()

    def _moving_sources(self) -> bool:
        """Whether source partitions of the last change are still to be handed over (the
        next change waits for them, as for leavers)."""
        return False

    def _release_at(
        self, vertex: int, owner: int, partitions: list[int], to: int, epoch: int
    ) -> None:
        """Have worker ``owner`` hand ``partitions`` of source ``vertex`` to worker ``to``
        at ``epoch`` (:meth:`~timely.worker.loop.Worker.release_at`); the backend takes
        the handovers once they are ready and gives them to ``to`` (backends that run
        live)."""
        raise NotImplementedError(f"{type(self).__name__} cannot move source partitions")

    def _follow_sources(self, read: int, done: bool) -> None:
        """Keep a reconfigurable run's control input ahead of its sources (the latest
        epoch ``read`` anywhere): their records never wait for a configuration, and a
        change takes effect just past what was read. ``done``: every source is read to
        its end; once :meth:`join` waits too, the control input closes. Neither while a
        change is under way (this runs from the backend's checks, which a change's waits
        make): the joiners join at the epoch the change read, which the donor must not
        have passed when it mints their capabilities (on Ray: "holds no capability of
        'reconfigure'"), and its configurations are still to be sent."""
        if self.plan.control is None or self._control_closed or not self._has_sources:
            return
        if self._changing:
            return  # the change moves the control input itself; the next check follows
        self._lead.observe(read, time.monotonic())
        lead = self._source_lead()
        if done and self._joining:
            self._close_control()
        elif read + lead > self._control_epoch:
            self._control_to(read + lead)

    def _source_lead(self) -> int:
        """How many epochs past the latest read to keep the control input: a fixed
        :data:`SOURCE_LEAD` where the driver follows the sources at every step (inline,
        so a seeded run stays the same run); backends that look now and then override
        this with the lead in time (:class:`~timely.session.lead.SourceLead`)."""
        return SOURCE_LEAD

    def _apply_live(self) -> None:
        """Make the live rescale deferred to the driver's thread, if it can be made now
        (the backends call this from the driver's loop, and every input command does)."""
        deferred = self._live_deferred
        if deferred is None or self.membership.leaving or self._changing or self._moving_sources():
            return
        if self._commanding or self._batching:
            # Not while a command is on its way (a backend's check runs while one waits
            # for a credit) or held in a batch: the driver has counted the control
            # input's epoch that some workers have not got, and a change starting there
            # would take effect at an epoch their control input is not at (a joiner then
            # missed a configuration: bins arrived at an epoch it did not expect). The
            # next check after the command makes the change.
            return
        if self._control_closed:
            self._live_deferred = None
            return  # the input has ended: nothing moves any more
        # Cleared once the change is made, not before: until then rescale_pending() says
        # it waits (a controller that read None while the joiners start would take the
        # old worker count for a refusal, and ask again).
        try:
            if deferred != self.workers and self.live_blocker(deferred) is None:
                self._rescale_live(deferred)
        finally:
            if self._live_deferred == deferred:
                self._live_deferred = None

    def _rescale_live(self, workers: int) -> None:
        self._changing = True
        try:
            self._change_live(workers)
        finally:
            self._changing = False

    def _change_live(self, workers: int) -> None:
        started, old, began = time.monotonic(), self.workers - len(self.membership.leaving), clock()
        epoch = self._control_epoch
        self._live_target = workers
        if workers > old:
            for j in range(old, workers):
                self._join_worker(j, epoch)
        table = list(self.routing_table)
        moves = resize(self.routing_table, workers)
        for b, w in moves.items():
            table[b] = w
        # Fluid, in at most LIVE_STEPS epochs: a leaver goes only after the last one.
        restarts = self.restarts
        configurations = live_steps(self._guarded(self._keys_held), len(moves), self.plan.bins)
        epochs = self.reconfigure(
            tuple(table), bins_per_step=max(1, -(-len(moves) // configurations))
        )
        if self.restarts != restarts:  # restored meanwhile, on the change's worker count
            return
        # Sources: partitions re-dealt at the change's first epoch (the joiners take part
        # from it, the leavers until after the bins have moved), before the leavers are
        # told (one holds on to its partitions until it has handed them over).
        staying = [w for w in self.membership.alive if w < workers]
        for v, spec in enumerate(self.plan.vertices):
            if spec.kind == "source":
                for owner, parts, to in self.membership.deal(v, self._partitions(v), staying):
                    self._release_at(v, owner, parts, to, epoch)
        if workers < old:
            leave = self._control_epoch
            for w in range(workers, old):
                self._leave_worker(w, leave)
        record = {
            "from": old,
            "to": workers,
            "path": "live",
            "epoch": epoch,
            "epochs": epochs,
            "waited_s": 0.0,
            "seconds": time.monotonic() - started,
            "at": time.time(),
        }
        self.rescales.append(record)
        self.view.rescale_done(record)
        self.log_event("rescale", record, began)

    def rescale_pending(self) -> int | None:
        """The worker count a requested rescale waits to go to (None: none waits)."""
        if self._rescale_to is not None:
            return self._rescale_to
        if self._live_deferred is not None:
            return self._live_deferred
        if self.membership.leaving or self._moving_sources():  # a live change under way:
            return self.workers - len(self.membership.leaving)  # leavers, partitions moving
        return None

    def log_event(self, kind: str, record: dict[str, Any], started: int | None = None) -> None:
        """Put a driver-side event (a controller's ``"decision"``, say) in the event log's
        ``driver.trace``, from any thread; nothing without ``trace=``. ``started``: when
        it began (``time.time_ns()``), else now."""
        if self.trace is None:
            return
        now = clock()
        with self._driver_log_lock:
            if self._driver_log is None:
                self._driver_log = open_driver_log(self.trace, self.spec.name)
            self._driver_log.add((kind, now if started is None else started, now, record))
            self._driver_log.flush()

    def _set_workers(self, workers: int) -> None:
        """Run with ``workers`` workers from the next launch on (backends that size
        something by the worker count extend this)."""
        self.workers = workers
        assert self.coordinator is not None
        self.coordinator.workers = workers
        self.view.rescaled(workers)
        # A restore on another worker count deals the bins out afresh.
        self.routing_table = default_table(self.plan.bins, workers)

    def _rescale_now(self, workers: int) -> None:
        coordinator = self.coordinator
        assert coordinator is not None
        with self._rescale_lock:
            if self._rescale_to != workers:
                return  # asked again meanwhile: that request waits for its own checkpoint
            self._rescale_to = None
            waited = time.monotonic() - self._rescale_asked
        if workers == self.workers:
            return
        started, old, began = time.monotonic(), self.workers, clock()
        self._set_workers(workers)
        self.attempt += 1
        self._live_target = None
        self._relaunch(coordinator.load_restore())
        for vertex, cmd in coordinator.replay():
            if vertex == self.plan.control and isinstance(cmd, Send):
                continue  # tables for the old worker count: the rescale supersedes them
            self._send_command(vertex, cmd)
        record = {
            "from": old,
            "to": workers,
            "path": "restart",
            "why": self._restart_why,
            "epoch": coordinator.restored_epoch,
            "waited_s": waited,
            "seconds": time.monotonic() - started,
            "at": time.time(),
        }
        self.rescales.append(record)
        self.view.rescale_done(record)
        self.log_event("rescale", record, began)

    def _initial_restore(self) -> Restore | None:
        """The checkpoint to start from when resuming (None: start from scratch)."""
        if self.coordinator is None:
            for sink in self.spec.sinks:
                sink.abort_after(-1)  # a fresh run: output left by an earlier one goes
            return None
        return self.coordinator.initial_restore()

    def _guarded(self, fn: Callable[..., Any], *args: Any, retry: bool = True) -> Any:
        """Call ``fn``; on a worker failure recover (if configured) and call it again, and
        likewise after a rescale."""
        while True:
            try:
                return fn(*args)
            except _RescaleNow as r:
                try:
                    self._rescale_now(r.workers)
                except (WorkerDied, UserFunctionError) as e:
                    self._recover(e)
            except (WorkerDied, UserFunctionError) as e:
                self._recover(e)
            if not retry:
                return None

    def _recover(self, error: Exception) -> None:
        """Start new workers from the last checkpoint and replay the logged inputs after it;
        a failure during the replay starts over (each attempt counts as a restart)."""
        coordinator = self.coordinator
        while True:
            if coordinator is None or self._closed:
                raise error
            config = coordinator.config
            if isinstance(error, UserFunctionError) and config.on_error != "restore":
                raise error
            if self.restarts >= config.max_restarts:
                raise WorkerDied(
                    f"giving up after {self.restarts} restarts (max_restarts="
                    f"{config.max_restarts}); last failure: {error}"
                ) from error
            self.restarts += 1
            self.attempt += 1
            self.view.restarted(self.restarts)
            began, t0 = time.monotonic(), clock()
            try:
                live = self._live_target
                if live is not None:
                    # Workers joined or left live since the launch: restore on the count
                    # the last change went to, the bins dealt afresh from the checkpoint
                    # (as a rescale does), and the configurations logged after it
                    # superseded.
                    self._live_target = None
                    self._live_deferred = None
                    self._set_workers(live)
                restore = coordinator.load_restore()
                self._relaunch(restore)
                replayed = coordinator.replay()
                for vertex, cmd in replayed:
                    if live is not None and vertex == self.plan.control and isinstance(cmd, Send):
                        continue
                    self._send_command(vertex, cmd)
            except (WorkerDied, UserFunctionError) as e:
                error = e
                continue
            self._recovered(error, restore, len(replayed), time.monotonic() - began, t0)
            return

    def _recovered(
        self, error: Exception, restore: Restore | None, replayed: int, seconds: float, t0: int
    ) -> None:
        """One line per recovery at INFO (who died, what was restored, how long the
        relaunch took); the details in the driver's event log (``"recovery"``)."""
        epoch = None if restore is None else restore[0]
        record = {
            "restart": self.restarts,
            "cause": f"{type(error).__name__}: {error}",
            "restored": epoch,
            "replayed": replayed,
            "seconds": seconds,
            "workers": self.workers,
            "lost": getattr(self, "lost", None),
            "cold_starts": getattr(self, "cold_starts", None),
        }
        self.log_event("recovery", record, t0)
        _log.info(
            "recovered %r in %.2fs (restart %d): %s; restored %s, %d inputs replayed",
            self.spec.name,
            seconds,
            self.restarts,
            _first_line(str(error)),
            "from scratch" if epoch is None else f"the checkpoint at epoch {epoch}",
            replayed,
        )

    def _event_log(self, worker: int) -> EventLog | None:
        """Worker ``worker``'s event log for this attempt (a restore starts a new one)."""
        if self.trace is None:
            return None
        return EventLog.for_plan(self.trace, self.plan, worker, self.workers, self.attempt)

    def _part_written(self, epoch: int, info: dict[str, Any], handling: float = 0.0) -> None:
        """A worker wrote its part of the checkpoint at ``epoch`` (checkpoint parts travel
        apart from the outputs: the backend reports them here, with the CPU seconds it
        spent taking the report in, ``handling``)."""
        self._parts_reported([(epoch, info)], handling)

    def _parts_reported(self, reports: list[tuple[int, dict[str, Any]]], handling: float) -> None:
        """Parts that arrived together, ``(epoch, info)`` each in the order the workers
        wrote them: of the checkpoints they complete, the newest is committed
        (``CheckpointCoordinator.parts_written``)."""
        coordinator = self.coordinator
        assert coordinator is not None
        cadence = coordinator.cadence
        measured = 0 if cadence is None else cadence.measurements.total
        coordinator.parts_written(reports, handling)
        self.view.committed(coordinator.committed, coordinator.subsumed)
        if cadence is not None and cadence.measurements.total > measured:
            last = cadence.measurements[-1]
            self.view.cadence(last.next_interval, last.fraction)
            if cadence.pending() is not None:
                # Ask now: the sooner the workers hear, the likelier the epoch one
                # interval after this commit is still ahead of them all.
                self._maybe_request_checkpoint()

    def _deliver(self, key: str, epoch: int, records: list[Any]) -> None:
        if epoch <= self._delivered.get(key, -1):
            return  # delivered before a restart; the replay produced it again
        self._delivered[key] = epoch
        self.view.delivered(key, epoch, len(records))
        callback = self._callbacks.get(key)
        if callback is not None:
            callback(epoch, records)
        else:
            self.results[key].extend((epoch, r) for r in records)

    def join(self) -> Results:
        """Wait until the inputs are closed and all work is done; return collected results."""
        open_inputs = self.spec.open_inputs()
        if open_inputs:
            raise RuntimeError(
                f"join() waits for the inputs to close, but {open_inputs} are open; "
                "call handle.close() on each (run() closes them for you)"
            )
        self.view.inputs_closed(any(v.kind == "source" for v in self.plan.vertices))
        self._joining = True
        if not self._has_sources:  # else once the sources are read (_follow_sources)
            self._close_control()
        try:
            self._guarded(self._wait)
            self.view.finished = True
            for sink in self.spec.sinks:
                sink.commit(None)  # the run ended: every epoch is final
        finally:
            self.close()
        return self.results

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.spec.detach()
            try:
                self._stop()
                if self.coordinator is not None:
                    try:
                        self.coordinator.settle()  # old checkpoints deleted before it returns
                    finally:
                        self.coordinator.store.close()  # (links files, a commit log)
            finally:
                remove_store(self.plan.store)
                self.view.ended = True
                self._close_monitors()

    def _close_monitors(self) -> None:
        """Close every monitor (once: ``close`` runs this once); they stay in
        ``monitors`` for what they kept (an autoscaler's decisions)."""
        for m in self.monitors:
            m.close()
        with self._driver_log_lock:
            if self._driver_log is not None:
                self._driver_log.close()
        if self._temporary_trace is not None:
            remove_trace(self._temporary_trace)
            self._temporary_trace = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_log = logging.getLogger("timely")


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= 200 else line[:197] + "..."


def merge_frontiers(frontiers: list[tuple[tuple[int, ...], ...]]) -> list[tuple[int, ...]]:
    """The minimal elements of several workers' frontiers."""
    chain: Antichain[tuple[int, ...]] = Antichain()
    for f in frontiers:
        for t in f:
            chain.insert(t)
    return sorted(chain)
