"""Numba kernel of ``EventReader.read_batch``: a batch merged from several segments' blocks in one call.

Imported lazily, once the frame kernels are (``readergroup.format._frame_kernels``, whose
conventions it follows: outputs allocated by the caller, ``cache=True, nogil=True``).
``merge`` does what the reader's Python path does slice by slice (``EventReader._collect``
then ``_batch``): the same slices in the same order, so the same batch.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ..format._frame_kernels import _copy

__all__ = ["merge", "merge_into"]

_INT64_MAX = np.iinfo(np.int64).max
_NO_EVENT_TIME = np.iinfo(np.int64).min  # (``readergroup.format.events.NO_EVENT_TIME``)


@numba.njit(cache=True, nogil=True)
def merge(
    meta: Any,
    cols: Any,
    offs: Any,
    raw: Any,
    max_events: int,
    out_seg: Any,
    out_cols: Any,
    out_offs: Any,
    out_keys: Any,
    out_pays: Any,
    first: Any,
    late_ingestion: int,
    late_event_time: int,
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """Merge the buffered events of k blocks into one batch, oldest ingestion time first.

    ``meta`` (k x 6 int64; more columns are not read), per block in the reader's segment order: its
    first column in ``cols``/``offs``' concatenation, the next event to deliver (updated), its events,
    its first offsets column, where its key bytes and its payload bytes start in ``raw``.
    ``cols``: rows offset, length, event time, ingestion time (non-decreasing per block).
    Repeatedly takes the block with the oldest next event (the first on a tie) up to and
    including the events no newer than the second oldest block's next one (at least
    one), at most ``max_events`` in all. Writes the events' columns and keys and payloads
    (Arrow offsets in ``out_offs``), each event's block as its index in ``first`` (the
    blocks in order of their first slice). Returns (events, key bytes, payload bytes,
    blocks in ``first``, events with an ingestion time ``<= late_ingestion``, events with
    an event time, not ``NO_EVENT_TIME``, ``<= late_event_time``). O(events + slices x k); a slice's
    keys and payloads are two copies (a poll's slices hold ~30 events each).
    """
    k = meta.shape[0]
    rank = np.full(k, -1, np.int64)
    ranked = 0
    left = max_events
    m = 0
    ko = np.int64(0)
    po = np.int64(0)
    late_i = 0
    late_e = 0
    out_offs[0, 0] = 0
    out_offs[1, 0] = 0
    while left > 0:
        best = -1
        best_t = _INT64_MAX
        second = _INT64_MAX
        for j in range(k):
            if meta[j, 1] >= meta[j, 2]:
                continue
            t = cols[3, meta[j, 0] + meta[j, 1]]
            if best < 0 or t < best_t:
                if best >= 0:
                    second = best_t
                best = j
                best_t = t
            elif t < second:
                second = t
        if best < 0:
            break
        base = meta[best, 0]
        i = meta[best, 1]
        stop = min(meta[best, 2], i + left)
        if second != _INT64_MAX:  # numpy's searchsorted(it[i:stop], second, side="right")
            lo = i
            hi = stop
            while lo < hi:
                mid = lo + ((hi - lo) >> 1)
                if cols[3, base + mid] <= second:
                    lo = mid + 1
                else:
                    hi = mid
            stop = min(stop, i + max(1, lo - i))
        if rank[best] < 0:
            rank[best] = ranked
            first[ranked] = best
            ranked += 1
        r = rank[best]
        ob = meta[best, 3]
        # the slice's keys (and payloads) lie one after the other in its block: one copy each
        k0 = np.int64(offs[0, ob + i])
        p0 = np.int64(offs[1, ob + i])
        klen = np.int64(offs[0, ob + stop]) - k0
        plen = np.int64(offs[1, ob + stop]) - p0
        _copy(out_keys, ko, raw, meta[best, 4] + k0, klen)
        _copy(out_pays, po, raw, meta[best, 5] + p0, plen)
        dk = ko - k0
        dp = po - p0
        for e in range(i, stop):
            c = base + e
            out_seg[m] = r
            out_cols[0, m] = cols[0, c]
            out_cols[1, m] = cols[1, c]
            et = cols[2, c]
            it = cols[3, c]
            out_cols[2, m] = et
            out_cols[3, m] = it
            if it <= late_ingestion:
                late_i += 1
            if et != _NO_EVENT_TIME and et <= late_event_time:
                late_e += 1
            m += 1
            out_offs[0, m] = np.int64(offs[0, ob + e + 1]) + dk
            out_offs[1, m] = np.int64(offs[1, ob + e + 1]) + dp
        ko += klen
        po += plen
        meta[best, 1] = stop
        left -= stop - i
    return m, ko, po, ranked, late_i, late_e


@numba.njit(cache=True, nogil=True)
def merge_into(
    meta: Any,
    cols: Any,
    offs: Any,
    raw: Any,
    max_events: int,
    key_bytes: int,
    out_cols: Any,
    small: Any,
    out_raw: Any,
    late_ingestion: int,
    late_event_time: int,
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """``merge`` into three buffers, below 2 GiB of bytes, ``meta`` left as it is (one call, fewer
    arguments to box). ``out_cols`` (4 x m int64) are ``merge``'s ``out_cols`` for a batch of m events;
    ``small`` (int32, 3 x m + 2 + 2 x k): ``out_seg`` (m), ``out_offs`` (2 x (m + 1)), ``first`` (k), then
    the next event to deliver of each block (``meta``'s second column after ``merge``); ``out_raw``:
    the keys (``key_bytes``), then the payloads. Returns what ``merge`` returns. O(events + slices x k).
    """
    k = meta.shape[0]
    m = out_cols.shape[1]
    mt = meta[:, :6].copy()
    at = 3 * m + 2
    r = merge(
        mt, cols, offs, raw, max_events, small[:m], out_cols, small[m:at].reshape((2, m + 1)),
        out_raw[:key_bytes], out_raw[key_bytes:], small[at : at + k], late_ingestion, late_event_time,
    )  # fmt: skip
    for j in range(k):
        small[at + k + j] = mt[j, 1]
    return r
