"""SnailTrail's critical-path analysis (Hoffmann et al., NSDI'18), as pure functions.

From a normalised trace (what each worker did: ``Interval``; what went between workers:
``Message``) to, per snapshot window, the program activity graph (``pag``), each
activity's critical participation (``critical``) and what they add up to by kind,
operator, worker and channel (``summaries``); ``windows`` cuts a trace into windows.
It reads the event log's contents and imports nothing of the runtime; nothing in
``timely`` or ``progress`` imports it. A trace directory becomes tables (``profile``) and
one HTML page (``report``, drawing with ``plots`` and ``graphview``); those are not
imported here, so ``import analysis`` needs no matplotlib.
"""

from analysis.critical import Critical, PathCounts, critical_participation, path_counts
from analysis.pag import NEVER_CRITICAL, PAG, Activity, Interval, Message, build_pag
from analysis.summaries import Breakdown, Summary, breakdown, render, summarise
from analysis.windows import SECOND, Window, analyse, cut

__all__ = [
    "NEVER_CRITICAL",
    "PAG",
    "SECOND",
    "Activity",
    "Breakdown",
    "Critical",
    "Interval",
    "Message",
    "PathCounts",
    "Summary",
    "Window",
    "analyse",
    "breakdown",
    "build_pag",
    "critical_participation",
    "cut",
    "path_counts",
    "render",
    "summarise",
]
