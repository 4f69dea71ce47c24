"""The segment store's errors: one root, and a class for each thing that can be wrong.

Every error names the segment and the value that was wrong. An operation that raises
leaves the store exactly as it was (operations are validated before they apply).
"""

from __future__ import annotations

__all__ = [
    "SegmentStoreError",
    "InvalidArgumentError",
    "SegmentNotFoundError",
    "SegmentExistsError",
    "SegmentSealedError",
    "SegmentNotSealedError",
    "SegmentTruncatedError",
    "BadOffsetError",
    "NotATransactionError",
    "WrongParentError",
    "BadAttributeUpdateError",
    "StoreClosedError",
    "DataCorruptionError",
    "StoreLockedError",
    "ReadTimeoutError",
    "StreamNotFoundError",
    "StreamExistsError",
    "StreamSealedError",
    "StreamNotSealedError",
    "InvalidScaleError",
    "ProtocolError",
    "AuthenticationError",
    "ConnectionLostError",
    "InvalidClockError",
]


class SegmentStoreError(Exception):
    """Root of every error the segment store raises."""


class InvalidArgumentError(SegmentStoreError, ValueError):
    """An argument has the wrong type or value (negative offset, non-bytes payload, ...)."""


class SegmentNotFoundError(SegmentStoreError, KeyError):
    """The segment does not exist (never created, or deleted)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SegmentExistsError(SegmentStoreError):
    """A segment with that name exists already."""


class SegmentSealedError(SegmentStoreError):
    """The segment is sealed: no more appends, merges into it or attribute updates."""


class SegmentNotSealedError(SegmentStoreError):
    """The operation needs a sealed segment (merging a transaction)."""


class SegmentTruncatedError(SegmentStoreError):
    """The read starts below the segment's start offset."""


class BadOffsetError(SegmentStoreError):
    """A conditional append expected another offset, or an offset is out of range."""

    def __init__(self, message: str, expected: int | None = None, actual: int | None = None):
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class NotATransactionError(SegmentStoreError):
    """A merge named a segment that is not a transaction segment."""


class WrongParentError(SegmentStoreError):
    """A transaction was merged into a segment that is not its parent."""


class BadAttributeUpdateError(SegmentStoreError):
    """An attribute update is not allowed (core attribute, failed replace-if-equals, ...)."""


class StoreClosedError(SegmentStoreError):
    """The store is closed."""


class DataCorruptionError(SegmentStoreError):
    """Durable data is corrupt (a bad record in the middle of the log, a bad snapshot)."""


class StoreLockedError(SegmentStoreError):
    """Another process holds the data directory."""


class ReadTimeoutError(SegmentStoreError, TimeoutError):
    """A call did not complete within its timeout."""


class StreamNotFoundError(SegmentStoreError, KeyError):
    """The stream does not exist (never created, or deleted)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class StreamExistsError(SegmentStoreError):
    """A stream with that name exists already."""


class StreamSealedError(SegmentStoreError):
    """The stream is sealed: no scaling, no new transactions, no commits."""


class StreamNotSealedError(SegmentStoreError):
    """The operation needs a sealed stream (deleting it)."""


class InvalidScaleError(SegmentStoreError, ValueError):
    """A scale request is wrong: a segment that is not active, ranges that do not cover the sealed ones."""


class ProtocolError(SegmentStoreError):
    """A peer broke the wire protocol (malformed frame, unknown command, bad version, limit)."""


class AuthenticationError(ProtocolError, PermissionError):
    """The server refused the connection's token (wrong or missing)."""


class ConnectionLostError(SegmentStoreError, ConnectionError):
    """The connection to the server broke or could not be made; the call's outcome is unknown."""


class InvalidClockError(SegmentStoreError):
    """The store's clock returned something that is not int64 milliseconds; nothing was changed."""
