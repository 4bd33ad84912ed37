"""From an event log to what SnailTrail analyses: each worker's timeline as intervals
that do not overlap, and the messages between workers.

A worker's events nest (a step holds its activations and snapshots) and the checkpoint
writer logs from its own thread; SnailTrail wants one activity at a time per worker.
So the timeline is swept once over every event's ends, and each stretch is labelled by
the most specific event covering it: an activation or a snapshot ("processing" of its
vertex, "checkpoint"), else a message being encoded or decoded ("serialization"),
waiting ("waiting"), else the step itself ("scheduling": progress tracking and the
loop). Part writes (another thread) are left out of the timeline.

A worker's waiting at the very end of its log (its work done, the run not yet over) is
left out: nothing ends it, so it would cut every path through the worker.

A message event counts the records it carries per vertex they go to; it becomes one
``Message`` on the channel that carries most of them (``"-> name"``, the channel into
that vertex), a progress-only message on ``"progress"``. A send and its receive are
matched by (sender, receiver, sequence number) within one attempt; the message leaves
when its encoding ends and arrives when its decoding starts.

The driver is not in the log, but it holds workers up: a worker that waits and then
steps without a peer's message in between was woken by the driver's input. Such a
wait's end becomes a message on ``"input"`` from a pseudo-worker ``INPUT`` (-1) that
is busy with kind ``"input"`` the whole trace long, so that a path can run through the
driver instead of stopping at the wait (else a window in which every worker waits on
the driver at once would have no path at all).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

from analysis.pag import Interval, Message
from timely.eventlog import read_trace

INPUT = -1
"""The pseudo-worker standing for the driver's input."""
_PRIORITY = {"a": 3, "c": 3, "s": 2, "r": 2, "w": 2, "t": 1}


def timeline(
    worker: int, events: Sequence[tuple[Any, ...]], names: Sequence[str]
) -> list[Interval]:
    """``worker``'s non-overlapping intervals, from its events."""
    spans: list[tuple[int, int, int, str, str | None]] = []
    for e in events:
        tag = e[0]
        if tag not in _PRIORITY or e[2] <= e[1]:
            continue
        if tag == "c" and e[4] != "snapshot":
            continue  # a part write runs on the writer thread
        if tag == "a":
            label, operator = "processing", names[e[3]]
        elif tag == "c":
            label, operator = "checkpoint", names[e[5]] if len(e) > 5 else None
        elif tag in "sr":
            label, operator = "serialization", None
        elif tag == "w":
            label, operator = "waiting", None
        else:
            label, operator = "scheduling", None
        spans.append((e[1], e[2], _PRIORITY[tag], label, operator))
    points = sorted({p for s in spans for p in (s[0], s[1])})
    spans.sort()
    out: list[Interval] = []
    # The covering spans, most specific first (then the latest to start); a span that
    # has ended leaves only when it reaches the top.
    covering: list[tuple[int, int, int, str, str | None]] = []
    i = 0
    for left, right in pairwise(points):
        while i < len(spans) and spans[i][0] <= left:
            begin, stop, priority, label, operator = spans[i]
            heapq.heappush(covering, (-priority, -begin, stop, label, operator))
            i += 1
        while covering and covering[0][2] <= left:
            heapq.heappop(covering)
        if not covering:
            continue  # a gap: nothing logged here
        _, _, _, label, operator = covering[0]
        last = out[-1] if out else None
        if last and last.end == left and (last.kind, last.operator) == (label, operator):
            out[-1] = last._replace(end=right)
        else:
            out.append(Interval(worker, left, right, label, operator))
    return out


def messages(logs: Iterable[tuple[dict[str, Any], Sequence[tuple[Any, ...]]]]) -> list[Message]:
    """Every matched message, named by the channel carrying most of its records."""
    sent: dict[tuple[int, int, int, int], tuple[Any, ...]] = {}
    received: dict[tuple[int, int, int, int], tuple[Any, ...]] = {}
    names: dict[int, Sequence[str]] = {}
    for header, events in logs:
        w, attempt = header["worker"], header.get("attempt", 0)
        names[attempt] = header["vertices"]
        for e in events:
            if e[0] == "s":
                sent[(attempt, w, e[3], e[4])] = e
            elif e[0] == "r":
                received[(attempt, e[3], w, e[4])] = e
    out = []
    for key, s in sent.items():
        r = received.get(key)
        if r is None:
            continue
        attempt, src, dst, _ = key
        targets = s[9] if len(s) > 9 else []
        if targets:  # the channel that carries most of its records
            vertex = max(targets, key=lambda t: (t[1], -t[0]))[0]
            channel = f"-> {names[attempt][vertex]}"
        else:
            channel = "progress"
        out.append(Message(channel, src, s[2], dst, r[1]))
    return out


def _trim(intervals: list[Interval]) -> list[Interval]:
    """Without the waiting at the very end: a worker whose work is done waits for the run
    to end, and a wait that nothing ends would cut every path through the worker (it is
    time outside the computation, not in it)."""
    end = len(intervals)
    while end and intervals[end - 1].kind == "waiting":
        end -= 1
    return intervals[:end]


def input_messages(worker: int, events: Sequence[tuple[Any, ...]]) -> list[Message]:
    """The driver's wake-ups of ``worker``: the end of every wait followed by a step
    with no peer's message taken in before it."""
    out = []
    ordered = sorted((e for e in events if e[0] in "wrt"), key=lambda e: e[1])
    for i, e in enumerate(ordered):
        if e[0] != "w":
            continue
        nxt = next((f for f in ordered[i + 1 :] if f[0] in "rt"), None)
        if nxt is not None and nxt[0] == "t":
            out.append(Message("input", INPUT, e[2], worker, e[2]))
    return out


def load(
    directory: str,
) -> tuple[list[Interval], list[Message], dict[str, Any]]:
    """A trace directory as SnailTrail's input: every worker's timeline (the latest
    attempt's: an earlier attempt's workers died), the messages, and a header."""
    logs = read_trace(directory)
    if not logs:
        raise FileNotFoundError(f"no event log (worker-*.trace) in {directory!r}")
    return convert(logs)


def convert(
    logs: Sequence[tuple[dict[str, Any], Sequence[tuple[Any, ...]]]],
) -> tuple[list[Interval], list[Message], dict[str, Any]]:
    """Logs (``(header, events)`` per worker and attempt) as SnailTrail's input; see
    :func:`load`."""
    attempt = max(h.get("attempt", 0) for h, _ in logs)
    logs = [(h, ev) for h, ev in logs if h.get("attempt", 0) == attempt]
    intervals: list[Interval] = []
    msgs = messages(logs)
    for header, events in logs:
        intervals.extend(_trim(timeline(header["worker"], events, header["vertices"])))
        msgs.extend(input_messages(header["worker"], events))
    if any(m.src == INPUT for m in msgs) and intervals:
        start = min(i.start for i in intervals)
        end = max(i.end for i in intervals)
        intervals.append(Interval(INPUT, start, end, "input"))
    header = dict(logs[0][0])
    return intervals, msgs, header
