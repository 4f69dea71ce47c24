"""readergroup.writing: writing events to a stream (it imports only ``format``).

- ``writer``: ``EventWriter`` and ``WriterConfig`` — routing by key, exactly-once appends.
- ``appender``: asynchronous appends of frame blocks, one in flight per segment.
- ``append_settling``: how a sent block settles (acknowledged, resent, cut, rerouted, failed).
- ``write_future``: ``WriteFuture`` and ``EventAck``, one written event's acknowledgement.
- ``transaction``: ``TransactionalEventWriter`` and ``Transaction``, all at once or not at all.
"""
