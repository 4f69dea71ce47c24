"""The controller's model of streams: a pure state machine over its records, scale planning, record codec.

``StreamMetadata`` applies the controller's records (create, scale/roll, seal, delete,
commit, update, truncate; scope and unscope): the controller applies each record live and
again when it replays ``_system/_streams``. Records are ``u32`` length + JSON. A create
record without ``framing``/``config`` (all that older builds wrote) is an ingestwm-framed
stream with ``default_config``; a stream's scope exists from its create record on, and
explicitly from a scope record. ``plan_scale`` checks a scale request and snaps the new
ranges onto the sealed ones' exact boundaries.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Sequence
from typing import Any

from ..checks import checked
from ..errors import DataCorruptionError, InvalidScaleError
from ..stream_metadata import (
    FRAMING_INGESTWM,
    FRAMINGS,
    KEY_EPSILON,
    StreamInfo,
    StreamSegment,
    stream_segment_name,
)
from .stream_config import StreamConfig, default_config

__all__ = [
    "plan_scale",
    "StreamMetadata",
    "SegmentEntry",
    "StreamEntry",
    "encode_record",
    "parse_records",
    "segment_record",
]


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


class SegmentEntry:
    """Mutable metadata of one stream segment; ``deleted``: truncated away (wholly before a cut)."""

    __slots__ = ("deleted", "info", "predecessors", "sealed", "successors")

    def __init__(self, info: StreamSegment, predecessors: tuple[str, ...] = ()) -> None:
        self.info = info
        self.sealed = False
        self.deleted = False
        self.successors: tuple[str, ...] = ()
        self.predecessors = predecessors


class StreamEntry:
    """Mutable metadata of one stream: its segments, active ones sorted by ``key_low``, its head
    (``initial``: the first segments, or those of the last truncation ``cut``), framing and config."""

    __slots__ = (
        "active",
        "config",
        "cut",
        "epoch",
        "framing",
        "initial",
        "name",
        "next_number",
        "sealed",
        "segments",
    )

    def __init__(self, name: str, segs: list[StreamSegment], framing: str, config: StreamConfig) -> None:
        self.name = name
        self.epoch = 0
        self.sealed = False
        self.framing = framing
        self.config = config
        self.segments = {s.name: SegmentEntry(s) for s in segs}
        self.active = sorted(segs, key=lambda s: s.key_low)
        self.initial = tuple(s.name for s in self.active)
        self.cut: dict[str, int] = {}
        self.next_number = max(s.number for s in segs) + 1

    def info(self) -> StreamInfo:
        return StreamInfo(self.name, self.sealed, self.epoch, tuple(self.active), self.framing)


class StreamMetadata:
    """Every scope, and every stream's segments, successors and state, changed only by ``apply(record)``.
    Not locked."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamEntry] = {}
        self.by_segment: dict[str, StreamEntry] = {}
        self.scopes: set[str] = set()

    def apply(self, rec: dict[str, Any]) -> None:
        """Apply one record (live, and during replay). O(segments touched)."""
        op = rec["op"]
        if op == "scope":
            self.scopes.add(rec["scope"])
            return
        if op == "unscope":
            self.scopes.remove(rec["scope"])
            return
        name = rec["stream"]
        if op == "create":
            segs = [_seg_from(name, s) for s in rec["segs"]]
            framing = rec.get("framing", FRAMING_INGESTWM)
            if framing not in FRAMINGS:
                raise ValueError(f"stream {name!r} has the unknown framing {framing!r}")
            where = f"the create record of stream {name!r}"
            config = (
                StreamConfig.from_record(rec["config"], where)
                if "config" in rec
                else default_config(len(segs))
            )
            st = StreamEntry(name, segs, framing, config)
            self.streams[name] = st
            self.scopes.add(name.split("/", 1)[0])
            for n in st.segments:
                self.by_segment[n] = st
        elif op in ("scale", "roll"):
            st = self.streams[name]
            sealed = [st.segments[n] for n in rec["seal"]]
            new = [_seg_from(name, s) for s in rec["segs"]]
            for s in new:
                preds = tuple(p.info.name for p in sealed if s.overlaps(p.info.key_low, p.info.key_high))
                st.segments[s.name] = SegmentEntry(s, preds)
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
        elif op == "update":
            self.streams[name].config = StreamConfig.from_record(
                rec["config"], f"an update of stream {name!r}"
            )
        elif op == "truncate":
            st = self.streams[name]
            cut = {str(n): int(o) for n, o in rec["cut"]}
            for n in rec["drop"]:
                st.segments[n].deleted = True
            st.initial = tuple(sorted(cut, key=lambda n: st.segments[n].info.key_low))
            st.cut = cut
        elif op != "commit":
            raise DataCorruptionError(f"stream metadata: unknown record {op!r} for stream {name!r}")

    # ------------------------------------------------------------------ snapshots (``log_snapshots``)
    def snapshot_items(self) -> list[dict[str, Any]]:
        """The model as a snapshot's items: the scopes, then one item per stream with every segment
        (sealed, truncated away, successors), the active ones, the head, the cut, framing and config.
        ``from_snapshot`` of them is this model. O(segments)."""
        items: list[dict[str, Any]] = [{"scopes": sorted(self.scopes)}]
        for st in self.streams.values():
            items.append(
                {
                    "stream": st.name,
                    "epoch": st.epoch,
                    "sealed": st.sealed,
                    "framing": st.framing,
                    "config": st.config.to_record(),
                    "next": st.next_number,
                    "segs": [
                        [segment_record(e.info), e.sealed, e.deleted, [*e.predecessors], [*e.successors]]
                        for e in st.segments.values()
                    ],
                    "active": [s.name for s in st.active],
                    "initial": list(st.initial),
                    "cut": [[n, o] for n, o in st.cut.items()],
                }
            )
        return items

    @classmethod
    def from_snapshot(cls, items: list[dict[str, Any]]) -> StreamMetadata:
        """The model a snapshot's items hold (``snapshot_items``). ``KeyError``/``ValueError``/``TypeError``
        for items that are not one. O(segments)."""
        m = cls()
        m.scopes = {str(s) for s in items[0]["scopes"]}
        for d in items[1:]:
            name = str(d["stream"])
            config = StreamConfig.from_record(d["config"], f"the snapshot of stream {name!r}")
            framing = str(d["framing"])
            if framing not in FRAMINGS:
                raise ValueError(f"stream {name!r} has the unknown framing {framing!r}")
            segs: dict[str, SegmentEntry] = {}
            for rec, sealed, deleted, preds, succs in d["segs"]:
                e = SegmentEntry(_seg_from(name, rec), tuple(str(p) for p in preds))
                e.sealed, e.deleted, e.successors = bool(sealed), bool(deleted), tuple(str(x) for x in succs)
                segs[e.info.name] = e
            st = StreamEntry(name, [segs[str(n)].info for n in d["active"]], framing, config)
            st.segments = segs
            st.epoch, st.sealed, st.next_number = int(d["epoch"]), bool(d["sealed"]), int(d["next"])
            st.initial = tuple(str(n) for n in d["initial"])
            st.cut = {str(n): int(o) for n, o in d["cut"]}
            m.streams[name] = st
            for n in segs:
                m.by_segment[n] = st
        return m

    @checked
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
            head = [st.segments[n] for n in st.initial]
            assert head[0].info.key_low == 0.0 and head[-1].info.key_high == 1.0, f"{name}: head range"
            for a2, b2 in itertools.pairwise(head):
                assert a2.info.key_high == b2.info.key_low, f"{name}: head segments do not tile"
            assert all(not h.deleted for h in head) and set(st.cut) <= set(st.initial), f"{name}: head"
            for n, seg in st.segments.items():
                assert not seg.deleted or (seg.sealed and n not in active), f"{n}: deleted yet active"
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
        if not isinstance(rec, dict) or "op" not in rec or ("stream" not in rec and "scope" not in rec):
            raise DataCorruptionError(f"{where!r}: bad record at offset {pos}: {rec!r:.80}")
        out.append((pos, rec))
        pos += 4 + n
    return out
