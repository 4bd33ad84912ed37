"""Sessions: a running dataflow the driver feeds, reads and joins (Naiad's Activate/Join)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from timely.errors import ConfigError
from timely.plan import Plan

if TYPE_CHECKING:
    from timely.dataflow import Dataflow


class Results(dict[str, list[tuple[int, Any]]]):
    """What ``collect`` gathered: name -> ``[(epoch, record), ...]`` in epoch order."""

    def records(self, name: str) -> list[Any]:
        """Just the records collected under ``name``, in epoch order."""
        return [r for _, r in self[name]]


class Session(ABC):
    """A running dataflow. Use as a context manager; ``join()`` waits for the end."""

    def __init__(self, flow: Dataflow, plan: Plan, workers: int) -> None:
        self.flow = flow
        self.plan = plan
        self.workers = workers
        self.results = Results({name: [] for name in flow._collects})
        self._callbacks: dict[str, Callable[[int, list[Any]], None]] = dict(flow._outputs)
        self._closed = False

    @abstractmethod
    def input_command(self, vertex: int, cmd: tuple[str, Any]) -> None:
        """Route a driver input command (send, advance, close) to the workers."""

    @abstractmethod
    def probe_frontier(self, vertex: int) -> list[tuple[int, ...]]:
        """The frontier at a probe, merged over the workers."""

    @abstractmethod
    def _wait(self) -> None:
        """Drive or wait for the workers until every input is closed and all work is done."""

    def poll(self, timeout: float = 0.0) -> None:  # noqa: B027 - a no-op where outputs are synchronous
        """Deliver outputs that have arrived (subscribe callbacks run here), waiting up to
        ``timeout`` seconds for some. Backends whose outputs arrive synchronously need not."""

    def _stop(self) -> None:  # noqa: B027 - optional hook; most backends have nothing to free
        """Release workers and resources (idempotent)."""

    def _deliver(self, key: str, epoch: int, records: list[Any]) -> None:
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
            self._wait()
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
    if backend == "inline":
        if address is not None:
            raise ConfigError("address= is for the ray backend; drop it or use backend='ray'")
        from timely.backends.inline import InlineSession

        return InlineSession(flow, plan, workers, **options)
    from timely.backends.ray import RaySession

    return RaySession(flow, plan, workers, address=address, **options)
