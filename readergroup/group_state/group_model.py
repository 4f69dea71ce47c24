"""One replica of a reader group's state: the segments, readers and checkpoints, changed only by updates.

PDP-26 "Reader Group State" as a replicated state machine (Pravega's
``ReaderGroupState`` behind its state synchronizer). Every process holding the group
applies the same updates of the state log in the same order (``readergroup.group_state.synchronizer``),
and ``apply`` is a pure function of the replica and the update — no store call, no
clock, no set-iteration order — so every replica is in the same state at the same log
position (``to_obj()`` is canonical: two replicas at one position encode to the same
value). Whatever an update needs from the store was computed by its issuer
(``readergroup.group_state.state``) against the replica at the very log position the update is
appended at (a conditional append), and travels inside it.

An update is validated in full before it changes anything; one that does not hold
(a reader not in the group, a stale epoch, a position below the acknowledged one) is
*rejected*: skipped by every replica alike. Issuers validate the same way first, so a
rejection only happens when a batch raced with another (the conditional append makes
that rare) or came from a broken client.

For every incomplete segment — assigned, unassigned (readable) or future (a successor
waiting for predecessors) — the replica keeps its acknowledged position and the
watermark there; the group watermark is their minimum, raised after every update into
a floor that never decreases within an epoch. Costs: a report O(log n) per segment,
acquire O(k log n), a completion O(n), a checkpoint's completion O(n), a snapshot O(n).

What the replica keeps is bounded by what is live, however long the group runs (as
Pravega's ``ReaderGroupState`` keeps its latest checkpoints and its future segments'
outstanding predecessors only): the incomplete segments, the online readers, the
checkpoints in progress, the latest ``config.checkpoints_kept`` completed ones, and a
completed segment only while it can still be named again. A completed segment is named
again only by the completion of one of its predecessors (as that predecessor's
successor, which must not be registered a second time); a predecessor of ``C`` overlaps
``C``'s keys in an earlier stream epoch, so ``C`` is kept exactly while an entry of its
stream overlaps its keys in an earlier epoch. A successor registers when its first
predecessor completes, waiting for the others still to come, and is readable only once
they completed, so in a consistent state no such entry is left when ``C`` completes:
``completed`` is normally empty after every update.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Any

from sortedcontainers import SortedList

from segmentstore import StreamSegment
from segmentstore.limits import INT64_MIN

from ..config import ReaderGroupConfig
from ..errors import (
    DuplicateCheckpointError,
    InvalidPositionError,
    ReaderExistsError,
    ReaderGroupError,
    ReaderNotInGroupError,
    StaleEpochError,
)
from .checkpoint import Checkpoint, SegmentPosition
from .group_model_checks import GroupModelChecks
from .group_snapshots import SNAPSHOT_VERSION, load_snapshot, snapshot_json, snapshot_obj, snapshot_version
from .group_updates import (
    Acquire,
    AddReader,
    CheckpointReached,
    Complete,
    InitiateCheckpoint,
    Position,
    Rebalance,
    Release,
    RemoveReader,
    Report,
    Reset,
    Snapshot,
    SuccessorPlan,
    Update,
    config_from_obj,
)
from .least_load import LeastLoad
from .state_records import ASSIGNED, FUTURE, UNASSIGNED, Entry, Pending, SegmentState, Slot
from .watermark_floor import WatermarkFloor

__all__ = ["GroupModel", "SNAPSHOT_VERSION"]


class GroupModel(GroupModelChecks):
    """The replicated state of one reader group; change it only through ``apply``. Not thread-safe."""

    def __init__(self, group: str, group_id: str, config: ReaderGroupConfig) -> None:
        self.group = group
        self.group_id = group_id
        self.config = config
        self.streams = config.streams
        self.epoch = 0
        self.floor = INT64_MIN
        self.entries: dict[str, Entry] = {}
        self.by_wm = WatermarkFloor()  # (watermark, name) of every entry: the least one is the minimum
        self.unassigned: SortedList = SortedList()  # (watermark, name) of readable unassigned ones
        self.readers: dict[str, Slot] = {}
        self.completed: dict[str, tuple[StreamSegment, int]] = {}  # name -> (segment, final watermark)
        self.checkpoints: deque[Pending] = deque()
        self.results: deque[tuple[int, Checkpoint]] = deque(maxlen=config.checkpoints_kept)  # (token, cp)
        self.rejected = 0  # updates skipped on apply (not part of the state)
        self.results_added = 0  # checkpoints completed since this replica was loaded (not part of it)
        self.completions: list[tuple[int, Checkpoint]] = []  # since the owner took them (not part of it)
        self.futures = 0  # entries waiting for predecessors (derived: len(entries) - readable)
        self._least = LeastLoad()  # the fewest segments a reader holds, kept by the handlers
        self.layout = 0  # updates applied other than reports (not part of the state): see ``apply``

    @classmethod
    def initial(
        cls,
        group: str,
        group_id: str,
        config: ReaderGroupConfig,
        entries: Sequence[tuple[StreamSegment, int, int]],
    ) -> GroupModel:
        """A new group at ``entries`` (segment, position, watermark), every one unassigned."""
        m = cls(group, group_id, config)
        m._install(entries)
        return m

    # ------------------------------------------------------------------ queries
    @property
    def group_watermark(self) -> int:
        """The minimum watermark over every incomplete segment, floored (never decreasing). O(1)."""
        return self.floor

    def segments_of(self, reader_id: str) -> set[str]:
        slot = self.readers.get(reader_id)
        return set(slot.segments) if slot is not None else set()

    def row(self, e: Entry) -> SegmentState:
        if e.waiting:
            return SegmentState(e.seg, e.position, e.watermark, None, FUTURE, tuple(sorted(e.waiting)))
        return SegmentState(e.seg, e.position, e.watermark, e.owner, ASSIGNED if e.owner else UNASSIGNED)

    def rows(self) -> tuple[SegmentState, ...]:
        return tuple(self.row(e) for _, e in sorted(self.entries.items()))

    def is_member(self, reader_id: str, token: int) -> bool:
        slot = self.readers.get(reader_id)
        return slot is not None and slot.token == token

    def active(self) -> Pending | None:
        return self.checkpoints[0] if self.checkpoints else None

    def pending_checkpoint(self, reader_id: str) -> str | None:
        cp = self.active()
        if cp is not None and cp.waiting is not None and reader_id in cp.waiting:
            return cp.name
        return None

    def is_crossed(self, reader_id: str) -> bool:
        cp = self.active()
        return cp is not None and reader_id in cp.crossed

    @property
    def checkpoint_names(self) -> set[str]:
        """Names in use in this epoch: checkpoints in progress and completed ones still kept. O(k)."""
        names = {cp.name for cp in self.checkpoints}
        names.update(cp.name for _, cp in self.results if cp.epoch == self.epoch)
        return names

    def result(self, token: int) -> Checkpoint | None:
        """The completed checkpoint initiated at log position ``token``, if still kept. O(kept)."""
        for t, cp in self.results:
            if t == token:
                return cp
        return None

    def take_completions(self) -> list[tuple[int, Checkpoint]]:
        """``(token, checkpoint)`` of every checkpoint completed since the last call, kept or not. O(1)."""
        done, self.completions = self.completions, []
        return done

    def is_pending(self, token: int) -> bool:
        """Whether the checkpoint initiated at log position ``token`` is in progress (or queued). O(k)."""
        return any(cp.token == token for cp in self.checkpoints)

    def fair_share(self) -> int:
        """``ceil(readable segments / readers)``. O(1)."""
        return math.ceil((len(self.entries) - self.futures) / max(1, len(self.readers)))

    def least_load(self) -> int:
        """The fewest segments any reader holds (0 without readers). O(1) while cached (``LeastLoad``)."""
        return self._least.get(self.readers)

    def release_count(self, reader_id: str) -> int:
        """How many segments the reader should release now (0 during a checkpoint). O(readers).

        More than its fair share ``ceil(readable / readers)``: the excess. Otherwise one
        when it holds two more than the least loaded reader and nothing is unassigned.
        """
        slot = self.readers.get(reader_id)
        if slot is None or self.active() is not None or len(self.readers) < 2:
            return 0
        owned = len(slot.segments)
        fair = self.fair_share()
        if owned > fair:
            return owned - fair
        if self.unassigned:  # the least loaded reader can take those instead
            return 0
        return 1 if owned - self.least_load() >= 2 else 0

    def acquire_count(self, reader_id: str) -> int:
        """How many unassigned segments the reader would take now. O(readers).

        Pravega's ``calculateNumSegmentsToAcquire``: with ``u`` unassigned, ``max(u // readers,
        round(readable / readers) - owned, 1)``, at most ``u`` (rounded half up, as Java's
        ``Math.round``). So 1,000 readers of 4,096 segments take 4 each and the 96 left one
        each (with ``ceil``, 819 took 5 and the rest none). Nothing while a checkpoint is in
        progress or another reader holds fewer (Pravega's ranked acquire timers: the least
        loaded first). Never past ``fair_share()``: the taker holds the least, below the mean.
        """
        slot = self.readers.get(reader_id)
        if slot is None or self.active() is not None or not self.unassigned:
            return 0
        owned = len(slot.segments)
        if self.least_load() < owned:
            return 0  # a less loaded reader goes first (no ping-pong after a release)
        u = len(self.unassigned)
        readers = max(1, len(self.readers))
        share = (2 * (len(self.entries) - self.futures) + readers) // (2 * readers)  # round half up
        return min(u, max(u // readers, share - owned, 1))

    # ------------------------------------------------------------------ validation (issuers use it too)
    def member(self, reader_id: str, token: int) -> Slot:
        slot = self.readers.get(reader_id)
        if slot is None or slot.token != token:
            raise ReaderNotInGroupError(
                f"group {self.group!r}: reader {reader_id!r} is not online in the group"
            )
        return slot

    def in_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            raise StaleEpochError(
                f"group {self.group!r}: update of epoch {epoch}, the group is in {self.epoch}"
            )

    def check_held(self, slot: Slot, name: str, what: str) -> Entry:
        if name not in slot.segments:
            raise InvalidPositionError(
                f"group {self.group!r}: reader {slot.reader_id!r} {what} segment {name!r}, "
                "which it does not hold"
            )
        return self.entries[name]

    def check_positions(self, slot: Slot, positions: Sequence[Position], what: str) -> None:
        held, entries = slot.segments, self.entries
        for name, pos, _ in positions:
            e = entries[name] if name in held else self.check_held(slot, name, what)
            bad = type(pos) is not int and (isinstance(pos, bool) or not isinstance(pos, int))
            if bad or pos < e.position:
                raise InvalidPositionError(
                    f"group {self.group!r}: reader {slot.reader_id!r} {what} offset {pos!r} of segment "
                    f"{name!r}, below its acknowledged position {e.position}"
                )

    # ------------------------------------------------------------------ apply
    def apply(self, u: Update, token: int) -> bool:
        """Apply one update (``token``: its log position); ``False`` if it was rejected. Deterministic.

        Every update but a ``Report`` counts in ``layout``: a report moves the reporter's own
        segments only, so while ``layout`` stands still nothing changed that a reader's sync
        plans from but its own positions (membership, assignment, checkpoints, epoch).
        """
        try:
            handler = _HANDLERS[type(u)]
        except KeyError:
            raise TypeError(f"not a group update: {u!r}") from None
        if handler is not _REPORT:
            self.layout += 1
        try:
            handler(self, u, token)
        except ReaderGroupError:
            self.rejected += 1
            return False
        if self.by_wm:
            m = self.by_wm.least()
            if m > self.floor:
                self.floor = m
        return True

    def apply_report(self, reader_id: str, token: int, epoch: int, positions: Sequence[Position]) -> bool:
        """``apply(Report(reader_id, token, epoch, positions), at)`` without the update record (a report's
        log position plays no part in it): the same replica after, the same answer. O(log n) per position."""
        try:
            self._report_of(reader_id, token, epoch, positions)
        except ReaderGroupError:
            self.rejected += 1
            return False
        by_wm = self.by_wm
        if by_wm:
            m = by_wm.least()
            if m > self.floor:
                self.floor = m
        return True

    def _add(self, u: AddReader, token: int) -> None:
        rid = u.reader_id
        if not isinstance(rid, str) or not rid:
            raise InvalidPositionError(
                f"group {self.group!r}: reader id must be a non-empty str, got {rid!r}"
            )
        if rid in self.readers:
            raise ReaderExistsError(f"group {self.group!r}: reader {rid!r} is online already")
        self.readers[rid] = Slot(rid, token)
        self._least.joined()

    def _remove(self, u: RemoveReader, token: int) -> None:
        slot = self.member(u.reader_id, u.token)
        moves: list[tuple[Entry, int, int]] = []
        if u.positions is not None and u.epoch == self.epoch:
            self.check_positions(slot, u.positions, "returned")
            moves = [(self.entries[n], p, w) for n, p, w in u.positions]
        cp = self.active()
        if cp is not None and u.reader_id in cp.crossed:
            cp.deferred.update((e.seg.name, (p, w)) for e, p, w in moves)
        else:
            for e, p, w in moves:
                self._move(e, p, w)
        for name in sorted(slot.segments):
            self._unassign(self.entries[name])
        self._least.rose(len(slot.segments))
        slot.segments.clear()
        del self.readers[u.reader_id]
        if cp is not None and cp.waiting is not None:
            cp.waiting.discard(u.reader_id)
            cp.crossed.discard(u.reader_id)
            self._maybe_complete_checkpoint()

    def _report(self, u: Report, token: int) -> None:
        self._report_of(u.reader_id, u.token, u.epoch, u.positions)

    def _report_of(self, reader_id: str, token: int, epoch: int, positions: Sequence[Position]) -> None:
        slot = self.readers.get(reader_id)
        if slot is None or slot.token != token:
            slot = self.member(reader_id, token)  # (raises)
        if epoch != self.epoch:
            self.in_epoch(epoch)  # (raises)
        held, entries = slot.segments, self.entries
        for name, pos, _ in positions:  # every one valid before any moves (``check_positions``, inlined)
            if name not in held or type(pos) is not int or pos < entries[name].position:
                self.check_positions(slot, positions, "reported")  # (raises, unless an int subclass)
                break
        for name, pos, wm in positions:
            e = entries[name]
            if pos != e.position or wm > e.watermark:
                self._move(e, pos, wm)

    def _complete(self, u: Complete, token: int) -> None:
        slot = self.member(u.reader_id, u.token)
        self.in_epoch(u.epoch)
        e = self.check_held(slot, u.segment, "completed")
        before = self.floor
        name = u.segment
        final = max(u.final_watermark, e.watermark)
        slot.segments.discard(name)
        self._least.fell(len(slot.segments))
        self._drop(e)
        self.completed[name] = (e.seg, final)
        for plan in u.successors:
            s = plan.segment.name
            f = self.entries.get(s)
            if f is None:
                if s not in self.completed:
                    self._register(plan, max(plan.watermark, final, before))
            elif f.waiting:
                self._move(f, f.position, final)  # while still waiting: not in the unassigned set
                f.waiting.discard(name)
                if not f.waiting:
                    f.waiting = None
                    self.futures -= 1
                    self.unassigned.add((f.watermark, s))
        self._forget_completed()

    def _forget_completed(self) -> None:
        """Drop the completed segments no completion can name again (see the module). O(completed x n)."""
        for name, (c, _) in list(self.completed.items()):
            if not any(
                e.seg.stream == c.stream and e.seg.epoch < c.epoch and e.seg.overlaps(c.key_low, c.key_high)
                for e in self.entries.values()
            ):
                del self.completed[name]

    def _register(self, plan: SuccessorPlan, wm: int) -> None:
        waiting: set[str] = set()
        for p in plan.predecessors:
            if p in self.completed:
                wm = max(wm, self.completed[p][1])
            elif p in self.entries or p in plan.to_come:
                waiting.add(p)
        e = Entry(plan.segment, plan.start, wm)
        self.entries[plan.segment.name] = e
        self.by_wm.add((wm, plan.segment.name))
        if waiting:
            e.waiting = waiting
            self.futures += 1
        else:
            self.unassigned.add((wm, plan.segment.name))

    def _release(self, u: Release, token: int) -> None:
        slot = self.member(u.reader_id, u.token)
        self.in_epoch(u.epoch)
        for name in u.segments:
            self.check_held(slot, name, "released")
        if len(set(u.segments)) != len(u.segments):
            raise InvalidPositionError(
                f"group {self.group!r}: reader {u.reader_id!r} released a segment twice in one update"
            )
        for name in u.segments:
            slot.segments.discard(name)
            self._unassign(self.entries[name])
        self._least.fell(len(slot.segments))

    def _acquire(self, u: Acquire | Rebalance, token: int) -> None:
        slot = self.member(u.reader_id, u.token)
        self.in_epoch(u.epoch)
        before = len(slot.segments)
        for _ in range(self.acquire_count(u.reader_id)):
            _, name = self.unassigned.pop(0)
            self.entries[name].owner = u.reader_id
            slot.segments.add(name)
        if len(slot.segments) > before:
            self._least.rose(before)

    def _rebalance(self, u: Rebalance, token: int) -> None:
        slot = self.member(u.reader_id, u.token)
        self.in_epoch(u.epoch)
        k = self.release_count(u.reader_id)
        if k:
            held = sorted(((self.entries[n].watermark, n) for n in slot.segments), reverse=True)
            for _, name in held[:k]:
                slot.segments.discard(name)
                self._unassign(self.entries[name])
            self._least.fell(len(slot.segments))
        self._acquire(u, token)

    def _initiate(self, u: InitiateCheckpoint, token: int) -> None:
        self.in_epoch(u.epoch)
        if not isinstance(u.name, str) or not u.name:
            raise InvalidPositionError(f"group {self.group!r}: checkpoint name must be a non-empty str")
        if u.name in self.checkpoint_names:
            raise DuplicateCheckpointError(
                f"group {self.group!r}: checkpoint {u.name!r} exists already in epoch {self.epoch}"
            )
        self.checkpoints.append(Pending(u.name, token))
        self._activate()

    def _reached(self, u: CheckpointReached, token: int) -> None:
        self.member(u.reader_id, u.token)
        self.in_epoch(u.epoch)
        cp = self.active()
        if cp is None or cp.name != u.name or cp.waiting is None or u.reader_id not in cp.waiting:
            return
        cp.waiting.discard(u.reader_id)
        cp.crossed.add(u.reader_id)
        self._maybe_complete_checkpoint()

    def _reset(self, u: Reset, token: int) -> None:
        if u.epoch != self.epoch + 1:
            raise StaleEpochError(f"group {self.group!r}: reset to epoch {u.epoch} from epoch {self.epoch}")
        self.checkpoints.clear()
        self.epoch = u.epoch
        for slot in self.readers.values():
            slot.segments.clear()
        self._least.drop()
        self.completed.clear()
        self.floor = INT64_MIN
        self._install(u.entries)

    def _snapshot(self, u: Snapshot, token: int) -> None:
        raise TypeError("a snapshot replaces the replica (GroupModel.from_obj); it is not applied")

    # ------------------------------------------------------------------ checkpoints
    def _activate(self) -> None:
        cp = self.active()
        if cp is not None and cp.waiting is None:
            cp.waiting = set(self.readers)
            self._maybe_complete_checkpoint()

    def _maybe_complete_checkpoint(self) -> None:
        cp = self.active()
        if cp is None or cp.waiting is None or cp.waiting:
            return
        positions = tuple(
            SegmentPosition(e.seg.stream, e.seg.name, e.position, e.watermark)
            for e in self.entries.values()
            if not e.waiting
        )
        done = (cp.token, Checkpoint(cp.name, self.group, self.epoch, self.streams, positions))
        self.results.append(done)
        self.completions.append(done)  # one update may complete more than are kept (a queue, no readers)
        self.results_added += 1
        self.checkpoints.popleft()
        for name, (offset, wm) in sorted(cp.deferred.items()):
            e = self.entries.get(name)
            if e is not None and offset >= e.position:
                self._move(e, offset, wm)
        self._activate()

    # ------------------------------------------------------------------ internals
    def _install(self, entries: Sequence[tuple[StreamSegment, int, int]]) -> None:
        self.entries = {seg.name: Entry(seg, pos, wm) for seg, pos, wm in entries}
        self.futures = 0
        self.by_wm = WatermarkFloor((e.watermark, e.seg.name) for e in self.entries.values())
        self.unassigned = SortedList((e.watermark, e.seg.name) for e in self.entries.values())
        if self.by_wm:
            self.floor = max(self.floor, self.by_wm.least())

    def _move(self, e: Entry, pos: int, wm: int) -> None:
        old = e.watermark
        if wm > old:
            name = e.seg.name
            self.by_wm.move(name, old, wm)
            if e.owner is None and not e.waiting:
                self.unassigned.remove((old, name))
                self.unassigned.add((wm, name))
            e.watermark = wm
        e.position = pos

    def _unassign(self, e: Entry) -> None:
        e.owner = None
        self.unassigned.add((e.watermark, e.seg.name))

    def _drop(self, e: Entry) -> None:
        if self.by_wm and self.by_wm.least() > self.floor:  # the floor includes the dropped entry
            self.floor = self.by_wm.least()
        del self.entries[e.seg.name]
        self.by_wm.remove((e.watermark, e.seg.name))

    # ------------------------------------------------------------------ snapshots (group_snapshots)
    def to_obj(self) -> dict[str, Any]:
        """The whole state as canonical JSON-ready values (sorted; equal replicas give equal values). O(n)."""
        return snapshot_obj(self)

    def to_json(self) -> str:
        """``to_obj()`` as the state log writes it (``group_updates.encode_json``), faster. O(n)."""
        return snapshot_json(self)

    @classmethod
    def from_obj(cls, o: dict[str, Any]) -> GroupModel:
        """The inverse of ``to_obj``; also reads version 1 snapshots (``load_snapshot``). O(n log n)."""
        version = snapshot_version(o)
        m = cls(str(o["group"]), str(o["gid"]), config_from_obj(o["config"]))
        load_snapshot(m, o, version)
        return m


_REPORT = GroupModel._report
_HANDLERS: dict[type, Any] = {
    AddReader: GroupModel._add,
    RemoveReader: GroupModel._remove,
    Report: GroupModel._report,
    Complete: GroupModel._complete,
    Release: GroupModel._release,
    Acquire: GroupModel._acquire,
    Rebalance: GroupModel._rebalance,
    InitiateCheckpoint: GroupModel._initiate,
    CheckpointReached: GroupModel._reached,
    Reset: GroupModel._reset,
    Snapshot: GroupModel._snapshot,
}
