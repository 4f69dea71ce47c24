"""Frozen results the store returns: segment info, append results and reads.

``AppendResult`` is an immutable ``NamedTuple`` rather than a frozen dataclass: it is
built once per append on the hot path, where a frozen dataclass's ``__init__`` cost
about a third of a 100-byte append (issue 14). It has the same fields, equality and
immutability; the wire protocol registers it like the dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "SegmentInfo",
    "AppendResult",
    "SegmentRead",
    "MergeResult",
    "RecordScan",
    "RecordsRead",
    "PackedReads",
    "NOTHING_NEW",
    "READ",
    "FAILED",
    "UNREAD",
]


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


# ---------------------------------------------------------------------- read_many, packed (embedded)
NOTHING_NEW, READ, FAILED, UNREAD = 0, 1, 2, 3
"""``PackedReads.kinds``: ``read_many``'s answer ``None``; a read; a failed read; not read (ask again)."""

_NO_OFFSETS = np.empty(0, np.int64)
_NO_OFFSETS.flags.writeable = False


class PackedReads(NamedTuple):
    """``read_many``'s answers in columns, for a decoder of many blocks at once (``EmbeddedClient``).

    Per request, in order: ``kinds`` (``NOTHING_NEW``, ``READ``, ``FAILED``, ``UNREAD``) and, for a
    read, ``reads``: its ``SegmentRead``'s ``(offset, length of data, watermark, end_of_segment,
    at_tail)`` (else ``None``). Each read's bytes in ``pieces`` (joined in ``data``); for the reads with
    data, in order, one row each of ``meta`` (int64: where its bytes start in ``data``, how many, its
    offset, its watermark, where its records' starts begin in ``starts``, how many), the starts of
    their whole records in ``starts``, and in ``values`` the watermarks at each and at the end of the
    last (one more per read than its starts). ``errors``: a failed request's class name and message.
    ``answers()`` are ``read_many``'s.

    An immutable ``NamedTuple`` rather than a frozen dataclass (as ``AppendResult``): one is built per
    reader's look, where a frozen dataclass's ``__init__`` cost about a twentieth of the call.
    Not compared (numpy fields).
    """

    kinds: list[int]
    reads: list[tuple[int, int, int, bool, bool] | None]
    pieces: list[bytes]
    """The bytes of each read with data, in order (``data`` joins them)."""
    meta: Any
    """int64 ``(reads with data, 6)``: a row per read with data, as above."""
    starts: Any
    values: Any
    errors: dict[int, tuple[str, str]]

    @property
    def data(self) -> bytes:
        """The reads' bytes one after the other (joined on each use: take it once). O(bytes)."""
        return self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)

    def answers(self) -> tuple[RecordsRead | None, ...]:
        """Every answer as ``read_many`` gives it. O(bytes + records)."""
        out: list[RecordsRead | None] = []
        row = 0
        rows, pieces, starts, values = self.meta.tolist(), self.pieces, self.starts, self.values
        for i, kind in enumerate(self.kinds):
            r = self.reads[i]
            if kind == NOTHING_NEW:
                out.append(None)
            elif r is None:
                cls, message = self.errors[i] if kind == FAILED else (None, "")
                out.append(RecordsRead(None, _NO_OFFSETS, _NO_OFFSETS, cls, message))
            else:
                offset, n, watermark, eos, tail = r
                read = SegmentRead(offset, pieces[row] if n else b"", watermark, eos, tail)
                if n:
                    s0, k = rows[row][4], rows[row][5]
                    out.append(RecordsRead(read, starts[s0 : s0 + k], values[s0 + row : s0 + row + k + 1]))
                    row += 1
                else:
                    out.append(RecordsRead(read, _NO_OFFSETS, np.array([watermark], np.int64)))
        return tuple(out)
