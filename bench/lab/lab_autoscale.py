"""``scaling.mode: auto`` in the lab: the rates the writers make, and the simulator's plan over them.

``LoadMeter`` counts the events written per key range, as the simulator's writers count
them; ``AutoScaler`` checks every ``every_ms`` and scales the stream by ``auto_plan``
(``bench.sim.actors``), so the lab scales when the simulator does for the same seed.
"""

from __future__ import annotations

import bisect

from segmentstore.client import EmbeddedClient

from ..sim.actors import auto_plan
from ..spec.scenario import ScalingSpec

__all__ = ["LoadMeter", "AutoScaler"]


class LoadMeter:
    """Events written per key range (auto-scaling's rates), each counted in the active segment
    its key hashes to, as the simulator's writers count them. O(log segments) per event."""

    def __init__(self, client: EmbeddedClient, stream: str) -> None:
        self.client = client
        self.stream = stream
        self.counts: dict[tuple[float, float], int] = {}
        self._lows: list[float] = []
        self._ranges: list[tuple[float, float]] = []
        self.refresh()

    def refresh(self) -> None:
        """Route by the stream's active segments (after it scaled)."""
        segs = sorted(self.client.get_stream(self.stream).active_segments, key=lambda s: s.key_low)
        self._lows = [s.key_low for s in segs]
        self._ranges = [(s.key_low, s.key_high) for s in segs]

    def count(self, h: float) -> None:
        r = self._ranges[bisect.bisect_right(self._lows, h) - 1]
        self.counts[r] = self.counts.get(r, 0) + 1

    def _check(self) -> None:
        assert self._lows == sorted(self._lows) and self._lows and self._lows[0] == 0.0
        assert all(a[1] == b[0] for a, b in zip(self._ranges, self._ranges[1:], strict=False))
        assert all(v > 0 for v in self.counts.values())


class AutoScaler:
    """``scaling.mode: auto`` in the lab: every ``every_ms`` from ``start_ms`` (to ``stop_ms``), the
    simulator's plan (``auto_plan``) over each active segment's rate since the last check."""

    def __init__(self, sp: ScalingSpec, end_ms: int, client: EmbeddedClient, meter: LoadMeter) -> None:
        assert sp.every_ms is not None
        stop = min(sp.stop_ms if sp.stop_ms is not None else end_ms, end_ms)
        self.sp = sp
        self.times = set(range(sp.start_ms + sp.every_ms, stop + 1, sp.every_ms)) - {end_ms}
        self.client = client
        self.meter = meter
        self._seen: dict[tuple[float, float], int] = {}

    def step(self, t: int) -> bool:
        """Check the rates if due at ``t``; whether the stream scaled."""
        if t not in self.times:
            return False
        sp, every, counts = self.sp, self.sp.every_ms, self.meter.counts
        assert every is not None
        stream = self.meter.stream
        segs = sorted(self.client.get_stream(stream).active_segments, key=lambda s: s.key_low)
        rates = {
            s.name: (counts.get(r, 0) - self._seen.get(r, 0)) * 1000.0 / every
            for s in segs
            for r in [(s.key_low, s.key_high)]
        }
        self._seen = dict(counts)
        plans = auto_plan(segs, rates, sp.target_rate_per_s, sp.min_segments)
        for seal, ranges in plans:
            self.client.scale_stream(stream, seal, ranges)
        if plans:
            self.meter.refresh()
        return bool(plans)
