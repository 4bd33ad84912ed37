"""The dataflow as data: what a session runs.

- :mod:`~timely.graph.system`: the vertices the framework places itself (inputs,
  sources, loop plumbing, outputs, sinks);
- :mod:`~timely.graph.plan`: the physical plan (``Plan``: vertex and edge specs, the
  progress graph with its path summaries, the roots, a fingerprint);
- :mod:`~timely.graph.spec`: the run spec a session gets (the plan and where outputs go).

The builder a user calls, :mod:`timely.dataflow`, sits at the top and makes these; the
worker and the session read them. Below: the vertex API, sources, sinks, state, routing
and the messages.
"""
