"""Source offsets: per-segment positions of every stream read, and the ingestion watermark there.

Spark stores each micro-batch's end offset in its checkpoint as JSON; a restart
resumes from it. An offset holds, per stream:

- ``positions``: ``{segment: byte offset}`` of every segment being read (the frontier),
  each at a frame boundary;
- ``done``: segments that are complete (sealed and read to the end) and whose
  successors are all in ``positions``; the next offset drops them;
- ``starts``: segments that joined in this micro-batch (successors, new streams) and
  the offset they are read from (absent: 0).

and one ``watermark``: the ingestion watermark (docs/design.md §1) at those positions, global
over all streams read, never decreasing from one offset to the next. JSON keys are
sorted, so equal offsets serialise equally (Spark compares them as strings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidOffsetError

__all__ = ["StreamOffset", "SourceOffset", "OFFSET_VERSION"]

OFFSET_VERSION = 1


@dataclass(frozen=True, slots=True)
class StreamOffset:
    """One stream's part of an offset (see the module docstring)."""

    positions: Mapping[str, int]
    done: frozenset[str] = frozenset()
    starts: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", dict(sorted(self.positions.items())))
        object.__setattr__(self, "starts", dict(sorted(self.starts.items())))
        object.__setattr__(self, "done", frozenset(self.done))
        for name in self.done:
            if name not in self.positions:
                raise InvalidOffsetError(f"offset: done segment {name!r} has no position")
        for name, begin in self.starts.items():
            end = self.positions.get(name)
            if end is None or begin > end:
                raise InvalidOffsetError(
                    f"offset: segment {name!r} starts at {begin} but its position is {end}"
                )

    def begin_of(self, segment: str) -> int:
        """Where a segment that joined in this micro-batch is read from. O(1)."""
        return self.starts.get(segment, 0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"positions": dict(self.positions)}
        if self.done:
            out["done"] = sorted(self.done)
        if self.starts:
            out["starts"] = dict(self.starts)
        return out

    def __hash__(self) -> int:
        return hash((tuple(self.positions.items()), self.done, tuple(self.starts.items())))


@dataclass(frozen=True, slots=True)
class SourceOffset:
    """A micro-batch boundary: every stream's ``StreamOffset`` and the global ingestion watermark."""

    streams: Mapping[str, StreamOffset]
    watermark: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", dict(sorted(self.streams.items())))

    def stream(self, name: str) -> StreamOffset | None:
        """The offset of one stream, or None when it is not (yet) read. O(1)."""
        return self.streams.get(name)

    def total_position(self) -> int:
        """Sum of all positions: how far the query has read, in bytes. O(segments)."""
        return sum(sum(s.positions.values()) for s in self.streams.values())

    def moved_from(self, start: SourceOffset) -> bool:
        """Whether this offset reads past ``start`` (a position, a joined segment or stream). O(segments)."""
        for name, so in self.streams.items():
            prev = start.stream(name)
            if prev is None or so.done or so.starts:
                return True
            live = {seg: pos for seg, pos in prev.positions.items() if seg not in prev.done}
            if dict(so.positions) != live:
                return True
        return False

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able dict Spark stores (keys sorted)."""
        return {
            "streams": {name: s.to_dict() for name, s in self.streams.items()},
            "v": OFFSET_VERSION,
            "watermark": self.watermark,
        }

    @classmethod
    def from_dict(cls, obj: object) -> SourceOffset:
        """Parse ``to_dict``'s output (e.g. from a checkpoint); raises ``InvalidOffsetError``."""
        if not isinstance(obj, dict):
            raise InvalidOffsetError(f"offset must be a JSON object, got {obj!r:.80}")
        if obj.get("v") != OFFSET_VERSION:
            raise InvalidOffsetError(f"offset: version {obj.get('v')!r} is not {OFFSET_VERSION}")
        watermark = obj.get("watermark")
        if isinstance(watermark, bool) or not isinstance(watermark, int):
            raise InvalidOffsetError(f"offset: watermark must be an int, got {watermark!r}")
        streams = obj.get("streams")
        if not isinstance(streams, dict):
            raise InvalidOffsetError(f"offset: streams must be an object, got {streams!r:.80}")
        out: dict[str, StreamOffset] = {}
        for name, s in streams.items():
            if not isinstance(s, dict):
                raise InvalidOffsetError(f"offset: stream {name!r} must be an object, got {s!r:.80}")
            out[name] = StreamOffset(
                positions=_int_map(s.get("positions"), f"stream {name!r} positions"),
                done=frozenset(_str_list(s.get("done", []), f"stream {name!r} done")),
                starts=_int_map(s.get("starts", {}), f"stream {name!r} starts"),
            )
        return cls(out, watermark)

    def __hash__(self) -> int:
        return hash((tuple(self.streams.items()), self.watermark))


def _int_map(obj: object, what: str) -> dict[str, int]:
    if not isinstance(obj, dict):
        raise InvalidOffsetError(f"offset: {what} must be an object, got {obj!r:.80}")
    for k, v in obj.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidOffsetError(f"offset: {what}: segment {k!r} has offset {v!r}, not an int >= 0")
    return dict(obj)


def _str_list(obj: object, what: str) -> list[str]:
    if not isinstance(obj, list) or not all(isinstance(x, str) for x in obj):
        raise InvalidOffsetError(f"offset: {what} must be a list of segment names, got {obj!r:.80}")
    return list(obj)
