"""The reader-group state log: update records, their batches, and the byte format (no pickle).

A reader group's state lives in the store as an ordered log of *batches* in one
``_system/_rg/<group>`` segment (Pravega's state synchronizer segment). Each batch is
one conditional append, so it is applied whole or not at all, in log order, by every
process that holds a replica of the state (``readergroup.group_state.synchronizer``).

Frame: ``b"RGS"``, a format version byte, the payload's length (u32) and CRC-32 (u32),
then the payload: compact JSON ``{"g": group id, "o": origin, "q": seq, "u": [update, ...]}``.
``origin``/``seq`` name the batch (a process that lost an append's reply finds out
whether it landed); ``g`` is the group's incarnation (a group deleted and created again
under the same name is another log). A frame that is cut short is not a batch yet; a
frame with a bad magic, version or CRC is corruption and is never applied
(``GroupStateCorruptError``).

Every update is a frozen dataclass. Whatever an update needs from the store (a
successor's start and watermark, positions' watermarks, a reset's entries) was computed
by the process that issued it and travels inside it, so every replica applies the same
batch identically without a store call. ``Snapshot`` holds a whole state: the log
always starts with one, and compaction writes one and truncates the log below it.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from segmentstore import StreamCut, StreamSegment

from ..config import ReaderGroupConfig, TimeDomain
from ..errors import GroupStateCorruptError

__all__ = [
    "FORMAT_VERSION",
    "Position",
    "SuccessorPlan",
    "AddReader",
    "RemoveReader",
    "Report",
    "Complete",
    "Release",
    "Acquire",
    "Rebalance",
    "InitiateCheckpoint",
    "CheckpointReached",
    "Reset",
    "Snapshot",
    "Update",
    "Batch",
    "ReportFramer",
    "encode_batch",
    "encode_snapshot_batch",
    "encode_json",
    "encode_str",
    "decode_batches",
    "segment_to_obj",
    "segment_from_obj",
    "config_to_obj",
    "config_from_obj",
]

FORMAT_VERSION = 1
_MAGIC = b"RGS"
_HEADER = struct.Struct("<3sBII")  # magic, version, payload length, crc32
HEADER_BYTES = _HEADER.size
_PACK = _HEADER.pack
_CRC32 = zlib.crc32

Position = tuple[str, int, int]
"""``(segment, offset, watermark there)``."""


@dataclass(frozen=True, slots=True)
class SuccessorPlan:
    """A successor of a completed segment as the issuer found it in the store.

    ``start`` and ``watermark`` are its start offset and ``watermark_at`` there;
    ``to_come`` the predecessors that were neither in the state nor completed and are
    still to be read (descendants of entries), so the successor waits for them too.
    """

    segment: StreamSegment
    predecessors: tuple[str, ...]
    start: int
    watermark: int
    to_come: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AddReader:
    """A reader joins; its membership token is the log position of this update."""

    reader_id: str


@dataclass(frozen=True, slots=True)
class RemoveReader:
    """A reader leaves (closed, declared offline, expired); ``positions`` move its segments first."""

    reader_id: str
    token: int
    epoch: int
    positions: tuple[Position, ...] | None = None


@dataclass(frozen=True, slots=True)
class Report:
    """Acknowledged positions (and watermarks there) of a reader's segments."""

    reader_id: str
    token: int
    epoch: int
    positions: tuple[Position, ...]


@dataclass(frozen=True, slots=True)
class Complete:
    """A reader read ``segment`` to its sealed end: drop it, register its successors."""

    reader_id: str
    token: int
    epoch: int
    segment: str
    final_watermark: int
    successors: tuple[SuccessorPlan, ...]


@dataclass(frozen=True, slots=True)
class Release:
    """A reader returns these segments (reported first) to the unassigned pool."""

    reader_id: str
    token: int
    epoch: int
    segments: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Acquire:
    """A reader takes unassigned segments (``GroupModel.acquire_count``: Pravega's count), oldest
    watermark first."""

    reader_id: str
    token: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Rebalance:
    """A reader releases what is above its fair share (highest watermarks first), then acquires
    (``GroupModel.release_count``, ``acquire_count``)."""

    reader_id: str
    token: int
    epoch: int


@dataclass(frozen=True, slots=True)
class InitiateCheckpoint:
    """Queue checkpoint ``name`` in ``epoch``."""

    name: str
    epoch: int


@dataclass(frozen=True, slots=True)
class CheckpointReached:
    """A reader (having reported its positions) reached checkpoint ``name``."""

    reader_id: str
    token: int
    epoch: int
    name: str


@dataclass(frozen=True, slots=True)
class Reset:
    """Start epoch ``epoch`` at ``entries`` (positions with watermarks materialised from the index)."""

    epoch: int
    entries: tuple[tuple[StreamSegment, int, int], ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A whole state at a log position (the model's own JSON-ready form, ``GroupModel.to_obj``)."""

    state: dict[str, Any]


Update = (
    AddReader
    | RemoveReader
    | Report
    | Complete
    | Release
    | Acquire
    | Rebalance
    | InitiateCheckpoint
    | CheckpointReached
    | Reset
    | Snapshot
)


@dataclass(frozen=True, slots=True)
class Batch:
    """One frame of the log: its updates, where it starts and ends, and who wrote it."""

    offset: int
    end: int
    group_id: str
    origin: str
    seq: int
    updates: tuple[Update, ...]


# ---------------------------------------------------------------------- values
def segment_to_obj(s: StreamSegment) -> list[Any]:
    return [s.stream, s.number, s.epoch, s.name, s.key_low, s.key_high, s.creation_time]


def segment_from_obj(o: Sequence[Any]) -> StreamSegment:
    stream, number, epoch, name, low, high, created = o
    return StreamSegment(
        str(stream), int(number), int(epoch), str(name), float(low), float(high), int(created)
    )


def _positions(o: Sequence[Any]) -> tuple[Position, ...]:
    return tuple((str(n), int(p), int(w)) for n, p, w in o)


def config_to_obj(c: ReaderGroupConfig) -> dict[str, Any]:
    """A ``ReaderGroupConfig`` as JSON-ready values (kept in every snapshot). O(streams)."""
    return {
        "streams": list(c.streams),
        "starting_cuts": [[cut.stream, [[n, o] for n, o in cut.positions]] for cut in c.starting_cuts],
        "time_domain": c.time_domain.value,
        "position_report_interval_ms": c.position_report_interval_ms,
        "read_buffer_bytes": c.read_buffer_bytes,
        "max_event_time_lag_ms": c.max_event_time_lag_ms,
        "reader_timeout_ms": c.reader_timeout_ms,
        "state_snapshot_interval": c.state_snapshot_interval,
        "checkpoints_kept": c.checkpoints_kept,
        "max_outstanding_checkpoints": c.max_outstanding_checkpoints,
    }


def config_from_obj(o: dict[str, Any]) -> ReaderGroupConfig:
    cuts = tuple(StreamCut(s, tuple((n, int(off)) for n, off in pos)) for s, pos in o["starting_cuts"])
    return ReaderGroupConfig(
        tuple(o["streams"]),
        starting_cuts=cuts,
        time_domain=TimeDomain(o["time_domain"]),
        position_report_interval_ms=int(o["position_report_interval_ms"]),
        read_buffer_bytes=int(o["read_buffer_bytes"]),
        max_event_time_lag_ms=int(o["max_event_time_lag_ms"]),
        reader_timeout_ms=int(o["reader_timeout_ms"]),
        state_snapshot_interval=int(o["state_snapshot_interval"]),
        checkpoints_kept=int(o.get("checkpoints_kept", 3)),  # (not in snapshots before version 2)
        max_outstanding_checkpoints=int(o.get("max_outstanding_checkpoints", 3)),  # (not in older snapshots)
    )


# ---------------------------------------------------------------------- updates <-> JSON
def _plan_to(p: SuccessorPlan) -> list[Any]:
    return [segment_to_obj(p.segment), list(p.predecessors), p.start, p.watermark, list(p.to_come)]


def _plan_from(o: Sequence[Any]) -> SuccessorPlan:
    seg, preds, start, wm, to_come = o
    return SuccessorPlan(segment_from_obj(seg), tuple(preds), int(start), int(wm), tuple(to_come))


_ENCODERS: dict[type, tuple[str, Callable[[Any], list[Any]]]] = {
    AddReader: ("add", lambda u: [u.reader_id]),
    RemoveReader: (
        "remove",
        lambda u: [
            u.reader_id,
            u.token,
            u.epoch,
            None if u.positions is None else [list(p) for p in u.positions],
        ],
    ),
    Report: ("report", lambda u: [u.reader_id, u.token, u.epoch, [list(p) for p in u.positions]]),
    Complete: (
        "complete",
        lambda u: [
            u.reader_id,
            u.token,
            u.epoch,
            u.segment,
            u.final_watermark,
            [_plan_to(p) for p in u.successors],
        ],
    ),
    Release: ("release", lambda u: [u.reader_id, u.token, u.epoch, list(u.segments)]),
    Acquire: ("acquire", lambda u: [u.reader_id, u.token, u.epoch]),
    Rebalance: ("rebalance", lambda u: [u.reader_id, u.token, u.epoch]),
    InitiateCheckpoint: ("checkpoint", lambda u: [u.name, u.epoch]),
    CheckpointReached: ("reached", lambda u: [u.reader_id, u.token, u.epoch, u.name]),
    Reset: ("reset", lambda u: [u.epoch, [[segment_to_obj(s), p, w] for s, p, w in u.entries]]),
    Snapshot: ("snapshot", lambda u: [u.state]),
}

_DECODERS: dict[str, Callable[[list[Any]], Update]] = {
    "add": lambda a: AddReader(str(a[0])),
    "remove": lambda a: RemoveReader(
        str(a[0]), int(a[1]), int(a[2]), None if a[3] is None else _positions(a[3])
    ),
    "report": lambda a: Report(str(a[0]), int(a[1]), int(a[2]), _positions(a[3])),
    "complete": lambda a: Complete(
        str(a[0]), int(a[1]), int(a[2]), str(a[3]), int(a[4]), tuple(_plan_from(p) for p in a[5])
    ),
    "release": lambda a: Release(str(a[0]), int(a[1]), int(a[2]), tuple(str(n) for n in a[3])),
    "acquire": lambda a: Acquire(str(a[0]), int(a[1]), int(a[2])),
    "rebalance": lambda a: Rebalance(str(a[0]), int(a[1]), int(a[2])),
    "checkpoint": lambda a: InitiateCheckpoint(str(a[0]), int(a[1])),
    "reached": lambda a: CheckpointReached(str(a[0]), int(a[1]), int(a[2]), str(a[3])),
    "reset": lambda a: Reset(int(a[0]), tuple((segment_from_obj(s), int(p), int(w)) for s, p, w in a[1])),
    "snapshot": lambda a: Snapshot(dict(a[0])),
}


def encode_update(u: Update) -> list[Any]:
    tag, enc = _ENCODERS[type(u)]
    return [tag, *enc(u)]


def decode_update(o: Any) -> Update:
    if not isinstance(o, list) or not o or o[0] not in _DECODERS:
        raise ValueError(f"unknown update {o!r:.80}")
    return _DECODERS[o[0]](o[1:])


# ---------------------------------------------------------------------- frames
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""``json.dumps(..., separators=(",", ":"), allow_nan=False)`` without making an encoder per batch."""


def encode_batch(group_id: str, origin: str, seq: int, updates: Sequence[Update]) -> bytes:
    """One frame holding ``updates``. O(size)."""
    text = _reports_json(group_id, origin, seq, updates)
    if text is None:
        text = _JSON.encode({"g": group_id, "o": origin, "q": seq, "u": [encode_update(u) for u in updates]})
    return _frame(text)


def encode_snapshot_batch(group_id: str, origin: str, seq: int, state_json: str) -> bytes:
    """``encode_batch(group_id, origin, seq, [Snapshot(state)])`` given ``encode_json(state)``. O(size)."""
    g, o, q = _JSON.encode(group_id), _JSON.encode(origin), _JSON.encode(seq)
    return _frame(f'{{"g":{g},"o":{o},"q":{q},"u":[["snapshot",{state_json}]]}}')


def encode_json(o: Any) -> str:
    """``o`` as batches hold JSON (compact, no NaN). O(size)."""
    return _JSON.encode(o)


def encode_str(s: str) -> str:
    """The str ``s`` as ``encode_json`` writes it (quoted, escaped, ASCII). O(len)."""
    return _STR(s)  # type: ignore[no-any-return]


def _frame(text: str) -> bytes:
    payload = text.encode()
    return _HEADER.pack(_MAGIC, FORMAT_VERSION, len(payload), zlib.crc32(payload)) + payload


_STR = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
"""A str as ``_JSON`` writes it (quoted, escaped, ASCII)."""


def _reports_json(group_id: str, origin: str, seq: int, updates: Sequence[Update]) -> str | None:
    """A batch of ``Report``s only (a reader's usual sync) as ``_JSON`` writes it, the same text in
    half the time; ``None`` for any other batch, or a value not of exactly the types a report holds."""
    if type(group_id) is not str or type(origin) is not str or type(seq) is not int:
        return None
    out = []
    for u in updates:
        if type(u) is not Report:
            return None
        rid, token, epoch, positions = u.reader_id, u.token, u.epoch, u.positions
        if type(rid) is not str or type(token) is not int or type(epoch) is not int:
            return None
        ps = []
        for name, pos, wm in positions:
            if type(name) is not str or type(pos) is not int or type(wm) is not int:
                return None
            ps.append(f"[{_STR(name)},{pos},{wm}]")
        out.append(f'["report",{_STR(rid)},{token},{epoch},[{",".join(ps)}]]')
    return f'{{"g":{_STR(group_id)},"o":{_STR(origin)},"q":{seq},"u":[{",".join(out)}]}}'


_MAX_NAMES = 1 << 16
"""Segment names (and reader ids) the report framers keep encoded (they forget them all past this: a
bounded cache)."""

_KEPT_NAMES: dict[str, str] = {}
"""Segment name -> ``[``, its JSON text and ``,``, as frames hold it; kept for every framer (in a process
of many readers, each with its own replica and framer: one hot table rather than a cold one each)."""

_KEPT_READERS: dict[str, str] = {}
"""Reader id -> the text of a report batch from ``,"u":`` to the reader id's ``,``; kept for every framer."""


class ReportFramer:
    """Frames a batch of one ``Report`` (a reader's usual sync) straight from its fields, byte for byte as
    ``encode_batch(group_id, origin, seq, [Report(reader_id, token, epoch, positions)])`` does.

    The frame's text up to the sequence number is made once, and each segment name and reader id
    is quoted once and kept with the text around it (``[name,``, and the report's text up to its
    token; at most ``_MAX_NAMES`` of each), so a frame costs its positions' digits and one CRC:
    O(positions). ``frame`` returns ``None`` for a value not of exactly the
    types a report holds (the caller then takes ``encode_batch``). Not thread-safe.
    """

    __slots__ = ("_head", "_names", "_readers", "group_id", "origin")

    def __init__(self, group_id: str, origin: str) -> None:
        self.group_id = group_id
        self.origin = origin
        self._head = f'{{"g":{_STR(group_id)},"o":{_STR(origin)},"q":'
        self._names = _KEPT_NAMES  # (shared by every framer: the same text for a name in any group)
        self._readers = _KEPT_READERS

    def frame(
        self, seq: int, reader_id: str, token: int, epoch: int, positions: Sequence[Position]
    ) -> bytes | None:
        """The frame of a batch holding ``Report(reader_id, token, epoch, positions)``, or ``None``
        for a value of another type than a report holds. O(positions)."""
        if (
            type(seq) is not int
            or type(token) is not int
            or type(epoch) is not int
            or type(reader_id) is not str
        ):
            return None
        readers = self._readers
        rid = readers.get(reader_id)
        if rid is None:
            if len(readers) >= _MAX_NAMES:
                readers.clear()
            rid = readers[reader_id] = f',"u":[["report",{_STR(reader_id)},'
        names = self._names
        ps = []
        try:
            for name, pos, wm in positions:
                if type(name) is not str or type(pos) is not int or type(wm) is not int:
                    return None
                n = names.get(name)
                if n is None:
                    if len(names) >= _MAX_NAMES:
                        names.clear()
                    n = names[name] = f"[{_STR(name)},"
                ps.append(f"{n}{pos},{wm}]")
        except (TypeError, ValueError):  # a position that is no triple
            return None
        payload = f"{self._head}{seq}{rid}{token},{epoch},[{','.join(ps)}]]]}}".encode()
        return _PACK(_MAGIC, FORMAT_VERSION, len(payload), _CRC32(payload)) + payload


def frame_length(data: bytes | memoryview) -> int | None:
    """The whole frame's length from its header, or ``None`` if fewer than a header's bytes. O(1)."""
    if len(data) < HEADER_BYTES:
        return None
    return HEADER_BYTES + int(_HEADER.unpack_from(data, 0)[2])


def decode_batches(segment: str, data: bytes, offset: int) -> tuple[list[Batch], int]:
    """The whole frames at the start of ``data`` (read at ``offset``), and how many bytes they take.

    A frame cut short ends the list (not an error: the rest is not read yet); a bad
    magic, version or CRC, or a payload that is not a batch, raises
    ``GroupStateCorruptError`` naming the segment and offset: it is never applied. O(size).
    """
    out: list[Batch] = []
    pos = 0
    view = memoryview(data)
    while len(data) - pos >= HEADER_BYTES:
        magic, version, length, crc = _HEADER.unpack_from(view, pos)
        at = offset + pos
        if magic != _MAGIC:
            raise GroupStateCorruptError(f"group state {segment!r}: no batch at offset {at} (bad magic)")
        if version != FORMAT_VERSION:
            raise GroupStateCorruptError(
                f"group state {segment!r}: batch at offset {at} has format version {version}; "
                f"this client reads version {FORMAT_VERSION}"
            )
        end = pos + HEADER_BYTES + length
        if end > len(data):
            break
        payload = bytes(view[pos + HEADER_BYTES : end])
        if zlib.crc32(payload) != crc:
            raise GroupStateCorruptError(f"group state {segment!r}: batch at offset {at} fails its CRC")
        try:
            obj = json.loads(payload)
            batch = Batch(
                at,
                offset + end,
                str(obj["g"]),
                str(obj["o"]),
                int(obj["q"]),
                tuple(decode_update(u) for u in obj["u"]),
            )
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise GroupStateCorruptError(
                f"group state {segment!r}: batch at offset {at} is not a valid batch: {e}"
            ) from None
        out.append(batch)
        pos = end
    return out, pos
