"""Stream metadata (Pravega's controller) on top of a ``SegmentStore``, persisted in ``_system/_streams``.

A stream ``scope/name`` is a set of segments whose routing-key ranges tile [0, 1).
Scaling seals some active segments and creates successors covering exactly their
ranges (split one into several, merge adjacent ones); successors are created first,
then the metadata record is written (the commit point), then the predecessors are
sealed. Every request is validated before anything changes.

Persistence: every change appends one record (``u32`` length + JSON) to the system
segment ``_system/_streams``; a controller opened on a store replays the records and
then finishes whatever a crash interrupted (seals predecessors, completes transaction
commits, deletes a deleted stream's leftover segments). So the metadata is durable
whenever the store is. Appends are conditional on the segment's length: a second
controller writing to the same store makes the first one fail instead of diverge.

Transactions: ``begin_transaction`` creates one transaction segment per active
segment. ``commit_transaction`` seals each and merges it into its parent. If the
stream scaled since the transaction began (a parent is sealed), the commit is *rolled*
as Pravega does: the active segments are sealed and succeeded by duplicates of the
transaction's epoch (same key ranges) that receive the transaction's data, and those
are then sealed and succeeded by duplicates of the previously active ranges. Readers
thus see the transaction's events after every event written before the commit, in
per-routing-key order, and the stream keeps its key-range layout. A commit on a sealed
stream raises ``StreamSealedError`` (abort the transaction instead).
"""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..checks import checked
from ..core.segment import TRANSACTION_SEPARATOR
from ..errors import (
    BadOffsetError,
    DataCorruptionError,
    InvalidArgumentError,
    InvalidScaleError,
    NotATransactionError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStoreError,
    SegmentTruncatedError,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
)
from ..limits import MAX_PATTERN_CHARS, MAX_STREAM_SEGMENTS, check_size, shorten
from ..stream_metadata import (
    StreamCut,
    StreamInfo,
    StreamSegment,
    SuccessorInfo,
    TransactionInfo,
    TransactionSegment,
    check_stream_name,
    stream_segment_name,
)
from .model import (
    SegmentEntry,
    StreamEntry,
    StreamMetadata,
    encode_record,
    parse_records,
    plan_scale,
    segment_record,
)

if TYPE_CHECKING:
    from ..store import SegmentStore

__all__ = [
    "StreamController",
    "STREAMS_SEGMENT",
    "MAX_INITIAL_SEGMENTS",
    "COMMITS_REMEMBERED",
    "controller_of",
]

STREAMS_SEGMENT = "_system/_streams"
"""The system segment holding the controller's records."""

MAX_INITIAL_SEGMENTS = MAX_STREAM_SEGMENTS
"""Segments ``create_stream`` makes at most (``limits.MAX_STREAM_SEGMENTS``)."""
COMMITS_REMEMBERED = 65_536
"""Transaction segments whose commit a resent ``commit_transaction`` is recognised by (the latest)."""

_ROLL_WRITER_ID = -(2**62)
"""Writer id of the transaction-data copies of a rolled commit (dedupes a copy redone after a crash)."""


class StreamController:
    """Streams, scaling, successors, stream cuts and transactions over one store. Thread-safe.

    Opening replays ``_system/_streams`` (O(records)). Use ``SegmentStore.stream_controller()``
    to share one controller per store.
    """

    def __init__(self, store: SegmentStore) -> None:
        self._store = store
        self._lock = threading.RLock()
        self._meta = StreamMetadata()
        self._log_length = 0
        # transaction segments committed lately (from the commit and roll records): a commit
        # sent again after its reply was lost is answered as the first was
        self._committed = _RecentNames(COMMITS_REMEMBERED)
        with self._lock:
            self._open()

    # ------------------------------------------------------------------ queries
    def get_stream(self, stream: str) -> StreamInfo:
        """The stream's state and active segments. O(active)."""
        with self._lock:
            return self._get(stream).info()

    def list_streams(self, pattern: str | None = None) -> list[str]:
        """Names of the streams matching the fnmatch ``pattern`` (all if ``None``), sorted. O(streams)."""
        if pattern is not None and not isinstance(pattern, str):
            raise InvalidArgumentError(f"stream pattern must be a str or None, got {pattern!r:.80}")
        if pattern is not None:
            check_size(
                "the stream pattern", len(pattern), MAX_PATTERN_CHARS, "MAX_PATTERN_CHARS", "characters"
            )
        with self._lock:
            names = list(self._meta.streams)
        if pattern is not None:
            names = fnmatch.filter(names, pattern)
        return sorted(names)

    def get_segment(self, segment_name: str) -> StreamSegment:
        """The stream segment called ``segment_name`` (active or sealed). O(1)."""
        with self._lock:
            return self._seg(segment_name)[1].info

    def get_successors(self, segment_name: str) -> tuple[SuccessorInfo, ...]:
        """Successors of a segment sealed by a scale, with all their predecessors; else ``()``. O(k)."""
        with self._lock:
            st, seg = self._seg(segment_name)
            return tuple(
                SuccessorInfo(st.segments[n].info, st.segments[n].predecessors) for n in seg.successors
            )

    def get_head_cut(self, stream: str) -> StreamCut:
        """The stream's first segments at their start offsets (truncation-aware). O(segments)."""
        with self._lock:
            st = self._get(stream)
            return StreamCut(st.name, tuple((n, self._store.get_info(n).start_offset) for n in st.initial))

    def get_tail_cut(self, stream: str) -> StreamCut:
        """The active segments at their current lengths. O(active)."""
        with self._lock:
            st = self._get(stream)
            return StreamCut(st.name, tuple((s.name, self._store.get_info(s.name).length) for s in st.active))

    # ------------------------------------------------------------------ changes
    def create_stream(self, stream: str, initial_segments: int = 1) -> StreamInfo:
        """Create ``stream`` with ``initial_segments`` segments splitting [0, 1) evenly."""
        check_stream_name(stream)
        n = initial_segments
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_INITIAL_SEGMENTS:
            raise InvalidArgumentError(
                f"stream {stream!r}: initial_segments must be an int in "
                f"[1, {MAX_INITIAL_SEGMENTS}] (segmentstore.limits.MAX_STREAM_SEGMENTS), got {n!r:.40}"
            )
        with self._lock:
            if stream in self._meta.streams:
                raise StreamExistsError(f"stream {stream!r} exists already")
            ranges = [(i / n, (i + 1) / n if i + 1 < n else 1.0) for i in range(n)]
            segs = self._create_segments(stream, 0, 0, ranges)
            rec = {"op": "create", "stream": stream, "segs": [segment_record(s) for s in segs]}
            self._commit(rec, [s.name for s in segs])
            return self._meta.streams[stream].info()

    def scale_stream(
        self, stream: str, seal: Sequence[str], new_ranges: Sequence[tuple[float, float]]
    ) -> tuple[StreamSegment, ...]:
        """Seal the active segments ``seal`` and create successors over ``new_ranges``; returns them."""
        with self._lock:
            st = self._get_open(stream, "scaled")
            if isinstance(seal, str) or not isinstance(seal, Sequence) or not seal:
                raise InvalidScaleError(
                    f"stream {stream!r}: seal must be a non-empty sequence of segment names"
                )
            bad = next((n for n in seal if not isinstance(n, str)), None)
            if bad is not None:
                raise InvalidScaleError(f"stream {stream!r}: segment name {bad!r} is not a str")
            if len(set(seal)) != len(seal):
                raise InvalidScaleError(f"stream {stream!r}: seal names a segment twice: {list(seal)}")
            active = {s.name: s for s in st.active}
            sealed: list[StreamSegment] = []
            for name in seal:
                if name not in active:
                    why = "is sealed already" if name in st.segments else "is not a segment of the stream"
                    raise InvalidScaleError(f"stream {stream!r}: segment {name!r} {why}")
                sealed.append(active[name])
            if not isinstance(new_ranges, (str, bytes)) and isinstance(new_ranges, Sequence):
                check_size(
                    f"stream {stream!r}: scaling to {len(st.active) - len(sealed)} kept and "
                    f"{len(new_ranges)} new segments, the stream",
                    len(st.active) - len(sealed) + len(new_ranges),
                    MAX_STREAM_SEGMENTS,
                    "MAX_STREAM_SEGMENTS",
                    "active segments",
                )
            ranges = plan_scale(stream, sealed, new_ranges)
            return self._scale(st, sealed, ranges)

    def seal_stream(self, stream: str) -> None:
        """Seal every active segment of the stream; no more writes, scales or commits. Idempotent."""
        with self._lock:
            st = self._get(stream)
            if not st.sealed:
                self._write({"op": "seal", "stream": stream})
                self._meta.apply({"op": "seal", "stream": stream})
            for s in st.active:
                self._seal_segment(s.name)

    def delete_stream(self, stream: str) -> None:
        """Delete a sealed stream and all its segments (Pravega: seal it first)."""
        with self._lock:
            st = self._get(stream)
            if not st.sealed:
                raise StreamNotSealedError(f"stream {stream!r} must be sealed before it is deleted")
            names = set(st.segments)
            self._write({"op": "delete", "stream": stream})
            self._meta.apply({"op": "delete", "stream": stream})
            self._delete_segments(names)

    # ------------------------------------------------------------------ transactions
    def begin_transaction(self, stream: str) -> TransactionInfo:
        """One transaction segment per active segment of the stream."""
        with self._lock:
            st = self._get_open(stream, "given a transaction")
            made: list[TransactionSegment] = []
            try:
                for s in st.active:
                    made.append(TransactionSegment(s, self._store.create_transaction(s.name)))
            except BaseException:
                for t in made:
                    _ignore_missing(self._store.delete, t.name)
                raise
            return TransactionInfo(st.name, st.epoch, tuple(made))

    def commit_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """Seal and merge each transaction segment into its parent; rolled if the stream scaled meanwhile.

        Idempotent: a transaction committed already is not merged again (the call returns).
        """
        with self._lock:
            names = _names(stream, txn_segments)
            if names and self._committed.holds(names):
                self._get(stream)
                return
            st = self._get_open(stream, "committed to")
            txns = self._check_txns(st, txn_segments)
            parents = [st.segments[p].info for _, p, _ in txns]
            covered = sorted((p.key_low, p.key_high) for p in parents)
            if (
                covered[0][0] != 0.0
                or covered[-1][1] != 1.0
                or any(a[1] != b[0] for a, b in itertools.pairwise(covered))
            ):
                raise InvalidArgumentError(
                    f"stream {stream!r}: the transaction segments' parents {sorted(p.name for p in parents)} "
                    "do not tile [0, 1); pass every segment of the transaction"
                )
            if all(not st.segments[p].sealed for _, p, _ in txns):
                for _, p, _ in txns:
                    if self._store.get_info(p).sealed:
                        raise SegmentSealedError(
                            f"segment {p!r} of stream {stream!r} was sealed outside the controller; "
                            "the transaction cannot be merged into it"
                        )
                self._write({"op": "commit", "stream": stream, "txns": [t for t, _, _ in txns]})
                self._committed.add(t for t, _, _ in txns)
                for t, p, _ in txns:
                    self._merge(t, p)
            else:
                self._roll(st, txns)

    def abort_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """Delete the transaction segments that still exist (idempotent)."""
        with self._lock:
            st = self._get(stream)
            live = [n for n in _names(stream, txn_segments) if self._store.exists(n)]
            self._check_txns(st, live, allow_empty=True)
            for n in live:
                _ignore_missing(self._store.delete, n)

    # ------------------------------------------------------------------ internals: lookups
    def _get(self, stream: str) -> StreamEntry:
        try:
            return self._meta.streams[stream]
        except (KeyError, TypeError):
            raise StreamNotFoundError(f"stream {shorten(stream)} does not exist") from None

    def _get_open(self, stream: str, what: str) -> StreamEntry:
        st = self._get(stream)
        if st.sealed:
            raise StreamSealedError(f"stream {stream!r} is sealed; it cannot be {what}")
        return st

    def _seg(self, name: str) -> tuple[StreamEntry, SegmentEntry]:
        try:
            st = self._meta.by_segment[name]
        except (KeyError, TypeError):
            raise SegmentNotFoundError(f"segment {shorten(name)} is not a segment of any stream") from None
        return st, st.segments[name]

    def _check_txns(
        self, st: StreamEntry, names: Sequence[str], allow_empty: bool = False
    ) -> list[tuple[str, str, int]]:
        """Validate transaction segments of ``st``: ``[(txn, parent, length)]``, parents distinct."""
        names = _names(st.name, names)
        if not names and not allow_empty:
            raise InvalidArgumentError(f"stream {st.name!r}: no transaction segments given")
        out: list[tuple[str, str, int]] = []
        for n in names:
            info = self._store.get_info(n)
            if info.parent is None:
                raise NotATransactionError(f"segment {n!r} is not a transaction segment")
            if info.parent not in st.segments:
                raise InvalidArgumentError(
                    f"transaction {n!r} belongs to segment {info.parent!r}, not to stream {st.name!r}"
                )
            if info.start_offset != 0:
                raise SegmentTruncatedError(f"transaction {n!r} was truncated; it cannot be committed")
            out.append((n, info.parent, info.length))
        if len({p for _, p, _ in out}) != len(out):
            raise InvalidArgumentError(
                f"stream {st.name!r}: two transaction segments share a parent: {names}"
            )
        return out

    # ------------------------------------------------------------------ internals: changes
    def _create_segments(
        self, stream: str, first_number: int, epoch: int, ranges: list[tuple[float, float]]
    ) -> list[StreamSegment]:
        """Create store segments for ``ranges`` (adopting empty leftovers of a crash); all or none."""
        made: list[StreamSegment] = []
        try:
            for i, (lo, hi) in enumerate(ranges):
                name = stream_segment_name(stream, first_number + i, epoch)
                try:
                    info = self._store.create_segment(name)
                except SegmentExistsError:
                    old = self._store.get_info(name)
                    if name in self._meta.by_segment or old.length or old.sealed:
                        raise SegmentExistsError(
                            f"stream {stream!r}: segment {name!r} exists already and holds data"
                        ) from None
                    self._store.delete(name)  # an empty leftover of an interrupted change
                    info = self._store.create_segment(name)
                made.append(StreamSegment(stream, first_number + i, epoch, name, lo, hi, info.creation_time))
        except BaseException:
            for s in made:
                _ignore_missing(self._store.delete, s.name)
            raise
        return made

    def _commit(self, rec: dict[str, Any], created: list[str]) -> None:
        """Write ``rec`` (deleting ``created`` if that fails), then apply it in memory."""
        try:
            self._write(rec)
        except BaseException:
            for n in created:
                _ignore_missing(self._store.delete, n)
            raise
        self._meta.apply(rec)

    def _scale(
        self,
        st: StreamEntry,
        sealed: list[StreamSegment],
        ranges: list[tuple[float, float]],
        extra: dict[str, Any] | None = None,
    ) -> tuple[StreamSegment, ...]:
        epoch = st.epoch + 1
        new = self._create_segments(st.name, st.next_number, epoch, ranges)
        rec: dict[str, Any] = {
            "op": "scale",
            "stream": st.name,
            "epoch": epoch,
            "seal": [s.name for s in sealed],
            "segs": [segment_record(s) for s in new],
        }
        if extra:
            rec.update(extra)
        self._commit(rec, [s.name for s in new])
        for s in sealed:
            self._seal_segment(s.name)
        return tuple(new)

    def _roll(self, st: StreamEntry, txns: list[tuple[str, str, int]]) -> None:
        """Commit a transaction of an older epoch: active -> duplicates of its epoch -> active ranges."""
        with_data = [(t, p) for t, p, n in txns if n > 0]
        if not with_data:  # nothing to commit: the transaction was empty
            self._committed.add(t for t, _, _ in txns)
            for t, _, _ in txns:
                _ignore_missing(self._store.delete, t)
            return
        parents = sorted((st.segments[p].info for _, p, _ in txns), key=lambda s: s.key_low)
        restore = [[s.key_low, s.key_high] for s in st.active]
        new_numbers = {p.name: st.next_number + i for i, p in enumerate(parents)}
        epoch = st.epoch + 1
        mapping = [[t, stream_segment_name(st.name, new_numbers[p], epoch)] for t, p in with_data]
        self._scale(
            st,
            list(st.active),
            [(p.key_low, p.key_high) for p in parents],
            {"op": "roll", "txns": mapping, "restore": restore, "drop": [t for t, _, _ in txns]},
        )
        self._committed.add(t for t, _, _ in txns)
        self._finish_roll(st, mapping, [t for t, _, _ in txns], restore, epoch)

    def _finish_roll(
        self,
        st: StreamEntry,
        mapping: list[list[str]],
        drop: list[str],
        restore: list[list[float]] | None,
        epoch: int,
    ) -> None:
        """Copy each transaction's data into its duplicate, drop the transactions, restore the layout."""
        for txn, target in mapping:
            if self._store.exists(txn) and not self._store.get_info(target).sealed:
                self._copy(txn, target)
        for t in drop:
            _ignore_missing(self._store.delete, t)
        current = [[s.key_low, s.key_high] for s in st.active]
        if restore is not None and not st.sealed and st.epoch == epoch and current != restore:
            self._scale(st, list(st.active), [(lo, hi) for lo, hi in restore])

    def _copy(self, txn: str, target: str) -> None:
        """Append ``txn``'s bytes to ``target`` in chunks deduplicated by chunk number. O(bytes)."""
        if not self._store.get_info(txn).sealed:
            self._store.seal(txn)
        chunk = min(self._store.config.max_append_bytes, 1 << 20)
        offset, number = 0, 0
        while True:
            r = self._store.read(txn, offset, chunk)
            if r.data:
                number += 1
                self._store.append(target, r.data, writer_id=_ROLL_WRITER_ID, event_number=number)
                offset += len(r.data)
            if r.at_tail:
                return

    def _merge(self, txn: str, parent: str) -> None:
        if not self._store.exists(txn):
            return
        if not self._store.get_info(txn).sealed:
            self._store.seal(txn)
        self._store.merge_transaction(txn, parent)

    def _seal_segment(self, name: str) -> None:
        with contextlib.suppress(SegmentSealedError, SegmentNotFoundError):
            self._store.seal(name)

    def _delete_segments(self, names: set[str]) -> None:
        """Delete ``names`` and their transaction segments where they exist. O(store segments)."""
        for n in self._store.list_segments():
            head = n.split(TRANSACTION_SEPARATOR, 1)[0]
            if head in names and head != n:
                _ignore_missing(self._store.delete, n)
        for n in sorted(names):
            _ignore_missing(self._store.delete, n)

    # ------------------------------------------------------------------ records
    def _write(self, rec: dict[str, Any]) -> None:
        try:
            r = self._store.append(STREAMS_SEGMENT, encode_record(rec), self._log_length)
        except BadOffsetError:
            raise SegmentStoreError(
                f"{STREAMS_SEGMENT!r} was changed by another stream controller of this store; "
                "this one is stale (share one via SegmentStore.stream_controller())"
            ) from None
        self._log_length = r.offset + r.length

    def _open(self) -> None:
        """Create or replay ``_system/_streams``, then finish what a crash interrupted."""
        store = self._store
        if not store.exists(STREAMS_SEGMENT):
            with contextlib.suppress(SegmentExistsError):
                store.create_segment(STREAMS_SEGMENT)
        data = bytearray()
        offset = store.get_info(STREAMS_SEGMENT).start_offset
        while True:
            r = store.read(STREAMS_SEGMENT, offset, store.config.max_append_bytes)
            data += r.data
            offset += len(r.data)
            if r.at_tail:
                break
        self._log_length = offset
        garbage: set[str] = set()
        commits: list[dict[str, Any]] = []
        rolls: list[dict[str, Any]] = []
        last: dict[str, int] = {}  # each stream's last record: only that one may be unfinished
        for pos, rec in parse_records(bytes(data), STREAMS_SEGMENT):
            try:
                if rec["op"] == "delete" and rec["stream"] in self._meta.streams:
                    garbage |= set(self._meta.streams[rec["stream"]].segments)
                self._meta.apply(rec)
            except (KeyError, TypeError, ValueError, IndexError) as e:
                raise DataCorruptionError(f"{STREAMS_SEGMENT!r}: bad record at offset {pos}: {e!r}") from None
            last[rec["stream"]] = pos
            if rec["op"] == "commit":
                commits.append(rec)
                self._committed.add(rec["txns"])
            elif rec["op"] == "roll":
                rolls.append({**rec, "pos": pos})
                self._committed.add(rec["drop"])
        for roll in rolls:
            roll["last"] = last[roll["stream"]] == roll["pos"]
        self._recover(garbage, commits, rolls)

    def _recover(self, garbage: set[str], commits: list[dict[str, Any]], rolls: list[dict[str, Any]]) -> None:
        pending = {target for r in rolls for txn, target in r["txns"] if self._store.exists(txn)}
        for st in self._meta.streams.values():  # predecessors first: a rolled commit copies after them
            for n, seg in st.segments.items():
                if seg.sealed and n not in pending and self._store.exists(n):
                    self._seal_segment(n)
        for r in rolls:
            rolled = self._meta.streams.get(r["stream"])
            if rolled is not None:
                restore = r["restore"] if r["last"] else None
                self._finish_roll(rolled, r["txns"], r["drop"], restore, r["epoch"])
            else:
                for t in r["drop"]:
                    _ignore_missing(self._store.delete, t)
        for c in commits:
            live = c["stream"] in self._meta.streams
            for t in c["txns"]:
                if live and self._store.exists(t):
                    parent = self._store.get_info(t).parent
                    if parent is not None and not self._store.get_info(parent).sealed:
                        self._merge(t, parent)
        for st in self._meta.streams.values():
            for n, seg in st.segments.items():
                if seg.sealed and n in pending:
                    self._seal_segment(n)
        self._delete_segments(garbage - set(self._meta.by_segment))

    # ------------------------------------------------------------------ invariants
    @checked
    def _check(self) -> None:
        """Assert the metadata's invariants, and that segments sealed in metadata are sealed in the store."""
        with self._lock:
            self._meta._check()
            for st in self._meta.streams.values():
                for n, seg in st.segments.items():
                    if seg.sealed:
                        assert self._store.get_info(n).sealed, f"{n} is sealed in metadata, not in the store"
                    else:
                        assert not self._store.get_info(n).sealed, f"{n} is sealed in the store only"


def _names(stream: str, names: Sequence[str]) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise InvalidArgumentError(f"stream {stream!r}: transaction segments must be a sequence of names")
    check_size(
        f"stream {stream!r}: the list of transaction segments",
        len(names),
        MAX_STREAM_SEGMENTS,
        "MAX_STREAM_SEGMENTS",
        "items",
    )
    out = list(names)
    for n in out:
        if not isinstance(n, str):
            raise InvalidArgumentError(f"stream {stream!r}: transaction segment name {n!r:.80} is not a str")
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"stream {stream!r}: a transaction segment is named twice: {out}")
    return out


def _ignore_missing(fn: Any, name: str) -> None:
    with contextlib.suppress(SegmentNotFoundError):
        fn(name)


_CONTROLLERS: weakref.WeakKeyDictionary[SegmentStore, StreamController] = weakref.WeakKeyDictionary()
_CONTROLLERS_LOCK = threading.Lock()


class _RecentNames:
    """The last ``cap`` names added, oldest dropped first. O(1) per name; memory O(cap)."""

    __slots__ = ("_cap", "_names")

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._names: dict[str, None] = {}

    def add(self, names: Iterable[str]) -> None:
        for n in names:
            self._names.pop(n, None)
            self._names[n] = None
        while len(self._names) > self._cap:
            del self._names[next(iter(self._names))]

    def holds(self, names: Iterable[str]) -> bool:
        return all(n in self._names for n in names)

    def __len__(self) -> int:
        return len(self._names)


def controller_of(store: SegmentStore) -> StreamController:
    """The store's one stream controller, opened (replaying ``_system/_streams``) on first use. O(1) after.

    Two controllers writing one store would make each other fail (their records are
    conditional appends), so every client of a store in this process shares this one.
    """
    ctl = _CONTROLLERS.get(store)
    if ctl is None:
        with _CONTROLLERS_LOCK:
            ctl = _CONTROLLERS.get(store)
            if ctl is None:
                ctl = _CONTROLLERS[store] = StreamController(store)
    return ctl
