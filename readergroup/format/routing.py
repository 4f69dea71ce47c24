"""Routing keys to stream segments: a stable key hash into [0, 1) and a table of current key ranges.

The hash is BLAKE2b of the key's UTF-8 bytes (64 bits, top 53 used), so every
process and every run maps a key to the same point; writers of one stream therefore
agree on a key's segment. ``RoutingTable`` maps points to segments by binary search
over the key ranges; a writer builds a new one from the active segments after a seal.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Iterable

from segmentstore import StreamSegment
from segmentstore.checks import checked

from ..errors import InvalidEventError

__all__ = ["key_hash", "RoutingTable"]

_SCALE = 1.0 / (1 << 53)


@functools.lru_cache(maxsize=1 << 16)
def _hash(key: str) -> float:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 11) * _SCALE


def key_hash(routing_key: str) -> float:
    """The routing key's point in [0, 1); stable across processes. ~0.1 µs cached, ~1 µs otherwise."""
    if not isinstance(routing_key, str):
        raise InvalidEventError(
            f"routing key must be a str, got {type(routing_key).__name__} {routing_key!r:.60}"
        )
    return _hash(routing_key)


class RoutingTable:
    """Key ranges -> segments. Built in O(n log n), lookup O(log n). Not thread-safe (the writer locks)."""

    __slots__ = ("_highs", "_lows", "_segs")

    def __init__(self, segments: Iterable[StreamSegment]) -> None:
        entries = sorted(((s.key_low, s.key_high, s) for s in segments), key=lambda e: e[0])
        self._set(entries)

    def _set(self, entries: list[tuple[float, float, StreamSegment]]) -> None:
        self._lows = [e[0] for e in entries]
        self._highs = [e[1] for e in entries]
        self._segs = [e[2] for e in entries]

    def segment_for(self, routing_key: str) -> StreamSegment:
        """The segment the key routes to. O(log n)."""
        return self.segment_for_hash(key_hash(routing_key))

    def segment_for_hash(self, h: float) -> StreamSegment:
        """The segment owning point ``h`` of [0, 1). O(log n)."""
        i = bisect.bisect_right(self._lows, h) - 1
        if i < 0 or h >= self._highs[i]:
            raise InvalidEventError(f"key hash {h} is not covered by the routing table {self!r}")
        return self._segs[i]

    @property
    def segments(self) -> tuple[StreamSegment, ...]:
        """The distinct segments routed to, by key order."""
        out: dict[str, StreamSegment] = {}
        for s in self._segs:
            out.setdefault(s.name, s)
        return tuple(out.values())

    def __repr__(self) -> str:
        rows = zip(self._lows, self._highs, self._segs, strict=True)
        parts = ", ".join(f"[{lo}, {hi})->{s.name}" for lo, hi, s in rows)
        return f"RoutingTable({parts})"

    @checked
    def _check(self) -> None:
        """Assert that the ranges tile [0, 1) and each lies within its segment's range."""
        assert self._lows and self._lows[0] == 0.0 and self._highs[-1] == 1.0, repr(self)
        for i, (lo, hi, seg) in enumerate(zip(self._lows, self._highs, self._segs, strict=True)):
            assert lo < hi and seg.key_low <= lo and hi <= seg.key_high, repr(self)
            if i:
                assert self._highs[i - 1] == lo, repr(self)
