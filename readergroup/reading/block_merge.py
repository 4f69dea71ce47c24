"""Merging the blocks of several segments into one batch in one numba kernel call.

``EventReader.read_batch`` takes the next batch from the blocks of the segments with
events left; once the frame kernels are loaded (numba imported), ``merge_kernel`` gives
``_batch_kernels`` and ``merge_blocks`` runs it (the same slices in the same order as the
reader's Python path). O(events) per batch.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from ..format.events import EventBlocks
from .segment_input import SegmentInput

__all__ = ["Merged", "merge_kernel", "merge_blocks"]

_STRING, _BINARY = pa.string(), pa.binary()


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


def _together(live: list[SegmentInput], eb: EventBlocks) -> bool:
    """Whether ``live`` are the blocks of ``eb``, in its order."""
    for j, s in enumerate(live):
        g = s.group
        if g is None or g[0] is not eb or g[1] != j:
            return False
    return True


def merge_blocks(
    k: ModuleType, live: list[SegmentInput], max_events: int, late_ingestion: int, late_event_time: int
) -> Merged:
    """The next batch from the blocks of ``live`` (each with events left), in one kernel call, with
    how many of its events are late: by ingestion time (``<= late_ingestion``) and by event time
    (``<= late_event_time``, events without one never). O(events)."""
    g = live[0].group
    if g is not None and g[1] == 0 and len(live) == len(g[0]) and _together(live, g[0]):
        # the blocks were decoded side by side, in this order: their arrays are the concatenation
        eb = g[0]
        meta = eb.places.copy()  # (the next event to deliver of each: 0)
        idx = [s.idx for s in live]
        if any(idx):
            meta[:, 1] = idx
        cols, offs, raw = eb.cols, eb.offs, eb.raw
        byte = len(raw)
        key_bytes = eb.key_bytes
        total = cols.shape[1] - sum(idx)
        keyless = False  # (blocks decoded side by side are never Pravega-framed ones)
    else:
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
        keyless = any(s.pravega for s in live)
    m = min(total, max_events)
    nl = len(live)
    ints = np.empty(4 * m + nl, np.int64)  # (one allocation for the int64 outputs, one for the others)
    out_cols, first = ints[: 4 * m].reshape(4, m), ints[4 * m :]
    if byte < 2**31:
        small = np.empty(3 * m + 2, np.int32)
        out_seg, out_offs = small[:m], small[m:].reshape(2, m + 1)
    else:
        out_seg, out_offs = np.empty(m, np.int32), np.empty((2, m + 1), np.int64)
    out_raw = np.empty(byte, np.uint8)
    out_keys, out_pays = out_raw[:key_bytes], out_raw[key_bytes:]
    ev, kbytes, pbytes, ranked, late_i, late_e = k.merge(
        meta, cols, offs, raw, max_events, out_seg, out_cols, out_offs, out_keys, out_pays, first,
        late_ingestion, late_event_time,
    )  # fmt: skip
    assert ev == m
    if m == total:  # every event taken: each block's next event is past its last
        for s in live:
            s.idx = s.n
    else:
        for s, i in zip(live, meta[:, 1].tolist(), strict=True):
            s.idx = i
    wide = out_offs.dtype == np.int64
    keys = pa.Array.from_buffers(
        pa.large_string() if wide else _STRING,
        m,
        [None, pa.py_buffer(out_offs[0]), pa.py_buffer(out_keys[:kbytes])],
    )
    pays = pa.Array.from_buffers(
        pa.large_binary() if wide else _BINARY,
        m,
        [None, pa.py_buffer(out_offs[1]), pa.py_buffer(out_pays[:pbytes])],
    )
    ranks = first[:ranked].tolist()
    names = tuple([live[j].name for j in ranks])
    if keyless:  # Pravega-framed events have no routing key: null, not ""
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
