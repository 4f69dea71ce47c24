"""Producer-asserted watermarks (Pulsar's watermarking PIP): markers, the per-writer tracker, snapshots.

Writers assert event-time progress with ``EventWriter.note_time(t)`` and leave the
active set with ``mark_idle()``. Both are stored inline, in every active segment of
the stream, as marker frames (``KIND_WATERMARK`` = the PIP's ``W_SET``, ``KIND_IDLE`` =
``W_IDLE``) whose payload is the writer id (8 bytes, little endian); readers never
deliver them as events.

Inclusive/exclusive. ``note_time(t)`` follows the PIP's wording: *"the minimum event
time for any subsequent message is at least the specified time"* — every later event
of that writer has event time ``>= t``. The project's watermarks are exclusive (an
event with event time ``<=`` the watermark is late, docs/design.md §1), so the watermark a
writer's assertion ``t`` yields is ``t - 1``: an event at exactly ``t`` is on time.

Tracker. Along one segment, in order, a writer *joins* the active set with its first
watermark marker and *leaves* it with an idle marker; a later watermark marker rejoins
it. An assertion is permanent (it also covers events written after an idle marker), so
each writer keeps the maximum time it asserted. The segment's watermark is the
minimum over active writers minus one, or none when no writer is active.

Snapshots (the PIP's ``W_SNAPSHOT``). A ``SegmentWatermarkCursor`` — the PIP's
watermark cursor — scans a segment's markers up to a position and never past it.
Every ``snapshot_bytes`` of scanned data (and at the end of a sealed segment) it
appends the per-writer state to the side segment ``_system/_pwm/<segment>`` (length-
prefixed JSON records, never unpickled), so a seek to any position loads the latest
snapshot at or before it and scans only the bytes after it: O(snapshot_bytes), not
O(position). Snapshots hold only what the segment's own markers say, so a seek gives
exactly what a scan from the start gives. Transactions need no uncommitted state here:
a transaction's markers live in its transaction segments until the commit merges them
into the parents (and vanish with an abort).
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from segmentstore import SegmentExistsError, SegmentNotFoundError, SegmentTruncatedError
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import INT64_MAX, INT64_MIN
from segmentstore.results import SegmentInfo

from ..errors import FrameFormatError, InvalidEventError
from .events import (
    HEADER_SIZE,
    KIND_EVENT,
    KIND_IDLE,
    KIND_WATERMARK,
    _loaded_kernels,
    _scan,
    decode_columns,
    encode_event,
    frame_length,
)

__all__ = [
    "NO_TIME",
    "BROADCAST",
    "SNAPSHOT_PREFIX",
    "WriterMark",
    "MarkState",
    "Marker",
    "ProducerWatermarkTracker",
    "SegmentWatermarkCursor",
    "encode_watermark_marker",
    "encode_idle_marker",
    "check_asserted_time",
    "scan_markers",
    "snapshot_segment",
    "load_snapshots",
]

BROADCAST = -1.0
"""The routing hash of a buffered marker: it goes to every segment (key hashes lie in [0, 1))."""

SNAPSHOT_PREFIX = "_system/_pwm/"
"""Side segments holding the per-writer snapshots of stream segments."""

NO_TIME = INT64_MIN
"""A writer's time in a segment where it has asserted nothing (only an idle marker is there)."""
_LEN = struct.Struct("<I")
_DEFAULT_SNAPSHOT_BYTES = 1 << 16
_DEFAULT_READ_BYTES = 1 << 20


def check_asserted_time(t: object, writer_id: int) -> int:
    """Validate a time given to ``note_time``: an int of ms in (-2^63, 2^63)."""
    if isinstance(t, bool) or not isinstance(t, int) or not INT64_MIN < t <= INT64_MAX:
        raise InvalidEventError(
            f"writer {writer_id}: note_time needs an int of ms in (-2^63, 2^63), got {t!r}"
        )
    return t


def encode_watermark_marker(writer_id: int, t: int) -> bytes:
    """A ``KIND_WATERMARK`` frame: writer ``writer_id`` asserts every later event has event time ``>= t``."""
    return encode_event("", writer_id.to_bytes(8, "little"), t, KIND_WATERMARK)


def encode_idle_marker(writer_id: int) -> bytes:
    """A ``KIND_IDLE`` frame: writer ``writer_id`` leaves the active set."""
    return encode_event("", writer_id.to_bytes(8, "little"), None, KIND_IDLE)


@dataclass(frozen=True, slots=True, order=True)
class WriterMark:
    """One writer's state in a segment: the highest time it asserted and whether it is idle."""

    writer: int
    time: int
    idle: bool


@dataclass(frozen=True, slots=True)
class MarkState:
    """The per-writer state at ``position`` of a segment (what a ``W_SNAPSHOT`` record holds)."""

    position: int
    writers: tuple[WriterMark, ...] = ()

    @property
    def watermark(self) -> int | None:
        """Minimum over active writers of their asserted time, minus one; ``None`` without one. O(w)."""
        times = [m.time for m in self.writers if not m.idle]
        return min(times) - 1 if times else None

    def to_json(self) -> str:
        return json.dumps(
            {"p": self.position, "w": [[m.writer, m.time, int(m.idle)] for m in self.writers]},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> MarkState:
        """The inverse of ``to_json``; ``FrameFormatError`` names what is malformed."""
        try:
            obj = json.loads(text)
            marks = tuple(sorted(WriterMark(int(w), int(t), bool(i)) for w, t, i in obj["w"]))
            pos = obj["p"]
            if isinstance(pos, bool) or not isinstance(pos, int) or pos < 0:
                raise ValueError(f"position {pos!r}")
            return cls(pos, marks)
        except (ValueError, TypeError, KeyError) as e:
            raise FrameFormatError(f"malformed watermark snapshot record ({e!r}): {text!r:.80}") from None


@dataclass(frozen=True, slots=True)
class Marker:
    """A marker frame found in a segment: where it is, its kind, writer and asserted time."""

    offset: int
    end: int
    kind: int
    writer: int
    time: int | None


class ProducerWatermarkTracker:
    """The active set of writers along one ordered sequence of markers (one segment). O(1) per marker.

    ``observe(kind, writer, t)`` applies a marker; ``watermark`` is the minimum over
    active writers of their asserted time minus one (``None`` with no active writer).
    """

    __slots__ = ("_idle", "_times")

    def __init__(self, state: MarkState | None = None) -> None:
        self._times: dict[int, int] = {}
        self._idle: set[int] = set()
        if state is not None:
            for m in state.writers:
                self._times[m.writer] = m.time
                if m.idle:
                    self._idle.add(m.writer)

    def observe(self, kind: int, writer: int, t: int | None = None) -> None:
        """Apply a marker: a watermark (re-)joins the writer at ``max(t, earlier)``; idle leaves."""
        if kind == KIND_WATERMARK:
            if t is None:
                raise FrameFormatError(f"watermark marker of writer {writer} carries no time")
            old = self._times.get(writer)
            self._times[writer] = t if old is None else max(old, t)
            self._idle.discard(writer)
        elif kind == KIND_IDLE:
            # also for a writer not seen in this segment: after a scale its assertions are in the
            # predecessors, and this idle marker is what takes it out here (its own time: none)
            self._times.setdefault(writer, NO_TIME)
            self._idle.add(writer)
        else:
            raise FrameFormatError(f"kind {kind} of writer {writer} is not a marker")

    def observe_all(self, markers: Iterable[Marker]) -> None:
        for m in markers:
            self.observe(m.kind, m.writer, m.time)

    @property
    def active(self) -> dict[int, int]:
        """Active writers and their asserted times. O(w)."""
        return {w: t for w, t in self._times.items() if w not in self._idle}

    @property
    def watermark(self) -> int | None:
        """Minimum asserted time over active writers, minus one (exclusive); ``None`` if none. O(w)."""
        times = [t for w, t in self._times.items() if w not in self._idle]
        return min(times) - 1 if times else None

    def marks(self) -> dict[int, tuple[int, bool]]:
        """Every writer seen: ``{writer: (time, idle)}``. O(w)."""
        return {w: (t, w in self._idle) for w, t in self._times.items()}

    def state(self, position: int) -> MarkState:
        """The state as a ``MarkState`` at ``position``. O(w log w)."""
        marks = (WriterMark(w, t, w in self._idle) for w, t in self._times.items())
        return MarkState(position, tuple(sorted(marks)))

    @checked
    def _check(self) -> None:
        """Assert idle writers are known, and a writer without an assertion here is idle."""
        assert self._idle <= set(self._times), "an idle writer is unknown"
        assert all(w in self._idle for w, t in self._times.items() if t == NO_TIME), "active without a time"


def scan_markers(buf: bytes | bytearray | memoryview, base_offset: int) -> tuple[list[Marker], int]:
    """The marker frames among the complete frames of ``buf``, and the bytes consumed. O(len(buf)).

    Once the frame kernels are loaded, one kernel call checks the frames as ``decode_columns``
    does (headers, then every key's UTF-8) and sizes them: if all are events, that is the
    answer; else a second walks their headers and only the markers' payloads are read. Without
    the kernels, or on an error, ``decode_columns`` decides as before.
    """
    kmod = _loaded_kernels()
    if kmod is not None:
        arr = np.frombuffer(buf, np.uint8)
        n, key_bytes, payload_bytes, whole, status, _ = kmod.measure_events(arr, True)
        if status == kmod.OK:
            if whole == n * HEADER_SIZE + key_bytes + payload_bytes:
                return [], whole  # (the frames' bytes are the events' alone: no marker among them)
            return _scanned_markers(arr, base_offset)
    cols, consumed = decode_columns(buf, base_offset)
    kinds = cols["kind"]
    idx = np.flatnonzero(kinds != KIND_EVENT)
    if not len(idx):
        return [], consumed
    pays = cols["payload"].take(idx).to_pylist()
    offsets, lengths, times = cols["offset"], cols["length"], cols["event_time"]
    return [
        _marker(int(offsets[i]), int(lengths[i]), int(kinds[i]), pays[j], int(times[i]))
        for j, i in enumerate(idx.tolist())
    ], consumed


def _scanned_markers(arr: np.ndarray, base_offset: int) -> tuple[list[Marker], int]:
    """``scan_markers`` of frames ``measure_events`` found whole and valid: their headers walked
    (``_scan``), the markers' payloads sliced from ``arr``. O(frames)."""
    starts, lengths, kinds, times, klens, consumed = _scan(arr, base_offset)
    out: list[Marker] = []
    for i in np.flatnonzero(kinds != KIND_EVENT).tolist():
        start, length, klen = int(starts[i]), int(lengths[i]), int(klens[i])
        pay = arr[start + HEADER_SIZE + klen : start + length].tobytes()
        out.append(_marker(base_offset + start, length, int(kinds[i]), pay, int(times[i])))
    return out, consumed


def _marker(offset: int, length: int, kind: int, payload: bytes, time: int) -> Marker:
    """The marker frame at ``offset`` (``length`` bytes) whose payload is ``payload``: a writer id."""
    if len(payload) != 8:
        raise FrameFormatError(
            f"marker frame at offset {offset}: payload of {len(payload)} bytes is not a writer id"
        )
    t = time if kind == KIND_WATERMARK else None
    return Marker(offset, offset + length, kind, int.from_bytes(payload, "little"), t)


def snapshot_segment(segment: str) -> str:
    """The side segment holding ``segment``'s watermark snapshots."""
    return SNAPSHOT_PREFIX + segment


def load_snapshots(client: SegmentStoreClient, segment: str) -> list[MarkState]:
    """Every snapshot of ``segment``, sorted by position (duplicates collapse). O(side segment)."""
    name = snapshot_segment(segment)
    try:
        info = client.get_info(name)
    except SegmentNotFoundError:
        return []
    data = bytearray()
    off = info.start_offset
    while off < info.length:
        r = client.read(name, off, info.length - off)
        if not r.data:
            break
        data += r.data
        off += len(r.data)
    out: dict[int, MarkState] = {}
    for rec in _records(bytes(data)):
        s = MarkState.from_json(rec)
        out[s.position] = s
    return [out[p] for p in sorted(out)]


def _records(data: bytes) -> Iterator[bytes]:
    pos = 0
    while pos + 4 <= len(data):
        (n,) = _LEN.unpack_from(data, pos)
        if pos + 4 + n > len(data):
            return  # a torn record at the end (a crash mid-append) is ignored
        yield data[pos + 4 : pos + 4 + n]
        pos += 4 + n


class SegmentWatermarkCursor:
    """The PIP's watermark cursor on one segment: the per-writer state at a position, never past it.

    ``seek(p)`` materialises the state at ``p`` from the latest snapshot at or before
    it plus a scan of the rest (O(snapshot_bytes) when snapshots exist);
    ``advance_to(p)`` scans forward (O(p - position)). Scanning writes a snapshot every
    ``snapshot_bytes`` and at the end of a sealed segment (``write_snapshots=False``
    turns that off). Positions are frame boundaries; a position inside a frame stops
    the cursor at the frame's start.
    """

    def __init__(
        self,
        client: SegmentStoreClient,
        segment: str,
        position: int | None = None,
        snapshot_bytes: int = _DEFAULT_SNAPSHOT_BYTES,
        read_bytes: int = _DEFAULT_READ_BYTES,
        write_snapshots: bool = True,
    ) -> None:
        for what, v in (("snapshot_bytes", snapshot_bytes), ("read_bytes", read_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 16:
                raise InvalidEventError(f"segment {segment!r}: {what} must be an int >= 16, got {v!r}")
        self.client = client
        self.segment = segment
        self.snapshot_bytes = snapshot_bytes
        self.read_bytes = read_bytes
        self.write_snapshots = write_snapshots
        self.tracker = ProducerWatermarkTracker()
        self.position = 0
        self.bytes_scanned = 0
        self.snapshots_written = 0
        self.snapshots_loaded = 0
        self.sealed_end: int | None = None  # the segment's length once the cursor saw it sealed there
        self._last_snap = 0
        self._log_max = -1  # highest snapshot position known to be in the side segment
        self.seek(client.get_info(segment).start_offset if position is None else position)

    @property
    def watermark(self) -> int | None:
        return self.tracker.watermark

    def state(self) -> MarkState:
        return self.tracker.state(self.position)

    def seek(self, position: int) -> None:
        """The state at ``position``: the latest snapshot at or before it plus a scan. O(snapshot_bytes)."""
        snaps = load_snapshots(self.client, self.segment)
        self._log_max = snaps[-1].position if snaps else -1
        best: MarkState | None = None
        for s in snaps:
            if s.position <= position:
                best = s
        start = self.client.get_info(self.segment).start_offset
        self.tracker = ProducerWatermarkTracker(best)
        if best is not None:
            self.snapshots_loaded += 1
            self.position = max(best.position, start)
        else:
            self.position = start
        self._last_snap = self.position
        self.advance_to(position)

    def advance_to(self, position: int, info: SegmentInfo | None = None) -> None:
        """Apply the markers in ``[self.position, position)``; a no-op for ``position <= self.position``.

        ``info``: the segment's info if the caller has just asked for it (else one ``get_info``
        here, to learn whether it is sealed at ``position``).
        """
        client, name = self.client, self.segment
        while self.position < position:
            step = min(self.read_bytes, self.snapshot_bytes) if self.write_snapshots else self.read_bytes
            want = min(step, position - self.position)
            try:
                r = client.read(name, self.position, want)
            except SegmentTruncatedError:  # markers before the new start are gone (snapshots keep them)
                self.position = client.get_info(name).start_offset
                continue
            data = r.data
            if not data:
                break
            markers, consumed = scan_markers(data, r.offset)
            if consumed == 0:
                need = frame_length(data) or 0
                if need > position - self.position or need <= len(data):
                    break  # ``position`` lies inside this frame
                r = client.read(name, self.position, need)
                markers, consumed = scan_markers(r.data, r.offset)
                if consumed == 0:
                    break
            self.tracker.observe_all(markers)
            self.position += consumed
            self.bytes_scanned += consumed
            if r.end_of_segment and consumed == len(data):
                self.sealed_end = self.position
            if self.position - self._last_snap >= self.snapshot_bytes:
                self._snapshot()
        if self.sealed_end is None and self.position >= position:
            info = info if info is not None else client.get_info(name)
            if info.sealed and self.position == info.length:
                self.sealed_end = self.position
        if self.sealed_end is not None and self.position == self.sealed_end and self._log_max < self.position:
            self._snapshot()

    def _snapshot(self) -> None:
        self._last_snap = self.position
        if not self.write_snapshots or self.position <= self._log_max:
            return
        rec = self.state().to_json().encode()
        side = snapshot_segment(self.segment)
        with contextlib.suppress(SegmentExistsError):
            self.client.create_segment(side)
        self.client.append(side, _LEN.pack(len(rec)) + rec)
        self._log_max = self.position
        self.snapshots_written += 1

    @checked
    def _check(self) -> None:
        """Assert the cursor's invariants."""
        self.tracker._check()
        assert self.position >= 0 and self._last_snap <= self.position
