"""Example custom lab strategies (docs/strategies.md), named as ``bench.lab.strategies_contrib:Class``.

``PercentileDelayStrategy``: PDP-26's ingestion-time watermark with the
``maxEventTimeLag`` learned online instead of configured. Every delivered event's delay
``ingestion_time - event_time`` enters a sliding window of the last ``window`` delays
(bounded memory, exact order statistics: a sorted list plus the arrival order); the
bound is the ``q``-th percentile of that window (``initial_bound_ms`` until
``min_samples`` delays were seen) plus ``margin_ms``, and the event-time watermark is
``group watermark - bound``, where the group watermark is the reader group's
ingestion-time watermark (no event ingested at or before it follows).

So an event is late exactly when its delay exceeds the bound at the time it arrives:
with a stationary delay distribution about ``1 - q`` of the events are late, and the
watermark lags the ingestion watermark by the ``q``-th percentile of the delay. When
the delays grow, so does the bound (the watermark then holds still: the pipeline never
moves it back); when they shrink, the old delays leave the window after ``window``
events and the watermark catches up.
"""

from __future__ import annotations

import bisect
import math
from collections import deque

from segmentstore.checks import checked

from .compared_strategies import LabEvent

__all__ = ["PercentileDelayStrategy"]


class PercentileDelayStrategy:
    """Event-time watermark = ingestion-time group watermark - q-th percentile of recent delays.

    O(window) per event (a sorted-list insert and removal), O(1) per watermark; memory
    O(window).
    """

    time_domain = "ingestion"

    def __init__(
        self,
        q: float = 0.99,
        window: int = 1024,
        min_samples: int = 32,
        initial_bound_ms: int = 10_000,
        margin_ms: int = 0,
    ) -> None:
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 < q <= 1.0:
            raise ValueError(f"q must be a number in (0, 1], got {q!r}")
        for name, v, low in (
            ("window", window, 1),
            ("min_samples", min_samples, 1),
            ("initial_bound_ms", initial_bound_ms, 0),
            ("margin_ms", margin_ms, 0),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        if min_samples > window:
            raise ValueError(f"min_samples ({min_samples}) must not exceed window ({window})")
        self.q = float(q)
        self.window = window
        self.min_samples = min_samples
        self.initial_bound_ms = initial_bound_ms
        self.margin_ms = margin_ms
        self._arrival: deque[int] = deque()
        self._sorted: list[int] = []
        self._group: int | None = None
        self.seen = 0

    def on_event(self, event: LabEvent) -> None:
        d = event.ingestion_time - event.event_time
        self.seen += 1
        self._arrival.append(d)
        bisect.insort(self._sorted, d)
        if len(self._arrival) > self.window:
            old = self._arrival.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def on_group_watermark(self, watermark: int, now_ms: int) -> None:
        self._group = watermark

    @property
    def bound_ms(self) -> int:
        """The current bound: the q-th percentile (nearest rank) of the window's delays, plus the margin."""
        n = len(self._sorted)
        if self.seen < self.min_samples or n == 0:
            return self.initial_bound_ms + self.margin_ms
        return self._sorted[max(0, math.ceil(self.q * n) - 1)] + self.margin_ms

    def watermark(self, now_ms: int) -> int | None:
        if self._group is None:
            return None
        return self._group - self.bound_ms

    @checked
    def _check(self) -> None:
        assert len(self._arrival) == len(self._sorted) <= self.window
        assert sorted(self._arrival) == self._sorted
