"""Numba kernels over Pravega's event frames; imported lazily, on first bulk use (docs/design.md §7).

The frame layout is ``readergroup.format.pravega_frames``'s: a big-endian i32 type (0, the
``Event`` wire command), a big-endian i32 length, the payload. As the kernels of
``_frame_kernels`` (whose ``memcpy`` intrinsic they share): one call walks a whole buffer,
the outputs are allocated by the caller, ``cache=True, nogil=True``.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ._frame_kernels import _copy, _jit

__all__ = ["HEADER", "sizes", "fill", "walk", "ends"]

HEADER = 8
"""Type (4 bytes) and length (4 bytes) before each payload."""


@numba.njit(cache=True, nogil=True, inline="always")
def _i32be(buf: Any, p: int) -> Any:
    v = (
        (np.int64(buf[p]) << 24)
        | (np.int64(buf[p + 1]) << 16)
        | (np.int64(buf[p + 2]) << 8)
        | np.int64(buf[p + 3])
    )
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@_jit
def sizes(buf: Any) -> tuple[int, int, int, int]:
    """(events, payload bytes, bytes of whole frames, offset of a malformed header or -1) of ``buf``.

    A header is malformed when its type is not 0 or its length is negative; the walk stops there
    (the frames before it are counted). O(frames)."""
    n = buf.size
    pos = 0
    count = 0
    pay = 0
    while pos + HEADER <= n:
        if _i32be(buf, pos) != 0:
            return count, pay, pos, pos
        ln = _i32be(buf, pos + 4)
        if ln < 0:
            return count, pay, pos, pos
        if pos + HEADER + ln > n:
            break
        count += 1
        pay += ln
        pos += HEADER + ln
    return count, pay, pos, -1


@_jit
def fill(buf: Any, base: int, cols: Any, offs: Any, raw: Any) -> None:
    """The first ``cols.shape[1]`` frames of ``buf`` (sized by ``sizes``) as a reader's block: ``cols``
    rows 0-2 each event's segment offset (``base`` + its start), frame length and ``event_time``
    (``INT64_MIN``: none; row 3 is the caller's); ``offs`` row 0 all 0 (no routing keys), row 1 the
    payloads' Arrow offsets; ``raw`` the payloads back to back. O(bytes)."""
    count = cols.shape[1]
    none = np.iinfo(np.int64).min
    offs[0, 0] = 0
    offs[1, 0] = 0
    po: Any = np.int64(0)
    pos: Any = np.int64(0)
    for i in range(count):
        ln = _i32be(buf, pos + 4)
        cols[0, i] = base + pos
        cols[1, i] = HEADER + ln
        cols[2, i] = none
        _copy(raw, po, buf, pos + HEADER, ln)
        po += ln
        offs[0, i + 1] = 0
        offs[1, i + 1] = po
        pos += HEADER + ln


@_jit
def walk(buf: Any) -> tuple[int, int, int]:
    """Jump from header to header: (bytes of whole frames, the next frame's full length or -1, 1 if a
    malformed header stopped the walk). O(frames)."""
    n = buf.size
    pos = 0
    while pos + HEADER <= n:
        ln = _i32be(buf, pos + 4)
        if _i32be(buf, pos) != 0 or ln < 0:
            return pos, -1, 1
        if pos + HEADER + ln > n:
            return pos, HEADER + ln, 0
        pos += HEADER + ln
    return pos, -1, 0


@_jit
def ends(buf: Any, out: Any) -> tuple[int, int, int]:
    """End positions of the whole frames of ``buf`` into ``out`` (room for ``buf.size // 8 + 1``):
    (frames, bytes of whole frames, offset of a malformed header or -1). O(frames)."""
    n = buf.size
    pos = 0
    count = 0
    while pos + HEADER <= n:
        ln = _i32be(buf, pos + 4)
        if _i32be(buf, pos) != 0 or ln < 0:
            return count, pos, pos
        if pos + HEADER + ln > n:
            break
        pos += HEADER + ln
        out[count] = pos
        count += 1
    return count, pos, -1
