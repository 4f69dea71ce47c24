"""The segment frontier's rules, in one place: which successors are readable, the frontier's watermark.

Pure functions over segment metadata, used by the reader group, the Spark planner,
``flink_compat``, the simulator and the lab, so every engine reads a scaling stream and
derives its watermarks the same way:

- a successor is readable only once *every* predecessor is done (read to its sealed
  end): before that, events of a routing key that moved through a merge could overtake
  earlier ones (``ready_successors``, ``waiting_for``);
- the frontier's watermark is the minimum over the segments still being read; only
  when every segment is done (a sealed stream read to its end) is it the minimum of
  their final watermarks (``frontier_watermark``);
- the event-time watermark of an ingestion-time watermark ``W`` is ``W -
  maxEventTimeLag`` (docs/design.md §1), with its edges kept: no watermark stays none, the end
  of time stays the end of time, and nothing else falls to "none" or wraps around
  (``event_time_watermark``).

Every function is O(size of its input) and touches no store.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from segmentstore.limits import INT64_MAX, INT64_MIN

__all__ = [
    "NO_WATERMARK",
    "END_OF_TIME",
    "event_time_watermark",
    "waiting_for",
    "ready_successors",
    "frontier_watermark",
]

NO_WATERMARK = INT64_MIN
"""No watermark yet (Java's ``Long.MIN_VALUE``)."""

END_OF_TIME = INT64_MAX
"""The watermark after the last event (Java's ``Long.MAX_VALUE``)."""


def event_time_watermark(watermark: int, max_event_time_lag_ms: int) -> int:
    """``watermark - max_event_time_lag_ms``, clamped to int64 with ``NO_WATERMARK``/``END_OF_TIME`` kept.

    A real watermark never becomes ``NO_WATERMARK`` (its floor is ``NO_WATERMARK + 1``),
    so "nothing emitted yet" stays distinguishable from "very early". O(1).
    """
    if max_event_time_lag_ms < 0:
        raise ValueError(f"max_event_time_lag_ms must be >= 0, got {max_event_time_lag_ms}")
    if watermark <= NO_WATERMARK:
        return NO_WATERMARK
    if watermark >= END_OF_TIME:
        return END_OF_TIME
    return max(NO_WATERMARK + 1, watermark - max_event_time_lag_ms)


def waiting_for(predecessors: Iterable[str], done: Collection[str]) -> set[str]:
    """The predecessors of a successor not done yet: it is readable when this is empty. O(p)."""
    return {p for p in predecessors if p not in done}


def ready_successors(successors: Sequence[tuple[str, Sequence[str]]], done: Collection[str]) -> list[str]:
    """Names of the successors ``(name, predecessors)`` whose predecessors are all done. O(s x p)."""
    return [name for name, preds in successors if not waiting_for(preds, done)]


def frontier_watermark(live: Iterable[int], final: Iterable[int] = (), cap: int | None = None) -> int:
    """The minimum over the segments still read (``live``); else over the finished ones' ``final``.

    ``cap`` bounds it (a bounded read's target). ``NO_WATERMARK`` when there is nothing
    at all. O(n).
    """
    w = min(live, default=None)
    if w is None:
        w = min(final, default=NO_WATERMARK)
    return min(w, cap) if cap is not None else w
