"""Numba kernel of ``records``: the walk over length-prefixed records.

Compiled (or loaded from numba's cache) when imported, for its two explicit signatures
only (a read-only buffer: bytes read from a file; a writable one: a view of a
segment's memory), so a call never compiles: ``segmentstore.core.warmup`` imports it
before a server answers.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["walk_records", "record_bounds", "SIGNATURES", "BOUNDS_SIGNATURES"]

SIGNATURES = [
    "UniTuple(int64, 2)(Array(uint8, 1, 'C', readonly=True), int64)",
    "UniTuple(int64, 2)(uint8[::1], int64)",
]
"""``(records, bytes)`` of a C-contiguous ``uint8`` buffer, read-only or writable, and an int64 limit."""
BOUNDS_SIGNATURES = [
    "int64(Array(uint8, 1, 'C', readonly=True), int64[::1], int64)",
    "int64(uint8[::1], int64[::1], int64)",
]
"""``record_bounds``: a buffer as above, the int64 output array (one slot per possible record and one
more) and the offset to add."""


@numba.njit(SIGNATURES, cache=True, nogil=True)
def walk_records(buf: npt.NDArray[np.uint8], max_records: int) -> tuple[int, int]:
    """(records, bytes) of the whole records at the start of ``buf``, at most ``max_records``. O(records)."""
    n = buf.shape[0]
    pos = 0
    count = 0
    while count < max_records and pos + 4 <= n:
        length = (
            int(buf[pos]) | (int(buf[pos + 1]) << 8) | (int(buf[pos + 2]) << 16) | (int(buf[pos + 3]) << 24)
        )
        end = pos + 4 + length
        if end > n:
            break
        pos = end
        count += 1
    return count, pos


@numba.njit(BOUNDS_SIGNATURES, cache=True, nogil=True)
def record_bounds(buf: npt.NDArray[np.uint8], out: npt.NDArray[np.int64], base: int) -> int:
    """Where each whole record at the start of ``buf`` starts, then where the last one ends, each plus
    ``base``, into ``out`` (at most ``out.shape[0] - 1`` records); returns how many records. O(records)."""
    n = buf.shape[0]
    pos = 0
    count = 0
    while count < out.shape[0] - 1 and pos + 4 <= n:
        length = (
            int(buf[pos]) | (int(buf[pos + 1]) << 8) | (int(buf[pos + 2]) << 16) | (int(buf[pos + 3]) << 24)
        )
        end = pos + 4 + length
        if end > n:
            break
        out[count] = base + pos
        pos = end
        count += 1
    out[count] = base + pos
    return count
