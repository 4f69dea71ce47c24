"""Where a segment's bytes live. In memory here; the durable store adds a file-backed kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .records import walk_records

__all__ = ["SegmentData", "MemorySegmentData"]


class SegmentData(Protocol):
    """The bytes ``[start_offset, length)`` of one segment."""

    @property
    def start_offset(self) -> int: ...

    @property
    def length(self) -> int: ...

    def append(self, data: bytes | memoryview) -> None:
        """Append ``data`` (a byte view is read during the call only, never kept). O(len)."""
        ...

    def read(self, offset: int, n: int) -> bytes: ...

    def walk_records(self, offset: int, n: int, max_records: int) -> tuple[int, int]:
        """``records.walk_records`` over bytes ``[offset, offset + n)`` (the caller holds the lock)."""
        ...

    def truncate(self, offset: int) -> None: ...

    def close(self) -> None: ...

    def remove(self) -> None:
        """Close, and delete what holds the bytes (the data of a create that failed)."""
        ...

    def nbytes(self) -> int: ...


class MemorySegmentData:
    """Segment bytes in one ``bytearray``. Append O(len) amortised, read O(n), truncate amortised O(1)."""

    __slots__ = ("_base", "_buf", "append", "start_offset")

    def __init__(self, start_offset: int = 0) -> None:
        self._buf = bytearray()
        self._base = start_offset  # segment offset of self._buf[0]
        self.start_offset = start_offset
        """The first byte kept (a plain attribute: a read checks it, with no call)."""
        self.append: Callable[[bytes | memoryview], None] = self._buf.extend
        """Append ``data``: the buffer's own ``extend``, so a single append calls C directly. O(len)."""

    @property
    def length(self) -> int:
        return self._base + len(self._buf)

    def read(self, offset: int, n: int) -> bytes:
        """Bytes ``[offset, offset + n)``: one copy through a view (a bytearray slice would copy twice),
        the view gone when the expression is (the buffer may grow again). O(n)."""
        i = offset - self._base
        return bytes(memoryview(self._buf)[i : i + n])

    def walk_records(self, offset: int, n: int, max_records: int) -> tuple[int, int]:
        """``records.walk_records`` over bytes ``[offset, offset + n)`` in place, without copying them.

        The buffer cannot grow while a view of it exists, so the caller holds the lock that
        appends take, and the view is gone when this returns. O(records).
        """
        i = offset - self._base
        with memoryview(self._buf) as view, view[i : i + n] as part:
            return walk_records(part, max_records)

    def truncate(self, offset: int) -> None:
        self.start_offset = offset
        dead = offset - self._base
        if dead > 4096 and dead * 2 > len(self._buf):  # compact once half the buffer is dead
            del self._buf[:dead]
            self._base = offset

    def close(self) -> None:
        self._buf = bytearray()
        self.append = self._buf.extend

    def remove(self) -> None:
        self.close()

    def nbytes(self) -> int:
        return len(self._buf)
