"""The commands a Pravega segment store answers with, with their type codes and layouts.

One frozen dataclass per command of the 0.3.7 client's ``Replies`` besides ``Hello`` and
``KeepAlive`` (``wire_requests``), fields in wire order (``segmentstore.pravega.wire``
explains the encodings). ``server_stack_trace`` fields carry a short reason here, never
a stack trace. Names are Pravega's, without its ``Command`` suffix.
"""

from __future__ import annotations

from dataclasses import dataclass

from .wire import ChunkInfo, TableKey, TableValue, command

__all__ = [
    "AppendSetup",
    "DataAppended",
    "ConditionalCheckFailed",
    "SegmentRead",
    "StreamSegmentInfo",
    "SegmentCreated",
    "SegmentSealed",
    "SegmentDeleted",
    "SegmentPolicyUpdated",
    "SegmentAttribute",
    "SegmentAttributeUpdated",
    "SegmentTruncated",
    "WrongHost",
    "SegmentIsSealed",
    "SegmentAlreadyExists",
    "NoSuchSegment",
    "InvalidEventNumber",
    "SegmentIsTruncated",
    "OperationUnsupported",
    "SegmentsMerged",
    "AuthTokenCheckFailed",
    "ErrorMessage",
    "TableSegmentInfo",
    "TableEntriesUpdated",
    "TableKeysRemoved",
    "TableRead",
    "TableSegmentNotEmpty",
    "TableKeyDoesNotExist",
    "TableKeyBadVersion",
    "TableKeysRead",
    "TableEntriesRead",
    "TableEntriesDeltaRead",
    "SegmentsBatchMerged",
    "StorageFlushed",
    "StorageChunksListed",
]


@command(2, "i64 str u128 i64", reply=True)
@dataclass(frozen=True, slots=True)
class AppendSetup:
    """Appends may start: the writer's last stored event number (``i64::MIN`` if none)."""

    request_id: int
    segment: str
    writer_id: int
    last_event_number: int


@command(7, "u128 i64 i64 i64 i64", reply=True)
@dataclass(frozen=True, slots=True)
class DataAppended:
    """A block is stored: every event of the writer up to ``event_number`` is acknowledged."""

    writer_id: int
    event_number: int
    previous_event_number: int
    request_id: int
    current_segment_write_offset: int


@command(8, "u128 i64 i64", reply=True)
@dataclass(frozen=True, slots=True)
class ConditionalCheckFailed:
    """A conditional append found another length than it expected: not stored."""

    writer_id: int
    event_number: int
    request_id: int


@command(10, "str i64 bool bool bytes i64", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentRead:
    """Bytes from ``offset`` (the request's), whether they reach the tail and the sealed end."""

    segment: str
    offset: int
    at_tail: bool
    end_of_segment: bool
    data: bytes
    request_id: int


@command(12, "i64 str bool bool bool i64 i64 i64", reply=True)
@dataclass(frozen=True, slots=True)
class StreamSegmentInfo:
    """A segment's state."""

    request_id: int
    segment_name: str
    exists: bool
    is_sealed: bool
    is_deleted: bool
    last_modified: int
    write_offset: int
    start_offset: int


@command(21, "i64 str", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentCreated:
    """A segment was created."""

    request_id: int
    segment: str


@command(29, "i64 str", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentSealed:
    """A segment was sealed."""

    request_id: int
    segment: str


@command(31, "i64 str", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentDeleted:
    """A segment was deleted."""

    request_id: int
    segment: str


@command(33, "i64 str", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentPolicyUpdated:
    """A segment's policy was changed."""

    request_id: int
    segment: str


@command(35, "i64 i64", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentAttribute:
    """An attribute's value (``i64::MIN`` when absent)."""

    request_id: int
    value: int


@command(37, "i64 bool", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentAttributeUpdated:
    """Whether a compare-and-set of an attribute applied."""

    request_id: int
    success: bool


@command(39, "i64 str", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentTruncated:
    """A segment was truncated."""

    request_id: int
    segment: str


@command(50, "i64 str str str", reply=True)
@dataclass(frozen=True, slots=True)
class WrongHost:
    """This segment store does not own the segment: ask the controller again."""

    request_id: int
    segment: str
    correct_host: str
    server_stack_trace: str


@command(51, "i64 str str i64", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentIsSealed:
    """The segment is sealed (for an append, ``offset`` holds the refused event number)."""

    request_id: int
    segment: str
    server_stack_trace: str
    offset: int


@command(52, "i64 str str", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentAlreadyExists:
    """The segment exists already."""

    request_id: int
    segment: str
    server_stack_trace: str


@command(53, "i64 str str i64", reply=True)
@dataclass(frozen=True, slots=True)
class NoSuchSegment:
    """The segment does not exist (or no more)."""

    request_id: int
    segment: str
    server_stack_trace: str
    offset: int


@command(55, "u128 i64 str", reply=True)
@dataclass(frozen=True, slots=True)
class InvalidEventNumber:
    """A writer's event numbers went backwards: the connection is closed after it."""

    writer_id: int
    event_number: int
    server_stack_trace: str


@command(56, "i64 str i64 str i64", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentIsTruncated:
    """``offset`` is below the segment's ``start_offset``."""

    request_id: int
    segment: str
    start_offset: int
    server_stack_trace: str
    offset: int


@command(57, "i64 str str", reply=True)
@dataclass(frozen=True, slots=True)
class OperationUnsupported:
    """The operation cannot be done here (the name says which and why)."""

    request_id: int
    operation_name: str
    server_stack_trace: str


@command(59, "i64 str str i64", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentsMerged:
    """A segment was merged into ``target``."""

    request_id: int
    target: str
    source: str
    new_target_write_offset: int


@command(60, "i64 str i32", reply=True)
@dataclass(frozen=True, slots=True)
class AuthTokenCheckFailed:
    """A delegation token was refused: code 0 wrong or missing, 1 expired (-1 unspecified)."""

    request_id: int
    server_stack_trace: str
    error_code: int


@command(61, "i64 str str i32", reply=True)
@dataclass(frozen=True, slots=True)
class ErrorMessage:
    """A refused request with a message; code 0 is an illegal argument (-1 unspecified)."""

    request_id: int
    segment: str
    message: str
    error_code: int


@command(69, "i64 str i64 i64 i64 i32", reply=True)
@dataclass(frozen=True, slots=True)
class TableSegmentInfo:
    """A table segment's start offset, length, live entries and fixed key length (0: keys of any length).

    Pravega's segment store's layout; the 0.3.7 client declares another (request id,
    name, token) but never asks for it.
    """

    request_id: int
    segment_name: str
    start_offset: int
    length: int
    entry_count: int
    key_length: int


@command(75, "i64 i64s", reply=True)
@dataclass(frozen=True, slots=True)
class TableEntriesUpdated:
    """Entries were put: their new key versions, in order."""

    request_id: int
    updated_versions: tuple[int, ...]


@command(77, "i64 str", reply=True)
@dataclass(frozen=True, slots=True)
class TableKeysRemoved:
    """Keys were removed."""

    request_id: int
    segment: str


@command(79, "i64 str entries", reply=True)
@dataclass(frozen=True, slots=True)
class TableRead:
    """The entries of the keys asked for."""

    request_id: int
    segment: str
    entries: tuple[tuple[TableKey, TableValue], ...]


@command(80, "i64 str str", reply=True)
@dataclass(frozen=True, slots=True)
class TableSegmentNotEmpty:
    """A table segment holds keys: not deleted."""

    request_id: int
    segment: str
    server_stack_trace: str


@command(81, "i64 str str", reply=True)
@dataclass(frozen=True, slots=True)
class TableKeyDoesNotExist:
    """A conditional update named a key that does not exist."""

    request_id: int
    segment: str
    server_stack_trace: str


@command(82, "i64 str str", reply=True)
@dataclass(frozen=True, slots=True)
class TableKeyBadVersion:
    """A conditional update named a key whose version differs."""

    request_id: int
    segment: str
    server_stack_trace: str


@command(84, "i64 str keys bytes", reply=True)
@dataclass(frozen=True, slots=True)
class TableKeysRead:
    """A page of keys and where to continue."""

    request_id: int
    segment: str
    keys: tuple[TableKey, ...]
    continuation_token: bytes


@command(86, "i64 str entries bytes", reply=True)
@dataclass(frozen=True, slots=True)
class TableEntriesRead:
    """A page of entries and where to continue."""

    request_id: int
    segment: str
    entries: tuple[tuple[TableKey, TableValue], ...]
    continuation_token: bytes


@command(87, "i64 str entries bool bool i64", reply=True)
@dataclass(frozen=True, slots=True)
class TableEntriesDeltaRead:
    """Entries changed since a position, and the position after them."""

    request_id: int
    segment: str
    entries: tuple[tuple[TableKey, TableValue], ...]
    should_clear: bool
    reached_end: bool
    last_position: int


@command(91, "i64 str strs i64s", reply=True)
@dataclass(frozen=True, slots=True)
class SegmentsBatchMerged:
    """Segments were merged into ``target``."""

    request_id: int
    target: str
    sources: tuple[str, ...]
    new_target_write_offset: tuple[int, ...]


@command(-4, "i64", reply=True)
@dataclass(frozen=True, slots=True)
class StorageFlushed:
    """A container was flushed to long-term storage."""

    request_id: int


@command(-6, "i64 chunks", reply=True)
@dataclass(frozen=True, slots=True)
class StorageChunksListed:
    """A segment's storage chunks."""

    request_id: int
    chunks: tuple[ChunkInfo, ...]
