"""The Pravega front door's errors: one root under ``SegmentStoreError``, and what can be wrong in it.

A malformed wire command is a ``WireFormatError`` (the endpoint closes that connection
and logs it); a missing, forged or expired credential an ``AuthTokenError`` (answered
as Pravega answers it: ``AuthTokenCheckFailed`` on the wire, ``UNAUTHENTICATED`` over
gRPC); a stream whose events a Pravega client cannot read or write a ``FramingError``.
"""

from __future__ import annotations

from ..errors import SegmentStoreError

__all__ = [
    "PravegaEndpointError",
    "WireFormatError",
    "AuthTokenError",
    "FramingError",
    "TableKeyBadVersionError",
    "TableKeyNotFoundError",
    "TableNotEmptyError",
]


class PravegaEndpointError(SegmentStoreError):
    """Root of the errors of the Pravega endpoints (controller over gRPC, segment store over the wire)."""


class WireFormatError(PravegaEndpointError):
    """A Pravega wire command that cannot be decoded or makes no sense (names the command and byte)."""


class AuthTokenError(PravegaEndpointError, PermissionError):
    """A credential or delegation token that is missing, wrong or expired (``expired`` says which)."""

    def __init__(self, message: str, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


class FramingError(PravegaEndpointError):
    """A Pravega client asked for a stream whose events are framed otherwise (ingestwm's own writers)."""


class TableKeyBadVersionError(PravegaEndpointError):
    """A conditional table update named a key whose version is another (Pravega's ``TableKeyBadVersion``)."""


class TableKeyNotFoundError(PravegaEndpointError):
    """A conditional table update named a version of a key that does not exist (``TableKeyDoesNotExist``)."""


class TableNotEmptyError(PravegaEndpointError):
    """A table segment to delete only if empty holds keys (Pravega's ``TableSegmentNotEmpty``)."""
