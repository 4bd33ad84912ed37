"""Random dataflows for end-to-end tests, with a plain-Python reference of their output.

A dataflow is a chain of steps over integer records. Steps: map, filter, flat (select
many), exchange, broadcast, per-time sum (exchange to one worker, then a notify-driven
aggregate), diamond (two chains concatenated), and iterate (a chain applied again and
again, each round's output fed back and emitted), which nests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from timely import Stream, Vertex, exchange
from timely.vertex import Capability

M = 97
Time = tuple[int, ...]
Data = dict[Time, Counter[int]]


class MapV(Vertex):
    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        self.send_by(0, [(self.a * x + self.b) % M for x in records], time)


class FilterV(Vertex):
    def __init__(self, k: int, r: int) -> None:
        self.k, self.r = k, r

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        self.send_by(0, [x for x in records if x % self.k != self.r], time)


class FlatV(Vertex):
    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        self.send_by(0, [y for x in records for y in (x, (x + 1) % M)], time)


class SumV(Vertex):
    """Per-time sum, emitted when the time completes; a retained capability sends it."""

    def __init__(self) -> None:
        self.sums: dict[Time, int] = {}
        self.caps: dict[Time, Capability] = {}

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        if time not in self.sums:
            self.sums[time] = 0
            self.caps[time] = self.retain()
            self.notify_at(time)
        self.sums[time] += sum(records)

    def on_notify(self, time: Time) -> None:
        cap = self.caps.pop(time)
        cap.send_by(0, [self.sums.pop(time) % M])
        cap.drop()


@dataclass
class Log:
    """What the recorders saw: ``(worker, vertex, kind, time)`` in the order it happened."""

    events: list[tuple[int, int, str, Time]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


class Recorder(Vertex):
    """Passes records on; asks for a notification at every time it sees; logs both."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.asked: set[Time] = set()

    def on_recv(self, input: int, records: list[Any], time: Time) -> None:
        front = self._ctx.worker.frontier(self._ctx.index, input)
        if not any(all(a <= b for a, b in zip(f, time)) for f in front):
            self.log.violations.append(f"batch at {time} delivered past frontier {front}")
        self.log.events.append((self.worker, self._ctx.index, "recv", time))
        if time not in self.asked:
            self.asked.add(time)
            self.notify_at(time)
        self.send_by(0, records, time)

    def on_notify(self, time: Time) -> None:
        self.log.events.append((self.worker, self._ctx.index, "notify", time))


Step = tuple[Any, ...]


def steps(depth: int = 0) -> st.SearchStrategy[list[Step]]:
    leaf = st.one_of(
        st.tuples(st.just("map"), st.integers(1, 5), st.integers(0, 9)),
        st.tuples(st.just("filter"), st.integers(2, 4), st.integers(0, 1)),
        st.tuples(st.just("flat")),
        st.tuples(st.just("exchange"), st.integers(1, 7)),
        st.tuples(st.just("sum")),
        st.tuples(st.just("record")),
    )
    if depth == 0:
        leaf = st.one_of(leaf, st.tuples(st.just("broadcast")))
    if depth >= 2:
        return st.lists(leaf, min_size=1, max_size=3)
    inner = st.deferred(lambda: steps(depth + 1))
    node = st.one_of(
        leaf,
        st.tuples(st.just("diamond"), inner, inner),
        st.tuples(st.just("iterate"), inner, st.integers(1, 3)),
    )
    return st.lists(node, min_size=1, max_size=3)


def build(stream: Stream, chain: list[Step], log: Log) -> Stream:
    """Place ``chain`` after ``stream``."""
    for step in chain:
        kind = step[0]
        if kind == "map":
            a, b = step[1], step[2]
            stream = stream.unary(lambda a=a, b=b: MapV(a, b), name=f"map{a},{b}")
        elif kind == "filter":
            k, r = step[1], step[2]
            stream = stream.unary(lambda k=k, r=r: FilterV(k, r), name=f"filter{k},{r}")
        elif kind == "flat":
            stream = stream.unary(FlatV, name="flat")
        elif kind == "exchange":
            m = step[1]
            stream = stream.exchange(lambda x, m=m: x % m)
        elif kind == "broadcast":
            stream = stream.broadcast()
        elif kind == "sum":
            stream = stream.unary(SumV, name="sum", channel=exchange(lambda x: 0))
        elif kind == "record":
            stream = stream.unary(lambda: Recorder(log), name="record")
        elif kind == "diamond":
            left = build(stream, step[1], log)
            right = build(stream, step[2], log)
            stream = left.concat(right)
        elif kind == "iterate":
            body: list[Step] = step[1]
            stream = stream.iterate(lambda s, body=body: build(s, body, log), max_iters=step[2])
        else:
            raise AssertionError(kind)
    return stream


MAX_VOLUME = 20_000
"""The most records a random dataflow may move in all, every step's output summed (the
reference's ``tally``): a random chain of nested loops, diamonds and flat steps can
multiply a few records by 10^8 (one drawn example: 418M outputs), which the reference
counts in a ``Counter`` but a run holds as records."""


def reference(chain: list[Step], data: Data, workers: int, tally: list[int] | None = None) -> Data:
    """What ``chain`` computes, in plain Python, time by time (``tally[0]``: increased by
    the records every step puts out)."""
    for step in chain:
        kind = step[0]
        out: Data = {}
        if kind in ("map", "filter", "flat"):
            f = _record_fn(step)
            for t, c in data.items():
                acc: Counter[int] = Counter()
                for x, n in c.items():
                    for y in f(x):
                        acc[y] += n
                if acc:
                    out[t] = acc
        elif kind in ("exchange", "record"):
            out = data
        elif kind == "broadcast":
            out = {t: Counter({x: n * workers for x, n in c.items()}) for t, c in data.items()}
        elif kind == "sum":
            out = {
                t: Counter({sum(x * n for x, n in c.items()) % M: 1}) for t, c in data.items() if c
            }
        elif kind == "diamond":
            out = _merge(
                reference(step[1], data, workers, tally), reference(step[2], data, workers, tally)
            )
        elif kind == "iterate":
            body, k = step[1], step[2]
            x = {(*t, 0): c for t, c in data.items()}
            result: Data = {}
            for i in range(k):
                y = reference(body, x, workers, tally)
                result = _merge(result, {t[:-1]: c for t, c in y.items()})
                x = {(*t[:-1], i + 1): c for t, c in y.items()}
                if not x:
                    break
            out = result
        data = {t: c for t, c in out.items() if c}
        if tally is not None:
            tally[0] += sum(sum(c.values()) for c in data.values())
    return data


def _record_fn(step: Step) -> Callable[[int], list[int]]:
    if step[0] == "map":
        a, b = step[1], step[2]
        return lambda x: [(a * x + b) % M]
    if step[0] == "filter":
        k, r = step[1], step[2]
        return lambda x: [x] if x % k != r else []
    return lambda x: [x, (x + 1) % M]


def _merge(a: Data, b: Data) -> Data:
    out = {t: Counter(c) for t, c in a.items()}
    for t, c in b.items():
        out.setdefault(t, Counter()).update(c)
    return out
