"""The lab's readers: a strategy's reader group read exactly as the simulator reads its own.

Each strategy has a reader group of its own (in its time domain) with one ``LabReader``
per reader instance of the scenario. A ``LabReader`` is the simulator's ``PolledReader``
(``bench.sim.readers``, whose ``ReaderActor`` feeds the recorder and pipeline) feeding a
strategy: the same SimPy wake-ups (a poll every ``poll_ms``, later while busy
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

from readergroup.format.events import NO_EVENT_TIME
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventBatch
from segmentstore.checks import checked

from ..sim.actors import World
from ..sim.readers import PolledReader
from ..sim.workloads import payload_ids
from ..spec.errors import SimulationError
from ..spec.scenario import ReaderSpec
from .compared_strategies import LabEvent, Strategy

__all__ = ["LabReader"]


class LabReader(PolledReader):
    """One reader instance in one strategy's group: the simulator's polled reader, read into a strategy."""

    def __init__(
        self, world: World, spec: ReaderSpec, name: str, group: ReaderGroup, strategy: Strategy
    ) -> None:
        super().__init__(world, spec, name, group)
        self.strategy = strategy
        self._stream_of: dict[str, str] = {}

    def on_change(self, change: str) -> None:
        """Every change of the reader's state, as the strategy's ``on_reader`` hears it."""
        self.strategy.on_reader(self.name, change)

    def on_batch(self, t_ms: int, batch: EventBatch) -> None:
        """The batch's watermark to ``Strategy.on_watermark``, then each event, in order. O(n)."""
        strat = self.strategy
        if batch.watermark is not None:
            strat.on_watermark(batch.watermark)
        if not len(batch):
            return
        now = self.world.clock.now()
        writers, seqs = payload_ids(batch.payload)
        names = batch.segments
        streams = [self._stream(seg) for seg in names]
        et = batch.event_time.tolist()
        if NO_EVENT_TIME in et:
            raise SimulationError(f"reader {self.name!r}: an event without event time (not the workload's)")
        deliver, rid = strat.deliver, self.name
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
