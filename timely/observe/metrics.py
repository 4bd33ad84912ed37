"""A Prometheus endpoint on the driver (``metrics_port=PORT``, the CLI's ``--metrics-port``).

Every scrape reads what the workers' event logs flushed since the last one
(:class:`~timely.observe.tracestats.TraceStats`, at most ~0.2 s behind while they work) and the
session's own view (outputs, checkpoints, restarts): nothing is pushed by the workers
and nothing runs between scrapes. The server binds 127.0.0.1 only (``PORT`` 0 takes any
free port: ``session.metrics_url`` says which), on a registry of its own, so runs in
one process do not share series.

Names follow Prometheus's conventions (``timely_`` prefix, base units, ``_total`` for
counters): per operator and worker, ``timely_operator_records_in_total``,
``…_records_out_total``, ``…_activations_total`` and ``…_useful_seconds_total``; per
worker, ``timely_worker_steps_total``, ``…_messages_sent_total``,
``…_messages_received_total``, ``…_sent_bytes_total``, ``…_received_bytes_total`` and
``…_waiting_seconds_total``; per output, ``timely_output_frontier_epoch`` (the latest
epoch delivered) and ``timely_output_frontier_lag_seconds`` (since it last moved; 0
once the run ended); ``timely_checkpoint_snapshot_seconds`` and
``timely_checkpoint_write_seconds`` (summaries), ``timely_checkpoints_committed_total``,
``timely_checkpoints_subsumed_total``,
``timely_restarts_total``, ``timely_rescales_total``, ``timely_workers``; from a
controller's decisions (``RunView.decided``), ``timely_scaling_decisions_total``,
``timely_scaling_workers_wanted`` and per operator ``timely_operator_parallelism_wanted``
and its ``…_true_processing_rate``, ``…_true_output_rate``,
``…_observed_processing_rate`` and ``…_observed_output_rate`` over the latest policy
interval, and per operator and worker ``timely_instance_true_processing_rate`` and
``timely_instance_useful_seconds``; with ``checkpoint_every="auto"``, once a window
has been measured, ``timely_checkpoint_interval_epochs`` (the interval chosen) and
``timely_checkpoint_coordination_ratio`` (the share of the run's CPU the last window
spent coordinating, :mod:`timely.checkpoint.cadence`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from timely.errors import ConfigError
from timely.observe.tracestats import TraceStats

if TYPE_CHECKING:
    from timely.session.base import Session

HOST = "127.0.0.1"


def from_option(port: Any) -> MetricsMonitor | None:
    """``metrics_port=PORT`` -> the endpoint, bound now (None: no endpoint)."""
    if port is None:
        return None
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(
            f"metrics_port must be a TCP port number (0 for any free one), got {port!r}"
        )
    return MetricsMonitor(port)


class MetricsMonitor:
    """The endpoint of one session."""

    needs_trace = True

    def __init__(self, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _Collector()
        self.registry.register(self._collector)
        try:
            self._server, self._thread = start_http_server(port, addr=HOST, registry=self.registry)
        except OSError as e:
            raise ConfigError(
                f"cannot serve metrics on {HOST}:{port} ({e.strerror or e}); choose another "
                "metrics_port, or 0 for any free port"
            ) from None
        self.port: int = self._server.server_port
        self.url = f"http://{HOST}:{self.port}/metrics"

    def attach(self, session: Session) -> None:
        self._collector.session = session
        assert session.trace is not None
        self._collector.stats = TraceStats(session.trace)
        session.metrics_url = self.url

    def close(self) -> None:
        """Stop serving (the last scrape's figures are gone with the session)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None  # type: ignore[assignment]


class _Collector:
    """Makes the metric families at each scrape."""

    def __init__(self) -> None:
        self.session: Session | None = None
        self.stats: TraceStats | None = None

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        session, stats = self.session, self.stats
        if session is None or stats is None:
            return
        totals = stats.update()
        view = session.view.snapshot()

        labels = ["operator", "worker"]
        families = {
            "records_in": CounterMetricFamily(
                "timely_operator_records_in", "Records an operator took in.", labels=labels
            ),
            "records_out": CounterMetricFamily(
                "timely_operator_records_out", "Records an operator sent on.", labels=labels
            ),
            "activations": CounterMetricFamily(
                "timely_operator_activations", "Times an operator was run.", labels=labels
            ),
            "useful_s": CounterMetricFamily(
                "timely_operator_useful_seconds",
                "Time in an operator's activations (DS2's useful time).",
                labels=labels,
            ),
        }
        for (name, worker), op in sorted(totals.operators.items()):
            for field, family in families.items():
                family.add_metric([name, str(worker)], getattr(op, field))
        yield from families.values()

        per_worker = {
            "steps": ("timely_worker_steps", "Steps of a worker's loop."),
            "messages_sent": ("timely_worker_messages_sent", "Messages sent to peers."),
            "messages_received": ("timely_worker_messages_received", "Messages from peers."),
            "bytes_sent": ("timely_worker_sent_bytes", "Bytes sent to peers (0 in-process)."),
            "bytes_received": ("timely_worker_received_bytes", "Bytes read from peers."),
            "waiting_s": ("timely_worker_waiting_seconds", "Time with nothing to do."),
        }
        for field, (metric, text) in per_worker.items():
            family = CounterMetricFamily(metric, text, labels=["worker"])
            for worker, w in sorted(totals.workers.items()):
                family.add_metric([str(worker)], getattr(w, field))
            yield family

        epoch = GaugeMetricFamily(
            "timely_output_frontier_epoch",
            "The latest epoch an output delivered to the driver.",
            labels=["output"],
        )
        lag = GaugeMetricFamily(
            "timely_output_frontier_lag_seconds",
            "Seconds since an output's frontier last moved (0 once the run ended).",
            labels=["output"],
        )
        now = time.time()
        for key, out in sorted(view["outputs"].items()):
            epoch.add_metric([key], out.epoch)
            lag.add_metric([key], 0.0 if view["ended"] else now - out.moved_at)
        yield epoch
        yield lag

        for durations, metric, text in (
            (totals.snapshots, "timely_checkpoint_snapshot_seconds", "A vertex's snapshot."),
            (totals.writes, "timely_checkpoint_write_seconds", "A worker's checkpoint write."),
        ):
            summary = SummaryMetricFamily(metric, text)
            summary.add_metric([], durations.count, durations.total_s)
            yield summary
        yield CounterMetricFamily(
            "timely_checkpoints_committed",
            "Checkpoints committed in this session.",
            value=view["commits"],
        )
        yield CounterMetricFamily(
            "timely_checkpoints_subsumed",
            "Checkpoints complete but not committed: a later one was, with them.",
            value=view["subsumed"],
        )
        yield CounterMetricFamily(
            "timely_restarts", "Restarts of the workers after a failure.", value=view["restarts"]
        )
        yield CounterMetricFamily(
            "timely_rescales", "Rescales of the run.", value=len(view["rescales"])
        )
        yield from _decision_families(view["decisions"])
        yield GaugeMetricFamily("timely_workers", "Workers in the run now.", value=view["workers"])
        if view["checkpoint_interval"] is not None:
            yield GaugeMetricFamily(
                "timely_checkpoint_interval_epochs",
                "Epochs between checkpoints, as checkpoint_every='auto' chose last.",
                value=view["checkpoint_interval"],
            )
            yield GaugeMetricFamily(
                "timely_checkpoint_coordination_ratio",
                "Share of the run's CPU the last measured window spent checkpointing.",
                value=view["coordination_fraction"],
            )


def _decision_families(decisions: list[dict[str, Any]]) -> Iterator[Metric]:
    """A controller's latest decision (see ``RunView.decided``): the workers it wants,
    each operator's parallelism wanted and measured rates."""
    yield CounterMetricFamily(
        "timely_scaling_decisions", "Scaling decisions made.", value=len(decisions)
    )
    if not decisions:
        return
    last = decisions[-1]
    yield GaugeMetricFamily(
        "timely_scaling_workers_wanted",
        "Workers the latest scaling decision wants.",
        value=last.get("workers", 0),
    )
    wanted = GaugeMetricFamily(
        "timely_operator_parallelism_wanted",
        "Each operator's optimal parallelism in the latest decision (DS2's pi).",
        labels=["operator"],
    )
    for name, pi in sorted(last.get("per_operator", {}).items()):
        wanted.add_metric([name], pi)
    yield wanted
    fields = {
        "true_processing": "timely_operator_true_processing_rate",
        "true_output": "timely_operator_true_output_rate",
        "observed_processing": "timely_operator_observed_processing_rate",
        "observed_output": "timely_operator_observed_output_rate",
    }
    per_instance = {
        "true_processing": "timely_instance_true_processing_rate",
        "useful_s": "timely_instance_useful_seconds",
    }
    instances = last.get("instances", {})
    for field, metric in per_instance.items():
        family = GaugeMetricFamily(
            metric,
            f"One operator on one worker, the latest policy interval ({field}).",
            labels=["operator", "worker"],
        )
        for name, workers in sorted(instances.items()):
            for worker, values in sorted(workers.items()):
                if field in values:
                    family.add_metric([name, worker], values[field])
        yield family
    rates = last.get("rates", {})
    for field, metric in fields.items():
        family = GaugeMetricFamily(
            metric,
            f"Records/s, the latest policy interval ({field.replace('_', ' ')}).",
            labels=["operator"],
        )
        for name, values in sorted(rates.items()):
            if field in values:
                family.add_metric([name], values[field])
        yield family
