"""Stream metadata (Pravega's controller) on top of a ``SegmentStore``, persisted in ``_system/_streams``.

``StreamController`` is assembled from its concepts: stream changes and scaling
(``controller.scaling``), transactions (``controller.transactions``), scopes, configs,
truncation and epochs (``controller.admin``), and here the queries, opening (replay and
crash recovery) and ``controller_of``.

Persistence: every change appends one record (``u32`` length + JSON) to the system
segment ``_system/_streams``; a controller opened on a store replays the records and
then finishes whatever a crash interrupted (seals predecessors, completes transaction
commits, deletes a deleted stream's leftover segments). So the metadata is durable
whenever the store is. Appends are conditional on the segment's length: a second
controller writing to the same store makes the first one fail instead of diverge. The log
compacts itself between changes (``log_snapshots``), so a replay is O(metadata).
"""

from __future__ import annotations

import contextlib
import fnmatch
import threading
from typing import TYPE_CHECKING, Any

from ..checks import checked
from ..errors import DataCorruptionError, InvalidArgumentError, SegmentExistsError
from ..limits import MAX_PATTERN_CHARS, check_size
from ..store import per_store, read_to_tail
from ..stream_metadata import FRAMING_INGESTWM, StreamCut, StreamInfo, StreamSegment, SuccessorInfo
from .admin import StreamAdmin
from .log_snapshots import SNAPSHOT_OP, LogGrowth, SnapshotParts, sized, write_snapshot
from .model import StreamMetadata, parse_records
from .scaling import MAX_INITIAL_SEGMENTS, STREAMS_SEGMENT, ignore_missing
from .transactions import COMMITS_REMEMBERED, RecentNames, StreamTransactions

if TYPE_CHECKING:
    from ..store import SegmentStore

__all__ = [
    "StreamController",
    "STREAMS_SEGMENT",
    "MAX_INITIAL_SEGMENTS",
    "COMMITS_REMEMBERED",
    "COMPACT_MIN_BYTES",
    "SNAPSHOT_PART_BYTES",
    "controller_of",
]


COMPACT_MIN_BYTES = 1 << 20
"""The fewest bytes written since the last snapshot that make ``_system/_streams`` compact itself."""
SNAPSHOT_PART_BYTES = 1 << 20
"""The most JSON bytes of one of its ``snapshot`` records."""


class StreamController(StreamTransactions, StreamAdmin):
    """Streams, scaling, successors, cuts, transactions, scopes and configs over one store. Thread-safe.

    Opening replays ``_system/_streams`` (O(records)). Use ``controller_of(store)``
    to share one controller per store.
    """

    def __init__(self, store: SegmentStore) -> None:
        self._store = store
        self._lock = threading.RLock()
        self._meta = StreamMetadata()
        self._log_length = 0
        # transaction segments committed lately (from the commit and roll records): a commit
        # sent again after its reply was lost is answered as the first was
        self._committed = RecentNames(COMMITS_REMEMBERED)
        self._growth = LogGrowth()
        self._depth = 0
        self._unfinished = False
        with self._lock:
            self._open()

    # ------------------------------------------------------------------ queries
    def get_stream(self, stream: str) -> StreamInfo:
        """See ``StreamClient.get_stream``."""
        with self._lock:
            return self._get(stream).info()

    def list_streams(self, pattern: str | None = None) -> list[str]:
        """See ``StreamClient.list_streams``."""
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
        """See ``StreamClient.get_segment``."""
        with self._lock:
            return self._seg(segment_name)[1].info

    def get_successors(self, segment_name: str) -> tuple[SuccessorInfo, ...]:
        """See ``StreamClient.get_successors``."""
        with self._lock:
            st, seg = self._seg(segment_name)
            return tuple(
                SuccessorInfo(st.segments[n].info, st.segments[n].predecessors) for n in seg.successors
            )

    def get_head_cut(self, stream: str) -> StreamCut:
        """See ``StreamClient.get_head_cut``."""
        with self._lock:
            st = self._get(stream)
            return StreamCut(st.name, tuple((n, self._store.get_info(n).start_offset) for n in st.initial))

    def get_tail_cut(self, stream: str) -> StreamCut:
        """See ``StreamClient.get_tail_cut``."""
        with self._lock:
            st = self._get(stream)
            return StreamCut(st.name, tuple((s.name, self._store.get_info(s.name).length) for s in st.active))

    # ------------------------------------------------------------------ opening: replay and recovery
    def _open(self) -> None:
        """Create or replay ``_system/_streams``, then finish what a crash interrupted."""
        store = self._store
        if not store.exists(STREAMS_SEGMENT):
            with contextlib.suppress(SegmentExistsError):
                store.create_segment(STREAMS_SEGMENT)
        data, self._log_length = read_to_tail(store, STREAMS_SEGMENT)
        garbage: set[str] = set()
        commits: list[dict[str, Any]] = []
        rolls: list[dict[str, Any]] = []
        last: dict[str, int] = {}  # each stream's last record: only that one may be unfinished
        snap = SnapshotParts()
        for pos, size, rec in sized(parse_records(bytes(data), STREAMS_SEGMENT), len(data)):
            try:
                if rec["op"] == SNAPSHOT_OP:  # every change before it was finished when it was taken
                    items = snap.add(rec, size)
                    if items is not None:
                        self._meta = StreamMetadata.from_snapshot(items[: int(items[0]["streams"]) + 1])
                        self._committed = RecentNames(COMMITS_REMEMBERED)
                        for item in items[int(items[0]["streams"]) + 1 :]:
                            self._committed.add(str(n) for n in item["committed"])
                        garbage, commits, rolls, last = set(), [], [], {}
                        self._growth.snapshotted(snap.bytes)
                    continue
                snap.drop()
                self._growth.wrote(size)
                if rec["op"] == "delete" and rec["stream"] in self._meta.streams:
                    garbage |= set(self._meta.streams[rec["stream"]].segments)
                self._meta.apply(rec)
            except (KeyError, TypeError, ValueError, IndexError, AssertionError) as e:
                raise DataCorruptionError(f"{STREAMS_SEGMENT!r}: bad record at offset {pos}: {e!r}") from None
            if "stream" not in rec:  # a scope record
                continue
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

    # ------------------------------------------------------------------ compaction
    def _maybe_compact(self) -> None:
        """Compact when due (``log_snapshots``): amortised O(1) per record."""
        if self._growth.due(COMPACT_MIN_BYTES):
            self.compact()

    def compact(self) -> int:
        """Append a snapshot of the metadata (and of the commits remembered) and truncate the log where it
        begins; the bytes the log dropped. Only between changes: every change before it has finished.
        A refused write leaves a snapshot cut short, which the replay ignores. O(segments + commits)."""
        with self._lock:
            if self._depth or self._unfinished:
                raise InvalidArgumentError("the stream controller compacts its log only between changes")
            items = self._meta.snapshot_items()
            items[0]["streams"] = len(items) - 1
            names = list(self._committed)
            items += [{"committed": names[i : i + 1024]} for i in range(0, len(names), 1024)]
            length = lambda: self._log_length  # noqa: E731
            return write_snapshot(
                self._store, STREAMS_SEGMENT, items, SNAPSHOT_PART_BYTES, self._write, length, self._growth
            )

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
                    ignore_missing(self._store.delete, t)
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
        for st in self._meta.streams.values():  # a truncation the crash interrupted
            if st.cut:
                self._finish_truncation(st)

    # ------------------------------------------------------------------ invariants
    @checked
    def _check(self) -> None:
        """Assert the metadata's invariants, and that segments sealed in metadata are sealed in the store."""
        with self._lock:
            self._meta._check()
            for st in self._meta.streams.values():
                for n, seg in st.segments.items():
                    if seg.deleted:
                        assert not self._store.exists(n), (
                            f"{n} is truncated away in metadata, not in the store"
                        )
                    elif seg.sealed:
                        assert self._store.get_info(n).sealed, f"{n} is sealed in metadata, not in the store"
                    elif st.framing == FRAMING_INGESTWM:  # a Pravega client may seal a segment itself
                        assert not self._store.get_info(n).sealed, f"{n} is sealed in the store only"


_one_controller = per_store(StreamController)


def controller_of(store: SegmentStore) -> StreamController:
    """The store's one stream controller, opened (replaying ``_system/_streams``) on first use. O(1) after.

    Two controllers writing one store would make each other fail (their records are
    conditional appends), so every client of a store in this process shares this one.
    """
    return _one_controller(store)
