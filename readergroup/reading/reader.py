"""``EventReader``: reads the segments its group assigns it, delivering events, watermarks and checkpoints.

PDP-26 "EventReaderImpl". Each assigned segment is a ``SegmentInput`` (PDP-26
"SegmentInputStream", ``segment_input.py``): read in blocks of ``read_buffer_bytes``,
each decoded at once, with the watermarks at its events giving every event's ingestion
time and the watermark after it. The segments that need a block are read in one
``read_many`` call (the blocks and the watermarks at their records together: one round
trip over ``RemoteClient``), and a look at the tails without waiting is one
``read_many`` too (each tail with the watermark known there: only what is new comes
back), not repeated within one call at one instant of the reader's clock, nor, over an embedded
store, while its change count stands where a look at the same segments left it; ``batched_reads`` off
reads each segment alone (a ``read`` and a ``watermarks_at``) as before, with the same
results.

Delivery order: across segments, the buffered event with the oldest ingestion time
first (within a segment, segment order), so the group watermark advances evenly.

Acknowledgement: an event returned by ``read_next_event`` (or in a batch) counts as
processed when the reader is called again. The reader reports its acknowledged
positions and the watermarks there to the group state every
``position_report_interval_ms`` (group clock), when it finishes a segment, when it is
caught up at the tail, at a checkpoint, on release and on close; with each report it
learns the group watermark, and in ``INGESTION_TIME`` returns it as a watermark read
whenever it increased (strictly ascending within an epoch). A caught-up reader
re-reads its tails (zero-length reads) on every call, so it follows idle segments'
advancing watermarks. On a reset (new epoch, PIP-194) it drops everything it buffered.

Shared state: a sync is one batch appended to the group's state log (report,
completion, rebalance, checkpoint reached) when something changed, and the reader then
holds exactly the segments the state assigns it. It may run in any process: its
replica learns of other processes' updates when it syncs (a caught-up reader watches
the log in the same ``wait_any`` as its tails). With ``reader_timeout_ms`` it
heartbeats (its lease) at least every quarter of it, syncing then too, and a reader
whose lease was taken (declared offline) raises ``ReaderNotInGroupError`` instead of
delivering anything more; a reader of a deleted group raises ``ReaderGroupNotFoundError``.

Here: reading and delivery; the reader's membership (syncs, the segments it holds, its
lease, resets) is ``reader_membership``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from segmentstore import Clock, SegmentNotFoundError
from segmentstore.checks import checked
from segmentstore.client import EmbeddedClient, SegmentStoreClient
from segmentstore.clock import monotonic_s
from segmentstore.limits import INT64_MAX, INT64_MIN

from ..config import TimeDomain
from ..errors import (
    InvalidReadError,
    ReaderGroupNotFoundError,
)
from ..format.events import NO_EVENT_TIME
from ..group_state.checkpoint import ReaderPosition, SegmentPosition
from .block_merge import Merged as _Merged
from .block_merge import merge_blocks as _merge
from .block_merge import merge_kernel as _merge_kernel
from .frontier import event_time_watermark
from .read_results import EventBatch, EventRead, ReaderStats, ReadKind, new_batch
from .reader_blocks import ReaderBlocks
from .reader_membership import ReaderMembership
from .segment_input import SegmentInput

if TYPE_CHECKING:
    from ..config import ReaderGroupConfig
    from ..group_state.state import ReaderGroupState

__all__ = ["ReadKind", "EventRead", "EventBatch", "ReaderStats", "EventReader"]

_NOT_LOOKED: tuple[int, tuple[int, ...]] = (INT64_MIN, ())
"""No look at the tails yet in this call (``_ready_tails`` skips a second look only within one call)."""

_WAIT_SLICE_MS = 100  # an idle reader's longest wait between syncs with the group
_new = tuple.__new__
# an empty batch's columns (Arrow arrays are immutable: shared); from buffers, as ``pa.array`` would
# import pandas (half a second of every process's start, for a type check)
_NO_KEYS = pa.Array.from_buffers(pa.string(), 0, [None, pa.py_buffer(bytes(4)), pa.py_buffer(b"")])
_NO_PAYLOADS = pa.Array.from_buffers(pa.binary(), 0, [None, pa.py_buffer(bytes(4)), pa.py_buffer(b"")])
_NO_I32 = np.empty(0, np.int32)  # an empty batch's numpy columns (no element to change: shared)
_NO_I64 = np.empty(0, np.int64)
_STRING, _BINARY = pa.string(), pa.binary()


_EVENT = ReadKind.EVENT


class EventReader(ReaderMembership, ReaderBlocks):
    """A reader of a reader group; create it with ``ReaderGroup.create_reader``. Not thread-safe.

    ``read_next_event(timeout_ms)`` returns one ``EventRead``; ``read_batch`` many
    events as columns. Close it (``close()``) to hand its segments back at its
    acknowledged positions; a crashed reader is declared with ``ReaderGroup.reader_offline``.
    """

    def __init__(
        self,
        reader_id: str,
        state: ReaderGroupState,
        config: ReaderGroupConfig,
        client: SegmentStoreClient,
        clock: Clock,
    ) -> None:
        self.reader_id = reader_id
        self._state = state
        self._config = config
        self._client = client
        self._clock = clock
        self._now = clock.now
        self._watermarks = config.watermarks
        self._interval = config.position_report_interval_ms
        self._buf = config.read_buffer_bytes
        self._event_time = config.time_domain is TimeDomain.EVENT_TIME
        self._lag = 0 if self._event_time else config.max_event_time_lag_ms  # EVENT_TIME: no lag
        self._token = state.add_reader(reader_id)
        self._sync_obj = state.synchronizer
        self._version = -1  # the replica's version when membership and epoch were last checked
        self._cps = state.model.checkpoints  # the replica's checkpoint queue (valid at that version)
        self._beat = state.heartbeat(self._token) if config.reader_timeout_ms else None
        self._epoch = state.epoch
        self._segs: dict[str, SegmentInput] = {}
        self._framings: dict[str, bool] = {}  # stream -> Pravega-framed (``_pravega_framed``)
        self._cur: SegmentInput | None = None
        self._limit = INT64_MAX
        self._emitted = INT64_MIN  # last watermark returned in this epoch
        self._late_threshold = INT64_MIN  # event times <= this are late
        self._it_emitted = INT64_MIN  # ingestion times <= this are late (INGESTION_TIME only)
        self._wm_pending: int | None = None
        self._next_sync = INT64_MIN  # the next report or heartbeat, whichever comes first
        self._next_report = INT64_MIN
        self._need_sync = True
        self._state_moved = True  # the state log may hold batches this replica has not applied
        self._quiet = None  # the replica, its layout and the positions after a sync that left nothing to do
        self._looked: tuple[int, tuple[int, ...]] = _NOT_LOOKED  # the last look at the tails in this call
        # the store's change count, where the client knows it (embedded), and its value and the segments
        # looked at by the last look that found the group's state log read to its end (``_ready_tails``)
        self._changes = client.change_count if isinstance(client, EmbeddedClient) else None
        # the reads' answers in columns, where the client gives them as its ``read_many`` would (embedded)
        self._packed = self._changes is not None and type(client).read_many is EmbeddedClient.read_many
        self._clear_at: tuple[int, tuple[int, ...]] | None = None
        self._empty: EventBatch | None = None  # the empty read of this epoch (returned again)
        self._news = 0  # reads that may have brought something (a look's "nothing new" answers do not count)
        self._closed = False
        self._deleted = False  # the group was deleted (the reader is closed too)
        self._events = self._bytes = self._wm_count = self._late = self._late_ingestion = 0

    # ------------------------------------------------------------------ public API
    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def token(self) -> int:
        """This incarnation's membership token (the log position of its ``AddReader``)."""
        return self._token

    @property
    def stats(self) -> ReaderStats:
        """Counters: events, bytes read, watermarks, late events (event time and ingestion time)."""
        return ReaderStats(
            self.reader_id,
            self._epoch,
            self._events,
            self._bytes,
            self._wm_count,
            None if self._emitted == INT64_MIN else self._emitted,
            self._late,
            self._late_ingestion,
            tuple(sorted(self._segs)),
        )

    def get_position(self) -> ReaderPosition:
        """Acknowledged positions (everything returned so far counts as processed) and watermarks. O(k)."""
        return ReaderPosition(
            self.reader_id,
            self._epoch,
            tuple(SegmentPosition(s.seg.stream, s.name, *s.acked()) for s in self._segs.values()),
        )

    def read_next_event(self, timeout_ms: int = 0) -> EventRead:
        """The next event, watermark or checkpoint marker; ``EMPTY`` if none within ``timeout_ms``.

        O(1) amortised per event: one block read, decode and ``watermarks_at`` call per
        ``read_buffer_bytes``; a state sync per report interval.
        """
        if timeout_ms:
            _check_timeout(self.reader_id, timeout_ms)
        self._looked = _NOT_LOOKED  # a new call looks again: data may have come at this same instant
        st = self._state
        if self._sync_obj.version != self._version or self._closed:
            self._check_membership()
        if (self._need_sync or self._now() >= self._next_sync or self._cps) and self._sync_due(st):
            marker = self._sync()
            if marker is not None:
                return marker
        if self._wm_pending is not None:
            return self._emit_watermark()
        cur = self._cur
        if cur is not None:  # fast path: the current block, while it is the oldest
            i = cur.idx
            if i < cur.n:
                it = cur.itl[i]
                if it <= self._limit:  # (this is _deliver, inlined)
                    cur.idx = i + 1
                    off, ln, keys, pays = cur.lists  # type: ignore[misc]
                    et = cur.etl[i]
                    self._events += 1
                    if it <= self._it_emitted:
                        self._late_ingestion += 1
                    if et is not None and et <= self._late_threshold:
                        self._late += 1
                    return _new(
                        EventRead,
                        (_EVENT, self._epoch, cur.name, off[i], ln[i], keys[i], pays[i], et, it, None, None),
                    )
        if self._select():
            assert self._cur is not None
            return self._deliver(self._cur, self._cur.idx)
        return self._idle(timeout_ms, batch=False)  # type: ignore[return-value]

    def read_batch(self, max_events: int = 65_536, timeout_ms: int = 0) -> EventBatch:
        """Up to ``max_events`` events as columns, oldest ingestion time first across segments.

        A watermark due is attached (emitted before the events); a checkpoint marker
        comes as a batch of its own. Empty if nothing arrived within ``timeout_ms``.
        """
        if (
            type(max_events) is not int and (isinstance(max_events, bool) or not isinstance(max_events, int))
        ) or max_events < 1:
            raise InvalidReadError(
                f"reader {self.reader_id!r}: max_events must be an int >= 1, got {max_events!r}"
            )
        if type(timeout_ms) is not int or timeout_ms < 0:
            _check_timeout(self.reader_id, timeout_ms)
        self._looked = _NOT_LOOKED  # a new call looks again: data may have come at this same instant
        st = self._state
        if self._sync_obj.version != self._version or self._closed:
            self._check_membership()
        news = -1
        if self._sync_due(st):
            news = self._news
            marker = self._sync()
            if marker is not None:
                return self._batch([], None, marker.checkpoint_name)
        wm = self._take_watermark()
        parts = self._collect(max_events)
        if parts or wm is not None:
            return self._batch(parts, wm, None)
        if not timeout_ms and news == self._news and self._quiet is not None and not self._state_moved:
            # an idle poll: the sync just made left nothing to do and its look at the tails found
            # nothing new, so the idle pass (another look and sync at this instant) would change nothing
            return self._batch([], None, None)
        out = self._idle(timeout_ms, batch=True, max_events=max_events)
        assert isinstance(out, EventBatch)
        return out

    def close(self) -> None:
        """Report acknowledged positions and completed segments, then leave the group. Idempotent.

        Past a checkpoint's marker the positions apply once the checkpoint completes.
        """
        if self._closed:
            return
        st = self._state
        try:
            with st.lock, contextlib.suppress(ReaderGroupNotFoundError):  # deleted: nothing to leave
                acked, finished = self._positions()
                st.leave(self.reader_id, self._token, self._epoch, acked, finished)
        finally:
            self._closed = True
            self._segs.clear()
            self._cur = None

    # ------------------------------------------------------------------ delivery
    def _deliver(self, s: SegmentInput, i: int) -> EventRead:
        s.idx = i + 1
        off, ln, keys, pays = s.lists  # type: ignore[misc]
        it = s.itl[i]
        et = s.etl[i]
        self._events += 1
        if it <= self._it_emitted:
            self._late_ingestion += 1
        if et is not None and et <= self._late_threshold:
            self._late += 1
        return _new(
            EventRead,
            (_EVENT, self._epoch, s.name, off[i], ln[i], keys[i], pays[i], et, it, None, None),
        )

    def _select(self) -> bool:
        """Make the segment with the oldest buffered event current (fetching exhausted blocks). O(k)."""
        best: SegmentInput | None = None
        best_t = second = INT64_MAX
        self._refill_all()
        for s in self._segs.values():
            if s.idx >= s.n:
                continue
            if s.lists is None:
                s.make_lists()
            t = s.itl[s.idx]
            if best is None or t < best_t:
                if best is not None:
                    second = best_t
                best, best_t = s, t
            elif t < second:
                second = t
        self._cur = best
        self._limit = second
        return best is not None

    def _collect(self, max_events: int) -> list[tuple[SegmentInput, int, int]] | _Merged:
        """Slices ``(segment, start, stop)`` of blocks, oldest event first, up to ``max_events`` events.

        Reads a new block only while the batch is still empty (for the exhausted segments,
        before taking anything), so a batch is made of already buffered slices (no copying
        of many blocks into one); ``_batch`` takes them before any block is replaced. From
        several segments, once the kernels are loaded: one kernel call takes the same
        slices and copies them into the batch's columns (``_batch_kernels.merge``).
        """
        live = self._refill_all()
        self._cur = None
        if not live:
            return []
        if len(live) > 1:
            k = _merge_kernel()
            if k is not None:
                return _merge(k, live, max_events, self._it_emitted, self._late_threshold)
        parts: list[tuple[SegmentInput, int, int]] = []
        left = max_events
        while left > 0:
            best: SegmentInput | None = None
            best_t = second = INT64_MAX
            for s in live:
                if s.idx >= s.n:
                    continue
                t = s.it.item(s.idx)
                if best is None or t < best_t:
                    if best is not None:
                        second = best_t
                    best, best_t = s, t
                elif t < second:
                    second = t
            if best is None:
                break
            i = best.idx
            stop = min(best.n, i + left)
            if second != INT64_MAX:
                stop = min(stop, i + max(1, int(best.it[i:stop].searchsorted(second, side="right"))))
            best.idx = stop
            parts.append((best, i, stop))
            left -= stop - i
        return parts

    def _batch(
        self, parts: list[tuple[SegmentInput, int, int]] | _Merged, wm: int | None, checkpoint: str | None
    ) -> EventBatch:
        if isinstance(parts, _Merged):
            segs, seg, c, keys, pays, late_ingestion, late_event_time = parts
            batch = new_batch(self._epoch, wm, checkpoint, segs, seg, c[0], c[1], c[2], c[3], keys, pays)
            self._events += len(seg)
            self._late_ingestion += late_ingestion  # (counted by the kernel, as below)
            self._late += late_event_time
            return batch
        elif not parts:
            empty = self._empty
            if wm is None and checkpoint is None and empty is not None and empty.epoch == self._epoch:
                return empty  # (immutable, of immutable columns: shared by the reader's empty reads)
            batch = new_batch(
                self._epoch,
                wm,
                checkpoint,
                (),
                _NO_I32,
                _NO_I64,
                _NO_I64,
                _NO_I64,
                _NO_I64,
                _NO_KEYS,
                _NO_PAYLOADS,
            )
            if wm is None and checkpoint is None:
                self._empty = batch
            return batch
        elif len(parts) == 1:
            s, a, b = parts[0]
            batch = new_batch(
                self._epoch,
                wm,
                checkpoint,
                (s.name,),
                np.zeros(b - a, np.int32),
                s.off[a:b],
                s.lengths[a:b],
                s.et[a:b],
                s.it[a:b],
                s.keys.slice(a, b - a),
                s.pays.slice(a, b - a),
            )
        else:
            names: list[str] = []
            index: dict[str, int] = {}
            ks, counts = [], []
            off, ln, et, it, keys, pays = [], [], [], [], [], []
            for s, a, b in parts:
                k = index.setdefault(s.name, len(names))
                if k == len(names):
                    names.append(s.name)
                ks.append(k)
                counts.append(b - a)
                off.append(s.off[a:b])
                ln.append(s.lengths[a:b])
                et.append(s.et[a:b])
                it.append(s.it[a:b])
                keys.append(s.keys.slice(a, b - a))
                pays.append(s.pays.slice(a, b - a))
            batch = new_batch(
                self._epoch,
                wm,
                checkpoint,
                tuple(names),
                np.repeat(np.array(ks, np.int32), counts),
                np.concatenate(off),
                np.concatenate(ln),
                np.concatenate(et),
                np.concatenate(it),
                pa.concat_arrays(keys),
                pa.concat_arrays(pays),
            )
        n = len(batch)
        self._events += n
        self._late_ingestion += int(np.count_nonzero(batch.ingestion_time <= self._it_emitted))
        if self._late_threshold != INT64_MIN:
            e = batch.event_time
            self._late += int(np.count_nonzero((e != NO_EVENT_TIME) & (e <= self._late_threshold)))
        return batch

    def _take_watermark(self) -> int | None:
        wm = self._wm_pending
        if wm is not None:
            self._wm_pending = None
            self._set_emitted(wm)
        return wm

    def _emit_watermark(self) -> EventRead:
        wm = self._take_watermark()
        return EventRead(ReadKind.WATERMARK, self._epoch, watermark=wm)

    def _set_emitted(self, wm: int) -> None:
        self._emitted = wm
        self._wm_count += 1
        self._late_threshold = event_time_watermark(wm, self._lag)
        if not self._event_time:
            self._it_emitted = wm

    def _idle(self, timeout_ms: int, batch: bool, max_events: int = 1) -> EventRead | EventBatch:
        """Nothing buffered: learn what is new at the tails, sync, and wait up to ``timeout_ms``.

        Each pass is one look at the caught-up segments (not a read per segment): the first,
        without waiting, one ``read_many`` (what is new comes back read; not repeated in the
        same instant), then ``wait_any`` waiting up to ``_WAIT_SLICE_MS``; a wake-up (data, a
        watermark rise, a seal) reads just the segments that changed. Between slices the
        reader syncs with the group (checkpoints, new assignments): in-memory, no store call.
        """
        _check_timeout(self.reader_id, timeout_ms)
        deadline = monotonic_s() + timeout_ms / 1000.0 if timeout_ms else 0.0
        wait_ms = 0
        while True:
            before = self._progress()
            ready = self._ready_tails(wait_ms)
            if ready:
                self._fetch_all(ready)
            marker = self._sync(refresh=False)
            if marker is not None:
                return self._batch([], None, marker.checkpoint_name) if batch else marker
            if batch:
                wm = self._take_watermark()
                parts = self._collect(max_events)
                if parts or wm is not None:
                    return self._batch(parts, wm, None)
            else:
                if self._wm_pending is not None:
                    return self._emit_watermark()
                if self._select():
                    assert self._cur is not None
                    return self._deliver(self._cur, self._cur.idx)
            left_ms = int((deadline - monotonic_s()) * 1000) if timeout_ms else 0
            if left_ms <= 0:
                if self._progress() != before:
                    wait_ms = 0
                    continue  # catching up (marker-only blocks, empty sealed segments): not EMPTY yet
                return self._batch([], None, None) if batch else EventRead(ReadKind.EMPTY, self._epoch)
            wait_ms = min(left_ms, _WAIT_SLICE_MS)

    # ------------------------------------------------------------------ invariants
    @checked
    def _check(self) -> None:
        """Assert the reader's invariants against its segments, the store and the group state.

        O(buffered events + segments): each ``SegmentInput`` is checked, one ``get_info``
        per segment bounds its read offset by the segment's length, and while the reader
        is online in the group's epoch it holds exactly the segments the state assigns it.
        """
        assert min(self._events, self._bytes, self._wm_count, self._late, self._late_ingestion) >= 0
        assert self._late <= self._events and self._late_ingestion <= self._events
        if self._closed:
            assert not self._segs and self._cur is None, "a closed reader still buffers segments"
        for name, s in self._segs.items():
            assert s.name == name
            s._check()
            try:
                length = self._client.get_info(name).length
            except SegmentNotFoundError:  # deleted (its stream was): nothing to compare with
                continue
            assert s.fetch <= length, f"{name}: reads from {s.fetch}, past the segment's length {length}"
        assert self._cur is None or self._segs.get(self._cur.name) is self._cur, "current segment not held"
        # Watermarks: strictly ascending within the epoch, the late thresholds follow the last one.
        assert self._wm_pending is None or self._wm_pending > self._emitted, "a pending watermark not above"
        assert self._late_threshold == (
            INT64_MIN if self._emitted == INT64_MIN else event_time_watermark(self._emitted, self._lag)
        )
        assert self._it_emitted == (INT64_MIN if self._event_time else self._emitted)
        st = self._state
        with st.lock:
            if self._closed or not self._online() or st.epoch != self._epoch:
                return  # it learns on its next read (and drops what it buffered)
            assigned = st.model.segments_of(self.reader_id)
            assert assigned == set(self._segs), (
                f"reader {self.reader_id!r} holds {sorted(self._segs)}, the group assigns it "
                f"{sorted(assigned)}"
            )
            if not self._event_time:
                gw = st.group_watermark
                assert self._emitted <= gw, f"emitted watermark {self._emitted} above the group's {gw}"
                assert self._wm_pending is None or self._wm_pending <= gw


def _check_timeout(reader_id: str, timeout_ms: object) -> None:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 0:
        raise InvalidReadError(f"reader {reader_id!r}: timeout_ms must be an int >= 0, got {timeout_ms!r}")
