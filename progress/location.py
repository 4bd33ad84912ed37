"""Locations (operator ports) and pointstamps."""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple, TypeAlias

from progress.timestamp import Timestamp


class Port(IntEnum):
    """Which side of an operator a location is on."""

    TARGET = 0
    """An input: messages wait here to be received."""
    SOURCE = 1
    """An output: capabilities to send are held here."""


class Location(NamedTuple):
    """An operator port: ``(node, kind, port)``."""

    node: int
    kind: Port
    port: int

    @property
    def is_source(self) -> bool:
        return self.kind is Port.SOURCE

    def __repr__(self) -> str:
        side = "out" if self.kind is Port.SOURCE else "in"
        return f"{side}({self.node}.{self.port})"


def source(node: int, port: int = 0) -> Location:
    """Output ``port`` of ``node``."""
    return Location(node, Port.SOURCE, port)


def target(node: int, port: int = 0) -> Location:
    """Input ``port`` of ``node``."""
    return Location(node, Port.TARGET, port)


Pointstamp: TypeAlias = tuple[Location, Timestamp]
"""A location and a time: the unit that occurrence counts are kept for."""
