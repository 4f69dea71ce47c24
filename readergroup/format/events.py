"""Event framing: how events (and writer markers) are laid out in a stream segment.

Each record is one frame: ``struct "<IBqH"`` = (``rest_length`` u32 — bytes after these
4, ``kind`` u8, ``event_time`` i64 with ``INT64_MIN`` for "none", ``key_length`` u16),
then the routing key (UTF-8), then the payload. Writers append whole frames, so a
segment is a sequence of whole frames: an event's position is its frame's offset and
the position after it is ``offset + length``. Kinds: ``KIND_EVENT``; ``KIND_WATERMARK``
and ``KIND_IDLE`` are writer markers, never delivered as events.

``decode_frames`` is the per-event decoder (a Python loop, a few µs per frame);
``decode_columns`` the batch decoder for readers: one numba kernel call finds the frame
boundaries and copies keys and payloads into Arrow arrays' buffers (numba is imported on
the first buffer of 32 KiB; smaller ones take a Python path until then, so that they pay
no compile or load cost; once loaded, the kernel decodes every buffer of 256 B or more).
The kernels live in ``_frame_kernels``; ``frame_batch`` decodes and encodes frames in
bulk for the engines.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

from segmentstore.limits import INT64_MAX, INT64_MIN

from ..errors import FrameFormatError, InvalidEventError

__all__ = [
    "KIND_EVENT",
    "KIND_WATERMARK",
    "KIND_IDLE",
    "KINDS",
    "NO_EVENT_TIME",
    "HEADER_SIZE",
    "MAX_KEY_BYTES",
    "Frame",
    "encode_event",
    "frame_length",
    "decode_frames",
    "decode_columns",
    "decode_event_block",
    "decode_event_block_at",
    "decode_event_blocks_at",
    "decode_packed_blocks",
    "EventBlocks",
    "block_arrays",
    "EventBlock",
    "frame_ends_of",
]

KIND_EVENT = 0
KIND_WATERMARK = 1
KIND_IDLE = 2
KINDS = (KIND_EVENT, KIND_WATERMARK, KIND_IDLE)

NO_EVENT_TIME = INT64_MIN
"""``event_time`` on the wire when an event has none."""

_HEADER = struct.Struct("<IBqH")
HEADER_SIZE = _HEADER.size  # 15
_FIXED = HEADER_SIZE - 4  # bytes of rest_length that are header: kind, event_time, key_length
MAX_KEY_BYTES = 0xFFFF
_MAX_REST = 0xFFFFFFFF

_NUMBA_MIN_BYTES = 32 * 1024
"""``decode_columns`` imports the numba kernels (~0.7 s) for a buffer of this size or more."""
_NUMBA_LOADED_MIN_BYTES = 256
"""Once the kernels are imported (by anyone), they decode buffers from this size on (Python: ~1 us/frame)."""
_KERNELS_MODULE = f"{__package__}._frame_kernels"
_STRING, _BINARY = pa.string(), pa.binary()
_NO_BYTES = np.empty(0, np.uint8)
_U8, _I32, _I64 = np.dtype(np.uint8), np.dtype(np.int32), np.dtype(np.int64)  # (np.empty converts none)


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame: where it is in the segment, its kind, routing key, event time and payload."""

    offset: int
    length: int
    kind: int
    routing_key: str
    event_time: int | None
    payload: bytes

    @property
    def end_offset(self) -> int:
        """The position after this frame."""
        return self.offset + self.length

    @property
    def is_event(self) -> bool:
        return self.kind == KIND_EVENT


def encode_event(
    routing_key: str,
    payload: bytes | bytearray | memoryview,
    event_time: int | None = None,
    kind: int = KIND_EVENT,
) -> bytes:
    """One frame for an event (or a writer marker). O(len(payload))."""
    if not isinstance(routing_key, str):
        raise InvalidEventError(
            f"routing key must be a str, got {type(routing_key).__name__} {routing_key!r:.60}"
        )
    key = routing_key.encode()
    if len(key) > MAX_KEY_BYTES:
        raise InvalidEventError(
            f"routing key {routing_key[:40]!r}... is {len(key)} bytes; at most {MAX_KEY_BYTES}"
        )
    if type(payload) is not bytes:
        if not isinstance(payload, (bytearray, memoryview)):
            raise InvalidEventError(
                f"event with routing key {routing_key!r}: payload must be bytes, got {type(payload).__name__}"
            )
        payload = bytes(payload)
    if event_time is None:
        et = NO_EVENT_TIME
    elif isinstance(event_time, bool) or not isinstance(event_time, int):
        raise InvalidEventError(
            f"event with routing key {routing_key!r}: event_time must be an int (ms) or None, "
            f"got {event_time!r}"
        )
    elif not INT64_MIN < event_time <= INT64_MAX:
        raise InvalidEventError(
            f"event with routing key {routing_key!r}: event_time {event_time} is outside (-2^63, 2^63)"
        )
    else:
        et = event_time
    if kind not in KINDS or isinstance(kind, bool):
        raise InvalidEventError(
            f"event with routing key {routing_key!r}: kind {kind!r} is not one of {KINDS}"
        )
    rest = _FIXED + len(key) + len(payload)
    if rest > _MAX_REST:
        raise InvalidEventError(
            f"event with routing key {routing_key!r}: payload of {len(payload)} bytes is too big"
        )
    return _HEADER.pack(rest, kind, et, len(key)) + key + payload


def frame_length(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """The full length of the frame starting at ``buf[pos]``, or ``None`` if fewer than 4 bytes are there."""
    if len(buf) - pos < 4:
        return None
    return 4 + int.from_bytes(buf[pos : pos + 4], "little")


def decode_frames(buf: bytes | bytearray | memoryview, base_offset: int = 0) -> tuple[list[Frame], int]:
    """Complete frames of ``buf`` (which starts at segment offset ``base_offset``) and the bytes consumed.

    A partial frame at the end is left for the next read. O(len(buf)), a few µs per frame.
    """
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    out: list[Frame] = []
    n = len(buf)
    pos = 0
    unpack = _HEADER.unpack_from
    while pos + HEADER_SIZE <= n:
        rest, kind, et, klen = unpack(buf, pos)
        end = pos + 4 + rest
        if rest < _FIXED + klen or kind > KIND_IDLE:
            raise _bad(base_offset + pos, rest, kind, klen)
        if end > n:
            break
        k0 = pos + HEADER_SIZE
        try:
            key = buf[k0 : k0 + klen].decode()
        except UnicodeDecodeError:
            raise FrameFormatError(
                f"frame at offset {base_offset + pos}: routing key is not valid UTF-8"
            ) from None
        out.append(
            Frame(
                base_offset + pos, 4 + rest, kind, key, None if et == INT64_MIN else et, buf[k0 + klen : end]
            )
        )
        pos = end
    return out, pos


def frame_ends_of(buf: bytes | bytearray | memoryview) -> tuple[np.ndarray, int]:
    """End positions (in ``buf``) of its complete frames, validated, and the bytes they take.

    The planner's boundary walk: headers only, no keys or payloads decoded. O(len(buf)),
    a few ns per frame through the numba kernel for buffers of 32 KiB and more.
    """
    starts, lengths, _, _, _, consumed = _scan(np.frombuffer(buf, dtype=np.uint8), 0)
    return starts + lengths, consumed


def _scan(
    arr: np.ndarray, base_offset: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Frame boundaries of ``arr``: starts, lengths, kinds, event times, key lengths; bytes consumed."""
    if _use_kernels(arr.size):
        k = _kernels()
        cap = arr.size // HEADER_SIZE + 1
        starts = np.empty(cap, np.int64)
        lengths = np.empty(cap, np.int64)
        kinds = np.empty(cap, np.uint8)
        times = np.empty(cap, np.int64)
        klens = np.empty(cap, np.int64)
        count, consumed, bad = k.scan(arr, starts, lengths, kinds, times, klens)
        if bad >= 0:
            rest, kind, _, klen = _HEADER.unpack_from(bytes(arr[bad : bad + HEADER_SIZE]))
            raise _bad(base_offset + bad, rest, kind, klen)
        return starts[:count], lengths[:count], kinds[:count], times[:count], klens[:count], int(consumed)
    frames, consumed = _scan_py(arr, base_offset)
    return (
        np.array([f[0] for f in frames], np.int64),
        np.array([f[1] for f in frames], np.int64),
        np.array([f[2] for f in frames], np.uint8),
        np.array([f[3] for f in frames], np.int64),
        np.array([f[4] for f in frames], np.int64),
        consumed,
    )


def decode_columns(
    buf: bytes | bytearray | memoryview, base_offset: int = 0, *, events_only: bool = False
) -> tuple[dict[str, Any], int]:
    """Complete frames of ``buf`` as columns, and the bytes consumed. O(len(buf)).

    Returns numpy arrays ``offset`` (int64, segment offsets), ``length`` (int64),
    ``kind`` (uint8), ``event_time`` (int64, ``NO_EVENT_TIME`` for none), and Arrow
    arrays ``routing_key`` (string) and ``payload`` (binary). ``events_only`` drops
    writer markers. A partial frame at the end is left for the next read.
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    if _use_kernels(arr.size):
        return _decode_kernel(arr, base_offset, events_only)
    starts, lengths, kinds, times, klens, consumed = _scan(arr, base_offset)
    if events_only:
        keep = kinds == KIND_EVENT
        if not keep.all():
            starts, lengths, kinds, times, klens = (
                starts[keep],
                lengths[keep],
                kinds[keep],
                times[keep],
                klens[keep],
            )
    key_starts = starts + HEADER_SIZE
    pay_starts = key_starts + klens
    pay_lens = lengths - HEADER_SIZE - klens
    keys = _gather(arr, key_starts, klens, string=True)
    payloads = _gather(arr, pay_starts, pay_lens, string=False)
    return _columns(base_offset, starts, lengths, kinds, times, keys, payloads), int(consumed)


EventBlock = tuple[np.ndarray, np.ndarray, np.ndarray, int]
"""``decode_event_block``'s columns: ``cols`` (4 x n int64: offset, length, event time, a row for
the caller), ``offs`` (2 x n + 1: Arrow offsets of the keys and of the payloads, int32 below
2 GiB), ``raw`` (the key bytes, then the payload bytes) and the number of key bytes."""


def decode_event_block(buf: bytes | bytearray | memoryview, base_offset: int = 0) -> tuple[EventBlock, int]:
    """``decode_columns(buf, base_offset, events_only=True)`` as numpy columns (no Arrow arrays):
    a reader's block. The same events, the same errors; the bytes consumed. O(len(buf)).

    ``block_arrays`` makes the Arrow string/binary arrays of the keys and payloads.
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    if arr.size < 2**31 and _use_kernels(arr.size):
        k = _loaded[0] if _loaded else _kernels()
        count, key_bytes, pay_bytes, consumed, bad = k.decode_sizes(arr, True)
        if bad >= 0:
            rest, kind, _, klen = _HEADER.unpack_from(bytes(arr[bad : bad + HEADER_SIZE]))
            raise _bad(base_offset + bad, rest, kind, klen)
        cols = np.empty((4, count), np.int64)
        offs = np.empty((2, count + 1), np.int32)
        raw = np.empty(key_bytes + pay_bytes, np.uint8)
        if k.decode_events(arr, base_offset, cols, offs, raw, key_bytes) >= 0:
            raise _bad_key(base_offset)
        return (cols, offs, raw, key_bytes), int(consumed)
    c, consumed = decode_columns(buf, base_offset, events_only=True)
    n = len(c["offset"])
    cols = np.empty((4, n), np.int64)
    cols[0], cols[1], cols[2] = c["offset"], c["length"], c["event_time"]
    keys, pays = c["routing_key"], c["payload"]
    wide = pa.types.is_large_string(keys.type) or pa.types.is_large_binary(pays.type)
    offs = np.empty((2, n + 1), np.int64 if wide else np.int32)
    parts = []
    for row, a in enumerate((keys, pays)):
        _, ob, db = a.buffers()
        o = np.frombuffer(ob, offs.dtype)[a.offset : a.offset + n + 1]
        offs[row] = o - o[0]
        parts.append(np.frombuffer(db, np.uint8)[o[0] : o[-1]] if db is not None and n else _NO_BYTES)
    return (cols, offs, np.concatenate(parts), len(parts[0])), consumed


def decode_event_block_at(
    buf: bytes, base_offset: int, starts: np.ndarray, values: np.ndarray, add: int, last: int
) -> tuple[EventBlock, np.ndarray, int] | None:
    """``decode_event_block(buf, base_offset)`` with values from the records of ``buf``, in one pass.

    ``starts`` (int64) are where the length-prefixed records of ``buf`` start (plus ``base_offset``:
    frames are such records), ``values`` (int64) a value at each and then at the end of the last:
    what ``read_many`` answers. Row 3 of the block's ``cols`` is each event's value plus ``add``;
    also returned, ``after`` (2 x n int64): the position after each event (the next event's offset,
    the end of the whole frames after the last) and the value there (after the last event: ``last`` if
    the whole frames fill ``buf``, else ``values[-1]``), and the bytes consumed. The same errors as
    ``decode_event_block``; ``None`` (nothing decoded) if the frame kernels are not loaded, ``buf``
    holds no whole event, or ``starts`` are not exactly where its whole frames start. O(len(buf)).
    """
    if not 0 < len(buf) < 2**31:
        return None
    k = _loaded_kernels()
    if k is None:
        return None
    arr = np.frombuffer(buf, dtype=np.uint8)
    count, key_bytes, pay_bytes, consumed, bad = k.decode_sizes(arr, True)
    if bad >= 0:
        rest, kind, _, klen = _HEADER.unpack_from(bytes(arr[bad : bad + HEADER_SIZE]))
        raise _bad(base_offset + bad, rest, kind, klen)
    if not count:
        return None
    ints = np.empty((6, count), np.int64)
    offs = np.empty((2, count + 1), np.int32)
    raw = np.empty(key_bytes + pay_bytes, np.uint8)
    cols, after = ints[:4], ints[4:]
    r = k.decode_events_at(
        arr, base_offset, consumed, key_bytes, starts, values, add, last,
        cols, after, offs, raw,
    )  # fmt: skip
    if r >= 0:
        raise _bad_key(base_offset)
    if r != -1:
        return None
    return (cols, offs, raw, key_bytes), after, int(consumed)


class EventBlocks:
    """``decode_event_blocks_at``'s blocks, side by side in one set of arrays.

    A block's own views (``blocks``) are made on first use: a reader that takes the blocks as they lie
    here (``SegmentInput.take_packed_at``, ``block_merge``) never makes them. O(1) to make.
    """

    __slots__ = ("_blocks", "after", "cols", "key_bytes", "offs", "places", "raw", "spans")

    def __init__(
        self,
        cols: np.ndarray,
        after: np.ndarray,
        offs: np.ndarray,
        raw: np.ndarray,
        places: np.ndarray,
        key_bytes: int,
    ) -> None:
        self.cols = cols
        """The blocks' ``cols`` one after the other (4 x events)."""
        self.after = after
        """The positions and the watermarks after each event, one after the other (2 x events)."""
        self.offs = offs
        """Their Arrow offsets one after the other (2 x (events + blocks), int32)."""
        self.raw = raw
        """Their bytes one after the other (each block's keys, then its payloads)."""
        self.places = places
        """Per block (blocks x 8 int64): its first column in ``cols``, 0, its events, its first column in
        ``offs``, where its keys and where its payloads start in ``raw``, the bytes it consumed, its
        payload bytes."""
        self.spans: list[list[int]] = places.tolist()
        """``places`` as lists (a block taken where it lies reads its row here: no array access)."""
        self.key_bytes = key_bytes
        """The blocks' key bytes in all."""
        self._blocks: list[tuple[EventBlock, np.ndarray, int]] | None = None

    def __len__(self) -> int:
        """How many blocks."""
        return len(self.spans)

    @property
    def blocks(self) -> list[tuple[EventBlock, np.ndarray, int]]:
        """Each buffer's ``decode_event_block_at`` answer: its block and ``after`` (views of the arrays
        above), and the bytes consumed. Made on first use. O(blocks)."""
        if self._blocks is None:
            cols, after, offs, raw = self.cols, self.after, self.offs, self.raw
            out = []
            for c0, _, n, o0, r0, p0, consumed, pb in self.spans:
                c1 = c0 + n
                block = (cols[:, c0:c1], offs[:, o0 : o0 + n + 1], raw[r0 : p0 + pb], p0 - r0)
                out.append((block, after[:, c0:c1], consumed))
            self._blocks = out
        return self._blocks


def decode_event_blocks_at(
    bufs: Sequence[bytes],
    base_offsets: Sequence[int],
    starts: Sequence[np.ndarray],
    values: Sequence[np.ndarray],
    add: int,
    lasts: Sequence[int],
) -> EventBlocks | None:
    """``decode_event_block_at`` of each buffer (with its base offset, record starts and values, and
    ``last``), into one set of arrays: one kernel call for them all (``decode_packed_blocks``). ``None``
    (nothing decoded) if the kernels are not loaded or one buffer would not decode there (a bad frame,
    no whole event, or records that do not match): ``decode_event_block_at`` of each in turn raises or
    answers as ever. O(total bytes)."""
    if _loaded_kernels() is None:
        return None
    rows = []
    at = s0 = 0
    for buf, base, s, last in zip(bufs, base_offsets, starts, lasts, strict=True):
        size, n = len(buf), len(s)
        rows.append((at, size, base, last, s0, n))
        at += size
        s0 += n
    nb = len(bufs)
    st = np.concatenate(starts) if nb > 1 else starts[0]
    vs = np.concatenate(values) if nb > 1 else values[0]
    return decode_packed_blocks(b"".join(bufs), np.array(rows, np.int64), st, vs, add)


def decode_packed_blocks(
    data: bytes, meta: np.ndarray, starts: np.ndarray, values: np.ndarray, add: int
) -> EventBlocks | None:
    """``decode_event_blocks_at`` of blocks given side by side: their bytes one after the other in
    ``data``, a row of ``meta`` each (int64: where its bytes start in ``data``, how many, its base
    offset, its ``last``, where its records' starts begin in ``starts``, how many), their records'
    starts one after the other in ``starts`` and their values in ``values`` (one more per block than
    its starts), as ``read_many``'s packed answer (``PackedReads``) holds them. O(total bytes): ~6 us for
    a poll's few small blocks, one kernel call (two if writer markers are among the records)."""
    k = _loaded_kernels()
    if k is None:
        return None
    if len(data) >= 2**31:
        return None
    nb = len(meta)
    arr = np.frombuffer(data, _U8)
    places = np.empty((nb, 8), _I64)
    # one kernel call in the common case: every record an event (sized as so; bytes at most the data's)
    cap = len(starts)
    cols, after, offs = np.empty((4, cap), _I64), np.empty((2, cap), _I64), np.empty((2, cap + nb), _I32)
    raw = np.empty(len(data), _U8)
    bad, events, nbytes, key_bytes, done = k.decode_packed(
        arr, meta, places, starts, values, add, cols, after, offs, raw
    )
    if bad >= 0:
        return None
    if not done:  # writer markers among the records: sized now, decoded into arrays of this size
        cols, after = np.empty((4, events), _I64), np.empty((2, events), _I64)
        offs, raw = np.empty((2, events + nb), _I32), np.empty(nbytes, _U8)
        if k.decode_events_at_many(arr, meta, places, starts, values, add, cols, after, offs, raw) >= 0:
            return None
    return EventBlocks(cols, after, offs, raw[:nbytes] if done else raw, places, key_bytes)


def block_arrays(block: EventBlock, start: int = 0, stop: int | None = None) -> tuple[pa.Array, pa.Array]:
    """The routing keys (string) and payloads (binary) of events ``[start, stop)`` of ``block``. O(1)."""
    _, offs, raw, key_bytes = block
    n = offs.shape[1] - 1
    stop = n if stop is None else stop
    wide = offs.dtype == np.int64
    kt, pt = (pa.large_string(), pa.large_binary()) if wide else (_STRING, _BINARY)
    data = pa.py_buffer(raw)
    keys = pa.Array.from_buffers(
        kt, stop - start, [None, pa.py_buffer(offs[0]), data.slice(0, key_bytes)], offset=start
    )
    pays = pa.Array.from_buffers(
        pt, stop - start, [None, pa.py_buffer(offs[1]), data.slice(key_bytes)], offset=start
    )
    return keys, pays


def _bad_key(base_offset: int) -> FrameFormatError:
    return FrameFormatError(f"a routing key in the frames at offset {base_offset} is not valid UTF-8")


# ---------------------------------------------------------------------- internals
def _decode_kernel(arr: np.ndarray, base_offset: int, events_only: bool) -> tuple[dict[str, Any], int]:
    """``decode_columns`` through two kernel calls (the same columns as the step-by-step path)."""
    k = _loaded[0] if _loaded else _kernels()
    count, key_bytes, pay_bytes, consumed, bad = k.decode_sizes(arr, events_only)
    if bad >= 0:
        rest, kind, _, klen = _HEADER.unpack_from(bytes(arr[bad : bad + HEADER_SIZE]))
        raise _bad(base_offset + bad, rest, kind, klen)
    # one allocation for the five int64 arrays, one for the bytes (views side by side)
    ints = np.empty(5 * count + 2, np.int64)
    starts, lengths, times = ints[:count], ints[count : 2 * count], ints[2 * count : 3 * count]
    key_off, pay_off = ints[3 * count : 4 * count + 1], ints[4 * count + 1 :]
    raw = np.empty(key_bytes + pay_bytes + count, np.uint8)
    keys, pays, kinds = raw[:key_bytes], raw[key_bytes : key_bytes + pay_bytes], raw[key_bytes + pay_bytes :]
    k.decode(arr, events_only, starts, lengths, kinds, times, key_off, keys, pay_off, pays)
    key_arr = _binary(count, key_off, keys, string=True)
    payloads = _binary(count, pay_off, pays, string=False)
    return _columns(base_offset, starts, lengths, kinds, times, key_arr, payloads), int(consumed)


def _columns(
    base_offset: int, starts: Any, lengths: Any, kinds: Any, times: Any, keys: Any, payloads: Any
) -> dict[str, Any]:
    """``decode_columns``' columns, from either path, the routing keys checked as UTF-8 by Arrow."""
    if keys.null_count == 0 and len(keys):
        try:
            keys.validate(full=True)
        except pa.ArrowInvalid:
            raise _bad_key(base_offset) from None
    return {
        "offset": starts + base_offset,
        "length": lengths,
        "kind": kinds,
        "event_time": times,
        "routing_key": keys,
        "payload": payloads,
    }


def _binary(count: int, offsets: np.ndarray, data: np.ndarray, string: bool) -> pa.Array:
    """An Arrow string/binary array of ``count`` values over int64 ``offsets`` and ``data``. O(count)."""
    if len(data) < 2**31:
        typ = pa.string() if string else pa.binary()
        offsets = offsets.astype(np.int32)
    else:
        typ = pa.large_string() if string else pa.large_binary()
    return pa.Array.from_buffers(typ, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _bad(offset: int, rest: int, kind: int, klen: int) -> FrameFormatError:
    if kind > KIND_IDLE:
        return FrameFormatError(f"frame at offset {offset}: unknown kind {kind}")
    return FrameFormatError(
        f"frame at offset {offset}: rest_length {rest} is shorter than its header and {klen}-byte routing key"
    )


def _scan_py(arr: np.ndarray, base_offset: int) -> tuple[list[tuple[int, int, int, int, int]], int]:
    """Frame boundaries by a Python loop: ``[(start, length, kind, event_time, key_length)]``, consumed."""
    buf = arr.tobytes()
    n = len(buf)
    pos = 0
    out: list[tuple[int, int, int, int, int]] = []
    while pos + HEADER_SIZE <= n:
        rest, kind, et, klen = _HEADER.unpack_from(buf, pos)
        if rest < _FIXED + klen or kind > KIND_IDLE:
            raise _bad(base_offset + pos, rest, kind, klen)
        if pos + 4 + rest > n:
            break
        out.append((pos, 4 + rest, kind, et, klen))
        pos += 4 + rest
    return out, pos


def _gather(arr: np.ndarray, starts: np.ndarray, lens: np.ndarray, string: bool) -> pa.Array:
    """Copy ``arr[starts[i]:starts[i]+lens[i]]`` back to back into an Arrow string/binary array. O(bytes)."""
    count = len(starts)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total < 2**31:
        typ = pa.string() if string else pa.binary()
        off_buf = pa.py_buffer(offsets.astype(np.int32))
    else:
        typ = pa.large_string() if string else pa.large_binary()
        off_buf = pa.py_buffer(offsets)
    if count == 0 or total == 0:
        data = np.empty(0, np.uint8)
    else:  # small buffers only (larger ones: the decode kernel)
        idx = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets[:-1], lens)
        data = arr[idx]
    return pa.Array.from_buffers(typ, count, [None, off_buf, pa.py_buffer(data)])


def _use_kernels(size: int) -> bool:
    """Whether a buffer of ``size`` bytes goes through the numba kernels (same results as the Python path)."""
    return size >= _NUMBA_MIN_BYTES or (size >= _NUMBA_LOADED_MIN_BYTES and _KERNELS_MODULE in sys.modules)


def _kernels() -> ModuleType:
    """The numba kernels (``readergroup.format._frame_kernels``), imported on first use."""
    from . import _frame_kernels

    if not _loaded:
        _loaded.append(_frame_kernels)
    return _frame_kernels


def _loaded_kernels() -> ModuleType | None:
    """The numba kernels if numba's frame kernels are imported already (by anyone), else ``None``:
    the fused decodes never load them themselves."""
    if _loaded:
        return _loaded[0]
    return _kernels() if _KERNELS_MODULE in sys.modules else None


_loaded: list[ModuleType] = []
"""The kernels module once ``_kernels`` imported it (the decode path skips the import statement)."""
