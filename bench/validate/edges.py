"""What edges a lab run reached: ties, window edges, idle transitions, rebalances (``EdgeCounts``).

Where a model is most likely wrong, and where the shipped scenarios never go (issue 45):

- ``flink_ties``: events whose event time equals the Flink model's combined watermark they
  met (late by ``<=``, on time by ``<``);
- ``spark_ties``: rows whose event time equals the watermark they are judged against (the
  previous batch's); ``spark_behind``: rows above it but at or below the watermark their own
  batch runs with (late if Spark judged a batch by its own watermark, SPARK-40925);
- ``flink_window_edges``: windows the Flink model fired at exactly ``end - 1``;
  ``spark_window_edges``: Spark batches whose watermark was exactly ``end - 1`` of a window
  holding on-time rows (emitted by ``end <= watermark`` one batch later, by ``end - 1`` now);
- ``idle_transitions``: the Flink model's subtasks or segments going idle or active again;
- ``rebalances``: readers joining after the start, declared offline, leaving or restarting,
  and scale events: each moves segments between readers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..lab.compare import LabResult
from ..lab.compared_strategies import FlinkStrategy
from ..lab.spark_model import SparkStrategy

__all__ = ["EdgeCounts", "count_edges", "EDGE_COLUMNS"]

_NONE = -(2**62)

EDGE_COLUMNS = (
    "flink_ties",
    "spark_ties",
    "spark_behind",
    "flink_window_edges",
    "spark_window_edges",
    "idle_transitions",
    "rebalances",
)


@dataclass(frozen=True, slots=True)
class EdgeCounts:
    """How many edge cases one lab run hit (the module doc defines each)."""

    scenario: str
    flink_ties: int
    spark_ties: int
    spark_behind: int
    flink_window_edges: int
    spark_window_edges: int
    idle_transitions: int
    rebalances: int

    def as_dict(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in self.__slots__}


def count_edges(result: LabResult) -> EdgeCounts:
    """Count the edges ``result``'s Flink and Spark models reached. O(events + moves + batches)."""
    window = result.scenario.window_ms
    assert window is not None
    fl = result.strategies["flink"]
    sp = result.strategies["spark"]
    assert isinstance(fl, FlinkStrategy) and isinstance(sp, SparkStrategy)
    flink_ties = sum(1 for a in fl.arrivals if a[5] > _NONE and a[4] == a[5])
    fired = zip(fl.pipeline.firings, fl.fired_at, strict=True)
    flink_edges = sum(1 for (_, _start, end, _count), wm in fired if wm == end - 1)
    spark_ties = spark_behind = spark_edges = 0
    pending: list[int] = []  # event times of on-time rows whose window has not been emitted
    for b in sp.batches:
        for _input, _w, _q, et in b.rows:
            if b.late_watermark > 0 and et == b.late_watermark:
                spark_ties += 1
            elif b.late_watermark < et <= b.watermark:
                spark_behind += 1
            if et > b.late_watermark:
                pending.append(et)
        wm = b.watermark
        if wm > 0 and (wm + 1) % window == 0 and any(wm + 1 - window <= et <= wm for et in pending):
            spark_edges += 1
        pending = [et for et in pending if et - et % window + window > wm]
    joins_after_start = sum(
        1 for at, _r, kind in fl.transitions if kind == "join" and at > result.scenario.start_time_ms
    )
    moves = sum(1 for _at, _r, kind in fl.transitions if kind in ("offline", "leave", "restart"))
    return EdgeCounts(
        result.scenario.name,
        flink_ties,
        spark_ties,
        spark_behind,
        flink_edges,
        spark_edges,
        len(fl.statuses),
        joins_after_start + moves + len(result.scale_events_ms),
    )
