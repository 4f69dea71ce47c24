"""Reads fetched ahead by ``RemoteClient``: a sequential read's next chunk, asked for in the background."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from ..errors import SegmentStoreError
from ..net.commands import decode_read
from ..results import SegmentRead

__all__ = ["Fetch", "ReadAhead"]


class Fetch:
    """A read fetched ahead: set once its reply (or failure) arrived."""

    __slots__ = ("event", "read")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.read: SegmentRead | None = None

    def done(self, ok: bool, result: Any, payload: memoryview) -> None:
        if ok:
            with contextlib.suppress(SegmentStoreError):
                self.read = decode_read(result, bytes(payload))
        self.event.set()


class ReadAhead:
    """Reads fetched ahead, by ``(segment, offset, max_length)``; at most ``limit`` kept."""

    def __init__(self, limit: int = 64) -> None:
        self._lock = threading.Lock()
        self._fetches: dict[tuple[str, int, int], Fetch] = {}
        self._limit = limit

    def put(self, key: tuple[str, int, int], fetch: Fetch) -> None:
        with self._lock:
            self._fetches[key] = fetch
            if len(self._fetches) > self._limit:
                del self._fetches[next(iter(self._fetches))]

    def take(self, key: tuple[str, int, int], timeout_s: float) -> SegmentRead | None:
        """The read fetched ahead for ``key`` if it succeeded short of the tail, else ``None``."""
        with self._lock:
            fetch = self._fetches.pop(key, None)
        if fetch is None or not fetch.event.wait(timeout_s):
            return None
        r = fetch.read
        return r if r is not None and not r.at_tail else None

    def clear(self) -> None:
        with self._lock:
            self._fetches.clear()
