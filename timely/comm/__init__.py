"""The communication layer (timely's *allocator*): what travels between the driver and the
workers and between workers, and how.

- :mod:`~timely.comm.messages`: the typed messages (a worker's per-peer
  ``WorkerMessage``, the driver's input commands);
- :mod:`~timely.comm.serialization`: their wire format (msgpack, Arrow-friendly, with a
  pickle fallback that is never used on what a run did not write itself);
- :mod:`~timely.comm.allocator`: a worker's FIFO channel per peer with a bounded window of
  credits, one merged receive, and ``PeerLost`` when a connection ends; connections are
  asyncio streams (Unix sockets on one node, TCP across nodes);
- :mod:`~timely.comm.handshake`: the proof of the run's secret before anything is read;
- :mod:`~timely.comm.frames`: ``<u32 length><u8 kind>`` + payload;
- :mod:`~timely.comm.sending`: a connection's writes, FIFO, handed to the socket as it
  takes them without copying them (``FrameSender``);
- :mod:`~timely.comm.receiving`: a connection's protocol after the handshake, reading
  each large frame straight into a buffer of its own (``FrameReader``);
- :mod:`~timely.comm.driver`: the driver as one more endpoint, on blocking sockets.

The Ray backend uses the sockets between its actors; the inline backend keeps messages
in-process. A low layer: it imports ``progress`` and :mod:`timely.errors` only.
"""
