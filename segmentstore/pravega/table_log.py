"""The records of a table segment's log: how a Pravega table's updates are kept in a store segment.

A table segment (``tables``) is an append-only log in one store segment; each update
command is one store append holding one record per key, so it is durable and atomic
like any append. A record is::

    u8 kind (1 put, 2 removal) | i64 version | u32 key length | u32 value length | key | value

big-endian, 17 bytes of header. A put's ``version`` is the offset it was written at, as
Pravega's versions are, except for a put a compaction copied forward, which keeps the
version it had (so a client's conditional update still matches after a compaction). A
removal's version is the offset it was written at; its value is empty.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import DataCorruptionError

__all__ = ["PUT", "REMOVAL", "RECORD_HEADER", "TableRecord", "encode_records", "parse_records"]

PUT = 1
REMOVAL = 2
RECORD_HEADER = struct.Struct(">BqII")
"""Kind, version, key length, value length."""


@dataclass(frozen=True, slots=True)
class TableRecord:
    """One record of a table's log: at ``offset`` (its first byte), ``size`` bytes in all."""

    offset: int
    kind: int
    version: int
    key: bytes
    value: bytes

    @property
    def size(self) -> int:
        return RECORD_HEADER.size + len(self.key) + len(self.value)

    @property
    def end(self) -> int:
        """The offset after this record (where the next one starts)."""
        return self.offset + self.size


def encode_records(records: Iterable[TableRecord]) -> bytes:
    """The bytes of ``records`` as one append (their offsets must follow each other). O(bytes)."""
    out: list[bytes] = []
    for r in records:
        out.append(RECORD_HEADER.pack(r.kind, r.version, len(r.key), len(r.value)))
        out.append(r.key)
        out.append(r.value)
    return b"".join(out)


def parse_records(data: bytes | memoryview, base: int, where: str) -> list[TableRecord]:
    """The records of ``data``, read at store offset ``base`` of the segment ``where``. O(bytes).

    ``DataCorruptionError`` naming the segment and offset if the bytes are not whole
    records (something other than this module wrote the segment).
    """
    out: list[TableRecord] = []
    pos, n = 0, len(data)
    while pos < n:
        if pos + RECORD_HEADER.size > n:
            raise DataCorruptionError(
                f"table segment {where!r}: {n - pos} bytes at offset {base + pos} are not a whole "
                "record header"
            )
        kind, version, klen, vlen = RECORD_HEADER.unpack_from(data, pos)
        start = pos + RECORD_HEADER.size
        if kind not in (PUT, REMOVAL) or start + klen + vlen > n or (kind == REMOVAL and vlen):
            raise DataCorruptionError(
                f"table segment {where!r}: the bytes at offset {base + pos} are not a table record "
                f"(kind {kind}, key {klen} bytes, value {vlen} bytes, {n - start} bytes left)"
            )
        key = bytes(data[start : start + klen])
        value = bytes(data[start + klen : start + klen + vlen])
        out.append(TableRecord(base + pos, kind, version, key, value))
        pos = start + klen + vlen
    return out
