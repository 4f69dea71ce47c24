"""Run one scenario's workload through the four strategies at once, on a ``ManualClock``, deterministically.

The workload is the simulator's (``bench.sim.arrivals.EventSource``: the same scenario
and seed give the same events, event times and hand-over times). Every lab tick
(``strategies.tick_ms``) in this order: the clock moves to the tick's time; the stream
scales if due (the simulator's fixed scale events, or with ``scaling.mode: auto`` its
load-driven plan over the rates the writers made, ``bench.sim.actors.auto_plan``); unless
the store is down (``faults``: the simulator's outages for the same seed), each writer
writes the events that reached the store by then (in the order they arrived), then (if
due) asserts its watermark, commits its transaction, or marks itself idle, and the
store's watermark advancer runs every ``polling_period_ms``; readers join, crash, go
offline and restart, leave, stall and resume as their failure schedule says
(``bench.sim.failure_schedule``, played on time: with ``mtbf_ms``, the simulator's random
crash times for the same seed); unless the store is down, every live reader of every
strategy's reader group that is not busy reads until nothing is left, its rate budget is
spent, or the ``processing`` time of what it read fills the tick (it is then busy until
that time has passed, as the simulator's reader is); each strategy's periodic hook runs
(also while the store is down: engines keep their clocks); every ``metrics.sample_ms`` a
sample is taken. The same scenario and seed give the same numbers: all randomness comes
from per-component generators spawned from the seed. Times between ticks take effect at
the next tick (an outage from 1,050 ms is seen from tick 1,100); scale times must be
multiples of the tick (``lab_ready``).

Each strategy has its own reader group (same readers, same schedule: one timeline per
reader instance for all of them; a reader's ``n``-th event takes the same processing
time in every strategy), so a slow or crashed reader hurts every strategy alike; events
are identified by (writer index, sequence number) in their payload, and redelivered ones
are counted as duplicates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from readergroup import EventWriter, TransactionalEventWriter, WriterConfig
from readergroup.config import ReaderGroupConfig
from readergroup.format.routing import key_hash
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader, ReadKind
from readergroup.writing.transaction import Transaction
from segmentstore import Clock, ManualClock, SegmentStore, StoreConfig
from segmentstore.client import EmbeddedClient

from ..sim.actors import instance_names, scale_plan, scale_times, store_outages
from ..sim.arrivals import EventSource
from ..sim.failure_schedule import Transition, failure_stream, timeline
from ..sim.sentinels import END_OF_TIME, real_time
from ..spec.scenario import ReaderSpec, Scenario, StageSpec, StrategiesSpec, WriterSpec
from ..spec.seeds import Seeds
from ..spec.writers import DelaySpec
from .compared_strategies import (
    FlinkStrategy,
    IngestionStrategy,
    LabEvent,
    ProducerStrategy,
    SparkStrategy,
    Strategy,
)
from .flink_reader import FlinkReaderStrategy
from .lab_autoscale import AutoScaler, LoadMeter
from .lab_scenario import LabStrategies, lab_ready, lab_strategies
from .plugins import PluginStrategy

__all__ = ["LabResult", "run_compare", "summarise"]

_SYNC_WRITES = WriterConfig(sync=True, max_batch_events=1)


@dataclass(frozen=True, slots=True, eq=False)
class LabResult:
    """What a comparison produced: one table row per strategy and per-strategy sample series.

    ``series[name]`` holds ``(t_ms, watermark | None, buffered events, buffered bytes)``, the
    watermark ``None`` while there is none yet and at ``+inf`` (``bench.sim.sentinels``: no
    output holds a sentinel); ``ended_ms[name]`` the first sample at ``+inf``, if any (event
    time ended: the lags leave out the samples from then on);
    ``strategies[name]`` is the strategy itself, with what it recorded (the Spark model's
    micro-batches, the Flink model's per-split inputs and emissions: ``ingestwm validate``);
    ``scale_events_ms`` the times the stream scaled (fixed or by load), ``outages`` the
    store's outages ``[start, end)`` (ms since the start).
    """

    scenario: Scenario
    rows: tuple[dict[str, Any], ...]
    series: dict[str, list[tuple[int, int | None, int, int]]]
    events_written: int
    strategies: dict[str, Strategy] = dataclasses.field(default_factory=dict)
    scale_events_ms: tuple[int, ...] = ()
    outages: tuple[tuple[int, int], ...] = ()
    ended_ms: dict[str, int] = dataclasses.field(default_factory=dict)

    def row(self, strategy: str) -> dict[str, Any]:
        for r in self.rows:
            if r["strategy"] == strategy:
                return r
        raise KeyError(strategy)


class _Writer:
    """One producer instance: hands its events to the store, asserts its watermark."""

    def __init__(
        self,
        spec: WriterSpec,
        index: int,
        name: str,
        sc: Scenario,
        client: EmbeddedClient,
        clock: ManualClock,
        seeds: Seeds,
        meter: LoadMeter | None = None,
    ) -> None:
        self.spec = spec
        self.index = index
        self.start = sc.start_time_ms
        self.source = EventSource(spec, name, sc.start_time_ms, sc.duration_ms, seeds)
        self.keys = self.source.keys
        self.meter = meter
        self.hashes = [key_hash(k) for k in self.keys] if meter is not None else []
        self.joined = False  # a transactional writer joined (at its first tick with the store up)
        self.pending: list[
            tuple[int, int, int, int]
        ] = []  # (ready, order, event time, key index), sizes apart
        self.sizes: dict[int, int] = {}
        self.count = 0
        self.idle_marked = False
        self.truth: list[tuple[int, int, int]] = []  # (writer, seq, event time) of committed events
        self.pad = bytes(spec.payload_bytes - 8)
        self.writer: EventWriter | None = None
        self.txw: TransactionalEventWriter | None = None
        self.txn: Transaction | None = None
        self.txn_events: list[tuple[int, int, int]] = []
        self._order = 0
        if spec.commit_interval_ms is None:
            self.writer = EventWriter(  # each event stored at its write's simulated time
                client, sc.stream.name, writer_id=index + 1, clock=clock, config=_SYNC_WRITES
            )
        else:
            self.txw = TransactionalEventWriter(client, sc.stream.name, writer_id=index + 1, clock=clock)

    def bound(self, t: int) -> int:
        """What the writer asserts at ``t``: later events have event time at least this (if truthful)."""
        s = self.spec
        drift = math.floor(t * self.source.drift_ppm * 1e-6)
        return self.start + t + drift + s.event_time_skew_ms - s.disorder.bound_ms() + s.assert_error_ms

    def _active(self, t: int) -> bool:
        s = self.spec
        rel = t - s.start_ms
        if rel < 0 or (s.stop_ms is not None and t >= s.stop_ms):
            return False
        wl = s.workload
        return wl.kind != "periodic_idle" or rel % (wl.active_ms + wl.idle_ms) < wl.active_ms

    def _due(self, t: int) -> list[tuple[int, int, int]]:
        """(event time, key index, payload bytes) of the events that reach the store by ``t``, in order."""
        for b in self.source.produce_until(t):
            sizes = b.sizes.tolist() if b.sizes is not None else None
            for i, (r, et, k) in enumerate(
                zip(b.ready.tolist(), b.et.tolist(), b.key_idx.tolist(), strict=True)
            ):
                if sizes is not None:
                    self.sizes[self._order] = sizes[i]
                self.pending.append((r, self._order, et, k))
                self._order += 1
        if not self.pending:
            return []
        self.pending.sort()
        n = 0
        while n < len(self.pending) and self.pending[n][0] <= t:
            n += 1
        due, self.pending = self.pending[:n], self.pending[n:]
        return [(et, k, self.sizes.pop(o, self.spec.payload_bytes)) for _, o, et, k in due]

    def step(self, t: int) -> None:
        s = self.spec
        started = t >= s.start_ms
        active = self._active(t)
        for et, k, size in self._due(t):
            self._write(et, k, size)
        cadence = t - s.start_ms if started else t  # before its start a writer follows the run's clock
        if self.txw is not None:
            if not self.joined and s.assert_every_ms is not None:
                self.joined = True
                self._join(active)
            elif s.commit_interval_ms is not None and cadence > 0 and cadence % s.commit_interval_ms == 0:
                self._commit(t, active)
            return
        if s.assert_every_ms is None:
            return
        due = cadence % s.assert_every_ms == 0
        w = self.writer
        assert w is not None
        if active:
            self.idle_marked = False
            if due:
                w.note_time(self.bound(t))
        elif s.when_idle == "heartbeat" and due:
            w.note_time(self.bound(t))
        elif s.when_idle == "mark_idle" and not self.idle_marked:
            w.note_time(self.bound(t))
            w.mark_idle()
            self.idle_marked = True

    def _join(self, active: bool) -> None:
        """A transactional writer's initial watermark, in a transaction of its own (the PIP: join eagerly)."""
        assert self.txw is not None
        txn = self.txw.begin_txn()
        txn.note_time(self.bound(0))
        if not active and self.spec.when_idle == "mark_idle":
            txn.mark_idle()
            self.idle_marked = True
        txn.commit()

    def _write(self, et: int, k: int, size: int) -> None:
        seq = self.count
        self.count += 1
        key = self.keys[k]
        if self.meter is not None:
            self.meter.count(self.hashes[k])
        pad = self.pad if size == self.spec.payload_bytes else bytes(size - 8)
        payload = self.index.to_bytes(4, "little") + seq.to_bytes(4, "little") + pad
        if self.writer is not None:
            self.writer.write_event(key, payload, et)
            self.truth.append((self.index, seq, et))
        else:
            if self.txn is None:
                assert self.txw is not None
                self.txn = self.txw.begin_txn()
            self.txn.write_event(key, payload, et)
            self.txn_events.append((self.index, seq, et))

    def _commit(self, t: int, active: bool) -> None:
        s = self.spec
        if self.txn is None:
            if not (s.assert_every_ms is not None and (active or s.when_idle == "heartbeat")):
                return
            assert self.txw is not None
            self.txn = self.txw.begin_txn()
        if s.assert_every_ms is not None:
            if active or s.when_idle == "heartbeat":
                self.txn.note_time(self.bound(t))
                self.idle_marked = False
            elif s.when_idle == "mark_idle" and not self.idle_marked:
                self.txn.note_time(self.bound(t))
                self.txn.mark_idle()
                self.idle_marked = True
        self.txn.commit()
        self.truth.extend(self.txn_events)
        self.txn_events = []
        self.txn = None


class _Readers:
    """One reader spec instance in every strategy's group: its failure timeline (one for all the
    strategies, so each sees the same joins, crashes, offlines and restarts), its rate budget,
    its processing times (one generator per strategy from the simulator's stream for this
    reader: its ``n``-th event takes as long in every strategy)."""

    def __init__(
        self,
        spec: ReaderSpec,
        rid: str,
        groups: list[ReaderGroup],
        tick_ms: int,
        plan: tuple[Transition, ...],
        seeds: Seeds,
    ) -> None:
        self.spec = spec
        self.rid = rid
        self.groups = groups
        self.tick = tick_ms
        self.plan = plan
        self._next = 0  # the first transition not yet made
        self.readers: list[EventReader] | None = None  # while it is online, its reader in every group
        self.budget = [0.0] * len(groups)
        self.stalled = False  # in a no-ack stall
        active = spec.processing.active
        self.rngs = [seeds.rng(f"readers.{rid}.processing") for _ in groups] if active else []
        self.free_at = [0] * len(groups)  # busy processing until then, per strategy

    def step(self, t: int, strategies: list[Strategy], store_up: bool = True) -> None:
        s, plan = self.spec, self.plan
        while self._next < len(plan) and plan[self._next].t_ms <= t:
            kind = plan[self._next].kind
            self._next += 1
            for strat in strategies:
                strat.on_reader(self.rid, kind)
            if kind == "join" or kind == "restart":
                self.readers = [g.create_reader(self.rid) for g in self.groups]
                self.budget = [0.0] * len(self.groups)
                self.free_at = [0] * len(self.groups)
            elif kind == "crash":
                self.readers = None
            elif kind == "offline":
                for g in self.groups:
                    g.reader_offline(self.rid)
            elif kind == "leave":  # a clean leave: its segments return at its acknowledged positions
                for r in self.readers or ():
                    r.close()
                self.readers = None
            elif kind == "stall" or kind == "resume":  # online, reading (and acknowledging) nothing
                self.stalled = kind == "stall"
            else:
                raise AssertionError(f"reader {self.rid}: unknown transition {kind!r}")
        if self.readers is None or self.stalled or not store_up:
            return
        for i, (reader, strat) in enumerate(zip(self.readers, strategies, strict=True)):
            if t < self.free_at[i]:
                continue  # still processing what it read
            if s.rate_per_s is not None:
                cap = max(1.0, s.rate_per_s)
                self.budget[i] = min(self.budget[i] + s.rate_per_s * self.tick / 1000.0, cap)
            busy = _drain(
                reader,
                self.rid,
                strat,
                self.budget,
                i,
                s.rate_per_s is not None,
                strat.clock.now(),
                (s.processing, self.rngs[i], self.tick) if self.rngs else None,
            )
            self.free_at[i] = t + busy


def _drain(
    reader: EventReader,
    rid: str,
    strat: Strategy,
    budget: list[float],
    i: int,
    limited: bool,
    now: int,
    processing: tuple[DelaySpec, np.random.Generator, int] | None = None,
) -> int:
    """Read into ``strat`` (as reader ``rid``) until nothing is left, the budget is spent or
    (with ``processing``: the delay spec, its generator, the tick) the events' processing time
    fills the tick; returns that processing time (ms)."""
    stream_of: dict[str, str] = {}
    busy = 0
    while not limited or budget[i] >= 1.0:
        if processing is not None and busy >= processing[2]:
            return busy
        r = reader.read_next_event(0)
        if r.kind is ReadKind.EMPTY:
            return busy
        if r.kind is ReadKind.EVENT:
            if processing is not None:
                busy += int(processing[0].draw(processing[1], 1)[0])
            if limited:
                budget[i] -= 1.0
            seg = r.segment or ""
            stream = stream_of.get(seg)
            if stream is None:
                stream = stream_of[seg] = seg.split("/", 2)[0] + "/" + seg.split("/", 2)[1]
            p = r.payload or b""
            assert r.event_time is not None and r.ingestion_time is not None
            strat.deliver(
                LabEvent(
                    now,
                    stream,
                    seg,
                    int.from_bytes(p[:4], "little"),
                    int.from_bytes(p[4:8], "little"),
                    r.event_time,
                    r.ingestion_time,
                    r.length,
                    rid,
                )
            )
        elif r.kind is ReadKind.WATERMARK:
            assert r.watermark is not None
            strat.on_watermark(r.watermark)
    return busy


def _scale(client: EmbeddedClient, stream: str, mode: str, k: int) -> bool:
    """The ``k``-th fixed scale event of ``mode`` (as the simulator's scaler does it); whether it scaled."""
    segs = sorted(client.get_stream(stream).active_segments, key=lambda s: s.key_low)
    seal, ranges = scale_plan(mode, k, segs)
    if seal:
        client.scale_stream(stream, seal, ranges)
    return bool(seal)


def make_strategies(
    config: LabStrategies, window_ms: int, clock: Clock, stages: Sequence[StageSpec] = ()
) -> list[Strategy]:
    """The four strategies, then the scenario's custom ones (``strategies.custom``), in table order.

    The ``flink`` one in the topology of ``config.flink_source``. With ``stages``, each
    strategy's pipeline feeds its own chain of them.
    """
    flink = FlinkReaderStrategy if config.flink_source == "reader" else FlinkStrategy
    kinds: tuple[type[Strategy], ...] = (IngestionStrategy, ProducerStrategy, flink, SparkStrategy)
    out = [cls(config, window_ms, clock) for cls in kinds]
    out.extend(PluginStrategy(spec, config, window_ms, clock) for spec in config.custom)
    for st in out:
        st.pipeline.attach_stages(stages)
    return out


def run_compare(sc: Scenario, progress: Callable[[int], None] | None = None) -> LabResult:
    """Run ``sc`` through the four strategies side by side. O(ticks x readers + events x strategies).

    ``progress`` (optional) is called with the simulated time (ms) every 1/200 of the run.
    """
    lab_ready(sc)
    st_spec = sc.strategies or StrategiesSpec()
    tick = st_spec.tick_ms
    window_ms = sc.pipeline.window_ms
    assert window_ms is not None
    seeds = Seeds(sc.seed)
    clock = ManualClock(sc.start_time_ms)
    store = SegmentStore(
        clock=clock,
        config=StoreConfig(
            max_watermark_lag_ms=sc.store.max_watermark_lag_ms, polling_period_ms=sc.store.polling_period_ms
        ),
    )
    try:
        client = EmbeddedClient(store)
        client.create_stream(sc.stream.name, sc.stream.segments)
        strategies = make_strategies(lab_strategies(sc), window_ms, clock, sc.pipeline.stages)
        groups = [
            ReaderGroup(
                f"lab-{st.name}",
                ReaderGroupConfig(
                    (sc.stream.name,),
                    time_domain=st.time_domain,
                    position_report_interval_ms=sc.group.position_report_interval_ms,
                ),
                client,
                clock,
            )
            for st in strategies
        ]
        end = sc.duration_ms
        auto = sc.scaling.mode == "auto"
        meter = LoadMeter(client, sc.stream.name) if auto else None
        scaler = AutoScaler(sc.scaling, end, client, meter) if meter is not None else None
        instances = [(w, name) for w in sc.writers for name in instance_names(w.name, w.count)]
        writers = [
            _Writer(w, i, name, sc, client, clock, seeds, meter) for i, (w, name) in enumerate(instances)
        ]
        readers = [
            _Readers(spec, name, groups, tick, timeline(spec, seeds.rng(failure_stream(name)), end), seeds)
            for spec in sc.readers
            for name in instance_names(spec.name, spec.count)
        ]
        for st in strategies:
            st.on_readers([r.rid for r in readers])
        scale_at = {} if auto else {t: k for k, t in enumerate(scale_times(sc.scaling, sc.duration_ms))}
        scaled: list[int] = []
        outages = store_outages(sc, seeds)
        series: dict[str, list[tuple[int, int | None, int, int]]] = {st.name: [] for st in strategies}
        ended: dict[str, int] = {}
        report_every = max(tick, (sc.duration_ms // 200) // tick * tick)
        for t in range(0, sc.duration_ms + 1, tick):
            if progress is not None and t % report_every == 0:
                progress(t)
            clock.set(sc.start_time_ms + t)
            k = scale_at.get(t)
            if k is not None and _scale(client, sc.stream.name, sc.scaling.mode, k):
                scaled.append(t)
            if scaler is not None and scaler.step(t):
                scaled.append(t)
            up = not any(a <= t < b for a, b in outages)
            if up:
                for w in writers:
                    w.step(t)
                if t % sc.store.polling_period_ms == 0:
                    store.advance_idle_watermarks()
            for r in readers:
                r.step(t, strategies, up)
            for st, g in zip(strategies, groups, strict=True):
                st.on_tick(t, g.segments())
            if t % sc.metrics.sample_ms == 0:
                for st in strategies:
                    wm = st.watermark
                    p = st.pipeline
                    if p.chain is not None:
                        p.chain.sample(t, clock.now())
                    if wm == END_OF_TIME:
                        ended.setdefault(st.name, t)
                    series[st.name].append((t, real_time(wm), p.buffered_events, p.buffered_bytes))
        truth = [e for w in writers for e in w.truth]
        rows = tuple(summarise(st, truth, series[st.name], sc) for st in strategies)
        return LabResult(
            sc,
            rows,
            series,
            len(truth),
            {st.name: st for st in strategies},
            tuple(scaled),
            tuple(outages),
            ended,
        )
    finally:
        store.close()


def _percentile(values: list[int], q: float) -> int | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, math.ceil(q * len(v)) - 1)]


def summarise(
    st: Strategy,
    truth: list[tuple[int, int, int]],
    series: list[tuple[int, int | None, int, int]],
    sc: Scenario,
) -> dict[str, Any]:
    """One table row: lag, late fraction, completeness, result latency, reordering memory."""
    p = st.pipeline
    window_ms = sc.pipeline.window_ms or 1
    now = [sc.start_time_ms + t for t, _, _, _ in series]
    # samples without a watermark, or at +inf (event time ended: Flink's union once a finished
    # segment's source is the only aligned input; ``None`` in the series) have no lag: left out
    lags = [n - wm for n, (_, wm, _, _) in zip(now, series, strict=True) if wm is not None]
    windows = {et - (et % window_ms) for _, _, et in truth}
    first: dict[int, tuple[int, int]] = {}
    for fired, start, _end, count in p.firings:
        first.setdefault(start, (fired, count))
    latencies = [fired - (start + window_ms) for start, (fired, _) in first.items()]
    counted = sum(c for _, c in first.values())
    n = len(truth)
    return {
        "strategy": st.name,
        "events": n,
        "delivered": p.delivered,
        "duplicates": p.duplicates,
        "late": p.late,
        "late_fraction": round(p.late / p.delivered, 4) if p.delivered else 0.0,
        "completeness": round(counted / n, 4) if n else 1.0,
        "windows_fired": len(first),
        "windows": len(windows),
        "wm_lag_mean_ms": round(sum(lags) / len(lags)) if lags else None,
        "wm_lag_max_ms": max(lags) if lags else None,
        "result_latency_p50_ms": _percentile(latencies, 0.5),
        "result_latency_p95_ms": _percentile(latencies, 0.95),
        "result_latency_p99_ms": _percentile(latencies, 0.99),
        "result_latency_max_ms": max(latencies) if latencies else None,
        "buffer_peak_events": p.peak_events,
        "buffer_peak_bytes": p.peak_bytes,
        **_stage_columns(st),
    }


def _stage_columns(st: Strategy) -> dict[str, Any]:
    """``<stage>_wm_lag_mean_ms`` and ``<stage>_output_lag_mean_ms`` for each stage (none without stages)."""
    chain = st.pipeline.chain
    out: dict[str, Any] = {}
    if chain is None:
        return out
    for item in chain.summary()[1:]:
        for key in ("wm_lag_ms", "output_lag_ms"):
            mean = item[key]["mean"]
            out[f"{item['name']}_{key[: -len('_ms')]}_mean_ms"] = None if mean is None else round(mean)
    return out
