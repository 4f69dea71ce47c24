"""The readergroup package's errors: one root, ``ReaderGroupError``, and a class per thing that can be wrong.

Errors raised by the store (``segmentstore.SegmentStoreError`` subclasses) pass through
unchanged; these cover what the client side itself detects. Every error names the
stream, segment, offset, event or option that was wrong. Add new classes at the end.
"""

from __future__ import annotations

__all__ = [
    "ReaderGroupError",
    "InvalidEventError",
    "FrameFormatError",
    "WriterError",
    "WriterClosedError",
    "NoSuccessorsError",
    "TransactionError",
    "TransactionClosedError",
    "InvalidReaderGroupConfigError",
    "InvalidCheckpointError",
    "InvalidPositionError",
    "ReaderExistsError",
    "ReaderNotInGroupError",
    "ReaderGroupExistsError",
    "ReaderGroupNotFoundError",
    "DuplicateCheckpointError",
    "CheckpointAbortedError",
    "InvalidReadError",
    "TranscriptError",
    "WriterBufferFullError",
    "GroupStateError",
    "GroupStateCorruptError",
    "GroupStateConflictError",
    "StaleEpochError",
    "MaxCheckpointsExceededError",
    "StreamFramingError",
]


class ReaderGroupError(Exception):
    """Root of every error the readergroup package raises itself."""


class InvalidEventError(ReaderGroupError, ValueError):
    """An event cannot be written: bad routing key, payload, event time or kind."""


class FrameFormatError(ReaderGroupError, ValueError):
    """Bytes read from a segment are not a valid event frame (names the offset)."""


class WriterError(ReaderGroupError):
    """A writer could not deliver events (resends exhausted, ...): their futures and ``flush()`` raise it."""


class WriterClosedError(WriterError):
    """The writer is closed."""


class NoSuccessorsError(WriterError):
    """A segment was sealed without successors (the stream is sealed): its events cannot be written."""


class TransactionError(ReaderGroupError):
    """A transaction operation failed."""


class TransactionClosedError(TransactionError):
    """The transaction was committed or aborted already."""


# ------------------------------------------------------------- reader groups (readers, state, checkpoints)
class InvalidReaderGroupConfigError(ReaderGroupError, ValueError):
    """A ``ReaderGroupConfig`` option has a bad value (names the option)."""


class InvalidCheckpointError(ReaderGroupError, ValueError):
    """A checkpoint or reader position is malformed (bad JSON, bad field, a segment twice)."""


class InvalidPositionError(ReaderGroupError, ValueError):
    """A position, stream cut or report names a segment or offset the group cannot use."""


class ReaderExistsError(ReaderGroupError):
    """A reader with that id is online in the group already."""


class ReaderNotInGroupError(ReaderGroupError):
    """The reader is not (or no longer) online in the group: it was closed or declared offline."""


class ReaderGroupExistsError(ReaderGroupError):
    """A reader group with that name exists already in the manager."""


class ReaderGroupNotFoundError(ReaderGroupError, KeyError):
    """No reader group of that name exists in the manager."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DuplicateCheckpointError(ReaderGroupError):
    """A checkpoint of that name is in progress, or completed and still kept, in this epoch."""


class CheckpointAbortedError(ReaderGroupError):
    """A pending checkpoint was abandoned (the group was reset to a new epoch, or closed)."""


class InvalidReadError(ReaderGroupError, ValueError):
    """A read was called with a bad argument (names it: ``timeout_ms``, ``max_events``)."""


class TranscriptError(ReaderGroupError, ValueError):
    """A watermark transcript (``readergroup.transcripts``) is malformed or inconsistent (names the step)."""


class WriterBufferFullError(WriterError):
    """A write did not fit under ``WriterConfig.max_bytes_in_flight`` in ``max_block_ms``; not written."""


class GroupStateError(ReaderGroupError):
    """The group's state log in the store cannot be used (names the segment and offset)."""


class GroupStateCorruptError(GroupStateError):
    """A batch of the state log is corrupt (bad magic, version or CRC): it is never applied."""


class GroupStateConflictError(GroupStateError):
    """An update lost the conditional append to other processes too many times in a row."""


class StaleEpochError(ReaderGroupError):
    """An update names an epoch the group has left (a reset happened meanwhile): it is not applied."""


class MaxCheckpointsExceededError(ReaderGroupError):
    """A checkpoint was initiated while ``max_outstanding_checkpoints`` were in progress or queued
    (Pravega's ``MaxNumberOfCheckpointsExceededException``); nothing was queued."""


class StreamFramingError(ReaderGroupError, ValueError):
    """The stream's events are framed otherwise than this client writes them (a stream created through
    the Pravega controller holds Pravega's framing): nothing was written."""
