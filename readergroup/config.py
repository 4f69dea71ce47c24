"""Reader-group configuration: which streams, where to start, which time domain, how often to report.

A frozen value apart from the running state (docs/design.md §5). ``TimeDomain`` is PDP-26's opt-in:
``PROCESSING_TIME`` (the default) delivers events only; ``INGESTION_TIME`` also delivers
the group's ingestion-time watermarks; ``EVENT_TIME`` the writers' asserted event-time
watermarks (``readergroup.group_state.event_time``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, fields

from segmentstore import StreamCut

from .errors import InvalidEventError, InvalidReaderGroupConfigError

__all__ = ["TimeDomain", "ReaderGroupConfig", "WriterConfig"]


class TimeDomain(enum.Enum):
    """The time domain a reader group works in (PDP-26 "Time Domain Configuration")."""

    PROCESSING_TIME = "processing_time"
    """No watermarks: a client that is not watermark-aware never sees one (the default)."""

    INGESTION_TIME = "ingestion_time"
    """Readers also return the group's ingestion-time watermarks, strictly ascending."""

    EVENT_TIME = "event_time"
    """Readers return producer-asserted event-time watermarks (``EventWriter.note_time``): the
    minimum over active writers at the group's acknowledged positions, strictly ascending."""


@dataclass(frozen=True, slots=True)
class ReaderGroupConfig:
    """What a reader group reads and how its readers behave.

    - ``streams``: the ``scope/name`` streams the group reads (at least one, no duplicates).
    - ``starting_cuts``: where each stream starts; a stream without a cut starts at its head.
    - ``time_domain``: ``PROCESSING_TIME`` (default, no watermarks), ``INGESTION_TIME`` or
      ``EVENT_TIME`` (producer-asserted watermarks).
    - ``position_report_interval_ms``: how often (on the group's clock) a busy reader
      reports its acknowledged positions and learns the group watermark; ``0`` = on every
      read. Readers also report when they finish a segment, are idle at the tail, reach a
      checkpoint, release a segment or close.
    - ``read_buffer_bytes``: bytes per segment read (one read is decoded as a block).
    - ``max_event_time_lag_ms``: for the "late events seen" metric: an event whose event
      time is ``<=`` (emitted watermark - lag) when delivered counts as late (docs/design.md §1).
      Not used in ``EVENT_TIME``, where the watermark already is an event time.
    - ``reader_timeout_ms``: a reader's lease. Readers heartbeat every quarter of it
      while they read; a live process holding the group (its readers as they beat, or
      ``expire_readers()``) declares offline a reader whose heartbeat did not change for
      this long on that process's clock, counted from when it first saw the heartbeat's
      current value; its segments return at its acknowledged positions. ``0`` = never:
      readers leave only by ``close()`` or ``reader_offline``.
    - ``state_snapshot_interval``: batches in the group's state log between compacted
      snapshots (and at least a snapshot's worth of bytes); the log is truncated below
      each snapshot, so it stays bounded.
    - ``checkpoints_kept``: completed checkpoints the group's state keeps (the latest), as
      Pravega keeps only its latest ones. A process waiting on a checkpoint it initiated
      gets it as its replica applies the completion (kept or not); only a replica that
      fell behind a compaction meanwhile sees just the kept ones. A name may be used
      again once its checkpoint is no longer kept.
    - ``max_outstanding_checkpoints``: checkpoints in progress or queued at once (Pravega's
      ``maxOutstandingCheckpointRequest``, default 3); initiating one more raises
      ``MaxCheckpointsExceededError`` and changes nothing.
    """

    streams: tuple[str, ...]
    starting_cuts: tuple[StreamCut, ...] = ()
    time_domain: TimeDomain = TimeDomain.PROCESSING_TIME
    position_report_interval_ms: int = 100
    read_buffer_bytes: int = 1 << 20
    max_event_time_lag_ms: int = 0
    reader_timeout_ms: int = 30_000
    state_snapshot_interval: int = 200
    checkpoints_kept: int = 3
    max_outstanding_checkpoints: int = 3

    def __post_init__(self) -> None:
        streams = self.streams
        if isinstance(streams, str):
            streams = (streams,)
        if not isinstance(streams, Iterable):
            raise InvalidReaderGroupConfigError(
                f"ReaderGroupConfig.streams must be a sequence of 'scope/name', got {streams!r}"
            )
        streams = tuple(streams)
        if not streams:
            raise InvalidReaderGroupConfigError("ReaderGroupConfig.streams is empty: name a stream")
        for s in streams:
            if not isinstance(s, str) or s.count("/") != 1 or not all(s.split("/")):
                raise InvalidReaderGroupConfigError(
                    f"ReaderGroupConfig.streams: {s!r} is not a stream name 'scope/name'"
                )
        if len(set(streams)) != len(streams):
            raise InvalidReaderGroupConfigError(f"ReaderGroupConfig.streams names a stream twice: {streams}")
        object.__setattr__(self, "streams", streams)
        cuts = self.starting_cuts
        if isinstance(cuts, StreamCut):
            cuts = (cuts,)
        cuts = tuple(cuts)
        seen: set[str] = set()
        for c in cuts:
            if not isinstance(c, StreamCut):
                raise InvalidReaderGroupConfigError(
                    f"ReaderGroupConfig.starting_cuts must hold StreamCut values, got {c!r}"
                )
            if c.stream not in streams:
                raise InvalidReaderGroupConfigError(
                    f"ReaderGroupConfig.starting_cuts: the cut of {c.stream!r} is for a stream the group "
                    f"does not read {streams}"
                )
            if c.stream in seen:
                raise InvalidReaderGroupConfigError(
                    f"ReaderGroupConfig.starting_cuts has two cuts of stream {c.stream!r}"
                )
            seen.add(c.stream)
        object.__setattr__(self, "starting_cuts", cuts)
        if not isinstance(self.time_domain, TimeDomain):
            raise InvalidReaderGroupConfigError(
                f"ReaderGroupConfig.time_domain must be a TimeDomain, got {self.time_domain!r}"
            )
        _check_int("position_report_interval_ms", self.position_report_interval_ms, 0)
        _check_int("read_buffer_bytes", self.read_buffer_bytes, 64)
        _check_int("max_event_time_lag_ms", self.max_event_time_lag_ms, 0)
        _check_int("reader_timeout_ms", self.reader_timeout_ms, 0)
        _check_int("state_snapshot_interval", self.state_snapshot_interval, 2)
        _check_int("checkpoints_kept", self.checkpoints_kept, 1)
        _check_int("max_outstanding_checkpoints", self.max_outstanding_checkpoints, 1)

    @property
    def watermarks(self) -> bool:
        """Whether readers deliver watermarks (``INGESTION_TIME`` or ``EVENT_TIME``)."""
        return self.time_domain is not TimeDomain.PROCESSING_TIME

    def starting_cut(self, stream: str) -> StreamCut | None:
        """The configured starting cut of ``stream``, or ``None`` (start at its head). O(streams)."""
        for c in self.starting_cuts:
            if c.stream == stream:
                return c
        return None


def _check_int(option: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidReaderGroupConfigError(
            f"ReaderGroupConfig.{option} must be an int >= {low}, got {value!r}"
        )


@dataclass(frozen=True, slots=True)
class WriterConfig:
    """Writer settings: block limits per segment, resends, optional linger, back-pressure, sync mode.

    - ``max_batch_events`` / ``max_batch_bytes``: at most this many events / bytes in one
      append (a block). By default the bytes bind (65,536 events, 1 MiB): one block per
      segment is in flight, so a segment's rate is at most a block per round trip, and a
      cap of 4,096 events held a fast loop over a few segments back whenever the round
      trip grew (issue #35).
    - ``retry_attempts``: resends of a block after a transient error, before its events fail.
    - ``linger_ms``: hold a block that is not full up to this long (by the writer's clock,
      checked at writes and by the writer's thread) for larger blocks; ``None``: a segment
      with no append in flight sends at once.
    - ``max_bytes_in_flight``: the bound on bytes written and not yet acknowledged or failed.
    - ``max_block_ms``: how long a write waits for room at that bound; 0 raises at once.
    - ``sync``: the writer before issue 17: a block goes out when full (or lingered) or at
      ``flush``, and the write that filled it waits for its acknowledgement (with
      ``max_batch_events=1`` every ``write_event`` is one round trip).
    """

    max_batch_events: int = 1 << 16
    max_batch_bytes: int = 1 << 20
    retry_attempts: int = 3
    linger_ms: int | None = None
    max_bytes_in_flight: int = 16 << 20
    max_block_ms: int = 60_000
    sync: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "sync":
                if not isinstance(v, bool):
                    raise InvalidEventError(f"WriterConfig.sync must be a bool, got {v!r}")
                continue
            if v is None and f.name == "linger_ms":
                continue
            low = 0 if f.name in ("retry_attempts", "linger_ms", "max_block_ms") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidEventError(f"WriterConfig.{f.name} must be an int >= {low}, got {v!r}")
