"""The reader's reads of its segments' blocks: one ``read_many`` for all that need one, looks at the tails.

The half of ``EventReader`` (``reader``) that faces the store's segments: the segments
whose block is delivered are read again together (``read_many``: the blocks and the
watermarks at their events in one call, one round trip over ``RemoteClient``), a look
at the caught-up tails without waiting is one ``read_many`` too (each with the
watermark known there, so only what is new comes back, and the group's state log
probed in the same call), not repeated within one read call at one instant of the reader's clock
nor, over an embedded store, while ``EmbeddedClient.change_count`` stands where a look at the same
segments that found the state log read to its end left it (nothing a read sees changed since); a
waiting look is one ``wait_any``. Over an embedded store whose ``read_many`` is
``EmbeddedClient``'s, the answers come in columns (``read_packed``) and the blocks with data are
decoded side by side from them (``decode_packed_blocks``), no answer object made per segment;
where that declines (a reply left some unread, a block that does not decode there, a Pravega-framed
segment) they are taken from ``read_many``'s answers as before. ``batched_reads``
off reads a segment at a time (a ``read`` and a ``watermarks_at``) as before issue 36, with the
same results.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from segmentstore import SegmentRead
from segmentstore.client import SegmentStoreClient
from segmentstore.core.batched_reads import MAX_READ_MANY, MAX_READ_MANY_LENGTH
from segmentstore.limits import INT64_MAX
from segmentstore.results import NOTHING_NEW, UNREAD, PackedReads

from ..format.events import EventBlocks, decode_packed_blocks
from .segment_input import SegmentInput, decode_together, read_blocks

if TYPE_CHECKING:
    from ..group_state.state import ReaderGroupState

__all__ = ["ReaderBlocks"]

_AT_TAIL = attrgetter("at_tail")


class ReaderBlocks:
    """``EventReader``'s block reads (a mixin: its methods run on the reader, on its state)."""

    _segs: dict[str, SegmentInput]
    _framings: dict[str, bool]
    _state: ReaderGroupState
    _client: SegmentStoreClient
    _buf: int
    _epoch: int
    _bytes: int
    _news: int
    _need_sync: bool
    _state_moved: bool
    _looked: tuple[int, tuple[int, ...]]
    _changes: Callable[[], int] | None
    _packed: bool  # the client is embedded and reads as ``EmbeddedClient.read_many`` (``read_packed``)
    _clear_at: tuple[int, tuple[int, ...]] | None
    _now: Callable[[], int]

    batched_reads = True
    """Read every segment that needs a block in one ``read_many`` per pass (off: a ``read`` and a
    ``watermarks_at`` per segment and a ``wait_any`` over the tails, as before issue 36). The same
    blocks, events and watermarks either way; kept for the benchmarks' before/after rows."""

    packed_reads = True
    """Over an embedded store, take a pass's answers in columns (``read_packed``; off: ``read_many``'s
    answers, as before). The same blocks, events and watermarks either way; kept for the
    benchmarks' side-by-side rows (``bench_poll``)."""

    def _refill_all(self) -> list[SegmentInput]:
        """Read the next block of every exhausted segment not at its tail: one ``read_many`` for all;
        returns the segments with events left, in the reader's order (found in the same pass).

        A segment read to its sealed end makes the reader sync (report the completion,
        register the successors).
        """
        live: list[SegmentInput] = []
        todo: list[SegmentInput] = []
        for s in self._segs.values():
            if s.idx < s.n:
                live.append(s)
                continue
            if s.n:
                s.roll()
            if s.end_of_segment:
                self._need_sync = True
            elif not s.at_tail:
                todo.append(s)
        if todo:
            self._fetch_all(todo)
            live = [s for s in self._segs.values() if s.idx < s.n]
        return live

    def _fetch(self, s: SegmentInput, wait_ms: int) -> None:
        """Read and decode the next block of ``s``; dropped if a reset happened meanwhile (PIP-194)."""
        self._news += 1
        epoch = self._epoch
        self._bytes += s.fetch_block(self._client, self._buf, wait_ms, lambda: self._state.epoch == epoch)
        if s.end_of_segment:
            self._need_sync = True

    def _fetch_all(self, todo: list[SegmentInput], look: bool = False) -> bool:
        """Read and decode the next block of each of ``todo``: one ``read_many`` (reads and the watermarks
        at their events), the same blocks as a ``_fetch`` each. A request that failed is fetched alone
        (which handles or raises its error as ever). ``look``: ``todo`` are at their tails, read only
        if something is new (data, a seal, a watermark above theirs: ``wait_any``'s ready), and the
        group's state log is asked for bytes past the replica's revision; returns whether it has some
        (else ``False``). O(blocks)."""
        if not self.batched_reads or self._buf > MAX_READ_MANY_LENGTH:
            assert not look, "a look at the tails is a batched read only"
            for s in todo:
                self._fetch(s, 0)
            return False
        if self._packed and self.packed_reads and len(todo) >= MAX_READ_MANY:
            # more than one packed read holds (a reader holding thousands of segments): one per part,
            # each with the state log's probe if a look (the same blocks as ``read_many``'s calls)
            moved = False
            for i in range(0, len(todo), MAX_READ_MANY - 1):
                moved = self._fetch_all(todo[i : i + MAX_READ_MANY - 1], look) or moved
            return moved
        buf = self._buf
        reqs: list[tuple[Any, ...]]
        if look:
            st = self._state
            reqs = [(s.name, s.fetch, buf, s.base_wm) for s in todo]
            reqs.append((st.segment, st.revision, 0, INT64_MAX))
        else:
            reqs = [(s.name, s.fetch, buf) for s in todo]
        if (
            self._packed
            and self.packed_reads
            and len(reqs) <= MAX_READ_MANY
            and (True not in self._framings.values() or not any(s.pravega for s in todo))
        ):  # (no stream this reader met is Pravega-framed: no segment it holds is)
            p: PackedReads = self._client.read_packed(reqs)  # type: ignore[attr-defined]
            if UNREAD not in p.kinds and self._state.epoch == self._epoch:
                eb = decode_packed_blocks(p.data, p.meta, p.starts, p.values, 1) if p.pieces else None
                if eb is not None or not p.pieces:
                    self._take_all(todo, p, eb)
                    return look and p.kinds[-1] != NOTHING_NEW
            answers = read_blocks(self._client, reqs, p.answers())  # (as below, from its answers)
        else:
            answers = read_blocks(self._client, reqs)
        valid = self._state.epoch == self._epoch
        # (Pravega-framed blocks are decoded each on its own: ``read_many``'s records are not their frames)
        mine = [None if s.pravega else a for s, a in zip(todo, answers, strict=False)]
        decoded = decode_together(mine) if valid else {}
        for i, (s, a) in enumerate(zip(todo, answers, strict=False)):
            if a is None:  # nothing new: known to be at its tail
                s.at_tail = True
                continue
            self._news += 1
            r = a.read
            if r is None:
                self._fetch(s, 0)
                continue
            if valid:
                d = decoded.get(i)
                if d is not None:  # (decoded with the others: as ``take_block`` would)
                    s.take_decoded(r, *d)
                    self._bytes += len(r.data)
                else:
                    self._bytes += s.take_block(self._client, r, a)
                if s.end_of_segment:
                    self._need_sync = True
        return look and answers[-1] is not None

    def _take_all(self, todo: list[SegmentInput], p: PackedReads, eb: EventBlocks | None) -> None:
        """``_fetch_all``'s taking of ``p``, ``read_packed``'s answers to ``todo`` in the epoch they were
        asked in, whose blocks with data ``eb`` are (decoded side by side): as from ``read_many``'s
        answers, without an answer object each. O(segments)."""
        kinds, reads = p.kinds, p.reads  # (the state log's answer last)
        j = 0
        for i, s in enumerate(todo):  # (no zip: its keyword costs more than an index per segment)
            if kinds[i] == NOTHING_NEW:  # known to be at its tail
                s.at_tail = True
                continue
            self._news += 1
            r = reads[i]
            if r is None:  # failed: fetched alone (which handles or raises its error as ever)
                self._fetch(s, 0)
                continue
            if r[1]:
                s.take_packed_at(*r, eb, j)  # type: ignore[arg-type]  # (a read with data is one of eb's)
                self._bytes += r[1]
                j += 1
            else:  # the watermark at the tail, or the seal
                s.take_block(self._client, SegmentRead(r[0], b"", r[2], r[3], r[4]), None)
            if s.end_of_segment:
                self._need_sync = True

    def _ready_tails(self, wait_ms: int) -> list[SegmentInput]:
        """Which caught-up segments have something new: one ``wait_any`` (up to ``wait_ms``).

        The ready ones are marked to be read, the others known to be at their tails;
        returns the ready ones. The same call watches the group's state log past this
        replica's revision (data only), so an idle reader learns of other processes'
        updates (checkpoints, resets, new assignments) without polling the log.
        """
        live: list[SegmentInput] = []
        for s in self._segs.values():
            if s.idx >= s.n and not s.end_of_segment:
                if s.n:
                    s.roll()
                live.append(s)
        st = self._state
        if wait_ms == 0 and self.batched_reads and self._buf <= MAX_READ_MANY_LENGTH:
            # no wait: read them all at once instead (a read of one with nothing new changes nothing),
            # unless each was looked at already in this read call at this instant of the reader's clock
            # (a later call looks again: an append may have come since, at the same instant)
            now = self._now()
            looked = self._looked
            ids = tuple(map(id, live))
            if looked[0] == now and (ids == looked[1] or set(looked[1]).issuperset(ids)):
                return []
            changes = None if self._changes is None else self._changes()
            clear = self._clear_at
            if (
                clear is not None
                and clear[0] == changes
                and all(map(_AT_TAIL, live))  # (each known to be at its tail)
                and (ids == clear[1] or set(clear[1]).issuperset(ids))
            ):
                # nothing a read sees changed since a look at each of these found it at its tail (or
                # read it to there) and the group's state log read to its end: it would answer the same
                self._looked = (now, ids)
                return []
            self._looked = (now, ids)
            for s in live:
                s.at_tail = False
            moved = self._fetch_all(live, look=True)
            if moved:
                self._state_moved = True
            self._clear_at = None if moved or changes is None else (changes, ids)
            return []
        requests = [(s.name, s.fetch, s.base_wm) for s in live]
        requests.append((st.segment, st.revision, INT64_MAX))
        ready = self._client.wait_any(requests, wait_ms)
        if ready and ready[-1] == len(live):
            self._state_moved = True
        for s in live:
            s.at_tail = True
        out = [live[i] for i in ready if i < len(live)]
        for s in out:
            s.at_tail = False
        return out

    def _progress(self) -> tuple[frozenset[str], int, int]:
        """What a pass over the segments can change: which are held, how far read, how many ended."""
        fetched = ended = 0
        for s in self._segs.values():
            fetched += s.fetch
            if s.end_of_segment:
                ended += 1
        return frozenset(self._segs), fetched, ended
