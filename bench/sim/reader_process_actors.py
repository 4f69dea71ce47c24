"""Simulated readers as real processes: ``group.processes: true`` in a scenario.

Each reader instance runs in a process of its own (``bench.sim.reader_worker``,
spawn context) against the world's store served on loopback, joins the world's reader
group by name and reads batches (``read_batch``), logging each one; its actor here
follows the log every ``poll_ms`` and feeds the batches to the ``Recorder`` and the
event-time pipeline, as ``ReaderActor`` does with the batches it reads itself. The
group's state is shared through its log in the store, so the world's ``ReaderGroup``
(sampled for the series) is one replica among the readers' own.

What "processes" means on simulated time: the SimPy environment runs in **real time**
(``simpy.rt.RealtimeEnvironment``, 1 simulated ms = 1 ms), the store's clock follows
it, and the reader processes run freely, so a run is not deterministic and takes its
scenario's duration, plus the time its processes take to start. The reader's
``FailureSchedule`` (``bench.sim.failure_schedule``, as for the in-process readers)
maps onto its processes: a join starts one, and simulated time stands still until it
has joined the group; a leave asks it to close; a crash (``crash_ms``, or at random
with ``mtbf_ms``) kills it (SIGKILL) and ``offline_after_ms`` later the world declares
it offline — unless its lease (``group.reader_timeout_ms``) ran out first; after a
random crash, ``restart_ms`` after that, a new process (a new incarnation, with a log
of its own) joins under the same name; a ``noack`` fault stops it (SIGSTOP) for the
fault's time; ``rate_per_s`` becomes a processing time of ``1/rate`` per event.
Batches are stamped with the time an actor looked (within ``poll_ms`` of delivery), and
every look takes the new batches of *all* the processes in the order they were logged
(wall time): a process logs a batch before its next read, which is when it reports
the positions after it, so a watermark another process emitted because of that report
comes after the batch in this order too, and the recorder's late-event count stays true.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import simpy

from readergroup.errors import ReaderNotInGroupError
from readergroup.reading.reader import EventBatch
from segmentstore import SegmentStore
from segmentstore.clock import monotonic_s
from segmentstore.net.server import SegmentStoreServer

from ..spec.errors import SimulationError
from .reader_worker import ReaderProcesses, read_log
from .readers import ReaderActor

__all__ = ["ServedReaders", "ProcessReaderActor"]


class ServedReaders:
    """The world's store served on loopback, and the reader processes of its group."""

    def __init__(self, store: SegmentStore, group: str) -> None:
        self.server = SegmentStoreServer(store)
        self.endpoint = ("127.0.0.1", self.server.start())
        self._dir = tempfile.TemporaryDirectory(prefix="ingestwm-readers-")
        self.procs = ReaderProcesses(
            self.endpoint, group, Path(self._dir.name), batch=True, read_timeout_ms=20
        )
        self.actors: dict[str, ProcessReaderActor] = {}  # incarnation -> its actor
        self._offsets: dict[str, int] = {}

    def start(self, actor: ProcessReaderActor, **options: Any) -> str:
        inc = self.procs.start(actor.name, **options)
        self.actors[inc] = actor
        self._offsets[inc] = 0
        return inc

    def wait_started(self, inc: str, timeout_s: float = 120.0) -> None:
        """Block until incarnation ``inc`` has joined the group (logged its start); a process takes a
        second or more to start (several on a loaded machine). ``SimulationError`` if it exits first
        or takes longer than ``timeout_s``."""
        proc = self.procs.procs[inc][0]
        deadline = monotonic_s() + timeout_s
        while not any(r["k"] == "start" for r in read_log(self.procs.log_path(inc))[0]):
            if not proc.is_alive() or monotonic_s() > deadline:
                alive = proc.is_alive()
                why = f"took over {timeout_s:g} s" if alive else f"exited with code {proc.exitcode}"
                raise SimulationError(
                    f"reader process {inc} {why} before joining group {self.procs.group!r} "
                    f"(its log: {self.procs.log_path(inc)})"
                )
            time.sleep(0.02)

    def follow(self, t_ms: int) -> None:
        """Account every batch logged since the last look, of every process, in logging order."""
        new: list[tuple[int, int, str, dict[str, Any]]] = []
        for inc in self.actors:
            recs, self._offsets[inc] = read_log(self.procs.log_path(inc), self._offsets[inc])
            new += [(int(r["t"]), i, inc, r) for i, r in enumerate(recs) if r["k"] == "b"]
        new.sort(key=lambda x: (x[0], x[2], x[1]))
        for _, _, inc, r in new:
            self.actors[inc].account(r, t_ms)

    def close(self) -> None:
        try:
            self.procs.close()
        finally:
            self.server.stop()
            self._dir.cleanup()


def _batch(rec: dict[str, Any]) -> EventBatch:
    return EventBatch(
        int(rec["ep"]),
        rec["w"],
        None,
        tuple(rec["segs"]),
        np.asarray(rec["si"], np.int32),
        np.asarray(rec["o"], np.int64),
        np.zeros(len(rec["o"]), np.int64),
        np.asarray(rec["et"], np.int64),
        np.asarray(rec["it"], np.int64),
        pa.array(rec["key"], pa.string()),
        pa.array([bytes.fromhex(p) for p in rec["p"]], pa.binary()),
    )


class ProcessReaderActor(ReaderActor):
    """One reader instance in a process of its own; the base class's ``process()`` is its SimPy
    process here, with a session that starts, stops and kills a reader process."""

    def __init__(self, world: Any, spec: Any, name: str, channel: int) -> None:
        super().__init__(world, spec, name, channel)
        self.incarnation: str | None = None

    def _session(self, kind: str) -> Generator[simpy.Event, Any, int | None]:
        """One process of the reader (its ``FailureSchedule`` session), from its start (``kind``: join or
        restart) to its leave or kill; returns when the next one starts (or None). The base class's
        ``process()`` runs these."""
        w, s = self.world, self.spec
        env, procs = w.env, w.served.procs
        session = self.schedule.session(int(env.now))
        work_ms = 0.0 if s.rate_per_s is None else 1000.0 / max(s.rate_per_s, 1e-9)
        inc = self.incarnation = w.served.start(self, work_ms=work_ms)
        # a new session: its watermarks ascend from here (the killed one's batches were followed at the kill)
        w.recorder.on_reader_joined(self.name)
        yield env.timeout(0)  # the readers joining at this instant start their processes too
        w.served.wait_started(inc)
        if isinstance(env, simpy.rt.RealtimeEnvironment):
            env.sync()  # simulated time stood still while the process started
        self.state = "online"
        if w.pipeline is not None:
            w.pipeline.channel_active(self.channel, True)
        while True:
            now = int(env.now)
            self._follow()
            due = session.due(now)
            if due == "leave":
                procs.stop(inc)
                self._follow()
                self.on_change("leave")
                return None
            if due == "crash" or due == "failure":
                procs.kill(inc)
                self._follow()
                self.on_change("crash")
                outage = self.schedule.crashed(due, now)
                if outage.offline_ms > now:
                    yield env.timeout(outage.offline_ms - now)
                with contextlib.suppress(ReaderNotInGroupError):  # its lease may have run out first
                    w.group.reader_offline(self.name)
                self.on_change("offline")
                return outage.restart_ms
            if due == "stall":
                self.state = "stalled"
                procs.pause(inc, True)
                if session.stall_end_ms is None:
                    return None
                yield env.timeout(session.stall_end_ms - now)
                procs.pause(inc, False)
                self.state = "online"
                continue
            nxt = now + s.poll_ms
            change = session.next_change(now)
            if change is not None:
                nxt = min(nxt, change)
            yield env.timeout(max(1, nxt - now))

    def _follow(self) -> None:
        self.world.served.follow(int(self.world.env.now))

    def account(self, r: dict[str, Any], t_ms: int) -> None:
        """One batch this reader's process logged, to the recorder and the pipeline. O(events)."""
        w = self.world
        rec, pipe = w.recorder, w.pipeline
        batch = _batch(r)
        self.reads += 1
        writers, seqs = rec.on_batch(t_ms, self.name, batch)
        if pipe is not None and batch.watermark is not None:
            pipe.on_watermark(self.channel, batch.watermark)
        if len(batch):
            self.events += len(batch)
            if pipe is not None:
                pipe.on_events(writers, seqs, batch.event_time)
