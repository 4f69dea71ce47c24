"""The event-time step after the readers: ``flink_compat``'s valve, reordering operator and windows.

Each reader is an input channel of a ``StatusWatermarkValve``; the group watermarks it
returns become event-time watermarks ``W - max_event_time_lag`` (docs/design.md §1), combined
over the active channels (a reader that left or crashed is idle). Events become
``StreamRecord((writer, seq), event_time)`` into an ``EventTimeOrderingOperator``: records
at or below its watermark are late (side output), the rest leave in event-time order
once the watermark passes them, into an optional keyed (by writer) tumbling
``WindowOperator`` whose results are timed on the simulation clock, and into an optional
chain of stages (``bench.sim.stages``: window / aggregate operators, lag per stage).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from flink_compat import (
    CountAggregate,
    DiscardingOutput,
    EventTimeOrderingOperator,
    OutputTag,
    StatusWatermarkValve,
    StreamRecord,
    TumblingEventTimeWindows,
    Watermark,
    WatermarkStatus,
    WindowOperator,
    WindowResult,
)
from readergroup.reading.frontier import event_time_watermark
from segmentstore import Clock
from segmentstore.checks import checked

from ..spec.scenario import StageSpec
from .sentinels import real_time
from .stages import StageChain

__all__ = ["OrderedRecord", "WindowFiring", "EventTimePipeline"]

OrderedRecord = tuple[int, int, int, int]
"""(simulated time emitted, writer index, sequence number, event time)."""

WindowFiring = tuple[int, int, int, int, int]
"""(simulated time fired, writer index, window start, window end, count)."""


class _WindowSink(DiscardingOutput):
    """The window operator's output: firings with their simulated time."""

    __slots__ = ("clock", "firings")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.firings: list[WindowFiring] = []

    def collect(self, record: StreamRecord[Any]) -> None:
        r: WindowResult = record.value
        self.firings.append((self.clock.now(), int(r.key), r.window.start, r.window.end, int(r.value)))


class _OrderingSink(DiscardingOutput):
    """The reordering operator's output: ordered records (forwarded to the windows) and late ones."""

    __slots__ = ("chain", "clock", "late", "ordered", "windows")

    def __init__(self, clock: Clock, windows: WindowOperator | None, chain: StageChain | None) -> None:
        self.clock = clock
        self.windows = windows
        self.chain = chain
        self.ordered: list[OrderedRecord] = []
        self.late: list[OrderedRecord] = []

    def collect(self, record: StreamRecord[Any]) -> None:
        w, s = record.value
        assert record.timestamp is not None
        self.ordered.append((self.clock.now(), w, s, record.timestamp))
        if self.windows is not None:
            self.windows.process_element(record)
        if self.chain is not None:
            self.chain.input_record(w, record.timestamp, self.clock.now())

    def emit_watermark(self, watermark: Watermark) -> None:
        if self.windows is not None:
            self.windows.process_watermark(watermark)
        if self.chain is not None:
            self.chain.input_watermark_at(watermark.timestamp, self.clock.now())

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        if self.windows is not None:
            self.windows.process_watermark_status(status)

    def collect_side(self, tag: OutputTag, record: StreamRecord[Any]) -> None:
        w, s = record.value
        assert record.timestamp is not None
        self.late.append((self.clock.now(), w, s, record.timestamp))


class EventTimePipeline:
    """Valve -> ``EventTimeOrderingOperator`` -> optional tumbling windows, per simulation.

    O(log b) per record for b buffered records; O(channels) per watermark.
    """

    def __init__(
        self,
        channels: int,
        max_event_time_lag_ms: int,
        window_ms: int | None,
        clock: Clock,
        stages: tuple[StageSpec, ...] = (),
    ) -> None:
        self.lag = max_event_time_lag_ms
        self.valve = StatusWatermarkValve(max(1, channels))
        for ch in range(max(1, channels)):
            self.valve.input_watermark_status(WatermarkStatus.IDLE, ch)  # until the reader joins
        self.window_op: WindowOperator | None = None
        self.window_sink = _WindowSink(clock)
        if window_ms is not None:
            self.window_op = WindowOperator(
                TumblingEventTimeWindows.of(window_ms), CountAggregate(), key_selector=lambda v: v[0]
            )
            self.window_op.setup(self.window_sink)
        self.chain: StageChain | None = StageChain(stages) if stages else None
        self.sink = _OrderingSink(clock, self.window_op, self.chain)
        self.ordering = EventTimeOrderingOperator()
        self.ordering.setup(self.sink)

    # ------------------------------------------------------------------ inputs
    def channel_active(self, channel: int, active: bool) -> None:
        """A reader joined (active) or left/crashed (idle)."""
        status = WatermarkStatus.ACTIVE if active else WatermarkStatus.IDLE
        self._forward(self.valve.input_watermark_status(status, channel))

    def on_watermark(self, channel: int, ingestion_watermark: int) -> None:
        """A group watermark returned by the reader of ``channel``."""
        wm = event_time_watermark(ingestion_watermark, self.lag)
        self._forward(self.valve.input_watermark(Watermark(wm), channel))

    def on_events(self, writers: np.ndarray, seqs: np.ndarray, event_times: np.ndarray) -> None:
        """Events delivered by a reader, in delivery order. O(n log b)."""
        op = self.ordering
        for w, s, t in zip(writers.tolist(), seqs.tolist(), event_times.tolist(), strict=True):
            op.process_element(StreamRecord((w, s), t))

    def _forward(self, elements: Sequence[Any]) -> None:
        for e in elements:
            if isinstance(e, Watermark):
                self.ordering.process_watermark(e)
            else:
                self.ordering.process_watermark_status(e)

    # ------------------------------------------------------------------ results
    @property
    def event_time_watermark(self) -> int | None:
        """The combined event-time watermark (``None`` before the first, and at ``+inf``: ``sentinels``)."""
        return real_time(self.ordering.current_watermark)

    @property
    def buffered(self) -> int:
        return self.ordering.num_buffered

    @property
    def late_dropped(self) -> int:
        return self.ordering.num_late_records_dropped

    @property
    def ordered(self) -> list[OrderedRecord]:
        return self.sink.ordered

    @property
    def late(self) -> list[OrderedRecord]:
        return self.sink.late

    @property
    def firings(self) -> list[WindowFiring]:
        return self.window_sink.firings

    @checked
    def _check(self) -> None:
        """Assert the operators' and valve's invariants, and that the output is in event-time order."""
        self.valve._check()
        self.ordering._check()
        if self.window_op is not None:
            self.window_op._check()
        if self.chain is not None:
            self.chain._check()
        ts = [r[3] for r in self.sink.ordered]
        assert all(a <= b for a, b in itertools.pairwise(ts)), "ordered output is out of event-time order"
