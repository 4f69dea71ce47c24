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
        self.crashes = 0
        self.restarts = 0
        self._rng_fail = world.seeds.rng(f"readers.{name}.failures")
        self._rng_proc = world.seeds.rng(f"readers.{name}.processing")

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
        while True:
            restart = yield from self._session()
            if restart is None:
                return
            if restart > env.now:
                yield env.timeout(restart - env.now)
            self.restarts += 1

    def _session(self) -> Generator[simpy.Event, Any, int | None]:
        """One life of the reader, from joining to leaving or crashing; returns when it restarts (or None)."""
        w, s = self.world, self.spec
        env = w.env
        self.reader = w.group.create_reader(self.name)
        w.recorder.on_reader_joined(self.name)
        self.state = "online"
        if w.pipeline is not None:
            w.pipeline.channel_active(self.channel, True)
        failure = None
        if s.mtbf_ms is not None:
            failure = int(env.now) + max(1, int(self._rng_fail.exponential(s.mtbf_ms)))
        carry = 0.0
        while True:
            now = int(env.now)
            if s.leave_ms is not None and now >= s.leave_ms:
                self.reader.close()
                self._gone("left")
                return None
            crash = s.crash_ms is not None and now >= s.crash_ms
            if crash or (failure is not None and now >= failure):
                self.state = "crashed"
                self.crashes += 1
                if s.offline_after_ms:
                    yield env.timeout(s.offline_after_ms)
                w.group.reader_offline(self.name)
                self._gone("offline")
                if crash:
                    return None
                return int(env.now) + int(s.restart_ms.draw(self._rng_fail, 1)[0])
            f = s.noack
            if f is not None and f.start_ms <= now and (f.end_ms is None or now < f.end_ms):
                self.state = "stalled"
                if f.end_ms is None:
                    return None  # online forever, never acknowledging
                yield env.timeout(f.end_ms - now)
                self.state = "online"
                continue
            busy = 0
            back = w.outage_end(now)
            if back is None:
                carry, busy = self._read(carry)
            nxt = now + max(s.poll_ms, busy) if back is None else back
            change = self._next_change(now)
            if failure is not None and failure > now:
                change = failure if change is None else min(change, failure)
            if change is not None and busy == 0:
                nxt = min(nxt, change)
            yield env.timeout(max(1, nxt - now))

    def _gone(self, state: str) -> None:
        self.state = state
        if self.world.pipeline is not None:
            self.world.pipeline.channel_active(self.channel, False)

    def _read(self, carry: float) -> tuple[float, int]:
        """Read until idle, out of budget or busy for a poll period; returns the unused fractional
        budget and the processing time (ms) of what was read. O(events)."""
        w = self.world
        reader = self.reader
        assert reader is not None
        spec = self.spec
        rate = spec.rate_per_s
        budget = math.inf if rate is None else carry + rate * spec.poll_ms / 1000.0
        t_ms = int(w.env.now)
        rec, pipe = w.recorder, w.pipeline
        proc = spec.processing if spec.processing.active else None
        busy = 0
        while budget >= 1 and busy < spec.poll_ms:
            cap = MAX_BATCH if rate is None else int(min(budget, MAX_BATCH))
            if proc is not None:  # about what fits in the poll period's remaining processing time
                cap = max(1, min(cap, int((spec.poll_ms - busy) / max(proc.ms, 1e-3)) + 1))
            batch = reader.read_batch(cap)
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
                if proc is not None:
                    busy += int(proc.draw(self._rng_proc, n).sum())
                if pipe is not None:
                    pipe.on_events(writers, seqs, batch.event_time)
            elif batch.watermark is None:
                return 0.0, busy
        return (budget if rate is not None and math.isfinite(budget) else 0.0), busy
