"""Numba kernels of the watermark index; imported lazily, on first batch use (docs/design.md §7).

Every kernel has one explicit signature (C-contiguous ``int64`` arrays, ``int64``
scalars), ``cache=True`` and, except the scalar lookup, ``nogil=True``. Importing
this module imports numba and loads the kernels from numba's cache (0.3-0.7 s here,
mostly numba's own import and one-time set-up; 10-20 s to compile them the first time).

The index keeps its entries in the rows ``offs``/``wms`` of one ``(2, capacity)``
array, of which the first ``n`` slots are in use. Slots below the live head hold
entries dropped by truncation; they stay sorted and below every valid query, so the
kernels search ``[0, n)``.

``top[k] == offs[k * BLOCK + BLOCK - 1]`` for each full block ``k``: a sample small
enough to stay in the L2 cache. A random query first searches ``top`` (branch-free,
``GROUP`` queries in lockstep so that their cache misses overlap), then counts the
entries below it in one block of ``BLOCK`` entries."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt
from numba import get_num_threads, prange, set_num_threads

__all__ = [
    "BLOCK",
    "CHUNK",
    "GROUP",
    "scalar_lookup",
    "lookup_small",
    "lookup_random",
    "lookup_sorted",
    "append_bulk",
    "lookup_sorted_serial",
    "record_watermarks",
    "packed_record_watermarks",
    "entry_point",
    "parallel_ok",
    "get_num_threads",
    "set_num_threads",
]

BLOCK = 8
"""Entries per block of the two-level search (one cache line of offsets)."""
GROUP = 64
"""Random queries searched in lockstep (independent loads in flight)."""
CHUNK = 4096
"""Queries per parallel task."""

_numba_any: Any = numba
_parallel_ok = True


def _after_fork_in_child() -> None:
    """In a child forked after an OpenMP parallel region ran: no more parallel kernels.

    GNU OpenMP does not survive fork(): numba terminates a child that launches a
    parallel region ("fork() called from a process already using GNU OpenMP").
    Multiprocessing pools and Spark's Python daemon fork. The workqueue and TBB
    layers are fork-safe; OpenMP launches ~10x faster than the workqueue (3 vs 25 us).
    """
    global _parallel_ok
    try:
        layer = _numba_any.threading_layer()
    except ValueError:  # no parallel region has run yet: the child starts afresh
        return
    if layer == "omp":
        _parallel_ok = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def parallel_ok() -> bool:
    """Whether this process may launch parallel kernels (False in an unsafe fork child)."""
    return _parallel_ok


_A = npt.NDArray[np.int64]
_F = TypeVar("_F", bound=Callable[..., Any])

_ARR = "int64[::1]"


def _jit(signature: str | None = None, parallel: bool = False, nogil: bool = True) -> Callable[[_F], _F]:
    """Numba ``njit`` with this module's options (typed for mypy)."""

    def deco(fn: _F) -> _F:
        opts: dict[str, Any] = {"cache": True, "nogil": nogil}
        if parallel:
            opts["parallel"] = True
        jitted = numba.njit(signature, **opts) if signature else numba.njit(**opts)
        return cast(_F, jitted(fn))

    return deco


def entry_point(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled entry of a one-signature kernel: skips numba's type dispatch (~100 ns)."""
    overloads = getattr(kernel, "overloads", None)
    if overloads:
        ep = getattr(next(iter(overloads.values())), "entry_point", None)
        if callable(ep):
            return cast(Callable[..., Any], ep)
    return kernel


@_jit("int64(int64[:, ::1], int64, int64, int64)", nogil=False)
def scalar_lookup(store: _A, lo: int, hi: int, q: int) -> int:
    """``store[1]`` at the first index in ``[lo, hi)`` with ``store[0] >= q`` (caller ensures one).

    O(log n). Runs once per single lookup from Python, so every ~50 ns counts: one
    2-row array rather than two arrays (unboxing), and the GIL kept (releasing and
    taking it back costs more than the search saves other threads).
    """
    while lo < hi:
        mid = (lo + hi) >> 1
        if store[0, mid] < q:
            lo = mid + 1
        else:
            hi = mid
    return int(store[1, lo])


@_jit()
def _lower_bound(offs: _A, lo: int, hi: int, q: int) -> int:
    """First index in ``[lo, hi)`` with ``offs[i] >= q``, else ``hi``. O(log n)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if offs[mid] < q:
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit(f"int64({_ARR}, {_ARR}, int64, int64, {_ARR}, {_ARR}, int64, int64, int64, int64)")
def lookup_small(
    offs: _A,
    wms: _A,
    lo: int,
    n: int,
    qs: _A,
    out: _A,
    lo_q: int,
    hi_q: int,
    tail_val: int,
    add: int,
) -> int:
    """Batch lookup, one plain bisection per query, no thread launch: for a few queries.

    First out-of-range position or -1. O(k log n).
    """
    for i in range(qs.shape[0]):
        q = qs[i]
        if q < lo_q or q > hi_q:
            return i
        idx = _lower_bound(offs, lo, n, q)
        out[i] = wms[idx] + add if idx < n else tail_val
    return -1


_RANDOM_SIG = f"int64({_ARR}, {_ARR}, {_ARR}, int64, {_ARR}, {_ARR}, int64, int64, int64, int64)"


@_jit(_RANDOM_SIG, parallel=True)
def lookup_random(
    offs: _A,
    wms: _A,
    top: _A,
    n: int,
    qs: _A,
    out: _A,
    lo_q: int,
    hi_q: int,
    tail_val: int,
    add: int,
) -> int:
    """Batch lookup of queries in any order; first out-of-range position or -1. O(k log n).

    ``prange`` over chunks of queries. The search is written out in the ``prange``
    body on purpose: only there does numba mark the arrays ``noalias``, which lets
    LLVM turn the lockstep loops into vector gathers (about 3x faster than the same
    code in a helper function or a plain ``njit``, measured). Callers wanting one
    thread set ``numba.set_num_threads(1)`` around the call.
    """
    nq = qs.shape[0]
    nc = (nq + CHUNK - 1) // CHUNK
    nt = top.shape[0]
    bad = np.empty(nc, np.int64)
    for c in prange(nc):
        s = c * CHUNK
        e = min(nq, s + CHUNK)
        base = np.empty(GROUP, np.int64)
        qq = np.empty(GROUP, np.int64)
        first_bad = -1
        g = s
        while g < e:
            m = min(GROUP, e - g)
            for j in range(GROUP):
                base[j] = 0
                qq[j] = qs[g + j] if j < m else lo_q
            nbad = 0
            for j in range(GROUP):
                nbad += (qq[j] < lo_q) | (qq[j] > hi_q)
            if nbad > 0 and first_bad < 0:
                for j in range(GROUP):
                    if qq[j] < lo_q or qq[j] > hi_q:
                        first_bad = g + j
                        break
            # branch-free lower bound over top, GROUP searches one step at a time
            k = nt
            while k > 1:
                half = k >> 1
                for j in range(GROUP):
                    b = base[j]
                    base[j] = b + half * (top[b + half] < qq[j])
                k -= half
            # last top step fused with the block count (a separate loop is 4x slower)
            for j in range(m):
                blk = base[j] + (top[base[j]] < qq[j]) if nt > 0 else 0
                st = blk * BLOCK
                en = min(st + BLOCK, n)
                q = qq[j]
                cnt = 0
                for t in range(st, en):
                    cnt += offs[t] < q
                out[g + j] = st + cnt
            g += GROUP
        # entry index -> value, as a second pass (cheaper than inside the loop above)
        for i in range(s, e):
            idx = out[i]
            out[i] = wms[idx] + add if idx < n else tail_val
        bad[c] = first_bad
    for c in range(nc):
        if bad[c] >= 0:
            return int(bad[c])
    return -1


@_jit()
def _sorted_range(offs: _A, wms: _A, n: int, qs: _A, out: _A, s: int, e: int, tail_val: int, add: int) -> int:
    """Merge walk over ascending ``qs[s:e]``; first descent position or -1. O(k + n).

    Entry-driven: for entry ``j``, a tight loop hands its value to every query up to
    its offset; then ``j`` steps, or gallops when queries are sparser than entries.
    """
    prev = qs[s - 1] if s > 0 else qs[s]
    j = _lower_bound(offs, 0, n, qs[s])
    i = s
    while i < e and j < n:
        o = offs[j]
        w = wms[j] + add
        while i < e:
            q = qs[i]
            if q > o:
                break
            if q < prev:
                return i
            prev = q
            out[i] = w
            i += 1
        if i == e:
            return -1
        q = qs[i]
        j += 1
        if j < n and offs[j] < q:
            # gallop: offs[lo] < q; find hi with offs[hi] >= q (or n), then bisect
            lo = j
            step = 1
            hi = lo + 1
            while hi < n and offs[hi] < q:
                lo = hi
                step <<= 1
                hi = lo + step
            j = _lower_bound(offs, lo + 1, min(hi, n), q)
    while i < e:  # past the last entry: the tail
        q = qs[i]
        if q < prev:
            return i
        prev = q
        out[i] = tail_val
        i += 1
    return -1


_SORTED_SIG = f"int64({_ARR}, {_ARR}, int64, {_ARR}, {_ARR}, int64, int64)"


@_jit(_SORTED_SIG)
def lookup_sorted_serial(offs: _A, wms: _A, n: int, qs: _A, out: _A, tail_val: int, add: int) -> int:
    """:func:`lookup_sorted` on the calling thread only (no parallel region). O(k + n)."""
    return _sorted_range(offs, wms, n, qs, out, 0, qs.shape[0], tail_val, add)


@_jit(_SORTED_SIG, parallel=True)
def lookup_sorted(offs: _A, wms: _A, n: int, qs: _A, out: _A, tail_val: int, add: int) -> int:
    """Batch lookup of ascending queries; first descent position or -1. O(k + n).

    ``prange`` over chunks of queries; each chunk bisects for its first query, then
    merge-walks. On a descent the caller must fall back to :func:`lookup_random`
    (``out`` is then partly written).
    """
    nq = qs.shape[0]
    nc = (nq + CHUNK - 1) // CHUNK
    bad = np.empty(nc, np.int64)
    for c in prange(nc):
        s = c * CHUNK
        e = min(nq, s + CHUNK)
        bad[c] = _sorted_range(offs, wms, n, qs, out, s, e, tail_val, add)
    for c in range(nc):
        if bad[c] >= 0:
            return int(bad[c])
    return -1


_BYTES = "Array(uint8, 1, 'C', readonly=True)"


@_jit()
def _walk_record_watermarks(
    buf: Any,
    base: int,
    offs: _A,
    wms: _A,
    lo: int,
    n: int,
    tail_val: int,
    bounds: _A,
    b0: int,
    room: int,
    out: _A,
    v0: int,
) -> int:
    """``record_watermarks``' walk with its outputs at ``bounds[b0:]`` (``room`` items at most, as the
    length of ``record_watermarks``' ``bounds``) and ``out[v0:]``; ``buf`` an array or ``bytes``."""
    size = len(buf)
    pos = 0
    count = 0
    q = base
    j = _lower_bound(offs, lo, n, q)
    while True:
        while j < n and offs[j] < q:
            j += 1
        bounds[b0 + count] = q
        out[v0 + count] = wms[j] if j < n else tail_val
        if pos + 4 > size or count + 1 >= room - 1:
            return count
        end = (
            pos
            + 4
            + (
                int(buf[pos])
                | (int(buf[pos + 1]) << 8)
                | (int(buf[pos + 2]) << 16)
                | (int(buf[pos + 3]) << 24)
            )
        )
        if end > size:
            return count
        pos = end
        q = base + pos
        count += 1


@_jit(f"int64({_BYTES}, int64, {_ARR}, {_ARR}, int64, int64, int64, {_ARR}, {_ARR})")
def record_watermarks(
    buf: Any, base: int, offs: _A, wms: _A, lo: int, n: int, tail_val: int, bounds: _A, out: _A
) -> int:
    """Where the whole length-prefixed records (u32 little-endian length, then that many bytes) at the
    start of ``buf`` start, then where the last one ends, each plus ``base`` (the offset ``buf`` was read
    at), into ``bounds``; the watermark at each of them into ``out`` (as ``lookup_small`` answers it:
    the first entry in ``[lo, n)`` at or after it, else ``tail_val``). Returns how many records; the
    caller sizes both outputs for ``buf.shape[0] // 4 + 2`` and guarantees every bound is a valid
    query. One walk of the records and one of the entries: O(records + entries in the range)."""
    return _walk_record_watermarks(buf, base, offs, wms, lo, n, tail_val, bounds, 0, bounds.shape[0], out, 0)


_BYTES_OBJ = "Bytes(uint8, 1, 'C', readonly=True)"
"""A ``bytes`` object as numba takes it (through the buffer protocol: no ``np.frombuffer`` first)."""


@_jit(
    f"int64({_BYTES_OBJ}, int64, int64[:, ::1], int64, int64, int64, {_ARR}, int64, int64, int64, "
    "int64[:, ::1], int64, int64, int64)",
    nogil=False,
)
def packed_record_watermarks(
    buf: Any,
    base: int,
    store: Any,
    lo: int,
    n: int,
    tail_val: int,
    out: _A,
    b0: int,
    room: int,
    v0: int,
    meta: Any,
    row: int,
    at: int,
    watermark: int,
) -> int:
    """``record_watermarks`` of the bytes ``buf`` (read at ``base``; ``store``: the index's entries, row
    0 last offsets, row 1 watermarks) into one array, the bounds at ``out[b0:]`` (as a ``bounds`` of
    ``room`` items), the watermarks at ``out[v0:]``, and the read's row of ``PackedReads.meta`` into
    ``meta[row]``: ``(at, len(buf), base, watermark, b0, count)``. Returns the count. One call per
    read of ``read_packed``, so the GIL is kept (as ``scalar_lookup``). O(records + entries in range)."""
    count = _walk_record_watermarks(buf, base, store[0], store[1], lo, n, tail_val, out, b0, room, out, v0)
    meta[row, 0] = at
    meta[row, 1] = len(buf)
    meta[row, 2] = base
    meta[row, 3] = watermark
    meta[row, 4] = b0
    meta[row, 5] = count
    return count


@_jit(f"int64({_ARR}, {_ARR}, int64, int64, int64, int64, int64, {_ARR}, {_ARR})")
def append_bulk(
    offs: _A,
    wms: _A,
    n: int,
    length: int,
    tail: int,
    can_merge: int,
    merge_wm: int,
    ends: _A,
    tss: _A,
) -> int:
    """Validate and append writes (end, ts), one entry per run of equal ts; new n or -1-bad. O(k).

    Slots ``[n, n + len(ends))`` must exist. Writes land at ``n`` and above; a first run
    with ``ts - 1 == merge_wm`` (``can_merge``) extends entry ``n - 1`` instead, written
    only once all of ``ends``/``tss`` validated, so a bad batch changes nothing in use.
    """
    k = ends.shape[0]
    prev_end = length
    prev_ts = tail
    w = n
    merged_end = -1
    merging = can_merge != 0 and k > 0 and tss[0] - 1 == merge_wm
    for i in range(k):
        end = ends[i]
        ts = tss[i]
        if end <= prev_end or ts < prev_ts:
            return -1 - i
        prev_end = end
        prev_ts = ts
        if i + 1 == k or tss[i + 1] != ts:
            if merging and w == n and ts - 1 == merge_wm:
                merged_end = end - 1
            else:
                offs[w] = end - 1
                wms[w] = ts - 1
                w += 1
    if merging and merged_end >= 0:
        offs[n - 1] = merged_end
    return w
