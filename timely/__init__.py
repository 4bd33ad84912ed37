"""timely: timely dataflow in Python on Ray (the runtime arrives with its own issue)."""

__version__ = "0.1.0"
