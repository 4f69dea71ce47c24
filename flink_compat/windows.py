"""Tumbling and sliding event-time windows with allowed lateness (Flink's ``WindowOperator``).

Semantics, as in Flink with the default ``EventTimeTrigger``:

- A record goes to every window its timestamp falls in (``[start, end)``; a window's
  ``max_timestamp()`` is ``end - 1``). Windows are computed per key (``key_selector``;
  without one, all records share one key, like ``window_all``).
- A window fires when the watermark reaches its ``max_timestamp()``: the result is
  emitted with timestamp ``max_timestamp()``; ``firing`` counts the window's earlier
  firings (0 for the first).
- A window's state is kept until the watermark reaches ``max_timestamp() +
  allowed_lateness``. A record for a window that already fired but is still kept fires it
  again at once, with everything accumulated so far (a late firing).
- A record all of whose windows are gone (timestamp + allowed lateness ``<=`` watermark)
  is late: it goes to the late side output, if set, and is counted in
  ``num_late_records_dropped``.

Aggregation is incremental through an ``AggregateFunction`` (``create_accumulator``,
``add``, ``get_result``); ``CountAggregate``, ``SumAggregate`` and ``ListAggregate``
cover the experiments.
"""

from __future__ import annotations

import abc
import heapq
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from segmentstore.checks import checked

from .errors import CheckpointError, InvalidConfigError, MissingTimestampError
from .job_checkpoint import OperatorState
from .operators import OutputTag, StreamOperator
from .watermark import MAX_TIMESTAMP, StreamRecord

__all__ = [
    "TimeWindow",
    "WindowAssigner",
    "TumblingEventTimeWindows",
    "SlidingEventTimeWindows",
    "AggregateFunction",
    "CountAggregate",
    "SumAggregate",
    "ListAggregate",
    "WindowResult",
    "WindowOperator",
]

ACC = TypeVar("ACC")


@dataclass(frozen=True, slots=True, order=True)
class TimeWindow:
    """The event-time interval ``[start, end)``."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        return self.end - 1

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """The start of the window of size ``window_size`` (shifted by ``offset``) holding ``timestamp``."""
        remainder = (timestamp - offset) % window_size
        return timestamp - remainder


class WindowAssigner(abc.ABC):
    """Assigns a timestamp to the windows it belongs to."""

    @abc.abstractmethod
    def assign_windows(self, timestamp: int) -> tuple[TimeWindow, ...]:
        """The windows holding ``timestamp``, oldest first."""


class TumblingEventTimeWindows(WindowAssigner):
    """Fixed-size, non-overlapping windows; use ``TumblingEventTimeWindows.of(size_ms)``."""

    __slots__ = ("offset", "size")

    def __init__(self, size: int, offset: int = 0) -> None:
        self.size = _positive("TumblingEventTimeWindows.size", size)
        self.offset = _offset("TumblingEventTimeWindows.offset", offset, self.size)

    @staticmethod
    def of(size_ms: int, offset_ms: int = 0) -> TumblingEventTimeWindows:
        return TumblingEventTimeWindows(size_ms, offset_ms)

    def assign_windows(self, timestamp: int) -> tuple[TimeWindow, ...]:
        start = TimeWindow.get_window_start_with_offset(timestamp, self.offset, self.size)
        return (TimeWindow(start, start + self.size),)

    def __repr__(self) -> str:
        return f"TumblingEventTimeWindows(size={self.size}, offset={self.offset})"


class SlidingEventTimeWindows(WindowAssigner):
    """Windows of ``size`` starting every ``slide``; use ``SlidingEventTimeWindows.of(size_ms, slide_ms)``."""

    __slots__ = ("offset", "size", "slide")

    def __init__(self, size: int, slide: int, offset: int = 0) -> None:
        self.size = _positive("SlidingEventTimeWindows.size", size)
        self.slide = _positive("SlidingEventTimeWindows.slide", slide)
        self.offset = _offset("SlidingEventTimeWindows.offset", offset, self.slide)

    @staticmethod
    def of(size_ms: int, slide_ms: int, offset_ms: int = 0) -> SlidingEventTimeWindows:
        return SlidingEventTimeWindows(size_ms, slide_ms, offset_ms)

    def assign_windows(self, timestamp: int) -> tuple[TimeWindow, ...]:
        last_start = TimeWindow.get_window_start_with_offset(timestamp, self.offset, self.slide)
        windows = []
        start = last_start
        while start > timestamp - self.size:
            windows.append(TimeWindow(start, start + self.size))
            start -= self.slide
        windows.reverse()
        return tuple(windows)

    def __repr__(self) -> str:
        return f"SlidingEventTimeWindows(size={self.size}, slide={self.slide}, offset={self.offset})"


class AggregateFunction(Protocol[ACC]):
    """Incremental aggregation (Flink's ``AggregateFunction`` without ``merge``)."""

    def create_accumulator(self) -> ACC: ...

    def add(self, value: Any, accumulator: ACC) -> ACC: ...

    def get_result(self, accumulator: ACC) -> Any: ...


class CountAggregate:
    """Counts the records of a window."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator


class SumAggregate:
    """Sums ``field(value)`` over a window (``field`` defaults to the value itself)."""

    def __init__(self, field: Callable[[Any], float] | None = None) -> None:
        self._field = field

    def create_accumulator(self) -> float:
        return 0

    def add(self, value: Any, accumulator: float) -> float:
        return accumulator + (self._field(value) if self._field is not None else value)

    def get_result(self, accumulator: float) -> float:
        return accumulator


class ListAggregate:
    """Collects the values of a window, in arrival order, as a tuple."""

    def create_accumulator(self) -> tuple[Any, ...]:
        return ()

    def add(self, value: Any, accumulator: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*accumulator, value)

    def get_result(self, accumulator: tuple[Any, ...]) -> tuple[Any, ...]:
        return accumulator


@dataclass(frozen=True, slots=True)
class WindowResult:
    """A window's result; ``firing`` counts the window's earlier firings (0 for the first)."""

    key: Any
    window: TimeWindow
    value: Any
    firing: int = 0


class WindowOperator(StreamOperator):
    """Keyed event-time windows with allowed lateness, emitting ``WindowResult`` records.

    O(w log t) per record (w windows per record, t pending timers); a watermark fires due
    windows in timer order (ties in registration order).
    """

    def __init__(
        self,
        assigner: WindowAssigner,
        aggregate: AggregateFunction[Any],
        *,
        allowed_lateness: int = 0,
        key_selector: Callable[[Any], Hashable] | None = None,
        late_output_tag: OutputTag | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(assigner, WindowAssigner):
            raise InvalidConfigError(f"WindowOperator: assigner must be a WindowAssigner, got {assigner!r}")
        lateness = allowed_lateness
        if isinstance(lateness, bool) or not isinstance(lateness, int) or lateness < 0:
            raise InvalidConfigError(f"WindowOperator: allowed_lateness must be >= 0 ms, got {lateness!r}")
        self._assigner = assigner
        self._aggregate = aggregate
        self._allowed_lateness = allowed_lateness
        self._key_selector = key_selector
        self._late_tag = late_output_tag
        self._windows: dict[tuple[Any, TimeWindow], list[Any]] = {}  # -> [accumulator, firings]
        self._timers: list[tuple[int, int, Any, TimeWindow]] = []
        self._timer_set: set[tuple[int, Any, TimeWindow]] = set()
        self._seq = itertools.count()
        self._late = 0

    @property
    def allowed_lateness(self) -> int:
        return self._allowed_lateness

    @property
    def num_late_records_dropped(self) -> int:
        return self._late

    @property
    def num_open_windows(self) -> int:
        return len(self._windows)

    def cleanup_time(self, window: TimeWindow) -> int:
        """When the window's state is dropped: ``max_timestamp + allowed_lateness`` (capped)."""
        return min(window.max_timestamp() + self._allowed_lateness, MAX_TIMESTAMP)

    def process_element(self, record: StreamRecord[Any]) -> None:
        ts = record.timestamp
        if ts is None:
            raise MissingTimestampError(
                f"WindowOperator: record {record.value!r:.80} has no timestamp; "
                "give the source a TimestampAssigner"
            )
        key = self._key_selector(record.value) if self._key_selector is not None else None
        wm = self._current_watermark
        skipped = True
        for window in self._assigner.assign_windows(ts):
            if self.cleanup_time(window) <= wm:
                continue
            skipped = False
            slot = self._windows.get((key, window))
            if slot is None:
                slot = [self._aggregate.create_accumulator(), 0]
                self._windows[(key, window)] = slot
                self._register(window.max_timestamp(), key, window)
                self._register(self.cleanup_time(window), key, window)
            slot[0] = self._aggregate.add(record.value, slot[0])
            if window.max_timestamp() <= wm:
                self._fire(key, window, slot)
        if skipped:
            self._late += 1
            if self._late_tag is not None:
                self.output.collect_side(self._late_tag, record)

    def on_event_time(self, watermark: int) -> None:
        timers = self._timers
        while timers and timers[0][0] <= watermark:
            time, _, key, window = heapq.heappop(timers)
            self._timer_set.discard((time, key, window))
            slot = self._windows.get((key, window))
            if slot is None:
                continue
            if time == window.max_timestamp():
                self._fire(key, window, slot)
            if time == self.cleanup_time(window):
                del self._windows[(key, window)]

    def _fire(self, key: Any, window: TimeWindow, slot: list[Any]) -> None:
        result = WindowResult(key, window, self._aggregate.get_result(slot[0]), slot[1])
        slot[1] += 1
        self.output.collect(StreamRecord(result, window.max_timestamp()))

    def _register(self, time: int, key: Any, window: TimeWindow) -> None:
        if time <= self._current_watermark or (time, key, window) in self._timer_set:
            return
        self._timer_set.add((time, key, window))
        heapq.heappush(self._timers, (time, next(self._seq), key, window))

    def _snapshot_data(self) -> Any:
        return {
            "late": self._late,
            "windows": [[key, w.start, w.end, slot[0], slot[1]] for (key, w), slot in self._windows.items()],
        }

    def _restore_data(self, data: Any) -> None:
        try:
            late = int(data["late"])
            windows = [
                (key, TimeWindow(int(s), int(e)), acc, int(f)) for key, s, e, acc, f in data["windows"]
            ]
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"WindowOperator: malformed state ({e!r})") from None
        self._late = late
        self._windows = {}
        self._timers, self._timer_set = [], set()
        self._seq = itertools.count()
        for key, window, acc, firings in windows:
            self._windows[(key, window)] = [acc, firings]

    def restore_state(self, state: OperatorState) -> None:
        super().restore_state(state)
        for key, window in self._windows:  # timers follow from the windows and the watermark
            self._register(window.max_timestamp(), key, window)
            self._register(self.cleanup_time(window), key, window)

    @checked
    def _check(self) -> None:
        super()._check()
        assert self._late >= 0
        assert len(self._timer_set) == len(self._timers)
        for key, window in self._windows:
            cleanup = self.cleanup_time(window)
            assert cleanup > self._current_watermark, f"window {window} of {key!r} outlived its cleanup time"
            assert (cleanup, key, window) in self._timer_set, f"window {window} of {key!r}: no cleanup timer"


def _positive(option: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidConfigError(f"{option} must be an int of ms > 0, got {value!r}")
    return value


def _offset(option: str, value: object, modulus: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -modulus < value < modulus:
        raise InvalidConfigError(f"{option} must be an int with |offset| < {modulus}, got {value!r}")
    return value
