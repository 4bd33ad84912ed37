"""The communication layer on real Ray: connections between the worker actors that reset
or stop being read mid-run are detected and recovered from a checkpoint with the outputs
of a failure-free run; credits keep every inbox bounded along a chain with a slow end;
a connection without the run's secret is refused and the run goes on."""

from __future__ import annotations

import functools
import os
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from timely import Dataflow, Session, Source, Vertex
from timely.comm.handshake import NONCE, PROOF
from timely.state.keyed import owner

pytestmark = pytest.mark.usefixtures("ray_local")


# -- a dataflow with state across epochs (module level: the workers import it) ----------------
def running_counts(epochs: list[list[str]]) -> tuple[Dataflow, Any, dict[int, list[Any]]]:
    """Running word counts; the driver feeds ``epochs`` itself (see :func:`feed`)."""
    flow = Dataflow("running-counts")
    out: dict[int, list[Any]] = {}

    def record(epoch: int, records: list[Any]) -> None:
        assert epoch not in out, f"epoch {epoch} delivered twice"
        out[epoch] = sorted(records)

    words = flow.new_input("words")
    words.stream.select_many(str.split).running_reduce(
        lambda w: w, lambda a, b: a + b, lambda w: 1
    ).subscribe(record)
    return flow, words, out


def lines(seed: int, n: int) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(40)]
    return [[" ".join(rng.choices(vocab, k=5)) for _ in range(20)] for _ in range(n)]


def feed(
    epochs: list[list[str]],
    fault: Callable[[Session], None] | None = None,
    at: int = 0,
    **options: Any,
) -> tuple[dict[int, list[Any]], Session]:
    """Run :func:`running_counts` on Ray, calling ``fault(session)`` before epoch ``at``."""
    flow, words, out = running_counts(epochs)
    with flow.activate(workers=2, backend="ray", **options) as session:
        for e, batch in enumerate(epochs):
            if fault is not None and e == at:
                # The run is under way: every epoch before the last one sent is out.
                wait_for(session, lambda e=e: len(out) >= e - 1)  # type: ignore[misc]
                fault(session)
            words.advance_to(e)
            words.send(batch)
            session.poll(0.01)
        words.close()
        session.join()
    return out, session


def reference(epochs: list[list[str]]) -> dict[int, list[Any]]:
    flow, words, out = running_counts(epochs)
    for e, batch in enumerate(epochs):
        words.advance_to(e)
        words.send(batch)
    flow.run(workers=2, backend="inline")
    return out


def wait_for(session: Session, condition: Callable[[], bool]) -> None:
    """Poll the session (outputs are delivered there) until ``condition`` holds; a run
    that never gets there fails under pytest-timeout's bound, with a stack trace."""
    while not condition():
        session.poll(0.05)


# -- failures -----------------------------------------------------------------------------------
def test_a_connection_reset_between_workers_is_recovered(tmp_path: Path) -> None:
    epochs = lines(1, 12)

    def reset(session: Session) -> None:
        actors = session.actors  # type: ignore[attr-defined]
        ray.get(actors[0].inject_fault.remote("reset", 1))

    got, session = feed(epochs, reset, at=6, checkpoint=str(tmp_path), checkpoint_every=2)
    assert got == reference(epochs)
    assert session.restarts == 1


def test_a_worker_that_stops_reading_a_connection_is_detected_and_recovered(
    tmp_path: Path,
) -> None:
    epochs = lines(2, 12)

    def stall(session: Session) -> None:
        actors = session.actors  # type: ignore[attr-defined]
        ray.get(actors[1].inject_fault.remote("stall", 0))  # worker 1 stops reading worker 0

    # (2 s: what a loaded machine delays a heartbeat or a read by must not count as a stall)
    got, session = feed(
        epochs, stall, at=6, checkpoint=str(tmp_path), checkpoint_every=2, heartbeat_timeout=2.0
    )
    assert got == reference(epochs)
    assert session.restarts == 1


def test_without_a_checkpoint_a_reset_fails_the_run_naming_both_workers() -> None:
    from timely import WorkerDied

    def reset(session: Session) -> None:
        ray.get(session.actors[1].inject_fault.remote("reset", 0))  # type: ignore[attr-defined]

    with pytest.raises(WorkerDied, match=r"worker [01] lost worker [01]: the connection"):
        feed(lines(3, 6), reset, at=3)


def test_a_connection_without_the_secret_is_refused_and_the_run_goes_on() -> None:
    epochs = lines(4, 8)

    def intrude(session: Session) -> None:
        path = session.addresses[1].path  # type: ignore[attr-defined]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(path)
            challenge = b""
            while len(challenge) < NONCE:
                challenge += sock.recv(NONCE - len(challenge))
            sock.sendall(bytes(PROOF))  # a well-formed proof with a wrong MAC
            assert sock.recv(1) == b""  # closed, nothing sent back
        stats = ray.get(session.actors[1].stats.remote())  # type: ignore[attr-defined]
        assert stats["refused"] == 1

    got, session = feed(epochs, intrude, at=4)
    assert got == reference(epochs)
    assert session.restarts == 0


# -- backpressure -------------------------------------------------------------------------------
def key_for(worker: int, workers: int) -> int:
    """An exchange key that routes to ``worker``."""
    return next(k for k in range(1000) if owner(k, workers) == worker)


TO_B, TO_C = key_for(1, 3), key_for(2, 3)


class Numbers(Source):
    """One partition (so worker 0 reads it all): ``batches`` batches of 10 ints, one a
    step (a frame carries one batch: the bounds below count both)."""

    batches_per_step = 1

    def __init__(self, batches: int) -> None:
        self.batches = batches

    def partitions(self) -> int:
        return 1

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        i = 0 if offset is None else offset
        if i >= self.batches:
            return None
        return i // 10, list(range(10 * i, 10 * i + 10)), i + 1


class Forward(Vertex):
    def on_recv(self, input: int, records: list[Any], time: tuple[int, ...]) -> None:
        self.send_by(0, records, time)


class Slow(Vertex):
    """Holds its worker's loop on its first batch until ``gate`` exists, then for a while
    on every batch: the end of the chain takes nothing in until the test has seen the
    workers before it held back, however the machine schedules them."""

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        while not os.path.exists(self.gate):
            time.sleep(0.001)  # (a gate the test opens, not a wait for a race)
        end = time.perf_counter() + 0.01  # slow enough that the chain backs up again
        while time.perf_counter() < end:
            pass
        self.send_by(0, [len(records)], t)


def test_a_chain_with_a_slow_end_keeps_every_inbox_bounded(tmp_path: Path) -> None:
    """Worker 0 reads a source and sends everything to worker 1, which forwards it to
    worker 2, whose first batch waits on a gate: credits hold worker 0 back, by worker 1
    or by worker 2 directly (every step's progress goes to every peer), so no worker piles
    up batches. The gate opens once worker 0 has waited for a credit, or once it has sent
    as many frames as there are batches (a frame to each peer a step: only a run without
    credits gets there while worker 2 holds); without credits the slow end queues ~100
    frames here.

    Whether worker 1 waits too depends on timing: worker 0 may run out of credits to
    worker 2 before it has sent worker 1 enough to run out of its own. Asserting it made
    this test fail about one run in 40; with worker 2 held on the gate, two in four."""
    batches, window = 200, 2
    gate = tmp_path / "open"
    flow = Dataflow("chain")
    counted: list[int] = []
    (
        flow.source(Numbers(batches))
        .exchange(lambda r: TO_B, name="to_b")
        .unary(Forward, name="forward")
        .exchange(lambda r: TO_C, name="to_c")
        .unary(functools.partial(Slow, str(gate)), name="slow")
        .subscribe(lambda e, counts: counted.append(sum(counts)))
    )
    session = flow.activate(workers=3, backend="ray", max_inflight=window)
    try:
        source = session.actors[0]  # type: ignore[attr-defined]
        while True:  # (worker 2 is held on the gate and answers nothing)
            a = ray.get(source.stats.remote())
            if a["credit_waits"] or a["messages_sent"] >= batches:
                break
            session.poll(0.01)
        gate.touch()
        wait_for(session, lambda: sum(counted) == 10 * batches)
        stats = ray.get([a.stats.remote() for a in session.actors])  # type: ignore[attr-defined]
        session.join()
    finally:
        gate.touch()
        session.close()
    a = stats[0]
    assert a["messages_sent"] >= batches  # every batch crossed over, one step each
    assert a["credit_waits"] > 0, stats  # the source held back
    # Frames waiting to be taken in: at most a window per peer.
    assert all(s["max_queued"] <= window * 2 for s in stats), stats
    # Batches waiting in a worker: what it took in before a step (a window per peer)
    # and while waiting to send one (a window per peer again).
    assert all(s["max_inbox"] <= 2 * window * 2 for s in stats), stats


# -- the driver's own connections -------------------------------------------------------------
class SlowCount(Vertex):
    """Holds the interpreter for a while on every batch, then passes its size on."""

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        self.send_by(0, [len(records)], t)


def test_a_driver_burst_is_held_back_by_credits() -> None:
    """The driver sends 150 epochs without waiting for any output, to workers slower
    than it: its sends wait for credit, so no worker ever has more than ``max_inflight``
    commands not yet applied, on the wire or queued (without credits all would queue)."""
    epochs, window = 150, 2
    flow = Dataflow("burst")
    nums = flow.new_input("nums")
    got: dict[int, int] = {}
    nums.stream.unary(SlowCount, name="slow").subscribe(
        lambda e, r: got.__setitem__(e, got.get(e, 0) + sum(r))
    )
    with flow.activate(workers=2, backend="ray", max_inflight=window) as session:
        for e in range(epochs):
            nums.send(list(range(4)))
            nums.advance_to(e + 1)
        links = session._links  # type: ignore[attr-defined]
        assert links.max_outstanding <= window
        assert links.credit_waits > 0  # the driver was held back
        stats = [ray.get(a.stats.remote()) for a in session.actors]  # type: ignore[attr-defined]
        nums.close()
        session.join()
    assert all(s["max_commands"] <= window for s in stats)
    assert got == {e: 4 for e in range(epochs)}


def test_a_driver_connection_without_the_secret_is_refused_and_the_run_goes_on() -> None:
    """Someone claiming to be the driver (index = workers) without the secret is refused,
    whether with a forged proof on the raw socket or through the driver's own code."""
    from timely.comm.allocator import PeerLost
    from timely.comm.driver import DriverLinks
    from timely.comm.handshake import dialer_proof

    epochs = lines(5, 8)

    def intrude(session: Session) -> None:
        addresses = session.addresses  # type: ignore[attr-defined]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(addresses[0].path)
            challenge = b""
            while len(challenge) < NONCE:
                challenge += sock.recv(NONCE - len(challenge))
            _, proof = dialer_proof(b"not the secret", challenge, 2)  # the driver's index
            sock.sendall(proof)
            assert sock.recv(1) == b""  # closed, nothing sent back
        impostor = DriverLinks(2, b"not the secret", 8)
        with pytest.raises(PeerLost, match="could not be reached by the driver"):
            impostor.connect(addresses, ray.get_runtime_context().get_node_id())
        impostor.close()
        stats = ray.get(session.actors[0].stats.remote())  # type: ignore[attr-defined]
        assert stats["refused"] == 2

    got, session = feed(epochs, intrude, at=4)
    assert got == reference(epochs)
    assert session.restarts == 0
