"""Pravega's event framing, as ingestwm's readers take it out of a segment a Pravega client wrote.

A Pravega writer appends each event as the wire protocol's ``Event`` command: a big-endian
i32 type code (0), a big-endian i32 length, then the payload (pravega-client-rust 0.3.7
``EventCommand``; its reader asserts the type is 0). Pravega stores no routing key and no
event time, so a decoded Pravega event has neither: its routing key is null (``None``;
ingestwm's own "" is a key) and its event time ``NO_EVENT_TIME`` (``None``, null in Spark).
Ingestion times and watermarks come from the store, as for any stream.

The functions mirror ``events``/``frame_batch``'s for ingestwm's framing, with the same
results' shapes: ``decode_pravega_block`` (a reader's ``EventBlock``, no key bytes),
``decode_pravega_events`` (``EventColumns`` for the Spark source), ``walk_pravega_frames``,
``pravega_frame_ends_of``, ``pravega_frame_length``. Buffers of 32 KiB or more (or any of
256 B or more once numba is loaded) go through two numba kernels (``_pravega_kernels``:
size, then fill; ~ns per event); smaller ones through a Python header loop, so a short
read pays no numba import. A header whose type is not 0 or whose length is negative is a
``FrameFormatError`` naming its offset: never a garbled event.
"""

from __future__ import annotations

import struct
import sys
from types import ModuleType

import numpy as np
import pyarrow as pa

from segmentstore import FRAMING_INGESTWM, FRAMING_PRAVEGA

from ..errors import FrameFormatError, StreamFramingError
from .events import NO_EVENT_TIME, EventBlock
from .frame_batch import EventColumns

__all__ = [
    "PRAVEGA_HEADER_SIZE",
    "PRAVEGA_EVENT_TYPE",
    "encode_pravega_event",
    "pravega_frame_length",
    "decode_pravega_block",
    "decode_pravega_events",
    "walk_pravega_frames",
    "pravega_frame_ends_of",
    "is_pravega_framed",
]

PRAVEGA_HEADER_SIZE = 8
PRAVEGA_EVENT_TYPE = 0
"""The ``Event`` wire command's type code: the only one a segment of events holds."""

_HEADER = struct.Struct(">ii")
_NUMBA_MIN_BYTES = 32 * 1024
_NUMBA_LOADED_MIN_BYTES = 256
_KERNELS = "readergroup.format._pravega_kernels"
_FRAME_KERNELS = "readergroup.format._frame_kernels"
_STRING, _BINARY = pa.string(), pa.binary()


def encode_pravega_event(payload: bytes) -> bytes:
    """One event as a Pravega writer appends it (for tests and tools; ingestwm's writers never do)."""
    return _HEADER.pack(PRAVEGA_EVENT_TYPE, len(payload)) + payload


def pravega_frame_length(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """The full length of the frame at ``buf[pos]``, or ``None`` if its 8-byte header is not all there."""
    if len(buf) - pos < PRAVEGA_HEADER_SIZE:
        return None
    return PRAVEGA_HEADER_SIZE + max(0, int(_HEADER.unpack_from(buf, pos)[1]))


def decode_pravega_block(buf: bytes | bytearray | memoryview, base_offset: int = 0) -> tuple[EventBlock, int]:
    """The whole frames of ``buf`` (at segment offset ``base_offset``) as a reader's ``EventBlock``, and
    the bytes they take: ``cols`` rows offset, frame length, ``NO_EVENT_TIME`` (row 3 left to the
    caller), ``offs`` row 0 all 0 (no keys), row 1 the payloads' offsets, ``raw`` the payloads, key
    bytes 0. A partial frame at the end is left for the next read. O(len(buf))."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    if _use_kernels(arr.size):
        k = _kernels()
        count, pay, consumed, bad = k.sizes(arr)
        if bad >= 0:
            raise _bad(arr, base_offset, int(bad))
        cols = np.empty((4, count), np.int64)
        offs = np.empty((2, count + 1), np.int32 if pay < 2**31 else np.int64)
        raw = np.empty(pay, np.uint8)
        k.fill(arr, base_offset, cols, offs, raw)
        return (cols, offs, raw, 0), int(consumed)
    starts, lens, consumed = _walk_py(arr, base_offset)
    n = len(starts)
    cols = np.empty((4, n), np.int64)
    cols[0] = starts + base_offset
    cols[1] = lens + PRAVEGA_HEADER_SIZE
    cols[2] = NO_EVENT_TIME
    total = int(lens.sum()) if n else 0
    offs = np.zeros((2, n + 1), np.int32 if total < 2**31 else np.int64)
    np.cumsum(lens, out=offs[1, 1:])
    raw = np.empty(total, np.uint8)
    for s, ln, o in zip(starts.tolist(), lens.tolist(), offs[1, :-1].tolist(), strict=True):
        raw[o : o + ln] = arr[s + PRAVEGA_HEADER_SIZE : s + PRAVEGA_HEADER_SIZE + ln]
    return (cols, offs, raw, 0), consumed


def decode_pravega_events(
    buf: bytes | bytearray | memoryview, base_offset: int = 0
) -> tuple[EventColumns, int]:
    """``frame_batch.decode_events`` for Pravega's framing: the events of the whole frames of ``buf``
    as columns (routing keys all null, event times ``NO_EVENT_TIME``) and the bytes consumed. O(len(buf))."""
    (cols, offs, raw, _), consumed = decode_pravega_block(buf, base_offset)
    n = cols.shape[1]
    wide = offs.dtype == np.int64
    payloads = pa.Array.from_buffers(
        pa.large_binary() if wide else _BINARY, n, [None, pa.py_buffer(offs[1]), pa.py_buffer(raw)]
    )
    return EventColumns(cols[0], cols[2], pa.nulls(n, _STRING), payloads), consumed


def walk_pravega_frames(buf: bytes | bytearray | memoryview) -> tuple[int, int | None, bool]:
    """``frame_batch.walk_frames`` for Pravega's framing: bytes of the whole frames at the start of
    ``buf``, the next frame's full length (``None`` before its header is whole), and whether a
    malformed header stopped the walk. O(frames)."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    if _use_kernels(arr.size):
        whole, nxt, bad = _kernels().walk(arr)
        return int(whole), (int(nxt) if nxt >= 0 else None), bool(bad)
    pos, n = 0, arr.size
    view = arr.data
    while pos + PRAVEGA_HEADER_SIZE <= n:
        kind, ln = _HEADER.unpack_from(view, pos)
        if kind != PRAVEGA_EVENT_TYPE or ln < 0:
            return pos, None, True
        if pos + PRAVEGA_HEADER_SIZE + ln > n:
            return pos, PRAVEGA_HEADER_SIZE + ln, False
        pos += PRAVEGA_HEADER_SIZE + ln
    return pos, None, False


def pravega_frame_ends_of(buf: bytes | bytearray | memoryview) -> tuple[np.ndarray, int]:
    """End positions (in ``buf``) of its whole frames, validated, and the bytes they take. O(frames)."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    if _use_kernels(arr.size):
        out = np.empty(arr.size // PRAVEGA_HEADER_SIZE + 1, np.int64)
        count, consumed, bad = _kernels().ends(arr, out)
        if bad >= 0:
            raise _bad(arr, 0, int(bad))
        return out[:count], int(consumed)
    starts, lens, consumed = _walk_py(arr, 0)
    return starts + lens + PRAVEGA_HEADER_SIZE, consumed


def is_pravega_framed(stream: str, framing: str) -> bool:
    """Whether a reader decodes ``stream`` (framed ``framing``) as Pravega's events (else ingestwm's);
    a framing no reader here decodes is a ``StreamFramingError`` naming the stream and the framing."""
    if framing == FRAMING_PRAVEGA:
        return True
    if framing == FRAMING_INGESTWM:
        return False
    raise StreamFramingError(
        f"stream {stream!r} holds {framing!r}-framed events, which this reader cannot decode (it reads "
        f"{FRAMING_INGESTWM!r} and {FRAMING_PRAVEGA!r} framing): nothing was read"
    )


# ---------------------------------------------------------------------- internals
def _walk_py(arr: np.ndarray, base_offset: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Starts and payload lengths of the whole frames of ``arr`` by a Python loop, and the bytes they take."""
    view = arr.data
    n = arr.size
    pos = 0
    starts: list[int] = []
    lens: list[int] = []
    while pos + PRAVEGA_HEADER_SIZE <= n:
        kind, ln = _HEADER.unpack_from(view, pos)
        if kind != PRAVEGA_EVENT_TYPE or ln < 0:
            raise _bad(arr, base_offset, pos)
        if pos + PRAVEGA_HEADER_SIZE + ln > n:
            break
        starts.append(pos)
        lens.append(ln)
        pos += PRAVEGA_HEADER_SIZE + ln
    return np.array(starts, np.int64), np.array(lens, np.int64), pos


def _bad(arr: np.ndarray, base_offset: int, at: int) -> FrameFormatError:
    kind, ln = _HEADER.unpack_from(arr.data, at)
    if kind != PRAVEGA_EVENT_TYPE:
        what = f"type {kind}, not {PRAVEGA_EVENT_TYPE} (Pravega's Event command)"
    else:
        what = f"negative length {ln}"
    return FrameFormatError(f"Pravega event frame at offset {base_offset + at}: {what}")


def _use_kernels(size: int) -> bool:
    """Whether a buffer of ``size`` bytes goes through the numba kernels (same results as the Python path)."""
    return size >= _NUMBA_MIN_BYTES or (
        size >= _NUMBA_LOADED_MIN_BYTES and (_KERNELS in sys.modules or _FRAME_KERNELS in sys.modules)
    )


def _kernels() -> ModuleType:
    """The numba kernels (``readergroup.format._pravega_kernels``), imported on first use."""
    from . import _pravega_kernels

    return _pravega_kernels
