"""Runtime benchmarks: epoch latency and transport throughput, with their peers in one run.

Epoch latency: a 3-vertex pipeline (input -> map -> exchange -> per-epoch count ->
subscribe). The time from ``advance_to(e + 1)`` on the driver to the subscribe callback
receiving epoch ``e``; p50 and p99 over many epochs; inline (1 and 2 workers) and Ray
(2 workers). Goals: inline p50 <= 0.2 ms; Ray p50 <= 1 ms, p99 <= 3 ms.

Transport: records/s of exchange -> count on Ray with 2 workers (and, as before,
map -> exchange -> count: a Python map and key function per record), next to the raw
rate of one actor pushing msgpack batches of the same size to another (no
processing) over the workers' own transport (``timely.comm``: a Unix socket, 8
frames of credit) and, as before the sockets, over Ray actor calls (8 in flight), in
the same run, interleaved, median of 3. Goal: exchange -> count >= 70% of the raw
socket's rate.

The round trip of a no-op Ray call from the driver to an actor is measured too, for
reference: an epoch no longer crosses any (the driver's commands and the outputs travel
on the driver's own sockets, ``timely.comm.driver``).

    python -m benchmarks.bench_runtime [--quick] [--skip-ray]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any

from benchmarks.tables import write_results
from timely import Dataflow, Source, Vertex, exchange


class Double(Vertex):
    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        self.send_by(0, [r * 2 for r in records], t)


class CountPerEpoch(Vertex):
    """Counts records per epoch; emits the count when the epoch completes."""

    def __init__(self) -> None:
        self.n: dict[tuple[int, ...], int] = {}

    def on_recv(self, input: int, records: list[Any], t: tuple[int, ...]) -> None:
        if t not in self.n:
            self.n[t] = 0
            self.notify_at(t)
        self.n[t] += len(records)

    def on_notify(self, t: tuple[int, ...]) -> None:
        self.send_by(0, [self.n.pop(t)], t)


def epoch_latency(backend: str, workers: int, epochs: int, per_epoch: int = 10) -> dict[str, Any]:
    """Driver-side latency from advancing past an epoch to its subscribe callback."""
    arrived: dict[int, float] = {}
    flow = Dataflow("latency")
    inp = flow.new_input()
    (
        inp.stream.unary(Double, name="map")
        .unary(CountPerEpoch, name="count", channel=exchange(lambda r: r))
        .subscribe(lambda e, _: arrived.__setitem__(e, time.perf_counter()))
    )
    session = flow.activate(workers=workers, backend=backend)
    lat: list[float] = []
    warmup = min(50, epochs // 5)
    for e in range(epochs + warmup):
        inp.send(list(range(per_epoch)))
        t0 = time.perf_counter()
        inp.advance_to(e + 1)
        while e not in arrived:
            session.poll(0.05)  # returns as soon as outputs arrive
        if e >= warmup:
            lat.append(arrived[e] - t0)
    inp.close()
    session.join()
    lat.sort()
    return {
        "backend": backend,
        "workers": workers,
        "epochs": epochs,
        "p50_ms": 1e3 * statistics.median(lat),
        "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
    }


class Generated(Source):
    """``parts`` partitions, each ``batches`` batches of ``size`` ints, ``per_epoch`` an epoch."""

    def __init__(self, parts: int, batches: int, size: int, per_epoch: int) -> None:
        self.parts, self.batches, self.size, self.per_epoch = parts, batches, size, per_epoch

    def partitions(self) -> int:
        return self.parts

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        i = 0 if offset is None else offset
        if i >= self.batches:
            return None
        base = (partition * self.batches + i) * self.size
        return i // self.per_epoch, list(range(base, base + self.size)), i + 1


def pipeline_rate(
    workers: int, batches: int, size: int, per_epoch: int = 10, mapped: bool = False
) -> dict[str, Any]:
    """Records/s through source -> exchange (by the record) -> count on Ray; with
    ``mapped``, source -> map -> exchange (a key function) -> count.

    Timed from the moment ``activate`` returns (every actor built, connected, its loop
    started) to the end of ``join``: the time the records took. (Subtracting the wall
    time of a run with no data, as before, left start-up noise of +-0.5 s on top of
    ~0.6 s of work.)
    """
    counted: list[int] = []
    flow = Dataflow("transport")
    stream = flow.source(Generated(workers, batches, size, per_epoch))
    if mapped:
        stream = stream.unary(Double, name="map")
    channel = exchange(lambda r: r) if mapped else exchange()
    stream.unary(CountPerEpoch, name="count", channel=channel).subscribe(
        lambda e, counts: counted.append(sum(counts))
    )
    t0 = time.perf_counter()
    session = flow.activate(workers=workers, backend="ray")
    t1 = time.perf_counter()
    session.join()
    seconds = time.perf_counter() - t1
    total = workers * batches * size
    assert sum(counted) == total, "records were lost or duplicated"
    return {
        "records": total,
        "batch": size,
        "records_per_s": total / seconds,
        "seconds": seconds,
        "startup_s": t1 - t0,
    }


def raw_actor_rate(batches: int, size: int, inflight: int = 8) -> dict[str, Any]:
    """One actor pushes msgpack batches of ``size`` ints to another, which decodes them."""
    import msgpack
    import ray

    @ray.remote(num_cpus=0.5)
    class Sink:
        def __init__(self) -> None:
            self.n = 0

        def recv(self, payload: bytes) -> None:
            self.n += len(msgpack.unpackb(payload))

        def count(self) -> int:
            return self.n

    @ray.remote(num_cpus=0.5)
    class Pusher:
        def push(self, sink: Any, batches: int, size: int, inflight: int) -> float:
            refs: list[Any] = []
            t0 = time.perf_counter()
            for i in range(batches):
                payload = msgpack.packb(list(range(i * size, (i + 1) * size)))
                refs.append(sink.recv.remote(payload))
                if len(refs) >= inflight:
                    ray.get(refs.pop(0))
            ray.get(refs)
            return time.perf_counter() - t0

    sink, pusher = Sink.remote(), Pusher.remote()  # type: ignore[attr-defined]
    ray.get(pusher.push.remote(sink, 10, size, inflight))  # warm up
    seconds = ray.get(pusher.push.remote(sink, batches, size, inflight))
    total = ray.get(sink.count.remote())
    assert total == (batches + 10) * size
    ray.kill(sink)
    ray.kill(pusher)
    return {"records": batches * size, "batch": size, "records_per_s": batches * size / seconds}


def raw_socket_rate(batches: int, size: int, window: int = 8) -> dict[str, Any]:
    """One actor pushes msgpack batches of ``size`` ints to another over ``timely.comm``
    (the workers' transport: a Unix socket, the handshake, ``window`` frames of credit),
    which decodes each and gives its credit back; the clock stops once every batch is
    credited, as a Ray call returns once its batch is taken in."""
    import secrets

    import msgpack
    import ray

    @ray.remote(num_cpus=0.5)
    class Peer:
        async def listen(self, index: int, secret: bytes) -> Any:
            from timely.comm.allocator import Allocator

            self.comm = Allocator(index, 2, secret, window)
            return await self.comm.listen("node")

        async def connect(self, table: list[Any]) -> None:
            await self.comm.connect(table)

        async def push(self, batches: int, size: int) -> float:
            channel = self.comm.channel(1)
            t0 = time.perf_counter()
            for i in range(batches):
                await channel.send(msgpack.packb(list(range(i * size, (i + 1) * size))))
            while not self.comm.all_credited():
                await self.comm.changed()
            return time.perf_counter() - t0

        async def take(self, batches: int) -> int:
            n = 0
            for _ in range(batches):
                peer, payload = await self.comm.recv()
                n += len(msgpack.unpackb(payload))
                self.comm.applied(peer)
            self.comm.flush_credits()
            return n

        async def close(self) -> None:
            await self.comm.close()

    secret = secrets.token_bytes(32)
    pusher, sink = Peer.remote(), Peer.remote()  # type: ignore[attr-defined]
    table = ray.get([pusher.listen.remote(0, secret), sink.listen.remote(1, secret)])
    ray.get([pusher.connect.remote(table), sink.connect.remote(table)])
    warm = sink.take.remote(10)
    ray.get(pusher.push.remote(10, size))
    ray.get(warm)
    taken = sink.take.remote(batches)
    seconds = ray.get(pusher.push.remote(batches, size))
    assert ray.get(taken) == batches * size
    ray.get([pusher.close.remote(), sink.close.remote()])
    ray.kill(pusher)
    ray.kill(sink)
    return {"records": batches * size, "batch": size, "records_per_s": batches * size / seconds}


def ray_call_rtt(calls: int = 500) -> dict[str, Any]:
    """Driver -> actor no-op call round trips, p50 and p99 (after 50 unmeasured)."""
    import ray

    @ray.remote(num_cpus=0.1)
    class Echo:
        async def noop(self) -> None:
            return None

    echo = Echo.remote()  # type: ignore[attr-defined]
    rtt: list[float] = []
    for i in range(calls + 50):
        t0 = time.perf_counter()
        ray.get(echo.noop.remote())
        if i >= 50:
            rtt.append(time.perf_counter() - t0)
    ray.kill(echo)
    rtt.sort()
    return {
        "calls": calls,
        "p50_ms": 1e3 * statistics.median(rtt),
        "p99_ms": 1e3 * rtt[min(len(rtt) - 1, int(0.99 * len(rtt)))],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args(argv)
    epochs = 300 if args.quick else 2000
    rows = [epoch_latency("inline", 1, epochs), epoch_latency("inline", 2, epochs)]
    if not args.skip_ray:
        rows.append(epoch_latency("ray", 2, epochs // 4))
    transport: list[dict[str, Any]] = []
    rtt: dict[str, Any] = {}
    if not args.skip_ray:
        size, batches = 1000, (200 if args.quick else 1000)
        pipeline_rate(2, 20, size)  # unmeasured: the actors start (later runs reuse them)
        runs: dict[str, list[dict[str, Any]]] = {"exchange": [], "map": [], "raw": []}
        for _ in range(1 if args.quick else 3):  # interleaved: a slow spell hits all alike
            runs["exchange"].append(pipeline_rate(2, batches, size))
            runs["map"].append(pipeline_rate(2, batches, size, mapped=True))
            # 5x the batches: the raw push is fast enough that a short one is all noise
            runs["raw"].append(raw_socket_rate(10 * batches, size))

        def median(name: str) -> dict[str, Any]:
            rs = sorted(runs[name], key=lambda r: float(r["records_per_s"]))
            return {**rs[len(rs) // 2], "runs_per_s": [r["records_per_s"] for r in rs]}

        calls = raw_actor_rate(2 * batches, size)
        transport = [
            {"what": "timely exchange (by record) -> count, 2 Ray workers", **median("exchange")},
            {"what": "raw actor -> actor msgpack push, timely.comm socket", **median("raw")},
            {"what": "timely map -> exchange (key fn) -> count, 2 Ray workers", **median("map")},
            {"what": "raw actor -> actor msgpack push, Ray actor calls", **calls},
        ]
        rtt = ray_call_rtt(200 if args.quick else 500)
    print("## Epoch latency (advance_to -> subscribe), 3-vertex pipeline with one exchange\n")
    print("| backend | workers | epochs | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        cells = [
            r["backend"],
            r["workers"],
            r["epochs"],
            f"{r['p50_ms']:.3f}",
            f"{r['p99_ms']:.3f}",
        ]
        print("| " + " | ".join(map(str, cells)) + " |")
    if transport:
        ratio = transport[0]["records_per_s"] / transport[1]["records_per_s"]
        print("\n## Transport, batches of 1,000 ints\n")
        print("| what | records/s |")
        print("|---|---:|")
        for r in transport:
            print(f"| {r['what']} | {r['records_per_s']:,.0f} |")
        print(f"\ntimely / raw socket = {ratio:.2f}")
        print(
            f"\nDriver -> actor Ray call round trip: p50 {rtt['p50_ms']:.3f} ms, "
            f"p99 {rtt['p99_ms']:.3f} ms"
        )
    write_results(
        "bench_runtime",
        args.quick,
        {
            "python": platform.python_version(),
            "load_average": os.getloadavg(),
            "latency": rows,
            "transport": transport,
            "ray_call_rtt": rtt,
        },
    )


if __name__ == "__main__":
    main()
