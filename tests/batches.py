"""Test helper: the events of a reader's ``EventBatch`` one by one, as the per-event API would give them."""

from __future__ import annotations

from collections.abc import Iterator

from readergroup import EventBatch

__all__ = ["event_rows"]


def event_rows(b: EventBatch) -> Iterator[tuple[str, int, int, bytes]]:
    """``(segment, offset, ingestion_time, payload)`` of each event of ``b``, in order. O(len(b))."""
    for k in range(len(b)):
        yield b.segments[b.segment_index[k]], int(b.offset[k]), int(b.ingestion_time[k]), b.payload[k].as_py()
