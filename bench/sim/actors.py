"""The simulated world and its store-side actors: writers, transactions, stream scaling, the advancer.

``World`` owns one SimPy environment, the real ``SegmentStore`` on a ``SimClock``, an
``EmbeddedClient``, the stream and the reader group (``INGESTION_TIME``). Actors are
SimPy processes (generators) that call the real client APIs at simulated times:

- ``WriterActor``: every ``tick_ms`` the events produced during the tick are appended —
  ``api: batch``: frames built in numpy, one append per segment per tick, routed by
  the key hash over the stream's active ranges (re-routed after a scale, keeping each
  key's order); ``api: event_writer``: ``readergroup.EventWriter`` and ``flush()``;
  with ``commit_interval_ms``: a ``TransactionalEventWriter`` committing on that
  interval (the events take the merge's ingestion time). ``schedule`` workloads append
  each listed event at its exact time.
- ``scaler``: ``scale_stream`` at the scenario's scaling times (split, merge,
  split_merge, shift).
- ``advancer``: ``store.advance_idle_watermarks()`` every ``polling_period_ms``.
Readers are in ``bench.sim.readers``.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy
import simpy.rt

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.format.routing import key_hash
from readergroup.reading.group import ReaderGroup, ReaderGroupManager
from readergroup.writing.transaction import Transaction, TransactionalEventWriter
from readergroup.writing.writer import EventWriter, WriterConfig
from segmentstore import SegmentSealedError, SegmentStore, StoreConfig, StreamSegment
from segmentstore.client import EmbeddedClient

from .errors import ScenarioError, SimulationError
from .pipeline import EventTimePipeline
from .recorder import Recorder
from .scenario import Scenario, WriterSpec
from .sim_clock import SimClock
from .workloads import ID_BYTES, FrameBuilder, event_times, expected_events, generation_times

__all__ = ["World", "WriterActor", "instance_names", "scaler", "advancer"]

Proc = Generator[simpy.Event, Any, None]
_EVENT_WRITER_CONFIG = WriterConfig(max_batch_events=1 << 30, max_batch_bytes=4 << 20, sync=True)


def instance_names(name: str, count: int) -> list[str]:
    """``[name]`` for one instance, else ``name-0`` ... (zero-padded to one width)."""
    if count == 1:
        return [name]
    width = len(str(count - 1))
    return [f"{name}-{i:0{width}d}" for i in range(count)]


class World:
    """Store, client, stream, reader group, recorder and pipeline of one simulation."""

    def __init__(self, scenario: Scenario) -> None:
        sc = scenario
        self.scenario = sc
        self.env = (
            simpy.rt.RealtimeEnvironment(factor=0.001, strict=False)
            if sc.group.processes
            else (simpy.Environment())
        )
        self.clock = SimClock(self.env, sc.start_time_ms)
        self.store = SegmentStore(
            clock=self.clock,
            config=StoreConfig(
                max_watermark_lag_ms=sc.store.max_watermark_lag_ms,
                polling_period_ms=sc.store.polling_period_ms,
                advancer_thread=False,
            ),
        )
        self.client = EmbeddedClient(self.store)
        self.stream = sc.stream.name
        self.client.create_stream(self.stream, sc.stream.segments)
        self.writer_specs: list[tuple[WriterSpec, str]] = [
            (spec, name) for spec in sc.writers for name in instance_names(spec.name, spec.count)
        ]
        self.recorder = Recorder(
            [n for _, n in self.writer_specs], sc.group.max_event_time_lag_ms, sc.metrics.event_log
        )
        config = ReaderGroupConfig(
            (self.stream,),
            time_domain=TimeDomain.INGESTION_TIME,
            position_report_interval_ms=sc.group.position_report_interval_ms,
            read_buffer_bytes=sc.group.read_buffer_bytes,
            max_event_time_lag_ms=sc.group.max_event_time_lag_ms,
            reader_timeout_ms=sc.group.reader_timeout_ms,
        )
        self.group: ReaderGroup = ReaderGroupManager(self.client, self.clock).create_reader_group(
            "sim", config
        )
        self.reader_names = [n for spec in sc.readers for n in instance_names(spec.name, spec.count)]
        self.pipeline: EventTimePipeline | None = None
        if sc.pipeline.ordering:
            self.pipeline = EventTimePipeline(
                len(self.reader_names), sc.group.max_event_time_lag_ms, sc.pipeline.window_ms, self.clock
            )
        self.advanced = 0
        self.last_write_ms: int | None = None
        self.served: Any = None  # group.processes: the store on loopback and the reader processes (engine)

    def written(self, writer: int, seqs: np.ndarray) -> None:
        """Events of ``writer`` acknowledged now (appended, or committed)."""
        self.recorder.on_written(writer, seqs)
        self.last_write_ms = int(self.env.now)

    @property
    def end_ms(self) -> int:
        return self.scenario.duration_ms

    def close(self) -> None:
        if self.served is not None:
            self.served.close()
        self.store.close()


class WriterActor:
    """One writer instance; ``process()`` is its SimPy process."""

    def __init__(self, world: World, spec: WriterSpec, index: int, name: str) -> None:
        self.world = world
        self.spec = spec
        self.index = index
        self.name = name
        sc = world.scenario
        if spec.keys:
            keys = list(spec.keys)
        elif spec.workload.kind == "schedule":
            keys = sorted({e.key for e in spec.workload.events})
        else:
            width = len(str(spec.key_count - 1))
            keys = [f"{name}-{i:0{width}d}" for i in range(spec.key_count)]
        if spec.workload.kind == "schedule":
            missing = sorted({e.key for e in spec.workload.events} - set(keys))
            if missing:
                raise ScenarioError(
                    f"schedule uses keys {missing} that are not in keys", f"writers.{spec.name}.keys"
                )
        self.keys = keys
        self._key_pos = {k: i for i, k in enumerate(keys)}
        self.rng = np.random.default_rng([sc.seed, 1, index])
        self.builder = FrameBuilder(index, keys, spec.payload_bytes)
        self._hashes = np.array([key_hash(k) for k in keys], np.float64)
        self._pad = bytes(spec.payload_bytes - ID_BYTES)
        self.produced = 0
        self.carry = 0.0
        self._seg_names: list[str] = []
        self._key_seg = np.empty(0, np.int64)
        self._route()
        client, stream, wid = world.client, world.stream, index + 1
        self._event_writer = (
            EventWriter(client, stream, wid, config=_EVENT_WRITER_CONFIG)
            if (spec.api == "event_writer" and spec.commit_interval_ms is None)
            else None
        )
        self._txn_writer = (
            TransactionalEventWriter(client, stream, wid, config=_EVENT_WRITER_CONFIG)
            if spec.commit_interval_ms is not None
            else None
        )
        self._txn: Transaction | None = None
        self._txn_seqs: list[np.ndarray] = []
        self._last_commit = 0
        self.commits = 0

    # ------------------------------------------------------------------ the process
    def process(self) -> Proc:
        spec, env = self.spec, self.world.env
        stop = min(spec.stop_ms if spec.stop_ms is not None else self.world.end_ms, self.world.end_ms)
        if spec.start_ms > 0:
            yield env.timeout(spec.start_ms)
        self._last_commit = spec.start_ms
        if spec.workload.kind == "schedule":
            yield from self._schedule(stop)
        else:
            t = spec.start_ms
            while t < stop and not self._exhausted():
                t1 = min(t + spec.tick_ms, stop)
                yield env.timeout(t1 - t)
                x = self.carry + expected_events(spec.workload, t, t1)
                n = int(x)
                self.carry = x - n
                n = self._cap(n)
                if n:
                    self._emit(generation_times(t, t1, n))
                self._maybe_commit(t1, force=False)
                t = t1
        self._maybe_commit(int(env.now), force=True)

    def _schedule(self, stop: int) -> Proc:
        env = self.world.env
        events = sorted(self.spec.workload.events, key=lambda e: e.at_ms)
        for at, group in itertools.groupby(events, key=lambda e: e.at_ms):
            if at >= stop or self._exhausted():
                return
            if at > env.now:
                yield env.timeout(at - env.now)
            evs = list(group)
            evs = evs[: self._cap(len(evs))]
            gen = np.full(len(evs), at, np.int64)
            key_idx = np.array([self._key_pos[e.key] for e in evs], np.int64)
            offsets = np.array([e.event_time_offset_ms for e in evs], np.int64)
            self._emit(gen, key_idx, offsets)
            self._maybe_commit(at, force=False)

    def _exhausted(self) -> bool:
        return self.spec.max_events is not None and self.produced >= self.spec.max_events

    def _cap(self, n: int) -> int:
        if self.spec.max_events is None:
            return n
        return max(0, min(n, self.spec.max_events - self.produced))

    # ------------------------------------------------------------------ writing
    def _emit(
        self, gen: np.ndarray, key_idx: np.ndarray | None = None, et_offset: np.ndarray | None = None
    ) -> None:
        """Write events produced at ``gen`` (ms since start): assign numbers, event times, keys."""
        n = len(gen)
        if n == 0:
            return
        w = self.world
        rec = w.recorder
        seqs = rec.allocate(n)
        if key_idx is None:
            key_idx = (self.produced + np.arange(n, dtype=np.int64)) % len(self.keys)
        spec = self.spec
        et = event_times(gen, w.scenario.start_time_ms, spec.event_time_skew_ms, spec.jitter_ms, self.rng)
        if et_offset is not None:
            et = et + et_offset
        self.produced += n
        if self._txn_writer is not None:
            if self._txn is None:
                self._txn = self._txn_writer.begin_txn()
            for k, t, s in zip(key_idx.tolist(), et.tolist(), seqs.tolist(), strict=True):
                self._txn.write_event(self.keys[k], self._payload(s), t)
            self._txn_seqs.append(seqs)
            return
        if self._event_writer is not None:
            for k, t, s in zip(key_idx.tolist(), et.tolist(), seqs.tolist(), strict=True):
                self._event_writer.write_event(self.keys[k], self._payload(s), t)
            self._event_writer.flush()
        else:
            self._append(key_idx, et, seqs)
        w.written(self.index, seqs)

    def _payload(self, seq: int) -> bytes:
        return self.index.to_bytes(4, "little") + seq.to_bytes(4, "little") + self._pad

    def _route(self) -> None:
        segs: tuple[StreamSegment, ...] = self.world.client.get_stream(self.world.stream).active_segments
        lows = np.array([s.key_low for s in segs], np.float64)
        self._seg_names = [s.name for s in segs]
        self._key_seg = np.searchsorted(lows, self._hashes, side="right") - 1

    def _append(self, key_idx: np.ndarray, et: np.ndarray, seqs: np.ndarray) -> None:
        """One append per segment; events of a segment sealed meanwhile are re-routed, in order."""
        client = self.world.client
        for _ in range(64):
            segi = self._key_seg[key_idx]
            order = np.argsort(segi, kind="stable")
            sorted_seg = segi[order]
            cuts = np.flatnonzero(np.diff(sorted_seg)) + 1
            starts = [0, *cuts.tolist()]
            ends = [*cuts.tolist(), len(order)]
            size = self.builder.frame_size
            blob = self.builder.build(key_idx[order], et[order], seqs[order]) if size else b""
            retry: list[np.ndarray] = []
            for a, b in zip(starts, ends, strict=True):
                name = self._seg_names[int(sorted_seg[a])]
                if size:
                    data = blob[a * size : b * size]
                else:
                    chunk = order[a:b]
                    data = self.builder.build(key_idx[chunk], et[chunk], seqs[chunk])
                try:
                    client.append(name, data)
                except SegmentSealedError:
                    retry.append(order[a:b])
            if not retry:
                return
            before = self._seg_names
            self._route()
            if self._seg_names == before:
                raise SimulationError(f"writer {self.name!r}: segments of {self.world.stream!r} are sealed")
            sel = np.sort(np.concatenate(retry))
            key_idx, et, seqs = key_idx[sel], et[sel], seqs[sel]
        raise SimulationError(f"writer {self.name!r}: could not route an append after 64 scalings")

    def _maybe_commit(self, t: int, force: bool) -> None:
        if self._txn_writer is None or self._txn is None:
            return
        interval = self.spec.commit_interval_ms
        assert interval is not None
        if force or t - self._last_commit >= interval:
            self._txn.commit()
            self.commits += 1
            for seqs in self._txn_seqs:
                self.world.written(self.index, seqs)
            self._txn_seqs.clear()
            self._txn = None
            self._last_commit = t


# ---------------------------------------------------------------------- stream scaling and the advancer


def _scale_times(world: World) -> list[int]:
    s = world.scenario.scaling
    stop = min(s.stop_ms if s.stop_ms is not None else world.end_ms, world.end_ms)
    times = {t for t in s.at_ms if 0 < t <= stop}
    if s.every_ms is not None:
        times.update(range(s.start_ms + s.every_ms, stop + 1, s.every_ms))
    return sorted(t for t in times if t < world.end_ms)


def _plan(mode: str, k: int, segs: list[StreamSegment]) -> tuple[list[str], list[tuple[float, float]]]:
    """The segments to seal and the new ranges of the ``k``-th scale event in ``mode``."""
    if mode == "split_merge":
        mode = "split_all" if k % 2 == 0 else "merge_pairs"
    if mode == "split":
        s = max(segs, key=lambda x: (x.key_high - x.key_low, -x.key_low))
        mid = (s.key_low + s.key_high) / 2
        return [s.name], [(s.key_low, mid), (mid, s.key_high)]
    if mode == "merge":
        if len(segs) < 2:
            return [], []
        i = min(range(len(segs) - 1), key=lambda j: (segs[j + 1].key_high - segs[j].key_low, j))
        return [segs[i].name, segs[i + 1].name], [(segs[i].key_low, segs[i + 1].key_high)]
    if mode == "split_all":
        ranges = []
        for s in segs:
            mid = (s.key_low + s.key_high) / 2
            ranges += [(s.key_low, mid), (mid, s.key_high)]
        return [s.name for s in segs], ranges
    if mode == "merge_pairs":
        pairs = [segs[i : i + 2] for i in range(0, len(segs) - len(segs) % 2, 2)]
        return [s.name for p in pairs for s in p], [(p[0].key_low, p[1].key_high) for p in pairs]
    # shift: as many successors, boundaries moved by a quarter segment (alternating direction)
    n = len(segs)
    off = 0.25 if k % 2 == 0 else -0.25
    bounds = [segs[0].key_low, *((i + off) / n for i in range(1, n)), segs[-1].key_high]
    return [s.name for s in segs], list(itertools.pairwise(bounds))


def scaler(world: World) -> Proc:
    """Scale the stream at the scenario's scaling times."""
    env, client, rec = world.env, world.client, world.recorder
    mode = world.scenario.scaling.mode
    for k, t in enumerate(_scale_times(world)):
        if t > env.now:
            yield env.timeout(t - env.now)
        segs = sorted(client.get_stream(world.stream).active_segments, key=lambda s: s.key_low)
        seal, ranges = _plan(mode, k, segs)
        if not seal:
            continue
        created = client.scale_stream(world.stream, seal, ranges)
        rec.scale_events.append(
            {"t_ms": int(env.now), "sealed": sorted(seal), "created": [s.name for s in created]}
        )


def advancer(world: World) -> Proc:
    """One watermark-advancer pass every ``polling_period_ms`` of simulated time."""
    env, store = world.env, world.store
    period = world.scenario.store.polling_period_ms
    while True:
        yield env.timeout(period)
        world.advanced += len(store.advance_idle_watermarks())
