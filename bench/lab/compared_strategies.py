"""The four watermark strategies the lab compares, each feeding the same reordering and windows.

Every strategy owns a reader group on the same stream and a ``StrategyPipeline``:
de-duplication of redelivered events, ``flink_compat``'s ``EventTimeOrderingOperator``
(an event at or below the watermark on arrival is late and dropped; the rest wait in
the reordering buffer until the watermark passes them) and tumbling count windows
(``WindowOperator``; a window fires once the watermark reaches its end - 1). So the
strategies differ only in the event-time watermark:

- ``ingestion``: the group's ingestion-time watermark (``TimeDomain.INGESTION_TIME``)
  minus ``max_event_time_lag_ms`` (PDP-26, docs/design.md §1).
- ``producer``: the writers' own assertions (``TimeDomain.EVENT_TIME``): minimum over
  active writers at the group's acknowledged positions.
- ``flink``: Flink's heuristic per segment (split): bounded out-of-orderness
  ``max event time - bound - 1`` with idleness, emitted every ``flink_interval_ms``;
  the minimum over splits that are not idle (``flink_compat.strategies``).
- ``spark``: Spark's rule, reimplemented: per input ``max(event time) - delay``,
  updated at each trigger (micro-batch end), the global watermark the minimum over
  inputs and never decreasing. An input is the whole stream (Spark's maximum over all
  partitions of a source) or, with ``spark_input: segment``, each segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flink_compat import (
    CountAggregate,
    DiscardingOutput,
    EventTimeOrderingOperator,
    StreamRecord,
    TumblingEventTimeWindows,
    Watermark,
    WindowOperator,
    WindowResult,
)
from flink_compat.strategies import WatermarkStrategy
from readergroup.config import TimeDomain
from readergroup.group_state.state import SegmentState
from readergroup.reading.frontier import event_time_watermark
from segmentstore import Clock
from segmentstore.checks import checked
from segmentstore.limits import INT64_MIN

from .lab_scenario import LabStrategies

__all__ = [
    "StrategyPipeline",
    "Strategy",
    "IngestionStrategy",
    "ProducerStrategy",
    "FlinkStrategy",
    "SparkStrategy",
    "make_strategies",
]


Firing = tuple[int, int, int, int]
"""(clock time fired, window start, window end, count)."""


class _WindowSink(DiscardingOutput):
    __slots__ = ("clock", "firings")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.firings: list[Firing] = []

    def collect(self, record: StreamRecord[Any]) -> None:
        r: WindowResult = record.value
        self.firings.append((self.clock.now(), r.window.start, r.window.end, int(r.value)))


class _OrderingSink(DiscardingOutput):
    __slots__ = ("pipeline",)

    def __init__(self, pipeline: StrategyPipeline) -> None:
        self.pipeline = pipeline

    def collect(self, record: StreamRecord[Any]) -> None:
        self.pipeline.buffered_bytes -= record.value[2]
        self.pipeline.windows.process_element(record)

    def emit_watermark(self, watermark: Watermark) -> None:
        self.pipeline.windows.process_watermark(watermark)


class StrategyPipeline:
    """Dedupe, reorder by event time, count per tumbling window; O(log b) per event for b buffered."""

    def __init__(self, window_ms: int, clock: Clock) -> None:
        self.ordering = EventTimeOrderingOperator(late_output_tag=None)
        self.windows = WindowOperator(TumblingEventTimeWindows.of(window_ms), CountAggregate())
        self.sink = _WindowSink(clock)
        self.windows.setup(self.sink)
        self.ordering.setup(_OrderingSink(self))
        self.seen: set[tuple[int, int]] = set()
        self.delivered = self.duplicates = self.late = 0
        self.buffered_bytes = self.peak_events = self.peak_bytes = 0

    @property
    def watermark(self) -> int:
        return self.ordering.current_watermark

    @property
    def buffered_events(self) -> int:
        return self.ordering.num_buffered

    @property
    def firings(self) -> list[Firing]:
        return self.sink.firings

    def event(self, writer: int, seq: int, event_time: int, nbytes: int) -> None:
        """One delivered event; a redelivered one (same writer and number) only counts as a duplicate."""
        key = (writer, seq)
        if key in self.seen:
            self.duplicates += 1
            return
        self.seen.add(key)
        self.delivered += 1
        if event_time <= self.ordering.current_watermark:
            self.late += 1
        else:
            self.buffered_bytes += nbytes
        self.ordering.process_element(StreamRecord((writer, seq, nbytes), event_time))
        self.peak_events = max(self.peak_events, self.ordering.num_buffered)
        self.peak_bytes = max(self.peak_bytes, self.buffered_bytes)

    def advance(self, watermark: int) -> None:
        """Move event time to ``watermark`` (ignored unless it increases): release, fire windows."""
        if watermark > self.ordering.current_watermark:
            self.ordering.process_watermark(Watermark(watermark))

    @checked
    def _check(self) -> None:
        self.ordering._check()
        assert self.late == self.ordering.num_late_records_dropped
        assert self.buffered_bytes >= 0 and (self.buffered_bytes == 0) == (self.ordering.num_buffered == 0)


class Strategy:
    """One strategy: the time domain its reader group works in and how it makes the watermark."""

    name: str = ""
    time_domain: TimeDomain = TimeDomain.PROCESSING_TIME

    def __init__(self, config: LabStrategies, window_ms: int, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.pipeline = StrategyPipeline(window_ms, clock)

    def on_event(
        self, stream: str, segment: str, writer: int, seq: int, event_time: int, nbytes: int
    ) -> None:
        """A delivered event (before it enters the pipeline)."""
        self.pipeline.event(writer, seq, event_time, nbytes)

    def on_watermark(self, watermark: int) -> None:
        """A watermark the reader group delivered (in its time domain)."""

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        """Called after each tick's reads, with ``t_ms`` since the start and the group's segments."""

    @property
    def watermark(self) -> int:
        return self.pipeline.watermark


class IngestionStrategy(Strategy):
    """Ingestion-time watermark minus ``max_event_time_lag_ms``."""

    name = "ingestion"
    time_domain = TimeDomain.INGESTION_TIME

    def on_watermark(self, watermark: int) -> None:
        self.pipeline.advance(event_time_watermark(watermark, self.config.max_event_time_lag_ms))


class ProducerStrategy(Strategy):
    """The producers' asserted watermarks, as the ``EVENT_TIME`` reader group delivers them."""

    name = "producer"
    time_domain = TimeDomain.EVENT_TIME

    def on_watermark(self, watermark: int) -> None:
        self.pipeline.advance(watermark)


class _SplitOutput:
    __slots__ = ("idle", "watermark")

    def __init__(self) -> None:
        self.watermark = INT64_MIN
        self.idle = False

    def emit_watermark(self, watermark: Watermark) -> None:
        self.watermark = max(self.watermark, watermark.timestamp)
        self.idle = False

    def mark_idle(self) -> None:
        self.idle = True

    def mark_active(self) -> None:
        self.idle = False


class FlinkStrategy(Strategy):
    """Bounded out-of-orderness with idleness per segment; minimum over non-idle segments."""

    name = "flink"

    def __init__(self, config: LabStrategies, window_ms: int, clock: Clock) -> None:
        super().__init__(config, window_ms, clock)
        self._strategy = WatermarkStrategy.for_bounded_out_of_orderness(config.flink_bound_ms).with_idleness(
            config.flink_idle_timeout_ms
        )
        self._splits: dict[str, tuple[Any, _SplitOutput]] = {}

    def _split(self, segment: str) -> tuple[Any, _SplitOutput]:
        s = self._splits.get(segment)
        if s is None:
            gen = self._strategy.create_watermark_generator(self.clock)
            s = self._splits[segment] = (gen, _SplitOutput())
        return s

    def on_event(
        self, stream: str, segment: str, writer: int, seq: int, event_time: int, nbytes: int
    ) -> None:
        gen, out = self._split(segment)
        gen.on_event(None, event_time, out)
        out.idle = False
        super().on_event(stream, segment, writer, seq, event_time, nbytes)

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        if t_ms % self.config.flink_interval_ms:
            return
        live = {r.segment.name for r in rows if r.status != "future"}
        for name in [n for n in self._splits if n not in live]:
            del self._splits[name]  # a finished split leaves the combination
        for name in sorted(live):
            gen, out = self._split(name)
            gen.on_periodic_emit(out)
        active = [out.watermark for _, out in self._splits.values() if not out.idle]
        if active:
            self.pipeline.advance(min(active))


class SparkStrategy(Strategy):
    """``max(event time) - delay`` per input at each trigger; the minimum over inputs, never decreasing."""

    name = "spark"

    def __init__(self, config: LabStrategies, window_ms: int, clock: Clock) -> None:
        super().__init__(config, window_ms, clock)
        self._max: dict[str, int] = {}
        self._global = INT64_MIN

    def on_event(
        self, stream: str, segment: str, writer: int, seq: int, event_time: int, nbytes: int
    ) -> None:
        key = stream if self.config.spark_input == "stream" else segment
        old = self._max.get(key)
        if old is None or event_time > old:
            self._max[key] = event_time
        super().on_event(stream, segment, writer, seq, event_time, nbytes)

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        if t_ms % self.config.spark_trigger_ms:
            return
        if self.config.spark_input == "segment":
            live = {r.segment.name for r in rows}
            for name in [n for n in self._max if n not in live]:
                del self._max[name]
        if self._max:
            self._global = max(self._global, min(self._max.values()) - self.config.spark_delay_ms)
            self.pipeline.advance(self._global)


def make_strategies(config: LabStrategies, window_ms: int, clock: Clock) -> list[Strategy]:
    """The four strategies, in table order."""
    kinds: tuple[type[Strategy], ...] = (IngestionStrategy, ProducerStrategy, FlinkStrategy, SparkStrategy)
    return [cls(config, window_ms, clock) for cls in kinds]
