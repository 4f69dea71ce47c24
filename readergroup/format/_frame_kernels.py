"""Numba kernels over event frames; imported lazily, on first bulk use (docs/design.md §7).

The frame layout is ``readergroup.format.events``'s: ``rest`` u32, ``kind`` u8, ``event_time``
i64, ``key_length`` u16 (15 header bytes, little-endian), the routing key, the payload.
Every kernel walks a whole buffer in one call (never one call per frame), writes into
arrays the caller allocated with numpy (an array a kernel returns costs ~30 us to box: numba
unpickles its dtype), and runs with ``cache=True, nogil=True``, so a
background thread fetching bytes runs beside it. Bytes are copied with LLVM's
``memcpy`` (``_copy``): ~3 ns for a 41-byte key and payload, where a byte loop takes ~30.

Importing this module imports numba (~0.7 s) and loads the kernels from numba's cache
(compiling them takes a few seconds the first time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = [
    "OK",
    "MISMATCH",
    "BAD_HEADER",
    "BAD_KEY",
    "scan",
    "walk",
    "decode_sizes",
    "decode",
    "decode_events",
    "decode_events_at",
    "decode_sizes_many",
    "decode_events_at_many",
    "decode_packed",
    "measure_events",
    "fill_events",
    "encode_frames",
]

OK = 0
BAD_HEADER = 1
"""A header whose ``rest`` is shorter than its fixed part and key, or an unknown kind."""
BAD_KEY = 2
"""A complete frame whose routing key is not valid UTF-8."""

_HEADER = 15
_FIXED = 11
_MAX_KIND = 2

_F = TypeVar("_F", bound=Callable[..., Any])
_cgutils: Any = cgutils


def _jit(fn: _F) -> _F:
    return cast(_F, numba.njit(cache=True, nogil=True)(fn))


def _copy_codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    dst, dst_at, src, src_at, n = args
    d = context.make_array(signature.args[0])(context, builder, dst)
    s = context.make_array(signature.args[2])(context, builder, src)
    _cgutils.raw_memcpy(builder, builder.gep(d.data, [dst_at]), builder.gep(s.data, [src_at]), n, 1)
    return context.get_dummy_value()


def _copy_typing(typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, n: Any) -> Any:
    return types.void(dst, types.int64, src, types.int64, types.int64), _copy_codegen


_copy: Any = intrinsic(_copy_typing)
"""``_copy(dst, dst_at, src, src_at, n)``: ``dst[dst_at:dst_at+n] = src[src_at:src_at+n]`` as one
``memcpy`` (no bounds check: the callers size their outputs)."""


@numba.njit(cache=True, nogil=True, inline="always")
def _u32(buf: Any, p: int) -> Any:
    return (
        np.int64(buf[p])
        | (np.int64(buf[p + 1]) << 8)
        | (np.int64(buf[p + 2]) << 16)
        | (np.int64(buf[p + 3]) << 24)
    )


@numba.njit(cache=True, nogil=True, inline="always")
def _u16(buf: Any, p: int) -> Any:
    return np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8)


@numba.njit(cache=True, nogil=True, inline="always")
def _i64(buf: Any, p: int) -> Any:
    v = np.uint64(0)
    for i in range(8):
        v |= np.uint64(buf[p + i]) << np.uint64(8 * i)
    return np.int64(v)


@numba.njit(cache=True, nogil=True)
def _utf8_ok(buf: Any, start: int, n: int) -> bool:
    """Whether ``buf[start:start+n]`` is valid UTF-8 as Python's strict codec sees it (no surrogates)."""
    i = start
    end = start + n
    while i < end:
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            need = 1
            lo, hi = 0x80, 0xBF
        elif c == 0xE0:
            need = 2
            lo, hi = 0xA0, 0xBF
        elif c == 0xED:
            need = 2
            lo, hi = 0x80, 0x9F
        elif 0xE1 <= c <= 0xEF:
            need = 2
            lo, hi = 0x80, 0xBF
        elif c == 0xF0:
            need = 3
            lo, hi = 0x90, 0xBF
        elif 0xF1 <= c <= 0xF3:
            need = 3
            lo, hi = 0x80, 0xBF
        elif c == 0xF4:
            need = 3
            lo, hi = 0x80, 0x8F
        else:
            return False
        if i + need >= end:  # the sequence is cut short by the key's end
            return False
        c1 = buf[i + 1]
        if c1 < lo or c1 > hi:
            return False
        for j in range(2, need + 1):
            cj = buf[i + j]
            if cj < 0x80 or cj > 0xBF:
                return False
        i += need + 1
    return True


@_jit
def scan(buf: Any, starts: Any, lengths: Any, kinds: Any, times: Any, klens: Any) -> tuple[int, int, int]:
    """Walk the frames of ``buf``: fill the outputs; return (count, consumed, offset of a bad frame or -1)."""
    n = buf.size
    pos = 0
    count = 0
    while pos + _HEADER <= n:
        rest = _u32(buf, pos)
        kind = buf[pos + 4]
        klen = _u16(buf, pos + 13)
        if rest < _FIXED + klen or kind > _MAX_KIND:
            return count, pos, pos
        if pos + 4 + rest > n:
            break
        starts[count] = pos
        lengths[count] = 4 + rest
        kinds[count] = kind
        times[count] = _i64(buf, pos + 5)
        klens[count] = klen
        count += 1
        pos += 4 + rest
    return count, pos, -1


@_jit
def walk(buf: Any) -> tuple[int, int, int]:
    """Jump from header to header: (bytes of whole frames, the next frame's length or -1, 1 if malformed).

    Counts a frame as ``measure_events`` does (a whole, valid 15-byte header first);
    a malformed header ends the walk with the third value 1. O(frames).
    """
    n = buf.size
    pos = 0
    while pos + _HEADER <= n:
        rest = _u32(buf, pos)
        klen = _u16(buf, pos + 13)
        if rest < _FIXED + klen or buf[pos + 4] > _MAX_KIND:
            return pos, -1, 1
        if pos + 4 + rest > n:
            return pos, 4 + rest, 0
        pos += 4 + rest
    if pos + 4 <= n:
        return pos, 4 + _u32(buf, pos), 0
    return pos, -1, 0


@_jit
def decode_sizes(buf: Any, events_only: bool) -> tuple[int, int, int, int, int]:
    """The first pass of ``decode``: (frames, key bytes, payload bytes, bytes consumed, offset of a
    malformed header or -1) of the complete frames of ``buf`` (only events if ``events_only``)."""
    n = buf.size
    pos = 0
    count = 0
    key_bytes = 0
    pay_bytes = 0
    while pos + _HEADER <= n:
        rest = _u32(buf, pos)
        kind = buf[pos + 4]
        klen = _u16(buf, pos + 13)
        if rest < _FIXED + klen or kind > _MAX_KIND:
            return count, key_bytes, pay_bytes, pos, pos
        if pos + 4 + rest > n:
            break
        if not events_only or kind == 0:
            count += 1
            key_bytes += klen
            pay_bytes += 4 + rest - _HEADER - klen
        pos += 4 + rest
    return count, key_bytes, pay_bytes, pos, -1


@_jit
def decode(
    buf: Any,
    events_only: bool,
    starts: Any,
    lengths: Any,
    kinds: Any,
    times: Any,
    key_off: Any,
    keys: Any,
    pay_off: Any,
    pays: Any,
) -> None:
    """``decode_columns`` in one call after ``decode_sizes`` sized the outputs: frame starts, lengths,
    kinds, event times, key offsets (``count + 1``, int64) and bytes, payload offsets and bytes."""
    count = starts.size
    key_off[0] = 0
    pay_off[0] = 0
    pos = 0
    i = 0
    while i < count:
        rest = _u32(buf, pos)
        kind = buf[pos + 4]
        size = 4 + rest
        if not events_only or kind == 0:
            klen = _u16(buf, pos + 13)
            plen = size - _HEADER - klen
            starts[i] = pos
            lengths[i] = size
            kinds[i] = kind
            times[i] = _i64(buf, pos + 5)
            _copy(keys, key_off[i], buf, np.int64(pos + _HEADER), np.int64(klen))
            _copy(pays, pay_off[i], buf, np.int64(pos + _HEADER + klen), np.int64(plen))
            key_off[i + 1] = key_off[i] + klen
            pay_off[i + 1] = pay_off[i] + plen
            i += 1
        pos += size


@_jit
def decode_events(buf: Any, base: int, cols: Any, offs: Any, raw: Any, key_bytes: int) -> int:
    """The events of ``buf`` (``count`` of them, sized by ``decode_sizes(buf, True)``) as a reader's block.

    ``cols`` (4 x count int64): each event's segment offset (``base`` + its start), frame
    length and event time (row 3 is left to the caller); ``offs`` (2 x count + 1, int32 or
    int64): Arrow offsets of the keys and of the payloads; ``raw``: the key bytes
    (``key_bytes`` of them), then the payload bytes. Returns the index of the first event
    whose routing key is not valid UTF-8, or -1. O(bytes).
    """
    count = cols.shape[1]
    offs[0, 0] = 0
    offs[1, 0] = 0
    ko: Any = np.int64(0)
    po: Any = np.int64(key_bytes)
    pos: Any = np.int64(0)
    i = 0
    bad = -1
    while i < count:
        rest = _u32(buf, pos)
        size = 4 + rest
        if buf[pos + 4] == 0:
            klen = _u16(buf, pos + 13)
            plen = size - _HEADER - klen
            cols[0, i] = base + pos
            cols[1, i] = size
            cols[2, i] = _i64(buf, pos + 5)
            if bad < 0 and not _utf8_ok(buf, pos + _HEADER, klen):
                bad = i
            _copy(raw, ko, buf, pos + _HEADER, klen)
            _copy(raw, po, buf, pos + _HEADER + klen, plen)
            ko += klen
            po += plen
            offs[0, i + 1] = ko
            offs[1, i + 1] = po - key_bytes
            i += 1
        pos += size
    return bad


MISMATCH = -2
"""``decode_events_at``: the records given do not start where the frames do (the caller decodes otherwise)."""


@_jit
def decode_events_at(
    buf: Any,
    base: int,
    consumed: int,
    key_bytes: int,
    starts: Any,
    values: Any,
    add: int,
    last: int,
    cols: Any,
    after: Any,
    offs: Any,
    raw: Any,
) -> int:
    """``decode_events`` of ``buf[:consumed]`` (sized by ``decode_sizes(buf, True)``), with a value per
    event and what follows each event, from per-record values: ``starts[j]`` is where record j of
    ``buf`` starts (plus ``base``) and ``values[j]`` the value there, ``values[k]`` the value at the end
    of the last of the ``k`` records. Row 3 of ``cols`` is each event's value plus ``add``; ``after``
    (2 x count) the position after each event (the next event's offset, ``base + consumed`` after the
    last) and the value there (the last event's: ``last`` if the whole frames fill ``buf``, else
    ``values[k]``). Returns the index of the first event whose routing key is not valid UTF-8,
    ``MISMATCH`` if the frames are not exactly the records of ``starts``, else -1. O(bytes).
    """
    count = cols.shape[1]
    k = starts.shape[0]
    if values.shape[0] != k + 1:
        return MISMATCH
    offs[0, 0] = 0
    offs[1, 0] = 0
    ko: Any = np.int64(0)
    po: Any = np.int64(key_bytes)
    pos: Any = np.int64(0)
    i = 0
    j = 0
    bad = -1
    while pos < consumed:
        if j >= k or starts[j] != base + pos:
            return MISMATCH
        rest = _u32(buf, pos)
        size = 4 + rest
        if buf[pos + 4] == 0:
            if i >= count:
                return MISMATCH
            klen = _u16(buf, pos + 13)
            plen = size - _HEADER - klen
            at = base + pos
            v = values[j]
            cols[0, i] = at
            cols[1, i] = size
            cols[2, i] = _i64(buf, pos + 5)
            cols[3, i] = v + add
            if i > 0:
                after[0, i - 1] = at
                after[1, i - 1] = v
            if bad < 0 and not _utf8_ok(buf, pos + _HEADER, klen):
                bad = i
            _copy(raw, ko, buf, pos + _HEADER, klen)
            _copy(raw, po, buf, pos + _HEADER + klen, plen)
            ko += klen
            po += plen
            offs[0, i + 1] = ko
            offs[1, i + 1] = po - key_bytes
            i += 1
        pos += size
        j += 1
    if j != k or i != count or pos != consumed:
        return MISMATCH
    if count:
        after[0, count - 1] = base + consumed
        after[1, count - 1] = last if consumed == buf.shape[0] else values[k]
    return bad


@_jit
def decode_sizes_many(buf: Any, meta: Any, places: Any) -> tuple[int, int, int, int]:
    """``decode_sizes(part, True)`` of each part ``buf[meta[b, 0]:meta[b, 0] + meta[b, 1]]``, and where
    its events go when the parts are decoded side by side, into ``places[b]``: its first column, 0, its
    events, its first Arrow offset, where its keys and where its payloads start, the bytes it consumed,
    its payload bytes. Returns (the first part with a bad header or no whole event, else -1; events;
    bytes of keys and payloads; bytes of keys)."""
    c = 0
    r = 0
    keys = 0
    for b in range(meta.shape[0]):
        a = meta[b, 0]
        count, key_bytes, pay_bytes, consumed, bad = decode_sizes(buf[a : a + meta[b, 1]], True)
        if bad >= 0 or count == 0:
            return b, 0, 0, 0
        places[b, 0] = c
        places[b, 1] = 0
        places[b, 2] = count
        places[b, 3] = c + b
        places[b, 4] = r
        places[b, 5] = r + key_bytes
        places[b, 6] = consumed
        places[b, 7] = pay_bytes
        c += count
        r += key_bytes + pay_bytes
        keys += key_bytes
    return -1, c, r, keys


@_jit
def decode_events_at_many(
    buf: Any,
    meta: Any,
    places: Any,
    starts: Any,
    values: Any,
    add: int,
    cols: Any,
    after: Any,
    offs: Any,
    raw: Any,
) -> int:
    """``decode_events_at`` of each part of ``buf`` placed by ``decode_sizes_many``, side by side: part
    b is ``buf[meta[b, 0]:][:meta[b, 1]]`` read at offset ``meta[b, 2]``, its ``last`` is ``meta[b, 3]``,
    its records' starts ``starts[meta[b, 4]:][:meta[b, 5]]`` and values ``values[meta[b, 4] + b:]
    [:meta[b, 5] + 1]``; its events go to its columns of ``cols``/``after``, its Arrow offsets to its
    ``count + 1`` of ``offs`` and its bytes (keys, then payloads) to its bytes of ``raw``, as
    ``places[b]`` says. Returns the first part whose ``decode_events_at`` did not return -1, else -1.
    O(bytes)."""
    for b in range(meta.shape[0]):
        a = meta[b, 0]
        s0 = meta[b, 4]
        k = meta[b, 5]
        c = places[b, 0]
        n = places[b, 2]
        o = places[b, 3]
        r = places[b, 4]
        kb = places[b, 5] - r
        res = decode_events_at(
            buf[a : a + meta[b, 1]], meta[b, 2], places[b, 6], kb, starts[s0 : s0 + k],
            values[s0 + b : s0 + b + k + 1], add, meta[b, 3], cols[:, c : c + n], after[:, c : c + n],
            offs[:, o : o + n + 1], raw[r : r + kb + places[b, 7]],
        )  # fmt: skip
        if res != -1:
            return b
    return -1


@_jit
def decode_packed(
    buf: Any,
    meta: Any,
    places: Any,
    starts: Any,
    values: Any,
    add: int,
    cols: Any,
    after: Any,
    offs: Any,
    raw: Any,
) -> tuple[int, int, int, int, bool]:
    """``decode_sizes_many`` then ``decode_events_at_many`` in one call, into arrays sized for as many
    events as records (``starts``), ``raw`` for ``buf``'s bytes: decoded there if the records are all
    events, else only sized (the caller sizes the arrays and calls ``decode_events_at_many``). Returns
    (``decode_sizes_many``'s first part that would not decode, -1 if none, or the first part whose
    decode failed; events; bytes; key bytes; whether decoded). O(bytes)."""
    bad, events, nbytes, key_bytes = decode_sizes_many(buf, meta, places)
    if bad >= 0 or events != cols.shape[1]:
        return bad, events, nbytes, key_bytes, False
    bad = decode_events_at_many(buf, meta, places, starts, values, add, cols, after, offs, raw)
    return bad, events, nbytes, key_bytes, True


@_jit
def measure_events(buf: Any, check_event_keys: bool = True) -> tuple[int, int, int, int, int, int]:
    """Validate the complete frames of ``buf`` in order, as ``decode_frames`` does, and size the events.

    Returns (events, key bytes, payload bytes, bytes consumed, status, offset of the
    bad frame or -1); ``status`` is ``OK``, ``BAD_HEADER`` or ``BAD_KEY`` (keys of
    writer markers are checked too). ``check_event_keys=False`` leaves the UTF-8 of
    the events' keys unchecked (the caller checks them in bulk, ``decode_events``: the
    per-key check is most of this kernel's time). O(frames + key bytes).
    """
    n = buf.size
    pos = 0
    events = 0
    key_bytes = 0
    payload_bytes = 0
    while pos + _HEADER <= n:
        rest = _u32(buf, pos)
        kind = buf[pos + 4]
        klen = _u16(buf, pos + 13)
        if rest < _FIXED + klen or kind > _MAX_KIND:
            return events, key_bytes, payload_bytes, pos, BAD_HEADER, pos
        if pos + 4 + rest > n:
            break
        if (check_event_keys or kind != 0) and not _utf8_ok(buf, pos + _HEADER, klen):
            return events, key_bytes, payload_bytes, pos, BAD_KEY, pos
        if kind == 0:
            events += 1
            key_bytes += klen
            payload_bytes += rest - _FIXED - klen
        pos += 4 + rest
    return events, key_bytes, payload_bytes, pos, OK, -1


@_jit
def fill_events(
    buf: Any,
    consumed: int,
    base_offset: int,
    offsets: Any,
    times: Any,
    key_offsets: Any,
    key_data: Any,
    payload_offsets: Any,
    payload_data: Any,
) -> None:
    """Write the events of ``buf[:consumed]`` (validated and sized by ``measure_events``) as columns.

    ``offsets``/``times``: one int64 per event; ``key_offsets``/``payload_offsets``:
    Arrow offsets (events + 1 entries, int32 or int64) into ``key_data``/``payload_data``.
    """
    pos = 0
    i = 0
    ko = 0
    po = 0
    key_offsets[0] = 0
    payload_offsets[0] = 0
    while pos < consumed:
        rest = _u32(buf, pos)
        if buf[pos + 4] == 0:
            klen = _u16(buf, pos + 13)
            plen = rest - _FIXED - klen
            offsets[i] = base_offset + pos
            times[i] = _i64(buf, pos + 5)
            _copy(key_data, ko, buf, pos + _HEADER, klen)
            _copy(payload_data, po, buf, pos + _HEADER + klen, plen)
            ko += klen
            po += plen
            i += 1
            key_offsets[i] = ko
            payload_offsets[i] = po
        pos += 4 + rest


@_jit
def encode_frames(
    key_offsets: Any,
    key_data: Any,
    payload_offsets: Any,
    payload_data: Any,
    times: Any,
    kind: int,
    ends: Any,
    out: Any,
) -> None:
    """Frame row i from its key ``key_data[key_offsets[i]:key_offsets[i+1]]``, payload and time.

    ``ends[i]`` is where frame i ends in ``out`` (sized by the caller from the lengths).
    """
    pos = np.int64(0)
    for i in range(times.size):
        k0 = np.int64(key_offsets[i])
        klen = np.int64(key_offsets[i + 1]) - k0
        p0 = np.int64(payload_offsets[i])
        plen = np.int64(payload_offsets[i + 1]) - p0
        rest = _FIXED + klen + plen
        for b in range(4):
            out[pos + b] = (rest >> (8 * b)) & 0xFF
        out[pos + 4] = kind
        t = np.uint64(times[i])
        for b in range(8):
            out[pos + 5 + b] = (t >> np.uint64(8 * b)) & np.uint64(0xFF)
        out[pos + 13] = klen & 0xFF
        out[pos + 14] = (klen >> 8) & 0xFF
        _copy(out, pos + _HEADER, key_data, k0, klen)
        _copy(out, pos + _HEADER + klen, payload_data, p0, plen)
        pos += 4 + rest
        ends[i] = pos
