"""Future reads: reads waiting at (or beyond) a segment's tail.

A future read completes when data arrives at its offset, when the segment's tail
watermark increases (a zero-length ``SegmentRead`` carrying the new watermark, PDP-26
"Future Reads"), when the segment is sealed (end of segment), when its deadline on the
ingestion clock passes, or when ``wait`` runs out of real time (a zero-length read).
It fails with ``SegmentNotFoundError`` if the segment is deleted or merged away.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Generator
from typing import Any

from .results import SegmentRead

__all__ = ["FutureRead"]


class FutureRead(concurrent.futures.Future[SegmentRead]):
    """A ``concurrent.futures.Future`` of a ``SegmentRead``; also awaitable from asyncio."""

    def __init__(
        self,
        segment: str,
        offset: int,
        max_length: int,
        watermark: int,
        deadline_ms: int | None,
        expire: Callable[[FutureRead], None],
    ) -> None:
        super().__init__()
        self.segment = segment
        self.offset = offset
        self.max_length = max_length
        self.watermark = watermark  # the watermark when the read started waiting
        self.deadline_ms = deadline_ms
        self._expire = expire

    def wait(self, timeout_s: float | None = None) -> SegmentRead:
        """Block until complete; after ``timeout_s`` seconds, a zero-length read at the current watermark."""
        try:
            return self.result(timeout_s)
        except concurrent.futures.TimeoutError:
            self._expire(self)
            return self.result()

    def __await__(self) -> Generator[Any, None, SegmentRead]:
        return asyncio.wrap_future(self).__await__()

    def __repr__(self) -> str:
        state = "done" if self.done() else "waiting"
        return f"<FutureRead {self.segment}@{self.offset} {state}>"
