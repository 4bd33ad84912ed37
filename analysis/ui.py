"""The live page (``ui=True``, the CLI's ``--ui``): a running dataflow, seen in a browser.

A monitor (:mod:`timely.session.monitors`) of the driver's process, made through the
``timely.monitors`` entry point so that the runtime never imports the analysis. It
serves three things on 127.0.0.1 (``ui=True``: any free port, ``ui=PORT``: that one;
``session.ui_url`` and a line on stderr say where):

- ``/``: one self-contained page (no script or style from elsewhere) that draws the
  dataflow graph once and refreshes every ``REFRESH_MS`` from ``/state.json``;
- ``/graph.svg``: the graph (:func:`analysis.graphview.svg`: one group per vertex,
  ``id="v-<index>"``, whose label the page rewrites with the vertex's rate and CP);
- ``/state.json``: each operator's records in and out per second (over the last
  ``RATE_WINDOW`` seconds) and in all, each output's frontier, each worker's steps and
  share of time waiting, the latest window's critical participation (an
  :class:`~analysis.online.OnlineProfiler` on the event log), checkpoints, restarts,
  rescales, a controller's latest scaling decision, and the driver's warnings about the
  run (``warnings``: a loop past ``loop_warning`` rounds, :mod:`timely.session.loopwatch`).

Rates come from :class:`~timely.observe.tracestats.TraceStats`, sampled by a thread of its own
every ``SAMPLE`` seconds; nothing here runs on a worker.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any

from analysis.graphview import svg as graph_svg
from analysis.online import OnlineProfiler
from analysis.summaries import Summary
from analysis.trace import INPUT
from timely.errors import ConfigError
from timely.observe.tracestats import Totals, TraceStats

if TYPE_CHECKING:
    from timely.session.base import Session

HOST = "127.0.0.1"
SAMPLE = 0.25
"""Seconds between samples of the event log's totals."""
RATE_WINDOW = 2.0
"""Rates are taken over this many seconds of samples."""
REFRESH_MS = 500
"""How often the page asks for the state."""


def from_option(value: Any) -> LivePage | None:
    """``ui=True`` (any free port), ``ui=PORT`` or ``ui=False``/``None`` (no page)."""
    if value is None or value is False:
        return None
    if value is True:
        return LivePage(0)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 65535:
        return LivePage(value)
    raise ConfigError(f"ui must be True, False or a TCP port for the page, got {value!r}")


class LivePage:
    """The page of one session: an HTTP server, a sampler and an online profiler."""

    needs_trace = True

    def __init__(self, port: int) -> None:
        self.state = _State()
        handler = type("Handler", (_Handler,), {"state": self.state})
        try:
            self._server = ThreadingHTTPServer((HOST, port), handler)
        except OSError as e:
            raise ConfigError(
                f"cannot serve the live page on {HOST}:{port} ({e.strerror or e}); choose "
                "another port with ui=PORT, or ui=True for any free one"
            ) from None
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.url = f"http://{HOST}:{self.port}/"
        self._serving = threading.Thread(
            target=self._server.serve_forever, name="timely-ui", daemon=True
        )
        self._serving.start()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="timely-ui-rates", daemon=True)
        self._profiler: OnlineProfiler | None = None

    def attach(self, session: Session) -> None:
        assert session.trace is not None
        self.state.session = session
        self.state.stats = TraceStats(session.trace)
        graph = session.view.graph
        room = {i: "000,000 rec/s · CP 0.00" for i in range(len(graph["vertices"]))}
        self.state.svg = graph_svg(graph, labels=room)  # the page writes the labels
        self._profiler = OnlineProfiler(session.trace, on_window=self.state.window_done).start()
        self._sampler.start()
        session.ui_url = self.url
        print(f"timely: live page at {self.url}", file=sys.stderr)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE):
            self.state.sample()

    def close(self) -> None:
        self._stop.set()
        if self._sampler.is_alive():
            self._sampler.join()
        if self._profiler is not None:
            self._profiler.stop()
            self._profiler = None
        self._server.shutdown()
        self._server.server_close()


class _State:
    """What the page shows, updated by the sampler and the profiler's thread."""

    def __init__(self) -> None:
        self.session: Session | None = None
        self.stats: TraceStats | None = None
        self.svg = ""
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, dict[str, tuple[int, int]]]] = deque()
        self._totals: Totals | None = None
        self._summary: Summary | None = None
        self._windows = 0

    def sample(self) -> None:
        if self.stats is None:
            return
        totals = self.stats.update()
        per_operator: dict[str, tuple[int, int]] = {}
        for (name, _), op in totals.operators.items():
            i, o = per_operator.get(name, (0, 0))
            per_operator[name] = (i + op.records_in, o + op.records_out)
        now = time.monotonic()
        with self._lock:
            self._totals = totals
            self._samples.append((now, per_operator))
            while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW:
                self._samples.popleft()

    def window_done(self, summary: Summary, lag: float) -> None:
        with self._lock:
            self._windows += 1
            if summary.paths > 0:
                self._summary = summary

    def as_json(self) -> dict[str, Any]:
        session = self.session
        if session is None:
            return {"run": None}
        view = session.view.snapshot()
        graph = session.view.graph
        with self._lock:
            samples = list(self._samples)
            totals = self._totals
            summary = self._summary
            windows = self._windows
        rates: dict[str, tuple[float, float]] = {}
        if len(samples) >= 2:
            (t0, first), (t1, last) = samples[0], samples[-1]
            span = max(t1 - t0, 1e-9)
            for name, (i, o) in last.items():
                i0, o0 = first.get(name, (0, 0))
                rates[name] = ((i - i0) / span, (o - o0) / span)
        totals_by_name = samples[-1][1] if samples else {}
        cp = dict(summary.by_operator.cp) if summary is not None else {}
        operators = []
        for index, (name, kind) in enumerate(graph["vertices"]):
            rate_in, rate_out = rates.get(name, (0.0, 0.0))
            records_in, records_out = totals_by_name.get(name, (0, 0))
            operators.append(
                {
                    "index": index,
                    "name": name,
                    "kind": kind,
                    "rate_in": rate_in,
                    "rate_out": rate_out,
                    "records_in": records_in,
                    "records_out": records_out,
                    "cp": cp.get(name, 0.0),
                }
            )
        workers = []
        if totals is not None:
            elapsed = max(view["elapsed"], 1e-9)
            for w, t in sorted(totals.workers.items()):
                workers.append(
                    {"worker": w, "steps": t.steps, "waiting": min(1.0, t.waiting_s / elapsed)}
                )
        now = time.time()
        outputs = [
            {
                "name": key,
                "epoch": out.epoch,
                "records": out.records,
                "lag_s": 0.0 if view["ended"] else now - out.moved_at,
            }
            for key, out in sorted(view["outputs"].items())
        ]
        critical = None
        if summary is not None:
            critical = {
                "window_end_s": (summary.end / 1e9) - session.view.started_at,
                "by_kind": summary.by_kind.cp,
                "by_operator": summary.by_operator.cp,
                "by_worker": [
                    ["driver" if w == INPUT else f"worker {w}", c] for w, c in summary.by_worker.cp
                ],
                "by_channel": summary.by_channel.cp,
            }
        return {
            "run": session.view.name,
            "workers": view["workers"],
            "elapsed_s": view["elapsed"],
            "state": "finished"
            if view["ended"] and session.view.finished
            else ("ended" if view["ended"] else "running"),
            "restarts": view["restarts"],
            "checkpoints": view["commits"],
            "checkpoint_interval": view.get("checkpoint_interval"),
            "coordination_fraction": view.get("coordination_fraction"),
            "operators": operators,
            "outputs": outputs,
            "worker_stats": workers,
            "critical": critical,
            "windows": windows,
            "warnings": [
                {k: w[k] for k in ("kind", "message", "loop", "epoch", "round") if k in w}
                for w in view["warnings"]
            ],
            "scaling": {
                "workers": view["workers"],
                "rescales": view["rescales"][-5:],
                "decision": view["decisions"][-1] if view["decisions"] else None,
                "decisions": len(view["decisions"]),
            },
        }


class _Handler(BaseHTTPRequestHandler):
    state: _State

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/":
            self._send(200, "text/html; charset=utf-8", _page().encode())
        elif path == "/graph.svg":
            self._send(200, "image/svg+xml", self.state.svg.encode())
        elif path == "/state.json":
            body = json.dumps(self.state.as_json()).encode()
            self._send(200, "application/json", body)
        else:
            self._send(404, "text/plain", b"not found")

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged: the run's stderr is the user's."""


def _page() -> str:
    page = resources.files("analysis").joinpath("ui.html").read_text(encoding="utf-8")
    return page.replace("__REFRESH_MS__", str(REFRESH_MS))
