"""The reader in its group: which segments it holds, its syncs with the group state, its lease.

The half of ``EventReader`` (``reader``) that faces the group's shared state rather than
the segments: a sync reports the reader's acknowledged positions and finished segments
and reaches checkpoints in one batch of the state log, then the reader holds exactly
the segments the state assigns it (released ones dropped, acquired ones opened at their
acknowledged positions). A heartbeat keeps its lease; a reader fenced (declared offline)
or of a deleted group stops delivering, and a new epoch (a reset) drops what it buffered.
The rules are in ``reader``'s module docstring.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import TYPE_CHECKING, NoReturn

from segmentstore import Clock, SegmentNotFoundError, SegmentStoreError, StreamNotFoundError
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import INT64_MAX, INT64_MIN

from ..errors import (
    ReaderGroupError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
    StaleEpochError,
)
from ..format.pravega_frames import is_pravega_framed
from ..group_state.group_updates import Position
from ..group_state.liveness import Heartbeat
from ..group_state.state_records import Pending
from ..group_state.synchronizer import StateSynchronizer
from ..group_state.update_plans import moved_positions
from .read_results import EventRead, ReadKind
from .segment_input import SegmentInput

if TYPE_CHECKING:
    from ..group_state.group_model import GroupModel
    from ..group_state.state import ReaderGroupState

__all__ = ["ReaderMembership"]


class ReaderMembership:
    """``EventReader``'s membership in its group (a mixin: its methods run on the reader).

    The reader's state these use is declared here, set in ``EventReader.__init__``.
    """

    reader_id: str
    _state: ReaderGroupState
    _clock: Clock
    _sync_obj: StateSynchronizer
    _beat: Heartbeat | None
    _token: int
    _epoch: int
    _version: int
    _cps: deque[Pending]
    _segs: dict[str, SegmentInput]
    _cur: SegmentInput | None
    _limit: int
    _emitted: int
    _late_threshold: int
    _it_emitted: int
    _wm_pending: int | None
    _next_sync: int
    _next_report: int
    _interval: int
    _need_sync: bool
    _state_moved: bool
    _quiet: tuple[GroupModel, int, list[Position]] | None
    _closed: bool
    _deleted: bool
    _watermarks: bool
    _event_time: bool
    _client: SegmentStoreClient
    _framings: dict[str, bool]

    if TYPE_CHECKING:

        def _ready_tails(self, wait_ms: int) -> list[SegmentInput]: ...

    def _pravega_framed(self, stream: str) -> bool:
        """Whether ``stream``'s events are Pravega-framed (asked of the store once per stream); a
        framing no reader here decodes is a ``StreamFramingError``; a deleted stream: ingestwm's."""
        known = self._framings.get(stream)
        if known is None:
            try:
                framing = self._client.get_stream(stream).framing
            except StreamNotFoundError:  # deleted: its segments' reads answer that
                return False
            known = self._framings[stream] = is_pravega_framed(stream, framing)
        return known

    def _online(self) -> bool:
        """``ReaderGroupState.is_online`` of this incarnation, read off the replica. O(1)."""
        slot = self._sync_obj.state.readers.get(self.reader_id)
        return slot is not None and slot.token == self._token  # (``GroupModel.is_member``)

    def _check_membership(self) -> None:
        """After the replica changed: restart on a new epoch, fail if this reader is offline
        or its group was deleted. O(1)."""
        version = self._sync_obj.version
        if self._sync_obj.deleted is not None:
            self._group_gone()
        m = self._sync_obj.state  # (the replica: ``ReaderGroupState.model``)
        if m.epoch != self._epoch or self._closed or not self._online():
            self._restart()
        self._cps = m.checkpoints
        self._version = version

    def _sync_due(self, st: ReaderGroupState) -> bool:
        now = self._clock.now()
        beat = self._beat
        if beat is not None and now >= beat.next_due:
            self._keep_alive(now)
        return (
            self._need_sync
            or now >= self._next_report
            or (st.checkpoint_active and st.pending_checkpoint(self.reader_id) is not None)
        )

    def _keep_alive(self, now: int) -> None:
        """Heartbeat (the reader's lease), let the group declare expired readers offline, and sync.

        So a reader syncs with the group at least every quarter lease, however long its
        report interval: a busy one learns of other processes' checkpoints and resets (a
        caught-up one syncs as it waits anyway, after reading its tails).
        """
        beat = self._beat
        assert beat is not None
        try:
            alive = beat.beat(now)
        except SegmentNotFoundError:  # the group was deleted
            self._group_gone()
        if not alive:  # fenced: declared offline, or the group deleted (and made again?)
            with contextlib.suppress(SegmentStoreError, ReaderGroupError):
                self._state.refresh()
            if self._sync_obj.deleted is not None:
                self._group_gone()
            self._closed = True
            self._segs.clear()
            self._cur = None
            raise ReaderNotInGroupError(
                f"reader {self.reader_id!r} lost its lease in group {self._state.group!r} (declared offline)"
            )
        self._state.sweep(now)
        self._state_moved = True
        if any(s.idx < s.n or not s.at_tail for s in self._segs.values()):
            self._need_sync = True
        self._next_sync = min(self._next_report, beat.next_due)

    def _positions(self) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
        """Acknowledged ``(segment, position, watermark)`` of unfinished and of finished segments.

        A finished segment (read to its sealed end) has its final watermark there.
        """
        acked: list[tuple[str, int, int]] = []
        finished: list[tuple[str, int, int]] = []
        for s in self._segs.values():
            i = s.idx  # (this is s.acked() and s.finished, inlined)
            if i:
                pos, wm = s.after_event(i - 1)
            else:
                pos, wm = s.base_pos, s.base_wm
            if s.end_of_segment and i >= s.n:
                finished.append((s.name, pos, max(s.final_wm, wm)))
            else:
                acked.append((s.name, pos, wm))
        return acked, finished

    def _follow(self, st: ReaderGroupState) -> None:
        """Hold exactly the segments the state assigns this reader: drop released and completed ones,
        open acquired ones at their acknowledged positions (oldest watermark first). O(k log k)."""
        m = st.model
        slot = m.readers.get(self.reader_id)
        held = slot.segments if slot is not None else set()
        for name in [n for n in self._segs if n not in held]:
            del self._segs[name]
        new = sorted((m.entries[n].watermark, n) for n in held if n not in self._segs)
        for _, name in new:
            e = m.entries[name]
            pravega = self._pravega_framed(e.seg.stream)
            self._segs[name] = SegmentInput(e.seg, e.position, e.watermark, pravega)

    def _sync(self, refresh: bool = True) -> EventRead | None:
        """Report, complete, rebalance, reach a checkpoint; learn the group watermark. O(k log n).

        One batch appended to the group's state log when something changed (else one
        read of it). ``refresh`` makes the next selection re-read tails of segments that
        were caught up.
        """
        st = self._state
        marker: EventRead | None = None
        with st.lock:
            now = self._clock.now()
            if self._beat is not None and now >= self._beat.next_due:
                self._keep_alive(now)
            name: str | None = None
            quiet = False
            for _ in range(8):
                moved = self._sync_obj.version != self._version  # (else as ``_check_membership`` found it)
                if moved and (st.epoch != self._epoch or not self._online()):
                    self._restart()
                acked, finished = self._positions()
                q = self._quiet
                if (
                    q is not None
                    and not finished
                    and not self._state_moved
                    and self._sync_obj.deleted is None
                ):
                    m = self._sync_obj.state  # (``st.model``)
                    if q[0] is m and q[2] == acked:
                        if q[1] == m.layout:
                            quiet = True  # nothing moved since the last sync left nothing to do: skip it
                            break
                        # others' updates moved the layout: would this sync plan anything now?
                        again = self._settled(st, acked, finished, None)
                        if again is not None:
                            self._quiet = again
                            quiet = True
                            break
                    elif q[0] is m and q[1] == m.layout:
                        # the reader delivered more, nothing else moved: this sync is its report alone
                        try:
                            done = st.sync_report(self.reader_id, self._token, self._epoch, acked, q[1])
                        except ReaderGroupNotFoundError:
                            self._group_gone()
                        if done:
                            self._quiet = (m, q[1], acked)
                            quiet = True
                            break
                        if done is not None:  # appended, a position refused: as after ``sync_reader``
                            break
                fetch, self._state_moved = self._state_moved, False
                try:
                    name = st.sync_reader(self.reader_id, self._token, self._epoch, acked, finished, fetch)
                except StaleEpochError:
                    continue  # a reset meanwhile: restart in the new epoch and sync again
                except ReaderNotInGroupError:
                    self._restart()  # raises: declared offline
                except ReaderGroupNotFoundError:
                    self._group_gone()
                if st.epoch == self._epoch and self._online():
                    break
            if not quiet:
                m = self._sync_obj.state
                if (
                    q is not None
                    and q[0] is m
                    and q[1] == m.layout
                    and name is None
                    and not finished
                    and not moved_positions(m, self.reader_id, acked)
                ):
                    # a report only: the layout stood still since the last settled sync, so the reader
                    # holds what the state assigns it and nothing is left to plan (``_settled``)
                    self._quiet = (m, q[1], acked)
                else:
                    self._follow(st)
                    self._quiet = self._settled(st, acked, finished, name)
            if name is not None:
                marker = EventRead(ReadKind.CHECKPOINT, self._epoch, checkpoint_name=name)
            gw = (
                st.event_time_watermark if self._event_time else self._sync_obj.state.floor
            )  # (group_watermark)
        if self._watermarks and gw > self._emitted and gw > INT64_MIN:
            self._wm_pending = gw
        self._need_sync = not self._segs
        self._next_report = self._clock.now() + self._interval
        beat = self._beat
        self._next_sync = self._next_report if beat is None else min(self._next_report, beat.next_due)
        self._cur = None
        self._limit = INT64_MAX
        if refresh:
            self._ready_tails(0)  # the next selection reads the tails that moved
        return marker

    def _settled(
        self, st: ReaderGroupState, acked: list[Position], finished: list[Position], reached: str | None
    ) -> tuple[GroupModel, int, list[Position]] | None:
        """After a sync: the replica, its ``layout`` and the positions it reported, if a sync with the
        same positions would plan nothing (the reader holds what the state assigns it; nothing to
        report, complete, rebalance or reach); else ``None``. O(k).

        Only reports move the replica while its ``layout`` stands still, and those of other readers
        touch none of this reader's segments: so until ``layout`` moves or the reader delivers more,
        its next syncs would append nothing and change nothing (``_sync`` skips them).
        """
        m = self._sync_obj.state
        rid = self.reader_id
        if (
            finished
            or reached is not None
            or m.epoch != self._epoch
            or not m.is_member(rid, self._token)
            or m.is_crossed(rid)
            or m.pending_checkpoint(rid) is not None
            or moved_positions(m, rid, acked)
            or m.release_count(rid)
            or m.acquire_count(rid)
        ):
            return None
        return m, m.layout, acked

    def _group_gone(self) -> NoReturn:
        """The group was deleted: deliver nothing more, ever."""
        self._closed = self._deleted = True
        self._segs.clear()
        self._cur = None
        why = self._sync_obj.deleted or f"reader group state {self._state.segment!r} does not exist"
        raise ReaderGroupNotFoundError(
            f"reader {self.reader_id!r}: reader group {self._state.group!r} was deleted ({why})"
        )

    def _restart(self) -> None:
        """A new epoch (reset): drop every buffered read; or fail if the reader left the group."""
        if self._deleted:
            self._group_gone()
        if self._closed or not self._online():
            self._segs.clear()
            raise ReaderNotInGroupError(
                f"reader {self.reader_id!r} is not online in group {self._state.group!r} "
                "(closed or declared offline)"
            )
        self._segs.clear()
        self._quiet = None
        self._cur = None
        self._limit = INT64_MAX
        self._epoch = self._state.epoch
        self._emitted = INT64_MIN
        self._late_threshold = INT64_MIN
        self._it_emitted = INT64_MIN
        self._wm_pending = None
        self._need_sync = True
        self._state_moved = True
