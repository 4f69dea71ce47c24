"""The commands a Pravega client sends a segment store, with their type codes and layouts.

One frozen dataclass per command of the 0.3.7 client's ``Requests`` (``Hello`` and
``KeepAlive`` travel both ways), fields in wire order (``segmentstore.pravega.wire``
explains the encodings). Names are Pravega's, without its ``Command`` suffix.
"""

from __future__ import annotations

from dataclasses import dataclass

from .wire import TableKey, TableValue, command

__all__ = [
    "Hello",
    "KeepAlive",
    "Padding",
    "PartialEvent",
    "Event",
    "SetupAppend",
    "AppendBlock",
    "AppendBlockEnd",
    "ConditionalAppend",
    "ReadSegment",
    "GetStreamSegmentInfo",
    "CreateSegment",
    "SealSegment",
    "DeleteSegment",
    "UpdateSegmentPolicy",
    "GetSegmentAttribute",
    "UpdateSegmentAttribute",
    "TruncateSegment",
    "CreateTransientSegment",
    "MergeSegments",
    "GetTableSegmentInfo",
    "CreateTableSegment",
    "DeleteTableSegment",
    "MergeTableSegments",
    "SealTableSegment",
    "UpdateTableEntries",
    "RemoveTableKeys",
    "ReadTable",
    "ReadTableKeys",
    "ReadTableEntries",
    "ReadTableEntriesDelta",
    "ConditionalBlockEnd",
    "MergeSegmentsBatch",
    "FlushToStorage",
    "ListStorageChunks",
]


@command(-127, "i32 i32", request=True, reply=True)
@dataclass(frozen=True, slots=True)
class Hello:
    """The connection's first command, either way: the versions a side speaks."""

    high_version: int
    low_version: int


@command(100, "", request=True, reply=True)
@dataclass(frozen=True, slots=True)
class KeepAlive:
    """Keeps an idle connection open; the segment store echoes it."""


@command(-1, "pad", request=True)
@dataclass(frozen=True, slots=True)
class Padding:
    """Zero bytes a writer may send between commands (ignored)."""

    length: int


@command(-2, "rest", request=True)
@dataclass(frozen=True, slots=True)
class PartialEvent:
    """Part of an event inside a Java client's append block."""

    data: bytes


@command(0, "event", request=True)
@dataclass(frozen=True, slots=True)
class Event:
    """One event: the 8-byte header (type 0, length) every appended event carries."""

    data: bytes


@command(1, "i64 u128 str str", request=True)
@dataclass(frozen=True, slots=True)
class SetupAppend:
    """A writer's first command on a segment: answered with its last event number there."""

    request_id: int
    writer_id: int
    segment: str
    delegation_token: str


@command(3, "u128 bytes", request=True)
@dataclass(frozen=True, slots=True)
class AppendBlock:
    """The start of a Java client's append block (the Rust client sends whole ``AppendBlockEnd``s)."""

    writer_id: int
    data: bytes


@command(4, "u128 i32 bytes i32 i64 i64", request=True)
@dataclass(frozen=True, slots=True)
class AppendBlockEnd:
    """A block of whole events of one writer, numbered up to ``last_event_number``."""

    writer_id: int
    size_of_whole_events: int
    data: bytes
    num_event: int
    last_event_number: int
    request_id: int


@command(5, "u128 i64 i64 event i64", request=True)
@dataclass(frozen=True, slots=True)
class ConditionalAppend:
    """One event, appended only if the segment's length is ``expected_offset``."""

    writer_id: int
    event_number: int
    expected_offset: int
    event: bytes
    request_id: int


@command(9, "str i64 i32 str i64", request=True)
@dataclass(frozen=True, slots=True)
class ReadSegment:
    """Read from ``offset``; at the tail the store waits a little for data."""

    segment: str
    offset: int
    suggested_length: int
    delegation_token: str
    request_id: int


@command(11, "i64 str str", request=True)
@dataclass(frozen=True, slots=True)
class GetStreamSegmentInfo:
    """A segment's lengths, seal and last-modified time."""

    request_id: int
    segment_name: str
    delegation_token: str


@command(20, "i64 str i32 u8 str", request=True)
@dataclass(frozen=True, slots=True)
class CreateSegment:
    """Create a segment (the controller's, not a client's)."""

    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str


@command(28, "i64 str str", request=True)
@dataclass(frozen=True, slots=True)
class SealSegment:
    """Seal a segment: no more appends."""

    request_id: int
    segment: str
    delegation_token: str


@command(30, "i64 str str", request=True)
@dataclass(frozen=True, slots=True)
class DeleteSegment:
    """Delete a segment."""

    request_id: int
    segment: str
    delegation_token: str


@command(32, "i64 str i32 u8 str", request=True)
@dataclass(frozen=True, slots=True)
class UpdateSegmentPolicy:
    """Change a segment's auto-scaling policy (the controller's)."""

    request_id: int
    segment: str
    target_rate: int
    scale_type: int
    delegation_token: str


@command(34, "i64 str u128 str", request=True)
@dataclass(frozen=True, slots=True)
class GetSegmentAttribute:
    """Read one attribute of a segment."""

    request_id: int
    segment_name: str
    attribute_id: int
    delegation_token: str


@command(36, "i64 str u128 i64 i64 str", request=True)
@dataclass(frozen=True, slots=True)
class UpdateSegmentAttribute:
    """Compare-and-set one attribute of a segment."""

    request_id: int
    segment_name: str
    attribute_id: int
    new_value: int
    expected_value: int
    delegation_token: str


@command(38, "i64 str i64 str", request=True)
@dataclass(frozen=True, slots=True)
class TruncateSegment:
    """Drop a segment's bytes before ``truncation_offset``."""

    request_id: int
    segment: str
    truncation_offset: int
    delegation_token: str


@command(40, "i64 u128 str str", request=True)
@dataclass(frozen=True, slots=True)
class CreateTransientSegment:
    """A writer's scratch segment for an event over 8 MiB, merged into its parent after."""

    request_id: int
    writer_id: int
    segment: str
    delegation_token: str


@command(58, "i64 str str str", request=True)
@dataclass(frozen=True, slots=True)
class MergeSegments:
    """Append a sealed segment's bytes to ``target`` and delete it."""

    request_id: int
    target: str
    source: str
    delegation_token: str


@command(68, "i64 str str", request=True)
@dataclass(frozen=True, slots=True)
class GetTableSegmentInfo:
    """A table segment's sizes."""

    request_id: int
    segment_name: str
    delegation_token: str


@command(70, "i64 str str", request=True)
@dataclass(frozen=True, slots=True)
class CreateTableSegment:
    """Create a table segment (a reader group's state lives in one)."""

    request_id: int
    segment: str
    delegation_token: str


@command(71, "i64 str bool str", request=True)
@dataclass(frozen=True, slots=True)
class DeleteTableSegment:
    """Delete a table segment (only if empty when ``must_be_empty``)."""

    request_id: int
    segment: str
    must_be_empty: bool
    delegation_token: str


@command(72, "i64 str str str", request=True)
@dataclass(frozen=True, slots=True)
class MergeTableSegments:
    """Merge one table segment into another."""

    request_id: int
    target: str
    source: str
    delegation_token: str


@command(73, "i64 str str", request=True)
@dataclass(frozen=True, slots=True)
class SealTableSegment:
    """Seal a table segment."""

    request_id: int
    segment: str
    delegation_token: str


@command(74, "i64 str str entries i64", request=True)
@dataclass(frozen=True, slots=True)
class UpdateTableEntries:
    """Put entries, each conditional on its key's version."""

    request_id: int
    segment: str
    delegation_token: str
    table_entries: tuple[tuple[TableKey, TableValue], ...]
    table_segment_offset: int


@command(76, "i64 str str keys i64", request=True)
@dataclass(frozen=True, slots=True)
class RemoveTableKeys:
    """Remove keys, each conditional on its version."""

    request_id: int
    segment: str
    delegation_token: str
    keys: tuple[TableKey, ...]
    table_segment_offset: int


@command(78, "i64 str str keys", request=True)
@dataclass(frozen=True, slots=True)
class ReadTable:
    """The entries of some keys."""

    request_id: int
    segment: str
    delegation_token: str
    keys: tuple[TableKey, ...]


@command(83, "i64 str str i32 bytes", request=True)
@dataclass(frozen=True, slots=True)
class ReadTableKeys:
    """Iterate over a table's keys."""

    request_id: int
    segment: str
    delegation_token: str
    suggested_key_count: int
    continuation_token: bytes


@command(85, "i64 str str i32 bytes", request=True)
@dataclass(frozen=True, slots=True)
class ReadTableEntries:
    """Iterate over a table's entries."""

    request_id: int
    segment: str
    delegation_token: str
    suggested_entry_count: int
    continuation_token: bytes


@command(88, "i64 str str i64 i32", request=True)
@dataclass(frozen=True, slots=True)
class ReadTableEntriesDelta:
    """The entries changed at or after ``from_position``."""

    request_id: int
    segment: str
    delegation_token: str
    from_position: int
    suggested_entry_count: int


@command(89, "u128 i64 i64 bytes i64", request=True)
@dataclass(frozen=True, slots=True)
class ConditionalBlockEnd:
    """A byte stream's block, appended only if the segment's length is ``expected_offset``."""

    writer_id: int
    event_number: int
    expected_offset: int
    data: bytes
    request_id: int


@command(90, "i64 str strs str", request=True)
@dataclass(frozen=True, slots=True)
class MergeSegmentsBatch:
    """Merge several segments into ``target_segment_id``."""

    request_id: int
    target_segment_id: str
    source_segment_ids: tuple[str, ...]
    delegation_token: str


@command(-3, "i32 str i64", request=True)
@dataclass(frozen=True, slots=True)
class FlushToStorage:
    """An administrator's flush of a container to long-term storage."""

    container_id: int
    delegation_token: str
    request_id: int


@command(-5, "str str i64", request=True)
@dataclass(frozen=True, slots=True)
class ListStorageChunks:
    """An administrator's listing of a segment's storage chunks."""

    segment: str
    delegation_token: str
    request_id: int
