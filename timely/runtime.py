"""Sessions: a running dataflow the driver feeds, reads and joins (Naiad's Activate/Join)."""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from timely.checkpoint import CheckpointConfig, CheckpointError, CheckpointStore, split_parts
from timely.errors import ConfigError, UserFunctionError, WorkerDied
from timely.plan import Plan

if TYPE_CHECKING:
    from timely.dataflow import Dataflow

PART_KEY = "\x00checkpoint-part"
"""The output key under which a worker's host reports a checkpoint part it wrote."""

_MAX_LOOKAHEAD = 1 << 20
"""Bounds the checkpoint request's lookahead (in epochs)."""

Restore = tuple[int, list[dict[int, Any]]]
"""A checkpoint to start from: its epoch and each worker's vertex snapshots."""


class Results(dict[str, list[tuple[int, Any]]]):
    """What ``collect`` gathered: name -> ``[(epoch, record), ...]`` in epoch order."""

    def records(self, name: str) -> list[Any]:
        """Just the records collected under ``name``, in epoch order."""
        return [r for _, r in self[name]]


class Session(ABC):
    """A running dataflow. Use as a context manager; ``join()`` waits for the end.

    With checkpointing (``checkpoint=`` given) the session is also the checkpoint
    coordinator: it commits a checkpoint once every worker has written its part, logs
    the driver's input commands since the last commit, and on a worker's failure has the
    backend start new workers from the last checkpoint and replays the log. Outputs are
    delivered once per epoch and output key, across restarts.
    """

    def __init__(
        self, flow: Dataflow, plan: Plan, workers: int, checkpoint: CheckpointConfig | None = None
    ) -> None:
        self.flow = flow
        self.plan = plan
        self.workers = workers
        self.results = Results({name: [] for name in flow._collects})
        self._callbacks: dict[str, Callable[[int, list[Any]], None]] = dict(flow._outputs)
        self._closed = False
        self.checkpoint = checkpoint
        self.store = CheckpointStore(checkpoint.uri) if checkpoint else None
        self.fingerprint = plan.fingerprint()
        self.restored_epoch = -1
        """The epoch of the checkpoint the workers last started from (-1: none)."""
        self.committed: list[int] = []
        """Epochs of the checkpoints this session committed, in order."""
        self.commit_times: list[float] = []
        """When each of ``committed`` was committed (``time.monotonic()``)."""
        self.restarts = 0
        self._delivered: dict[str, int] = {}
        self._parts: dict[int, dict[int, dict[str, Any]]] = {}
        self._input_log: list[tuple[int, tuple[str, Any], int]] = []
        self._input_epoch: dict[int, int] = {}
        self._requested: int | None = None
        """On-request mode: the epoch every worker agreed to checkpoint after, until committed."""
        self._known_epoch = -1
        self._lookahead = 1
        self._requested_at = 0.0
        """How far past the last floor heard the next checkpoint request asks."""
        self._next_request = time.monotonic() + (checkpoint.interval or 0.0) if checkpoint else 0.0

    # -- backends implement ---------------------------------------------------------------
    @abstractmethod
    def _send_command(self, vertex: int, cmd: tuple[str, Any]) -> None:
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

    def _request_checkpoint(self, epoch: int) -> tuple[bool, int]:
        """Ask every worker for a checkpoint after ``epoch``: whether all agreed, and the
        highest :meth:`~timely.worker.Worker.checkpoint_floor` among them (to ask for a
        later epoch if not)."""
        raise NotImplementedError(f"{type(self).__name__} cannot checkpoint on request")

    def _stop(self) -> None:  # noqa: B027 - optional hook; most backends have nothing to free
        """Release workers and resources (idempotent)."""

    # -- the driver's API -------------------------------------------------------------------
    def input_command(self, vertex: int, cmd: tuple[str, Any]) -> None:
        """Hand a driver input command (send, advance, close) to the workers."""
        op, arg = cmd
        if op == "advance":
            self._input_epoch[vertex] = arg
        epoch = self._input_epoch.get(vertex, 0)
        if op == "send" and epoch <= self.restored_epoch:
            return  # resumed after this epoch: the checkpoint already reflects it
        if self.checkpoint is not None:
            self._input_log.append((vertex, cmd, epoch))
        self._guarded(self._send_command, vertex, cmd, retry=False)

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
    def _every(self) -> int | None:
        """Workers' ``checkpoint_every`` (None: no checkpoints, or on request)."""
        config = self.checkpoint
        return config.every if config is not None and config.interval is None else None

    def _maybe_request_checkpoint(self) -> None:
        """With ``checkpoint_interval``: once it has passed since the last commit, pick an
        epoch no worker has passed and ask them all for a checkpoint after it."""
        config = self.checkpoint
        if config is None or config.interval is None:
            return
        now = time.monotonic()
        if self._requested is not None:
            if not (self.committed and self.committed[-1] >= self._requested):
                return
            self._requested = None
            # Measured from the agreed request, not the commit: the gap between two
            # commits is then about the interval, not the interval plus a commit's latency.
            self._next_request = self._requested_at + config.interval
        if now < self._next_request:
            return
        # The floor moves on while the request travels: ask that far ahead of the last
        # floor heard, doubling the distance after each refusal and halving it after
        # each agreement, so it settles near how far the workers move in one round trip.
        epoch = max(self._known_epoch, self.restored_epoch) + self._lookahead
        self._next_request = float("inf")  # no second request from inside this one
        agreed, floor = self._request_checkpoint(epoch)
        self._known_epoch = max(self._known_epoch, floor)
        if agreed:
            self._requested = epoch
            self._requested_at = now
            self._lookahead = max(1, self._lookahead // 2)
        else:
            self._lookahead = min(2 * self._lookahead, _MAX_LOOKAHEAD)
            self._next_request = now  # ask again, after the floor they answered

    def _initial_restore(self) -> Restore | None:
        """The checkpoint to start from when resuming (None: start from scratch)."""
        if self.checkpoint is None or not self.checkpoint.resume:
            for sink in self.flow._sinks:
                sink.abort_after(-1)  # a fresh run: output left by an earlier one goes
            return None
        return self._load_restore()

    def _load_restore(self) -> Restore | None:
        assert self.store is not None
        found = self.store.latest(self.fingerprint, self.flow.name)
        epoch = -1 if found is None else found[0]
        for sink in self.flow._sinks:
            sink.abort_after(epoch)  # output of later epochs is produced again
        self.restored_epoch = epoch
        self._parts.clear()
        self._requested = None
        if self.checkpoint is not None and self.checkpoint.interval is not None:
            self._next_request = time.monotonic() + self.checkpoint.interval
        if found is None:
            return None
        return epoch, split_parts(found[1], self.workers)

    def _guarded(self, fn: Callable[..., Any], *args: Any, retry: bool = True) -> Any:
        """Call ``fn``; on a worker failure recover (if configured) and call it again."""
        while True:
            try:
                return fn(*args)
            except (WorkerDied, UserFunctionError) as e:
                self._recover(e)
                if not retry:
                    return None

    def _recover(self, error: Exception) -> None:
        """Start new workers from the last checkpoint and replay the logged inputs after it;
        a failure during the replay starts over (each attempt counts as a restart)."""
        config = self.checkpoint
        while True:
            if config is None or self._closed:
                raise error
            if isinstance(error, UserFunctionError) and config.on_error != "restore":
                raise error
            if self.restarts >= config.max_restarts:
                raise WorkerDied(
                    f"giving up after {self.restarts} restarts (max_restarts="
                    f"{config.max_restarts}); last failure: {error}"
                ) from error
            self.restarts += 1
            try:
                self._relaunch(self._load_restore())
                for vertex, cmd, epoch in list(self._input_log):
                    if cmd[0] == "send" and epoch <= self.restored_epoch:
                        continue
                    self._send_command(vertex, cmd)
                return
            except (WorkerDied, UserFunctionError) as e:
                error = e

    def _part_written(self, epoch: int, info: dict[str, Any]) -> None:
        """A worker wrote its part of the checkpoint at ``epoch``; commit once all have."""
        if epoch <= self.restored_epoch or (self.committed and epoch <= self.committed[-1]):
            return
        parts = self._parts.setdefault(epoch, {})
        parts[info["worker"]] = info
        if len(parts) < self.workers:
            return
        assert self.store is not None and self.checkpoint is not None
        try:
            self.store.commit(
                epoch, self.workers, self.fingerprint, self.flow.name, list(parts.values())
            )
        except OSError as e:
            raise CheckpointError(f"cannot commit the checkpoint at epoch {epoch}: {e}") from e
        self.committed.append(epoch)
        self.commit_times.append(time.monotonic())
        for done in [e for e in self._parts if e <= epoch]:
            del self._parts[done]
        # Keep the inputs after the oldest checkpoint still kept: a restore that finds the
        # newest damaged falls back to an older one and must replay from there.
        kept = self.committed[-self.checkpoint.keep :]
        oldest = kept[0] if len(kept) == self.checkpoint.keep else -1
        self._input_log = [
            entry for entry in self._input_log if not (entry[1][0] == "send" and entry[2] <= oldest)
        ]
        for sink in self.flow._sinks:
            sink.commit(epoch)
        self.store.collect_garbage(self.checkpoint.keep)

    def _deliver(self, key: str, epoch: int, records: list[Any]) -> None:
        if key == PART_KEY:
            for info in records:
                self._part_written(epoch, info)
            return
        if epoch <= self._delivered.get(key, -1):
            return  # delivered before a restart; the replay produced it again
        self._delivered[key] = epoch
        callback = self._callbacks.get(key)
        if callback is not None:
            callback(epoch, records)
        else:
            self.results[key].extend((epoch, r) for r in records)

    def join(self) -> Results:
        """Wait until the inputs are closed and all work is done; return collected results."""
        open_inputs = [h.name for h in self.flow._inputs if not h.closed]
        if open_inputs:
            raise RuntimeError(
                f"join() waits for the inputs to close, but {open_inputs} are open; "
                "call handle.close() on each (run() closes them for you)"
            )
        try:
            self._guarded(self._wait)
            for sink in self.flow._sinks:
                sink.commit(None)  # the run ended: every epoch is final
        finally:
            self.close()
        return self.results

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.flow._session = None
            self._stop()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def merge_frontiers(frontiers: list[tuple[tuple[int, ...], ...]]) -> list[tuple[int, ...]]:
    """The minimal elements of several workers' frontiers."""
    from progress import Antichain

    chain: Antichain[tuple[int, ...]] = Antichain()
    for f in frontiers:
        for t in f:
            chain.insert(t)
    return sorted(chain)


def route_input(cmd: tuple[str, Any], workers: int, turn: int) -> list[tuple[int, tuple[str, Any]]]:
    """Where a driver input command goes: ``(worker, command)`` pairs, in order.

    ``send`` spreads its records over the workers in contiguous chunks, starting at
    worker ``turn`` (callers rotate it so small sends do not all land on worker 0);
    ``advance`` and ``close`` go to every worker.
    """
    op, arg = cmd
    if op != "send":
        return [(w, cmd) for w in range(workers)]
    records = arg
    size = -(-len(records) // workers) if records else 0
    out = []
    for i in range(workers):
        chunk = records[i * size : (i + 1) * size]
        if chunk:
            out.append(((turn + i) % workers, ("send", chunk)))
    return out


BACKENDS = ("ray", "inline")


def start_session(
    flow: Dataflow, plan: Plan, workers: int, backend: str, address: str | None, **options: Any
) -> Session:
    """Check the configuration, then start ``backend`` with ``workers`` workers."""
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ConfigError(f"workers must be a positive integer, got {workers!r}")
    backend = os.environ.get("TIMELY_BACKEND", backend) if backend is None else backend
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    checkpoint = CheckpointConfig.from_options(options)
    if backend == "inline":
        if address is not None:
            raise ConfigError("address= is for the ray backend; drop it or use backend='ray'")
        from timely.backends.inline import InlineSession

        return InlineSession(flow, plan, workers, checkpoint=checkpoint, **options)
    from timely.backends.ray import RaySession

    return RaySession(flow, plan, workers, address=address, checkpoint=checkpoint, **options)
