"""readergroup: see DESIGN §2."""

from .checkpoint import Checkpoint, ReaderPosition, SegmentPosition
from .config import ReaderGroupConfig, TimeDomain
from .errors import (
    CheckpointAbortedError,
    DuplicateCheckpointError,
    FrameFormatError,
    InvalidCheckpointError,
    InvalidEventError,
    InvalidPositionError,
    InvalidReaderGroupConfigError,
    InvalidReadError,
    NoSuccessorsError,
    ReaderExistsError,
    ReaderGroupError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
    TransactionClosedError,
    TransactionError,
    WriterClosedError,
    WriterError,
)
from .events import (
    KIND_EVENT,
    KIND_IDLE,
    KIND_WATERMARK,
    NO_EVENT_TIME,
    Frame,
    decode_columns,
    decode_frames,
    encode_event,
)
from .group import ReaderGroup, ReaderGroupManager
from .metrics import GroupMetrics, SegmentMetrics
from .reader import EventBatch, EventRead, EventReader, ReaderStats, ReadKind
from .routing import RoutingTable, key_hash
from .state import ReaderGroupState, SegmentState
from .transaction import Transaction, TransactionalEventWriter, TransactionStatus
from .writer import EventWriter, WriterConfig

__all__ = [
    "KIND_EVENT",
    "KIND_IDLE",
    "KIND_WATERMARK",
    "NO_EVENT_TIME",
    "Checkpoint",
    "CheckpointAbortedError",
    "DuplicateCheckpointError",
    "EventBatch",
    "EventRead",
    "EventReader",
    "EventWriter",
    "Frame",
    "FrameFormatError",
    "GroupMetrics",
    "InvalidCheckpointError",
    "InvalidEventError",
    "InvalidPositionError",
    "InvalidReadError",
    "InvalidReaderGroupConfigError",
    "NoSuccessorsError",
    "ReadKind",
    "ReaderExistsError",
    "ReaderGroup",
    "ReaderGroupConfig",
    "ReaderGroupError",
    "ReaderGroupExistsError",
    "ReaderGroupManager",
    "ReaderGroupNotFoundError",
    "ReaderGroupState",
    "ReaderNotInGroupError",
    "ReaderPosition",
    "ReaderStats",
    "RoutingTable",
    "SegmentMetrics",
    "SegmentPosition",
    "SegmentState",
    "TimeDomain",
    "Transaction",
    "TransactionClosedError",
    "TransactionError",
    "TransactionStatus",
    "TransactionalEventWriter",
    "WriterClosedError",
    "WriterConfig",
    "WriterError",
    "decode_columns",
    "decode_frames",
    "encode_event",
    "key_hash",
]
