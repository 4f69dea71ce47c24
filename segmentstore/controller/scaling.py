"""The controller's stream changes: create, scale, seal and delete a stream, each one record.

A stream ``scope/name`` is a set of segments whose routing-key ranges tile [0, 1).
Scaling seals some active segments and creates successors covering exactly their
ranges (split one into several, merge adjacent ones); successors are created first,
then the metadata record is written (the commit point), then the predecessors are
sealed. Every request is validated before anything changes. ``StreamScaling`` also
holds what every part of the controller (``controller.controller``) shares: its
store, lock and metadata, the lookups, and the conditional append of a record.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..core.segment import TRANSACTION_SEPARATOR
from ..errors import (
    BadOffsetError,
    InvalidArgumentError,
    InvalidScaleError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStoreError,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
)
from ..limits import MAX_STREAM_SEGMENTS, check_size, shorten
from ..stream_metadata import (
    FRAMING_INGESTWM,
    StreamInfo,
    StreamSegment,
    check_stream_name,
    stream_segment_name,
)
from .log_snapshots import LogGrowth
from .model import SegmentEntry, StreamEntry, StreamMetadata, encode_record, plan_scale, segment_record
from .stream_config import StreamConfig, default_config

if TYPE_CHECKING:
    from ..store import SegmentStore

__all__ = ["StreamScaling", "STREAMS_SEGMENT", "MAX_INITIAL_SEGMENTS"]

STREAMS_SEGMENT = "_system/_streams"
"""The system segment holding the controller's records."""

MAX_INITIAL_SEGMENTS = MAX_STREAM_SEGMENTS
"""Segments ``create_stream`` makes at most (``limits.MAX_STREAM_SEGMENTS``)."""


class StreamScaling:
    """Stream changes and the state every part of ``StreamController`` shares. Not used alone."""

    _store: SegmentStore
    _lock: threading.RLock
    _meta: StreamMetadata
    _log_length: int
    _growth: LogGrowth
    """The log's growth since its last snapshot (``log_snapshots``)."""
    _depth: int
    """Changes under way in this thread (``_mutating``, nested)."""
    _unfinished: bool
    """A change failed after writing a record: no compaction until the next opening."""

    # ------------------------------------------------------------------ changes
    def create_stream(self, stream: str, initial_segments: int = 1) -> StreamInfo:
        """See ``StreamClient.create_stream``."""
        check_stream_name(stream)
        n = initial_segments
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_INITIAL_SEGMENTS:
            raise InvalidArgumentError(
                f"stream {stream!r}: initial_segments must be an int in "
                f"[1, {MAX_INITIAL_SEGMENTS}] (segmentstore.limits.MAX_STREAM_SEGMENTS), got {n!r:.40}"
            )
        with self._mutating():
            if stream in self._meta.streams:
                raise StreamExistsError(f"stream {stream!r} exists already")
            return self._create(stream, n, FRAMING_INGESTWM, None)

    def _create(self, stream: str, n: int, framing: str, config: StreamConfig | None) -> StreamInfo:
        """Create ``n`` segments splitting [0, 1) evenly and write the record (``config`` None: the
        ingestwm default). A record of an ingestwm stream with the default config is as older builds
        wrote it (no ``framing``, no ``config``)."""
        ranges = [(i / n, (i + 1) / n if i + 1 < n else 1.0) for i in range(n)]
        segs = self._create_segments(stream, 0, 0, ranges)
        rec: dict[str, Any] = {"op": "create", "stream": stream, "segs": [segment_record(s) for s in segs]}
        if framing != FRAMING_INGESTWM or (config is not None and config != default_config(n)):
            rec["framing"] = framing
            rec["config"] = (config or default_config(n)).to_record()
        self._commit(rec, [s.name for s in segs])
        return self._meta.streams[stream].info()

    def scale_stream(
        self, stream: str, seal: Sequence[str], new_ranges: Sequence[tuple[float, float]]
    ) -> tuple[StreamSegment, ...]:
        """See ``StreamClient.scale_stream``."""
        with self._mutating():
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
        """See ``StreamClient.seal_stream``."""
        with self._mutating():
            st = self._get(stream)
            if not st.sealed:
                self._write({"op": "seal", "stream": stream})
                self._meta.apply({"op": "seal", "stream": stream})
            for s in st.active:
                self._seal_segment(s.name)

    def delete_stream(self, stream: str) -> None:
        """See ``StreamClient.delete_stream``."""
        with self._mutating():
            st = self._get(stream)
            if not st.sealed:
                raise StreamNotSealedError(f"stream {stream!r} must be sealed before it is deleted")
            names = set(st.segments)
            self._write({"op": "delete", "stream": stream})
            self._meta.apply({"op": "delete", "stream": stream})
            self._delete_segments(names)

    # ------------------------------------------------------------------ lookups
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

    # ------------------------------------------------------------------ segment changes
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
                ignore_missing(self._store.delete, s.name)
            raise
        return made

    def _commit(self, rec: dict[str, Any], created: list[str]) -> None:
        """Write ``rec`` (deleting ``created`` if that fails), then apply it in memory."""
        try:
            self._write(rec)
        except BaseException:
            for n in created:
                ignore_missing(self._store.delete, n)
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

    def _seal_segment(self, name: str) -> None:
        with contextlib.suppress(SegmentSealedError, SegmentNotFoundError):
            self._store.seal(name)

    def _delete_segments(self, names: set[str]) -> None:
        """Delete ``names`` and their transaction segments where they exist. O(store segments)."""
        for n in self._store.list_segments():
            head = n.split(TRANSACTION_SEPARATOR, 1)[0]
            if head in names and head != n:
                ignore_missing(self._store.delete, n)
        for n in sorted(names):
            ignore_missing(self._store.delete, n)

    # ------------------------------------------------------------------ records
    @contextlib.contextmanager
    def _mutating(self) -> Iterator[None]:
        """Hold the lock for one change; after the outermost change ends well, compact the log if due
        (``log_snapshots``). A change that failed after writing a record may need the replay to finish
        it: the log is not compacted again in this process."""
        with self._lock:
            self._depth += 1
            written = self._log_length
            try:
                yield
            except BaseException:
                if self._log_length != written:
                    self._unfinished = True
                raise
            finally:
                self._depth -= 1
            if self._depth == 0 and not self._unfinished:
                self._maybe_compact()

    def _maybe_compact(self) -> None:
        """Implemented by ``StreamController``."""

    def _write(self, rec: dict[str, Any]) -> None:
        try:
            r = self._store.append(STREAMS_SEGMENT, encode_record(rec), self._log_length)
        except BadOffsetError:
            raise SegmentStoreError(
                f"{STREAMS_SEGMENT!r} was changed by another stream controller of this store; "
                "this one is stale (share one via controller_of(store))"
            ) from None
        self._log_length = r.offset + r.length
        self._growth.wrote(r.length)


def ignore_missing(fn: Any, name: str) -> None:
    """``fn(name)`` (a delete), where a segment gone already is no error."""
    with contextlib.suppress(SegmentNotFoundError):
        fn(name)
