"""What an update needs from the store, found by its issuer against the replica it will apply to.

``GroupModel.apply`` makes no store call, so whatever an update depends on in the store
travels inside it, computed by the process that issues it against its replica at the
log position the update is then conditionally appended at (``readergroup.group_state.state``):

- ``build_entries``: positions of a new group or a reset, validated, with watermarks
  materialised from the index (``watermark_at``) and raised to checkpointed ones;
- ``UpdatePlanner.complete``: a completed segment's successors (start offsets,
  ``watermark_at`` there, and which unknown predecessors are still to come);
- ``moved_positions``: which of a reader's positions differ from the replica's;
- ``UpdatePlanner.sync_batch`` / ``leave`` / ``reset``: the batch a reader's sync or
  close appends (report, completion, rebalance, checkpoint reached, removal), and a
  reset's next epoch.

If the append loses to another process the issuer catches up and plans again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from segmentstore import StreamCut, StreamSegment
from segmentstore.client import SegmentStoreClient

from ..errors import InvalidPositionError
from .group_model import GroupModel
from .group_updates import (
    CheckpointReached,
    Complete,
    Position,
    Rebalance,
    RemoveReader,
    Report,
    Reset,
    SuccessorPlan,
    Update,
)
from .state_records import FUTURE

__all__ = ["UpdatePlanner", "build_entries", "first_overlap", "moved_positions", "before_entries"]


class UpdatePlanner:
    """Plans the updates of one process that need the store or several steps (a reader's sync, its
    leave, a completion, a reset); caches segment lineage per epoch."""

    def __init__(self, client: SegmentStoreClient) -> None:
        self.client = client
        self._lineage: dict[str, bool] = {}  # segment -> still to come (a descendant of an entry)
        self._lineage_epoch = -1

    def complete(self, m: GroupModel, rid: str, token: int, name: str, final: int) -> Complete:
        """A ``Complete`` of ``name`` with its successors as the store has them now. O(successors) calls."""
        m.check_held(m.member(rid, token), name, "completed")
        c = self.client
        plans: list[SuccessorPlan] = []
        for info in c.get_successors(name):
            s = info.segment.name
            if s in m.entries or s in m.completed:
                plans.append(SuccessorPlan(info.segment, info.predecessors, 0, 0))
                continue
            start = c.get_info(s).start_offset
            to_come = tuple(
                p
                for p in info.predecessors
                if p != name
                and p not in m.completed
                and p not in m.entries
                and self.still_to_come(m, c.get_segment(p))
            )
            plans.append(
                SuccessorPlan(info.segment, info.predecessors, start, c.watermark_at(s, start), to_come)
            )
        return Complete(rid, token, m.epoch, name, final, tuple(plans))

    def sync_batch(
        self,
        rid: str,
        token: int,
        epoch: int,
        acked: Sequence[Position],
        done: Position | None,
        last: bool,
        reached: list[str],
        m: GroupModel,
    ) -> list[Update]:
        """One batch of a reader's sync against replica ``m`` (planned again after a conflict): its
        report, the completion of ``done``, a rebalance (``last`` batch), the checkpoint it reaches
        (put in ``reached``)."""
        reached.clear()
        m.member(rid, token)
        m.in_epoch(epoch)
        name = m.pending_checkpoint(rid)
        out: list[Update] = []
        if not m.is_crossed(rid):
            moved = moved_positions(m, rid, acked)
            if moved:
                out.append(Report(rid, token, epoch, moved))
            if done is not None:
                out.append(self.complete(m, rid, token, done[0], done[2]))
            if last and name is None and (done is not None or m.release_count(rid) or m.acquire_count(rid)):
                out.append(Rebalance(rid, token, epoch))
        if last and name is not None:
            out.append(CheckpointReached(rid, token, epoch, name))
            reached.append(name)
        return out

    def leave(
        self,
        rid: str,
        token: int,
        epoch: int,
        acked: Sequence[Position],
        finished: Sequence[Position],
        m: GroupModel,
    ) -> list[Update]:
        """A closing reader's batch against replica ``m``: report (and complete one finished segment),
        then leave; past the active checkpoint's marker its positions go with the removal.
        Nothing if it is offline already."""
        if not m.is_member(rid, token):
            return []
        if m.epoch != epoch:
            return [RemoveReader(rid, token, m.epoch, None)]
        if m.is_crossed(rid):
            pos = tuple((n, o, self.client.watermark_at(n, o)) for n, o, _ in [*acked, *finished])
            return [RemoveReader(rid, token, epoch, pos)]
        out: list[Update] = []
        moved = moved_positions(m, rid, [*acked, *finished])
        if moved:
            out.append(Report(rid, token, epoch, moved))
        if finished:
            n, _, final = finished[0]
            out.append(self.complete(m, rid, token, n, final))
        out.append(RemoveReader(rid, token, epoch, None))
        return out

    def reset(self, m: GroupModel, cuts: Sequence[StreamCut], hints: Mapping[str, int]) -> Reset:
        """The next epoch of ``m`` at ``cuts``; streams without a cut stay at their acknowledged
        positions and watermarks (future segments are found again). O(n) store calls."""
        mentioned = {c.stream for c in cuts}
        positions = [p for c in cuts for p in c.positions]
        h = dict(hints)
        for row in m.rows():
            if row.segment.stream not in mentioned and row.status != FUTURE:
                positions.append((row.segment.name, row.position))
                h[row.segment.name] = row.watermark
        entries = build_entries(self.client, m.group, m.streams, positions, h)
        return Reset(m.epoch + 1, tuple(entries))

    def still_to_come(self, m: GroupModel, p: StreamSegment) -> bool:
        """Whether a segment neither known nor completed is still to be read (a descendant of an entry).

        Mostly an entry on its keys tells (``before_entries``). After a restore it may
        not: a checkpoint or cut leaves out future segments, so keys that reach ``p``
        only through a merge whose other side was read already are on no entry; then
        the successors of the entries are walked up to ``p``'s epoch. Cached per epoch
        (the answer never changes within one). O(entries), or O(segments walked) store calls.
        """
        if not before_entries(m, p):
            return True
        if self._lineage_epoch != m.epoch:
            self._lineage, self._lineage_epoch = {}, m.epoch
        known = self._lineage.get(p.name)
        if known is None:
            todo = [e.seg.name for e in m.entries.values() if e.seg.stream == p.stream]
            todo = sorted(n for n in todo if m.entries[n].seg.epoch < p.epoch)
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


def build_entries(
    client: SegmentStoreClient,
    group: str,
    streams: Iterable[str],
    positions: Sequence[tuple[str, int]],
    hints: Mapping[str, int],
) -> list[tuple[StreamSegment, int, int]]:
    """Entries at ``positions``, watermarks from the index (raised to ``hints``); validated. O(n) calls."""
    streams = tuple(streams)
    out: list[tuple[StreamSegment, int, int]] = []
    for name, offset in positions:
        seg = client.get_segment(name)
        if seg.stream not in streams:
            raise InvalidPositionError(
                f"group {group!r}: segment {name!r} belongs to stream {seg.stream!r}, "
                f"which the group does not read"
            )
        info = client.get_info(name)
        if (
            isinstance(offset, bool)
            or not isinstance(offset, int)
            or not (info.start_offset <= offset <= info.length)
        ):
            raise InvalidPositionError(
                f"group {group!r}: offset {offset!r} of segment {name!r} is outside "
                f"[{info.start_offset}, {info.length}]"
            )
        wm = client.watermark_at(name, offset)
        out.append((seg, offset, max(wm, hints.get(name, wm))))
    overlap = first_overlap([seg for seg, _, _ in out])
    if overlap is not None:
        a, b = overlap
        raise InvalidPositionError(
            f"group {group!r}: segments {a.name!r} and {b.name!r} overlap in "
            "key range; a stream cut holds each routing key once"
        )
    return out


def first_overlap(segments: Sequence[StreamSegment]) -> tuple[StreamSegment, StreamSegment] | None:
    """The first pair ``(segments[i], segments[j])``, ``i < j``, of one stream whose key ranges overlap.

    O(n log n) when none does (the usual case): per stream, sorted by ``key_low``, each
    range is compared with the one reaching furthest among those before it. Only when
    one does are the pairs scanned in order (O(n^2)) to name the first.
    """
    by_stream: dict[str, list[StreamSegment]] = {}
    for s in segments:
        by_stream.setdefault(s.stream, []).append(s)
    for group in by_stream.values():
        reach: StreamSegment | None = None  # the range reaching furthest so far
        for s in sorted(group, key=lambda x: x.key_low):
            if reach is not None and s.overlaps(reach.key_low, reach.key_high):
                break
            if reach is None or s.key_high > reach.key_high:
                reach = s
        else:
            continue
        break
    else:
        return None
    for i, a in enumerate(segments):
        for b in segments[i + 1 :]:
            if a.stream == b.stream and a.overlaps(b.key_low, b.key_high):
                return a, b
    raise AssertionError("an overlap was found, then not")  # pragma: no cover


def moved_positions(m: GroupModel, rid: str, positions: Iterable[Position]) -> tuple[Position, ...]:
    """The positions of segments ``rid`` holds that differ from the replica's (what a report must say)."""
    get = m.entries.get
    out = []
    for p in positions:
        e = get(p[0])
        if e is not None and e.owner == rid and (p[1] != e.position or p[2] > e.watermark):
            out.append(p)
    return tuple(out)


def before_entries(m: GroupModel, p: StreamSegment) -> bool:
    """Whether a segment neither known nor completed lies before the state (complete) or after it.

    Along every routing key the segments form a chain of strictly increasing stream
    epochs, and the entries cover every key still to be read; so ``p`` is still to
    come exactly when an entry on its keys has an epoch ``<= p.epoch``. O(entries).
    """
    for e in m.entries.values():
        q = e.seg
        if q.stream == p.stream and q.epoch <= p.epoch and q.overlaps(p.key_low, p.key_high):
            return False
    return True
