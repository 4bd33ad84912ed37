"""DS2's measurements from the event log: hand-made event lists (what counts as useful
time, how (de)serialisation is attributed, clipping at the interval's edges), adjacent
intervals adding up, the live form, and a real inline run's trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import operators  # noqa: F401  (select, where, count_by)
from control import Graph, RateMeter, measure_trace
from control.rates import NS
from timely import Dataflow
from timely.eventlog import COMMAND, NOTIFY, PULL, RECV, START, read_trace

# in (input) -> map (exchange) -> join <- side (input, exchange); join -> out (gather)
GRAPH = {
    "vertices": [
        ["in", "input"],
        ["map", "vertex"],
        ["side", "input"],
        ["join", "vertex"],
        ["out", "vertex"],
    ],
    "edges": [[0, 1, "exchange"], [1, 3, "exchange"], [2, 3, "exchange"], [3, 4, "gather"]],
}
IN, MAP, SIDE, JOIN, OUT = range(5)


def header(worker: int = 0, workers: int = 2, attempt: int = 0) -> dict[str, Any]:
    return {
        "worker": worker,
        "workers": workers,
        "attempt": attempt,
        "vertices": [name for name, _ in GRAPH["vertices"]],
        "graph": GRAPH,
    }


def a(t0: int, t1: int, v: int, kind: int, rin: int, rout: int) -> tuple[Any, ...]:
    return ("a", t0, t1, v, kind, rin, rout)


def msg(tag: str, t0: int, t1: int, targets: list[list[int]], peer: int = 1) -> tuple[Any, ...]:
    records = sum(n for _, n in targets)
    return (tag, t0, t1, peer, 0, len(targets), records, 100, 0, targets)


def measure(events: list[tuple[Any, ...]], start: int, end: int, worker: int = 0) -> Any:
    meter = RateMeter()
    meter.feed(header(worker), events)
    return meter.measure(start, end)


def test_useful_time_is_activations_and_serialisation_not_waiting() -> None:
    events = [
        ("t", 0, 1000),
        a(100, 300, MAP, RECV, 10, 10),  # 200 ns, 10 records in, 10 out
        a(300, 400, MAP, NOTIFY, 0, 5),  # useful, processes nothing new, sends 5
        ("w", 1000, 5000),  # waiting: nobody's useful time
        ("t", 5000, 6000),
        a(5100, 5400, MAP, RECV, 20, 0),
    ]
    m = measure(events, 0, 10_000)
    r = m.instances[(MAP, 0)]
    assert r.activation_s == pytest.approx(600 * NS)
    assert r.serde_s == 0
    assert (r.processed, r.sent) == (30, 15)
    assert r.true_processing_rate == pytest.approx(30 / (600 * NS))
    assert r.true_output_rate == pytest.approx(15 / (600 * NS))
    assert r.observed_processing_rate == pytest.approx(30 / (10_000 * NS))
    assert r.observed_output_rate == pytest.approx(15 / (10_000 * NS))
    # The other worker ran it too, and did nothing: no rate, not zero.
    idle = m.instances[(MAP, 1)]
    assert idle.useful_s == 0 and idle.true_processing_rate is None
    op = m.operators[MAP]
    assert op.instances == 2 and op.name == "map"
    assert op.instance_rate == pytest.approx(r.true_processing_rate)
    assert op.true_processing_rate == pytest.approx(2 * r.true_processing_rate)
    assert op.selectivity == pytest.approx(0.5)


def test_inputs_and_sources_process_what_they_emit() -> None:
    events = [
        a(0, 10, IN, START, 0, 0),
        a(10, 20, IN, COMMAND, 7, 7),  # a Send of 7 records
        a(20, 30, IN, COMMAND, 0, 0),  # an Advance
        a(30, 50, SIDE, PULL, 0, 12),  # a source's read
    ]
    m = measure(events, 0, 100)
    assert (m.operators[IN].processed, m.operators[IN].sent) == (7, 7)
    assert m.operators[IN].activation_s == pytest.approx(30 * NS)
    assert (m.operators[SIDE].processed, m.operators[SIDE].sent) == (12, 12)


def test_a_received_message_is_decoded_for_its_targets_by_records() -> None:
    m = measure([msg("r", 0, 400, [[MAP, 3], [JOIN, 1]])], 0, 1000)
    assert m.instances[(MAP, 0)].serde_s == pytest.approx(300 * NS)
    assert m.instances[(JOIN, 0)].serde_s == pytest.approx(100 * NS)
    assert m.instances[(MAP, 0)].activation_s == 0


def test_a_sent_message_is_encoded_by_the_producers_of_its_records() -> None:
    events = [
        a(0, 10, MAP, RECV, 4, 30),  # map sent 30 of what feeds join ...
        a(10, 20, SIDE, PULL, 0, 10),  # ... side 10
        msg("s", 100, 500, [[JOIN, 8]]),  # 400 ns to encode records for join
        msg("s", 600, 700, [[MAP, 2]]),  # 100 ns for map's records: in produced them
    ]
    m = measure(events, 0, 1000)
    assert m.instances[(MAP, 0)].serde_s == pytest.approx(300 * NS)
    assert m.instances[(SIDE, 0)].serde_s == pytest.approx(100 * NS)
    assert m.instances[(IN, 0)].serde_s == pytest.approx(100 * NS)
    assert m.instances[(JOIN, 0)].serde_s == 0  # the receiver decodes; it did not encode
    # Each step's sends carry what that step's activations sent.
    steps = [
        a(0, 10, MAP, RECV, 4, 30),
        msg("s", 20, 120, [[JOIN, 4]]),
        a(200, 210, SIDE, PULL, 0, 10),
        msg("s", 220, 260, [[JOIN, 4]]),
    ]
    m = measure(steps, 0, 1000)
    assert m.instances[(MAP, 0)].serde_s == pytest.approx(100 * NS)
    assert m.instances[(SIDE, 0)].serde_s == pytest.approx(40 * NS)


def test_progress_only_messages_are_nobodys_useful_time() -> None:
    m = measure([msg("s", 0, 100, []), msg("r", 100, 200, [])], 0, 1000)
    assert all(r.useful_s == 0 for r in m.instances.values())


def test_events_crossing_the_interval_are_clipped_in_proportion() -> None:
    events = [
        a(0, 100, MAP, RECV, 10, 20),
        msg("r", 130, 170, [[MAP, 4]]),
        a(150, 150, MAP, RECV, 1, 0),
    ]
    m = measure(events, 50, 150)
    r = m.instances[(MAP, 0)]
    assert r.activation_s == pytest.approx(50 * NS)
    assert r.serde_s == pytest.approx(20 * NS)
    assert (r.processed, r.sent) == (5, 10)  # the instant at 150 is outside [50, 150)
    assert m.interval_s == pytest.approx(100 * NS)
    assert measure(events, 150, 151).instances[(MAP, 0)].processed == 1
    assert measure(events, 200, 300).instances[(MAP, 0)].useful_s == 0
    with pytest.raises(ValueError):
        measure(events, 10, 10)


def _event(draw: st.DrawFn) -> tuple[Any, ...]:
    t0 = draw(st.integers(0, 1000))
    t1 = t0 + draw(st.integers(0, 200))
    if draw(st.booleans()):
        v = draw(st.integers(0, 4))
        kind = draw(st.sampled_from([RECV, NOTIFY, COMMAND, PULL, START]))
        return a(t0, t1, v, kind, draw(st.integers(0, 50)), draw(st.integers(0, 50)))
    targets = draw(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 9)), max_size=3))
    return msg(draw(st.sampled_from("sr")), t0, t1, [list(t) for t in targets])


@given(st.data())
def test_adjacent_intervals_add_up_to_their_union(data: st.DataObject) -> None:
    events = [_event(data.draw) for _ in range(data.draw(st.integers(0, 30)))]
    cut = data.draw(st.integers(1, 1199))
    whole, left, right = (measure(events, s, e) for s, e in ((0, 1200), (0, cut), (cut, 1200)))
    for key, w in whole.instances.items():
        parts = (left.instances[key], right.instances[key])
        for field in ("activation_s", "serde_s", "processed", "sent"):
            total = sum(getattr(p, field) for p in parts)
            assert total == pytest.approx(getattr(w, field), abs=1e-12), (key, field)


def test_the_live_form_takes_events_as_they_come() -> None:
    first = [a(0, 100, MAP, RECV, 10, 10)]
    later = [a(200, 300, MAP, RECV, 10, 10), msg("r", 300, 400, [[MAP, 5]])]
    meter = RateMeter()
    meter.feed(header(0), first)
    meter.feed(header(1), [a(0, 50, MAP, RECV, 1, 1)])
    assert meter.settled == 50  # worker 1's log has got no further
    meter.feed(header(0), later)
    whole, at_once = meter.measure(0, 1000), measure(first + later, 0, 1000)
    assert whole.instances[(MAP, 0)] == at_once.instances[(MAP, 0)]
    assert whole.operators[MAP].processed == 21
    meter.forget(150)  # the first activations end before 150: gone
    assert meter.measure(0, 1000).operators[MAP].processed == 10
    # A second attempt of worker 0 (a restore) counts as worker 0 again.
    meter.feed(header(0, attempt=1), [a(500, 600, MAP, RECV, 3, 3)])
    assert meter.measure(0, 1000).instances[(MAP, 0)].processed == 13


def test_a_rescaled_run_is_measured_at_the_workers_of_the_interval() -> None:
    meter = RateMeter()
    meter.feed(header(0, workers=2), [a(0, 100, MAP, RECV, 1, 1)])
    meter.feed(header(0, workers=3, attempt=1), [a(1000, 1100, MAP, RECV, 1, 1)])
    assert meter.measure(0, 500).workers == 2
    assert meter.measure(900, 1500).workers == 3
    assert len([k for k in meter.measure(900, 1500).instances if k[0] == MAP]) == 3


# -- a real run ---------------------------------------------------------------------------

N, EPOCHS = 600, 3


def traced_run(directory: Path) -> dict[str, Any]:
    flow = Dataflow("ds2")
    numbers = flow.new_input("numbers")
    numbers.stream.select(lambda x: x * 2).where(lambda x: x % 3 == 0).count_by(
        lambda x: x % 7
    ).collect("counts")
    for epoch in range(EPOCHS):
        numbers.advance_to(epoch)
        numbers.send(list(range(N)))
    return flow.run(workers=2, backend="inline", seed=3, trace=str(directory))


def test_a_real_trace_counts_what_the_dataflow_did(tmp_path: Path) -> None:
    results = traced_run(tmp_path)
    logs = read_trace(tmp_path)
    m = measure_trace(logs)
    ops = m.by_name()
    kept = sum(1 for x in range(N) if x * 2 % 3 == 0) * EPOCHS
    assert ops["numbers"].processed == N * EPOCHS  # an input processes what it emits
    assert ops["select"].processed == N * EPOCHS
    assert ops["where"].processed == N * EPOCHS and ops["where"].sent == kept
    assert ops["count_by.combine"].processed == kept
    assert ops["count_by"].processed == ops["count_by.combine"].sent
    assert ops["collect:counts"].processed == len(results["counts"]) == 7 * EPOCHS
    assert m.workers == 2 and all(r.instances == 2 for r in m.operators.values())
    assert Graph.from_describe(logs[0][0]["graph"]) == m.graph
    for r in m.operators.values():
        assert r.useful_s <= 2 * m.interval_s  # two workers' time at most
        if r.processed:
            assert r.instance_rate is not None and r.instance_rate > r.observed_processing_rate / 2
    # The live form, reading the directory, measures the same.
    meter = RateMeter()
    assert meter.read(tmp_path) > 0 and meter.read(tmp_path) == 0
    live = meter.measure(m.start, m.end)
    assert {v: r.processed for v, r in live.operators.items()} == {
        v: r.processed for v, r in m.operators.items()
    }
    assert meter.settled > m.start
