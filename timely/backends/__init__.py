"""Backends: what hosts a session's workers.

- :mod:`~timely.backends.inline`: every worker in the driver's process, stepped by a
  seeded random scheduler (tests, small runs);
- :mod:`~timely.backends.ray`: one async Ray actor per worker, talking over
  :mod:`timely.comm`; :mod:`~timely.backends.ray_pool` keeps a clean run's actors warm.

A backend is a :class:`~timely.session.base.Session` subclass; the registry
(:mod:`timely.session.registry`) names these two by ``"module:Class"`` and imports one on
first use, so nothing in the session imports a backend. A backend imports the session,
the worker and everything below them.
"""
