"""Keyed state: what stateful vertices keep, and where.

- :mod:`~timely.state.keyed`: ``KeyedState`` tables per time, ``StatefulVertex``, and
  what checkpoints and migrations do with them (snapshots, deltas, re-partitioning, bins
  taken out and put in);
- :mod:`~timely.state.columnar`: ``ColumnState``, the same as Arrow columns (the table
  API's), a spine of sorted runs per time;
- :mod:`~timely.state.spill`: with the disk backend, columnar runs that are large
  written to Arrow files and mapped back;
- :mod:`~timely.state.disk`: the disk backend (``state_backend="disk"``), one RocksDB per
  worker behind a write-back cache.

It imports the vertex API (:mod:`timely.vertex`), :mod:`timely.routing` (bins) and the
wire format (:mod:`timely.comm.serialization`); the graph, checkpoints and the worker
import it.
"""
