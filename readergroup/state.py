"""Reader-group state: every incomplete segment's acknowledged position and watermark; the group minimum.

PDP-26 "Reader Group State" with Pulsar's watermark cursor. For every incomplete
segment of the group — *assigned* to a reader, *unassigned* (readable, waiting for a
reader) or *future* (a successor whose predecessors are not all complete) — the state
keeps its acknowledged position and the watermark there. The group watermark is the
minimum over all of them. Positions move only when the owning reader *reports* them,
after the events before them were processed; a reader that goes offline returns its
segments at the last reported position. Unassigned segments are kept ordered by
watermark, oldest first (``sortedcontainers``), and are acquired in that order.

Why no reader ever delivers an event at or below an emitted watermark (DESIGN §4.1)
----------------------------------------------------------------------------------
Facts: (a) the store stamps temporal operations with non-decreasing times, so
ingestion times never decrease along a segment, and ``watermark_at(s, p)`` is a lower
bound (exclusive) for every byte of ``s`` at or after ``p`` — also bytes written later,
which get later stamps; (b) streams write a successor only after all its predecessors
are sealed (``scale_stream`` creates successors, then seals; writers move to them on
``SegmentSealedError``; a rolled transaction commit copies its data after the seal), so
every byte of a successor ``S`` of ``P`` has time ``>= seal(P) > seal(P) - 1 =``
``watermark_at(P, end) >= watermark_at(P, p)`` for every ``p``; by induction the same
holds for every descendant of ``P``.

Claim: at any moment, every event some reader may still deliver in this epoch has
ingestion time ``>`` the state's watermark of some incomplete entry. Such an event lies
either in a segment ``X`` of the state at or after its acknowledged position (readers
deliver forward from acknowledged positions, and a reader going offline returns ``X``
at its last *reported* = acknowledged position, so redelivery starts there) — then
its time is ``> watermark_at(X, pos)`` by (a); or in a segment not registered yet,
whose ancestor along any of its keys is an entry of the state (a segment is registered
when one of its predecessors completes, and the state covers every routing key until
the stream ends) — then (b) applies. Entries change only by (i) a report, which moves
the position forward and keeps ``max(old, new)`` watermark; (ii) completion of ``X`` at
its end, which removes it and registers its successors with watermark
``max(watermark_at(S, start), X's final watermark, group watermark before)`` — a valid
bound by (b) and the claim; (iii) offline/release/acquire, which keep position and
watermark. So the minimum never decreases, and every later delivered event has time
``> min >=`` any watermark emitted before. A reset starts a new epoch with watermarks
materialised from the index at the new positions (``watermark_at``), valid by (a).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future

from sortedcontainers import SortedList

from segmentstore import StreamSegment, SuccessorInfo
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import INT64_MIN

from .checkpoint import Checkpoint, SegmentPosition
from .errors import (
    CheckpointAbortedError,
    DuplicateCheckpointError,
    InvalidPositionError,
    ReaderExistsError,
    ReaderNotInGroupError,
)
from .event_time import ProducerWatermarks
from .state_records import ASSIGNED, FUTURE, UNASSIGNED, Entry, Pending, SegmentState, Slot

__all__ = ["ReaderGroupState", "SegmentState"]

"""The group watermark before any segment is known (Java's ``Long.MIN_VALUE``)."""

class ReaderGroupState:
    """The shared, synchronised state of one reader group (Pravega's ``ReaderGroupState``).

    Readers call it under ``lock`` (an ``RLock``); every method also takes it. Group
    watermark O(1); a position report O(log n) per segment; acquire O(k log n).
    """

    def __init__(
        self,
        client: SegmentStoreClient,
        group: str,
        streams: Sequence[str],
        positions: Sequence[tuple[str, int]],
    ) -> None:
        self.client = client
        self.group = group
        self.streams = tuple(streams)
        self.lock = threading.RLock()
        self.epoch = 0
        self._entries: dict[str, Entry] = {}
        self._by_wm: SortedList = SortedList()  # (watermark, name) of every entry
        self._unassigned: SortedList = SortedList()  # (watermark, name) of readable unassigned ones
        self._readers: dict[str, Slot] = {}
        self._completed: dict[str, int] = {}  # name -> final watermark, this epoch
        self._checkpoints: deque[Pending] = deque()
        self._checkpoint_names: set[str] = set()
        self._floor = INT64_MIN
        self._event_time: ProducerWatermarks | None = None
        self._install(self._build(positions, {}))

    # ------------------------------------------------------------------ queries
    @property
    def group_watermark(self) -> int:
        """The minimum watermark over every incomplete segment (never decreasing in an epoch). O(1)."""
        with self.lock:
            if self._by_wm:
                m: int = self._by_wm[0][0]
                if m > self._floor:
                    self._floor = m
            return self._floor

    @property
    def event_time_watermark(self) -> int:
        """Producer-asserted watermark at the acknowledged positions (``event_time``). O(n x writers)."""
        with self.lock:
            pw = self._event_time = self._event_time or ProducerWatermarks(self.client)
            return pw.watermark(self.epoch, [(e.seg, e.position) for e in self._entries.values()])

    def readers(self) -> list[str]:
        """Ids of the online readers. O(readers)."""
        with self.lock:
            return list(self._readers)

    def segments_of(self, reader_id: str) -> set[str]:
        """Names of the segments assigned to ``reader_id``. O(k)."""
        with self.lock:
            return set(self._slot(reader_id).segments)

    def segments(self) -> tuple[SegmentState, ...]:
        """Every incomplete segment with position, watermark, owner and status, by name. O(n)."""
        with self.lock:
            return tuple(self._row(e) for _, e in sorted(self._entries.items()))

    def completed(self) -> dict[str, int]:
        """Segments completed in this epoch, with their final watermarks. O(n)."""
        with self.lock:
            return dict(self._completed)

    def _row(self, e: Entry) -> SegmentState:
        if e.waiting:
            return SegmentState(e.seg, e.position, e.watermark, None, FUTURE, tuple(sorted(e.waiting)))
        return SegmentState(e.seg, e.position, e.watermark, e.owner, ASSIGNED if e.owner else UNASSIGNED)

    # ------------------------------------------------------------------ membership
    def add_reader(self, reader_id: str) -> Slot:
        """Add an online reader; it acquires segments at its first sync. O(1)."""
        if not isinstance(reader_id, str) or not reader_id:
            raise InvalidPositionError(
                f"group {self.group!r}: reader id must be a non-empty str, got {reader_id!r}"
            )
        with self.lock:
            if reader_id in self._readers:
                raise ReaderExistsError(f"group {self.group!r}: reader {reader_id!r} is online already")
            slot = self._readers[reader_id] = Slot(reader_id)
            return slot

    def remove_reader(self, reader_id: str, positions: Mapping[str, int] | None = None) -> None:
        """Take a reader offline: its segments return unassigned at their last reported positions.

        ``positions`` (segment -> offset) may move some of them forward first, as
        Pravega's ``readerOffline(reader, lastPosition)``; the watermark there comes from
        the index. For a reader that already reached the active checkpoint they apply
        when the checkpoint completes (the checkpoint keeps its positions at the marker,
        and what the reader returned after it is not delivered again).
        """
        with self.lock:
            slot = self._slot(reader_id)
            updates: list[tuple[Entry, int, int]] = []
            if positions:
                for name, offset in positions.items():
                    e = self._entries.get(name)
                    if e is None or e.owner != reader_id:
                        raise InvalidPositionError(
                            f"group {self.group!r}: reader {reader_id!r} does not hold segment {name!r}"
                        )
                    if isinstance(offset, bool) or not isinstance(offset, int) or offset < e.position:
                        raise InvalidPositionError(
                            f"group {self.group!r}: offset {offset!r} of segment {name!r} is below the "
                            f"acknowledged position {e.position}"
                        )
                    updates.append((e, offset, self._watermark_at(name, offset)))
            cp = self._active()
            if cp is not None and reader_id in cp.crossed:
                cp.deferred.update((e.seg.name, (offset, wm)) for e, offset, wm in updates)
            else:
                for e, offset, wm in updates:
                    self._move(e, offset, wm)
            for name in sorted(slot.segments):
                self._unassign(self._entries[name])
            slot.segments.clear()
            slot.online = False
            del self._readers[reader_id]
            cp = self._active()
            if cp is not None and cp.waiting is not None:
                cp.waiting.discard(reader_id)
                cp.crossed.discard(reader_id)
                self._maybe_complete_checkpoint()

    def _slot(self, reader_id: str) -> Slot:
        try:
            return self._readers[reader_id]
        except (KeyError, TypeError):
            raise ReaderNotInGroupError(
                f"group {self.group!r}: reader {reader_id!r} is not online in the group"
            ) from None

    # ------------------------------------------------------------------ reader updates
    def report(self, reader_id: str, reports: Iterable[tuple[str, int, int]]) -> None:
        """Acknowledged ``(segment, position, watermark there)`` of the reader's segments. O(log n) each."""
        with self.lock:
            slot = self._slot(reader_id)
            reports = list(reports)
            for name, pos, _ in reports:  # all validated before anything changes
                if name not in slot.segments:
                    raise InvalidPositionError(
                        f"group {self.group!r}: reader {reader_id!r} reported segment {name!r}, "
                        "which it does not hold"
                    )
                if pos < self._entries[name].position:
                    raise InvalidPositionError(
                        f"group {self.group!r}: reader {reader_id!r} reported offset {pos} of segment "
                        f"{name!r}, below its acknowledged position {self._entries[name].position}"
                    )
            for name, pos, wm in reports:
                e = self._entries[name]
                if pos != e.position or wm > e.watermark:
                    self._move(e, pos, wm)

    def complete(self, reader_id: str, name: str, final_watermark: int) -> None:
        """The reader processed segment ``name`` to its sealed end: drop it, register its successors.

        A successor enters with ``max(watermark_at(start), final watermarks of completed
        predecessors)`` — at least the group watermark, which never decreases — and is
        readable once all its predecessors are complete, else a future segment. Every
        store call happens before the state changes. O(successors + entries).
        """
        with self.lock:
            slot = self._slot(reader_id)
            if name not in slot.segments:
                raise InvalidPositionError(
                    f"group {self.group!r}: reader {reader_id!r} completed segment {name!r}, "
                    "which it does not hold"
                )
            plans: list[tuple[SuccessorInfo, int, int, dict[str, bool]]] = []
            for info in self.client.get_successors(name):
                s = info.segment.name
                if s in self._entries or s in self._completed:
                    plans.append((info, 0, 0, {}))
                    continue
                start = self.client.get_info(s).start_offset
                unknown = {
                    p: self._still_to_come(self.client.get_segment(p))
                    for p in info.predecessors
                    if p != name and p not in self._completed and p not in self._entries
                }
                plans.append((info, start, self.client.watermark_at(s, start), unknown))
            before = self.group_watermark
            e = self._entries[name]
            final = max(final_watermark, e.watermark)
            slot.segments.discard(name)
            self._drop(e)
            self._completed[name] = final
            for info, start, wm0, unknown in plans:
                s = info.segment.name
                f = self._entries.get(s)
                if f is None:
                    if s not in self._completed:
                        self._register(info, start, max(wm0, final, before), unknown)
                elif f.waiting:
                    self._move(f, f.position, final)  # while still waiting: not in the unassigned set
                    f.waiting.discard(name)
                    if not f.waiting:
                        f.waiting = None
                        self._unassigned.add((f.watermark, s))

    def _register(self, info: SuccessorInfo, start: int, wm: int, to_come: Mapping[str, bool]) -> None:
        seg = info.segment
        waiting: set[str] = set()
        for p in info.predecessors:
            if p in self._completed:
                wm = max(wm, self._completed[p])
            elif p in self._entries or to_come[p]:
                waiting.add(p)
        e = Entry(seg, start, wm)
        self._entries[seg.name] = e
        self._by_wm.add((wm, seg.name))
        if waiting:
            e.waiting = waiting
        else:
            self._unassigned.add((wm, seg.name))

    def _still_to_come(self, p: StreamSegment) -> bool:
        """Whether a segment neither known nor completed is still to be read (a descendant of an entry).

        Mostly an entry on its keys tells (``_before_entries``). After a restore it may
        not: a checkpoint or cut leaves out future segments, so keys that reach ``p``
        only through a merge whose other side was read already are on no entry; then
        the successors of the entries are walked up to ``p``'s epoch. Cached per epoch
        (the answer never changes within one). O(entries), or O(segments walked) store calls.
        """
        if not self._before_entries(p):
            return True
        known = self._lineage.get(p.name)
        if known is None:
            todo = [e.seg.name for e in self._entries.values() if e.seg.stream == p.stream]
            todo = [n for n in todo if self._entries[n].seg.epoch < p.epoch]
            seen = set(todo)
            known = False
            while todo and not known:
                for info in self.client.get_successors(todo.pop()):
                    s = info.segment
                    if s.name == p.name:
                        known = True
                    elif s.epoch < p.epoch and s.name not in seen:
                        seen.add(s.name)
                        todo.append(s.name)
            self._lineage[p.name] = known
        return known

    def _before_entries(self, p: StreamSegment) -> bool:
        """Whether a segment neither known nor completed lies before the state (complete) or after it.

        Along every routing key the segments form a chain of strictly increasing stream
        epochs, and the entries cover every key still to be read; so ``p`` is still to
        come exactly when an entry on its keys has an epoch ``<= p.epoch``. O(entries).
        """
        for e in self._entries.values():
            q = e.seg
            if q.stream == p.stream and q.epoch <= p.epoch and q.overlaps(p.key_low, p.key_high):
                return False
        return True

    # ------------------------------------------------------------------ rebalancing
    def _fair_share(self) -> int:
        readable = len(self._entries) - sum(1 for e in self._entries.values() if e.waiting)
        return math.ceil(readable / max(1, len(self._readers)))

    def release_count(self, reader_id: str) -> int:
        """How many segments the reader should release now (0 during a checkpoint). O(readers).

        More than its fair share ``ceil(readable / readers)``: the excess. Otherwise one
        when it holds two more than the least loaded reader and nothing is unassigned.
        """
        with self.lock:
            slot = self._slot(reader_id)
            if self._active() is not None or len(self._readers) < 2:
                return 0
            owned = len(slot.segments)
            fair = self._fair_share()
            if owned > fair:
                return owned - fair
            if self._unassigned:  # the least loaded reader can take those instead
                return 0
            least = min(len(s.segments) for s in self._readers.values())
            return 1 if owned - least >= 2 else 0

    def release(self, reader_id: str, name: str) -> None:
        """Return a segment (reported first) to the unassigned pool. O(log n)."""
        with self.lock:
            slot = self._slot(reader_id)
            if name not in slot.segments:
                raise InvalidPositionError(
                    f"group {self.group!r}: reader {reader_id!r} released segment {name!r}, "
                    "which it does not hold"
                )
            slot.segments.discard(name)
            self._unassign(self._entries[name])

    def acquire(self, reader_id: str) -> list[tuple[StreamSegment, int, int]]:
        """Take unassigned segments up to the fair share, oldest watermark first. O(k log n + readers).

        Nothing while a checkpoint is in progress, or while another reader holds fewer.
        """
        with self.lock:
            slot = self._slot(reader_id)
            if self._active() is not None or not self._unassigned:
                return []
            owned = len(slot.segments)
            if any(len(s.segments) < owned for s in self._readers.values()):
                return []  # a less loaded reader goes first (no ping-pong after a release)
            k = min(len(self._unassigned), self._fair_share() - owned)
            out: list[tuple[StreamSegment, int, int]] = []
            for _ in range(max(0, k)):
                _, name = self._unassigned.pop(0)
                e = self._entries[name]
                e.owner = reader_id
                slot.segments.add(name)
                out.append((e.seg, e.position, e.watermark))
            return out

    # ------------------------------------------------------------------ checkpoints
    def initiate_checkpoint(self, name: str) -> Future[Checkpoint]:
        """Queue a checkpoint; it completes when every reader online at its start has reached it."""
        if not isinstance(name, str) or not name:
            raise InvalidPositionError(f"group {self.group!r}: checkpoint name must be a non-empty str")
        with self.lock:
            if name in self._checkpoint_names:
                raise DuplicateCheckpointError(
                    f"group {self.group!r}: checkpoint {name!r} exists already in epoch {self.epoch}"
                )
            self._checkpoint_names.add(name)
            cp = Pending(name)
            self._checkpoints.append(cp)
            self._activate()
            return cp.future

    def pending_checkpoint(self, reader_id: str) -> str | None:
        """The active checkpoint's name if ``reader_id`` has still to reach it. O(1)."""
        cp = self._active()
        if cp is not None and cp.waiting is not None and reader_id in cp.waiting:
            return cp.name
        return None

    def is_crossed(self, reader_id: str) -> bool:
        """Whether the reader reached the active checkpoint (it then holds back its reports). O(1)."""
        cp = self._active()
        return cp is not None and reader_id in cp.crossed

    def checkpoint_reached(self, reader_id: str, name: str) -> None:
        """The reader (having reported its positions) reached checkpoint ``name``. O(1)."""
        with self.lock:
            self._slot(reader_id)
            cp = self._active()
            if cp is None or cp.name != name or cp.waiting is None or reader_id not in cp.waiting:
                return
            cp.waiting.discard(reader_id)
            cp.crossed.add(reader_id)
            self._maybe_complete_checkpoint()

    def _active(self) -> Pending | None:
        return self._checkpoints[0] if self._checkpoints else None

    def _activate(self) -> None:
        cp = self._active()
        if cp is not None and cp.waiting is None:
            cp.waiting = set(self._readers)
            self._maybe_complete_checkpoint()

    def _maybe_complete_checkpoint(self) -> None:
        cp = self._active()
        if cp is None or cp.waiting is None or cp.waiting:
            return
        positions = tuple(
            SegmentPosition(e.seg.stream, e.seg.name, e.position, e.watermark)
            for e in self._entries.values()
            if not e.waiting
        )
        result = Checkpoint(cp.name, self.group, self.epoch, self.streams, positions)
        self._checkpoints.popleft()
        for name, (offset, wm) in cp.deferred.items():
            e = self._entries.get(name)
            if e is not None and offset >= e.position:
                self._move(e, offset, wm)
        cp.future.set_result(result)
        self._activate()

    # ------------------------------------------------------------------ reset (new epoch)
    def reset(self, positions: Sequence[tuple[str, int]], hints: Mapping[str, int]) -> int:
        """Start a new epoch at ``positions`` (segment, offset); returns the epoch. O(n) store calls.

        Watermarks are materialised from the index (``watermark_at``), raised to ``hints``
        (checkpointed watermarks) where given. Every segment is unassigned; readers notice
        the epoch change on their next read and drop everything they buffered.
        """
        with self.lock:
            entries = self._build(positions, hints)  # validates; raises before any change
            for cp in self._checkpoints:
                cp.future.set_exception(
                    CheckpointAbortedError(
                        f"group {self.group!r}: checkpoint {cp.name!r} aborted by a reset to epoch "
                        f"{self.epoch + 1}"
                    )
                )
            self._checkpoints.clear()
            self._checkpoint_names.clear()
            self.epoch += 1
            for slot in self._readers.values():
                slot.segments.clear()
            self._completed.clear()
            self._floor = INT64_MIN
            self._install(entries)
            return self.epoch

    def _build(self, positions: Sequence[tuple[str, int]], hints: Mapping[str, int]) -> list[Entry]:
        out: list[Entry] = []
        for name, offset in positions:
            seg = self.client.get_segment(name)
            if seg.stream not in self.streams:
                raise InvalidPositionError(
                    f"group {self.group!r}: segment {name!r} belongs to stream {seg.stream!r}, "
                    f"which the group does not read"
                )
            info = self.client.get_info(name)
            if isinstance(offset, bool) or not isinstance(offset, int) or not (
                info.start_offset <= offset <= info.length
            ):
                raise InvalidPositionError(
                    f"group {self.group!r}: offset {offset!r} of segment {name!r} is outside "
                    f"[{info.start_offset}, {info.length}]"
                )
            wm = self._watermark_at(name, offset)
            out.append(Entry(seg, offset, max(wm, hints.get(name, wm))))
        for i, a in enumerate(out):
            for b in out[i + 1 :]:
                if a.seg.stream == b.seg.stream and a.seg.overlaps(b.seg.key_low, b.seg.key_high):
                    raise InvalidPositionError(
                        f"group {self.group!r}: segments {a.seg.name!r} and {b.seg.name!r} overlap in "
                        "key range; a stream cut holds each routing key once"
                    )
        return out

    def _install(self, entries: list[Entry]) -> None:
        self._lineage: dict[str, bool] = {}  # segment -> still to come (a descendant of an entry)
        self._entries = {e.seg.name: e for e in entries}
        self._by_wm = SortedList((e.watermark, e.seg.name) for e in entries)
        self._unassigned = SortedList((e.watermark, e.seg.name) for e in entries)
        self.group_watermark  # noqa: B018 - sets the floor

    # ------------------------------------------------------------------ internals
    def _watermark_at(self, name: str, offset: int) -> int:
        return self.client.watermark_at(name, offset)

    def _move(self, e: Entry, pos: int, wm: int) -> None:
        wm = max(wm, e.watermark)
        name = e.seg.name
        if wm != e.watermark:
            self._by_wm.remove((e.watermark, name))
            self._by_wm.add((wm, name))
            if e.owner is None and not e.waiting:
                self._unassigned.remove((e.watermark, name))
                self._unassigned.add((wm, name))
        e.position = pos
        e.watermark = wm

    def _unassign(self, e: Entry) -> None:
        e.owner = None
        self._unassigned.add((e.watermark, e.seg.name))

    def _drop(self, e: Entry) -> None:
        self.group_watermark  # noqa: B018 - the floor includes the dropped entry
        del self._entries[e.seg.name]
        self._by_wm.remove((e.watermark, e.seg.name))

    @checked
    def _check(self) -> None:
        """Assert the state's invariants (called by property and stress tests)."""
        with self.lock:
            if self._event_time is not None:
                self._event_time._check()
            assert len(self._by_wm) == len(self._entries)
            for wm, name in self._by_wm:
                assert self._entries[name].watermark == wm, f"{name}: stale watermark key"
            unassigned = {n for _, n in self._unassigned}
            assert len(unassigned) == len(self._unassigned)
            owned: dict[str, str] = {}
            for rid, slot in self._readers.items():
                assert slot.online and slot.reader_id == rid
                for n in slot.segments:
                    assert n not in owned, f"{n} is held by {owned[n]} and {rid}"
                    owned[n] = rid
            for name, e in self._entries.items():
                assert e.seg.name == name and name not in self._completed
                assert e.position >= 0
                if e.waiting:
                    assert e.owner is None and name not in unassigned, f"future {name} is readable"
                    assert not (e.waiting & set(self._completed)), f"{name} waits for a completed segment"
                elif e.owner is None:
                    assert name in unassigned, f"{name} is readable but neither assigned nor unassigned"
                    assert (e.watermark, name) in self._unassigned
                else:
                    assert owned.get(name) == e.owner, f"{name}: owner {e.owner} does not hold it"
                    assert name not in unassigned
            assert set(owned) <= set(self._entries) and unassigned <= set(self._entries)
            if self._by_wm:
                assert self._by_wm[0][0] >= self._floor, "the group watermark decreased"
            readable = [e.seg for e in self._entries.values() if not e.waiting]
            for i, a in enumerate(readable):
                for b in readable[i + 1 :]:
                    assert not (a.stream == b.stream and a.overlaps(b.key_low, b.key_high)), (
                        f"readable segments {a.name} and {b.name} overlap"
                    )
            cp = self._active()
            if cp is not None and cp.waiting is not None:
                assert cp.waiting <= set(self._readers), "checkpoint waits for an offline reader"
                assert not (cp.waiting & cp.crossed)
