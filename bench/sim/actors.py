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
from operator import countOf
from typing import Any

import numpy as np
import simpy
import simpy.rt

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.format.routing import key_hash
from readergroup.reading.group import ReaderGroup, ReaderGroupManager
from readergroup.writing.transaction import Transaction, TransactionalEventWriter
from readergroup.writing.writer import EventWriter, WriterConfig
from segmentstore import AppendResult, SegmentSealedError, SegmentStore, StoreConfig, StreamSegment
from segmentstore.client import EmbeddedClient

from ..spec.errors import SimulationError
from ..spec.scenario import ScalingSpec, Scenario, WriterSpec
from ..spec.seeds import Seeds
from .arrivals import Batch, EventSource
from .pipeline import EventTimePipeline
from .recorder import Recorder
from .sim_clock import SimClock
from .workloads import ID_BYTES, FrameBuilder, sim_kernels

__all__ = [
    "World",
    "WriterActor",
    "EVENT_WRITER_CONFIG",
    "instance_names",
    "scaler",
    "advancer",
    "store_outages",
    "auto_plan",
    "scale_plan",
    "scale_times",
]

Proc = Generator[simpy.Event, Any, None]
EVENT_WRITER_CONFIG = WriterConfig(max_batch_events=1 << 30, max_batch_bytes=4 << 20, sync=True)
"""The config of a writer actor's ``EventWriter`` (``api: event_writer``) and ``TransactionalEventWriter``."""


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
        real = sc.group.processes
        self.env = simpy.rt.RealtimeEnvironment(factor=0.001, strict=False) if real else simpy.Environment()
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
                len(self.reader_names),
                sc.group.max_event_time_lag_ms,
                sc.pipeline.window_ms,
                self.clock,
                sc.pipeline.stages,
            )
        self.seeds = Seeds(sc.seed)
        for part in sc.random_parts:
            self.seeds.note(part)
        self.outages = store_outages(sc, self.seeds)
        # events appended per key range (auto scaling; a rolling transaction's duplicates keep the range)
        self.segment_events: dict[tuple[float, float], int] = {}
        self.scale_epoch = 0  # bumped by every scale event: writers re-route
        self.advanced = 0
        self.last_write_ms: int | None = None
        self.served: Any = None  # group.processes: the store on loopback and the reader processes (engine)

    def written(self, writer: int, seqs: np.ndarray, event_times: np.ndarray) -> None:
        """Events of ``writer`` acknowledged now (appended, or committed), with their event times."""
        self.recorder.on_written(writer, seqs)
        self.last_write_ms = int(self.env.now)

    @property
    def end_ms(self) -> int:
        return self.scenario.duration_ms

    def outage_end(self, now: int) -> int | None:
        """If the store is down at ``now`` (an outage), when it is back; else ``None``. O(outages)."""
        for a, b in self.outages:
            if a <= now < b:
                return b
        return None

    def close(self) -> None:
        if self.served is not None:
            self.served.close()
        self.store.close()


def store_outages(sc: Scenario, seeds: Seeds) -> list[tuple[int, int]]:
    """The store's outages ``[start, end)`` within the run: the listed ones and, with an MTBF, random ones."""
    f = sc.faults
    starts = set(f.store_restart_at_ms)
    if f.store_mtbf_ms is not None:
        rng = seeds.rng("faults.store")
        t = 0.0
        while True:
            t += float(rng.exponential(f.store_mtbf_ms))
            if t >= sc.duration_ms:
                break
            starts.add(int(t))
            t += f.store_downtime_ms
    out: list[tuple[int, int]] = []
    for a in sorted(x for x in starts if x < sc.duration_ms):
        b = a + f.store_downtime_ms
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class WriterActor:
    """One writer instance; ``process()`` is its SimPy process."""

    def __init__(self, world: World, spec: WriterSpec, index: int, name: str) -> None:
        self.world = world
        self.spec = spec
        self.index = index
        self.name = name
        sc = world.scenario
        self.source = EventSource(spec, name, sc.start_time_ms, sc.duration_ms, world.seeds)
        keys = self.source.keys
        self.keys = keys
        self.builder = FrameBuilder(index, keys, spec.payload_bytes)
        self._hashes = np.array([key_hash(k) for k in keys], np.float64)
        self._pad = bytes(spec.payload_bytes - ID_BYTES)
        self._seg_names: list[str] = []
        self._seg_ranges: list[tuple[float, float]] = []
        self._key_seg = np.empty(0, np.int64)
        self._routed_ok = True
        self._epoch = 0
        self._route()
        # events handed over but not yet in the store (write latency, store outages)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]] = []
        # _flush_kernel's buffers, reused (fresh pages cost more than the split): the pending columns
        # side by side, the events due (passed to _write, which keeps none but a transaction's), the
        # held ones (two, in turn: the pending events are read from one while the other is written)
        self._bufs = [np.empty((4, 0), np.int64) for _ in range(4)]
        client, stream, wid = world.client, world.stream, index + 1
        self._event_writer = (
            EventWriter(client, stream, wid, config=EVENT_WRITER_CONFIG)
            if (spec.api == "event_writer" and spec.commit_interval_ms is None)
            else None
        )
        self._txn_writer = (
            TransactionalEventWriter(client, stream, wid, config=EVENT_WRITER_CONFIG)
            if spec.commit_interval_ms is not None
            else None
        )
        self._txn: Transaction | None = None
        self._txn_seqs: list[tuple[np.ndarray, np.ndarray]] = []  # (numbers, event times) per write
        self._last_commit = 0
        self.commits = 0

    # ------------------------------------------------------------------ the process
    def process(self) -> Proc:
        env, end = self.world.env, self.world.end_ms
        self._last_commit = self.spec.start_ms
        while True:
            now = int(env.now)
            nxt = self.next_wake(now)
            if nxt is None or nxt > end:
                break
            if nxt > now:
                yield env.timeout(nxt - now)
                now = nxt
            self.step(now)
        self._maybe_commit(int(env.now), force=True)

    def next_wake(self, now: int) -> int | None:
        """When the writer next hands events over or writes held ones (on its tick grid); None: done."""
        w = self.world
        nxt = self.source.next_handover()
        if self._pending:  # wake on the tick grid: at most once per tick
            due = min(int(p[3].min()) for p in self._pending)
            back = w.outage_end(now)
            due = max(due, back) if back is not None else due
            tick, s0 = self.spec.tick_ms, self.spec.start_ms
            due = max(due, now + 1)
            due = s0 + -(-(due - s0) // tick) * tick
            nxt = due if nxt is None else min(nxt, due)
        return nxt

    def step(self, now: int) -> None:
        """One wake-up at ``now``: take the windows handed over, write what is due, commit if due."""
        src = self.source
        while (h := src.next_handover()) is not None and h <= now:
            b = src.produce_next()
            if len(b):
                self._take(b, now)
        self._flush(now)
        self._maybe_commit(now, force=False)

    # ------------------------------------------------------------------ writing
    def _take(self, b: Batch, now: int) -> None:
        """Number the batch's events; write those due now (if the store is up), keep the others."""
        seqs = self.world.recorder.allocate(len(b))
        if not self._pending and self.world.outage_end(now) is None and int(b.ready.max()) <= now:
            self._write(b.key_idx, b.et, seqs, b.sizes)
            return
        self._pending.append((b.key_idx, b.et, seqs, b.ready, b.sizes))
        self._flush(now)

    def _flush(self, now: int) -> None:
        """Write the pending events due by ``now``, in the order they reach the store."""
        if not self._pending or self.world.outage_end(now) is not None:
            return
        if all(int(p[3].min()) > now for p in self._pending):  # none due: keep them as they are
            return
        if self._flush_kernel(now):
            return
        key_idx, et, seqs, ready = (np.concatenate([p[i] for p in self._pending]) for i in range(4))
        sized = any(p[4] is not None for p in self._pending)
        sizes = (
            np.concatenate(
                [
                    p[4] if p[4] is not None else np.full(len(p[0]), self.spec.payload_bytes)
                    for p in self._pending
                ]
            )
            if sized
            else None
        )
        due = ready <= now
        self._pending = []
        if not due.all():
            rest = ~due
            self._pending.append(
                (key_idx[rest], et[rest], seqs[rest], ready[rest], None if sizes is None else sizes[rest])
            )
        if due.any():
            idx = np.flatnonzero(due)
            r = ready[idx]
            span = int(r.max() - r.min()) if len(r) else 0
            if span:  # in arrival order; a narrow span sorts as uint16 (radix, O(n))
                key = (r - r.min()).astype(np.uint16) if span < 1 << 16 else r
                idx = idx[np.argsort(key, kind="stable")]
            self._write(key_idx[idx], et[idx], seqs[idx], None if sizes is None else sizes[idx])

    def _flush_kernel(self, now: int) -> bool:
        """``_flush`` in one kernel call (the same events in the same order); False if it takes numpy."""
        pend = self._pending
        n = sum(len(p[0]) for p in pend)
        k = sim_kernels(n)
        if k is None or any(p[4] is not None or any(a.dtype != np.int64 for a in p[:4]) for p in pend):
            return False
        bufs = self._bufs
        if bufs[0].shape[1] < n:
            self._bufs = bufs = [np.empty((4, max(n, 2 * bufs[0].shape[1])), np.int64) for _ in range(4)]
        bufs[2], bufs[3] = bufs[3], bufs[2]
        cols, rest = bufs[0], bufs[2]
        due = bufs[1] if self._txn_writer is None else np.empty((3, n), np.int64)
        for i, col in enumerate(zip(*(p[:4] for p in pend), strict=True)):
            np.concatenate(col, out=cols[i, :n])
        d = k.split_due(cols, n, now, due, rest)
        r = n - d
        self._pending = [(rest[0, :r], rest[1, :r], rest[2, :r], rest[3, :r], None)] if r else []
        if d:
            self._write(due[0, :d], due[1, :d], due[2, :d], None)
        return True

    def _write(self, key_idx: np.ndarray, et: np.ndarray, seqs: np.ndarray, sizes: np.ndarray | None) -> None:
        w = self.world
        if self._txn_writer is not None:
            if self._txn is None:
                self._txn = self._txn_writer.begin_txn()
            for k, t, _s, p in self._frames(key_idx, et, seqs, sizes):
                self._txn.write_event(self.keys[k], p, t)
            self._txn_seqs.append((seqs, et))
            self._count(key_idx)
            return
        if self._event_writer is not None:
            for k, t, _s, p in self._frames(key_idx, et, seqs, sizes):
                self._event_writer.write_event(self.keys[k], p, t)
            self._event_writer.flush()
            self._count(key_idx)
        else:
            self._append(key_idx, et, seqs, sizes)
        w.written(self.index, seqs, et)

    def _frames(
        self, key_idx: np.ndarray, et: np.ndarray, seqs: np.ndarray, sizes: np.ndarray | None
    ) -> list[tuple[int, int, int, bytes]]:
        ks, ts, ss = key_idx.tolist(), et.tolist(), seqs.tolist()
        if sizes is None:
            return [(k, t, s, self._payload(s)) for k, t, s in zip(ks, ts, ss, strict=True)]
        w = self.index.to_bytes(4, "little")
        return [
            (k, t, s, w + s.to_bytes(4, "little") + bytes(z - ID_BYTES))
            for k, t, s, z in zip(ks, ts, ss, sizes.tolist(), strict=True)
        ]

    def _payload(self, seq: int) -> bytes:
        return self.index.to_bytes(4, "little") + seq.to_bytes(4, "little") + self._pad

    def _count(self, key_idx: np.ndarray) -> None:
        """Per-segment event counts (auto scaling) of events written by an EventWriter or a transaction."""
        if self.world.scenario.scaling.mode != "auto":
            return
        if self._epoch != self.world.scale_epoch:
            self._route()
        counts = self.world.segment_events
        per = np.bincount(self._key_seg[key_idx], minlength=len(self._seg_names))
        for i in np.flatnonzero(per).tolist():
            r = self._seg_ranges[i]
            counts[r] = counts.get(r, 0) + int(per[i])

    def _route(self) -> None:
        segs: tuple[StreamSegment, ...] = self.world.client.get_stream(self.world.stream).active_segments
        lows = np.array([s.key_low for s in segs], np.float64)
        self._seg_names = [s.name for s in segs]
        self._seg_ranges = [(s.key_low, s.key_high) for s in segs]
        self._epoch = self.world.scale_epoch
        self._key_seg = np.searchsorted(lows, self._hashes, side="right") - 1
        self._routed_ok = not len(self._key_seg) or int(self._key_seg.min()) >= 0  # kernel: every key has one

    def _append(
        self, key_idx: np.ndarray, et: np.ndarray, seqs: np.ndarray, sizes: np.ndarray | None = None
    ) -> None:
        """One append per segment; events of a segment sealed meanwhile are re-routed, in order.

        Counts the events per key range for the auto scaler (only it reads them, as ``_count``)."""
        client = self.world.client
        counts = self.world.segment_events
        auto = self.world.scenario.scaling.mode == "auto"
        for _ in range(64):
            size = self.builder.frame_size if sizes is None else 0
            order: np.ndarray | None = None
            blob: bytes | memoryview
            built = (
                self.builder.build_by_segment(key_idx, et, seqs, self._key_seg, len(self._seg_names))
                if size and self._routed_ok
                else None
            )
            if built is not None:  # one kernel call: grouped by segment (stably) and framed
                blob, seg_of, ends = built
                starts = [0, *ends[:-1]]
            else:
                segi = self._key_seg[key_idx]
                # stable, so each key keeps its order; fewer than 2^16 segments sort as uint16 (radix, O(n))
                order = np.argsort(
                    segi.astype(np.uint16) if len(self._seg_names) <= 1 << 16 else segi, kind="stable"
                )
                sorted_seg = segi[order]
                cut_list = (np.flatnonzero(np.diff(sorted_seg)) + 1).tolist()
                starts = [0, *cut_list]
                ends = [*cut_list, len(order)]
                seg_of = sorted_seg[starts].tolist()  # the segment of each run
                blob = self.builder.build(key_idx[order], et[order], seqs[order]) if size else b""
            retry: list[tuple[int, int]] = []
            names, ranges, get = self._seg_names, self._seg_ranges, counts.get
            runs = zip(starts, ends, seg_of, strict=True)  # read once, here (not made into a list)
            pairs: list[tuple[str, bytes | memoryview]] = []
            if size:  # views of the builder's scratch: append_each copies them into the segments
                view = memoryview(blob)
                pairs += [(names[si], view[a * size : b * size]) for a, b, si in runs]
            else:
                assert order is not None
                for a, b, si in runs:
                    c = order[a:b]
                    data = self.builder.build(key_idx[c], et[c], seqs[c], None if sizes is None else sizes[c])
                    pairs.append((names[si], data))
            answers = client.append_each(pairs)  # one call for the tick, an answer per append
            if not auto and countOf(map(type, answers), AppendResult) == len(answers):
                return  # every append landed and no one counts events (the loop below in C)
            for a, b, si, ans in zip(starts, ends, seg_of, answers, strict=True):
                if isinstance(ans, AppendResult):
                    if auto:
                        r = ranges[si]
                        counts[r] = get(r, 0) + (b - a)
                elif isinstance(ans, SegmentSealedError):
                    retry.append((a, b))
                else:
                    raise ans
            if not retry:
                return
            if order is None:  # the kernel's grouping, as numpy's stable sort gives it
                order = np.argsort(self._key_seg[key_idx], kind="stable")
            retry_idx = [order[a:b] for a, b in retry]
            before = self._seg_names
            self._route()
            if self._seg_names == before:
                raise SimulationError(f"writer {self.name!r}: segments of {self.world.stream!r} are sealed")
            sel = np.sort(np.concatenate(retry_idx))
            key_idx, et, seqs = key_idx[sel], et[sel], seqs[sel]
            sizes = None if sizes is None else sizes[sel]
        raise SimulationError(f"writer {self.name!r}: could not route an append after 64 scalings")

    def _maybe_commit(self, t: int, force: bool) -> None:
        if self._txn_writer is None or self._txn is None:
            return
        interval = self.spec.commit_interval_ms
        assert interval is not None
        if force or t - self._last_commit >= interval:
            self._txn.commit()
            self.commits += 1
            for seqs, et in self._txn_seqs:
                self.world.written(self.index, seqs, et)
            self._txn_seqs.clear()
            self._txn = None
            self._last_commit = t


# ---------------------------------------------------------------------- stream scaling and the advancer


def scale_times(s: ScalingSpec, end_ms: int) -> list[int]:
    """The times of the fixed scale events (``at_ms``, every ``every_ms``) within ``(0, end_ms)``."""
    stop = min(s.stop_ms if s.stop_ms is not None else end_ms, end_ms)
    times = {t for t in s.at_ms if 0 < t <= stop}
    if s.every_ms is not None:
        times.update(range(s.start_ms + s.every_ms, stop + 1, s.every_ms))
    return sorted(t for t in times if t < end_ms)


def scale_plan(mode: str, k: int, segs: list[StreamSegment]) -> tuple[list[str], list[tuple[float, float]]]:
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
    """Scale the stream at the scenario's scaling times, or by load (``auto``)."""
    env, client, rec = world.env, world.client, world.recorder
    mode = world.scenario.scaling.mode
    if mode == "auto":
        yield from _auto_scaler(world)
        return
    for k, t in enumerate(scale_times(world.scenario.scaling, world.end_ms)):
        if t > env.now:
            yield env.timeout(t - env.now)
        segs = sorted(client.get_stream(world.stream).active_segments, key=lambda s: s.key_low)
        seal, ranges = scale_plan(mode, k, segs)
        if not seal:
            continue
        created = client.scale_stream(world.stream, seal, ranges)
        world.scale_epoch += 1
        rec.scale_events.append(
            {"t_ms": int(env.now), "sealed": sorted(seal), "created": [s.name for s in created]}
        )


def auto_plan(
    segs: list[StreamSegment], rates: dict[str, float], target: float, min_segments: int
) -> list[tuple[list[str], list[tuple[float, float]]]]:
    """Pravega's auto-scaling by event rate: split each segment above ``target`` in two, merge
    adjacent pairs whose summed rate is below ``target / 2`` (keeping ``min_segments``). O(segments)."""
    plans: list[tuple[list[str], list[tuple[float, float]]]] = []
    hot = [s for s in segs if rates.get(s.name, 0.0) > target]
    for s in hot:
        mid = (s.key_low + s.key_high) / 2
        plans.append(([s.name], [(s.key_low, mid), (mid, s.key_high)]))
    if hot:
        return plans
    n = len(segs)
    i = 0
    while i + 1 < len(segs) and n > min_segments:
        a, b = segs[i], segs[i + 1]
        if rates.get(a.name, 0.0) + rates.get(b.name, 0.0) < target / 2:
            plans.append(([a.name, b.name], [(a.key_low, b.key_high)]))
            n -= 1
            i += 2
        else:
            i += 1
    return plans


def _auto_scaler(world: World) -> Proc:
    env, client, rec = world.env, world.client, world.recorder
    sp = world.scenario.scaling
    every = sp.every_ms
    assert every is not None
    stop = min(sp.stop_ms if sp.stop_ms is not None else world.end_ms, world.end_ms)
    seen: dict[tuple[float, float], int] = {}
    t = sp.start_ms
    while True:
        t += every
        if t > stop or t >= world.end_ms:
            return
        yield env.timeout(t - env.now)
        counts = world.segment_events
        segs = sorted(client.get_stream(world.stream).active_segments, key=lambda s: s.key_low)
        rates = {
            s.name: (counts.get(r, 0) - seen.get(r, 0)) * 1000.0 / every
            for s in segs
            for r in [(s.key_low, s.key_high)]
        }
        seen = dict(counts)
        for seal, ranges in auto_plan(segs, rates, sp.target_rate_per_s, sp.min_segments):
            created = client.scale_stream(world.stream, seal, ranges)
            world.scale_epoch += 1
            rec.scale_events.append(
                {
                    "t_ms": int(env.now),
                    "sealed": sorted(seal),
                    "created": [s.name for s in created],
                    "rates_per_s": {n: round(rates.get(n, 0.0), 3) for n in sorted(seal)},
                }
            )


def advancer(world: World) -> Proc:
    """One watermark-advancer pass every ``polling_period_ms`` of simulated time."""
    env, store = world.env, world.store
    period = world.scenario.store.polling_period_ms
    while True:
        yield env.timeout(period)
        if world.outage_end(int(env.now)) is None:
            world.advanced += len(store.advance_idle_watermarks())
