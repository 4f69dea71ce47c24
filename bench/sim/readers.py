"""Simulated readers: real ``EventReader``s of a reader group, driven on simulated time.

A ``PolledReader`` joins at ``join_ms`` (``ReaderGroup.create_reader``) and every
``poll_ms`` reads batches (``read_batch``) until nothing is left or its
``rate_per_s`` budget is used; each batch goes to ``on_batch``, which says what reading
it means: for the simulator's ``ReaderActor`` the ``Recorder`` and, if the scenario has
one, the event-time pipeline (watermark first, then the events); for the lab's readers
(``bench.lab.lab_readers``) a strategy. Position reports happen inside the reader, every
``position_report_interval_ms`` of the group clock and whenever it is caught up. It may

- leave at ``leave_ms`` (``close()``: its segments return at its acknowledged positions);
- crash at ``crash_ms`` (it stops; ``offline_after_ms`` later the group is told,
  ``reader_offline``, and its segments return at its last *reported* positions, so some
  events are delivered again by their new owner);
- stall (``noack`` fault): it stays online but never reads, so it never acknowledges
  what it holds and the group watermark cannot pass its segments until the fault ends;
- with ``mtbf_ms``, crash at random and restart.

When is the reader's ``FailureSchedule`` (``bench.sim.failure_schedule``, shared with
the reader processes and the lab); the reader acts on it at its wake-ups and tells
``on_change`` of each change (``CHANGES``).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import simpy

from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventBatch, EventReader

from ..spec.scenario import ReaderSpec
from .actors import World
from .failure_schedule import FailureSchedule

__all__ = ["PolledReader", "ReaderActor", "MAX_BATCH", "CHANGES"]

MAX_BATCH = 65_536
"""Events per ``read_batch`` call."""

CHANGES = ("join", "restart", "leave", "crash", "offline", "stall", "resume")
"""What ``PolledReader.on_change`` is told, in a session's order (a crash is followed by offline)."""

_STATE_AFTER = {
    "join": "online",
    "restart": "online",
    "resume": "online",
    "leave": "left",
    "crash": "crashed",
    "offline": "offline",
    "stall": "stalled",
}
"""A ``ReaderActor``'s ``state`` after each change."""

Proc = Generator[simpy.Event, Any, None]


class PolledReader:
    """One reader instance of ``group``; ``process()`` is its SimPy process, ``on_batch`` its sink."""

    def __init__(self, world: World, spec: ReaderSpec, name: str, group: ReaderGroup) -> None:
        self.world = world
        self.spec = spec
        self.name = name
        self.group = group
        self.reader: EventReader | None = None
        self.reads = 0
        self.events = 0
        self.restarts = 0
        self.schedule = FailureSchedule.for_reader(spec, name, world.seeds)
        self._rng_proc = world.seeds.rng(f"readers.{name}.processing")

    # ------------------------------------------------------------------ what the reader's life means
    def on_change(self, change: str) -> None:
        """The reader joined, restarted, left, crashed, was declared offline, stalled or resumed."""

    def on_batch(self, t_ms: int, batch: EventBatch) -> None:
        """A batch read at ``t_ms`` (not a checkpoint's): its watermark, then its events."""

    # ------------------------------------------------------------------ the process
    def process(self) -> Proc:
        env = self.world.env
        if self.schedule.join_ms > 0:
            yield env.timeout(self.schedule.join_ms)
        kind = "join"
        while True:
            restart = yield from self._session(kind)
            if restart is None:
                return
            if restart > env.now:
                yield env.timeout(restart - env.now)
            self.restarts += 1
            kind = "restart"

    def _session(self, kind: str) -> Generator[simpy.Event, Any, int | None]:
        """One life of the reader (its ``FailureSchedule`` session), from joining (``kind``: join or
        restart) to leaving or crashing; returns when it restarts (or None)."""
        w, s = self.world, self.spec
        env = w.env
        session = self.schedule.session(int(env.now))
        self.reader = self.group.create_reader(self.name)
        self.on_change(kind)
        carry = 0.0
        while True:
            now = int(env.now)
            due = session.due(now)
            if due == "leave":
                self.reader.close()
                self.reader = None
                self.on_change("leave")
                return None
            if due == "crash" or due == "failure":
                self.reader = None
                self.on_change("crash")
                outage = self.schedule.crashed(due, now)
                if outage.offline_ms > now:
                    yield env.timeout(outage.offline_ms - now)
                self.group.reader_offline(self.name)
                self.on_change("offline")
                return outage.restart_ms
            if due == "stall":
                self.on_change("stall")
                if session.stall_end_ms is None:
                    return None  # online forever, never acknowledging
                yield env.timeout(session.stall_end_ms - now)
                self.on_change("resume")
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

    def _read(self, carry: float) -> tuple[float, int]:
        """Read until idle, out of budget or busy for a poll period; returns the unused fractional
        budget and the processing time (ms) of what was read. O(events)."""
        reader = self.reader
        assert reader is not None
        spec = self.spec
        rate = spec.rate_per_s
        budget = math.inf if rate is None else carry + rate * spec.poll_ms / 1000.0
        t_ms = int(self.world.env.now)
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
            n = len(batch)
            self.events += n
            self.on_batch(t_ms, batch)
            if n:
                budget -= n
                if proc is not None:
                    busy += int(proc.draw(self._rng_proc, n).sum())
            elif batch.watermark is None:
                return 0.0, busy
        return (budget if rate is not None and math.isfinite(budget) else 0.0), busy


class ReaderActor(PolledReader):
    """One reader instance of the world's group, read into the recorder and the event-time pipeline."""

    def __init__(self, world: World, spec: ReaderSpec, name: str, channel: int) -> None:
        super().__init__(world, spec, name, world.group)
        self.channel = channel
        self.state = "waiting"  # waiting | online | stalled | crashed | offline | left
        self.crashes = 0

    def on_change(self, change: str) -> None:
        """The recorder learns of a (re)join; the pipeline's channel is active while the reader is in."""
        w = self.world
        self.state = _STATE_AFTER[change]
        if change in ("join", "restart"):
            w.recorder.on_reader_joined(self.name)
            if w.pipeline is not None:
                w.pipeline.channel_active(self.channel, True)
        elif change == "crash":
            self.crashes += 1
        elif change in ("leave", "offline") and w.pipeline is not None:
            w.pipeline.channel_active(self.channel, False)

    def on_batch(self, t_ms: int, batch: EventBatch) -> None:
        """To the recorder, then the pipeline: the batch's watermark first, then its events."""
        w = self.world
        pipe = w.pipeline
        if pipe is None:  # the events' ids are not needed
            w.recorder.count_batch(t_ms, self.name, batch)
            return
        writers, seqs = w.recorder.on_batch(t_ms, self.name, batch)
        if batch.watermark is not None:
            pipe.on_watermark(self.channel, batch.watermark)
        if len(batch):
            pipe.on_events(writers, seqs, batch.event_time)
