"""What every runnable example shares: the flags that choose where it runs, and test graphs."""

from __future__ import annotations

import argparse
import random
from typing import Any


def add_run_flags(ap: argparse.ArgumentParser, workers: int = 2) -> None:
    """``--workers``, ``--backend`` (ray by default), ``--address`` (a Ray cluster),
    ``--checkpoint`` (where checkpoints go: recovery from failures, resume),
    ``--trace`` (where every worker's event log goes: ``python -m timely profile``),
    ``--ui`` (a live page), ``--metrics-port`` (Prometheus metrics) and
    ``--verbose`` (Ray's and Spark's own log lines, off by default:
    ``timely.session.verbosity``)."""
    ap.add_argument("--workers", type=int, default=workers)
    ap.add_argument("--backend", default="ray", choices=["ray", "inline"])
    ap.add_argument("--address", default=None, help="a Ray cluster to join ('auto' or host:port)")
    ap.add_argument(
        "--checkpoint",
        default=None,
        help="checkpoint directory or URI: survive worker failures, resume a stopped run",
    )
    ap.add_argument(
        "--trace",
        default=None,
        help="a directory for every worker's event log (profile it: python -m timely profile)",
    )
    ap.add_argument(
        "--ui",
        action="store_true",
        help="serve a live page of the run on 127.0.0.1 (its address goes to stderr)",
    )
    ap.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on 127.0.0.1:PORT (0: any free port)",
    )
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="show Ray's and Spark's own log lines (quiet by default; env TIMELY_VERBOSE=1)",
    )


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The session options the flags ask for (``address`` only means something on Ray)."""
    options: dict[str, Any] = {} if args.backend == "inline" else {"address": args.address}
    if getattr(args, "checkpoint", None):
        options["checkpoint"] = args.checkpoint
    if getattr(args, "ui", False):
        options["ui"] = True
    if getattr(args, "metrics_port", None) is not None:
        options["metrics_port"] = args.metrics_port
    if getattr(args, "trace", None):
        options["trace"] = args.trace
    if getattr(args, "verbose", False):
        options["verbose"] = True  # otherwise TIMELY_VERBOSE decides
    return options


def random_graph(nodes: int, edges: int, seed: int) -> list[tuple[int, int]]:
    """``edges`` random directed edges over nodes ``0 .. nodes-1`` (repeatable by ``seed``)."""
    rng = random.Random(seed)
    return [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(edges)]
