"""Where a record goes: key -> bin -> worker.

- :mod:`~timely.routing.hashing`: the stable hash every route of a key goes through;
- :mod:`~timely.routing.bins`: bins, routing tables and the configurations in force
  (Megaphone), and the helpers that make new tables (``move``, ``drain``, ``balance``);
- :mod:`~timely.routing.channels`: an edge's channel (``pipeline``, ``exchange(key)``,
  ``broadcast``, the outputs' gather), which splits a batch by destination worker.

A low layer: it imports :mod:`timely.errors` (and numpy) only.
"""
