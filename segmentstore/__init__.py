"""segmentstore: the server side of ingestwm — a Pravega-style segment store with ingestion-time watermarks.

Importing this package is cheap: numba kernels compile (or load from cache) on first use.
"""

from .attributes import (
    CREATION_TIME,
    LAST_WRITE_TIME,
    AttributeUpdate,
    AttributeUpdateType,
)
from .clock import Clock, ManualClock, TickingClock, WallClock
from .config import StoreConfig
from .controller.controller import StreamController, controller_of
from .errors import (
    AppendTooLargeError,
    AuthenticationError,
    BadAttributeUpdateError,
    BadOffsetError,
    ConnectionLostError,
    DataCorruptionError,
    InvalidArgumentError,
    InvalidClockError,
    InvalidScaleError,
    NotATransactionError,
    ProtocolError,
    ReadTimeoutError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentSealedError,
    SegmentStoreError,
    SegmentTruncatedError,
    StorageError,
    StoreClosedError,
    StoreLockedError,
    StoreReadOnlyError,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    WrongParentError,
)
from .future_read import FutureRead
from .results import AppendResult, MergeResult, SegmentInfo, SegmentRead
from .store import SegmentStore
from .stream_metadata import (
    StreamCut,
    StreamInfo,
    StreamSegment,
    SuccessorInfo,
    TransactionInfo,
    TransactionSegment,
)
from .wait_any import ReadyFuture

__all__ = [
    "AppendTooLargeError",
    "CREATION_TIME",
    "LAST_WRITE_TIME",
    "AppendResult",
    "AttributeUpdate",
    "AttributeUpdateType",
    "BadAttributeUpdateError",
    "BadOffsetError",
    "Clock",
    "DataCorruptionError",
    "FutureRead",
    "ReadyFuture",
    "InvalidArgumentError",
    "ManualClock",
    "TickingClock",
    "MergeResult",
    "NotATransactionError",
    "ReadTimeoutError",
    "SegmentExistsError",
    "SegmentInfo",
    "SegmentNotFoundError",
    "SegmentNotSealedError",
    "SegmentRead",
    "SegmentSealedError",
    "SegmentStore",
    "SegmentStoreError",
    "SegmentTruncatedError",
    "StoreClosedError",
    "StoreConfig",
    "StoreLockedError",
    "StorageError",
    "StoreReadOnlyError",
    "WallClock",
    "WrongParentError",
    "InvalidScaleError",
    "InvalidClockError",
    "StreamController",
    "controller_of",
    "StreamCut",
    "StreamExistsError",
    "StreamInfo",
    "StreamNotFoundError",
    "StreamNotSealedError",
    "StreamSealedError",
    "StreamSegment",
    "SuccessorInfo",
    "TransactionInfo",
    "TransactionSegment",
    "AuthenticationError",
    "ConnectionLostError",
    "ProtocolError",
]
