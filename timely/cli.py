"""``python -m timely run module:flow``: run a dataflow that a module defines.

Why a CLI: the module that builds a dataflow should not also have to parse flags and
choose where it runs. ``module:flow`` names a :class:`~timely.Dataflow` object or a
zero-argument function that returns one (``flow`` when ``:name`` is left out);
``module`` is a dotted module name importable from the current directory, or a path to
a ``.py`` file. Every flag has an environment variable, so a deployment can set them
once: ``TIMELY_WORKERS``, ``TIMELY_BACKEND``, ``TIMELY_ADDRESS``, ``TIMELY_CHECKPOINT``,
``TIMELY_CHECKPOINT_EVERY``, ``TIMELY_TRACE``, ``TIMELY_METRICS_PORT``, ``TIMELY_UI``,
``TIMELY_VERBOSE``. Quiet by default: ``--verbose`` lets Ray print its banner, notices
and the workers' output as it would on its own (:mod:`timely.session.verbosity`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from timely.dataflow import Dataflow
from timely.errors import ConfigError, TimelyError
from timely.session.registry import backend_names
from timely.session.verbosity import VERBOSE_ENV, parse_verbose

ENV = {
    "workers": "TIMELY_WORKERS",
    "backend": "TIMELY_BACKEND",
    "address": "TIMELY_ADDRESS",
    "checkpoint": "TIMELY_CHECKPOINT",
    "checkpoint_every": "TIMELY_CHECKPOINT_EVERY",
    "trace": "TIMELY_TRACE",
    "metrics_port": "TIMELY_METRICS_PORT",
    "verbose": VERBOSE_ENV,
}
DEFAULTS: dict[str, Any] = {
    "workers": 2,
    "backend": "ray",
    "address": None,
    "checkpoint": None,
    "checkpoint_every": None,
    "trace": None,
    "metrics_port": None,
    "verbose": False,
}


class CliError(TimelyError):
    """The command line or the module it names is wrong; the message says how to fix it."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _every(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of epochs or 'auto', got {text!r}"
        ) from None


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port (0: any free one), got {text!r}")
    return value


def _backend(text: str) -> str:
    if text not in backend_names():
        raise argparse.ArgumentTypeError(
            f"unknown backend {text!r}; use one of {', '.join(backend_names())}"
        )
    return text


_PARSE: dict[str, Callable[[str], Any]] = {
    "workers": _positive_int,
    "backend": _backend,
    "address": str,
    "checkpoint": str,
    "checkpoint_every": _every,
    "trace": str,
    "metrics_port": _port,
}


def parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The argument parser; flag defaults come from ``env`` (``os.environ`` by default)."""
    env = os.environ if env is None else env
    top = argparse.ArgumentParser(
        prog="python -m timely",
        description="Run timely dataflows.",
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a dataflow to completion",
        description=(
            "Import MODULE, take the Dataflow named ATTR (or call the zero-argument "
            "function named ATTR to get one) and run it to completion."
        ),
        epilog="Each flag's default comes from its environment variable when that is set.",
    )
    run.add_argument(
        "flow",
        metavar="MODULE[:ATTR]",
        help="a dotted module name or a path to a .py file, and the attribute (default: flow)",
    )
    helps = {
        "workers": ("N", "how many workers"),
        "backend": ("NAME", f"where workers run: {' or '.join(backend_names())}"),
        "address": ("ADDR", "the Ray cluster to join ('auto' or host:port); local Ray if unset"),
        "checkpoint": ("DIR", "checkpoint to and restore from DIR (a path or URI)"),
        "checkpoint_every": (
            "N|auto",
            "checkpoint every N epochs, or 'auto': an interval that keeps 5-10%% of the time "
            "spent checkpointing (needs --checkpoint)",
        ),
        "trace": ("DIR", "write every worker's event log to DIR (off when unset)"),
        "metrics_port": ("PORT", "serve Prometheus metrics on 127.0.0.1:PORT (0: any free)"),
    }
    for name, (metavar, text) in helps.items():
        default = DEFAULTS[name]
        var = ENV[name]
        if var in env:
            try:
                default = _PARSE[name](env[var])
            except argparse.ArgumentTypeError as e:
                raise CliError(f"environment variable {var}={env[var]!r}: {e}") from None
        shown = "unset" if DEFAULTS[name] is None else DEFAULTS[name]
        run.add_argument(
            f"--{name.replace('_', '-')}",
            metavar=metavar,
            type=_PARSE[name],
            default=default,
            help=f"{text} [env {var}; default: {shown}]",
        )
    ui_default = env.get("TIMELY_UI", "") not in ("", "0", "false", "no")
    run.add_argument(
        "--ui",
        action="store_true",
        default=ui_default,
        help="serve a live page of the run on 127.0.0.1 (its address goes to stderr) "
        "[env TIMELY_UI=1; default: off]",
    )
    var = ENV["verbose"]
    verbose = DEFAULTS["verbose"]
    if var in env:
        try:
            verbose = parse_verbose(env[var])
        except ValueError as e:
            raise CliError(f"environment variable {var}={env[var]!r}: {e}") from None
    run.add_argument(
        "--verbose",
        action="store_true",
        default=verbose,
        help="let Ray print its own log lines (its banner and notices, the workers' output); "
        f"quiet otherwise [env {var}; default: off]",
    )
    _add_plugin_commands(commands)
    return top


COMMANDS_GROUP = "timely.commands"
"""Entry points that add subcommands: each a callable given the subparsers (it sets a
``handler(args) -> exit status`` default); how layers above ``timely`` (the analysis's
``profile``) join the command line without ``timely`` importing them."""


def _add_plugin_commands(commands: Any) -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=COMMANDS_GROUP):
        ep.load()(commands)


def split_spec(spec: str) -> tuple[str, str]:
    """``module:attr`` -> ``(module, attr)``; the attribute defaults to ``flow``."""
    module, sep, attr = spec.rpartition(":")
    if not sep or not attr.isidentifier():
        module, attr = spec, "flow"
    if not module:
        raise CliError(f"{spec!r} names no module; write MODULE:ATTR, e.g. my_jobs.clicks:flow")
    return module, attr


def import_module(name: str) -> ModuleType:
    """A module by dotted name (the current directory first on the path) or by file path."""
    if name.endswith(".py") or os.sep in name or "/" in name:
        path = os.path.abspath(name)
        if not os.path.isfile(path):
            raise CliError(f"no such file: {name!r}")
        folder, stem = os.path.split(path[:-3] if path.endswith(".py") else path)
        if not stem.isidentifier():
            raise CliError(f"{name!r}: a module's file name must be a Python identifier")
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = stem
    elif "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            raise CliError(
                f"cannot import module {name!r}: {e}; run from the directory that holds it, or "
                "give the path to its .py file"
            ) from None
        raise CliError(f"importing {name!r} failed: {type(e).__name__}: {e}") from e
    except Exception as e:
        raise CliError(f"importing {name!r} failed: {type(e).__name__}: {e}") from e


def _candidates(module: ModuleType) -> list[str]:
    """Attributes that could be meant: dataflows, and functions the module defines."""
    out = []
    for key, value in vars(module).items():
        if key.startswith("_"):
            continue
        if isinstance(value, Dataflow) or (
            inspect.isfunction(value) and value.__module__ == module.__name__
        ):
            out.append(key)
    return out


def load_flow(spec: str) -> tuple[Dataflow, ModuleType]:
    """The dataflow ``spec`` names, and the module it comes from."""
    module_name, attr = split_spec(spec)
    module = import_module(module_name)
    where = getattr(module, "__file__", None) or module_name
    if not hasattr(module, attr):
        options = _candidates(module)
        hint = f"; it defines {', '.join(options)}" if options else ""
        raise CliError(f"module {module_name!r} ({where}) has no attribute {attr!r}{hint}")
    obj = getattr(module, attr)
    if isinstance(obj, Dataflow):
        return obj, module
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        required = [
            p.name
            for p in inspect.signature(obj).parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if required:
            raise CliError(
                f"{spec} takes arguments ({', '.join(required)}); name a Dataflow or a function "
                "that builds one without arguments"
            )
        flow = obj()
        if not isinstance(flow, Dataflow):
            raise CliError(f"{spec}() returned a {type(flow).__name__}, not a timely.Dataflow")
        return flow, module
    raise CliError(
        f"{spec} is a {type(obj).__name__}, not a timely.Dataflow or a zero-argument "
        "function returning one"
    )


def run(args: argparse.Namespace) -> int:
    flow, module = load_flow(args.flow)
    options: dict[str, Any] = {}
    if args.checkpoint is not None:
        options["checkpoint"] = args.checkpoint
    if args.checkpoint_every is not None:
        if args.checkpoint is None:
            raise CliError(
                f"--checkpoint-every/{ENV['checkpoint_every']} needs --checkpoint DIR "
                f"(or {ENV['checkpoint']}): where the checkpoints go"
            )
        options["checkpoint_every"] = args.checkpoint_every
    if args.trace is not None:
        options["trace"] = args.trace
    if args.metrics_port is not None:
        options["metrics_port"] = args.metrics_port
    if args.ui:
        options["ui"] = True
    options["verbose"] = args.verbose
    if args.backend == "ray":
        options["address"] = args.address
        # Ray workers on other machines (or started elsewhere) cannot import the user's
        # module by name; ship what it defines by value instead.
        import ray.cloudpickle

        ray.cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    elif args.address is not None:
        raise CliError(
            f"--address/{ENV['address']} is for the ray backend; drop it or use --backend ray"
        )
    results = flow.run(workers=args.workers, backend=args.backend, **options)
    summary = ", ".join(f"{name!r}: {len(recs)} records" for name, recs in results.items())
    print(
        f"timely: dataflow {flow.name!r} finished on {args.workers} workers ({args.backend})"
        + (f"; collected {summary}" if summary else ""),
        file=sys.stderr,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (2: bad usage, 1: the dataflow failed)."""
    try:
        args = parser().parse_args(argv)
        if args.command != "run":
            status: int = args.handler(args)
            return status
        return run(args)
    except (CliError, ConfigError) as e:
        print(f"timely: error: {e}", file=sys.stderr)
        return 2
    except TimelyError as e:
        print(f"timely: the dataflow failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
