"""The four watermark strategies the lab compares, each feeding the same reordering and windows.

Every strategy owns a reader group of its own (``bench.lab.compare``: the ``producer``
one on the asserted copy of the stream, the others on the workload as written) and a
``StrategyPipeline``:
de-duplication of redelivered events, ``flink_compat``'s ``EventTimeOrderingOperator``
(an event at or below the watermark on arrival is late and dropped; the rest wait in
the reordering buffer until the watermark passes them) and tumbling count windows
(``WindowOperator``; a window fires once the watermark reaches its end - 1). So the
strategies differ only in the event-time watermark:

- ``ingestion``: the group's ingestion-time watermark (``TimeDomain.INGESTION_TIME``)
  minus ``max_event_time_lag_ms`` (PDP-26, docs/design.md §1).
- ``producer``: the writers' own assertions (``TimeDomain.EVENT_TIME``): minimum over
  active writers at the group's acknowledged positions.
- ``flink``: Flink's bounded out-of-orderness ``max event time - bound - 1`` with
  idleness, emitted every ``flink_interval_ms``, combined by Flink's
  ``StatusWatermarkValve`` (minimum over active, aligned channels; checked against Flink
  itself by ``ingestwm validate``), in one of two job topologies
  (``strategies.flink_source``): a subtask per reader of the group, as Pravega's
  connectors run (``reader``, the default: ``flink_reader.FlinkReaderStrategy``), or one
  bounded source per segment, unioned (``segment_union``: ``FlinkStrategy``).
- ``spark``: Spark's micro-batch rule, checked against Spark itself by ``ingestwm
  validate``: per input ``max(event time) - delay`` after each micro-batch, the global
  watermark the ``min`` (or ``max``) over inputs, never decreasing; a batch drops rows
  at or below the previous batch's watermark and emits windows whose end it reached
  (``SparkStrategy``). An input is the whole stream (Spark's maximum over all
  partitions of a source) or, with ``spark_input: segment``, each segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flink_compat import (
    CountAggregate,
    DiscardingOutput,
    EventTimeOrderingOperator,
    StatusWatermarkValve,
    StreamRecord,
    TumblingEventTimeWindows,
    Watermark,
    WatermarkStatus,
    WindowOperator,
    WindowResult,
)
from flink_compat.strategies import WatermarkStrategy
from readergroup.config import TimeDomain
from readergroup.group_state.state import SegmentState
from readergroup.reading.frontier import event_time_watermark
from segmentstore import Clock
from segmentstore.checks import checked
from segmentstore.limits import INT64_MAX, INT64_MIN

from ..sim.stages import StageChain
from ..spec.scenario import StageSpec
from .lab_scenario import LabStrategies

__all__ = [
    "LabEvent",
    "StrategyPipeline",
    "Strategy",
    "IngestionStrategy",
    "ProducerStrategy",
    "FlinkStrategy",
    "SparkStrategy",
    "SparkBatch",
]


@dataclass(frozen=True, slots=True)
class LabEvent:
    """One delivered event, as every strategy receives it (``Strategy.deliver``).

    ``now_ms``: the lab clock when it was delivered (ms since the epoch);
    ``ingestion_time``: when the store appended it; ``event_time``: the writer's time;
    ``writer`` / ``seq``: which writer and its sequence number; ``nbytes``: frame size;
    ``reader``: the reader instance of the strategy's group that delivered it (``""`` when
    built without one: a plug-in's own tests may leave it out).
    """

    now_ms: int
    stream: str
    segment: str
    writer: int
    seq: int
    event_time: int
    ingestion_time: int
    nbytes: int
    reader: str = ""


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
        p = self.pipeline
        p.buffered_bytes -= record.value[2]
        p.windows.process_element(record)
        if p.chain is not None:
            assert record.timestamp is not None
            p.chain.input_record(record.value[0], record.timestamp, p.clock.now())

    def emit_watermark(self, watermark: Watermark) -> None:
        p = self.pipeline
        p.windows.process_watermark(watermark)
        if p.chain is not None:
            p.chain.input_watermark_at(watermark.timestamp, p.clock.now())


class StrategyPipeline:
    """Dedupe, reorder by event time, count per tumbling window; O(log b) per event for b buffered."""

    def __init__(self, window_ms: int, clock: Clock) -> None:
        self.clock = clock
        self.chain: StageChain | None = None  # pipeline.stages (attach_stages)
        self.ordering = EventTimeOrderingOperator(late_output_tag=None)
        self.windows = WindowOperator(TumblingEventTimeWindows.of(window_ms), CountAggregate())
        self.sink = _WindowSink(clock)
        self.windows.setup(self.sink)
        self.ordering.setup(_OrderingSink(self))
        self.seen: set[tuple[int, int]] = set()
        self.delivered = self.duplicates = self.late = 0
        self.buffered_bytes = self.peak_events = self.peak_bytes = 0

    def attach_stages(self, stages: Sequence[StageSpec]) -> None:
        """Feed the reordering buffer's output also into a chain of stages (before any event)."""
        self.chain = StageChain(tuple(stages)) if stages else None

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
        if self.chain is not None:
            self.chain._check()
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

    def deliver(self, event: LabEvent) -> None:
        """A delivered event, as the readers hand it over (a custom strategy sees all of it)."""
        self.on_event(event.stream, event.segment, event.writer, event.seq, event.event_time, event.nbytes)

    def on_event(
        self, stream: str, segment: str, writer: int, seq: int, event_time: int, nbytes: int
    ) -> None:
        """A delivered event (before it enters the pipeline)."""
        self.pipeline.event(writer, seq, event_time, nbytes)

    def on_watermark(self, watermark: int) -> None:
        """A watermark the reader group delivered (in its time domain)."""

    def on_readers(self, readers: Sequence[str]) -> None:
        """The reader instances of its group, in order, once before the first tick."""

    def on_reader(self, reader: str, kind: str) -> None:
        """Reader ``reader`` made a transition (join, crash, offline, restart, leave, stall, resume)."""

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        """Called after each tick's reads, with ``t_ms`` since the start and the group's segments."""

    @property
    def watermark(self) -> int:
        return self.pipeline.watermark

    @checked
    def _check(self) -> None:
        """The pipeline's invariants (a strategy with state of its own checks that too)."""
        self.pipeline._check()


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


class _SplitEmitter:
    """One split's watermark output, as Flink's ``TimestampsAndWatermarksOperator.WatermarkEmitter``.

    A watermark goes out only if it is above the last one sent; a split marked idle
    becomes active again only with such a watermark (an event alone does not), and
    both reach the valve's channel for the split.
    """

    __slots__ = ("channel", "idle", "valve", "watermark")

    def __init__(self, valve: StatusWatermarkValve, channel: int) -> None:
        self.valve = valve
        self.channel = channel
        self.watermark = INT64_MIN
        self.idle = False

    def emit_watermark(self, watermark: Watermark) -> None:
        if watermark.timestamp <= self.watermark:
            return
        self.watermark = watermark.timestamp
        self.mark_active()
        self.valve.input_watermark(watermark, self.channel)

    def mark_idle(self) -> None:
        if not self.idle:
            self.idle = True
            self.valve.input_watermark_status(WatermarkStatus.IDLE, self.channel)

    def mark_active(self) -> None:
        if self.idle:
            self.idle = False
            self.valve.input_watermark_status(WatermarkStatus.ACTIVE, self.channel)


class FlinkStrategy(Strategy):
    """Flink with one source per segment, each bounded out-of-orderness with idleness, unioned.

    ``strategies.flink_source: segment_union``. No Pravega connector reads a stream this
    way (they run a reader per subtask: ``flink_reader.FlinkReaderStrategy``, the default);
    it is the job of a union of one bounded source per segment, and under scaling a
    finished segment's ``+inf`` can end event time while its successors are unaligned.

    As ``ingestwm validate`` checks it against Flink (docs/engines.md): per segment a
    ``WatermarksWithIdleness(BoundedOutOfOrdernessWatermarks)`` generator emitting every
    ``flink_interval_ms`` through Flink's ``WatermarkEmitter`` (``_SplitEmitter``), and
    the late filter's ``StatusWatermarkValve`` over the segments' channels: the minimum
    over active, aligned channels (a split back from idle counts again once it reaches
    the combined watermark); when the last active one goes idle, the maximum over all.
    A segment's channel joins when it becomes readable (idle until then, as a source
    that has read nothing) and, when the segment is finished, its source ends with the
    watermark ``+inf`` and its channel stays (active at ``+inf``).

    One tick, in the order Flink's union takes it when every source's emit is sent in
    turn (the replay's order): the finished segments' ``+inf`` (by name), then the new
    segments join (by name, all before any emit), then one periodic emit per live
    segment in the order of its *slot* (the lowest one no unfinished segment holds when
    it joins; a segment's slot is free again the tick after its ``+inf``). Flink's valve
    takes them one channel at a time, so the combined watermark moves after each, and
    windows fire at every such intermediate value; an event meets the value after the
    last tick before it.

    Records for ``ingestwm validate``: ``arrivals`` (clock ms, segment, writer, seq,
    event time, watermark on arrival, late) of every event it delivered (duplicates
    excluded), ``redelivered`` (clock ms, segment, event time) of the duplicates (they
    still reach the generator), ``spans`` (clock ms of each segment's first and last
    periodic emit as a split), ``slots`` (each segment's slot), ``emitted`` (clock ms,
    combined watermark) at every move, intermediate ones included, and ``fired_at``
    (the combined watermark that fired each of ``pipeline.firings``).
    """

    name = "flink"
    topology = "segment_union"

    def __init__(self, config: LabStrategies, window_ms: int, clock: Clock) -> None:
        super().__init__(config, window_ms, clock)
        self._strategy = WatermarkStrategy.for_bounded_out_of_orderness(config.flink_bound_ms).with_idleness(
            config.flink_idle_timeout_ms
        )
        self._valve: StatusWatermarkValve | None = None
        self._gens: dict[str, Any] = {}
        self._emitters: dict[str, _SplitEmitter] = {}  # the splits that joined, by segment
        self._finished: set[str] = set()
        self.arrivals: list[tuple[int, str, int, int, int, int, bool]] = []
        self.redelivered: list[tuple[int, str, int]] = []
        self.spans: dict[str, list[int]] = {}
        self.slots: dict[str, int] = {}
        self.emitted: list[tuple[int, int]] = []
        self.fired_at: list[int] = []

    def _gen(self, segment: str) -> Any:
        gen = self._gens.get(segment)
        if gen is None:
            gen = self._gens[segment] = self._strategy.create_watermark_generator(self.clock)
        return gen

    def _join(self, segment: str, held: set[int]) -> _SplitEmitter:
        if self._valve is None:
            self._valve = StatusWatermarkValve(1)  # its one channel starts active and aligned
            channel = 0
        else:
            channel = self._valve.add_channel()
            self._valve.input_watermark_status(WatermarkStatus.ACTIVE, channel)
        self.slots[segment] = min(set(range(len(held) + 1)) - held)
        held.add(self.slots[segment])
        em = self._emitters[segment] = _SplitEmitter(self._valve, channel)
        return em

    def _moved(self, now: int) -> None:
        """The valve took one channel's input: event time follows it (windows fire at every move)."""
        assert self._valve is not None
        p = self.pipeline
        before, fired = p.watermark, len(p.firings)
        p.advance(self._valve.last_output_watermark)
        if p.watermark != before:
            self.emitted.append((now, p.watermark))
            self.fired_at += [p.watermark] * (len(p.firings) - fired)

    def on_event(
        self, stream: str, segment: str, writer: int, seq: int, event_time: int, nbytes: int
    ) -> None:
        self._gen(segment).on_event(None, event_time, None)
        p = self.pipeline
        wm, late, dups = p.watermark, p.late, p.duplicates
        super().on_event(stream, segment, writer, seq, event_time, nbytes)
        if p.duplicates == dups:
            self.arrivals.append((self.clock.now(), segment, writer, seq, event_time, wm, p.late > late))
        else:
            self.redelivered.append((self.clock.now(), segment, event_time))

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        if t_ms % self.config.flink_interval_ms:
            return
        live = {r.segment.name for r in rows if r.status != "future"}
        now = self.clock.now()
        # slots held at this tick: a segment finishing now keeps its own until the next one
        held = {self.slots[n] for n in self._emitters if n not in self._finished}
        for name in sorted(n for n in self._emitters if n not in live and n not in self._finished):
            self._finished.add(name)  # its source ended: +inf, and the channel stays active
            self._emitters[name].emit_watermark(Watermark(INT64_MAX))
            self._moved(now)
        running = live - self._finished
        for name in sorted(running - self._emitters.keys()):
            self._join(name, held)  # in Flink its mark made it active a tick before any emit here
        for name in sorted(running, key=lambda n: self.slots[n]):
            self._gen(name).on_periodic_emit(self._emitters[name])
            self.spans.setdefault(name, [now, now])[1] = now
            self._moved(now)

    @checked
    def _check(self) -> None:
        """One channel per joined split; finished ones at +inf; the pipeline follows the valve."""
        self.pipeline._check()
        if self._valve is None:
            assert not self._emitters
            return
        self._valve._check()
        assert sorted(e.channel for e in self._emitters.values()) == list(range(self._valve.num_channels))
        assert self._finished <= self._emitters.keys()
        for name in self._finished:
            em = self._emitters[name]
            assert em.watermark == INT64_MAX and not em.idle, name
        assert self.pipeline.watermark >= self._valve.last_output_watermark or not self.emitted
        assert all(a[1] < b[1] for a, b in zip(self.emitted, self.emitted[1:], strict=False))
        assert len(self.fired_at) == len(self.pipeline.firings)
        live = [self.slots[n] for n in self._emitters if n not in self._finished]
        assert len(live) == len(set(live)), "two unfinished segments share a slot"


@dataclass(frozen=True, slots=True)
class SparkBatch:
    """One micro-batch of the Spark model, as Spark would run it at a trigger.

    ``watermark`` is the batch's ``batchWatermarkMs`` (it evicts, i.e. emits, every window
    ``[start, end)`` with ``end <= watermark``); rows at or below ``late_watermark`` — the
    previous batch's watermark — are dropped as late. ``rows`` are ``(input, writer, seq,
    event time)`` in delivery order (none: a no-data batch, run because the watermark moved).
    """

    index: int
    t_ms: int
    watermark: int
    late_watermark: int
    rows: tuple[tuple[str, int, int, int], ...]
    late: int
    fired: tuple[tuple[int, int], ...]  # (window start, count), in the order emitted


class _SparkEviction(_OrderingSink):
    """Spark emits a window ``[start, end)`` once the watermark reaches ``end`` (Flink: ``end - 1``)."""

    __slots__ = ()

    def emit_watermark(self, watermark: Watermark) -> None:
        p = self.pipeline
        p.windows.process_watermark(Watermark(watermark.timestamp - 1))
        if p.chain is not None:  # the stages after it see Spark's watermark as it is
            p.chain.input_watermark_at(watermark.timestamp, p.clock.now())


class SparkStrategy(Strategy):
    """Spark Structured Streaming's micro-batch watermark, as ``MicroBatchExecution`` runs it.

    At each trigger (``spark_trigger_ms``) one batch runs if rows arrived since the last
    one, or — a no-data batch — if the watermark moved past the last batch's. A batch
    runs with the watermark computed after the batch before it: windows with
    ``end <= watermark`` are emitted, and rows at or below the *previous* batch's
    watermark are late (Spark's late-event watermark, one batch behind, SPARK-40925).
    After the batch each input's watermark becomes ``max(event time) - spark_delay_ms``
    if that is higher; an input that never had data counts as 0 (Spark's
    ``WatermarkTracker``), and the global watermark, never decreasing, is the
    ``spark_policy`` (``min`` or ``max``) over inputs. An input is the stream (one
    ``withWatermark`` over the source) or, with ``spark_input: segment``, each segment.
    ``batches`` records every batch (``SparkBatch``) for ``ingestwm validate``.
    """

    name = "spark"

    def __init__(self, config: LabStrategies, window_ms: int, clock: Clock) -> None:
        super().__init__(config, window_ms, clock)
        self.pipeline.ordering.setup(_SparkEviction(self.pipeline))
        self._inputs: dict[str, int] = {}  # input -> its watermark (0 until it has data)
        self._batch_max: dict[str, int] = {}
        self._rows: list[tuple[str, int, int, int]] = []
        self._next = 0  # the global watermark the next batch runs with
        self._last: int | None = None  # the last batch's watermark
        self._late_before = 0
        self.batches: list[SparkBatch] = []
        self.inputs_added_late = False  # an input appeared after the first batch (Spark's are fixed)

    def _add_input(self, key: str) -> None:
        if key not in self._inputs:
            self._inputs[key] = 0
            self.inputs_added_late = self.inputs_added_late or bool(self.batches)

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(sorted(self._inputs))

    def on_event(
        self, stream: str, segment: str, writer: int, seq: int, event_time: int, nbytes: int
    ) -> None:
        key = stream if self.config.spark_input == "stream" else segment
        self._add_input(key)
        old = self._batch_max.get(key)
        if old is None or event_time > old:
            self._batch_max[key] = event_time
        self._rows.append((key, writer, seq, event_time))
        super().on_event(stream, segment, writer, seq, event_time, nbytes)

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        if t_ms % self.config.spark_trigger_ms:
            return
        if self.config.spark_input == "segment":
            for r in rows:
                self._add_input(r.segment.name)
        if not self._rows and (self._last is None or self._next <= self._last):
            return
        p = self.pipeline
        wm, fired_before = self._next, len(p.firings)
        if wm > 0:
            p.advance(wm)
        self.batches.append(
            SparkBatch(
                len(self.batches),
                t_ms,
                wm,
                0 if self._last is None else self._last,
                tuple(self._rows),
                p.late - self._late_before,
                tuple((start, count) for _, start, _, count in p.firings[fired_before:]),
            )
        )
        self._last, self._late_before = wm, p.late
        delay = self.config.spark_delay_ms
        for key, m in self._batch_max.items():
            self._inputs[key] = max(self._inputs[key], m - delay)
        if self._inputs:
            values = self._inputs.values()
            self._next = max(self._next, min(values) if self.config.spark_policy == "min" else max(values))
        self._batch_max.clear()
        self._rows.clear()

    @checked
    def _check(self) -> None:
        """Batches ascend in time, each judged against the watermark before it; watermarks never fall."""
        self.pipeline._check()
        prev = 0
        for i, b in enumerate(self.batches):
            assert b.index == i and b.late_watermark == prev and b.watermark >= prev, b
            assert i == 0 or b.t_ms > self.batches[i - 1].t_ms
            prev = b.watermark
        assert self._next >= prev and all(v >= 0 for v in self._inputs.values())
