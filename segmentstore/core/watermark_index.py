"""Per-segment watermark index (PDP-26): the ingestion time of every byte, by offset.

The index holds entries ``(last_offset, wm)``: a write of bytes ``[prev_end, end)`` at
ingestion time ``ts`` is the entry ``(end - 1, ts - 1)``, and a new segment starts with
the special entry ``(start_offset - 1, creation_time - 1)`` (offset -1 for a new
segment). For ``start_offset <= p < length``, ``watermark_at(p)`` is the ``wm`` of the
first entry with ``last_offset >= p``; at ``p == length`` it is ``tail_time - 1``, the
tail time being LAST_WRITE_TIME, raised by every temporal operation (docs/design.md §1).

Memory grows with writes only: raising the tail time keeps O(1) memory, and a write
with the same timestamp as the write before it extends that write's entry (several
appends in one millisecond share one entry; queries cannot tell the difference).

Single operations run in plain Python on numpy capacity arrays through memoryviews
(no numba dispatch per append); bulk commits and batch lookups go to the numba
kernels of :mod:`segmentstore.core._kernels`, imported on first use. Not thread-safe: the
owner (the container) serialises calls on one index.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable
from operator import index as _index
from types import ModuleType
from typing import Any, NoReturn, SupportsIndex, cast

import numpy as np
import numpy.typing as npt

from ..checks import checked

__all__ = ["WatermarkIndex", "MAX_RUNS", "load_kernels"]

_I64 = np.dtype(np.int64)
_I64_MAX = int(np.iinfo(np.int64).max)
_I64_MIN = int(np.iinfo(np.int64).min)
_MIN_CAP = 16
MAX_RUNS = 1 << 16
"""Runs ``ingestion_runs`` answers at most per call (1 MiB of reply); more: a prefix, ask again."""
_BLOCK = 8  # must equal _kernels.BLOCK (checked on load)
_SMALL_BATCH = 64  # batches up to this size bisect per query (no parallel region at all)
_PAR_MIN = 1 << 15  # batches from this size use every numba thread, smaller ones one thread
_SCALAR_NUMBA_MIN = 4096  # live entries from which a single lookup calls numba
_PAR_LOCK = threading.Lock()  # numba's workqueue layer (if chosen) must not launch concurrently

_kmod: ModuleType | None = None
_record_wms: Callable[..., int] | None = None  # ``_kernels.record_watermarks``' compiled entry
_packed_wms: Callable[..., int] | None = None  # ``_kernels.packed_record_watermarks``' compiled entry


def _kernels() -> ModuleType:
    """The kernel module, imported (numba loaded, kernels cached/compiled) on first call."""
    global _kmod, _scalar, _record_wms, _packed_wms
    if _kmod is None:
        from . import _kernels as kmod

        if kmod.BLOCK != _BLOCK:
            raise RuntimeError(f"_kernels.BLOCK {kmod.BLOCK} != watermark_index._BLOCK {_BLOCK}")
        _scalar = kmod.entry_point(kmod.scalar_lookup)
        _record_wms = kmod.entry_point(kmod.record_watermarks)
        _packed_wms = kmod.entry_point(kmod.packed_record_watermarks)
        _kmod = kmod
    return _kmod


def load_kernels() -> None:
    """Import the index's kernels now if they are not yet (numba's import: never under a lock). O(1) after."""
    if _kmod is None:
        _kernels()


def _scalar_first(store: npt.NDArray[np.int64], lo: int, hi: int, q: int) -> int:
    """First numba scalar lookup: load the kernels, then answer. Replaced by the kernel."""
    _kernels()
    return int(_scalar(store, lo, hi, q))


_scalar: Callable[[npt.NDArray[np.int64], int, int, int], int] = _scalar_first


def _int(value: object, what: str) -> int:
    """``value`` as an int (int or numpy integer), else ValueError naming it. O(1)."""
    try:
        v = _index(cast(SupportsIndex, value))
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None
    if not _I64_MIN < v <= _I64_MAX:
        raise ValueError(f"{what} {v} is outside the int64 range")
    return v


def _as_int64(values: object, what: str) -> npt.NDArray[np.int64]:
    """``values`` as a C-contiguous int64 array (no copy when it is one). O(n) otherwise."""
    a = np.asarray(values)
    if a.dtype != _I64:
        if a.size == 0:
            return np.zeros(a.shape, np.int64)
        if a.dtype.kind not in "iu":
            raise ValueError(f"{what} must be an integer array, got dtype {a.dtype}")
        if a.dtype.kind == "u" and a.dtype.itemsize >= 8 and int(a.max()) > _I64_MAX:
            raise ValueError(f"{what} holds {int(a.max())}, outside the int64 range")
        a = a.astype(np.int64)
    return a if a.flags.c_contiguous else a.copy(order="C")


class WatermarkIndex:
    """Watermarks of one segment by offset: O(1) amortised writes, O(log n) lookups."""

    __slots__ = (
        "_creation",
        "_h",
        "_length",
        "_merge_wm",
        "_n",
        "_offs",
        "_om",
        "_start",
        "_store",
        "_tail",
        "_top",
        "_top_n",
        "_wms",
        "_wv",
    )

    def __init__(self, creation_time: SupportsIndex, start_offset: SupportsIndex = 0) -> None:
        """An index of an empty segment ``[start_offset, start_offset)``. O(1)."""
        ct = _int(creation_time, "creation_time")
        start = _int(start_offset, "start_offset")
        if start < 0:
            raise ValueError(f"start_offset {start} is negative")
        self._creation = ct
        self._start = start
        self._length = start
        self._tail = ct
        self._set_storage(np.empty((2, _MIN_CAP), np.int64))
        self._offs[0] = start - 1
        self._wms[0] = ct - 1
        self._h = 0
        self._n = 1
        self._merge_wm: int | None = None
        self._top = np.empty(0, np.int64)
        self._top_n = 0

    def _set_storage(self, store: npt.NDArray[np.int64]) -> None:
        """Install the ``(2, capacity)`` entry array, its rows and their memoryviews. O(1).

        Row 0 holds last offsets, row 1 watermarks; the memoryviews give Python ints
        at half the cost of numpy item access, the one array halves numba's unboxing.
        """
        self._store = store
        self._offs = store[0]
        self._wms = store[1]
        self._om = self._offs.data
        self._wv = self._wms.data

    # ------------------------------------------------------------------ properties

    @property
    def length(self) -> int:
        """Current end offset of the segment. O(1)."""
        return self._length

    @property
    def start_offset(self) -> int:
        """First offset that can still be queried (moves with truncation). O(1)."""
        return self._start

    @property
    def tail_time(self) -> int:
        """LAST_WRITE_TIME as the index knows it; ``watermark_at(length) + 1``. O(1)."""
        return self._tail

    @property
    def creation_time(self) -> int:
        """CREATION_TIME of the segment. O(1)."""
        return self._creation

    @property
    def nbytes(self) -> int:
        """Bytes held by the entry arrays (capacity included). O(1)."""
        return int(self._store.nbytes + self._top.nbytes)

    def __len__(self) -> int:
        """Number of live entries, the initial one included until truncated away. O(1)."""
        return self._n - self._h

    def __repr__(self) -> str:
        return (
            f"WatermarkIndex(start_offset={self._start}, length={self._length}, "
            f"creation_time={self._creation}, tail_time={self._tail}, entries={len(self)})"
        )

    # ------------------------------------------------------------------ updates

    def record_write(self, end_offset: SupportsIndex, timestamp: SupportsIndex) -> None:
        """Record that bytes ``[length, end_offset)`` were written at ``timestamp``. O(1) amortised."""
        end = end_offset if type(end_offset) is int else _int(end_offset, "end_offset")
        ts = timestamp if type(timestamp) is int else _int(timestamp, "timestamp")
        if end <= self._length or end > _I64_MAX:
            _int(end, "end_offset")
            raise ValueError(f"end_offset {end} is not beyond the length {self._length}")
        if ts < self._tail:
            raise ValueError(f"timestamp {ts} is before the tail time {self._tail}")
        if ts > _I64_MAX:
            raise ValueError(f"timestamp {ts} is outside the int64 range")
        self.record_write_trusted(end, ts)

    def record_write_trusted(self, end: int, ts: int) -> None:
        """``record_write`` for a caller that guarantees ``length < end <= INT64_MAX`` and
        ``tail_time <= ts <= INT64_MAX``, both ints (the container, stamping with its processor).
        O(1) amortised; no checks, so a single append pays for none twice."""
        wm = ts - 1
        n = self._n
        if wm == self._merge_wm:  # same ts as the last write: extend its entry
            self._om[n - 1] = end - 1
        else:  # (the capacity from the view written below, not the array: one object less to touch)
            if n == len(self._om):
                self._realloc(1)
                n = self._n
            self._wv[n] = wm  # slot n is not in use until _n moves
            self._om[n] = end - 1
            self._n = n + 1
            self._merge_wm = wm
        self._length = end
        self._tail = ts

    def record_time(self, timestamp: SupportsIndex) -> None:
        """Raise the tail time (attribute update, seal, empty append, idle advance). O(1)."""
        ts = timestamp if type(timestamp) is int else _int(timestamp, "timestamp")
        if ts < self._tail:
            raise ValueError(f"timestamp {ts} is before the tail time {self._tail}")
        if ts > _I64_MAX:
            raise ValueError(f"timestamp {ts} is outside the int64 range")
        self._tail = ts

    def record_writes(self, end_offsets: npt.ArrayLike, timestamps: npt.ArrayLike) -> None:
        """Record many writes (end offsets ascending, timestamps not descending). O(k), numba.

        Validated as a whole first: on a ValueError the index is unchanged.
        """
        ends = _as_int64(end_offsets, "end_offsets").reshape(-1)
        tss = _as_int64(timestamps, "timestamps").reshape(-1)
        k = ends.shape[0]
        if tss.shape[0] != k:
            raise ValueError(f"{k} end_offsets but {tss.shape[0]} timestamps")
        if k == 0:
            return
        if int(tss[0]) < self._tail:
            raise ValueError(f"timestamp {int(tss[0])} is before the tail time {self._tail}")
        km = _kernels()
        if self._n + k > self._offs.shape[0]:
            self._realloc(k)
        n = self._n
        mw = self._merge_wm
        r = int(
            km.append_bulk(
                self._offs,
                self._wms,
                n,
                self._length,
                self._tail,
                int(mw is not None),
                0 if mw is None else mw,
                ends,
                tss,
            )
        )
        if r < 0:
            i = -1 - r
            prev_end = self._length if i == 0 else int(ends[i - 1])
            prev_ts = self._tail if i == 0 else int(tss[i - 1])
            if int(ends[i]) <= prev_end:
                raise ValueError(
                    f"end_offsets[{i}] = {int(ends[i])} is not beyond the previous end {prev_end}"
                )
            raise ValueError(f"timestamps[{i}] = {int(tss[i])} is before the previous timestamp {prev_ts}")
        self._n = r
        self._length = int(ends[k - 1])
        self._tail = int(tss[k - 1])
        self._merge_wm = self._tail - 1

    def truncate(self, new_start: SupportsIndex) -> None:
        """Drop entries below ``new_start`` (they cannot be queried any more). O(log n) amortised."""
        s = _int(new_start, "new_start")
        if not self._start <= s <= self._length:
            raise ValueError(
                f"truncation offset {s} is outside [start_offset, length] = [{self._start}, {self._length}]"
            )
        if s == self._start:
            return
        self._start = s
        h = bisect_left(self._om, s, self._h, self._n)
        self._h = h
        if h == self._n:
            self._merge_wm = None
        if h >= _MIN_CAP and h > self._n - h:
            self._realloc(0)

    def _realloc(self, free: int) -> None:
        """Move live entries to new arrays with room for ``free`` more. O(live)."""
        h, n = self._h, self._n
        live = n - h
        cap = _MIN_CAP
        while cap < live + free or cap < 2 * live:
            cap *= 2
        store = np.empty((2, cap), np.int64)
        store[:, :live] = self._store[:, h:n]
        self._set_storage(store)
        if h != 0:
            self._top_n = 0  # entries moved: resample (kept when only growing)
        self._h = 0
        self._n = live

    # ------------------------------------------------------------------ lookups

    def watermark_at(self, offset: SupportsIndex) -> int:
        """Watermark at ``offset`` in ``[start_offset, length]``; O(1) at the tail, else O(log n)."""
        if offset == self._length:
            return self._tail - 1
        p = offset if type(offset) is int else _int(offset, "offset")
        if not self._start <= p < self._length:
            raise ValueError(
                f"offset {p} is outside [start_offset, length] = [{self._start}, {self._length}]"
            )
        h, n = self._h, self._n
        if n - h < _SCALAR_NUMBA_MIN:
            return self._wv[bisect_left(self._om, p, h, n)]  # type: ignore[no-any-return]
        return _scalar(self._store, h, n, p)

    def ingestion_time_at(self, offset: SupportsIndex) -> int:
        """Ingestion time of the byte at ``offset`` in ``[start_offset, length)``. O(log n)."""
        p = offset if type(offset) is int else _int(offset, "offset")
        if not self._start <= p < self._length:
            raise ValueError(
                f"offset {p} is outside the bytes [start_offset, length) = [{self._start}, {self._length})"
            )
        h, n = self._h, self._n
        if n - h < _SCALAR_NUMBA_MIN:
            return self._wv[bisect_left(self._om, p, h, n)] + 1  # type: ignore[no-any-return]
        return _scalar(self._store, h, n, p) + 1

    def ingestion_runs(self, begin: int, end: int, max_runs: int | None = None) -> npt.NDArray[np.int64]:
        """The runs of bytes ``[begin, end)`` written at one ingestion time: a ``(2, k)`` array.

        Row 0 holds each run's last offset (the last clipped to ``end - 1``), row 1 its
        ingestion time, in offset order: the byte at ``o`` has the time of the first run
        whose last offset is ``>= o``. At most ``max_runs`` runs: if the range holds more,
        the answer covers a prefix of it (its last offset is below ``end - 1``; ask again
        from the next byte; None: ``MAX_RUNS``). ``start_offset <= begin < end <= length``
        and ``max_runs >= 1`` (checked by the caller). O(log n + k).
        """
        if max_runs is None:
            max_runs = MAX_RUNS
        h, n = self._h, self._n
        i = bisect_left(self._om, begin, h, n)
        j = bisect_left(self._om, end - 1, i, n)
        whole = j < i + max_runs
        if not whole:
            j = i + max_runs - 1
        out = np.empty((2, j + 1 - i), np.int64)
        out[0] = self._offs[i : j + 1]
        if whole:
            out[0, -1] = end - 1
        np.add(self._wms[i : j + 1], 1, out=out[1])
        return out

    def watermarks_at(
        self,
        offsets: npt.ArrayLike,
        out: npt.NDArray[np.int64] | None = None,
        assume_sorted: bool | None = None,
    ) -> npt.NDArray[np.int64]:
        """Watermarks at many offsets in ``[start_offset, length]``. O(k log n), O(k + n) sorted.

        ``assume_sorted``: True/None try a merge walk first (it falls back to the random
        kernel on the first descending pair it meets); False goes to the random kernel.
        """
        return self._batch(offsets, out, assume_sorted, ingestion=False)

    def watermarks_at_ascending(self, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """``watermarks_at(offsets)`` of offsets the store made: a C-contiguous int64 array, ascending,
        in ``[start_offset, length]``. Below ``_PAR_MIN`` offsets it skips the checks and makes the
        kernel call ``watermarks_at`` would make; anything else goes through them. O(k log n)."""
        nq = offsets.shape[0]
        if not 0 < nq < _PAR_MIN:
            return self._batch(offsets, None, True, ingestion=False)
        out = np.empty(nq, np.int64)
        km = _kernels()
        if nq > _SMALL_BATCH:  # a merge walk, as ``_batch`` (which checks, and falls back on a descent)
            if km.lookup_sorted_serial(self._offs, self._wms, self._n, offsets, out, self._tail - 1, 0) < 0:
                return out
            return self._batch(offsets, None, True, ingestion=False)
        h, n, lo, hi, tail = self._h, self._n, self._start, self._length, self._tail - 1
        r = km.lookup_small(self._offs, self._wms, h, n, offsets, out, lo, hi, tail, 0)
        if r >= 0:
            self._raise_range(int(offsets[r]), int(r), False)
        return out

    def records_into(self, data: bytes, base: int, bounds: np.ndarray, wms: np.ndarray) -> int:
        """``record_bounds(data, base)`` (``data`` read at ``base`` in ``[start_offset, length]``):
        the records' starts and the end of the last into ``bounds`` and ``watermarks_at_ascending`` of them
        into ``wms`` (room for ``len(data) // 4 + 2``), one kernel call; returns the count. O(records)."""
        k, arr = _record_wms or _kernels().record_watermarks, np.frombuffer(data, np.uint8)
        return int(k(arr, base, self._offs, self._wms, self._h, self._n, self._tail - 1, bounds, wms))

    def records_packed(self, data: bytes, base: int, *where: Any) -> int:
        """``records_into`` for ``read_packed`` (``where``: see ``packed_record_watermarks``). O(records)."""
        k = _packed_wms or _kernels().packed_record_watermarks
        return k(data, base, self._store, self._h, self._n, self._tail - 1, *where)  # type: ignore[no-any-return]

    def ingestion_times_at(
        self,
        offsets: npt.ArrayLike,
        out: npt.NDArray[np.int64] | None = None,
        assume_sorted: bool | None = None,
    ) -> npt.NDArray[np.int64]:
        """Ingestion times of many bytes in ``[start_offset, length)``. O(k log n), sorted O(k + n)."""
        return self._batch(offsets, out, assume_sorted, ingestion=True)

    def _batch(
        self,
        offsets: npt.ArrayLike,
        out: npt.NDArray[np.int64] | None,
        assume_sorted: bool | None,
        ingestion: bool,
    ) -> npt.NDArray[np.int64]:
        """Shared batch path: validate, pick the kernel by sortedness and size, run it."""
        qarr = _as_int64(offsets, "offsets")
        shape = qarr.shape
        qs = qarr.reshape(-1)
        if out is None:
            out = np.empty(shape, np.int64)
        else:
            if not isinstance(out, np.ndarray) or out.dtype != _I64:
                raise ValueError(f"out must be an int64 array, got {type(out).__name__}")
            if out.shape != shape:
                raise ValueError(f"out has shape {out.shape}, the offsets {shape}")
            if not (out.flags.c_contiguous and out.flags.writeable):
                raise ValueError("out must be C-contiguous and writeable")
            if np.may_share_memory(out, qs):
                qs = qs.copy()
        nq = qs.shape[0]
        if nq == 0:
            return out
        res = out.reshape(-1)
        lo_q = self._start
        hi_q = self._length - 1 if ingestion else self._length
        add = 1 if ingestion else 0
        tail_val = self._tail - 1
        km = _kernels()
        offs, wms, n = self._offs, self._wms, self._n
        first, last = int(qs[0]), int(qs[nq - 1])
        for q, i in ((first, 0), (last, nq - 1)):
            if not lo_q <= q <= hi_q:
                self._raise_range(q, i, ingestion)
        sorted_ok = assume_sorted is not False and first <= last
        if _SMALL_BATCH < nq < _PAR_MIN and sorted_ok:  # one thread would run it: no thread settings
            r = km.lookup_sorted_serial(offs, wms, n, qs, res, tail_val, add)
            if r < 0:
                return out
            sorted_ok = False  # a descent: the random kernel answers every query
        if nq <= _SMALL_BATCH or not km.parallel_ok():
            # few queries, or a child forked from a process that ran OpenMP kernels
            if nq > _SMALL_BATCH and sorted_ok:
                r = km.lookup_sorted_serial(offs, wms, n, qs, res, tail_val, add)
                if r < 0:
                    return out
            r = km.lookup_small(offs, wms, self._h, n, qs, res, lo_q, hi_q, tail_val, add)
        else:
            top = self._sync_top()
            with _PAR_LOCK:
                threads = km.get_num_threads() if nq < _PAR_MIN else 0
                if threads > 1:  # a thread launch costs more than it saves here
                    km.set_num_threads(1)
                try:
                    r = -1
                    if sorted_ok:
                        r = km.lookup_sorted(offs, wms, n, qs, res, tail_val, add)
                        if r < 0:
                            return out
                    r = km.lookup_random(offs, wms, top, n, qs, res, lo_q, hi_q, tail_val, add)
                finally:
                    if threads > 1:
                        km.set_num_threads(threads)
        if r >= 0:
            self._raise_range(int(qs[r]), int(r), ingestion)
        return out

    def _raise_range(self, q: int, i: int, ingestion: bool) -> NoReturn:
        """Raise the ValueError for query ``q`` at position ``i`` out of range."""
        if ingestion:
            rng = f"the bytes [start_offset, length) = [{self._start}, {self._length})"
        else:
            rng = f"[start_offset, length] = [{self._start}, {self._length}]"
        raise ValueError(f"offset {q} (at position {i}) is outside {rng}")

    def _sync_top(self) -> npt.NDArray[np.int64]:
        """Bring the block sample ``top`` up to the full blocks of ``[0, n)``. O(new blocks)."""
        nfull = self._n // _BLOCK
        t = self._top_n
        if self._top.shape[0] < nfull:
            top = np.empty(max(2 * nfull, 64), np.int64)
            top[:t] = self._top[:t]
            self._top = top
        t0 = t - 1 if t > 0 else 0  # the last sampled entry may have been extended since
        if t0 < nfull:
            self._top[t0:nfull] = self._offs[t0 * _BLOCK + _BLOCK - 1 : nfull * _BLOCK : _BLOCK]
        self._top_n = nfull
        return self._top[:nfull]

    # ------------------------------------------------------------------ snapshots

    def entries(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Copies of the live entries ``(last_offsets, wms)``, for snapshots. O(n)."""
        return self._offs[self._h : self._n].copy(), self._wms[self._h : self._n].copy()

    @classmethod
    def restore_state(
        cls,
        creation_time: SupportsIndex,
        start_offset: SupportsIndex,
        length: SupportsIndex,
        tail_time: SupportsIndex,
        last_offsets: npt.ArrayLike,
        wms: npt.ArrayLike,
    ) -> WatermarkIndex:
        """Restore an index from a snapshot (``entries()`` and the scalars); validates. O(n)."""
        ct = _int(creation_time, "creation_time")
        start = _int(start_offset, "start_offset")
        ln = _int(length, "length")
        tail = _int(tail_time, "tail_time")
        lo = _as_int64(last_offsets, "last_offsets").reshape(-1)
        wm = _as_int64(wms, "wms").reshape(-1)
        if lo.shape[0] != wm.shape[0]:
            raise ValueError(f"{lo.shape[0]} last_offsets but {wm.shape[0]} wms")
        idx = cls(ct, start)
        live = lo.shape[0]
        cap = _MIN_CAP
        while cap < 2 * live:
            cap *= 2
        store = np.empty((2, cap), np.int64)
        store[0, :live] = lo
        store[1, :live] = wm
        idx._set_storage(store)
        idx._n = live
        idx._length = ln
        idx._tail = tail
        idx._merge_wm = int(wm[live - 1]) if live and ln > start else None
        try:
            idx._check()
        except AssertionError as e:
            raise ValueError(f"invalid watermark index state: {e}") from None
        return idx

    # ------------------------------------------------------------------ invariants

    @checked
    def _check(self) -> None:
        """Assert every invariant; AssertionError names the broken one. O(n)."""

        def need(cond: bool | np.bool_, msg: str) -> None:
            if not cond:
                raise AssertionError(f"{msg} ({self!r})")

        offs, wms, h, n = self._offs, self._wms, self._h, self._n
        cap = offs.shape[0]
        need(offs.dtype == _I64 and wms.dtype == _I64, "entry arrays must be int64")
        need(wms.shape[0] == cap, f"capacities differ: {cap} offsets, {wms.shape[0]} wms")
        need(offs.base is self._store and wms.base is self._store, "entry rows are stale")
        need(self._store.shape == (2, cap), f"entry array has shape {self._store.shape}")
        need(cast(object, self._om.obj) is offs, "offset memoryview is stale")
        need(cast(object, self._wv.obj) is wms, "watermark memoryview is stale")
        need(0 <= h <= n <= cap, f"slots out of order: head {h}, count {n}, capacity {cap}")
        need(0 <= self._start <= self._length, "need 0 <= start_offset <= length")
        need(self._tail >= self._creation, "tail_time is before creation_time")
        lo, wm = offs[h:n], wms[h:n]
        need(bool(np.all(lo[1:] > lo[:-1])), "entry offsets are not strictly increasing")
        need(bool(np.all(wm[1:] >= wm[:-1])), "entry watermarks decrease")
        if n > h:
            need(int(lo[0]) >= self._start - 1, f"entry at {int(lo[0])} below start_offset - 1")
            need(self._tail - 1 >= int(wm[-1]), f"tail_time - 1 < last watermark {int(wm[-1])}")
            need(int(wm[0]) >= self._creation - 1, "an entry's watermark is before creation")
        if self._length > self._start:
            need(n > h, "bytes exist but no entry covers them")
            need(int(lo[-1]) == self._length - 1, f"last entry {int(lo[-1])} is not length - 1")
            need(self._merge_wm == int(wm[-1]), "merge watermark is not the last entry's")
        else:
            need(n - h <= 1, "an empty segment holds more than its initial entry")
            need(n == h or int(lo[0]) == self._start - 1, "initial entry not at start - 1")
            need(self._merge_wm is None, "an empty segment's initial entry must not merge")
        t = self._top_n
        need(0 <= t <= n // _BLOCK and t <= self._top.shape[0], f"top sample size {t} too big")
        if t:
            # the last sample may lag behind an entry extended since (refreshed on sync)
            sample = offs[_BLOCK - 1 : t * _BLOCK : _BLOCK]
            need(bool(np.all(self._top[: t - 1] == sample[:-1])), "top sample is stale")
            need(int(self._top[t - 1]) <= int(sample[-1]), "last top sample is beyond its entry")
