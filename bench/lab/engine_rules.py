"""The engines' rules the lab's Flink and Spark models apply, each taken from one seam (``EngineRules``).

``ingestwm validate`` checks that the lab's ``flink`` and ``spark`` models compute what
Flink and Spark compute from the same input. Each rule a model could get wrong in a way
that matters at an edge (a tie, a window's last millisecond, an emit off a grid) is taken
from one field of ``EngineRules`` here, and nowhere else:

- ``late_filter``: the reordering operator every strategy's pipeline judges events with
  (late at or below its watermark, ``flink_compat``'s ``EventTimeOrderingOperator``);
- ``flink_window_fires_at`` / ``spark_window_fires_at``: a window ``[start, end)`` fires
  once the watermark reaches ``end`` plus this: ``-1`` in Flink (its last millisecond,
  ``TimeWindow.maxTimestamp``; the lab's other strategies are Flink jobs too), ``0`` in
  Spark (it evicts ``end <= watermark``);
- ``flink_generator``: one split's watermark generator, from the bound and the idleness
  timeout (Flink's ``forBoundedOutOfOrderness(bound).withIdleness(timeout)``: ``max -
  bound - 1``, idle once inactive for longer than the timeout, counted from the first
  periodic emit that saw nothing new);
- ``flink_valve``: the combination of the splits' watermarks at the late filter, from the
  number of channels (Flink's ``StatusWatermarkValve``: the minimum over active, aligned
  channels);
- ``flink_interval_ms``: the emit interval from the configured one (the same);
- ``spark_policy``: the global watermark over the inputs' (``multipleWatermarkPolicy``);
- ``spark_batch_watermark``: the watermark a micro-batch runs with, from the one the
  tracker held after the batch before it and the one it would hold with the batch's own
  rows counted (Spark: the former);
- ``spark_late_watermark``: the watermark a batch's rows are judged late against, from the
  one the batch before ran with and the one this batch runs with (Spark since 3.4,
  SPARK-40925: the former).

The models are built with ``ENGINE_RULES``, the engines' own, unless a lab run is given
others (``run_compare(sc, rules=...)``): ``bench.validate.mutations`` does that, with one
rule wrong at a time, to show the check finds a model that is wrong. The models have no
other way in and no branch for a wrong rule.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from flink_compat import EventTimeOrderingOperator, StatusWatermarkValve
from flink_compat.strategies import WatermarkGenerator, WatermarkStrategy
from segmentstore import Clock

__all__ = ["EngineRules", "ENGINE_RULES"]


def _late_filter() -> EventTimeOrderingOperator:
    """The reordering operator, without a late side output: late at or below its watermark."""
    return EventTimeOrderingOperator(late_output_tag=None)


def _bounded_with_idleness(bound_ms: int, idle_timeout_ms: int, clock: Clock) -> WatermarkGenerator[Any]:
    """A split's ``forBoundedOutOfOrderness(bound_ms).withIdleness(idle_timeout_ms)`` on ``clock``."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(bound_ms).with_idleness(idle_timeout_ms)
    return strategy.create_watermark_generator(clock)


def _as_configured(interval_ms: int) -> int:
    """Flink emits every ``pipeline.auto-watermark-interval``, as configured."""
    return interval_ms


def _spark_policy(policy: str, values: Collection[int]) -> int:
    """``multipleWatermarkPolicy``: the ``min`` (Spark's default) or the ``max`` of the inputs' watermarks."""
    return min(values) if policy == "min" else max(values)


def _tracker_before(before: int, with_own_rows: int) -> int:
    """A micro-batch runs with the watermark the tracker held after the batch before it."""
    return before


def _previous_batch(previous: int, own: int) -> int:
    """A batch's rows are late at or below the watermark the batch before it ran with."""
    return previous


@dataclass(frozen=True, slots=True)
class EngineRules:
    """The rules the lab's Flink and Spark models take from here (the module doc says each)."""

    late_filter: Callable[[], EventTimeOrderingOperator] = _late_filter
    flink_window_fires_at: int = -1
    spark_window_fires_at: int = 0
    flink_generator: Callable[[int, int, Clock], WatermarkGenerator[Any]] = _bounded_with_idleness
    flink_valve: Callable[[int], StatusWatermarkValve] = StatusWatermarkValve
    flink_interval_ms: Callable[[int], int] = _as_configured
    spark_policy: Callable[[str, Collection[int]], int] = _spark_policy
    spark_batch_watermark: Callable[[int, int], int] = _tracker_before
    spark_late_watermark: Callable[[int, int], int] = _previous_batch


ENGINE_RULES = EngineRules()
"""Flink's and Spark's own rules: what every lab run uses unless given others."""
