"""Watching a run from the driver's process: monitors that read a session.

- :mod:`~timely.observe.tracestats`: totals over the event log, tailed while it grows;
- :mod:`~timely.observe.metrics`: the Prometheus endpoint (``metrics_port=``);
- :mod:`~timely.observe.progressbar`: the progress bar (``progress=``).

They read the session's :class:`~timely.session.view.RunView` and the event log
(:mod:`timely.eventlog`, which the workers write, low in the layers); the run imports
none of them: :mod:`timely.session.monitors` makes them from run options by name.
"""
