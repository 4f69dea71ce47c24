"""Reader groups and their manager: readers, checkpoints, resets to a new epoch (PIP-194), metrics.

``ReaderGroupManager(client)`` creates named groups over a ``SegmentStoreClient``;
``ReaderGroup.create_reader(id)`` adds a reader. The group state lives in this process
(readers of one group share it; Pravega keeps it in a state-synchronizer segment).

``reset_to(checkpoint | stream cut)`` starts a new epoch: the state is rebuilt at the
new positions with watermarks materialised from the store's watermark index
(``watermark_at``, no scan of the stream), pending checkpoints are aborted, and every
reader drops what it buffered from the old epoch before its next delivery — nothing
of an older epoch is delivered after ``reset_to`` returns.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future

from segmentstore import Clock, StreamCut, WallClock
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient

from .checkpoint import Checkpoint, ReaderPosition
from .config import ReaderGroupConfig
from .errors import (
    InvalidPositionError,
    InvalidReaderGroupConfigError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
)
from .metrics import GroupMetrics, collect_metrics
from .reader import EventReader, ReaderStats
from .state import ReaderGroupState, SegmentState

__all__ = ["ReaderGroup", "ReaderGroupManager"]


class ReaderGroup:
    """A named group of readers that together read every event of its streams (per epoch).

    ``clock`` (default ``WallClock()``) paces position reports and measures watermark
    lag; simulations pass their ``ManualClock``. Thread-safe.
    """

    def __init__(
        self,
        name: str,
        config: ReaderGroupConfig,
        client: SegmentStoreClient,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidReaderGroupConfigError(f"reader group name must be a non-empty str, got {name!r}")
        if not isinstance(config, ReaderGroupConfig):
            raise InvalidReaderGroupConfigError(f"config must be a ReaderGroupConfig, got {config!r}")
        self.name = name
        self.config = config
        self.client = client
        self.clock: Clock = clock if clock is not None else WallClock()
        positions: list[tuple[str, int]] = []
        for stream in config.streams:
            cut = config.starting_cut(stream) or client.get_head_cut(stream)
            positions.extend(cut.positions)
        self._state = ReaderGroupState(client, name, config.streams, positions)
        self._lock = threading.Lock()
        self._readers: dict[str, EventReader] = {}
        self._retired = _Totals()

    # ------------------------------------------------------------------ readers
    def create_reader(self, reader_id: str) -> EventReader:
        """Add an online reader; it acquires its share of segments on its first read."""
        reader = EventReader(reader_id, self._state, self.config, self.client, self.clock)
        with self._lock:
            old = self._readers.pop(reader_id, None)
            if old is not None:
                self._retired.add(old.stats)
            self._readers[reader_id] = reader
        return reader

    def reader_offline(
        self, reader_id: str, last_position: ReaderPosition | Mapping[str, int] | None = None
    ) -> None:
        """Declare a reader gone (crashed): its segments return at its last reported positions.

        With ``last_position`` (e.g. its last ``get_position()``), they return there
        instead, with the watermark materialised from the index. The reader object, if
        still alive, raises ``ReaderNotInGroupError`` on its next read.
        """
        positions: Mapping[str, int] | None
        if isinstance(last_position, ReaderPosition):
            if last_position.reader_id != reader_id:
                raise InvalidPositionError(
                    f"group {self.name!r}: position of reader {last_position.reader_id!r} given for "
                    f"reader {reader_id!r}"
                )
            # a position of an older epoch says nothing about this one
            positions = last_position.as_dict() if last_position.epoch == self._state.epoch else None
        else:
            positions = last_position
        self._state.remove_reader(reader_id, positions)

    def online_readers(self) -> list[str]:
        """Ids of the online readers, sorted."""
        return sorted(self._state.readers())

    # ------------------------------------------------------------------ checkpoints and resets
    def initiate_checkpoint(self, name: str) -> Future[Checkpoint]:
        """Start checkpoint ``name``; each online reader returns a marker on a coming read.

        The future completes (with positions and watermarks of every readable segment)
        when every reader online at the checkpoint's start has reached it or gone
        offline; a reset aborts it (``CheckpointAbortedError``). Readers neither acquire
        nor release segments while a checkpoint is in progress.
        """
        return self._state.initiate_checkpoint(name)

    def reset_to(self, target: Checkpoint | StreamCut | Iterable[StreamCut]) -> int:
        """Start a new epoch at a checkpoint or stream cut(s); returns the new epoch.

        Streams the target does not mention restart at their acknowledged positions.
        Validated first: a bad target leaves the group as it was.
        """
        hints: dict[str, int] = {}
        if isinstance(target, Checkpoint):
            cuts: list[StreamCut] = list(target.stream_cuts())
            hints = {p.segment: p.watermark for p in target.positions}
        elif isinstance(target, StreamCut):
            cuts = [target]
        else:
            cuts = list(target)
        for c in cuts:
            if not isinstance(c, StreamCut):
                raise InvalidPositionError(f"group {self.name!r}: reset target {c!r} is not a StreamCut")
            if c.stream not in self.config.streams:
                raise InvalidPositionError(
                    f"group {self.name!r}: cannot reset to a cut of stream {c.stream!r}, which the group "
                    f"does not read {self.config.streams}"
                )
        mentioned = {c.stream for c in cuts}
        if len(mentioned) != len(cuts):
            raise InvalidPositionError(f"group {self.name!r}: reset target has two cuts of one stream")
        st = self._state
        with st.lock:
            positions = [p for c in cuts for p in c.positions]
            for row in st.segments():
                if row.segment.stream not in mentioned and row.status != "future":
                    positions.append((row.segment.name, row.position))
                    hints[row.segment.name] = row.watermark
            return st.reset(positions, hints)

    # ------------------------------------------------------------------ queries
    @property
    def state(self) -> ReaderGroupState:
        return self._state

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def group_watermark(self) -> int:
        """The group's ingestion-time watermark (minimum over incomplete segments). O(1)."""
        return self._state.group_watermark

    @property
    def event_time_watermark(self) -> int:
        """The producer-asserted event-time watermark at the acknowledged positions (``EVENT_TIME``)."""
        return self._state.event_time_watermark

    def segments(self) -> tuple[SegmentState, ...]:
        """Every incomplete segment with acknowledged position, watermark, owner and status."""
        return self._state.segments()

    def reader_stats(self) -> list[ReaderStats]:
        """Counters of every reader created in this group (latest per id)."""
        with self._lock:
            return [r.stats for r in self._readers.values()]

    def metrics(self, now: int | None = None) -> GroupMetrics:
        """Group watermark, watermark lag, per-segment lag and unread bytes, late events seen."""
        with self._lock:
            stats = [r.stats for r in self._readers.values()]
            retired = (self._retired.events, self._retired.late, self._retired.late_ingestion)
        return collect_metrics(self._state, self.clock.now() if now is None else now, stats, retired)

    @checked
    def _check(self) -> None:
        """Assert the group state's invariants."""
        self._state._check()


class _Totals:
    """Counters of readers replaced by a new reader of the same id."""

    __slots__ = ("events", "late", "late_ingestion")

    def __init__(self) -> None:
        self.events = self.late = self.late_ingestion = 0

    def add(self, s: ReaderStats) -> None:
        self.events += s.events
        self.late += s.late_events
        self.late_ingestion += s.late_ingestion_events


class ReaderGroupManager:
    """Creates and finds the reader groups of one client (Pravega's ``ReaderGroupManager``)."""

    def __init__(self, client: SegmentStoreClient, clock: Clock | None = None) -> None:
        self.client = client
        self.clock = clock
        self._groups: dict[str, ReaderGroup] = {}
        self._lock = threading.Lock()

    def create_reader_group(self, name: str, config: ReaderGroupConfig) -> ReaderGroup:
        """Create group ``name`` at the config's starting cuts (heads by default)."""
        with self._lock:
            if name in self._groups:
                raise ReaderGroupExistsError(f"reader group {name!r} exists already")
            group = ReaderGroup(name, config, self.client, self.clock)
            self._groups[name] = group
            return group

    def get_reader_group(self, name: str) -> ReaderGroup:
        with self._lock:
            try:
                return self._groups[name]
            except KeyError:
                raise ReaderGroupNotFoundError(f"reader group {name!r} does not exist") from None

    def delete_reader_group(self, name: str) -> None:
        """Forget the group; its readers fail on their next read."""
        with self._lock:
            group = self._groups.pop(name, None)
        if group is None:
            raise ReaderGroupNotFoundError(f"reader group {name!r} does not exist")
        for rid in group.online_readers():
            group.reader_offline(rid)

    def list_reader_groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)
