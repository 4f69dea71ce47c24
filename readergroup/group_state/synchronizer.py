"""``StateSynchronizer``: a replica of a state kept as a log of update batches in one store segment.

Pravega's state synchronizer, for the reader-group state (``GroupModel``). Every process
holds a replica: ``(state, revision)``, where ``revision`` is the offset after the last
batch it applied. ``fetch_updates()`` reads the batches after the revision and applies
them in log order. ``update(fn)`` runs ``fn(state) -> updates`` on the replica and
appends them as one batch *conditionally* at the revision (``expected_offset``): the
append succeeds only if no other process appended since, so ``fn`` saw exactly the
state the batch applies to. On a conflict (``BadOffsetError``) it fetches what the
others appended and runs ``fn`` again (bounded, with a short randomised back-off), so
concurrent updates serialise (optimistic concurrency: in a tight loop the process that
just appended tends to win again; readers' updates are paced by their report interval).
A lost reply (the outcome of the append is unknown) is
resolved by fetching: a batch carries its writer's origin and sequence number, so the
writer recognises its own batch in the log.

Compaction: the log starts with a ``Snapshot`` of the whole state. After
``snapshot_interval`` batches — and at least as many bytes of batches as the last
snapshot took, so snapshots of a large state stay a bounded share of what is written —
the process whose append crossed the line appends a new snapshot (conditionally, so of
two processes compacting at once only one succeeds) and truncates the segment at it; a
joiner reads from the segment's start
offset, which is always a snapshot. A replica that fell behind a truncation
(``SegmentTruncatedError``) loads the snapshot at the new start. A snapshot met in the
middle of the log replaces the replica after checking it equals it (a divergence is
counted, and fails ``_check()``).

A batch is applied only whole: an append is atomic in the store, and a frame that is
corrupt (bad magic, version or CRC) raises ``GroupStateCorruptError`` instead of being
applied. ``on_apply`` (if set) is called after every batch applied and every reload.
A log found gone — deleted, or another group's under the same name — is remembered in
``deleted``: from then on the replica raises ``ReaderGroupNotFoundError`` and never
appends again. Thread-safe under ``lock``; every store call happens under it.
"""

from __future__ import annotations

import contextlib
import random
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, overload

from segmentstore import (
    BadOffsetError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentStoreError,
    SegmentTruncatedError,
)
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient
from segmentstore.clock import monotonic_s
from segmentstore.errors import retriable

from ..errors import (
    GroupStateConflictError,
    GroupStateCorruptError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
)
from .group_updates import (
    Batch,
    Position,
    Report,
    ReportFramer,
    Snapshot,
    Update,
    decode_batches,
    encode_batch,
    encode_snapshot_batch,
    frame_length,
)

__all__ = ["Replica", "Applied", "SyncStats", "StateSynchronizer"]

_READ_BYTES = 1 << 20
_MAX_ATTEMPTS = 200  # of a reload racing truncations
_GIVE_UP_S = 30.0
"""An update gives up (``GroupStateConflictError``) after losing conditional appends this long."""


_ReportPlan = tuple[str, int, int, Callable[[Any], Sequence[Position]]]
"""``update_report``'s arguments: reader id, token, epoch, and the positions' plan."""


class Replica(Protocol):
    """What a synchronizer replicates: a state changed only by ``apply``, with a canonical form."""

    group_id: str

    def apply(self, u: Update, token: int) -> bool: ...

    def apply_report(self, reader_id: str, token: int, epoch: int, positions: Sequence[Position]) -> bool:
        """``apply(Report(reader_id, token, epoch, positions), at)``, without the record."""
        ...

    def to_obj(self) -> dict[str, Any]: ...

    def to_json(self) -> str:
        """``encode_json(self.to_obj())``."""
        ...


@dataclass(frozen=True, slots=True)
class Applied:
    """A batch this process appended: where it starts and which of its updates were accepted."""

    offset: int
    accepted: tuple[bool, ...]

    @property
    def ok(self) -> bool:
        return all(self.accepted)


@dataclass(slots=True)
class SyncStats:
    """Counters of one synchronizer (not replicated)."""

    appends: int = 0
    conflicts: int = 0
    lost_replies: int = 0
    batches_fetched: int = 0
    snapshots_written: int = 0
    reloads: int = 0
    diverged: int = 0


class StateSynchronizer:
    """One process's replica of a state log in ``segment``; create it with ``create`` or ``open``."""

    def __init__(
        self,
        client: SegmentStoreClient,
        segment: str,
        load: Callable[[dict[str, Any]], Replica],
        snapshot_interval: int,
    ) -> None:
        self.client = client
        self.segment = segment
        self.snapshot_interval = snapshot_interval
        self.lock = threading.RLock()
        self.origin = uuid.uuid4().hex[:16]
        self.stats = SyncStats()
        self._load = load
        self._seq = 0
        self._rng = random.Random()
        self._landed: dict[int, Applied] = {}  # seq -> our batch found in the log by a fetch
        self._framer: ReportFramer | None = None  # frames this process's reports (``update_report``)
        self.state: Any = None
        self.version = 0  # bumped by every batch applied and every reload: "the replica may have changed"
        self.revision = 0
        self.since_snapshot = 0  # batches after the last snapshot
        self.bytes_since_snapshot = 0
        self.snapshot_bytes = 0  # the last snapshot's frame
        self.snapshot_offset = 0
        self.on_apply: Callable[[], None] | None = None  # called after every batch applied and reload
        self.deleted: str | None = None  # why the group is known to be gone (deleted), once it is

    # ------------------------------------------------------------------ life cycle
    @classmethod
    def create(
        cls,
        client: SegmentStoreClient,
        segment: str,
        initial: Replica,
        load: Callable[[dict[str, Any]], Replica],
        snapshot_interval: int,
    ) -> StateSynchronizer:
        """Write ``initial`` as the log's first snapshot; ``ReaderGroupExistsError`` if a log is there."""
        s = cls(client, segment, load, snapshot_interval)
        with contextlib.suppress(SegmentExistsError):
            client.create_segment(segment)
        frame = encode_batch(initial.group_id, s.origin, 0, [Snapshot(initial.to_obj())])
        try:
            client.append(segment, frame, expected_offset=0)
        except BadOffsetError:
            raise ReaderGroupExistsError(f"reader group state {segment!r} exists already") from None
        s.state, s.revision, s.snapshot_bytes = initial, len(frame), len(frame)
        return s

    @classmethod
    def open(
        cls,
        client: SegmentStoreClient,
        segment: str,
        load: Callable[[dict[str, Any]], Replica],
        snapshot_interval: int | None = None,
    ) -> StateSynchronizer:
        """Load the log's snapshot and every batch after it. O(state + log)."""
        s = cls(client, segment, load, snapshot_interval or 1)
        s._reload()
        if snapshot_interval is None:
            s.snapshot_interval = int(s.state.config.state_snapshot_interval)
        s.fetch_updates()
        return s

    def _reload(self) -> None:
        """Start over from the snapshot at the segment's start offset."""
        for _ in range(_MAX_ATTEMPTS):
            try:
                info = self.client.get_info(self.segment)
                if info.length == info.start_offset:
                    raise self._gone("is empty")
                batches, _ = self._read_frames(info.start_offset, 1)
            except SegmentNotFoundError:
                raise self._gone("does not exist (deleted?)") from None
            except SegmentTruncatedError:
                continue  # compacted meanwhile: read the new start
            if not batches or not isinstance(batches[0].updates[0], Snapshot):
                raise GroupStateCorruptError(
                    f"group state {self.segment!r}: no snapshot at the start offset {info.start_offset}"
                )
            b = batches[0]
            if self.state is not None and b.group_id != self.state.group_id:
                raise self._gone(f"was deleted and created again (snapshot at {b.offset})")
            self.state = self._load_snapshot(b)
            self.revision = b.end
            self.since_snapshot = self.bytes_since_snapshot = 0
            self.snapshot_bytes = b.end - b.offset
            self.snapshot_offset = b.offset
            self.stats.reloads += 1
            self.version += 1
            if self.on_apply is not None:
                self.on_apply()
            return
        raise GroupStateConflictError(f"group state {self.segment!r}: kept being truncated while loading")

    def _gone(self, why: str) -> ReaderGroupNotFoundError:
        """The error for a log that is gone (deleted, or another group's now); remembered in
        ``deleted``, and ``version`` moves so every reader of this replica looks at it."""
        if self.deleted is None:
            self.deleted = f"reader group state {self.segment!r} {why}"
            self.version += 1
        return ReaderGroupNotFoundError(self.deleted)

    def mark_deleted(self) -> None:
        """This process deleted the group: its replica's readers fail on their next read."""
        with self.lock:
            self._gone("was deleted")

    # ------------------------------------------------------------------ reading
    def _read_frames(self, offset: int, limit: int | None = None) -> tuple[list[Batch], int]:
        """Whole frames from ``offset`` to the tail (at most ``limit``); returns them and the end offset."""
        out: list[Batch] = []
        buf = b""
        pos = offset  # offset of buf[0]
        while True:
            want = _READ_BYTES
            need = frame_length(buf)
            if need is not None and need > len(buf):
                want = max(want, need - len(buf))
            r = self.client.read(self.segment, pos + len(buf), want)
            buf += r.data
            batches, used = decode_batches(self.segment, buf, pos)
            for b in batches:
                self._check_shape(b)
            out += batches
            buf = buf[used:]
            pos += used
            if limit is not None and len(out) >= limit:
                return out[:limit], out[limit - 1].end
            if r.at_tail or not r.data:
                if buf and r.at_tail:  # appends are atomic: the tail is always at a frame's end
                    raise GroupStateCorruptError(
                        f"group state {self.segment!r}: {len(buf)} bytes at offset {pos} are no whole batch"
                    )
                return out, pos

    def fetch_updates(self) -> int:
        """Apply every batch appended since the revision, in log order; returns how many. O(new bytes)."""
        with self.lock:
            if self.deleted is not None:
                raise ReaderGroupNotFoundError(self.deleted)
            applied = 0
            while True:
                try:
                    batches, _ = self._read_frames(self.revision)
                except SegmentTruncatedError:
                    self._reload()
                    continue
                except SegmentNotFoundError:
                    raise self._gone("does not exist (deleted?)") from None
                except BadOffsetError as e:  # the log is shorter than what this replica applied
                    self._check_incarnation()  # another group of the same name: deleted, made again
                    raise GroupStateCorruptError(
                        f"group state {self.segment!r} ends at {e.expected}, below offset {self.revision} "
                        "that this process has already applied: the store lost updates it had acknowledged "
                        "(a data directory restored from an older copy, or a crash without sync); reopen "
                        "the group (ReaderGroup.open) to go on from what the store holds"
                    ) from None
                except GroupStateCorruptError:
                    self._check_incarnation()
                    raise
                for b in batches:
                    self._apply_batch(b)
                    applied += 1
                self.stats.batches_fetched += len(batches)
                return applied

    def _check_incarnation(self) -> None:
        """Raise ``ReaderGroupNotFoundError`` if the log now belongs to another group of the same name."""
        with contextlib.suppress(SegmentStoreError, GroupStateCorruptError):
            start = self.client.get_info(self.segment).start_offset
            batches, _ = self._read_frames(start, 1)
            if batches and batches[0].group_id != self.state.group_id:
                raise self._gone("was deleted and created again")

    def _check_shape(self, b: Batch) -> None:
        """A batch holds at least one update, and a snapshot only alone (it replaces the whole state)."""
        if not b.updates:
            raise GroupStateCorruptError(
                f"group state {self.segment!r}: batch at offset {b.offset} holds no update"
            )
        if len(b.updates) > 1 and any(isinstance(u, Snapshot) for u in b.updates):
            raise GroupStateCorruptError(
                f"group state {self.segment!r}: batch at offset {b.offset} holds a snapshot "
                "among other updates"
            )

    def _load_snapshot(self, b: Batch) -> Replica:
        """The state of snapshot batch ``b``; ``GroupStateCorruptError`` if it is no valid state. O(state)."""
        snap = b.updates[0]
        assert isinstance(snap, Snapshot)
        try:
            return self._load(snap.state)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            raise GroupStateCorruptError(
                f"group state {self.segment!r}: the snapshot at offset {b.offset} is no valid state: {e!r}"
            ) from None

    def _apply_batch(self, b: Batch) -> None:
        if b.group_id != self.state.group_id:
            raise self._gone(f"was deleted and created again (batch at {b.offset})")
        if len(b.updates) == 1 and isinstance(b.updates[0], Snapshot):
            loaded = self._load_snapshot(b)
            if loaded.to_obj() != self.state.to_obj():
                self.stats.diverged += 1
            self.state = loaded
            self.since_snapshot = self.bytes_since_snapshot = 0
            self.snapshot_bytes = b.end - b.offset
            self.snapshot_offset = b.offset
        else:
            accepted = tuple(self.state.apply(u, b.offset + i) for i, u in enumerate(b.updates))
            self.since_snapshot += 1
            self.bytes_since_snapshot += b.end - b.offset
            if b.origin == self.origin:
                self._landed[b.seq] = Applied(b.offset, accepted)
        self.revision = b.end
        self.version += 1
        if self.on_apply is not None:
            self.on_apply()

    def _apply_own(self, offset: int, end: int, updates: Sequence[Update]) -> Applied:
        """``_apply_batch`` of the batch this process just appended at ``offset`` (no snapshot: ``update``
        never appends one); what it applied. O(updates)."""
        apply = self.state.apply
        applied = Applied(offset, tuple([apply(u, offset + i) for i, u in enumerate(updates)]))
        self._own_applied(end)
        return applied

    def _own_applied(self, end: int) -> None:
        """The rest of ``_apply_own`` once the batch from the revision to ``end`` was applied. O(1)."""
        self.since_snapshot += 1
        self.bytes_since_snapshot += end - self.revision
        self.revision = end
        self.version += 1
        if self.on_apply is not None:
            self.on_apply()

    # ------------------------------------------------------------------ writing
    def update(self, fn: Callable[[Any], Sequence[Update]]) -> Applied | None:
        """Append ``fn(state)`` conditionally at the revision; on a conflict catch up and run ``fn`` again.

        ``fn`` may raise to give up (nothing is appended). Returns the appended batch, or
        ``None`` if ``fn`` returned no updates. After a success the replica includes the
        batch. Raises ``GroupStateConflictError`` after too many conflicts in a row.
        """
        return self._update(fn, None)

    def update_report(
        self, reader_id: str, token: int, epoch: int, plan: Callable[[Any], Sequence[Position]]
    ) -> bool | None:
        """``update(fn)`` with ``fn(state) = [Report(reader_id, token, epoch, plan(state))]``, or no update
        when ``plan`` finds no position: the same batch appended, byte for byte, on the same conditions
        (conflicts, lost replies), and the same replica after; framed by a ``ReportFramer`` and applied
        by ``apply_report``, without the record. Returns whether the report was accepted (``Applied.ok``),
        ``None`` if nothing was appended. O(positions) plus an append.
        """
        done = self._update(None, (reader_id, token, epoch, plan))
        return done if done is None or type(done) is bool else done.ok

    def _report_frame(
        self, seq: int, reader_id: str, token: int, epoch: int, positions: Sequence[Position]
    ) -> bytes:
        """``encode_batch`` of a batch of ``Report(reader_id, token, epoch, positions)``. O(positions)."""
        gid, origin, f = self.state.group_id, self.origin, self._framer
        if f is None or f.group_id != gid:
            f = self._framer = ReportFramer(gid, origin) if type(gid) is str and type(origin) is str else None
        frame = None if f is None else f.frame(seq, reader_id, token, epoch, positions)
        if frame is None:  # (a value of another type than a report holds)
            frame = encode_batch(gid, origin, seq, [Report(reader_id, token, epoch, tuple(positions))])
        return frame

    @overload
    def _update(self, fn: Callable[[Any], Sequence[Update]], report: None) -> Applied | None: ...

    @overload
    def _update(self, fn: None, report: _ReportPlan) -> Applied | bool | None: ...

    def _update(
        self, fn: Callable[[Any], Sequence[Update]] | None, report: _ReportPlan | None
    ) -> Applied | bool | None:
        """``update(fn)``, or when ``fn`` is ``None`` ``update_report(*report)``, which answers what its
        own append applied as a bool, not an ``Applied``."""
        with self.lock:
            if self.deleted is not None:  # never append to a log of the same name made again
                raise ReaderGroupNotFoundError(self.deleted)
            deadline = monotonic_s() + _GIVE_UP_S
            attempt = 0
            while attempt < 2 or monotonic_s() < deadline:
                attempt += 1
                if fn is not None:
                    updates = list(fn(self.state))
                    if not updates:
                        return None
                    self._seq += 1
                    seq = self._seq
                    frame = encode_batch(self.state.group_id, self.origin, seq, updates)
                else:
                    assert report is not None
                    rid, token, epoch, plan = report
                    positions = plan(self.state)
                    if not positions:
                        return None
                    self._seq += 1
                    seq = self._seq
                    frame = self._report_frame(seq, rid, token, epoch, positions)
                at = self.revision
                try:
                    self.client.append(self.segment, frame, expected_offset=at)
                except BadOffsetError:
                    self.stats.conflicts += 1
                    self._catch_up(attempt)
                    continue
                except SegmentNotFoundError:
                    raise self._gone("does not exist (deleted?)") from None
                except SegmentStoreError as e:
                    if not retriable(e, True):
                        raise
                    self.stats.lost_replies += 1  # did it land? the log tells
                    self._landed.clear()
                    self.fetch_updates()
                    done = self._landed.pop(seq, None)
                    if done is not None:
                        self.stats.appends += 1
                        self._after_append()
                        return done
                    continue
                self.stats.appends += 1
                if fn is None:
                    ok: bool = self.state.apply_report(rid, token, epoch, positions)
                    self._own_applied(at + len(frame))
                    self._after_append()
                    return ok
                done = self._apply_own(at, at + len(frame), updates)
                self._after_append()
                return done
            raise GroupStateConflictError(
                f"group state {self.segment!r}: update lost {attempt} conditional appends in a row "
                f"({_GIVE_UP_S:g} s) to other processes"
            )

    def _catch_up(self, attempt: int) -> None:
        self.fetch_updates()
        if attempt >= 1:  # a short randomised pause (growing to 2 ms) spreads contended retries
            threading.Event().wait(self._rng.uniform(0.0, min(0.002, 0.0002 * attempt)))

    def _after_append(self) -> None:
        if self.since_snapshot >= self.snapshot_interval and self.bytes_since_snapshot >= self.snapshot_bytes:
            self.compact()

    def compact(self) -> bool:
        """Append a snapshot of the replica at the revision and truncate the log there; whether it did.

        Conditional like any update: if another process appended (or compacted) first,
        nothing is written and the next update past the interval tries again. O(state).
        """
        with self.lock:
            if self.deleted is not None:
                return False
            self._seq += 1
            frame = encode_snapshot_batch(self.state.group_id, self.origin, self._seq, self.state.to_json())
            at = self.revision
            try:
                self.client.append(self.segment, frame, expected_offset=at)
            except BadOffsetError:
                return False
            except SegmentStoreError as e:
                if not retriable(e, True):
                    raise
                return False  # a lost reply: the next fetch shows whether it landed
            self.revision = at + len(frame)
            self.since_snapshot = self.bytes_since_snapshot = 0
            self.snapshot_bytes = len(frame)
            self.snapshot_offset = at
            self.stats.snapshots_written += 1
            with contextlib.suppress(BadOffsetError, SegmentTruncatedError):
                self.client.truncate(self.segment, at)  # below a later snapshot already: fine
            return True

    @checked
    def _check(self) -> None:
        """Assert the synchronizer's invariants: replicas never diverged, the revision is in the log."""
        assert self.stats.diverged == 0, "a snapshot in the log differs from this replica at its position"
        assert self.snapshot_offset < self.revision
        assert self.since_snapshot >= 0
