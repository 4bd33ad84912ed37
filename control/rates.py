"""DS2's measurements from the event log: useful time, true and observed rates.

An operator instance's **useful time** is the time it spends on its records: its
activations (``on_recv``, ``on_notify``, an input's commands, a source's reads) and its
share of the (de)serialisation of the messages that carry them. Waiting, scheduling
and progress tracking are not useful time: a run that idles has low observed rates but
the same true ones. **True rates** are records per second of useful time, λp = records
processed / useful time and λo = records sent / useful time; **observed rates** are
records per second of the interval. True rates say what an instance could do if it
never waited, which is what lets DS2 size an operator in one step.

Attribution, from the events of :mod:`timely.eventlog`:

- Records **processed**: ``records_in`` of ``RECV`` activations. An input's ``COMMAND``
  and a source's ``PULL`` take in nothing from the dataflow; what they handle is what
  they emit, so their ``records_out`` counts as processed (and as sent). ``START`` and
  ``NOTIFY`` activations process no new records, but their time is useful (a reduce's
  work happens at notification) and what they send counts as sent.
- Records **sent**: ``records_out`` of every activation.
- A **received** message's time (read, decode, apply) is split over the vertices its
  data goes to, by records: decoding is part of taking records in.
- A **sent** message's time (encode, write) belongs to the vertices that produced its
  records: encoding is part of sending them. The log names the vertices a message's
  data goes to; its producers are their upstreams in the graph over channels that
  cross workers. A target's share (by records) goes to its producers on the sending
  worker, split by what each sent in the step the message ends (the activations logged
  since that worker's previous sends): equally if none sent, to the target itself if
  the graph is unknown. The split is fixed when the event is fed, so it does not
  depend on the interval asked for.
- A message that carries no records (progress only) is the runtime's, nobody's useful
  time.
- An event that crosses the interval's edge contributes in proportion to its overlap,
  its time and its records alike (an instant event counts if it lies inside). So the
  measurements of adjacent intervals add up to their union's.

Caveat: the log cannot tell a source's read that waits for data (inside ``PULL``, up to
its ``seconds_per_step``) from one that works, so such waiting counts as the source's
useful time and makes its true rate look lower than it is.

Every worker runs every operator, so an operator's parallelism is the run's worker
count: for an interval, the largest of the logs (worker and attempt: a restore or a
rescale starts new logs) with events in it. An operator's aggregate true rate is DS2's
o[λ], the sum of its instances' rates; it is taken as parallelism × the pooled rate
(records over useful time summed over the instances), which weights each instance by how
long it worked, so that an instance that barely ran does not swing the estimate with a
handful of records.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control.graph import Graph
from timely.eventlog import COMMAND, PULL, RECV, LogTail

NS = 1e-9


@dataclass(frozen=True, kw_only=True)
class Rates:
    """Work done over an interval: time spent and records moved."""

    interval_s: float
    processed: float = 0.0
    sent: float = 0.0
    activation_s: float = 0.0
    serde_s: float = 0.0
    """Its share of (de)serialising the messages that carried its records."""

    @property
    def useful_s(self) -> float:
        return self.activation_s + self.serde_s

    @property
    def selectivity(self) -> float | None:
        """Records sent per record processed (λo / λp), if it processed any."""
        return self.sent / self.processed if self.processed > 0 else None

    @property
    def observed_processing_rate(self) -> float:
        return self.processed / self.interval_s if self.interval_s > 0 else 0.0

    @property
    def observed_output_rate(self) -> float:
        return self.sent / self.interval_s if self.interval_s > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class InstanceRates(Rates):
    """One operator on one worker."""

    operator: int
    worker: int

    @property
    def true_processing_rate(self) -> float | None:
        """λp: records processed per second of useful time (None if it did nothing)."""
        return self.processed / self.useful_s if self.useful_s > 0 else None

    @property
    def true_output_rate(self) -> float | None:
        """λo: records sent per second of useful time."""
        return self.sent / self.useful_s if self.useful_s > 0 else None


@dataclass(frozen=True, kw_only=True)
class OperatorRates(Rates):
    """One operator over all its instances (sums of time and records)."""

    operator: int
    name: str = ""
    kind: str = "vertex"
    instances: int = 1
    """Its parallelism while measured (every worker runs every operator)."""

    @property
    def instance_rate(self) -> float | None:
        """One instance's true processing rate, pooled over the instances: the o[λp] / p
        of DS2's formula (None without useful time)."""
        return self.processed / self.useful_s if self.useful_s > 0 else None

    @property
    def true_processing_rate(self) -> float | None:
        """o[λp]: the aggregate true processing rate of all its instances."""
        rate = self.instance_rate
        return None if rate is None else self.instances * rate

    @property
    def true_output_rate(self) -> float | None:
        """o[λo]: the aggregate true output rate of all its instances."""
        if self.useful_s <= 0:
            return None
        return self.instances * self.sent / self.useful_s


@dataclass(frozen=True)
class Measurement:
    """What every operator and instance did over ``[start, end)`` (log clock, ns)."""

    start: int
    end: int
    workers: int
    graph: Graph
    instances: dict[tuple[int, int], InstanceRates]
    """By ``(operator, worker)``."""
    operators: dict[int, OperatorRates]

    @property
    def interval_s(self) -> float:
        return (self.end - self.start) * NS

    def by_name(self) -> dict[str, OperatorRates]:
        """Operators by name (a name used twice keeps its first vertex)."""
        out: dict[str, OperatorRates] = {}
        for v in sorted(self.operators):
            out.setdefault(self.operators[v].name, self.operators[v])
        return out


def _overlap(t0: int, t1: int, start: int, end: int) -> float:
    """The fraction of ``[t0, t1]`` inside ``[start, end)`` (an instant: 1 or 0)."""
    if t1 <= t0:
        return 1.0 if start <= t0 < end else 0.0
    inside = min(t1, end) - max(t0, start)
    return inside / (t1 - t0) if inside > 0 else 0.0


class _Tally:
    """Sums for one instance while an interval is measured."""

    __slots__ = ("activation_ns", "processed", "sent", "serde_ns")

    def __init__(self) -> None:
        self.activation_ns = 0.0
        self.serde_ns = 0.0
        self.processed = 0.0
        self.sent = 0.0


class RateMeter:
    """Measures intervals of a run from its workers' event logs, fed as they arrive:
    :meth:`feed` (events of one log), :meth:`read` (a live trace directory),
    :meth:`measure` any interval still held, :meth:`forget` what is old."""

    def __init__(self, graph: Graph | None = None) -> None:
        self.graph = graph
        self._names: list[str] = list(graph.names) if graph is not None else []
        self._logs: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
        """Activations, and messages as ``("m", t0, t1, [(vertex, share), ...])`` (their
        time's attribution), by ``(worker, attempt)``."""
        self._step_sent: dict[tuple[int, int], dict[int, int]] = {}
        """Records sent per vertex since the worker's last sends: what its next sends carry."""
        self._sending: dict[tuple[int, int], bool] = {}
        self._workers: dict[tuple[int, int], int] = {}
        self._latest: dict[int, int] = {}
        self._tails: dict[Path, LogTail] = {}

    def feed(self, header: Mapping[str, Any], events: Iterable[Sequence[Any]]) -> None:
        """Take in events of the log with ``header`` (its first, then later ones)."""
        if self.graph is None and "graph" in header:
            self.graph = Graph.from_describe(header["graph"])
        if len(header.get("vertices", ())) > len(self._names):
            self._names = [str(n) for n in header["vertices"]]
        key = (int(header["worker"]), int(header.get("attempt", 0)))
        self._workers[key] = int(header["workers"])
        kept = self._logs.setdefault(key, [])
        step_sent = self._step_sent.setdefault(key, {})
        sending = self._sending.get(key, False)
        latest = self._latest.get(key[0], 0)
        for e in events:
            tag = e[0]
            if tag == "a":
                if sending:  # a new step: what it sends comes from its own activations
                    step_sent.clear()
                    sending = False
                step_sent[e[3]] = step_sent.get(e[3], 0) + e[6]
                kept.append(tuple(e))
            elif (tag == "r" or tag == "s") and e[6] > 0:  # progress only: the runtime's
                records = e[6]
                if tag == "r":
                    shares = [(int(v), n / records) for v, n in e[9]]
                else:
                    sending = True
                    shares = []
                    for v, n in e[9]:
                        shares += self._encoders(int(v), n / records, step_sent)
                kept.append(("m", e[1], e[2], shares))
            if len(e) > 2 and isinstance(e[2], int) and e[2] > latest:
                latest = e[2]
        self._sending[key] = sending
        self._latest[key[0]] = latest

    def _encoders(
        self, target: int, share: float, step_sent: Mapping[int, int]
    ) -> list[tuple[int, float]]:
        """Who encoded a sent message's ``share`` of records for ``target``."""
        graph = self.graph
        producers: list[int] = []
        if graph is not None and target < len(graph.names):
            producers = graph.producers(target, wire=True) or graph.producers(target)
        if not producers:
            return [(target, share)]
        weights = [step_sent.get(p, 0) for p in producers]
        total = sum(weights)
        if total == 0:
            return [(p, share / len(producers)) for p in producers]
        return [(p, share * w / total) for p, w in zip(producers, weights) if w]

    def read(self, directory: str | os.PathLike[str]) -> int:
        """Feed what the logs in ``directory`` gained since the last call (a live run);
        returns how many events were new."""
        new = 0
        for path in sorted(Path(directory).glob("worker-*.trace")):
            tail = self._tails.get(path)
            if tail is None:
                self._tails[path] = tail = LogTail(path)
            try:
                new += tail.read()
            except OSError:
                continue  # removed at the run's end
            if tail.header is not None and tail.events:
                self.feed(tail.header, tail.events)
                tail.events = []
        return new

    @property
    def settled(self) -> int:
        """The latest time every worker's log has reached: an interval that ends by then
        is complete (as far as the logs were flushed)."""
        return min(self._latest.values(), default=0)

    def forget(self, before: int) -> None:
        """Drop events that end before ``before``: no later interval needs them."""
        for key, events in self._logs.items():
            self._logs[key] = [e for e in events if e[2] >= before]

    def measure(self, start: int, end: int) -> Measurement:
        """Every operator's and instance's work over ``[start, end)``."""
        if end <= start:
            raise ValueError(f"an interval must end after it starts: [{start}, {end})")
        graph = self.graph or Graph(tuple(self._names), ("vertex",) * len(self._names), ())
        tallies: dict[tuple[int, int], _Tally] = {}
        seen: dict[tuple[int, int], int] = {}
        for key, events in self._logs.items():
            worker = key[0]
            for e in events:
                share = _overlap(e[1], e[2], start, end)
                if share == 0.0:
                    continue
                seen[key] = self._workers[key]
                if e[0] == "a":
                    tally = tallies.get((e[3], worker))
                    if tally is None:
                        tallies[(e[3], worker)] = tally = _Tally()
                    tally.activation_ns += share * (e[2] - e[1])
                    kind = e[4]
                    if kind == RECV:
                        tally.processed += share * e[5]
                    elif kind in (COMMAND, PULL):
                        tally.processed += share * e[6]
                    tally.sent += share * e[6]
                else:
                    ns = share * (e[2] - e[1])
                    for v, part in e[3]:
                        tally = tallies.get((v, worker))
                        if tally is None:
                            tallies[(v, worker)] = tally = _Tally()
                        tally.serde_ns += ns * part
        workers = max(seen.values(), default=max(self._workers.values(), default=1))
        return _measurement(graph, start, end, workers, tallies)


def _measurement(
    graph: Graph, start: int, end: int, workers: int, tallies: dict[tuple[int, int], _Tally]
) -> Measurement:
    interval_s = (end - start) * NS
    instances: dict[tuple[int, int], InstanceRates] = {}
    for v in range(len(graph.names)):
        for w in range(workers):
            t = tallies.get((v, w)) or _Tally()
            instances[(v, w)] = InstanceRates(
                operator=v,
                worker=w,
                interval_s=interval_s,
                processed=t.processed,
                sent=t.sent,
                activation_s=t.activation_ns * NS,
                serde_s=t.serde_ns * NS,
            )
    operators: dict[int, OperatorRates] = {}
    for v in range(len(graph.names)):
        mine = [instances[(v, w)] for w in range(workers)]
        operators[v] = OperatorRates(
            operator=v,
            name=graph.names[v],
            kind=graph.kinds[v],
            instances=workers,
            interval_s=interval_s,
            processed=sum(i.processed for i in mine),
            sent=sum(i.sent for i in mine),
            activation_s=sum(i.activation_s for i in mine),
            serde_s=sum(i.serde_s for i in mine),
        )
    return Measurement(start, end, workers, graph, instances, operators)


def measure_trace(
    logs: Iterable[tuple[Mapping[str, Any], Sequence[Sequence[Any]]]],
    start: int | None = None,
    end: int | None = None,
    graph: Graph | None = None,
) -> Measurement:
    """A finished trace (what :func:`timely.eventlog.read_trace` returns) over
    ``[start, end)``, by default all of it."""
    meter = RateMeter(graph)
    first, last = None, None
    for header, events in logs:
        meter.feed(header, events)
        for e in events:
            if len(e) > 2 and isinstance(e[1], int):
                first = e[1] if first is None else min(first, e[1])
                last = e[2] if last is None else max(last, e[2])
    if start is None:
        start = first if first is not None else 0
    if end is None:
        end = (last + 1) if last is not None else start + 1
    return meter.measure(start, end)
