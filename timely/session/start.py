"""Starting a session: every run option checked before anything starts, then the backend.

:func:`start_session` takes the options a run was given (``flow.run(...)``,
``flow.activate(...)``) and checks them in turn (the checkpoint options, bins and
reconfiguration, the state backend, the event log, the loop warning, ``verbose``, the
monitors' options, which bind their servers here, and the backend's own options against
its ``__init__``), so that a bad value is a :class:`~timely.errors.ConfigError` with the
fix before any worker starts. The backend is looked up by name in the registry
(:mod:`timely.session.registry`), which imports it on first use.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any

from timely.checkpoint.config import CheckpointConfig
from timely.comm.coalesce import DEFAULT_TARGET
from timely.errors import ConfigError
from timely.eventlog import (
    remove_trace,
    temporary_trace,
    trace_option,
)
from timely.graph.plan import SEND_EARLY
from timely.graph.spec import RunSpec
from timely.routing.bins import (
    Table,
    check_bins,
    check_bins_per_step,
    default_table,
    resolve,
)
from timely.session.base import Session
from timely.session.loopwatch import loop_warning_option
from timely.session.monitors import monitor_options
from timely.session.registry import check_options
from timely.session.verbosity import resolve_verbose
from timely.state.disk import remove_store, state_options
from timely.worker.profiling import profile_dir_option


def _routing_options(
    spec: RunSpec, workers: int, options: dict[str, Any]
) -> tuple[RunSpec, list[tuple[int, Table, int | None]] | None]:
    """``bins``, ``reconfigurable`` and ``reconfigure`` (a batch run's schedule), checked
    before anything starts; the spec's plan gets the bins and, if needed, its control
    input (:meth:`timely.graph.plan.Plan.with_control`)."""
    bins = check_bins(options.pop("bins", spec.plan.bins))
    reconfigurable = options.pop("reconfigurable", False)
    if not isinstance(reconfigurable, bool):
        raise ConfigError(f"reconfigurable must be True or False, got {reconfigurable!r}")
    raw = options.pop("reconfigure", None)
    schedule: list[tuple[int, Table, int | None]] | None = None
    if raw is not None:
        schedule = []
        table = default_table(bins, workers)
        last = -1
        for entry in raw:
            if not isinstance(entry, tuple | list) or len(entry) not in (2, 3):
                raise ConfigError(
                    "reconfigure= takes a list of (epoch, assignment) or (epoch, assignment, "
                    f"bins_per_step) tuples, got {entry!r}"
                )
            epoch, assignment, *per = entry
            per_step = per[0] if per else None
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch <= last:
                raise ConfigError(
                    f"reconfigure=: epochs must be ints >= 0 in increasing order, got {epoch!r} "
                    f"after {last}"
                )
            if per_step is not None:
                check_bins_per_step(per_step, "reconfigure=")
            prev = table
            try:
                table = resolve(assignment, table, workers)
            except ValueError as e:
                raise ConfigError(f"reconfigure= at epoch {epoch}: {e}") from None
            moves = sum(a != b for a, b in zip(prev, table))
            schedule.append((epoch, table, per_step))
            last = epoch + (0 if per_step is None else max(0, -(-moves // per_step) - 1))
    plan = spec.plan.with_control(bins, reconfigurable or schedule is not None)
    plan.live_control = reconfigurable and schedule is None
    return dataclasses.replace(spec, plan=plan), schedule


def coalesce_option(options: dict[str, Any]) -> int:
    """Take ``coalesce_rows`` out of ``options``: the rows a step's small Arrow batches
    for one peer are merged toward (:mod:`timely.comm.coalesce`; 0 turns it off)."""
    rows = options.pop("coalesce_rows", DEFAULT_TARGET)
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise ConfigError(
            f"coalesce_rows must be a number of rows (0: send batches as they are), got {rows!r}"
        )
    return rows


def send_early_option(options: dict[str, Any]) -> int:
    """Take ``send_early_bytes`` out of ``options``: the Arrow bytes a step routes to one
    peer before it sends them mid-step (:attr:`Plan.send_early`; 0: at the step's end)."""
    size = options.pop("send_early_bytes", SEND_EARLY)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ConfigError(
            f"send_early_bytes must be a number of bytes (0: send at the step's end), got {size!r}"
        )
    return size


def start_session(
    spec: RunSpec, workers: int, backend: str | None, address: str | None, **options: Any
) -> Session:
    """Check the configuration, then start ``backend`` with ``workers`` workers.

    ``verbose`` (default: ``TIMELY_VERBOSE``, see :mod:`timely.session.verbosity`) goes to the
    backends that start a library with something to quiet (Ray); every backend accepts
    it, so a run can switch backends without changing its options."""
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ConfigError(f"workers must be a positive integer, got {workers!r}")
    name = os.environ.get("TIMELY_BACKEND", "ray") if backend is None else backend
    checkpoint = CheckpointConfig.from_options(options)
    spec, schedule = _routing_options(spec, workers, options)
    store = state_options(options)
    coalesce_rows = coalesce_option(options)
    send_early = send_early_option(options)
    profile_dir = profile_dir_option(options.pop("profile_dir", None))
    trace = trace_option(options)
    loop_warning = loop_warning_option(options)
    verbose = resolve_verbose(options.pop("verbose", None))
    if address is not None:
        options["address"] = address
    monitors = monitor_options(options)  # servers bind here: a port in use fails now
    temporary = None
    try:
        for m in monitors:
            check = getattr(m, "check", None)
            if check is not None:  # what a monitor needs of the run, before it starts
                check(workers, name, checkpoint, spec.plan)
        cls = check_options(name, options)
        if "verbose" in inspect.signature(cls).parameters:
            options["verbose"] = verbose
        if trace is None and any(m.needs_trace for m in monitors):
            if "trace" not in inspect.signature(cls).parameters:
                raise ConfigError(
                    f"the {name} backend keeps no event log, which metrics and the live page "
                    "read: drop those options or use backend 'inline' or 'ray'"
                )
            trace = temporary = temporary_trace()
        spec.plan.coalesce_rows = coalesce_rows
        spec.plan.send_early = send_early
        spec.plan.profile_dir = profile_dir
        if store is not None:
            spec.plan.store = store = store.made()
        if trace is None:
            session = cls(spec, workers, checkpoint=checkpoint, **options)
        elif "trace" not in inspect.signature(cls).parameters:
            raise ConfigError(
                f"the {name} backend keeps no event log: drop trace= or use backend "
                "'inline' or 'ray'"
            )
        else:
            session = cls(spec, workers, checkpoint=checkpoint, trace=trace, **options)
    except BaseException:
        for m in monitors:
            m.close()
        if temporary is not None:
            remove_trace(temporary)
        remove_store(store)
        raise
    session.monitors = monitors
    session._temporary_trace = temporary
    session.loop_watch.threshold = loop_warning
    try:
        if schedule is not None:
            session._schedule(schedule)
        else:
            session._control_to(1)  # configurations run one epoch ahead of the data
    except BaseException:
        session.close()
        raise
    try:
        for m in monitors:
            m.attach(session)
    except BaseException:
        session.close()
        raise
    return session
