"""Reader groups and their manager: readers, checkpoints, resets to a new epoch (PIP-194), metrics.

``ReaderGroupManager(client)`` creates named groups over a ``SegmentStoreClient``;
``ReaderGroup.create_reader(id)`` adds a reader. The group's state lives in the store,
as Pravega's state synchronizer keeps it: a log of updates in ``_system/_rg/<group>``
(``readergroup.group_state.state``), so readers in any process — and on any host, through a served
store — share one group: ``ReaderGroupManager(client).get_reader_group(name)`` (or
``ReaderGroup.open``) joins a group another process created. Each ``ReaderGroup``
object is one replica of the state; readers of one object share it. A group in one
process is the same code with a single replica.

``reset_to(checkpoint | stream cut)`` starts a new epoch: the state is rebuilt at the
new positions with watermarks materialised from the store's watermark index
(``watermark_at``, no scan of the stream) and pending checkpoints are aborted. Readers
of this replica drop what they buffered from the old epoch before their next delivery
(nothing of an older epoch is delivered by them after ``reset_to`` returns); readers
of other replicas (other processes) do so at their next sync with the state — within
``position_report_interval_ms`` of their clock, or their next read when idle — and
every ``EventRead`` names its epoch.
"""

from __future__ import annotations

import contextlib
import json
import struct
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future

from segmentstore import (
    Clock,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentStoreError,
    StreamCut,
    StreamNotFoundError,
    WallClock,
)
from segmentstore.checks import checked
from segmentstore.client import SegmentStoreClient

from ..config import ReaderGroupConfig
from ..errors import (
    GroupStateError,
    InvalidPositionError,
    InvalidReaderGroupConfigError,
    ReaderGroupExistsError,
)
from ..format.pravega_frames import is_pravega_framed
from ..group_state.checkpoint import Checkpoint, ReaderPosition
from ..group_state.state import ReaderGroupState, SegmentState, state_segment
from .metrics import GroupMetrics, collect_metrics
from .reader import EventReader, ReaderStats

__all__ = ["ReaderGroup", "ReaderGroupManager", "GROUP_INDEX", "list_groups"]

GROUP_INDEX = "_system/_rg_index"
"""Names of the groups created in the store: u32-length-prefixed JSON records ``{"op", "group"}``."""
_LEN = struct.Struct("<I")


def _index(client: SegmentStoreClient, op: str, name: str) -> None:
    rec = json.dumps({"op": op, "group": name}).encode()
    with contextlib.suppress(SegmentExistsError):
        client.create_segment(GROUP_INDEX)
    client.append(GROUP_INDEX, _LEN.pack(len(rec)) + rec)


def list_groups(client: SegmentStoreClient) -> list[str]:
    """Names of the reader groups in the store (created, not deleted), sorted. O(index + groups) calls."""
    try:
        info = client.get_info(GROUP_INDEX)
    except SegmentNotFoundError:
        return []
    data = b""
    pos = info.start_offset
    while pos < info.length:
        r = client.read(GROUP_INDEX, pos, info.length - pos)
        if not r.data:
            break
        data += r.data
        pos += len(r.data)
    names: set[str] = set()
    i = 0
    while i + _LEN.size <= len(data):
        (n,) = _LEN.unpack_from(data, i)
        rec = json.loads(data[i + _LEN.size : i + _LEN.size + n])
        (names.add if rec["op"] == "create" else names.discard)(str(rec["group"]))
        i += _LEN.size + n
    return sorted(n for n in names if client.exists(state_segment(n)))


class ReaderGroup:
    """A named group of readers that together read every event of its streams (per epoch).

    The constructor creates the group in the store (``ReaderGroupExistsError`` if a
    group of that name is there); ``ReaderGroup.open`` joins an existing one. ``clock``
    (default ``WallClock()``) paces position reports and heartbeats and measures
    watermark lag; simulations pass their ``ManualClock``. Thread-safe.
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
        clock = clock if clock is not None else WallClock()
        for stream in config.streams:  # a framing no reader decodes is refused before the group exists
            with contextlib.suppress(StreamNotFoundError):  # (the state's creation names a missing one)
                is_pravega_framed(stream, client.get_stream(stream).framing)
        self._setup(name, client, clock, ReaderGroupState.create(client, name, config, clock))
        with contextlib.suppress(SegmentStoreError):  # only ``list`` needs the index; the group exists
            _index(client, "create", name)

    @classmethod
    def open(cls, name: str, client: SegmentStoreClient, clock: Clock | None = None) -> ReaderGroup:
        """Join group ``name`` kept in the store (by any process); ``ReaderGroupNotFoundError`` if none."""
        clock = clock if clock is not None else WallClock()
        group = cls.__new__(cls)
        group._setup(name, client, clock, ReaderGroupState.open(client, name, clock))
        return group

    def _setup(self, name: str, client: SegmentStoreClient, clock: Clock, state: ReaderGroupState) -> None:
        self.name = name
        self.config = state.config
        self.client = client
        self.clock: Clock = clock
        self._state = state
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

        For operators and for a restarted process taking over its old reader id; a
        reader that stops heartbeating is declared offline by the group itself after
        ``reader_timeout_ms``. With ``last_position`` (e.g. its last ``get_position()``),
        the segments return there instead, with the watermark materialised from the
        index. The reader object raises ``ReaderNotInGroupError`` on its next read in this
        process, at its next sync in another; declare only readers known to be gone.
        """
        self._state.refresh()
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
        """Ids of the online readers (of every process), sorted."""
        self._state.refresh()
        return sorted(self._state.readers())

    def refresh(self) -> int:
        """Catch up with the group's state log (what other processes did); returns the batches applied."""
        return self._state.refresh()

    def expire_readers(self) -> list[str]:
        """Declare offline now the readers whose lease ran out (readers also do it as they read)."""
        self._state.refresh()
        return self._state.sweep(force=True)

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
        return self._state.reset_to(cuts, hints)

    # ------------------------------------------------------------------ queries
    @property
    def state(self) -> ReaderGroupState:
        return self._state

    @property
    def epoch(self) -> int:
        """The group's epoch (after catching up with the log)."""
        self._state.refresh()
        return self._state.epoch

    @property
    def group_watermark(self) -> int:
        """The group's ingestion-time watermark (minimum over incomplete segments), caught up with the log."""
        self._state.refresh()
        return self._state.group_watermark

    @property
    def event_time_watermark(self) -> int:
        """The producer-asserted event-time watermark at the acknowledged positions (``EVENT_TIME``)."""
        self._state.refresh()
        return self._state.event_time_watermark

    def segments(self) -> tuple[SegmentState, ...]:
        """Every incomplete segment with acknowledged position, watermark, owner and status."""
        self._state.refresh()
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
        self._state.refresh()
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
    """Creates, finds and deletes the reader groups of a store (Pravega's ``ReaderGroupManager``).

    ``get_reader_group`` joins a group another process created; each manager holds one
    replica (``ReaderGroup``) per group it touched.
    """

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
        """This manager's replica of group ``name``, joining it from the store the first time."""
        with self._lock:
            group = self._groups.get(name)
            if group is None:
                group = self._groups[name] = ReaderGroup.open(name, self.client, self.clock)
            return group

    def create_reader(self, group: str, reader_id: str) -> EventReader:
        """A new reader of group ``group`` (created by any process), as Pravega's ``createReader``."""
        return self.get_reader_group(group).create_reader(reader_id)

    def delete_reader_group(self, name: str) -> None:
        """Delete the group from the store; its readers raise ``ReaderGroupNotFoundError``.

        Readers of this manager's replica fail on their next read, those of other replicas
        (other processes) at their next sync with the group (within a report interval or a
        quarter lease). Its readers are not declared offline first: they learn that the
        group is gone, not that they lost their lease. Also a group whose state log cannot
        be read any more (``GroupStateError``: a corrupt batch, updates the store lost).
        """
        try:
            group: ReaderGroup | None = self.get_reader_group(name)
        except GroupStateError:
            group = None
        with self._lock:
            self._groups.pop(name, None)
        with contextlib.suppress(SegmentNotFoundError):
            self.client.delete(state_segment(name))
        if group is not None:
            group.state.synchronizer.mark_deleted()
        with contextlib.suppress(SegmentStoreError):
            _index(self.client, "delete", name)

    def list_reader_groups(self) -> list[str]:
        """Names of the groups in the store (whichever process created them), sorted."""
        return list_groups(self.client)
