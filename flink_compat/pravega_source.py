"""A Flink-shaped Pravega source over a reader group, with ingestion-time or producer watermarks.

PDP-26 "Flink Streaming Data Source": the source's parallel subtasks are the readers of
one reader group. Its time domain chooses the watermarks: ``INGESTION_TIME`` turns the
group's ingestion watermarks into event time (``W - max_event_time_lag``);
``EVENT_TIME`` passes on the writers' own assertions (``EventWriter.note_time``, the
group's producer watermarks, already event time: no lag). Each subtask

- turns every event into a ``StreamRecord`` whose value is ``deserializer(event_read)``
  (the payload bytes by default) and whose timestamp is
  ``timestamp_assigner.extract_timestamp(value, event_time)`` — by default the event
  time the writer gave the event (an event without one is an error then);
- turns every group watermark ``W`` the reader returns into
  ``Watermark(W - max_event_time_lag)`` (``Watermark(W)`` in ``EVENT_TIME``) and emits
  it only if it is above the last one it emitted, so its watermarks strictly ascend —
  also across a reader-group reset and a restore from a checkpoint;
- is *idle* (``WatermarkStatus.IDLE``) while its reader holds no segments (more
  subtasks than segments, or a fully read sealed stream), so it does not hold back the
  combined watermark downstream (pravega/flink-connectors#17); it becomes ``ACTIVE``
  again, followed by the latest watermark it held back, once it has segments.

With a ``watermark_strategy`` (e.g. ``WatermarkStrategy.for_bounded_out_of_orderness``)
the subtasks ignore the ingestion watermarks and run the heuristic instead, one
generator per subtask, periodically every ``auto_watermark_interval`` ms of the
injected processing clock: the comparison baseline on the same source.

Checkpoints go through the reader group (``initiate_checkpoint``): each subtask sees
the marker on a read; ``flink_compat.runner.JobRunner`` aligns them. A restore takes the
source's previous readers offline, resets the group to the checkpoint (a new epoch) and
creates fresh readers whose subtasks keep the restored last watermarks as floors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from readergroup.config import TimeDomain
from readergroup.group_state.checkpoint import Checkpoint
from readergroup.reading.frontier import event_time_watermark
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventRead, ReaderStats, ReadKind
from segmentstore.checks import checked
from segmentstore.client import RemoteClient
from segmentstore.client.security import client_security

from .errors import CheckpointError, InvalidConfigError, MissingTimestampError
from .job_checkpoint import JobCheckpoint, SubtaskState
from .runner import PollResult
from .strategies import RecordTimestampAssigner, TimestampAssigner, WatermarkStrategy, as_timestamp_assigner
from .watermark import MIN_TIMESTAMP, StreamElement, StreamRecord, Watermark, WatermarkStatus

if TYPE_CHECKING:
    from concurrent.futures import Future

    from segmentstore.clock import Clock

__all__ = [
    "DEFAULT_MAX_EVENT_TIME_LAG",
    "PravegaSourceConfig",
    "ReaderLike",
    "PravegaSource",
    "PravegaSourceSubtask",
    "connect_store",
]

DEFAULT_MAX_EVENT_TIME_LAG = 60_000
"""The prototype's default ``maxEventTimeLag``: one minute."""


def _payload(read: EventRead) -> Any:
    return read.payload


@dataclass(frozen=True, slots=True)
class PravegaSourceConfig:
    """The source's settings (validated at construction).

    - ``parallelism``: number of subtasks, i.e. readers in the group (>= 1).
    - ``max_event_time_lag``: ms subtracted from ingestion watermarks (>= 0; default 1 min;
      unused for an ``EVENT_TIME`` group, whose watermarks are the writers' assertions).
    - ``timestamp_assigner``: event value -> event time (object or function ``(value,
      record_timestamp) -> int``); default: the strategy's, else the writer's event time.
    - ``deserializer``: ``EventRead`` -> record value (default: the payload bytes).
    - ``watermark_strategy``: a heuristic instead of the ingestion watermarks.
    - ``auto_watermark_interval``: ms between periodic emits of a heuristic (>= 1).
    - ``read_timeout_ms``: per poll (0: never wait; simulations use 0).
    - ``reader_prefix``: reader ids are ``f"{reader_prefix}-{index}"``.
    """

    parallelism: int = 1
    max_event_time_lag: int = DEFAULT_MAX_EVENT_TIME_LAG
    timestamp_assigner: TimestampAssigner[Any] | Callable[[Any, int], int] | None = None
    deserializer: Callable[[EventRead], Any] = _payload
    watermark_strategy: WatermarkStrategy[Any] | None = None
    auto_watermark_interval: int = 200
    read_timeout_ms: int = 0
    reader_prefix: str = "flink-source"

    def __post_init__(self) -> None:
        _check_int("parallelism", self.parallelism, 1)
        _check_int("max_event_time_lag", self.max_event_time_lag, 0)
        _check_int("auto_watermark_interval", self.auto_watermark_interval, 1)
        _check_int("read_timeout_ms", self.read_timeout_ms, 0)
        if not isinstance(self.reader_prefix, str) or not self.reader_prefix:
            raise InvalidConfigError(f"PravegaSourceConfig: bad reader_prefix {self.reader_prefix!r}")
        if self.watermark_strategy is not None and not isinstance(self.watermark_strategy, WatermarkStrategy):
            raise InvalidConfigError(
                f"PravegaSourceConfig: watermark_strategy must be a WatermarkStrategy, "
                f"got {self.watermark_strategy!r}"
            )
        if self.timestamp_assigner is not None:
            as_timestamp_assigner(self.timestamp_assigner)  # validates
        if not callable(self.deserializer):
            raise InvalidConfigError(f"PravegaSourceConfig: deserializer not callable: {self.deserializer!r}")

    def create_timestamp_assigner(self) -> TimestampAssigner[Any]:
        """The assigner subtasks use (see the class docstring)."""
        if self.timestamp_assigner is not None:
            return as_timestamp_assigner(self.timestamp_assigner)
        if self.watermark_strategy is not None:
            return self.watermark_strategy.create_timestamp_assigner()
        return RecordTimestampAssigner()


def connect_store(
    endpoint: str,
    *,
    token: str | None = None,
    tls: bool | None = None,
    tls_ca_file: str | None = None,
    tls_server_name: str | None = None,
    timeout_s: float = 30.0,
) -> RemoteClient:
    """A client of ``ingestwm serve`` at ``endpoint`` for a job's reader group, as the Spark source connects.

    ``token`` defaults to ``INGESTWM_TOKEN``; TLS is on with ``tls``, ``tls_ca_file`` (PEM
    CA to trust) or ``tls_server_name``. One probe connection first, so a server that is
    down or refuses the token or TLS fails at once (``UnreachableStoreError``, naming the
    endpoint, never the token). Pass it to ``ReaderGroupManager(client, clock)``.
    """
    security = client_security(token, tls, tls_ca_file, tls_server_name)
    security.probe(endpoint)
    return security.remote_client(endpoint, timeout_s=timeout_s)


class ReaderLike(Protocol):
    """What a subtask needs of its reader (``EventReader``; transcripts script one)."""

    def read_next_event(self, timeout_ms: int = 0) -> EventRead: ...

    @property
    def stats(self) -> ReaderStats: ...


class PravegaSource:
    """The source: a reader group, a ``PravegaSourceConfig`` and the factory of its subtasks.

    Give either ``config`` or its fields as keyword options. ``clock`` is the processing
    clock of heuristic strategies (default: the group's clock).
    """

    def __init__(
        self,
        group: ReaderGroup,
        config: PravegaSourceConfig | None = None,
        *,
        clock: Clock | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(group, ReaderGroup):
            raise InvalidConfigError(f"PravegaSource: group must be a ReaderGroup, got {group!r}")
        if config is None:
            try:
                config = PravegaSourceConfig(**options)
            except TypeError as e:
                raise InvalidConfigError(f"PravegaSource: {e}") from None
        elif options:
            raise InvalidConfigError(f"PravegaSource: give config or options, not both ({sorted(options)})")
        domain = group.config.time_domain
        if config.watermark_strategy is None and domain is TimeDomain.PROCESSING_TIME:
            raise InvalidConfigError(
                f"PravegaSource: reader group {group.name!r} has time_domain PROCESSING_TIME, which has no "
                "watermarks; use INGESTION_TIME or EVENT_TIME (or give a watermark_strategy)"
            )
        self.group = group
        self.config = config
        self.clock: Clock = clock if clock is not None else group.clock
        self._pending: dict[str, Future[Checkpoint]] = {}

    @property
    def parallelism(self) -> int:
        return self.config.parallelism

    def reader_id(self, index: int) -> str:
        return f"{self.config.reader_prefix}-{index}"

    def create_subtasks(self, restore: JobCheckpoint | None = None) -> list[PravegaSourceSubtask]:
        """Create the subtasks (fresh, or restored from ``restore``); every reader joins before any reads."""
        floors: list[SubtaskState | None] = [None] * self.parallelism
        if restore is not None:
            if restore.reader_group_checkpoint is None:
                raise CheckpointError(
                    f"PravegaSource: checkpoint {restore.checkpoint_id} has no reader-group checkpoint"
                )
            target = Checkpoint.from_json(restore.reader_group_checkpoint)
            if len(restore.subtasks) == self.parallelism:
                floors = list(restore.subtasks)
            elif restore.subtasks:  # rescaled: every subtask starts at the lowest restored watermark
                low = min(s.last_watermark for s in restore.subtasks)
                floors = [SubtaskState(i, low) for i in range(self.parallelism)]
            self.group.reset_to(target)  # validated first: a bad checkpoint changes nothing
        for rid in self.group.online_readers():
            if rid.startswith(f"{self.config.reader_prefix}-"):
                self.group.reader_offline(rid)  # the previous run's readers (a failed job)
        self._pending.clear()
        readers = [self.group.create_reader(self.reader_id(i)) for i in range(self.parallelism)]
        lag = 0 if self.group.config.time_domain is TimeDomain.EVENT_TIME else self.config.max_event_time_lag
        cfg, clock = self.config, self.clock
        subtasks = [PravegaSourceSubtask(i, r, cfg, clock, lag=lag) for i, r in enumerate(readers)]
        for subtask, floor in zip(subtasks, floors, strict=True):
            if floor is not None:
                subtask.restore_state(floor)
        return subtasks

    def trigger_checkpoint(self, checkpoint_id: int) -> str:
        """Start a reader-group checkpoint; returns its name (unique per group epoch)."""
        name = f"{self.config.reader_prefix}-chk-{checkpoint_id}@{self.group.epoch}"
        self._pending[name] = self.group.initiate_checkpoint(name)
        return name

    def complete_checkpoint(self, name: str) -> str | None:
        """The reader-group checkpoint ``name`` as JSON, once every reader reached it."""
        future = self._pending.pop(name, None)
        if future is None or not future.done():
            raise CheckpointError(f"PravegaSource: reader-group checkpoint {name!r} is not complete")
        return future.result().to_json()


class PravegaSourceSubtask:
    """One parallel instance of ``PravegaSource``: a reader, its watermark gate and idleness."""

    def __init__(
        self,
        index: int,
        reader: ReaderLike,
        config: PravegaSourceConfig,
        clock: Clock,
        *,
        lag: int | None = None,
    ) -> None:
        self._index = index
        self._reader = reader
        self._lag = config.max_event_time_lag if lag is None else lag  # 0: the reads are event time
        self._assigner = config.create_timestamp_assigner()
        self._deserializer = config.deserializer
        self._timeout = config.read_timeout_ms
        self._interval = config.auto_watermark_interval
        self._last_watermark = MIN_TIMESTAMP
        self._held: int | None = None  # a watermark not emitted yet because the subtask is idle
        self._idle = False  # what was last emitted downstream (subtasks start ACTIVE)
        self._has_segments = True
        self._generator_idle = False
        self._out: list[StreamElement] = []
        strategy = config.watermark_strategy
        self._clock = clock
        self._generator = strategy.create_watermark_generator(clock) if strategy is not None else None
        self._next_periodic = MIN_TIMESTAMP

    @property
    def index(self) -> int:
        return self._index

    @property
    def reader(self) -> ReaderLike:
        return self._reader

    @property
    def last_watermark(self) -> int:
        return self._last_watermark

    @property
    def is_idle(self) -> bool:
        return self._idle

    def poll(self) -> PollResult:
        """Read once (``read_timeout_ms``) and return what this subtask emits. O(1) amortised."""
        out: list[StreamElement] = []
        self._out = out
        read = self._reader.read_next_event(self._timeout)
        kind = read.kind
        checkpoint = None
        progressed = kind is not ReadKind.EMPTY
        if kind is ReadKind.EVENT:
            self._emit_record(read)
        else:
            if kind is ReadKind.WATERMARK and self._generator is None:
                assert read.watermark is not None
                self._hold(self._event_time_watermark(read.watermark))
            elif kind is ReadKind.CHECKPOINT:
                checkpoint = read.checkpoint_name
            self._has_segments = bool(self._reader.stats.segments)
            self._sync_status()
        if self._generator is not None:
            now = self._clock.now()
            if now >= self._next_periodic:
                self._next_periodic = now + self._interval
                self._generator.on_periodic_emit(self)
        return PollResult(tuple(out), progressed or bool(out), checkpoint)

    def snapshot_state(self) -> SubtaskState:
        """The subtask's state for a checkpoint: its last emitted watermark and idleness. O(1)."""
        return SubtaskState(self._index, self._last_watermark, self._idle)

    def restore_state(self, state: SubtaskState) -> None:
        """Restore a fresh subtask from ``snapshot_state``: its watermarks stay above the restored one."""
        self._last_watermark = max(self._last_watermark, state.last_watermark)

    # WatermarkOutput, for the heuristic generator
    def emit_watermark(self, watermark: Watermark) -> None:
        self._generator_idle = False
        self._hold(watermark.timestamp)
        self._sync_status()

    def mark_idle(self) -> None:
        self._generator_idle = True
        self._sync_status()

    def mark_active(self) -> None:
        self._generator_idle = False
        self._sync_status()

    def _event_time_watermark(self, ingestion_watermark: int) -> int:
        return event_time_watermark(ingestion_watermark, self._lag)

    def _emit_record(self, read: EventRead) -> None:
        value = self._deserializer(read)
        record_ts = read.event_time if read.event_time is not None else MIN_TIMESTAMP
        ts = self._assigner.extract_timestamp(value, record_ts)
        if isinstance(ts, bool) or not isinstance(ts, int) or ts == MIN_TIMESTAMP:
            raise MissingTimestampError(
                f"source subtask {self._index}: event at offset {read.position} of segment {read.segment!r} "
                f"got timestamp {ts!r}; it has no event time, so give the source a timestamp_assigner"
            )
        self._has_segments = True
        self._generator_idle = False
        self._sync_status()
        self._out.append(StreamRecord(value, ts))
        if self._generator is not None:
            self._generator.on_event(value, ts, self)

    def _hold(self, watermark: int) -> None:
        if self._held is None or watermark > self._held:
            self._held = watermark

    def _sync_status(self) -> None:
        want_idle = not self._has_segments or self._generator_idle
        if want_idle and not self._idle:
            self._idle = True
            self._out.append(WatermarkStatus.IDLE)
        elif not want_idle and self._idle:
            self._idle = False
            self._out.append(WatermarkStatus.ACTIVE)
        held = self._held
        if not self._idle and held is not None:
            self._held = None
            if held > self._last_watermark:
                self._last_watermark = held
                self._out.append(Watermark(held))

    @checked
    def _check(self) -> None:
        """Assert the subtask's invariants."""
        assert self._held is None or self._idle, "a watermark is held back by an active subtask"


def _check_int(option: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidConfigError(f"PravegaSource: {option} must be an int >= {low}, got {value!r}")
