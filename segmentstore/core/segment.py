"""One segment's state inside a container: metadata, attributes, bytes, watermark index, waiting reads."""

from __future__ import annotations

from ..attributes import CREATION_TIME, LAST_WRITE_TIME
from ..checks import checked
from ..future_read import FutureRead
from ..results import SegmentInfo
from .storage import MemorySegmentData, SegmentData
from .watermark_index import WatermarkIndex

__all__ = ["Segment", "SYSTEM_PREFIX", "TRANSACTION_SEPARATOR", "is_system_segment"]

SYSTEM_PREFIX = "_system/"
"""Segments of system streams (Pravega's ``_system`` scope); the advancer leaves them alone."""

TRANSACTION_SEPARATOR = "#transaction."


def is_system_segment(name: str) -> bool:
    """Whether ``name`` belongs to a system stream. O(1)."""
    return name.startswith(SYSTEM_PREFIX)


class Segment:
    """Mutable state of one segment; the container's lock guards every access."""

    __slots__ = (
        "attributes",
        "creation_time",
        "data",
        "futures",
        "last_used",
        "last_write_time",
        "length",
        "name",
        "parent",
        "sealed",
        "windex",
        "writer_uuids",
    )

    def __init__(
        self,
        name: str,
        timestamp: int,
        parent: str | None = None,
        data: SegmentData | None = None,
        windex: WatermarkIndex | None = None,
    ) -> None:
        self.name = name
        self.parent = parent
        self.sealed = False
        self.creation_time = timestamp
        self.last_write_time = timestamp
        self.attributes: dict[int, int] = {}
        self.writer_uuids: dict[int, int] = {}
        """Last event number of each 128-bit writer id (``append(writer_uuid=...)``), apart from the
        64-bit attributes so that no id is ever cut down to fit them."""
        self.data: SegmentData = data if data is not None else MemorySegmentData()
        self.length = self.data.length
        """The end offset, kept by the container with every write (the hot path reads no property)."""
        self.windex = windex if windex is not None else WatermarkIndex(timestamp, self.data.length)
        self.futures: list[FutureRead] = []
        self.last_used = timestamp

    @property
    def is_transaction(self) -> bool:
        return self.parent is not None

    @property
    def start_offset(self) -> int:
        return self.data.start_offset

    def info(self) -> SegmentInfo:
        """A frozen snapshot of this segment's metadata. O(1)."""
        return SegmentInfo(
            self.name,
            self.data.start_offset,
            self.data.length,
            self.sealed,
            self.creation_time,
            self.last_write_time,
            self.parent is not None,
            self.parent,
        )

    def all_attributes(self) -> dict[int, int]:
        """User attributes plus the core ones. O(k)."""
        out = dict(self.attributes)
        out[CREATION_TIME] = self.creation_time
        out[LAST_WRITE_TIME] = self.last_write_time
        return out

    def tail_watermark(self) -> int:
        """``LAST_WRITE_TIME - 1``: the watermark at the tail. O(1)."""
        return self.last_write_time - 1

    @checked
    def _check(self) -> None:
        """Assert this segment's invariants (for stress and property tests)."""
        w = self.windex
        w._check()
        assert self.length == self.data.length, f"{self.name}: length {self.length} != {self.data.length}"
        assert w.length == self.data.length, (
            f"{self.name}: index length {w.length} != data length {self.data.length}"
        )
        assert w.start_offset == self.data.start_offset, (
            f"{self.name}: index start {w.start_offset} != data start {self.data.start_offset}"
        )
        assert 0 <= self.data.start_offset <= self.data.length, f"{self.name}: bad start offset"
        assert w.tail_time == self.last_write_time, (
            f"{self.name}: index tail {w.tail_time} != LAST_WRITE_TIME {self.last_write_time}"
        )
        assert self.creation_time <= self.last_write_time, f"{self.name}: LAST_WRITE_TIME < CREATION_TIME"
        assert CREATION_TIME not in self.attributes and LAST_WRITE_TIME not in self.attributes
        for uuid in self.writer_uuids:
            assert 0 <= uuid < 2**128, f"{self.name}: writer uuid {uuid} outside [0, 2^128)"
        for f in self.futures:
            assert f.segment == self.name, f"{self.name}: holds a future read of {f.segment}"
