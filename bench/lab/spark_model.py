"""The lab's Spark model: Spark Structured Streaming's micro-batch watermark (``SparkStrategy``).

Checked against Spark itself by ``ingestwm validate`` (docs/engines.md): the model's
batches are replayed in Spark, one Spark micro-batch each, and every batch's watermark,
late rows and emitted windows must be Spark's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flink_compat import Watermark
from readergroup.group_state.state import SegmentState
from segmentstore import Clock
from segmentstore.checks import checked

from .compared_strategies import Strategy, _OrderingSink
from .engine_rules import ENGINE_RULES, EngineRules
from .lab_scenario import LabStrategies

__all__ = ["SparkStrategy", "SparkBatch"]


@dataclass(frozen=True, slots=True)
class SparkBatch:
    """One micro-batch of the Spark model, as Spark would run it at a trigger.

    ``watermark`` is the batch's ``batchWatermarkMs`` (it evicts, i.e. emits, every window
    ``[start, end)`` with ``end <= watermark``); rows at or below ``late_watermark`` — the
    previous batch's watermark — are dropped as late: ``late`` counts them, redelivered rows
    too (Spark's deduplication drops a row at or below the watermark before it looks for a
    duplicate: ``numRowsDroppedByWatermark``). ``rows`` are ``(input, writer, seq, event
    time)`` in delivery order (none: a no-data batch, run because the watermark moved).
    """

    index: int
    t_ms: int
    watermark: int
    late_watermark: int
    rows: tuple[tuple[str, int, int, int], ...]
    late: int
    fired: tuple[tuple[int, int], ...]  # (window start, count), in the order emitted


class _SparkState(_OrderingSink):
    """Spark's state store: rows past the late filter wait in their windows until a batch evicts
    them (``SparkStrategy.on_tick``); the late filter's own watermark evicts nothing."""

    __slots__ = ()

    def emit_watermark(self, watermark: Watermark) -> None:
        """The late filter moved: the windows wait for the batch's eviction."""


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

    Spark's two watermarks of a batch are the model's two steps: the pipeline's late filter
    (the reordering operator) holds the late-events one while the batch's rows arrive, and
    the batch evicts its windows with its own (``engine_rules``: which watermark is which).
    """

    name = "spark"

    def __init__(
        self, config: LabStrategies, window_ms: int, clock: Clock, rules: EngineRules = ENGINE_RULES
    ) -> None:
        super().__init__(config, window_ms, clock, rules)
        self.pipeline.ordering.setup(_SparkState(self.pipeline))
        self._inputs: dict[str, int] = {}  # input -> its watermark (0 until it has data)
        self._batch_max: dict[str, int] = {}
        self._rows: list[tuple[str, int, int, int]] = []
        self._next = 0  # the global watermark the tracker holds: the next batch runs with it
        self._last: int | None = None  # the last batch's watermark
        self._evicted = 0  # the last eviction's watermark
        self._late_before = 0
        self._late_redelivered = 0  # redelivered rows at or below the watermark, since the last batch
        self.batches: list[SparkBatch] = []
        self.inputs_added_late = False  # an input appeared after the first batch (Spark's are fixed)

    @property
    def window_fires_at(self) -> int:
        return self.rules.spark_window_fires_at

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
        p = self.pipeline
        dups = p.duplicates
        super().on_event(stream, segment, writer, seq, event_time, nbytes)
        if p.duplicates > dups and event_time <= p.watermark:
            self._late_redelivered += 1  # Spark's deduplication drops it by watermark, not as a duplicate

    @property
    def period_ms(self) -> int:
        """``spark_trigger_ms``: a processing-time trigger runs a batch at its multiples."""
        return self.config.spark_trigger_ms

    def on_tick(self, t_ms: int, rows: Sequence[SegmentState]) -> None:
        if t_ms % self.period_ms:
            return
        if self.config.spark_input == "segment":
            for r in rows:
                self._add_input(r.segment.name)
        if not self._rows and (self._last is None or self._next <= self._last):
            return
        p = self.pipeline
        inputs, tracked = self._tracked()
        wm = self.rules.spark_batch_watermark(self._next, tracked)
        late_wm, fired_before = max(0, p.watermark), len(p.firings)
        if wm > 0:
            p.advance(wm)  # the late filter releases what the batch's watermark passed
        if wm > self._evicted:
            self._evicted = wm
            p.fire(Watermark(wm))
        self.batches.append(
            SparkBatch(
                len(self.batches),
                t_ms,
                wm,
                late_wm,
                tuple(self._rows),
                p.late - self._late_before + self._late_redelivered,
                tuple((start, count) for _, start, _, count in p.firings[fired_before:]),
            )
        )
        self._last, self._late_before, self._late_redelivered = wm, p.late, 0
        self._inputs, self._next = inputs, tracked
        late = self.rules.spark_late_watermark(wm, self._next)  # the next batch's rows meet it
        if late > 0:
            p.advance(late)
        self._batch_max.clear()
        self._rows.clear()

    def _tracked(self) -> tuple[dict[str, int], int]:
        """Each input's watermark and the global one once this batch's rows are counted: an input's
        ``max(event time) - spark_delay_ms`` if higher, the global the ``spark_policy`` over them,
        never decreasing."""
        delay = self.config.spark_delay_ms
        inputs = dict(self._inputs)
        for key, m in self._batch_max.items():
            inputs[key] = max(inputs[key], m - delay)
        if not inputs:
            return inputs, self._next
        return inputs, max(self._next, self.rules.spark_policy(self.config.spark_policy, inputs.values()))

    @checked
    def _check(self) -> None:
        """Batches ascend in time, each judged against the watermark its rules say; watermarks never fall."""
        self.pipeline._check()
        prev = 0
        for i, b in enumerate(self.batches):
            assert b.watermark >= prev and b.index == i, b
            assert i == 0 or b.t_ms > self.batches[i - 1].t_ms
            assert b.late_watermark == (
                prev if i == 0 else self.rules.spark_late_watermark(prev, b.watermark)
            ), b
            prev = b.watermark
        assert self._next >= prev and all(v >= 0 for v in self._inputs.values())
