"""The run spec: what a session needs to know of a dataflow, and nothing more.

A backend's session gets this instead of the :class:`~timely.dataflow.Dataflow`, so that
the runtime does not read the dataflow's private fields, and a spec can be made by other
front ends (the CLI, tests) as long as they fill it in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from timely.graph.plan import Plan
from timely.sinks import Sink

Callback = Callable[[int, list[Any]], None]


@dataclass
class RunSpec:
    """One run of a dataflow: its plan and where its outputs go."""

    plan: Plan
    collects: list[str] = field(default_factory=list)
    """Names that ``collect`` gathers into the session's results."""
    callbacks: dict[str, Callback] = field(default_factory=dict)
    """``subscribe`` keys and the driver-side callback each epoch goes to."""
    sinks: list[Sink] = field(default_factory=list)
    """Sinks whose output is committed with the checkpoints."""
    open_inputs: Callable[[], list[str]] = list
    """The names of the driver's inputs still open (``join`` needs them closed)."""
    detach: Callable[[], None] = lambda: None
    """Called when the session closes: the dataflow forgets it."""

    @property
    def name(self) -> str:
        return self.plan.name
