"""``SegmentInput``: a segment as a reader consumes it — decoded blocks and the watermark after each event.

PDP-26 "SegmentInputStream". The reader reads a segment in blocks (one ``SegmentRead``
of up to ``read_buffer_bytes``), decodes a block at once (``events.decode_columns``),
and makes one batched ``watermarks_at`` call over the block's event offsets (plus a
partial frame's offset), or takes those watermarks from the ``read_many`` answer the
block came with (``take_block``, ``read_blocks``): ``ingestion_time =
watermark_at(offset) + 1`` for each event, and the watermark *after* each event is
the one at the next event's offset. A ``SegmentRead``'s own watermark pertains to the
end of the read, which is unaligned with events, so it is kept with the block and
becomes the segment's watermark only once every event before it was delivered. Writer
markers are skipped (the position moves past them). A zero-length read at the tail
refreshes the watermark at the tail.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from segmentstore import SegmentRead, SegmentTruncatedError, StreamSegment
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.core.batched_reads import MAX_READ_MANY
from segmentstore.results import RecordsRead

from ..format.events import (
    NO_EVENT_TIME,
    EventBlock,
    EventBlocks,
    block_arrays,
    decode_event_block,
    decode_event_block_at,
    decode_event_blocks_at,
    frame_length,
)
from ..format.pravega_frames import decode_pravega_block, pravega_frame_length

__all__ = ["SegmentInput", "read_blocks", "decode_together"]

_EMPTY_I64 = np.empty(0, np.int64)


def _lazy(slot: str, doc: str) -> Any:
    """A ``SegmentInput`` attribute kept in ``slot``, whose views (of a block taken where it lies among
    others, ``take_packed_at``) are made on first use. O(1)."""
    get_slot = operator.attrgetter(slot)

    def get(self: SegmentInput) -> Any:
        if self._col >= 0:
            self._views()
        return get_slot(self)

    def put(self: SegmentInput, value: Any) -> None:
        if self._col >= 0:
            self._views()
        setattr(self, slot, value)

    return property(get, put, doc=doc)


class SegmentInput:
    """One assigned segment: acknowledged base, the decoded block being delivered, read state.

    ``idx`` is the next event of the block to deliver; everything before it counts as
    delivered, so ``acked()`` is the position (and watermark) after the last delivered
    event. Not thread-safe (one reader owns it).
    """

    __slots__ = (
        "_block",
        "_col",
        "_et",
        "_it",
        "_keys",
        "_lengths",
        "_nxt_pos",
        "_nxt_wm",
        "_off",
        "_pays",
        "at_tail",
        "base_pos",
        "base_wm",
        "end_of_segment",
        "etl",
        "fetch",
        "final_wm",
        "group",
        "idx",
        "itl",
        "lists",
        "n",
        "name",
        "pravega",
        "seg",
    )

    def __init__(self, seg: StreamSegment, position: int, watermark: int, pravega: bool = False) -> None:
        self.seg = seg
        self.pravega = pravega  # Pravega's framing (``pravega_frames``): no routing keys, no event times
        self.name = seg.name
        self.base_pos = position  # acknowledged position before the block's events
        self.base_wm = watermark
        self.fetch = position  # next offset to read from the store
        self.at_tail = False
        self.end_of_segment = False
        self.final_wm = watermark
        self._clear()

    def _clear(self) -> None:
        self.n = 0
        self.idx = 0
        self._off = self._lengths = self._et = self._it = self._nxt_pos = self._nxt_wm = _EMPTY_I64
        self._block: EventBlock | None = None  # the decoded block (off, lengths, et, it are its rows)
        self._col = -1  # >= 0: the block is ``group``'s, from this column, its views not made yet
        self.group: tuple[EventBlocks, int] | None = None  # the blocks decoded with it, and its place
        self._keys: Any = None
        self._pays: Any = None
        self.lists: tuple[list[Any], ...] | None = None
        self.itl: Sequence[int] = ()  # (no block's lists: shared empty tuples, nothing to allocate)
        self.etl: Sequence[int | None] = ()

    def _views(self) -> None:
        """Make the views of a block taken where it lies among others (``take_packed_at``). O(1)."""
        assert self.group is not None
        block, after, _ = self.group[0].blocks[self.group[1]]
        self._off, self._lengths, self._et, self._it = block[0]
        self._nxt_pos, self._nxt_wm = after
        self._block = block
        self._col = -1

    block = _lazy(
        "_block", "The decoded block (``off``, ``lengths``, ``et``, ``it`` are its rows), or ``None``."
    )
    off = _lazy("_off", "The block's events' offsets (int64).")
    lengths = _lazy("_lengths", "Their frames' lengths.")
    et = _lazy("_et", "Their event times (``NO_EVENT_TIME`` where none).")
    it = _lazy("_it", "Their ingestion times.")
    nxt_pos = _lazy("_nxt_pos", "The position after each event.")
    nxt_wm = _lazy("_nxt_wm", "The watermark after each event.")

    def after_event(self, i: int) -> tuple[int, int]:
        """The position and the watermark after event ``i`` of the block (``nxt_pos[i]``, ``nxt_wm[i]``),
        without making the block's views. O(1)."""
        c = self._col
        if c >= 0:
            a = self.group[0].after  # type: ignore[index]
            return int(a[0, c + i]), int(a[1, c + i])
        return int(self._nxt_pos[i]), int(self._nxt_wm[i])

    @property
    def keys(self) -> Any:
        """The block's routing keys (an Arrow string array, made on first use; all null for Pravega's
        framing), or ``None``."""
        if self._keys is None and self.block is not None:
            self._arrays()
        return self._keys

    @property
    def pays(self) -> Any:
        """The block's payloads (an Arrow binary array, made on first use), or ``None``."""
        if self._pays is None and self.block is not None:
            self._arrays()
        return self._pays

    def _arrays(self) -> None:
        assert self.block is not None
        self._keys, self._pays = block_arrays(self.block)
        if self.pravega:
            self._keys = pa.nulls(len(self._pays), self._keys.type)

    @property
    def finished(self) -> bool:
        """Sealed, read to the end, and every event delivered."""
        return self.end_of_segment and self.idx >= self.n

    def acked(self) -> tuple[int, int]:
        """Position after the last delivered event of this segment, and the watermark there. O(1)."""
        i = self.idx
        if i == 0:
            return self.base_pos, self.base_wm
        return self.after_event(i - 1)

    def roll(self) -> None:
        """The block is delivered: its end becomes the base (a no-op while events are left)."""
        if self.n and self.idx >= self.n:
            self.base_pos, wm = self.after_event(self.n - 1)
            self.base_wm = max(self.base_wm, wm)
            self._clear()

    def make_lists(self) -> None:
        """Python lists of the block for per-event delivery (one conversion per block)."""
        self.itl = self.it.tolist()
        self.etl = [None if t == NO_EVENT_TIME else t for t in self.et.tolist()]
        self.lists = (self.off.tolist(), self.lengths.tolist(), self.keys.to_pylist(), self.pays.to_pylist())

    def fetch_block(
        self, client: SegmentStoreClient, max_bytes: int, wait_ms: int, valid: Callable[[], bool]
    ) -> int:
        """Read and decode the next block (the previous one delivered); returns the bytes read.

        ``wait_ms`` > 0 waits at the tail for data or a watermark increase. If ``valid()``
        is false once the read returns (the group was reset meanwhile), the read is
        dropped. O(block): one read, one decode, one ``watermarks_at`` call.
        """
        try:
            r = client.read(self.name, self.fetch, max_bytes, wait_ms)
        except SegmentTruncatedError:  # the data below the start offset is gone: move on
            return self._truncated(client)
        if not valid():
            return 0
        return self.take_block(client, r, None)

    def _truncated(self, client: SegmentStoreClient) -> int:
        start = client.get_info(self.name).start_offset
        self.fetch = self.base_pos = start
        self.base_wm = max(self.base_wm, client.watermark_at(self.name, start))
        return 0

    def take_block(self, client: SegmentStoreClient, r: SegmentRead, rec: RecordsRead | None) -> int:
        """Decode ``r``, the read at ``fetch``, as the next block; returns the bytes read.

        ``rec``: ``read_many``'s answer that ``r`` came with, whose watermarks at the
        records' starts give the events' ingestion times (no ``watermarks_at`` call); the
        same numbers as the call's. O(block).
        """
        name = self.name
        data = r.data
        if not data:  # a zero-length read: the watermark at the tail
            self.at_tail = True
            self.base_wm = max(self.base_wm, r.watermark)
            if r.end_of_segment:
                self.end_of_segment = True
                self.final_wm = self.base_wm
            return 0
        read = len(data)
        if self.pravega:  # ``read_many``'s records are u32-prefixed ones: not Pravega's frames
            rec = None
            decode, length_of = decode_pravega_block, pravega_frame_length
        else:
            decode, length_of = decode_event_block, frame_length
        if rec is not None:  # the block and every event's ingestion time in one pass, as below
            fast = decode_event_block_at(data, r.offset, rec.starts, rec.watermarks, 1, r.watermark)
            if fast is not None:
                self.take_decoded(r, *fast)
                return read
        block, consumed = decode(data, r.offset)
        if consumed == 0:  # one frame is longer than the block: read exactly that frame
            need = length_of(data) or 0
            r = client.read(name, self.fetch, max(need, len(data) + 1), 0)
            rec = None
            data = r.data
            read += len(data)
            block, consumed = decode(data, r.offset)
        end = r.offset + consumed
        whole = end == r.offset + len(data)
        cols = block[0]
        offs: np.ndarray = cols[0]
        n = len(offs)
        self.fetch = end
        self.at_tail = r.at_tail and whole
        if n:
            q = offs if whole else np.concatenate((offs, (end,)))
            w = _at_records(rec, offs, whole)
            if w is None:
                w = np.asarray(client.watermarks_at(name, q), dtype=np.int64)
            nxt = np.empty(2 * n, np.int64)  # the positions and watermarks after each event, side by side
            nxt_pos, nxt_wm = nxt[:n], nxt[n:]
            nxt_wm[:-1] = w[1:n]
            nxt_wm[-1] = r.watermark if whole else int(w[n])
            nxt_pos[:-1] = offs[1:]
            nxt_pos[-1] = end
            np.add(w[:n], 1, out=cols[3])
            self._off, self._lengths, self._et, self._it = cols
            self._nxt_pos, self._nxt_wm = nxt_pos, nxt_wm
            self._block, self._keys, self._pays = block, None, None
            self.n, self.idx, self.lists, self.group, self._col = n, 0, None, None, -1
        else:  # writer markers only
            self.base_pos = end
            if whole:
                wm = r.watermark
            elif rec is not None and len(rec.watermarks):
                wm = int(rec.watermarks[-1])  # at the end of the last whole record: ``end``
            else:
                wm = client.watermark_at(name, end)
            self.base_wm = max(self.base_wm, wm)
        if r.end_of_segment and whole:
            self.end_of_segment = True
            self.final_wm = max(self.base_wm, r.watermark)
        return read

    def take_decoded(
        self,
        r: SegmentRead,
        block: EventBlock,
        after: np.ndarray,
        consumed: int,
        group: tuple[EventBlocks, int] | None = None,
    ) -> None:
        """``take_block`` of ``r`` decoded already (``decode_event_block_at`` of its data with the
        watermarks ``read_many`` answered, ``add`` 1 and ``last`` ``r.watermark``; some event whole);
        ``group``: the blocks it was decoded with (``decode_event_blocks_at``) and its place there."""
        whole = consumed == len(r.data)
        self.fetch = r.offset + consumed
        self.at_tail = r.at_tail and whole
        self._off, self._lengths, self._et, self._it = block[0]
        self._nxt_pos, self._nxt_wm = after
        self._block, self._keys, self._pays = block, None, None
        self.n, self.idx, self.lists, self._col = after.shape[1], 0, None, -1
        self.group = group
        if r.end_of_segment and whole:
            self.end_of_segment = True
            self.final_wm = max(self.base_wm, r.watermark)

    def take_packed_at(
        self,
        offset: int,
        length: int,
        watermark: int,
        end_of_segment: bool,
        at_tail: bool,
        eb: EventBlocks,
        j: int,
    ) -> None:
        """``take_decoded`` of the read ``(offset, length of data, watermark, end_of_segment, at_tail)`` (a
        ``PackedReads`` read) whose block is ``j`` of ``eb`` (some event whole), taken where it lies
        among the others: the same state, its views made only when something asks for them. O(1)."""
        col, _, n, _, _, _, consumed, _ = eb.spans[j]
        whole = consumed == length
        self.fetch = offset + consumed
        self.at_tail = at_tail and whole
        self._col, self.n, self.idx, self.lists = col, n, 0, None
        self._keys = self._pays = None
        self.group = (eb, j)
        if end_of_segment and whole:
            self.end_of_segment = True
            self.final_wm = max(self.base_wm, watermark)

    @checked
    def _check(self) -> None:
        """Assert the block is consistent with the offsets and watermarks it was read at. O(block)."""
        assert self.name == self.seg.name
        assert 0 <= self.base_pos <= self.fetch, "acknowledged base past the next read offset"
        n = self.n
        assert 0 <= self.idx <= n, f"next event {self.idx} outside the block of {n}"
        assert all(len(a) == n for a in (self.off, self.lengths, self.et, self.it, self.nxt_pos, self.nxt_wm))
        if n == 0:
            assert self.base_pos == self.fetch, "no block buffered, yet bytes between base and next read"
            assert self.lists is None and not self.itl and not self.etl
            return
        assert len(self.keys) == n and len(self.pays) == n
        off, ends, nxt_pos = self.off, self.off + self.lengths, self.nxt_pos
        assert off[0] >= self.base_pos, "the block starts before the acknowledged base"
        assert bool(np.all(self.lengths > 0)) and bool(np.all(ends <= nxt_pos)), "a frame overlaps the next"
        assert bool(np.all(nxt_pos[:-1] == off[1:])), "the position after an event is not the next event"
        assert int(nxt_pos[-1]) == self.fetch, "the block does not end where the next read starts"
        it, nxt_wm = self.it, self.nxt_wm
        assert bool(np.all(nxt_wm[:-1] == it[1:] - 1)), "watermark after an event != next ingestion time - 1"
        assert bool(np.all(it - 1 <= nxt_wm)), "the watermark after an event is below its ingestion time"
        assert bool(np.all(np.diff(nxt_wm) >= 0)), "watermarks decrease within the block"
        if self.lists is not None:
            assert self.itl == it.tolist() and len(self.etl) == n
            assert all(len(col) == n for col in self.lists)
            assert self.lists[0] == off.tolist()


def _at_records(rec: RecordsRead | None, offs: np.ndarray, whole: bool) -> np.ndarray | None:
    """The watermarks at the events' offsets (and at the end of the whole frames, unless ``whole``)
    from ``read_many``'s answer, or ``None`` if it has no record starting at one of them."""
    if rec is None:
        return None
    starts: np.ndarray = rec.starts
    wms: np.ndarray = rec.watermarks
    k = len(starts)
    if len(wms) != k + 1 or not k:
        return None
    if k == len(offs) and starts.dtype == offs.dtype and starts.tobytes() == offs.tobytes():
        return wms[:k] if whole else wms  # every record an event (no markers): as below
    i = np.searchsorted(starts, offs)
    if int(i[-1]) >= len(starts) or not np.array_equal(starts[i], offs):
        return None
    w = wms[i]
    return w if whole else np.append(w, wms[-1])


def read_blocks(
    client: SegmentStoreClient,
    requests: list[tuple[Any, ...]],
    first: Sequence[RecordsRead | None] | None = None,
) -> list[RecordsRead | None]:
    """``read_many`` until every request is answered (a full reply leaves some for another call);
    ``first``: the answers of a first call already made."""
    out: list[RecordsRead | None]
    if first is not None:
        out = list(first)
    elif len(requests) <= MAX_READ_MANY:
        out = list(client.read_many(requests))
    else:
        out = []
        for i in range(0, len(requests), MAX_READ_MANY):
            out.extend(client.read_many(requests[i : i + MAX_READ_MANY]))
    while True:  # the first request of a call is always answered: this ends
        left = [i for i, a in enumerate(out) if a is not None and a.read is None and a.error is None]
        if not left:
            return out
        left = left[:MAX_READ_MANY]
        again = client.read_many([requests[i] for i in left])
        for i, a in zip(left, again, strict=True):
            out[i] = a


def decode_together(answers: Sequence[RecordsRead | None]) -> dict[int, tuple[Any, ...]]:
    """The blocks of ``read_many``'s answers with data decoded side by side (``decode_event_blocks_at``,
    as ``SegmentInput.take_block`` decodes each), for ``take_decoded``, by answer; nothing if fewer
    than two, or if one would not decode there (each is then taken on its own). O(bytes)."""
    at = [i for i, a in enumerate(answers) if a is not None and a.read is not None and a.read.data]
    if len(at) < 2:
        return {}
    reads = [answers[i] for i in at]
    eb = decode_event_blocks_at(
        [a.read.data for a in reads],  # type: ignore[union-attr]
        [a.read.offset for a in reads],  # type: ignore[union-attr]
        [a.starts for a in reads],  # type: ignore[union-attr]
        [a.watermarks for a in reads],  # type: ignore[union-attr]
        1,
        [a.read.watermark for a in reads],  # type: ignore[union-attr]
    )
    if eb is None:
        return {}
    return {i: (*eb.blocks[j], (eb, j)) for j, i in enumerate(at)}
