"""Stream metadata as clients see it: frozen stream segments, successors, cuts, stream info, transactions.

They hold only ints/floats/strs/bools/tuples/nested frozen dataclasses, so the wire
protocol encodes them generically. The controller's model of them (the state machine
it replays, scale planning, its records) is ``segmentstore.controller.model``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from .errors import InvalidArgumentError
from .limits import MAX_NAME_PART_CHARS, shorten

__all__ = [
    "StreamSegment",
    "SuccessorInfo",
    "StreamCut",
    "StreamInfo",
    "TransactionSegment",
    "TransactionInfo",
    "check_stream_name",
    "check_scope_name",
    "stream_segment_name",
    "KEY_EPSILON",
    "FRAMING_INGESTWM",
    "FRAMING_PRAVEGA",
    "FRAMINGS",
]

KEY_EPSILON = 1e-9
"""Key-range boundaries closer than this are the same boundary (they are snapped together)."""

FRAMING_INGESTWM = "ingestwm"
"""A stream's events framed by ingestwm's writers (``readergroup.format.events``): routing key and
event time stored with each payload. Every stream created through ingestwm's own API."""
FRAMING_PRAVEGA = "pravega"
"""A stream's events framed as Pravega's writers do: a 4-byte big-endian type (0) and a 4-byte
big-endian length before each payload; no routing key or event time stored. Every stream created
through the Pravega controller (``segmentstore.pravega``)."""
FRAMINGS = (FRAMING_INGESTWM, FRAMING_PRAVEGA)

_PART = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{MAX_NAME_PART_CHARS - 1}}}")


@dataclass(frozen=True, slots=True)
class StreamSegment:
    """One segment of a stream: its number, epoch, store name, routing-key range and creation time."""

    stream: str
    number: int
    epoch: int
    name: str
    key_low: float
    key_high: float
    creation_time: int

    def contains_key(self, key: float) -> bool:
        """Whether the routing-key hash ``key`` falls in ``[key_low, key_high)``. O(1)."""
        return self.key_low <= key < self.key_high

    def overlaps(self, low: float, high: float) -> bool:
        """Whether ``[low, high)`` and this segment's range share a non-empty interval. O(1)."""
        return max(low, self.key_low) < min(high, self.key_high)


@dataclass(frozen=True, slots=True)
class SuccessorInfo:
    """A successor of a sealed segment, with the names of all its predecessors."""

    segment: StreamSegment
    predecessors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StreamCut:
    """A position in every segment of a set covering a stream: ``(segment name, offset)`` sorted by name."""

    stream: str
    positions: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.stream, str):
            raise InvalidArgumentError(f"StreamCut.stream must be a str, got {self.stream!r}")
        pos = tuple((p[0], p[1]) for p in self.positions)
        for name, offset in pos:
            if not isinstance(name, str) or isinstance(offset, bool) or not isinstance(offset, int):
                raise InvalidArgumentError(
                    f"stream cut of {self.stream!r}: position ({name!r}, {offset!r}) must be (str, int)"
                )
            if offset < 0:
                raise InvalidArgumentError(
                    f"stream cut of {self.stream!r}: offset {offset} of segment {name!r} is negative"
                )
        names = [n for n, _ in pos]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"stream cut of {self.stream!r} names a segment twice: {names}")
        object.__setattr__(self, "positions", tuple(sorted(pos)))

    def as_dict(self) -> dict[str, int]:
        """``{segment name: offset}``. O(n)."""
        return dict(self.positions)

    def to_json(self) -> str:
        """A JSON object ``{"stream": ..., "positions": [[name, offset], ...]}``."""
        return json.dumps({"stream": self.stream, "positions": [list(p) for p in self.positions]})

    @classmethod
    def from_json(cls, text: str | bytes) -> StreamCut:
        """The inverse of ``to_json``; raises ``InvalidArgumentError`` on malformed input."""
        try:
            obj = json.loads(text)
            return cls(obj["stream"], tuple((str(n), o) for n, o in obj["positions"]))
        except InvalidArgumentError:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise InvalidArgumentError(f"not a stream cut in JSON: {e} in {text!r:.80}") from None


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream's state: sealed or not, current epoch, active segments sorted by ``key_low``, and how
    its events are framed (``FRAMING_INGESTWM`` or ``FRAMING_PRAVEGA``: a reader decodes by it).

    For a sealed stream the active segments are its last ones (now sealed).
    """

    name: str
    sealed: bool
    epoch: int
    active_segments: tuple[StreamSegment, ...]
    framing: str = field(default=FRAMING_INGESTWM, metadata={"wire_since": 2})
    """Added in protocol version 2: an ingestwm stream's ``StreamInfo`` reads as before on older peers."""


@dataclass(frozen=True, slots=True)
class TransactionSegment:
    """One segment of a stream transaction: the parent stream segment and the transaction segment's name."""

    parent: StreamSegment
    name: str


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    """A transaction begun on a stream: one transaction segment per segment active at its epoch."""

    stream: str
    epoch: int
    segments: tuple[TransactionSegment, ...]

    @property
    def segment_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.segments)


def check_stream_name(stream: object) -> str:
    """Validate ``scope/name`` (letters, digits, ``_.-``; not starting with ``_``, which is reserved)."""
    if not isinstance(stream, str):
        raise InvalidArgumentError(f"stream name must be a str 'scope/name', got {type(stream).__name__}")
    parts = stream.split("/")
    if len(parts) != 2 or not all(_PART.fullmatch(p) for p in parts):
        raise InvalidArgumentError(
            f"stream name {shorten(stream)} must be 'scope/name', each part of letters, digits, "
            "'_', '.', '-', not starting with '_' or '.' (reserved for system streams), and at most "
            f"{MAX_NAME_PART_CHARS} characters (segmentstore.limits.MAX_NAME_PART_CHARS)"
        )
    return stream


def check_scope_name(scope: object) -> str:
    """Validate a scope name: one part of ``check_stream_name``'s ``scope/name``."""
    if not isinstance(scope, str) or not _PART.fullmatch(scope):
        raise InvalidArgumentError(
            f"scope name {shorten(scope)} must be letters, digits, '_', '.', '-', not starting with "
            f"'_' or '.' (reserved), and at most {MAX_NAME_PART_CHARS} characters"
        )
    return scope


def stream_segment_name(stream: str, number: int, epoch: int) -> str:
    """The store segment name of segment ``number`` (created in ``epoch``) of ``stream``."""
    return f"{stream}/{number}.#epoch.{epoch}"
