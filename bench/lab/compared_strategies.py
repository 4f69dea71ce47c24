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
  partitions of a source) or, with ``spark_input: segment``, each segment
  (``bench.lab.spark_model``).

The rules the ``flink`` and ``spark`` models share with the engines (the late filter, when
a window fires, the generator, the valve, the emit interval, Spark's batch watermarks and
policy) each come from one seam, ``bench.lab.engine_rules``: the engines' own unless a run
is given others (``ingestwm validate --mutations``).
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
from readergroup.config import TimeDomain
from readergroup.group_state.state import SegmentState
from readergroup.reading.frontier import event_time_watermark
from segmentstore import Clock
from segmentstore.checks import checked
from segmentstore.limits import INT64_MAX, INT64_MIN

from ..sim.stages import StageChain
from ..spec.scenario import StageSpec
from .engine_rules import ENGINE_RULES, EngineRules
from .lab_scenario import LabStrategies

__all__ = [
    "LabEvent",
    "StrategyPipeline",
    "Strategy",
    "IngestionStrategy",
    "ProducerStrategy",
    "FlinkStrategy",
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
        self.pipeline.fire(watermark)


class StrategyPipeline:
    """Dedupe, reorder by event time, count per tumbling window; O(log b) per event for b buffered.

    ``late_filter``: the reordering operator (late at or below its watermark; Flink's own by
    default); ``fires_at``: a window ``[start, end)`` fires once the watermark reaches ``end +
    fires_at`` (``-1``, its last millisecond, as Flink's windows; Spark's: ``0``).
    """

    def __init__(
        self,
        window_ms: int,
        clock: Clock,
        late_filter: EventTimeOrderingOperator | None = None,
        fires_at: int = -1,
    ) -> None:
        self.clock = clock
        self.chain: StageChain | None = None  # pipeline.stages (attach_stages)
        self.ordering = late_filter if late_filter is not None else EventTimeOrderingOperator(None)
        self._window_lag = 1 + fires_at  # the windows' watermark is the pipeline's minus this
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
        late = self.ordering.num_late_records_dropped
        self.ordering.process_element(StreamRecord((writer, seq, nbytes), event_time))
        if self.ordering.num_late_records_dropped > late:  # the operator's rule: at or below its watermark
            self.late += 1
        else:
            self.buffered_bytes += nbytes  # held (a record leaves only when a watermark passes it)
        self.peak_events = max(self.peak_events, self.ordering.num_buffered)
        self.peak_bytes = max(self.peak_bytes, self.buffered_bytes)

    def advance(self, watermark: int) -> None:
        """Move event time to ``watermark`` (ignored unless it increases): release, fire windows."""
        if watermark > self.ordering.current_watermark:
            self.ordering.process_watermark(Watermark(watermark))

    def fire(self, watermark: Watermark) -> None:
        """Event time reached ``watermark`` after the reordering: the windows due fire, the stages see it."""
        lag = self._window_lag
        self.windows.process_watermark(Watermark(watermark.timestamp - lag) if lag else watermark)
        if self.chain is not None:
            self.chain.input_watermark_at(watermark.timestamp, self.clock.now())

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

    def __init__(
        self, config: LabStrategies, window_ms: int, clock: Clock, rules: EngineRules = ENGINE_RULES
    ) -> None:
        self.config = config
        self.clock = clock
        self.rules = rules
        self.pipeline = StrategyPipeline(window_ms, clock, rules.late_filter(), self.window_fires_at)

    @property
    def window_fires_at(self) -> int:
        """A window ``[start, end)`` fires once the watermark reaches ``end`` plus this: its last
        millisecond (``-1``), as Flink's windows (every strategy's but Spark's is a Flink job)."""
        return self.rules.flink_window_fires_at

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
        """Called after each tick's reads, with ``t_ms`` since the start and the group's segments
        (also at the multiples of ``period_ms`` between ticks)."""

    @property
    def period_ms(self) -> int | None:
        """The period of the strategy's own clocked action, if it has one (Flink's emit interval,
        Spark's trigger): the lab calls ``on_tick`` at its multiples too, also where they fall
        between two of the lab's ticks, so the action runs at its own instant (None: ticks only)."""
        return None

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

    __slots__ = ("channel", "idle", "log", "name", "valve", "watermark")

    def __init__(self, valve: StatusWatermarkValve, channel: int, name: str, log: FlinkStrategy) -> None:
        self.valve = valve
        self.channel = channel
        self.watermark = INT64_MIN
        self.idle = False
        self.name = name
        self.log = log  # its status changes go to log.statuses

    def emit_watermark(self, watermark: Watermark) -> None:
        if watermark.timestamp <= self.watermark:
            return
        self.watermark = watermark.timestamp
        self.mark_active()
        self.valve.input_watermark(watermark, self.channel)

    def mark_idle(self) -> None:
        if not self.idle:
            self.idle = True
            self.log.statuses.append((self.log.clock.now(), self.name, "idle"))
            self.valve.input_watermark_status(WatermarkStatus.IDLE, self.channel)

    def mark_active(self) -> None:
        if self.idle:
            self.idle = False
            self.log.statuses.append((self.log.clock.now(), self.name, "active"))
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
    combined watermark) at every move, intermediate ones included, ``fired_at``
    (the combined watermark that fired each of ``pipeline.firings``), ``statuses`` (clock
    ms, split, ``idle``/``active``) and ``transitions`` (clock ms, reader, what happened:
    join, crash, offline, restart, leave, stall, resume).
    """

    name = "flink"
    topology = "segment_union"

    def __init__(
        self, config: LabStrategies, window_ms: int, clock: Clock, rules: EngineRules = ENGINE_RULES
    ) -> None:
        super().__init__(config, window_ms, clock, rules)
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
        self.statuses: list[tuple[int, str, str]] = []
        self.transitions: list[tuple[int, str, str]] = []

    def on_reader(self, reader: str, kind: str) -> None:
        self.transitions.append((self.clock.now(), reader, kind))

    def _new_generator(self) -> Any:
        """A split's generator: bounded out-of-orderness with idleness (``rules.flink_generator``)."""
        cfg = self.config
        return self.rules.flink_generator(cfg.flink_bound_ms, cfg.flink_idle_timeout_ms, self.clock)

    def _gen(self, segment: str) -> Any:
        gen = self._gens.get(segment)
        if gen is None:
            gen = self._gens[segment] = self._new_generator()
        return gen

    def _join(self, segment: str, held: set[int]) -> _SplitEmitter:
        if self._valve is None:
            self._valve = self.rules.flink_valve(1)  # its one channel starts active and aligned
            channel = 0
        else:
            channel = self._valve.add_channel()
            self._valve.input_watermark_status(WatermarkStatus.ACTIVE, channel)
        self.slots[segment] = min(set(range(len(held) + 1)) - held)
        held.add(self.slots[segment])
        em = self._emitters[segment] = _SplitEmitter(self._valve, channel, segment, self)
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

    @property
    def period_ms(self) -> int:
        """``flink_interval_ms``: Flink's ``pipeline.auto-watermark-interval``, emits at its multiples."""
        return self.rules.flink_interval_ms(self.config.flink_interval_ms)

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        if t_ms % self.period_ms:
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
