"""Event frames in bulk: a buffer of frames as Arrow-ready event columns, and Arrow columns as frames.

For the engines (the Spark source and sink), which move events by the ten thousand:

- ``decode_events`` turns the complete frames of a buffer into ``EventColumns``:
  segment offsets and event times as numpy int64, routing keys and payloads as Arrow
  string/binary arrays built from their buffers (``pa.Array.from_buffers``). Two numba
  kernels walk the raw bytes (validate and size; then fill), no Python object per
  event. Writer markers are validated and left out. The columns, the bytes consumed
  and the errors are exactly ``decode_frames``'s.
- ``walk_frames`` finds where the whole frames of a buffer end by jumping from header
  to header (a fetcher uses it to start its next read at a frame boundary).
- ``encode_events`` frames Arrow columns in one kernel call: ``EncodedEvents`` holds
  the frames back to back with their ends and each row's routing-key hash, for a
  writer's ``write_encoded``. The frames are byte for byte ``encode_event``'s and so
  are its errors.

Buffers below 32 KiB take a Python path (``decode_frames``, a header loop), so a
short read pays no numba import or kernel load (numba is imported on first bulk use,
docs/design.md §7).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import pyarrow as pa

from ..errors import FrameFormatError, InvalidEventError
from .events import (
    HEADER_SIZE,
    KIND_EVENT,
    KIND_IDLE,
    MAX_KEY_BYTES,
    NO_EVENT_TIME,
    decode_frames,
    encode_event,
)
from .routing import key_hash

__all__ = ["EventColumns", "EncodedEvents", "decode_events", "walk_frames", "encode_events"]

_KERNEL_MIN_BYTES = 32 * 1024
"""``decode_events`` runs the numba kernels from this buffer size on."""
_OFFSET32_MAX = 2**31 - 1
_MAX_REST = 0xFFFFFFFF
_FIXED = HEADER_SIZE - 4
_HEADER = struct.Struct("<IBqH")


@dataclass(frozen=True, slots=True, eq=False)
class EventColumns:
    """The events of a buffer of frames, column by column, in segment order (writer markers left out).

    ``offsets``: int64 segment offsets of the frames; ``event_times``: int64 ms,
    ``NO_EVENT_TIME`` for none; ``routing_keys``: Arrow string (``large_string`` past
    2 GiB); ``payloads``: Arrow binary (``large_binary`` past 2 GiB).
    """

    offsets: np.ndarray
    event_times: np.ndarray
    routing_keys: pa.Array
    payloads: pa.Array

    def __len__(self) -> int:
        return len(self.offsets)


def decode_events(buf: bytes | bytearray | memoryview, base_offset: int = 0) -> tuple[EventColumns, int]:
    """The events of the complete frames of ``buf`` (at segment offset ``base_offset``), bytes consumed.

    A partial frame at the end is left for the next read. Raises ``FrameFormatError``
    at the first malformed frame, as ``decode_frames``. O(len(buf)); ~10 ns per
    57-byte frame through the kernels: the headers are validated frame by frame, the
    events' routing keys in one pass over their bytes (all ASCII is valid UTF-8; a
    buffer with another byte in a key has each key checked as the codec would).
    """
    return _decode(buf, base_offset, len(buf) >= _KERNEL_MIN_BYTES)


def walk_frames(buf: bytes | bytearray | memoryview) -> tuple[int, int | None, bool]:
    """Bytes of the whole frames at the start of ``buf``, the next frame's full length, and whether malformed.

    Headers only: a frame counts once its 15-byte header is there and valid and its
    bytes are; the next frame's length is known from its first 4 bytes (``None``
    before). The third value is True when a malformed header stopped the walk
    (``decode_events`` raises there). O(frames), a few ns per frame.
    """
    return _walk(buf, len(buf) >= _KERNEL_MIN_BYTES)


def _walk(buf: bytes | bytearray | memoryview, kernels: bool) -> tuple[int, int | None, bool]:
    """``walk_frames`` with the path chosen: the numba kernel or a Python loop over the headers."""
    if kernels:
        whole, nxt, bad = _kernels().walk(np.frombuffer(buf, dtype=np.uint8))
        return int(whole), (int(nxt) if nxt >= 0 else None), bool(bad)
    view = memoryview(buf).cast("B")
    n = len(view)
    pos = 0
    while pos + HEADER_SIZE <= n:
        rest, kind, _, klen = _HEADER.unpack_from(view, pos)
        if rest < _FIXED + klen or kind > KIND_IDLE:
            return pos, None, True
        if pos + 4 + rest > n:
            return pos, 4 + rest, False
        pos += 4 + rest
    if pos + 4 <= n:
        return pos, 4 + int.from_bytes(view[pos : pos + 4], "little"), False
    return pos, None, False


def _decode(buf: bytes | bytearray | memoryview, base_offset: int, kernels: bool) -> tuple[EventColumns, int]:
    """``decode_events`` with the path chosen: the numba kernels or ``decode_frames``."""
    if not kernels:
        frames, consumed = decode_frames(buf, base_offset)
        events = [f for f in frames if f.kind == KIND_EVENT]
        keys = [f.routing_key for f in events]
        payloads = [f.payload for f in events]
        key_type = _types(sum(len(k.encode()) for k in keys))[0]
        payload_type = _types(sum(map(len, payloads)), binary=True)[0]
        columns = EventColumns(
            np.array([f.offset for f in events], np.int64),
            np.array([NO_EVENT_TIME if f.event_time is None else f.event_time for f in events], np.int64),
            pa.array(keys, key_type),
            pa.array(payloads, payload_type),
        )
        return columns, consumed
    k = _kernels()
    arr = np.frombuffer(buf, dtype=np.uint8)
    # events' keys are checked for UTF-8 in bulk below (all ASCII: valid), markers' keys here
    n, key_bytes, payload_bytes, consumed, status, _ = k.measure_events(arr, False)
    if status != k.OK:  # an event's key before the bad header may be the first error
        _raise_if_malformed(k, arr, base_offset)
    (key_type, key_off), (payload_type, payload_off) = _types(key_bytes), _types(payload_bytes, binary=True)
    offsets = np.empty(n, np.int64)
    times = np.empty(n, np.int64)
    key_offsets = np.empty(n + 1, key_off)
    key_data = np.empty(key_bytes, np.uint8)
    payload_offsets = np.empty(n + 1, payload_off)
    payload_data = np.empty(payload_bytes, np.uint8)
    k.fill_events(
        arr, consumed, base_offset, offsets, times, key_offsets, key_data, payload_offsets, payload_data
    )
    if key_bytes and int(key_data.max()) >= 0x80:  # a key that is not ASCII: each one checked as UTF-8
        _raise_if_malformed(k, arr, base_offset)
    keys = pa.Array.from_buffers(key_type, n, [None, pa.py_buffer(key_offsets), pa.py_buffer(key_data)])
    payloads = pa.Array.from_buffers(
        payload_type, n, [None, pa.py_buffer(payload_offsets), pa.py_buffer(payload_data)]
    )
    return EventColumns(offsets, times, keys, payloads), int(consumed)


def _raise_if_malformed(k: ModuleType, arr: np.ndarray, base_offset: int) -> None:
    """Raise the first malformed frame's error, as ``decode_frames`` does (same message, same frame);
    return if every frame (every key checked as UTF-8) is well-formed. O(len(arr))."""
    *_, status, at = k.measure_events(arr, True)
    if status != k.OK:
        bad_end = at + HEADER_SIZE if status == k.BAD_HEADER else at + 4 + _rest(arr, at)
        decode_frames(arr[:bad_end].tobytes(), base_offset)
        raise FrameFormatError(f"frame at offset {base_offset + at}: malformed")  # not reached


def _types(total: int, binary: bool = False) -> tuple[pa.DataType, type]:
    """The Arrow type and offset dtype for a column of ``total`` bytes (as ``decode_columns`` picks them)."""
    if total <= _OFFSET32_MAX:
        return (pa.binary() if binary else pa.string()), np.int32
    return (pa.large_binary() if binary else pa.large_string()), np.int64


@dataclass(frozen=True, slots=True, eq=False)
class EncodedEvents:
    """Frames of many events back to back, where each ends, and the routing-key hash of each.

    ``data``: the frames; ``ends``: int64 end of frame i in ``data``; ``key_index``:
    int32 index of row i's key into ``key_hashes`` (float64, one per distinct key, as
    ``routing.key_hash``). Built by ``encode_events``.
    """

    data: bytes
    ends: np.ndarray
    key_index: np.ndarray
    key_hashes: np.ndarray

    def __len__(self) -> int:
        return len(self.ends)

    def frames(self) -> list[bytes]:
        """Each frame as its own ``bytes``. O(bytes), one slice per frame."""
        ends = self.ends.tolist()
        data = self.data
        starts = [0, *ends[:-1]] if ends else []
        return [data[a:b] for a, b in zip(starts, ends, strict=True)]

    def hashes(self) -> np.ndarray:
        """Row i's routing-key hash (float64). O(rows)."""
        out: np.ndarray = self.key_hashes[self.key_index]
        return out


def encode_events(
    routing_keys: pa.Array, payloads: pa.Array, event_times: pa.Array | None = None
) -> EncodedEvents:
    """Frame row i of the columns as ``encode_event(routing_keys[i], payloads[i], event_times[i])``.

    ``routing_keys``: string; ``payloads``: binary (a string column is taken as its
    UTF-8 bytes); ``event_times``: int64 ms, a null for none (or no column). A null key
    or payload raises ``InvalidEventError``, as the first row ``encode_event`` refuses
    does, with its message. O(bytes) in one kernel call, plus one ``key_hash`` per
    distinct key.
    """
    n = len(routing_keys)
    if len(payloads) != n or (event_times is not None and len(event_times) != n):
        raise InvalidEventError(
            f"encode_events: columns of different lengths ({n} keys, {len(payloads)} payloads, "
            f"{None if event_times is None else len(event_times)} event times)"
        )
    keys = _column(routing_keys, "routing key", string=True)
    pays = _column(payloads, "payload", string=False)
    times = _times(event_times, n)
    key_offsets, key_data = _buffers(keys)
    payload_offsets, payload_data = _buffers(pays)
    key_lens = np.diff(key_offsets.astype(np.int64))
    rest = _FIXED + key_lens + np.diff(payload_offsets.astype(np.int64))
    bad = (key_lens > MAX_KEY_BYTES) | (rest > _MAX_REST)
    if event_times is not None and event_times.null_count < n:
        bad |= (times == NO_EVENT_TIME) & ~_nulls(event_times)
    if bad.any():  # encode_event refuses the first such row, with its message
        i = int(np.flatnonzero(bad)[0])
        t = None if event_times is None else event_times[i].as_py()
        encode_event(keys[i].as_py(), bytes(pays[i].as_py()), t)
        raise InvalidEventError(f"row {i} cannot be framed")  # not reached
    ends = np.empty(n, np.int64)
    out = np.empty(int(rest.sum()) + 4 * n, np.uint8)
    if n:
        _kernels().encode_frames(
            key_offsets, key_data, payload_offsets, payload_data, times, KIND_EVENT, ends, out
        )
    encoded = keys.dictionary_encode()
    distinct = np.array([key_hash(k) for k in encoded.dictionary.to_pylist()], np.float64)
    index = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int32)
    return EncodedEvents(out.tobytes(), ends, index, distinct)


def _rest(arr: np.ndarray, at: int) -> int:
    return int.from_bytes(arr[at : at + 4].tobytes(), "little")


def _nulls(col: pa.Array) -> np.ndarray:
    return np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _column(col: pa.Array, what: str, string: bool) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if col.null_count:
        raise InvalidEventError(
            f"{what} column has a null value (row {int(col.is_null().index(True).as_py())})"
        )
    if string:
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise InvalidEventError(f"{what} column must be string, got {t}")
        try:
            col.validate(full=True)
        except pa.ArrowInvalid as e:
            raise InvalidEventError(f"{what} column is not valid UTF-8: {e}") from None
        return col
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return col.cast(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())
    if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        raise InvalidEventError(f"{what} column must be binary or string, got {t}")
    return col


def _buffers(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The Arrow offsets (of this slice) and data of a string/binary array, as numpy views."""
    _, off_buf, data_buf = col.buffers()
    dtype = np.int64 if pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type) else np.int32
    offsets = np.frombuffer(off_buf, dtype=dtype)[col.offset : col.offset + len(col) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return np.ascontiguousarray(offsets), data


def _times(event_times: pa.Array | None, n: int) -> np.ndarray:
    if event_times is None:
        return np.full(n, NO_EVENT_TIME, np.int64)
    if isinstance(event_times, pa.ChunkedArray):
        event_times = event_times.combine_chunks()
    if not pa.types.is_integer(event_times.type):
        raise InvalidEventError(f"event time column must be int64 ms, got {event_times.type}")
    return np.asarray(
        event_times.cast(pa.int64()).fill_null(NO_EVENT_TIME).to_numpy(zero_copy_only=False), dtype=np.int64
    )


def _kernels() -> ModuleType:
    """The numba kernels, imported (and loaded from numba's cache) on first use."""
    from . import _frame_kernels

    return _frame_kernels
