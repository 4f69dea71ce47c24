"""The read index (PDP-26 "Read Index"): reads with watermarks, future reads, watermark lookups.

It serves bytes from a segment's data together with ``watermark_at(end of read)``,
tracks future reads waiting at the tail and completes them on data, on a tail
watermark increase, on seal or on their deadline, waits on many segments at once
(``wait_any``), and answers ``watermark_at`` / ``ingestion_time_at`` from each
segment's ``WatermarkIndex``. It works on the segments of a ``SegmentTable`` (the
container): every method takes the table's lock, and waiting reads are completed only
after the lock is released. The container calls ``take_wakeups`` after a write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from ..clock import Clock
from ..errors import (
    BadOffsetError,
    InvalidArgumentError,
    SegmentNotFoundError,
    SegmentStoreError,
    SegmentTruncatedError,
)
from ..future_read import FutureRead
from ..limits import INT64_MAX
from ..results import FAILED, NOTHING_NEW, READ, UNREAD, PackedReads, RecordScan, RecordsRead, SegmentRead
from ..wait_any import ReadyFuture, WaitRequest, check_wait_requests
from .processor import checked_now
from .records import RECORD_PREFIX_BYTES, SCAN_CHUNK_BYTES, SCAN_MAX_BYTES, prepare
from .segment import Segment
from .validation import check_offset, quote
from .watermark_index import load_kernels

__all__ = ["ReadIndex", "SegmentTable", "Wakeup", "complete", "read_locked", "tail_read", "take_wakeups"]

_NO_OFFSETS = np.empty(0, np.int64)
_PACKED_START = 1024
"""Record starts (and watermarks) ``read_packed`` makes room for at first (it grows past them)."""
_new_tuple = tuple.__new__


def _regrown(out: np.ndarray, cap: int, nb: int, nv: int, need: int) -> tuple[np.ndarray, int]:
    """``read_packed``'s ``out`` (starts at ``[0, cap)``, ``nb`` of them; watermarks at ``[cap, 2 cap)``,
    ``nv``) copied into one of a capacity of at least ``need`` (doubling), and that capacity. O(nb + nv)."""
    new_cap = max(need, 2 * cap)
    grown = np.empty(2 * new_cap, np.int64)
    grown[:nb] = out[:nb]
    grown[new_cap : new_cap + nv] = out[cap : cap + nv]
    return grown, new_cap


_Got = tuple[Segment, bytes, tuple[int, int, int, bool, bool]] | SegmentStoreError
"""A ``read_many`` request read (``ReadIndex._requests_read``): its segment, bytes and read, or its error."""

Wakeup = tuple[FutureRead, SegmentRead | BaseException]
"""A waiting read and what completes it: a read, or the error it fails with."""


class SegmentTable(Protocol):
    """The segments a read index serves (``SegmentContainer``): a lock and lookups under it."""

    @property
    def lock(self) -> threading.Lock: ...

    def segment(self, name: str, use: bool = True) -> Segment:
        """The segment (reactivated if evicted); raises if missing or closed. Lock held."""
        ...

    def active(self, name: str) -> Segment | None:
        """The segment if it is in the active set, else ``None``; never raises. Lock held."""
        ...

    def active_segments(self) -> Iterable[Segment]:
        """Every segment in the active set. Lock held."""
        ...

    def use(self, segments: Iterable[Segment]) -> None:
        """Count a use of each of ``segments`` (as ``segment(name)`` does). Lock held."""
        ...

    def lookup(self) -> tuple[Callable[[str], Segment | None], int]:
        """For a batch of lookups under one hold of the lock: a function finding an active segment by
        name (``None`` if it is not active: then ``segment(name)`` finds it or raises, a closed store
        finds none) and the timestamp ``segment(name)`` gives a use now (until it reactivates one,
        which may stamp an update). Lock held. O(1)."""
        ...


def tail_read(seg: Segment, offset: int) -> SegmentRead:
    """A zero-length read at (or beyond) the tail carrying the tail watermark. O(1)."""
    return SegmentRead(offset, b"", seg.last_write_time - 1, seg.sealed, True)


def read_locked(seg: Segment, offset: int, max_length: int) -> SegmentRead:
    """Up to ``max_length`` bytes at a checked ``offset`` with ``watermark_at`` their end. O(bytes)."""
    length = seg.data.length
    end = min(length, offset + max_length)
    data = seg.data.read(offset, end - offset) if end > offset else b""
    at_tail = end == length
    wm = seg.last_write_time - 1 if at_tail else seg.windex.watermark_at(end)
    return SegmentRead(offset, data, wm, at_tail and seg.sealed, at_tail)


def take_wakeups(seg: Segment) -> list[Wakeup]:
    """Future reads of ``seg`` that can complete now, removed from its list (lock held). O(waiting)."""
    out: list[Wakeup] = []
    keep: list[FutureRead] = []
    tail_wm = seg.last_write_time - 1
    length = seg.data.length
    for f in seg.futures:
        if f.done():
            continue
        if f.offset < length:
            out.append((f, read_locked(seg, f.offset, f.max_length)))
        elif seg.sealed and f.offset > length:
            why = f"segment {seg.name!r}: read offset {f.offset} is beyond the length {length} (sealed)"
            out.append((f, BadOffsetError(why, expected=length, actual=f.offset)))
        elif seg.sealed or tail_wm > f.watermark:
            out.append((f, tail_read(seg, f.offset)))
        else:
            keep.append(f)
    seg.futures = keep
    return out


def complete(wakeups: list[Wakeup]) -> None:
    """Complete waiting reads; call without holding the container's lock."""
    for fut, result in wakeups:
        if fut.done():
            continue
        try:
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)
        except Exception:  # cancelled or completed by another thread meanwhile
            pass


class ReadIndex:
    """Read-side operations over the segments of a ``SegmentTable``. Thread-safe."""

    __slots__ = ("_clock", "_lock", "_table")

    def __init__(self, table: SegmentTable, clock: Clock) -> None:
        self._table = table
        self._lock = table.lock
        self._clock = clock

    # ------------------------------------------------------------------ checks
    @staticmethod
    def _check_position(seg: Segment, offset: object, what: str, end_ok: bool = True) -> int:
        """``offset`` is an int in ``[start_offset, length]`` (``length`` only if ``end_ok``)."""
        if type(offset) is not int or offset < 0:
            check_offset(seg.name, what, offset)
        assert isinstance(offset, (int, np.integer))
        o = int(offset)
        if o < seg.start_offset:
            raise SegmentTruncatedError(
                f"segment {seg.name!r}: {what} {o} is below the start offset {seg.start_offset} (truncated)"
            )
        length = seg.length
        if o > length or (o == length and not end_ok):
            where = "beyond" if o > length else "not below"
            raise BadOffsetError(
                f"segment {seg.name!r}: {what} {o} is {where} the length {length}",
                expected=length,
                actual=o,
            )
        return o

    @staticmethod
    def _check_length(seg: Segment, max_length: object) -> None:
        if type(max_length) is not int or max_length < 0:
            check_offset(seg.name, "max_length", max_length)

    # ------------------------------------------------------------------ reads
    def read(self, name: str, offset: int, max_length: int) -> SegmentRead:
        """Read up to ``max_length`` bytes at ``offset``; never waits. O(bytes read).

        At the tail (``offset == length``) the read is zero-length and carries the tail
        watermark; at the end of a sealed segment it also has ``end_of_segment``.
        """
        with self._lock:
            seg = self._table.segment(name)
            self._check_position(seg, offset, "read offset")
            self._check_length(seg, max_length)
            return read_locked(seg, offset, max_length)

    def scan_records(
        self, name: str, offset: int, max_length: int, max_records: int | None = None
    ) -> RecordScan:
        """Where the whole length-prefixed records from ``offset`` end, within ``max_length`` bytes.

        ``offset`` must be a record boundary; at most ``max_records`` records (None: no
        limit) that end at or before ``offset + max_length`` and the segment's length
        are counted. One call examines at most ``SCAN_MAX_BYTES`` (``records``). O(bytes).
        """
        if max_records is not None and (type(max_records) is not int or max_records < 0):
            raise InvalidArgumentError(
                f"segment {quote(name)}: max_records must be an int >= 0 or None, got {max_records!r}"
            )
        with self._lock:
            seg = self._table.segment(name)
            self._check_position(seg, offset, "scan offset")
            self._check_length(seg, max_length)
        want = INT64_MAX if max_records is None else max_records
        limit = offset + max_length
        prepare(min(max_length, SCAN_CHUNK_BYTES))  # the walks hold the lock: load numba first
        pos = offset
        count = 0
        while count < want and pos - offset < SCAN_MAX_BYTES:
            with self._lock:  # per chunk: appends go on meanwhile (the bytes below the length never change)
                seg = self._table.segment(name)
                self._check_position(seg, pos, "scan offset")  # truncated meanwhile: raises
                stop = min(limit, seg.length)
                if stop - pos < RECORD_PREFIX_BYTES:
                    break
                size = min(SCAN_CHUNK_BYTES, stop - pos)
                n, used = seg.data.walk_records(pos, size, want - count)
                head = seg.data.read(pos, RECORD_PREFIX_BYTES) if n == 0 else b""
            if n == 0:  # one record longer than the chunk: its prefix says whether it fits
                used = RECORD_PREFIX_BYTES + int.from_bytes(head[:RECORD_PREFIX_BYTES], "little")
                if pos + used > stop:
                    break
                n = 1
            count += n
            pos += used
        return RecordScan(offset, pos, count)

    def _requests_read(self, reqs: list[tuple[str, int, int, int | None]]) -> Iterator[tuple[int, _Got]]:
        """``read_many``'s checked requests read in turn, lock held: the index of each with something new
        above its known watermark (ready, as ``wait_any`` says: ``_ready``; the others are passed over)
        and the segment, the bytes read and the ``SegmentRead``'s ``(offset, length, watermark,
        end_of_segment, at_tail)`` (``read_locked``'s), or the ``SegmentStoreError`` a ``read`` raises.
        Each segment counts a use as it is reached (as ``segment(name)`` counts one): a caller whose
        reply is full stops taking them, and the rest are not looked up. O(bytes) per request read,
        a lookup in the active set and a few lines per request passed over."""
        get, ts = self._table.lookup()
        for i, (name, offset, max_length, known) in enumerate(reqs):
            seg = get(name)
            try:
                if seg is None:  # not active: reactivated (evicted; its advance may stamp), or raises
                    seg = self._table.segment(name)
                    ts = seg.last_used
                seg.last_used = ts
                length = seg.length
                if offset >= length:  # at (or beyond) the tail
                    if known is not None and not seg.sealed and seg.last_write_time - 1 <= known:
                        continue  # nothing new
                    if offset > length:
                        self._check_position(seg, offset, "read offset")  # raises
                if offset < seg.data.start_offset:
                    self._check_position(seg, offset, "read offset")  # raises
                end = offset + max_length
                if end >= length:
                    data = seg.data.read(offset, length - offset) if length > offset else b""
                    yield i, (seg, data, (offset, len(data), seg.last_write_time - 1, seg.sealed, True))
                else:
                    data = seg.data.read(offset, max_length) if max_length else b""
                    yield i, (seg, data, (offset, len(data), seg.windex.watermark_at(end), False, False))
            except SegmentStoreError as e:
                yield i, e

    def read_many(
        self, reqs: list[tuple[str, int, int, int | None]], reply_bytes: int
    ) -> tuple[RecordsRead | None, ...]:
        """``SegmentClient.read_many`` of checked requests under one hold of the lock (see
        ``segmentstore.core.batched_reads``): each a read, its records' starts and the watermarks
        there (``record_bounds`` and ``watermarks_at_ascending`` of the bounds, in one kernel call),
        or its error, or ``None`` (nothing new above its known watermark); unread past
        ``reply_bytes``. O(bytes + records)."""
        load_kernels()  # the records' watermarks are one kernel call: never loaded under the lock
        out: list[RecordsRead | None] = [None] * len(reqs)
        used = 0
        stop = len(reqs) if reply_bytes > 0 else 0  # the requests from here on are left unread
        with self._lock:
            for i, got in self._requests_read(reqs[:stop]):
                if isinstance(got, SegmentStoreError):
                    out[i] = RecordsRead(None, _NO_OFFSETS, _NO_OFFSETS, type(got).__name__, str(got))
                    continue
                seg, data, (offset, _, watermark, eos, tail) = got
                if data:
                    cap = len(data) // 4 + 2
                    both = np.empty(2 * cap, np.int64)
                    n = seg.windex.records_into(data, offset, both[:cap], both[cap:])
                    starts, wms = both[:n], both[cap : cap + n + 1]
                else:
                    starts, wms = _NO_OFFSETS, np.array([watermark], np.int64)
                out[i] = RecordsRead(SegmentRead(offset, data, watermark, eos, tail), starts, wms)
                used += len(data) + 16 * len(starts)
                if used >= reply_bytes:  # the rest unread (not looked up)
                    stop = i + 1
                    break
        out[stop:] = [RecordsRead(None, _NO_OFFSETS, _NO_OFFSETS) for _ in out[stop:]]
        return tuple(out)

    def read_packed(self, reqs: list[tuple[str, int, int, int | None]], reply_bytes: int) -> PackedReads:
        """``read_many``'s answers in columns (``PackedReads``): each read's bytes, and for those with
        data their records' starts and the watermarks there in two arrays and a row of ``meta`` each, as
        a decoder of many blocks takes them; ``PackedReads.answers()`` are ``read_many``'s.

        Each read with data is one kernel call that also writes its row of ``meta``: a few µs per call,
        plus O(bytes + records); a request with nothing new costs its lookup and a few lines."""
        load_kernels()  # the records' watermarks are one kernel call each: never loaded under the lock
        k = len(reqs)
        kinds = [NOTHING_NEW] * k  # (each request read says what it is)
        reads: list[tuple[int, int, int, bool, bool] | None] = [None] * k
        pieces: list[bytes] = []
        errors: dict[int, tuple[str, str]] = {}
        cap = _PACKED_START
        out = np.empty(2 * cap, np.int64)  # the records' starts at [0, cap), the watermarks at [cap, 2 cap)
        meta = np.empty((k, 6), np.int64)
        at = nb = 0  # the bytes and the records' starts so far (and a watermark more per read with data)
        stop = k if reply_bytes > 0 else 0  # the requests from here on are left unread
        with self._lock:
            for i, got in self._requests_read(reqs if stop else []):
                if isinstance(got, SegmentStoreError):
                    kinds[i] = FAILED
                    errors[i] = (type(got).__name__, str(got))
                    continue
                seg, data, read = got
                kinds[i] = READ
                reads[i] = read
                if data:
                    row = len(pieces)
                    nv = nb + row
                    n = len(data)
                    if nv + n // 4 + 2 > cap:  # (``nb <= nv``)
                        out, cap = _regrown(out, cap, nb, nv, nv + n // 4 + 2)
                    nb += seg.windex.records_packed(
                        data, read[0], out, nb, cap - nb, cap + nv, meta, row, at, read[2]
                    )
                    pieces.append(data)
                    at += n
                    if at + 16 * nb >= reply_bytes:  # (data and 16 bytes per record) the rest unread
                        stop = i + 1
                        break
        if stop < k:
            kinds[stop:] = [UNREAD] * (k - stop)
        row = len(pieces)
        # ``tuple.__new__``: the NamedTuple's own ``__new__`` (a generated Python function) skipped
        return _new_tuple(
            PackedReads, (kinds, reads, pieces, meta[:row], out[:nb], out[cap : cap + nb + row], errors)
        )

    def read_future(
        self, name: str, offset: int, max_length: int, timeout_ms: int | None = None
    ) -> FutureRead:
        """A read that waits at (or beyond) the tail; see ``FutureRead``. O(1) to register.

        It is already complete if data exists at ``offset`` or the segment is sealed.
        ``timeout_ms`` is measured on the ingestion clock (``expire_future_reads``);
        ``FutureRead.wait(timeout_s)`` also bounds the wait in real time.
        """
        if timeout_ms is not None and (type(timeout_ms) is not int or timeout_ms < 0):
            raise InvalidArgumentError(
                f"segment {quote(name)}: timeout_ms must be an int >= 0 or None, got {timeout_ms!r}"
            )
        with self._lock:
            seg = self._table.segment(name)
            if type(offset) is not int or offset < 0:
                check_offset(name, "read offset", offset)
            self._check_length(seg, max_length)
            if offset < seg.start_offset or (seg.sealed and offset > seg.length):
                self._check_position(seg, offset, "read offset")  # raises, as read() does
            now = checked_now(self._clock)
            deadline = None if timeout_ms is None else now + timeout_ms
            fut = FutureRead(name, offset, max_length, seg.tail_watermark(), deadline, self._expire)
            if offset < seg.length:
                fut.set_result(read_locked(seg, offset, max_length))
            elif seg.sealed or timeout_ms == 0:
                fut.set_result(tail_read(seg, offset))
            else:
                seg.futures.append(fut)
            return fut

    def wait_any(self, requests: Sequence[WaitRequest]) -> ReadyFuture:
        """A future of the indexes of ready requests (``wait_any`` module). O(k) to register.

        Already complete if a request is ready now; else one waiting read per segment,
        whichever completes first completes it with every request ready at that moment.
        """
        reqs = check_wait_requests(requests)
        fut = ReadyFuture(self._unregister)
        with self._lock:
            ready = self._ready(reqs)
            if not ready:
                for name, offset, wm in reqs:
                    seg = self._table.segment(name)
                    part = FutureRead(name, offset, 0, wm, None, self._expire)
                    seg.futures.append(part)
                    fut.parts.append(part)
        if ready:
            fut.set_result(ready)
            return fut
        for part in fut.parts:
            part.add_done_callback(lambda _p: self._woken(fut, reqs))
        return fut

    def ready_now(self, requests: Sequence[WaitRequest]) -> tuple[int, ...]:
        """``wait_any(requests)`` waited for 0 ms: the ready indexes now, or ``()``. O(k), no future.

        As ``wait_any`` registering its waiting reads does, a miss counts as a use of each segment.
        """
        reqs = check_wait_requests(requests)
        with self._lock:
            segs: list[Segment] = []
            ready = self._ready(reqs, segs)
            if not ready:  # every request's segment was found (a missing one is ready): use them
                self._table.use(segs)
        return ready

    def _ready(self, reqs: list[WaitRequest], found: list[Segment] | None = None) -> tuple[int, ...]:
        """Indexes of the requests whose read would return something new (under the lock). O(k).

        ``found`` collects the segments looked up, in request order.
        """
        out = []
        segment = self._table.segment
        for i, (name, offset, wm) in enumerate(reqs):
            try:
                seg = segment(name, use=False)
            except SegmentNotFoundError:
                out.append(i)
                continue
            if found is not None:
                found.append(seg)
            if offset < seg.length or seg.sealed or seg.last_write_time - 1 > wm or offset < seg.start_offset:
                out.append(i)
        return tuple(out)

    def _woken(self, fut: ReadyFuture, reqs: list[WaitRequest]) -> None:
        """A part completed: unregister the others and complete ``fut`` with the ready requests."""
        if fut.done():
            return
        self._unregister(fut)
        try:
            with self._lock:
                ready = self._ready(reqs)
        except Exception as e:  # the store closed meanwhile
            fut.settle(e)
            return
        fut.settle(ready or tuple(i for i, p in enumerate(fut.parts) if p.done()))

    def _unregister(self, fut: ReadyFuture) -> None:
        """Take ``fut``'s waiting reads off their segments. O(waiting reads of those segments)."""
        with self._lock:
            for part in fut.parts:
                seg = self._table.active(part.segment)
                if seg is not None and part in seg.futures:
                    seg.futures.remove(part)

    def _expire(self, fut: FutureRead) -> None:
        """Complete ``fut`` now with a zero-length read at the current tail watermark."""
        with self._lock:
            seg = self._table.active(fut.segment)
            if seg is not None and fut in seg.futures:
                seg.futures.remove(fut)
                wake: list[Wakeup] = [(fut, tail_read(seg, fut.offset))]
            else:
                wake = []
        complete(wake)

    def expire_future_reads(self) -> int:
        """Complete every future read whose ingestion-clock deadline has passed. O(waiting)."""
        now = checked_now(self._clock)
        wake: list[Wakeup] = []
        with self._lock:
            for seg in self._table.active_segments():
                if not seg.futures:
                    continue
                keep = []
                for f in seg.futures:
                    if f.done():
                        continue
                    if f.deadline_ms is not None and f.deadline_ms <= now:
                        wake.append((f, tail_read(seg, f.offset)))
                    else:
                        keep.append(f)
                seg.futures = keep
        complete(wake)
        return len(wake)

    # ------------------------------------------------------------------ watermarks
    def watermark_at(self, name: str, offset: int) -> int:
        """docs/design.md §1 ``watermark_at``: ``ingestion_time_at(offset) - 1``, or the tail's. O(log n)."""
        with self._lock:
            seg = self._table.segment(name, use=False)
            o = self._check_position(seg, offset, "offset")
            if o == seg.length:
                return seg.last_write_time - 1
            return seg.windex.watermark_at(o)

    def ingestion_time_at(self, name: str, offset: int) -> int:
        """See ``SegmentClient.ingestion_time_at``."""
        with self._lock:
            seg = self._table.segment(name, use=False)
            o = self._check_position(seg, offset, "offset", end_ok=False)
            return seg.windex.ingestion_time_at(o)

    def ingestion_runs(self, name: str, begin: int, end: int) -> np.ndarray:
        """Bytes ``[begin, end)`` as runs of one ingestion time (``WatermarkIndex.ingestion_runs``).

        ``(2, k)`` int64: each run's last offset and its time; empty if ``begin == end``.
        One call answers what ``ingestion_time_at`` would for every byte of the range, or of
        a prefix of it if it holds over ``MAX_RUNS`` runs (ask again after it). O(log n + k).
        """
        with self._lock:
            seg = self._table.segment(name, use=False)
            b = self._check_position(seg, begin, "begin")
            e = self._check_position(seg, end, "end")
            if e < b:
                raise InvalidArgumentError(f"segment {quote(name)}: end {e} is below begin {b}")
            if e == b:
                return np.empty((2, 0), np.int64)
            return seg.windex.ingestion_runs(b, e)

    def watermarks_at(self, name: str, offsets: Any) -> np.ndarray:
        """See ``SegmentClient.watermarks_at``: in numba, O(q log n) or O(q + n) for q offsets."""
        arr = np.asarray(offsets)
        if arr.dtype.kind not in "iu":
            raise InvalidArgumentError(
                f"segment {quote(name)}: offsets must be an integer array, got dtype {arr.dtype}"
            )
        arr = arr.astype(np.int64, copy=False)
        with self._lock:
            seg = self._table.segment(name, use=False)
            try:  # the index checks every offset against its range, which is the segment's
                return seg.windex.watermarks_at(arr)
            except ValueError:
                if arr.size:  # the segment's errors for an offset outside it (the lowest first)
                    self._check_position(seg, int(arr.min()), "offset")
                    self._check_position(seg, int(arr.max()), "offset")
                raise
