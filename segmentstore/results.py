"""Frozen results the store returns: segment info, append results and reads.

``AppendResult`` is an immutable ``NamedTuple`` rather than a frozen dataclass: it is
built once per append on the hot path, where a frozen dataclass's ``__init__`` cost
about a third of a 100-byte append (issue 14). It has the same fields, equality and
immutability; the wire protocol registers it like the dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["SegmentInfo", "AppendResult", "SegmentRead", "MergeResult", "RecordScan", "RecordsRead"]


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What ``get_info`` says of a segment (Pravega's StreamSegmentInfo + creation time)."""

    name: str
    start_offset: int
    length: int
    sealed: bool
    creation_time: int
    last_write_time: int
    is_transaction: bool = False
    parent: str | None = None


class AppendResult(NamedTuple):
    """Where an append landed and the ingestion time it was given.

    ``duplicate`` is true for a retried append (writer id + event number not above the
    last one stored): nothing was stored again, and ``offset`` is the current length.
    """

    offset: int
    length: int
    timestamp: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class MergeResult:
    """Where a merged transaction landed in its parent, and the merge's timestamp."""

    offset: int
    length: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """Bytes ``[offset, offset + len(data))`` of a segment and the watermark after them.

    ``watermark`` is ``watermark_at(offset + len(data))``: every byte at or after the
    end of this read, and in successor segments, has ingestion time > ``watermark``.
    ``at_tail`` says the read reached the segment's current length; ``end_of_segment``
    says the segment is sealed and nothing will follow. A zero-length read is legal: it
    is how a tail read learns that time moved.
    """

    offset: int
    data: bytes
    watermark: int
    end_of_segment: bool
    at_tail: bool

    @property
    def end_offset(self) -> int:
        return self.offset + len(self.data)


@dataclass(frozen=True, slots=True)
class RecordScan:
    """What ``scan_records`` found: ``records`` whole length-prefixed records in ``[offset, end)``.

    ``end`` is a record boundary (``offset`` if there are none); a scan that found as
    many records as asked for, or none, is complete; one that found fewer may have
    stopped at its per-call bound: go on from ``end``.
    """

    offset: int
    end: int
    records: int


# ---------------------------------------------------------------------- read_many (one segment's answer)
@dataclass(frozen=True, slots=True, eq=False)
class RecordsRead:
    """One request's answer in ``read_many``: the read, and the watermarks at its records.

    ``read`` is what ``read`` would have returned (``None`` if the request failed or was
    left for another call). ``starts`` are the offsets at which the whole length-prefixed
    records of ``read.data`` start (int64), and ``watermarks`` is ``watermark_at`` at each
    of them and then at the end of the last whole record (one more item than ``starts``).
    ``error`` names the ``SegmentStoreError`` class a ``read`` of this request would have
    raised (``message`` its text). ``read`` and ``error`` both ``None``: not read in this
    call (the reply was full), ask again. Compared by identity (numpy fields).
    """

    read: SegmentRead | None
    starts: Any
    watermarks: Any
    error: str | None = None
    message: str = ""
