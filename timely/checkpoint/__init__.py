"""Checkpoints: the options, the files, and the driver's side of taking them.

- :mod:`~timely.checkpoint.config`: the checkpoint options of a run;
- :mod:`~timely.checkpoint.store`: where checkpoints are stored, the manifest that
  commits one, reading one back, and a worker's share of it on a restore;
- :mod:`~timely.checkpoint.aimd`: the AIMD controller of ``checkpoint_every="auto"``
  (Drizzle's coordination interval), pure;
- :mod:`~timely.checkpoint.cadence`: what the driver measures for it and asks of workers;
- :mod:`~timely.checkpoint.coordinator`: the driver's coordinator (commits, interval
  requests, the input log, restores).

A worker's own part of checkpointing (when each vertex is snapshotted) is
:mod:`timely.worker.snapshots`. Nothing here imports the worker or the session: the
worker reads a share, the session holds the coordinator.
"""
