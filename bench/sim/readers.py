"""Simulated readers: real ``EventReader``s of the world's reader group, driven on simulated time.

A ``ReaderActor`` joins at ``join_ms`` (``ReaderGroup.create_reader``) and every
``poll_ms`` reads batches (``read_batch``) until nothing is left or its
``rate_per_s`` budget is used; each batch goes to the ``Recorder`` and, if the scenario
has one, the event-time pipeline (watermark first, then the events). Position reports
happen inside the reader, every ``position_report_interval_ms`` of the group clock and
whenever it is caught up. It may

- leave at ``leave_ms`` (``close()``: its segments return at its acknowledged positions);
- crash at ``crash_ms`` (it stops; ``offline_after_ms`` later the group is told,
  ``reader_offline``, and its segments return at its last *reported* positions, so some
  events are delivered again by their new owner);
- stall (``noack`` fault): it stays online but never reads, so it never acknowledges
  what it holds and the group watermark cannot pass its segments until the fault ends.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import simpy

from readergroup.reading.reader import EventReader

from .actors import World
from .scenario import ReaderSpec

__all__ = ["ReaderActor", "MAX_BATCH"]

MAX_BATCH = 65_536
"""Events per ``read_batch`` call."""

Proc = Generator[simpy.Event, Any, None]


class ReaderActor:
    """One reader instance; ``process()`` is its SimPy process."""

    def __init__(self, world: World, spec: ReaderSpec, name: str, channel: int) -> None:
        self.world = world
        self.spec = spec
        self.name = name
        self.channel = channel
        self.reader: EventReader | None = None
        self.state = "waiting"  # waiting | online | stalled | crashed | offline | left
        self.reads = 0
        self.events = 0

    def _next_change(self, now: int) -> int | None:
        """The next leave/crash/stall time after ``now``, if any."""
        s = self.spec
        times = [t for t in (s.leave_ms, s.crash_ms, s.noack.start_ms if s.noack else None) if t is not None]
        later = [t for t in times if t > now]
        return min(later) if later else None

    def process(self) -> Proc:
        w, s = self.world, self.spec
        env = w.env
        if s.join_ms > 0:
            yield env.timeout(s.join_ms)
        self.reader = w.group.create_reader(self.name)
        self.state = "online"
        if w.pipeline is not None:
            w.pipeline.channel_active(self.channel, True)
        carry = 0.0
        while True:
            now = int(env.now)
            if s.leave_ms is not None and now >= s.leave_ms:
                self.reader.close()
                self._gone("left")
                return
            if s.crash_ms is not None and now >= s.crash_ms:
                self.state = "crashed"
                if s.offline_after_ms:
                    yield env.timeout(s.offline_after_ms)
                w.group.reader_offline(self.name)
                self._gone("offline")
                return
            f = s.noack
            if f is not None and f.start_ms <= now and (f.end_ms is None or now < f.end_ms):
                self.state = "stalled"
                if f.end_ms is None:
                    return  # online forever, never acknowledging
                yield env.timeout(f.end_ms - now)
                self.state = "online"
                continue
            carry = self._read(carry)
            nxt = now + s.poll_ms
            change = self._next_change(now)
            if change is not None:
                nxt = min(nxt, change)
            yield env.timeout(nxt - now)

    def _gone(self, state: str) -> None:
        self.state = state
        if self.world.pipeline is not None:
            self.world.pipeline.channel_active(self.channel, False)

    def _read(self, carry: float) -> float:
        """Read until idle or out of budget; returns the unused fractional budget. O(events)."""
        w = self.world
        reader = self.reader
        assert reader is not None
        rate = self.spec.rate_per_s
        budget = math.inf if rate is None else carry + rate * self.spec.poll_ms / 1000.0
        t_ms = int(w.env.now)
        rec, pipe = w.recorder, w.pipeline
        while budget >= 1:
            batch = reader.read_batch(MAX_BATCH if rate is None else int(min(budget, MAX_BATCH)))
            self.reads += 1
            if batch.checkpoint_name is not None:
                continue
            writers, seqs = rec.on_batch(t_ms, self.name, batch)
            if pipe is not None and batch.watermark is not None:
                pipe.on_watermark(self.channel, batch.watermark)
            n = len(batch)
            if n:
                budget -= n
                self.events += n
                if pipe is not None:
                    pipe.on_events(writers, seqs, batch.event_time)
            elif batch.watermark is None:
                return 0.0
        return budget if rate is not None else 0.0
