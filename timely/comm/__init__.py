"""The communication layer (timely's *allocator*): how workers' messages travel.

:class:`Allocator` gives a worker a FIFO :class:`Channel` per peer with a bounded
window of credits, one merged receive, and :class:`PeerLost` when a connection ends.
Connections are asyncio streams (Unix sockets on one node, TCP across nodes) that
prove the run's secret before anything else is read (:mod:`timely.comm.handshake`);
frames are ``<u32 length><u8 kind>`` + payload (:mod:`timely.comm.frames`). The Ray
backend uses it between its actors, and the driver dials every actor as one more
endpoint (:mod:`timely.comm.driver`); the inline backend keeps messages in-process.
"""

from timely.comm.allocator import Address, Allocator, Channel, PeerLost

__all__ = ["Address", "Allocator", "Channel", "PeerLost"]
