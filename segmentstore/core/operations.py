"""Operations: what the operation processor stamps, the durable log records and recovery replays.

Each operation carries the sequence number and ingestion timestamp the processor gave
it, and everything needed to replay it deterministically (resolved attribute values,
not update rules; the offset an append landed at).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Operation",
    "CreateSegment",
    "Append",
    "MergeTransaction",
    "UpdateAttributes",
    "Seal",
    "Truncate",
    "Delete",
    "TEMPORAL_OPERATIONS",
]


@dataclass(frozen=True, slots=True)
class Operation:
    """Base of all operations: sequence number and ingestion timestamp."""

    seq: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CreateSegment(Operation):
    """Create ``name``; a transaction segment when ``parent`` is set. Temporal."""

    name: str
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class Append(Operation):
    """Append ``data`` at ``offset`` of ``name``; optionally record a writer's event number. Temporal.

    The writer is ``writer_id`` (64 bits, kept as an attribute) or ``writer_uuid`` (a
    128-bit id such as a Pravega writer's, kept in the segment's writer table), never both.
    """

    name: str
    offset: int
    data: bytes
    writer_id: int | None = None
    event_number: int | None = None
    writer_uuid: int | None = None


@dataclass(frozen=True, slots=True)
class MergeTransaction(Operation):
    """Merge sealed transaction ``txn`` at ``offset`` of ``parent``. Temporal for the parent."""

    txn: str
    parent: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class UpdateAttributes(Operation):
    """Set resolved attribute ``values`` (key, value; value None: remove the key) on ``name``. Temporal
    (also when empty)."""

    name: str
    values: tuple[tuple[int, int | None], ...]


@dataclass(frozen=True, slots=True)
class Seal(Operation):
    """Seal ``name``: no more writes. Temporal; its time is the segment's final watermark + 1."""

    name: str


@dataclass(frozen=True, slots=True)
class Truncate(Operation):
    """Move the start offset of ``name`` to ``offset``. Not temporal."""

    name: str
    offset: int


@dataclass(frozen=True, slots=True)
class Delete(Operation):
    """Delete ``name``. Not temporal."""

    name: str


TEMPORAL_OPERATIONS: tuple[type[Operation], ...] = (
    CreateSegment,
    Append,
    MergeTransaction,
    UpdateAttributes,
    Seal,
)
"""Operations that set ``LAST_WRITE_TIME`` (docs/design.md §1)."""
