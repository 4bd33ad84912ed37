"""Backends that host workers: ``inline`` (one process, seeded scheduler) and ``ray``."""
