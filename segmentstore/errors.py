"""The segment store's errors: one root, and a class for each thing that can be wrong.

Every error names the segment and the value that was wrong. An operation that raises
leaves the store exactly as it was (operations are validated before they apply).

Retry policy lives on the error classes (``retry``): most errors are a definite answer
(``Retry.NEVER``: the same call fails the same way); a lost connection or a missed
reply leaves the outcome unknown (``Retry.IF_IDEMPOTENT``: send again only what is safe
to repeat, as the interface marks it, or what carries a writer id and event number,
which the store deduplicates); a request certainly never executed may always be sent
again (``Retry.ALWAYS``). ``retriable(error, idempotent)`` applies it.

A client's failed call says what became of it: a ``NotSentError`` (among them
``UnreachableError``, ``ClientClosedError``) was never executed (an append: not stored);
any other ``ConnectionLostError``, or a ``ReadTimeoutError``, was in flight: its outcome
is unknown.
"""

from __future__ import annotations

import enum
from typing import ClassVar

__all__ = [
    "Retry",
    "retriable",
    "SegmentStoreError",
    "InvalidArgumentError",
    "AppendTooLargeError",
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
    "StorageError",
    "StoreReadOnlyError",
    "ReadTimeoutError",
    "StreamNotFoundError",
    "StreamExistsError",
    "StreamSealedError",
    "StreamNotSealedError",
    "InvalidScaleError",
    "ProtocolError",
    "AuthenticationError",
    "UnsupportedCommandError",
    "ConnectionLostError",
    "NotSentError",
    "InvalidClockError",
    "UnreachableError",
    "ClientClosedError",
]


class Retry(enum.Enum):
    """Whether the call that raised an error may be sent again."""

    NEVER = "never"
    """A definite answer: sending the same call again gives the same error."""
    IF_IDEMPOTENT = "if idempotent"
    """The outcome is unknown: send again only a call that is safe to repeat."""
    ALWAYS = "always"
    """The call was certainly not executed: send it again."""


class SegmentStoreError(Exception):
    """Root of every error the segment store raises."""

    retry: ClassVar[Retry] = Retry.NEVER


def retriable(error: BaseException, idempotent: bool) -> bool:
    """Whether a call that raised ``error`` may be sent again; ``idempotent``: the call is safe to repeat.

    Python's ``ConnectionError`` and ``TimeoutError`` (from sockets) count as an unknown outcome.
    """
    if isinstance(error, SegmentStoreError):
        policy = error.retry
    elif isinstance(error, (ConnectionError, TimeoutError)):
        policy = Retry.IF_IDEMPOTENT
    else:
        policy = Retry.NEVER
    return policy is Retry.ALWAYS or (policy is Retry.IF_IDEMPOTENT and idempotent)


class InvalidArgumentError(SegmentStoreError, ValueError):
    """An argument has the wrong type or value (negative offset, non-bytes payload, ...)."""


class AppendTooLargeError(InvalidArgumentError):
    """An append is larger than the store takes at once (``StoreConfig.max_append_bytes``): not stored.

    ``length`` is the append's size and ``limit`` the largest the store takes, so a client
    that aggregated several events into the append can send them again in smaller ones.
    """

    def __init__(self, message: str, length: int, limit: int) -> None:
        super().__init__(message)
        self.length = length
        self.limit = limit


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


class StorageError(SegmentStoreError):
    """The file system refused a read or write of the data directory; ``path`` names the file.

    The operation that raised changed nothing (it is not in the log and not applied), also
    after a restart. ``errno`` is the OS error number (28: no space left on device, 13:
    permission denied, 30: read-only file system), ``None`` if there was none.
    """

    def __init__(self, message: str, path: str = "", errno: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno

    @classmethod
    def of(cls, what: str, path: object, error: OSError) -> StorageError:
        """``what`` (e.g. "cannot create segment data file") failed on ``path`` with ``error``."""
        why = error.strerror or str(error)
        return cls(f"{what} {path}: {why} (errno {error.errno})", str(path), error.errno)


class StoreReadOnlyError(StorageError):
    """The store opened read-only (its data directory could not be written at start-up, e.g. a
    full disk): it serves reads and refuses every write; ``path`` names the file it could not
    write. Free space (or fix the permissions) and restart the store."""


class ReadTimeoutError(SegmentStoreError, TimeoutError):
    """A call did not complete within its timeout (its outcome is unknown)."""

    retry = Retry.IF_IDEMPOTENT


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


class UnsupportedCommandError(ProtocolError):
    """The server speaks an older protocol version that lacks the command: not sent (not executed).

    Raised by the client before sending, from the version the server said in its hello:
    ``command`` names the command, ``server_version`` the server's protocol version and
    ``needed_version`` the version that introduced the command. Upgrade the server (or use
    a client of the server's version); sending it again fails the same way.
    """

    def __init__(self, message: str, command: str = "", server_version: int = 0, needed_version: int = 0):
        super().__init__(message)
        self.command = command
        self.server_version = server_version
        self.needed_version = needed_version


class ConnectionLostError(SegmentStoreError, ConnectionError):
    """The connection to the server broke or could not be made; the call's outcome is unknown."""

    retry = Retry.IF_IDEMPOTENT


class NotSentError(ConnectionLostError):
    """The request was certainly not executed by the server: it is safe to send it again."""

    retry = Retry.ALWAYS


class InvalidClockError(SegmentStoreError):
    """The store's clock returned something that is not int64 milliseconds; nothing was changed."""


class UnreachableError(NotSentError, TimeoutError):
    """The server could not be reached (or did not answer) for the call's whole timeout, and the
    request was never sent: not executed (an append: not stored). The client gave up retrying."""


class ClientClosedError(NotSentError, StoreClosedError):
    """The client was closed before the request was sent: not executed (an append: not stored).

    Sending it again on the closed client fails the same way (``Retry.NEVER``).
    """

    retry = Retry.NEVER
