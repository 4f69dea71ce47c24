"""Reader-group state shared by processes: a replica of the group's state log, and the updates it issues.

PDP-26 "Reader Group State" with Pulsar's watermark cursor, kept in the store as
Pravega keeps it: ``ReaderGroupState`` is one process's handle on a group whose state
is the log of update batches in the segment ``_system/_rg/<group>`` (``state_segment``).
``readergroup.group_state.synchronizer`` keeps the replica in step with the log; ``GroupModel`` is
the replica, changed only by applying updates; this module *issues* the updates: it
(with ``update_plans``) reads the store for what an update needs (successors, start
offsets, watermarks, stream cuts) against the replica at the log position the update
is appended at, and carries the result inside the update. Every process — the in-process group is one
with a single replica — goes through this same path.

For every incomplete segment of the group — *assigned* to a reader, *unassigned*
(readable, waiting for a reader) or *future* (a successor whose predecessors are not all
complete) — the state keeps its acknowledged position and the watermark there. The
group watermark is the minimum over all of them. Positions move only when the owning
reader *reports* them, after the events before them were processed; a reader that
goes offline returns its segments at the last reported position. Unassigned segments
are kept ordered by watermark, oldest first, and are acquired in that order.

Why no reader ever delivers an event at or below an emitted watermark (docs/design.md §4.1)
----------------------------------------------------------------------------------
Facts: (a) the store stamps temporal operations with non-decreasing times, so
ingestion times never decrease along a segment, and ``watermark_at(s, p)`` is a lower
bound (exclusive) for every byte of ``s`` at or after ``p`` — also bytes written later,
which get later stamps; (b) streams write a successor only after all its predecessors
are sealed (``scale_stream`` creates successors, then seals; writers move to them on
``SegmentSealedError``; a rolled transaction commit copies its data after the seal), so
every byte of a successor ``S`` of ``P`` has time ``>= seal(P) > seal(P) - 1 =``
``watermark_at(P, end) >= watermark_at(P, p)`` for every ``p``; by induction the same
holds for every descendant of ``P``; (c) the log is one sequence of batches that every
replica applies identically (``GroupModel.apply`` is deterministic), and each batch was
computed against the state at exactly the position it was appended at (conditional
append), so the argument below is about the state at a log position, whichever
process holds it.

Claim: at any log position, every event some reader may still deliver in this epoch
has ingestion time ``>`` the state's watermark of some incomplete entry. Such an event
lies either in a segment ``X`` of the state at or after its acknowledged position —
readers deliver forward from acknowledged positions, only the holder moves or releases
``X`` (reporting first), and a reader going offline returns ``X`` at its last
*reported* = acknowledged position, so redelivery starts there; a reader whose replica
lags still holds ``X`` in the latest state, at a position at or below its own — then
its time is ``> watermark_at(X, pos)`` by (a); or in a segment not registered yet,
whose ancestor along any of its keys is an entry of the state (a segment is registered
when one of its predecessors completes, and the state covers every routing key until
the stream ends) — then (b) applies. Entries change only by (i) a report, which moves
the position forward and keeps ``max(old, new)`` watermark; (ii) completion of ``X`` at
its end, which removes it and registers its successors with watermark
``max(watermark_at(S, start), X's final watermark, group watermark before)`` — a valid
bound by (b) and the claim; (iii) offline/release/acquire, which keep position and
watermark. So the minimum never decreases along the log, a replica that lags emits an
older, still valid minimum, and every later delivered event has time ``> min >=`` any
watermark emitted before, in any process. A reset starts a new epoch with watermarks
materialised from the index at the new positions (``watermark_at``), valid by (a).
"Offline" must mean gone: a reader holds a lease (``readergroup.group_state.liveness``) and beats
before delivering whenever a quarter of it passed, and expiry needs a whole timeout
without a beat, so an expired reader delivers nothing after its removal (clocks
running at one rate); ``reader_offline`` on a reader that still runs is outside the
claim, as in Pravega.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from segmentstore import Clock, SegmentStoreError, StreamCut, StreamSegment
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.limits import INT64_MIN

from ..config import ReaderGroupConfig
from ..errors import (
    DuplicateCheckpointError,
    InvalidPositionError,
    MaxCheckpointsExceededError,
    ReaderExistsError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
)
from .checkpoint import Checkpoint
from .event_time import ProducerWatermarks
from .group_model import GroupModel
from .group_updates import (
    Acquire,
    AddReader,
    CheckpointReached,
    InitiateCheckpoint,
    Position,
    Release,
    RemoveReader,
    Report,
    Update,
)
from .initiated_checkpoints import InitiatedCheckpoints
from .liveness import Heartbeat, LivenessMonitor, beat_interval, fence, forget
from .state_records import SegmentState
from .synchronizer import Applied, StateSynchronizer
from .update_plans import UpdatePlanner, build_entries, moved_positions

__all__ = ["ReaderGroupState", "SegmentState", "STATE_PREFIX", "state_segment"]


class _LayoutMoved(Exception):
    """``ReaderGroupState.report``: the replica's layout moved (the report alone may not be the sync)."""


STATE_PREFIX = "_system/_rg/"
"""Segments holding reader-group state logs (``_system``: the advancer and stream listing skip them)."""


def state_segment(group: str) -> str:
    """The segment of group ``group``'s state log."""
    return STATE_PREFIX + group


def _load(obj: dict[str, Any]) -> GroupModel:
    return GroupModel.from_obj(obj)


class ReaderGroupState:
    """One process's replica of a reader group's state, and the updates its readers issue.

    Create a group with ``create`` (the first snapshot in the store), join one with
    ``open``. Queries read the replica as it is (``refresh()`` catches up with the log);
    every change is an update appended to the log. Readers call it under ``lock`` (an
    ``RLock``). Group watermark O(1); a sync O(log n) per segment plus one store read
    and, when something changed, one conditional append.
    """

    def __init__(self, sync: StateSynchronizer, client: SegmentStoreClient, clock: Clock) -> None:
        self._sync = sync
        self.client = client
        self.clock = clock
        self.lock = sync.lock
        m: GroupModel = sync.state
        self.group = m.group
        self.config: ReaderGroupConfig = m.config
        self.streams = m.streams
        self.segment = sync.segment
        self._event_time: ProducerWatermarks | None = None
        self._planner = UpdatePlanner(client)
        self._checkpoints = InitiatedCheckpoints(self.group, self._poll_futures)
        timeout = self.config.reader_timeout_ms
        self._monitor = LivenessMonitor(timeout) if timeout else None
        self._next_sweep = INT64_MIN
        sync.on_apply = self._settle  # after every batch: a result is settled before it can be dropped

    @classmethod
    def create(
        cls, client: SegmentStoreClient, group: str, config: ReaderGroupConfig, clock: Clock
    ) -> ReaderGroupState:
        """Create group ``group`` in the store at the config's starting cuts (heads by default)."""
        positions: list[tuple[str, int]] = []
        for stream in config.streams:
            cut = config.starting_cut(stream) or client.get_head_cut(stream)
            positions.extend(cut.positions)
        entries = build_entries(client, group, config.streams, positions, {})
        model = GroupModel.initial(group, uuid.uuid4().hex[:16], config, entries)
        sync = StateSynchronizer.create(
            client, state_segment(group), model, _load, config.state_snapshot_interval
        )
        return cls(sync, client, clock)

    @classmethod
    def open(cls, client: SegmentStoreClient, group: str, clock: Clock) -> ReaderGroupState:
        """Join group ``group`` kept in the store: load its snapshot and the log after it."""
        if not isinstance(group, str) or not group:
            raise ReaderGroupNotFoundError(f"reader group name must be a non-empty str, got {group!r}")
        return cls(StateSynchronizer.open(client, state_segment(group), _load), client, clock)

    # ------------------------------------------------------------------ the replica
    @property
    def model(self) -> GroupModel:
        m: GroupModel = self._sync.state
        return m

    @property
    def synchronizer(self) -> StateSynchronizer:
        return self._sync

    @property
    def epoch(self) -> int:
        return self._sync.state.epoch  # type: ignore[no-any-return]

    @property
    def revision(self) -> int:
        """The log offset after the last batch this replica applied."""
        return self._sync.revision

    @property
    def checkpoint_active(self) -> bool:
        """Whether a checkpoint is queued or in progress (in this replica). O(1)."""
        return bool(self._sync.state.checkpoints)

    def refresh(self) -> int:
        """Apply what other processes appended to the log; returns how many batches. One store read."""
        with self.lock:
            n = self._sync.fetch_updates()
            self._settle()
            return n

    def _update(self, fn: Callable[[GroupModel], Sequence[Update]]) -> Applied | None:
        with self.lock:
            try:
                return self._sync.update(fn)
            finally:
                self._settle()

    # ------------------------------------------------------------------ queries
    @property
    def group_watermark(self) -> int:
        """The minimum watermark over every incomplete segment (never decreasing in an epoch). O(1)."""
        return self._sync.state.floor  # type: ignore[no-any-return]

    @property
    def event_time_watermark(self) -> int:
        """Producer-asserted watermark at the acknowledged positions (``event_time``). O(n x writers)."""
        with self.lock:
            m = self.model
            pw = self._event_time = self._event_time or ProducerWatermarks(self.client)
            return pw.watermark(m.epoch, [(e.seg, e.position) for e in m.entries.values()])

    def readers(self) -> list[str]:
        """Ids of the online readers (in every process). O(readers)."""
        with self.lock:
            return list(self.model.readers)

    def members(self) -> dict[str, int]:
        """Online readers and their membership tokens. O(readers)."""
        with self.lock:
            return {rid: s.token for rid, s in self.model.readers.items()}

    def segments_of(self, reader_id: str) -> set[str]:
        """Names of the segments assigned to ``reader_id``. O(k)."""
        with self.lock:
            slot = self.model.readers.get(reader_id)
            if slot is None:
                raise ReaderNotInGroupError(
                    f"group {self.group!r}: reader {reader_id!r} is not online in the group"
                )
            return set(slot.segments)

    def segments(self) -> tuple[SegmentState, ...]:
        """Every incomplete segment with position, watermark, owner and status, by name. O(n)."""
        with self.lock:
            return self.model.rows()

    def is_online(self, reader_id: str, token: int) -> bool:
        """Whether this incarnation of the reader is online (in this replica). O(1)."""
        return self.model.is_member(reader_id, token)

    def pending_checkpoint(self, reader_id: str) -> str | None:
        """The active checkpoint's name if ``reader_id`` has still to reach it. O(1)."""
        return self.model.pending_checkpoint(reader_id)

    def is_crossed(self, reader_id: str) -> bool:
        """Whether the reader reached the active checkpoint (it then holds back its reports). O(1)."""
        return self.model.is_crossed(reader_id)

    # ------------------------------------------------------------------ membership
    def add_reader(self, reader_id: str) -> int:
        """Add an online reader; returns its membership token. One append."""
        if not isinstance(reader_id, str) or not reader_id:
            raise InvalidPositionError(
                f"group {self.group!r}: reader id must be a non-empty str, got {reader_id!r}"
            )

        def fn(m: GroupModel) -> list[Update]:
            if reader_id in m.readers:
                raise ReaderExistsError(f"group {self.group!r}: reader {reader_id!r} is online already")
            return [AddReader(reader_id)]

        applied = self._update(fn)
        assert applied is not None and applied.ok
        return applied.offset

    def remove_reader(
        self, reader_id: str, positions: Mapping[str, int] | None = None, token: int | None = None
    ) -> None:
        """Take a reader offline: its segments return unassigned at their last reported positions.

        ``positions`` (segment -> offset) may move some of them forward first, as
        Pravega's ``readerOffline(reader, lastPosition)``; the watermark there comes from
        the index. For a reader that already reached the active checkpoint they apply
        when the checkpoint completes (the checkpoint keeps its positions at the marker,
        and what the reader returned after it is not delivered again). With ``token``
        only that incarnation of the reader is removed.
        """

        def fn(m: GroupModel) -> list[Update]:
            slot = m.readers.get(reader_id) if isinstance(reader_id, str) else None
            if slot is None or (token is not None and slot.token != token):
                raise ReaderNotInGroupError(
                    f"group {self.group!r}: reader {reader_id!r} is not online in the group"
                )
            pos: tuple[Position, ...] | None = None
            if positions:
                m.check_positions(slot, [(n, o, 0) for n, o in positions.items()], "returned")
                pos = tuple((n, o, self.client.watermark_at(n, o)) for n, o in sorted(positions.items()))
            removed.append(slot.token)
            return [RemoveReader(reader_id, slot.token, m.epoch, pos)]

        removed: list[int] = []
        self._update(fn)
        if removed:
            forget(self.client, self.segment, removed[-1])

    # ------------------------------------------------------------------ reader updates
    def sync_reader(
        self,
        reader_id: str,
        token: int,
        epoch: int,
        acked: Sequence[Position],
        finished: Sequence[Position],
        fetch: bool = True,
    ) -> str | None:
        """A reader's sync: report, complete finished segments, rebalance, reach a checkpoint.

        ``acked`` are ``(segment, position, watermark)`` of its unfinished segments,
        ``finished`` ``(segment, end, final watermark)`` of those read to their sealed end.
        One batch per finished segment (each completion's successors are looked up
        against the state it applies to), usually one in all; nothing is appended when
        nothing changed. Returns the checkpoint the reader reached (it delivers the
        marker), or ``None``. Raises ``ReaderNotInGroupError`` if this incarnation is
        offline, ``StaleEpochError`` if the group left ``epoch``. With ``fetch`` it
        catches up with the log when it had nothing to append (a reader that watches the
        log with ``wait_any`` passes ``False`` while the log did not move).
        """
        reached: list[str] = []  # the checkpoint the last batch reached
        todo = list(finished)
        first, appended = True, False
        while True:
            fn = functools.partial(
                self._planner.sync_batch,
                reader_id,
                token,
                epoch,
                acked if first else (),
                todo[0] if todo else None,
                len(todo) <= 1,
                reached,
            )
            appended = self._update(fn) is not None or appended
            first = False
            if todo and not self.model.is_crossed(reader_id):
                todo.pop(0)
            else:
                todo.clear()
            if not todo:
                if not appended and fetch:  # nothing to say: learn what the others said
                    self.refresh()
                return reached[0] if reached else None

    def sync_report(
        self, reader_id: str, token: int, epoch: int, acked: Sequence[Position], layout: int
    ) -> bool | None:
        """``sync_reader`` of a reader with nothing to finish whose last sync, at this replica's ``layout``,
        left nothing to plan (``GroupModel.layout``): while the layout stands still, that sync is its
        report alone (one batch) or nothing. Returns whether every position it reported was applied;
        ``None`` (nothing appended) if the layout moved meanwhile: then ``sync_reader``."""

        def plan(m: GroupModel) -> tuple[Position, ...]:
            if m.layout != layout:
                raise _LayoutMoved
            return moved_positions(m, reader_id, acked)

        with self.lock:  # (``_update`` of ``[Report(reader_id, token, epoch, plan(m))]``, framed directly)
            try:
                ok = self._sync.update_report(reader_id, token, epoch, plan)
            except _LayoutMoved:
                return None
            finally:
                self._settle()
        return ok is None or ok

    def leave(
        self, reader_id: str, token: int, epoch: int, acked: Sequence[Position], finished: Sequence[Position]
    ) -> None:
        """A reader closes: report (and complete one finished segment), then leave; one batch.

        Past the active checkpoint's marker its positions are handed over with the
        removal, to apply when the checkpoint completes. Nothing if it is offline already.
        """

        self._update(functools.partial(self._planner.leave, reader_id, token, epoch, acked, finished))
        forget(self.client, self.segment, token)  # offline now, whoever removed it

    # ------------------------------------------------------------------ single updates (tools, tests)
    def _token_of(self, reader_id: str, token: int | None) -> int:
        if token is not None:
            return token
        slot = self.model.readers.get(reader_id)
        if slot is None:
            raise ReaderNotInGroupError(
                f"group {self.group!r}: reader {reader_id!r} is not online in the group"
            )
        return slot.token

    def _one(self, make: Callable[[GroupModel], Update], reader_id: str, token: int | None) -> Applied:
        """Append one update; ``make`` validates it against the replica (raising) and builds it."""
        with self.lock:
            t = self._token_of(reader_id, token)

            def fn(m: GroupModel) -> list[Update]:
                m.member(reader_id, t)
                return [make(m)]

            applied = self._update(fn)
            assert applied is not None
            return applied

    def report(self, reader_id: str, reports: Iterable[Position], token: int | None = None) -> None:
        """Acknowledged ``(segment, position, watermark there)`` of the reader's segments. One append."""
        reports = tuple(reports)

        def make(m: GroupModel) -> Update:
            m.check_positions(m.member(reader_id, self._token_of(reader_id, token)), reports, "reported")
            return Report(reader_id, self._token_of(reader_id, token), m.epoch, reports)

        self._one(make, reader_id, token)

    def complete(self, reader_id: str, name: str, final_watermark: int, token: int | None = None) -> None:
        """The reader processed segment ``name`` to its sealed end: drop it, register its successors."""
        self._one(
            lambda m: self._planner.complete(
                m, reader_id, self._token_of(reader_id, token), name, final_watermark
            ),
            reader_id,
            token,
        )

    def release(self, reader_id: str, name: str, token: int | None = None) -> None:
        """Return a segment (reported first) to the unassigned pool. One append."""

        def make(m: GroupModel) -> Update:
            t = self._token_of(reader_id, token)
            m.check_held(m.member(reader_id, t), name, "released")
            return Release(reader_id, t, m.epoch, (name,))

        self._one(make, reader_id, token)

    def acquire(self, reader_id: str, token: int | None = None) -> list[tuple[StreamSegment, int, int]]:
        """Take unassigned segments (``GroupModel.acquire_count``), oldest watermark first; returns them."""
        with self.lock:
            before = self.segments_of(reader_id)
            self._one(
                lambda m: Acquire(reader_id, self._token_of(reader_id, token), m.epoch), reader_id, token
            )
            m = self.model
            got = sorted((m.entries[n].watermark, n) for n in self.segments_of(reader_id) - before)
            return [(m.entries[n].seg, m.entries[n].position, m.entries[n].watermark) for _, n in got]

    def release_count(self, reader_id: str) -> int:
        """How many segments the reader should release now (0 during a checkpoint). O(readers)."""
        with self.lock:
            return self.model.release_count(reader_id)

    def checkpoint_reached(self, reader_id: str, name: str, token: int | None = None) -> None:
        """The reader (having reported its positions) reached checkpoint ``name``. One append."""
        self._one(
            lambda m: CheckpointReached(reader_id, self._token_of(reader_id, token), m.epoch, name),
            reader_id,
            token,
        )

    # ------------------------------------------------------------------ liveness
    def heartbeat(self, token: int) -> Heartbeat:
        """A heartbeat for the reader with ``token`` (``reader_timeout_ms`` > 0)."""
        return Heartbeat(self.client, self.segment, token, beat_interval(self.config.reader_timeout_ms))

    def sweep(self, now: int | None = None, force: bool = False) -> list[str]:
        """Declare offline the readers whose lease expired (at most once per beat interval); returns them.

        One ``get_attributes`` per sweep; per expired reader a fence and one update.
        """
        mon = self._monitor
        if mon is None:
            return []
        now = self.clock.now() if now is None else now
        if not force and now < self._next_sweep:
            return []
        self._next_sweep = now + beat_interval(mon.timeout_ms)
        with self.lock:
            members = self.members()
            if not members:
                return []
            values = self.client.get_attributes(self.segment, list(members.values()))
            gone: list[str] = []
            for rid, token, seen in mon.expired(members, values, now):
                if fence(self.client, self.segment, token, seen):
                    try:
                        self.remove_reader(rid, token=token)  # (forgets its heartbeat)
                        gone.append(rid)
                    except ReaderNotInGroupError:  # another process removed it first
                        forget(self.client, self.segment, token)
            return gone

    # ------------------------------------------------------------------ checkpoints
    def initiate_checkpoint(self, name: str) -> Future[Checkpoint]:
        """Queue a checkpoint; it completes when every reader online at its start has reached it."""
        if not isinstance(name, str) or not name:
            raise InvalidPositionError(f"group {self.group!r}: checkpoint name must be a non-empty str")
        epoch = 0

        def fn(m: GroupModel) -> list[Update]:
            nonlocal epoch
            if name in m.checkpoint_names:
                raise DuplicateCheckpointError(
                    f"group {self.group!r}: checkpoint {name!r} exists already in epoch {m.epoch}"
                )
            limit = m.config.max_outstanding_checkpoints
            if len(m.checkpoints) >= limit:
                waiting = ", ".join(repr(cp.name) for cp in m.checkpoints)
                raise MaxCheckpointsExceededError(
                    f"group {self.group!r}: cannot initiate checkpoint {name!r}: {len(m.checkpoints)} "
                    f"are in progress or queued ({waiting}), max_outstanding_checkpoints={limit}"
                )
            epoch = m.epoch
            return [InitiateCheckpoint(name, m.epoch)]

        with self.lock:
            try:
                applied = self._update(fn)
            except (MaxCheckpointsExceededError, DuplicateCheckpointError):
                # refused on this replica's view, which may be behind the log (checkpoints completed
                # or a reset in another process): refuse only what the latest state refuses
                if self.refresh() == 0:
                    raise
                applied = self._update(fn)
            assert applied is not None and applied.ok
            fut = self._checkpoints.add(applied.offset, epoch, name)  # its token: alone in its batch
            self._settle()  # with no reader online it is complete already
            return fut

    def _settle(self) -> None:
        """Complete or abort the futures of checkpoints this process initiated (after every batch)."""
        self._checkpoints.settle(self._sync.state)

    def _poll_futures(self) -> None:
        """What a waiting checkpoint future does: catch up with the log (which settles it)."""
        try:
            self.refresh()
        except ReaderGroupNotFoundError:
            with self.lock:
                self._checkpoints.abort_all("the group was deleted")
        except SegmentStoreError:
            pass  # the store is unreachable now: still not done

    # ------------------------------------------------------------------ reset (new epoch)
    def reset_to(self, cuts: Sequence[StreamCut], hints: Mapping[str, int]) -> int:
        """Start a new epoch at ``cuts``; streams without a cut stay at their acknowledged positions.

        Watermarks are materialised from the index (``watermark_at``), raised to ``hints``
        (checkpointed watermarks) where given. Every segment is unassigned; readers notice
        the epoch change on their next sync and drop everything they buffered. Returns
        the new epoch. Validated first: a bad target changes nothing. O(n) store calls.
        """
        epoch = 0

        def fn(m: GroupModel) -> list[Update]:
            nonlocal epoch
            reset = self._planner.reset(m, cuts, hints)
            epoch = reset.epoch
            return [reset]

        self._update(fn)
        return epoch

    def reset(self, positions: Sequence[tuple[str, int]], hints: Mapping[str, int]) -> int:
        """Start a new epoch at exactly ``positions`` (segment, offset); returns the epoch."""
        streams: dict[str, list[tuple[str, int]]] = {s: [] for s in self.streams}
        for name, offset in positions:
            streams.setdefault(self.client.get_segment(name).stream, []).append((name, offset))
        return self.reset_to([StreamCut(s, tuple(p)) for s, p in streams.items()], hints)

    @checked
    def _check(self) -> None:
        """Assert the state's invariants (called by property and stress tests)."""
        with self.lock:
            if self._event_time is not None:
                self._event_time._check()
            self._sync._check()
            self.model._check()
            if self._monitor is not None:
                self._monitor._check()
            self._checkpoints._check()
            assert all(e <= self.model.epoch for e in self._checkpoints.epochs())
