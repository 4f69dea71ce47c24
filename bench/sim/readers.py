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
  what it holds and the group watermark cannot pass its segments until the fault ends;
- with ``mtbf_ms``, crash at random and restart.

When is the reader's ``FailureSchedule`` (``bench.sim.failure_schedule``, shared with
the reader processes and the lab); the actor acts on it at its wake-ups.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import simpy

from readergroup.reading.reader import EventReader

from ..spec.scenario import ReaderSpec
from .actors import World
from .failure_schedule import FailureSchedule

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
        self.schedule = FailureSchedule.for_reader(spec, name, world.seeds)
        self._rng_proc = world.seeds.rng(f"readers.{name}.processing")

    def process(self) -> Proc:
        env = self.world.env
        if self.schedule.join_ms > 0:
            yield env.timeout(self.schedule.join_ms)
        while True:
            restart = yield from self._session()
            if restart is None:
                return
            if restart > env.now:
                yield env.timeout(restart - env.now)
            self.restarts += 1

    def _session(self) -> Generator[simpy.Event, Any, int | None]:
        """One life of the reader (its ``FailureSchedule`` session), from joining to leaving or crashing;
        returns when it restarts (or None)."""
        w, s = self.world, self.spec
        env = w.env
        session = self.schedule.session(int(env.now))
        self.reader = w.group.create_reader(self.name)
        w.recorder.on_reader_joined(self.name)
        self.state = "online"
        if w.pipeline is not None:
            w.pipeline.channel_active(self.channel, True)
        carry = 0.0
        while True:
            now = int(env.now)
            due = session.due(now)
            if due == "leave":
                self.reader.close()
                self._gone("left")
                return None
            if due == "crash" or due == "failure":
                self.state = "crashed"
                self.crashes += 1
                outage = self.schedule.crashed(due, now)
                if outage.offline_ms > now:
                    yield env.timeout(outage.offline_ms - now)
                w.group.reader_offline(self.name)
                self._gone("offline")
                return outage.restart_ms
            if due == "stall":
                self.state = "stalled"
                if session.stall_end_ms is None:
                    return None  # online forever, never acknowledging
                yield env.timeout(session.stall_end_ms - now)
                self.state = "online"
                continue
            busy = 0
            back = w.outage_end(now)
            if back is None:
                carry, busy = self._read(carry)
            nxt = now + max(s.poll_ms, busy) if back is None else back
            change = session.next_change(now)
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
