"""The lab's readers: a strategy's reader group read exactly as the simulator reads its own.

Each strategy has a reader group of its own (in its time domain) with one ``LabReader``
per reader instance of the scenario. A ``LabReader`` is the simulator's ``ReaderActor``
(``bench.sim.readers``) with a strategy where the simulator has its recorder and
pipeline: the same SimPy wake-ups (a poll every ``poll_ms``, later while busy
processing, at once when its failure schedule changes), the same ``read_batch`` calls
and rate budget (the fractional remainder carried), the same ``processing`` draws from
the reader's own generator, and the same failure schedule (``FailureSchedule``: joins,
stalls, leaves, crashes, offline declarations, restarts). So the ``ingestion``
strategy's group has the simulator's group watermark at every instant, and every
strategy reads the same events at the same times (``tests/test_lab_independence.py``).

A batch's watermark (emitted before its events) goes to ``Strategy.on_watermark``, then
each event to ``Strategy.deliver`` as a ``LabEvent``; every change of the reader's state
to ``Strategy.on_reader`` (join, restart, stall, resume, leave, crash, offline).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import simpy

from readergroup.format.events import NO_EVENT_TIME
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventBatch, EventReader
from segmentstore.checks import checked

from ..sim.actors import World
from ..sim.failure_schedule import FailureSchedule
from ..sim.readers import MAX_BATCH
from ..sim.workloads import payload_ids
from ..spec.errors import SimulationError
from ..spec.scenario import ReaderSpec
from .compared_strategies import LabEvent, Strategy

__all__ = ["LabReader"]

Proc = Generator[simpy.Event, Any, None]


class LabReader:
    """One reader instance in one strategy's group; ``process()`` is its SimPy process."""

    def __init__(
        self, world: World, spec: ReaderSpec, name: str, group: ReaderGroup, strategy: Strategy
    ) -> None:
        self.world = world
        self.spec = spec
        self.name = name
        self.group = group
        self.strategy = strategy
        self.reader: EventReader | None = None
        self.events = 0
        self.schedule = FailureSchedule.for_reader(spec, name, world.seeds)
        self._rng_proc = world.seeds.rng(f"readers.{name}.processing")
        self._stream_of: dict[str, str] = {}

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
            kind = "restart"

    def _session(self, kind: str) -> Generator[simpy.Event, Any, int | None]:
        """One life of the reader, from joining (``kind``: join or restart) to leaving or crashing; returns
        when it restarts (or None)."""
        w, s, strat = self.world, self.spec, self.strategy
        env = w.env
        session = self.schedule.session(int(env.now))
        self.reader = self.group.create_reader(self.name)
        strat.on_reader(self.name, kind)
        carry = 0.0
        while True:
            now = int(env.now)
            due = session.due(now)
            if due == "leave":
                self.reader.close()
                self.reader = None
                strat.on_reader(self.name, "leave")
                return None
            if due == "crash" or due == "failure":
                self.reader = None
                strat.on_reader(self.name, "crash")
                outage = self.schedule.crashed(due, now)
                if outage.offline_ms > now:
                    yield env.timeout(outage.offline_ms - now)
                self.group.reader_offline(self.name)
                strat.on_reader(self.name, "offline")
                return outage.restart_ms
            if due == "stall":
                strat.on_reader(self.name, "stall")
                if session.stall_end_ms is None:
                    return None  # online forever, never acknowledging
                yield env.timeout(session.stall_end_ms - now)
                strat.on_reader(self.name, "resume")
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
        """Read until idle, out of budget or busy for a poll period (as the simulator's reader does);
        returns the unused fractional budget and the processing time (ms) of what was read. O(events)."""
        reader = self.reader
        assert reader is not None
        spec = self.spec
        rate = spec.rate_per_s
        budget = math.inf if rate is None else carry + rate * spec.poll_ms / 1000.0
        proc = spec.processing if spec.processing.active else None
        strat = self.strategy
        busy = 0
        while budget >= 1 and busy < spec.poll_ms:
            cap = MAX_BATCH if rate is None else int(min(budget, MAX_BATCH))
            if proc is not None:  # about what fits in the poll period's remaining processing time
                cap = max(1, min(cap, int((spec.poll_ms - busy) / max(proc.ms, 1e-3)) + 1))
            batch = reader.read_batch(cap)
            if batch.checkpoint_name is not None:
                continue
            if batch.watermark is not None:
                strat.on_watermark(batch.watermark)
            n = len(batch)
            if n:
                budget -= n
                self.events += n
                if proc is not None:
                    busy += int(proc.draw(self._rng_proc, n).sum())
                self._deliver(batch)
            elif batch.watermark is None:
                return 0.0, busy
        return (budget if rate is not None and math.isfinite(budget) else 0.0), busy

    def _deliver(self, batch: EventBatch) -> None:
        """Each event of ``batch`` to the strategy, in order. O(n)."""
        now = self.world.clock.now()
        writers, seqs = payload_ids(batch.payload)
        names = batch.segments
        streams = [self._stream(seg) for seg in names]
        et = batch.event_time.tolist()
        if NO_EVENT_TIME in et:
            raise SimulationError(f"reader {self.name!r}: an event without event time (not the workload's)")
        deliver, rid = self.strategy.deliver, self.name
        for si, w, q, e, it, ln in zip(
            batch.segment_index.tolist(),
            writers.tolist(),
            seqs.tolist(),
            et,
            batch.ingestion_time.tolist(),
            batch.length.tolist(),
            strict=True,
        ):
            deliver(LabEvent(now, streams[si], names[si], w, q, e, it, ln, rid))

    def _stream(self, segment: str) -> str:
        stream = self._stream_of.get(segment)
        if stream is None:
            scope, name, _ = segment.split("/", 2)
            stream = self._stream_of[segment] = f"{scope}/{name}"
        return stream

    @checked
    def _check(self) -> None:
        """Its reader's own invariants, while it has one."""
        assert self.events >= 0
        if self.reader is not None:
            self.reader._check()
