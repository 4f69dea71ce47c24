"""Numba kernels of the simulator's hot paths; imported lazily, on first bulk use (docs/design.md §7).

Like ``readergroup.format._frame_kernels`` (whose frame layout and ``_copy`` they use):
each kernel does a whole batch in one call, writes into arrays the caller allocated with
numpy (a returned array costs ~30 us to box), and is compiled with ``cache=True,
nogil=True`` (loaded from numba's cache after the first run; compiling takes about a
second). ``bench.sim.workloads`` calls them only for batches large enough to repay the
call, or once they are loaded; both paths give the same bytes and numbers.

- ``frames_by_segment``: a writer's batch framed and grouped by segment (a stable
  counting sort), so one append per segment takes a contiguous slice.
- ``split_due``: a writer's pending events split into those due (in the order they reach
  the store: by ready time, stably) and the others (in their order).
- ``payload_ids``: writer indexes and sequence numbers from the first 8 bytes of each
  payload of an Arrow binary array.
- ``account``: the recorder's counters of one batch (``Recorder.on_batch``); the one kernel with
  explicit signatures (compiled, or loaded from the cache, on import), called once per batch
  through its compiled entries (``ACCOUNT_ENTRIES``).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from readergroup.format._frame_kernels import _copy
from readergroup.format.events import NO_EVENT_TIME
from readergroup.reading.frontier import NO_WATERMARK

__all__ = ["frames_by_segment", "split_due", "payload_ids", "account", "ACCOUNT_ENTRIES"]

_HEADER = 15
_NO_EVENT_TIME = NO_EVENT_TIME
_NO_WATERMARK = NO_WATERMARK


@numba.njit(cache=True, nogil=True)
def frames_by_segment(
    key_idx: Any,
    et: Any,
    seqs: Any,
    key_seg: Any,
    nseg: int,
    template: Any,
    key_mat: Any,
    writer: int,
    frame_len: int,
    out: Any,
    run_seg: Any,
    run_end: Any,
) -> int:
    """Frame event i (key ``key_idx[i]``, time ``et[i]``, number ``seqs[i]``) into ``out`` grouped by
    segment ``key_seg[key_idx[i]]`` (ascending, each segment's events in batch order).

    ``out`` has ``len(key_idx) * frame_len`` bytes; ``template`` is the 15-byte header
    (its event time is overwritten); ``key_mat`` holds each key's UTF-8 bytes (all of one
    length); the payload is ``writer`` and ``seqs[i]`` as little-endian u32, then zeros.
    Writes the runs' segments and end indexes (in events) to ``run_seg``/``run_end``
    (``nseg`` entries each) and returns how many runs. O(events + segments). The events are
    ordered first (an index), then framed in order: the frames are written one after the other,
    not each at its place (in a run, where the buffer is cold at every tick, ~0.3 ms less a
    tick of 25,000 events; as fast with the buffer in the cache).
    """
    n = key_idx.size
    starts = np.zeros(nseg + 1, np.int64)
    for i in range(n):
        starts[key_seg[key_idx[i]] + 1] += 1
    runs = 0
    for s in range(nseg):
        c = starts[s + 1]
        starts[s + 1] += starts[s]
        if c:
            run_seg[runs] = s
            run_end[runs] = starts[s + 1]
            runs += 1
    order = np.empty(n, np.int64)  # the events in their frames' order: written one after the other
    for i in range(n):
        s = key_seg[key_idx[i]]
        j = starts[s]
        starts[s] = j + 1
        order[j] = i
    kl = key_mat.shape[1]
    keys = key_mat.reshape(-1)
    w = np.int64(writer)
    p0 = _HEADER + kl
    for j in range(n):
        i = order[j]
        k = np.int64(key_idx[i])
        p = j * frame_len
        _copy(out, p, template, np.int64(0), np.int64(_HEADER))
        t = np.uint64(et[i])
        for b in range(8):
            out[p + 5 + b] = (t >> np.uint64(8 * b)) & np.uint64(0xFF)
        _copy(out, p + _HEADER, keys, k * kl, np.int64(kl))
        q = p + p0
        sq = np.int64(seqs[i])
        for b in range(4):
            out[q + b] = (w >> (8 * b)) & 0xFF
            out[q + 4 + b] = (sq >> (8 * b)) & 0xFF
        for b in range(q + 8, p + frame_len):
            out[b] = 0
    return runs


@numba.njit(cache=True, nogil=True)
def split_due(cols: Any, n: int, now: int, due: Any, rest: Any) -> int:
    """Split events ``cols[:, :n]`` (rows: key index, event time, number, ready time) at ``now``.

    Writes the events ready by ``now`` (rows 0-2) to ``due[:, :d]`` sorted by ready time,
    stably (a counting sort when the ready times span less than 2^16 ms), and the others
    (all four rows) to ``rest[:, :n - d]`` in their order; returns d. O(n + span).
    """
    ready = cols[3]
    d = 0
    lo = hi = np.int64(0)
    j = 0
    for i in range(n):
        r = ready[i]
        if r <= now:
            if d == 0 or r < lo:
                lo = r
            if d == 0 or r > hi:
                hi = r
            d += 1
        else:
            for c in range(4):
                rest[c, j] = cols[c, i]
            j += 1
    if d == 0:
        return 0
    span = hi - lo
    if span < 1 << 16:
        starts = np.zeros(span + 2, np.int64)
        for i in range(n):
            r = ready[i]
            if r <= now:
                starts[r - lo + 1] += 1
        for v in range(span + 1):
            starts[v + 1] += starts[v]
        for i in range(n):
            r = ready[i]
            if r <= now:
                p = starts[r - lo]
                starts[r - lo] = p + 1
                for c in range(3):
                    due[c, p] = cols[c, i]
    else:
        idx = np.flatnonzero(ready[:n] <= now)
        order = idx[np.argsort(ready[idx], kind="mergesort")]
        for p in range(d):
            for c in range(3):
                due[c, p] = cols[c, order[p]]
    return d


@numba.njit(cache=True, nogil=True)
def payload_ids(offsets: Any, start: int, n: int, data: Any, writers: Any, seqs: Any) -> bool:
    """Writer index (u32) and sequence number (u32) of payload i at ``data[offsets[start + i]:]``.

    Returns False (writing nothing more) at the first payload shorter than 8 bytes. O(n).
    """
    for i in range(n):
        a = np.int64(offsets[start + i])
        if np.int64(offsets[start + i + 1]) - a < 8:
            return False
        w = np.int64(0)
        s = np.int64(0)
        for b in range(4):
            w |= np.int64(data[a + b]) << (8 * b)
            s |= np.int64(data[a + 4 + b]) << (8 * b)
        writers[i] = w
        seqs[i] = s
    return True


_ACCOUNT_SIGNATURES = [
    f"int64(Array({off}, 1, 'C', readonly=True), int64, int64, Array(uint8, 1, 'C', readonly=True), "
    "Array(int64, 1, 'A', readonly=True), Array(int64, 1, 'A', readonly=True), int64, int64, "
    "int64[:, ::1], boolean[::1], int64[:, ::1])"
    for off in ("int32", "int64")
]
"""``account``'s: Arrow's offsets (binary or large binary), its data and the batch's columns declared
read-only (the kernel only reads them; any such array passes, writable or not, and the columns in
any layout), so that it is compiled (or loaded from numba's cache) once, when this module is imported."""


@numba.njit(_ACCOUNT_SIGNATURES, cache=True, nogil=True)
def account(
    offsets: Any,
    start: int,
    n: int,
    data: Any,
    it: Any,
    et: Any,
    gw: int,
    etw: int,
    counts: Any,
    seen: Any,
    ids: Any,
) -> int:
    """Count a batch of n events into ``counts`` (rows: delivered, late by ingestion time, late by
    event time; a column per writer): delivered, and once there is a group watermark (``gw`` is
    not ``NO_WATERMARK``) late by ingestion time (``it <= gw``) and by event time
    (``et != NO_EVENT_TIME and et <= etw``); mark each sequence number seen. Returns how many were
    seen before this batch, or -1 (changing no count) if a payload is shorter than 8 bytes or an
    id is outside the counters. Writes the writer indexes and numbers to ``ids[0, :n]`` and
    ``ids[1, :n]``. O(n).
    """
    nw = counts.shape[1]
    ns = seen.size
    writers = ids[0, :n]
    seqs = ids[1, :n]
    if not payload_ids(offsets, start, n, data, writers, seqs):
        return -1
    for i in range(n):
        if writers[i] >= nw or seqs[i] >= ns:
            return -1
    dup = 0
    for i in range(n):
        if seen[seqs[i]]:
            dup += 1
    late = gw != _NO_WATERMARK
    for i in range(n):
        w = writers[i]
        counts[0, w] += 1
        if late:
            if it[i] <= gw:
                counts[1, w] += 1
            e = et[i]
            if e != _NO_EVENT_TIME and e <= etw:
                counts[2, w] += 1
    for i in range(n):
        seen[seqs[i]] = True
    return dup


def _entry(kernel: Any, signature: Any) -> Any:
    """The compiled entry of one of ``kernel``'s signatures: it skips numba's type dispatch. A numba
    without that attribute (it is numba's own, not its documented API) gives the kernel itself."""
    entry = getattr(kernel.overloads.get(signature), "entry_point", None)
    return entry if callable(entry) else kernel


ACCOUNT_ENTRIES = tuple(
    _entry(account, sig)
    for sig in sorted(account.signatures, key=lambda sig: sig[0].dtype.bitwidth)  # type: ignore[attr-defined]
)
"""``account`` for int32 offsets (binary payloads) and for int64 (large binary), without numba's type
dispatch (about half a call's cost, ~1 us, in a simulation where its code is cold at every batch).
The caller must pass exactly the signature's types: nothing checks them."""
