"""``python -m timely profile TRACE_DIR``: the ``profile`` subcommand, which timely's command
line finds through the ``timely.commands`` entry point.

It prints the profile's tables (:func:`analysis.profile.render`), or with ``--json`` the
profile as one object (:meth:`analysis.profile.Profile.as_json`). The report
(:mod:`analysis.report`) goes to ``TRACE_DIR/profile.html`` unless ``--html PATH`` or
``--no-html`` says otherwise; stdout stays the tables or the JSON. Here, above both the
profile and the report, so that neither imports the other's way back.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from analysis.profile import profile, render


def command(args: argparse.Namespace) -> int:
    """The ``profile`` subcommand: the report is written first, so that a path it cannot
    be written to fails the command before anything is printed."""
    try:
        result = profile(args.trace_dir, args.window)
    except FileNotFoundError as e:
        print(f"timely: error: {e}", file=sys.stderr)
        return 2
    written = None
    if not args.no_html:
        from analysis.report import write_report  # matplotlib: only when a report is due

        path = Path(args.html) if args.html else Path(args.trace_dir) / "profile.html"
        try:
            written = write_report(result, path, source=args.trace_dir)
        except OSError as e:
            print(
                f"timely: error: cannot write the report to {str(path)!r}: "
                f"{e.strerror or e} (choose another with --html PATH, or --no-html)",
                file=sys.stderr,
            )
            return 2
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
    else:
        print(render(result, args.top))
    if written is not None:
        print(f"timely: report written to {written}", file=sys.stderr)
    return 0


def register(commands: Any) -> None:
    """Add ``profile`` to timely's command line (the ``timely.commands`` entry point)."""
    sub = commands.add_parser(
        "profile",
        help="a run's critical-path profile, from its event log (trace=DIR)",
        description=(
            "Analyse the event log in TRACE_DIR with SnailTrail's critical participation: "
            "which activities, operators, workers and channels lay on the critical path."
        ),
    )
    sub.add_argument("trace_dir", metavar="TRACE_DIR")
    sub.add_argument("--window", type=float, default=1.0, help="seconds per window (1)")
    sub.add_argument("--top", type=int, default=10, help="rows per table (10)")
    sub.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    html = sub.add_mutually_exclusive_group()
    html.add_argument(
        "--html", metavar="PATH", help="where to write the HTML report (TRACE_DIR/profile.html)"
    )
    html.add_argument("--no-html", action="store_true", help="write no HTML report")
    sub.set_defaults(handler=command)
