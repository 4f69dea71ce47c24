"""Merging the blocks of several segments into one batch in one numba kernel call.

``EventReader.read_batch`` takes the next batch from the blocks of the segments with
events left; once the frame kernels are loaded (numba imported), ``merge_kernel`` gives
``_batch_kernels`` and ``merge_blocks`` runs it (the same slices in the same order as the
reader's Python path). O(events) per batch. A reader never imports the kernels itself (a short
use would pay the import); a long run calls ``load_kernels`` first.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from .segment_input import SegmentInput

__all__ = ["Merged", "load_kernels", "merge_kernel", "merge_blocks"]

_STRING, _BINARY = pa.string(), pa.binary()
_U8, _I32, _I64 = np.dtype(np.uint8), np.dtype(np.int32), np.dtype(np.int64)  # (np.empty converts none)
_new = tuple.__new__  # (a NamedTuple made without its __new__'s argument parsing)


class Merged(NamedTuple):
    """A batch's columns merged from several blocks by ``_batch_kernels.merge``."""

    names: tuple[str, ...]
    segment_index: np.ndarray
    cols: np.ndarray
    keys: pa.Array
    pays: pa.Array
    late_ingestion: int
    """Events with an ingestion time at or below ``merge_blocks``' ``late_ingestion``."""
    late_event_time: int
    """Events with an event time at or below ``merge_blocks``' ``late_event_time``."""


_MERGE_KERNELS = "readergroup.reading._batch_kernels"
_FRAME_KERNELS = "readergroup.format._frame_kernels"
_merge_loaded: list[ModuleType] = []


def merge_kernel() -> ModuleType | None:
    """The merge kernel once the frame kernels are loaded (numba is then imported), else ``None``."""
    if _merge_loaded:
        return _merge_loaded[0]
    if _FRAME_KERNELS not in sys.modules:
        return None
    from . import _batch_kernels

    _merge_loaded.append(_batch_kernels)
    return _batch_kernels


def load_kernels() -> None:
    """Import the readers' numba kernels now: the frame codec's and the merge's (~0.5 s, from numba's
    cache). From then on every reader of the process decodes the blocks of a pass side by side and
    merges them in kernel calls (the same events, batches and errors as the Python path's)."""
    from ..format.events import _kernels

    _kernels()
    merge_kernel()


def merge_blocks(
    k: ModuleType, live: list[SegmentInput], max_events: int, late_ingestion: int, late_event_time: int
) -> Merged:
    """The next batch from the blocks of ``live`` (each with events left), in one kernel call, with
    how many of its events are late: by ingestion time (``<= late_ingestion``) and by event time
    (``<= late_event_time``, events without one never). O(events): ~12 us for 4 blocks of ~100 events
    in all (the kernel ~2.5, the two Arrow arrays ~2.2, three allocations ~0.7).

    Blocks decoded side by side, in this order (a poll's common case), are merged where they lie:
    ``places`` is their ``meta`` (each block's next event set only if one is not at its first)."""
    g = live[0].group
    done = -1  # the events already delivered of blocks decoded side by side (-1: they are not)
    if g is not None and g[1] == 0 and len(live) == len(g[0]):
        eb = g[0]
        done = 0
        for j, s in enumerate(live):
            g = s.group
            if g is None or g[0] is not eb or g[1] != j:
                done = -1
                break
            done += s.idx
    if done >= 0:
        # their arrays are the concatenation, ``places`` their meta (the next event of each: 0)
        meta = eb.places
        if done:
            meta = meta.copy()
            meta[:, 1] = [s.idx for s in live]
        cols, offs, raw = eb.cols, eb.offs, eb.raw
        key_bytes = eb.key_bytes
        total = cols.shape[1] - done
        keyless = False  # (blocks decoded side by side are never Pravega-framed ones)
    else:
        meta, cols, offs, raw, key_bytes, total = _concatenated(live)
        keyless = any(s.pravega for s in live)
    m = min(total, max_events)
    nl = len(live)
    byte = len(raw)
    if byte >= 2**31:
        return _merge_wide(k, live, meta.copy(), cols, offs, raw, max_events, m, total, key_bytes, keyless,
                           late_ingestion, late_event_time)  # fmt: skip
    # three allocations: the int64 columns, the int32 ones (and the kernel's ranks and next events), bytes
    out_cols = np.empty((4, m), _I64)
    small = np.empty(3 * m + 2 + 2 * nl, _I32)
    out_raw = np.empty(byte, _U8)
    ev, kbytes, pbytes, ranked, late_i, late_e = k.merge_into(
        meta, cols, offs, raw, max_events, key_bytes, out_cols, small, out_raw,
        late_ingestion, late_event_time,
    )  # fmt: skip
    assert ev == m
    at = 3 * m + 2
    if m == total:  # every event taken: each block's next event is past its last
        for s in live:
            s.idx = s.n
    else:
        for s, i in zip(live, small[at + nl :].tolist(), strict=True):
            s.idx = i
    # one Arrow buffer over each allocation, sliced: cheaper than one over each numpy view
    sb, rb = pa.py_buffer(small), pa.py_buffer(out_raw)
    keys = pa.Array.from_buffers(_STRING, m, [None, sb.slice(4 * m, 4 * m + 4), rb.slice(0, kbytes)])
    pays = pa.Array.from_buffers(
        _BINARY, m, [None, sb.slice(8 * m + 4, 4 * m + 4), rb.slice(key_bytes, pbytes)]
    )
    names = tuple([live[j].name for j in small[at : at + ranked].tolist()])
    out_seg = small[:m]
    if keyless:  # Pravega-framed events have no routing key: null, not ""
        pravega = np.array([live[j].pravega for j in small[at : at + ranked].tolist()], np.bool_)
        keys = _null_keys_of(keys, out_seg, pravega)
    return _new(Merged, (names, out_seg, out_cols, keys, pays, int(late_i), int(late_e)))


def _concatenated(
    live: list[SegmentInput],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """``merge``'s ``meta``, ``cols``, ``offs`` and ``raw`` of blocks not decoded side by side (their
    arrays concatenated), their key bytes and events left. O(events)."""
    rows = []
    blocks = []
    col = off = byte = total = key_bytes = 0
    for s in live:
        block = s.block
        assert block is not None
        blocks.append(block)
        kb = block[3]
        n, i = s.n, s.idx
        rows.append((col, i, n, off, byte, byte + kb))
        col += n
        off += n + 1
        byte += len(block[2])
        key_bytes += kb
        total += n - i
    meta = np.array(rows, np.int64)
    cols = np.concatenate([b[0] for b in blocks], axis=1)
    offs = np.concatenate([b[1] for b in blocks], axis=1)  # int64 if any block has int64 offsets
    raw = np.concatenate([b[2] for b in blocks])
    return meta, cols, offs, raw, key_bytes, total


def _merge_wide(
    k: ModuleType,
    live: list[SegmentInput],
    meta: np.ndarray,
    cols: np.ndarray,
    offs: np.ndarray,
    raw: np.ndarray,
    max_events: int,
    m: int,
    total: int,
    key_bytes: int,
    keyless: bool,
    late_ingestion: int,
    late_event_time: int,
) -> Merged:
    """``merge_blocks`` of blocks of 2 GiB or more in all (int64 Arrow offsets: large string and
    binary arrays), through ``merge`` (``meta`` is updated). O(events)."""
    nl = len(live)
    out_cols, first = np.empty((4, m), np.int64), np.empty(nl, np.int64)
    out_seg, out_offs = np.empty(m, np.int32), np.empty((2, m + 1), np.int64)
    out_raw = np.empty(len(raw), np.uint8)
    out_keys, out_pays = out_raw[:key_bytes], out_raw[key_bytes:]
    ev, kbytes, pbytes, ranked, late_i, late_e = k.merge(
        meta, cols, offs, raw, max_events, out_seg, out_cols, out_offs, out_keys, out_pays, first,
        late_ingestion, late_event_time,
    )  # fmt: skip
    assert ev == m
    if m == total:
        for s in live:
            s.idx = s.n
    else:
        for s, i in zip(live, meta[:, 1].tolist(), strict=True):
            s.idx = i
    keys = pa.Array.from_buffers(
        pa.large_string(), m, [None, pa.py_buffer(out_offs[0]), pa.py_buffer(out_keys[:kbytes])]
    )
    pays = pa.Array.from_buffers(
        pa.large_binary(), m, [None, pa.py_buffer(out_offs[1]), pa.py_buffer(out_pays[:pbytes])]
    )
    ranks = first[:ranked].tolist()
    names = tuple([live[j].name for j in ranks])
    if keyless:
        keys = _null_keys_of(keys, out_seg, np.array([live[j].pravega for j in ranks], np.bool_))
    return Merged(names, out_seg, out_cols, keys, pays, int(late_i), int(late_e))


def _null_keys_of(keys: pa.Array, seg: np.ndarray, keyless: np.ndarray) -> pa.Array:
    """``keys``, null in the rows whose segment (``seg`` indexes ``keyless``) is keyless. O(rows)."""
    null = keyless[seg]
    n = int(null.sum())
    if not n:
        return keys
    valid = pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(keys.type, len(keys), [valid, *keys.buffers()[1:]], null_count=n)
