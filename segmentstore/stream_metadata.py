"""Stream metadata: the frozen types clients see, and the in-memory model the controller replays.

The frozen types (stream segments, successors, stream cuts, stream info, transactions)
hold only ints/floats/strs/bools/tuples/nested frozen dataclasses, so the wire
protocol can encode them generically. ``StreamMetadata`` is a pure state machine over
the controller's records (create, scale/roll, seal, delete, commit): the controller
applies each record live and again when it replays ``_system/_streams``. Records are
``u32`` length + JSON. ``plan_scale`` checks a scale request and snaps the new ranges
onto the sealed ones' exact boundaries.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import DataCorruptionError, InvalidArgumentError, InvalidScaleError

__all__ = [
    "StreamSegment",
    "SuccessorInfo",
    "StreamCut",
    "StreamInfo",
    "TransactionSegment",
    "TransactionInfo",
    "check_stream_name",
    "stream_segment_name",
    "plan_scale",
    "KEY_EPSILON",
    "StreamMetadata",
    "encode_record",
    "parse_records",
    "segment_record",
]

KEY_EPSILON = 1e-9
"""Key-range boundaries closer than this are the same boundary (they are snapped together)."""

_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}")


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
    """A stream's state: sealed or not, current epoch, active segments sorted by ``key_low``.

    For a sealed stream the active segments are its last ones (now sealed).
    """

    name: str
    sealed: bool
    epoch: int
    active_segments: tuple[StreamSegment, ...]


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
            f"stream name {stream!r} must be 'scope/name', each part of letters, digits, '_', '.', '-', "
            "not starting with '_' or '.' (reserved for system streams)"
        )
    return stream


def stream_segment_name(stream: str, number: int, epoch: int) -> str:
    """The store segment name of segment ``number`` (created in ``epoch``) of ``stream``."""
    return f"{stream}/{number}.#epoch.{epoch}"


def plan_scale(
    stream: str,
    sealed: Sequence[StreamSegment],
    new_ranges: Sequence[tuple[float, float]],
) -> list[tuple[float, float]]:
    """Check that ``new_ranges`` exactly cover the union of ``sealed``'s ranges; return them snapped.

    Boundaries within ``KEY_EPSILON`` of each other or of a sealed boundary are made
    equal, so the result tiles the sealed ranges exactly. Sorted by low. O(n log n).
    """
    if isinstance(new_ranges, (str, bytes)) or not isinstance(new_ranges, Sequence):
        raise InvalidScaleError(f"stream {stream!r}: new_ranges must be a sequence of (low, high) pairs")
    if not new_ranges:
        raise InvalidScaleError(f"stream {stream!r}: new_ranges is empty")
    ranges: list[tuple[float, float]] = []
    for r in new_ranges:
        try:
            lo, hi = r
        except (TypeError, ValueError):
            raise InvalidScaleError(f"stream {stream!r}: new range {r!r} is not a (low, high) pair") from None
        for v in (lo, hi):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InvalidScaleError(f"stream {stream!r}: new range {r!r} has a non-numeric bound {v!r}")
        if not 0.0 <= lo < hi <= 1.0:
            raise InvalidScaleError(
                f"stream {stream!r}: new range [{lo}, {hi}) must satisfy 0 <= low < high <= 1"
            )
        ranges.append((float(lo), float(hi)))
    ranges.sort()
    want = _union([(s.key_low, s.key_high) for s in sealed])
    # Group the new ranges into maximal runs of adjacent ranges, rejecting overlaps.
    runs: list[list[tuple[float, float]]] = [[ranges[0]]]
    for lo, hi in ranges[1:]:
        prev_hi = runs[-1][-1][1]
        if lo < prev_hi - KEY_EPSILON:
            raise InvalidScaleError(
                f"stream {stream!r}: new range [{lo}, {hi}) overlaps [{runs[-1][-1][0]}, {prev_hi})"
            )
        if lo > prev_hi + KEY_EPSILON:
            runs.append([(lo, hi)])
        else:
            runs[-1].append((lo, hi))
    got = [(run[0][0], run[-1][1]) for run in runs]
    if len(got) != len(want) or any(
        abs(a[0] - b[0]) > KEY_EPSILON or abs(a[1] - b[1]) > KEY_EPSILON
        for a, b in zip(got, want, strict=True)
    ):
        raise InvalidScaleError(
            f"stream {stream!r}: new ranges cover {_fmt(got)} but the sealed segments "
            f"{[s.name for s in sealed]} cover {_fmt(want)}; they must be equal"
        )
    out: list[tuple[float, float]] = []
    for run, (w_lo, w_hi) in zip(runs, want, strict=True):
        low = w_lo
        for i, (_, hi) in enumerate(run):
            high = w_hi if i == len(run) - 1 else hi
            if not low < high:
                raise InvalidScaleError(
                    f"stream {stream!r}: new range ending at {hi} is empty after snapping"
                )
            out.append((low, high))
            low = high
    return out


def _union(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge ranges into maximal disjoint intervals (adjacent ones joined). O(n log n)."""
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + KEY_EPSILON:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _fmt(ranges: list[tuple[float, float]]) -> str:
    return " + ".join(f"[{lo}, {hi})" for lo, hi in ranges)


# ---------------------------------------------------------------------- the replayed model
_HEADER = struct.Struct("<I")


class _Seg:
    """Mutable metadata of one stream segment."""

    __slots__ = ("info", "predecessors", "sealed", "successors")

    def __init__(self, info: StreamSegment, predecessors: tuple[str, ...] = ()) -> None:
        self.info = info
        self.sealed = False
        self.successors: tuple[str, ...] = ()
        self.predecessors = predecessors


class _Stream:
    """Mutable metadata of one stream: its segments, active ones sorted by ``key_low``."""

    __slots__ = ("active", "epoch", "initial", "name", "next_number", "sealed", "segments")

    def __init__(self, name: str, segs: list[StreamSegment]) -> None:
        self.name = name
        self.epoch = 0
        self.sealed = False
        self.segments = {s.name: _Seg(s) for s in segs}
        self.active = sorted(segs, key=lambda s: s.key_low)
        self.initial = tuple(s.name for s in self.active)
        self.next_number = max(s.number for s in segs) + 1

    def info(self) -> StreamInfo:
        return StreamInfo(self.name, self.sealed, self.epoch, tuple(self.active))


class StreamMetadata:
    """Every stream's segments, successors and state, changed only by ``apply(record)``. Not locked."""

    def __init__(self) -> None:
        self.streams: dict[str, _Stream] = {}
        self.by_segment: dict[str, _Stream] = {}

    def apply(self, rec: dict[str, Any]) -> None:
        """Apply one record (live, and during replay). O(segments touched)."""
        op, name = rec["op"], rec["stream"]
        if op == "create":
            st = _Stream(name, [_seg_from(name, s) for s in rec["segs"]])
            self.streams[name] = st
            for n in st.segments:
                self.by_segment[n] = st
        elif op in ("scale", "roll"):
            st = self.streams[name]
            sealed = [st.segments[n] for n in rec["seal"]]
            new = [_seg_from(name, s) for s in rec["segs"]]
            for s in new:
                preds = tuple(p.info.name for p in sealed if s.overlaps(p.info.key_low, p.info.key_high))
                st.segments[s.name] = _Seg(s, preds)
                self.by_segment[s.name] = st
            for p in sealed:
                p.sealed = True
                p.successors = tuple(s.name for s in new if s.overlaps(p.info.key_low, p.info.key_high))
            gone = set(rec["seal"])
            st.active = sorted([s for s in st.active if s.name not in gone] + new, key=lambda s: s.key_low)
            st.epoch = int(rec["epoch"])
            st.next_number = max(st.next_number, *(s.number + 1 for s in new))
        elif op == "seal":
            st = self.streams[name]
            st.sealed = True
            for s in st.active:
                st.segments[s.name].sealed = True
        elif op == "delete":
            st = self.streams.pop(name)
            for n in st.segments:
                del self.by_segment[n]
        elif op != "commit":
            raise DataCorruptionError(f"stream metadata: unknown record {op!r} for stream {name!r}")

    def _check(self) -> None:
        """Assert tiling of active ranges, successor symmetry, numbering and the segment index."""
        count = 0
        for name, st in self.streams.items():
            assert st.name == name
            count += len(st.segments)
            act = st.active
            assert act and act[0].key_low == 0.0 and act[-1].key_high == 1.0, f"{name}: active range"
            for a, b in itertools.pairwise(act):
                assert a.key_high == b.key_low, f"{name}: active segments {a.name}, {b.name} do not tile"
            numbers = [s.info.number for s in st.segments.values()]
            assert len(set(numbers)) == len(numbers) and max(numbers) < st.next_number
            active = {s.name for s in act}
            for n, seg in st.segments.items():
                i = seg.info
                assert self.by_segment[n] is st and i.stream == name
                assert n == stream_segment_name(name, i.number, i.epoch) and i.epoch <= st.epoch
                assert seg.sealed == (n not in active or st.sealed), f"{n}: sealed flag"
                assert n in active or seg.successors, f"{n}: sealed by a scale without successors"
                for s in seg.successors:
                    assert n in st.segments[s].predecessors, f"{n} -> {s} is not symmetric"
                    assert st.segments[s].info.overlaps(i.key_low, i.key_high)
                for p in seg.predecessors:
                    assert n in st.segments[p].successors, f"{p} -> {n} is not symmetric"
        assert count == len(self.by_segment)


def segment_record(s: StreamSegment) -> list[Any]:
    """A segment as persisted: ``[number, epoch, key_low, key_high, creation_time]``."""
    return [s.number, s.epoch, s.key_low, s.key_high, s.creation_time]


def _seg_from(stream: str, j: list[Any]) -> StreamSegment:
    number, epoch, lo, hi, ct = j
    return StreamSegment(
        stream,
        int(number),
        int(epoch),
        stream_segment_name(stream, number, epoch),
        float(lo),
        float(hi),
        int(ct),
    )


def encode_record(rec: dict[str, Any]) -> bytes:
    """One record as appended: ``u32`` length + compact JSON."""
    body = json.dumps(rec, separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


def parse_records(data: bytes, where: str) -> list[tuple[int, dict[str, Any]]]:
    """Split a record log into ``(offset, record)``; ``DataCorruptionError`` names ``where``. O(bytes)."""
    out: list[tuple[int, dict[str, Any]]] = []
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise DataCorruptionError(f"{where!r}: truncated record header at offset {pos}")
        (n,) = _HEADER.unpack_from(data, pos)
        body = data[pos + 4 : pos + 4 + n]
        if len(body) != n:
            raise DataCorruptionError(f"{where!r}: truncated record at offset {pos}")
        try:
            rec = json.loads(body)
        except ValueError as e:
            raise DataCorruptionError(f"{where!r}: bad record at offset {pos}: {e}") from None
        if not isinstance(rec, dict) or "op" not in rec or "stream" not in rec:
            raise DataCorruptionError(f"{where!r}: bad record at offset {pos}: {rec!r:.80}")
        out.append((pos, rec))
        pos += 4 + n
    return out
