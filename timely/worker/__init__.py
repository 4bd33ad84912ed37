"""The worker: one instance of every vertex, and the single-threaded step loop.

- :mod:`~timely.worker.loop`: ``Worker`` and its step;
- :mod:`~timely.worker.context`: what one vertex instance may do on its worker, checked;
- :mod:`~timely.worker.snapshots`: when each vertex is snapshotted for a checkpoint;
- :mod:`~timely.worker.migration`: Megaphone's migration on one worker;
- :mod:`~timely.worker.ports`: what each of those parts may ask of the worker (typing
  protocols), so that none of them imports ``Worker``;
- :mod:`~timely.worker.profiling`: a worker's opt-in cProfile (run option ``profile_dir``).

It imports the graph, state, checkpoints (a restore's share), routing, the messages and
the event log; the session and the backends import it.
"""
