"""readergroup.writing: writing events to a stream (it imports only ``format``).

- ``writer``: ``EventWriter`` and ``WriterConfig`` — routing by key, exactly-once appends.
- ``appender``: asynchronous appends of frame blocks, one in flight per segment.
- ``write_future``: ``WriteFuture`` and ``EventAck``, one written event's acknowledgement.
- ``transaction``: ``TransactionalEventWriter`` and ``Transaction``, all at once or not at all.
"""
