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

__all__ = ["walk_records", "record_starts", "SIGNATURES", "STARTS_SIGNATURES"]

SIGNATURES = [
    "UniTuple(int64, 2)(Array(uint8, 1, 'C', readonly=True), int64)",
    "UniTuple(int64, 2)(uint8[::1], int64)",
]
"""``(records, bytes)`` of a C-contiguous ``uint8`` buffer, read-only or writable, and an int64 limit."""
STARTS_SIGNATURES = [
    "UniTuple(int64, 2)(Array(uint8, 1, 'C', readonly=True), int64[::1])",
    "UniTuple(int64, 2)(uint8[::1], int64[::1])",
]
"""``record_starts``: a buffer as above and the int64 output array (one slot per possible record)."""


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


@numba.njit(STARTS_SIGNATURES, cache=True, nogil=True)
def record_starts(buf: npt.NDArray[np.uint8], out: npt.NDArray[np.int64]) -> tuple[int, int]:
    """Where each whole record at the start of ``buf`` starts (into ``out``): (records, bytes). O(records)."""
    n = buf.shape[0]
    pos = 0
    count = 0
    while count < out.shape[0] and pos + 4 <= n:
        length = (
            int(buf[pos]) | (int(buf[pos + 1]) << 8) | (int(buf[pos + 2]) << 16) | (int(buf[pos + 3]) << 24)
        )
        end = pos + 4 + length
        if end > n:
            break
        out[count] = pos
        pos = end
        count += 1
    return count, pos
