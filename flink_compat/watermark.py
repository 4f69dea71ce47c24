"""Stream elements (records, watermarks, watermark statuses) and their combination across channels.

Flink's contracts, reproduced:

- A ``Watermark(t)`` says no record with timestamp ``<= t`` follows on that channel; a
  record with timestamp ``<=`` the current watermark is *late* (docs/design.md §1).
- Each source subtask emits strictly ascending watermarks; a subtask with nothing to
  read emits ``WatermarkStatus.IDLE`` and ``ACTIVE`` again before its next record or
  watermark.
- A downstream task combines its input channels with ``StatusWatermarkValve``: the
  combined watermark is the minimum over active, *aligned* channels (a channel that
  comes back from idle is aligned again once its watermark reaches the combined one),
  idle channels are excluded, and a watermark is emitted only when it increases. When
  every channel is idle the valve flushes the maximum channel watermark and goes idle.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from segmentstore.checks import checked
from segmentstore.limits import INT64_MAX, INT64_MIN

from .errors import InvalidConfigError

__all__ = [
    "MIN_TIMESTAMP",
    "MAX_TIMESTAMP",
    "Watermark",
    "WatermarkStatus",
    "StreamRecord",
    "StreamElement",
    "ValveState",
    "StatusWatermarkValve",
]

MIN_TIMESTAMP = INT64_MIN
"""Java's ``Long.MIN_VALUE``: the watermark before any was emitted."""

MAX_TIMESTAMP = INT64_MAX
"""Java's ``Long.MAX_VALUE``: the watermark that ends event time (end of input)."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True, order=True)
class Watermark:
    """Event time has reached ``timestamp``: no record with a timestamp ``<=`` it follows."""

    timestamp: int

    def __post_init__(self) -> None:
        if isinstance(self.timestamp, bool) or not isinstance(self.timestamp, int):
            raise InvalidConfigError(f"Watermark.timestamp must be an int of ms, got {self.timestamp!r}")


class WatermarkStatus(enum.Enum):
    """Whether a channel takes part in watermark combination (Flink's ``WatermarkStatus``)."""

    IDLE = "IDLE"
    ACTIVE = "ACTIVE"

    def is_idle(self) -> bool:
        return self is WatermarkStatus.IDLE

    def is_active(self) -> bool:
        return self is WatermarkStatus.ACTIVE


@dataclass(frozen=True, slots=True)
class StreamRecord(Generic[T]):
    """One record and its event timestamp (``None``: the record has no timestamp)."""

    value: T
    timestamp: int | None = None

    def has_timestamp(self) -> bool:
        return self.timestamp is not None

    def replace(self, value: Any) -> StreamRecord[Any]:
        """The same timestamp with another value. O(1)."""
        return StreamRecord(value, self.timestamp)


StreamElement = StreamRecord[Any] | Watermark | WatermarkStatus
"""What flows through a channel."""


@dataclass(frozen=True, slots=True)
class ValveState:
    """The part of a valve that survives a restore: the last combined watermark it emitted."""

    last_output_watermark: int


@dataclass(slots=True)
class _Channel:
    watermark: int = MIN_TIMESTAMP
    status: WatermarkStatus = WatermarkStatus.ACTIVE
    aligned: bool = True


class StatusWatermarkValve:
    """Combines watermarks and statuses of ``num_channels`` input channels; O(channels) per input.

    Each ``input_*`` call returns the elements to forward downstream (watermarks strictly
    ascending, statuses only on change). A restored valve never emits a watermark at or
    below the one it had emitted when the state was taken.
    """

    __slots__ = ("_channels", "_floor", "_last_output_status", "_last_output_watermark")

    def __init__(self, num_channels: int) -> None:
        if isinstance(num_channels, bool) or not isinstance(num_channels, int) or num_channels < 1:
            raise InvalidConfigError(
                f"StatusWatermarkValve: num_channels must be an int >= 1, got {num_channels!r}"
            )
        self._channels = [_Channel() for _ in range(num_channels)]
        self._floor = MIN_TIMESTAMP
        self._last_output_watermark = self._floor
        self._last_output_status = WatermarkStatus.ACTIVE

    @property
    def num_channels(self) -> int:
        return len(self._channels)

    @property
    def last_output_watermark(self) -> int:
        return self._last_output_watermark

    @property
    def last_output_status(self) -> WatermarkStatus:
        return self._last_output_status

    def add_channel(self) -> int:
        """One more input channel, idle at ``MIN_TIMESTAMP`` (a source that read nothing yet); its index.

        For a job whose sources are known only as they appear (the lab's segments of a
        scaling stream): in Flink every channel exists from the start, and one whose
        source has not read anything yet is idle by the time it matters. It takes part
        once it sends ``ACTIVE``. O(1).
        """
        self._channels.append(_Channel(status=WatermarkStatus.IDLE, aligned=False))
        return len(self._channels) - 1

    def channel_watermark(self, channel: int) -> int:
        return self._channel(channel).watermark

    def channel_status(self, channel: int) -> WatermarkStatus:
        return self._channel(channel).status

    def input_watermark(self, watermark: Watermark, channel: int) -> list[StreamElement]:
        """A watermark arrived on ``channel``; returns the combined watermark if it advanced."""
        ch = self._channel(channel)
        out: list[StreamElement] = []
        if (
            self._last_output_status.is_active()
            and ch.status.is_active()
            and watermark.timestamp > ch.watermark
        ):
            ch.watermark = watermark.timestamp
            if not ch.aligned and watermark.timestamp >= self._last_output_watermark:
                ch.aligned = True
            self._output_min_of_aligned(out)
        return out

    def input_watermark_status(self, status: WatermarkStatus, channel: int) -> list[StreamElement]:
        """A status arrived on ``channel``; returns the status and/or watermark to forward."""
        ch = self._channel(channel)
        out: list[StreamElement] = []
        if status.is_idle() and ch.status.is_active():
            ch.status = WatermarkStatus.IDLE
            ch.aligned = False
            if not any(c.status.is_active() for c in self._channels):
                # The last active channel went idle: flush the max watermark, then go idle.
                if ch.watermark == self._last_output_watermark:
                    self._output_max_of_all(out)
                self._last_output_status = WatermarkStatus.IDLE
                out.append(WatermarkStatus.IDLE)
            elif ch.watermark == self._last_output_watermark:
                # The channel that held the minimum left: the minimum may move up.
                self._output_min_of_aligned(out)
        elif status.is_active() and ch.status.is_idle():
            ch.status = WatermarkStatus.ACTIVE
            if ch.watermark >= self._last_output_watermark:
                ch.aligned = True
            if self._last_output_status.is_idle():
                self._last_output_status = WatermarkStatus.ACTIVE
                out.append(WatermarkStatus.ACTIVE)
        return out

    def snapshot_state(self) -> ValveState:
        """The valve's state for a checkpoint: its last combined watermark. O(1)."""
        return ValveState(self._last_output_watermark)

    def restore_state(self, state: ValveState) -> None:
        """Restore a fresh valve from ``snapshot_state``: it never emits at or below that watermark."""
        self._floor = max(self._floor, state.last_output_watermark)
        self._last_output_watermark = max(self._last_output_watermark, self._floor)

    def _output_min_of_aligned(self, out: list[StreamElement]) -> None:
        aligned = [c.watermark for c in self._channels if c.aligned]
        if aligned:
            new_min = min(aligned)
            if new_min > self._last_output_watermark:
                self._last_output_watermark = new_min
                out.append(Watermark(new_min))

    def _output_max_of_all(self, out: list[StreamElement]) -> None:
        new_max = max(c.watermark for c in self._channels)
        if new_max > self._last_output_watermark:
            self._last_output_watermark = new_max
            out.append(Watermark(new_max))

    def _channel(self, channel: int) -> _Channel:
        if not 0 <= channel < len(self._channels):
            raise InvalidConfigError(
                f"StatusWatermarkValve: channel {channel} out of range [0, {len(self._channels)})"
            )
        return self._channels[channel]

    @checked
    def _check(self) -> None:
        """Assert the valve's invariants."""
        for i, c in enumerate(self._channels):
            assert not (c.status.is_idle() and c.aligned), f"idle channel {i} is aligned"
            if c.aligned and c.watermark < self._last_output_watermark:
                # Only after a restore, before every channel caught up with the restored floor.
                assert self._last_output_watermark == self._floor, f"aligned channel {i} below the output"
        if self._last_output_status.is_idle():
            assert not any(c.status.is_active() for c in self._channels), "idle output with an active channel"

    def __repr__(self) -> str:
        return (
            f"StatusWatermarkValve(channels={len(self._channels)}, "
            f"last_output={self._last_output_watermark}, status={self._last_output_status.value})"
        )
