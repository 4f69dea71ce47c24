"""Length-prefixed records: finding their boundaries inside the store, without sending the bytes.

A *record* is a u32 little-endian length ``L`` followed by ``L`` bytes (the store needs
nothing else of it; ``readergroup``'s event frames are such records). A client that
must cut a segment range at record boundaries (the Spark source's planner admitting
``maxEventsPerTrigger`` events) would otherwise read every byte of the range only to
walk the length prefixes; ``scan_records`` walks them where the bytes are and answers
with where the records end and how many there are: two integers instead of the range.

The store does not know whether a segment holds records: a scan of other bytes walks
whatever lengths it finds, and whoever reads the range validates it.

Costs: O(bytes examined) copying (chunks of ``SCAN_CHUNK_BYTES``, the container's lock
held per chunk only) plus a few ns per record (a numba kernel, loaded on first use,
for chunks of at least ``_NUMBA_MIN_BYTES``; plain Python below). One call examines at
most ``SCAN_MAX_BYTES`` (plus one record if a record is larger), so that a server
thread is never held long; the caller goes on from ``RecordScan.end``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "RECORD_PREFIX_BYTES",
    "SCAN_CHUNK_BYTES",
    "SCAN_MAX_BYTES",
    "walk_records",
    "record_bounds",
    "prepare",
    "loaded",
]

RECORD_PREFIX_BYTES = 4
"""The length prefix: u32 little-endian, the number of bytes after it."""
SCAN_CHUNK_BYTES = 1 << 20
"""Bytes copied out of a segment per step (the lock is held for one step)."""
SCAN_MAX_BYTES = 16 << 20
"""Bytes one ``scan_records`` call examines at most (it always completes a record that fits)."""
_NUMBA_MIN_BYTES = 1 << 15
_U32 = struct.Struct("<I")

_kernel: Callable[[Any, int], tuple[int, int]] | None = None
_bounds_kernel: Callable[[Any, Any, int], int] | None = None


def _walk_py(buf: bytes | memoryview, max_records: int) -> tuple[int, int]:
    n = len(buf)
    pos = count = 0
    unpack = _U32.unpack_from
    while count < max_records and pos + 4 <= n:
        end = pos + 4 + unpack(buf, pos)[0]
        if end > n:
            break
        pos = end
        count += 1
    return count, pos


def prepare(size: int) -> None:
    """Load the kernel now if walks of ``size`` bytes use it (numba's import: never under a lock)."""
    global _kernel, _bounds_kernel
    if size >= _NUMBA_MIN_BYTES and _kernel is None:
        from ._record_kernels import record_bounds as bounds
        from ._record_kernels import walk_records as kernel

        _kernel, _bounds_kernel = kernel, bounds


def loaded() -> bool:
    """Whether the kernels are loaded (``prepare`` has nothing left to do)."""
    return _kernel is not None


def walk_records(buf: bytes | memoryview, max_records: int) -> tuple[int, int]:
    """``(records, bytes)``: the whole records at the start of ``buf``, at most ``max_records``."""
    if len(buf) < _NUMBA_MIN_BYTES:
        return _walk_py(buf, max_records)
    prepare(len(buf))
    assert _kernel is not None
    count, used = _kernel(np.frombuffer(buf, np.uint8), max_records)
    return int(count), int(used)


def record_bounds(buf: bytes | memoryview, base: int) -> tuple[np.ndarray, int]:
    """``(bounds, count)``: where each of the ``count`` whole records at the start of ``buf`` starts and,
    last, where the last one ends (``count + 1`` int64 offsets, 0 the end if none), each plus ``base``
    (the offset ``buf`` was read at). O(records): plain Python below ``_NUMBA_MIN_BYTES`` until the
    kernel is loaded."""
    n = len(buf)
    if n < _NUMBA_MIN_BYTES and _bounds_kernel is None:
        starts: list[int] = []
        pos = 0
        unpack = _U32.unpack_from
        while pos + 4 <= n:
            end = pos + 4 + unpack(buf, pos)[0]
            if end > n:
                break
            starts.append(base + pos)
            pos = end
        starts.append(base + pos)
        return np.array(starts, np.int64), len(starts) - 1
    prepare(_NUMBA_MIN_BYTES)
    assert _bounds_kernel is not None
    out = np.empty(n // RECORD_PREFIX_BYTES + 2, np.int64)
    count = int(_bounds_kernel(np.frombuffer(buf, np.uint8), out, base))
    return out[: count + 1], count  # (a view: the answer it goes into is short-lived)
