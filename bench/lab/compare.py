"""Run one lab workload through the four strategies at once, on a ``ManualClock``, deterministically.

Every tick (``tick_ms``) in this order: the clock moves to the tick's time; the stream
scales if due; each writer appends the events generated during the tick, then (if
due) asserts its watermark, commits its transaction, or marks itself idle; the store's
watermark advancer runs every ``polling_period_ms``; readers join, crash or go offline
as scheduled; every live reader of every strategy's reader group reads until nothing
is left (or its rate budget is spent); each strategy's periodic hook runs; every
``sample_ms`` a sample is taken. The same scenario gives the same numbers: all
randomness comes from generators seeded with the scenario's seed.

Each strategy has its own reader group (same readers, same schedule), so a slow or
crashed reader hurts every strategy alike; events are identified by (writer index,
sequence number) in their payload, and redelivered ones are counted as duplicates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from readergroup import EventWriter, TransactionalEventWriter, WriterConfig
from readergroup.config import ReaderGroupConfig
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader, ReadKind
from readergroup.writing.transaction import Transaction
from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.client import EmbeddedClient
from segmentstore.limits import INT64_MIN

from .compared_strategies import Strategy, make_strategies
from .lab_scenario import LabReader, LabScenario, LabWriter

__all__ = ["LabResult", "run_compare", "summarise"]

_SYNC_WRITES = WriterConfig(sync=True, max_batch_events=1)


@dataclass(frozen=True, slots=True, eq=False)
class LabResult:
    """What a comparison produced: one table row per strategy and per-strategy sample series.

    ``series[name]`` holds ``(t_ms, watermark | None, buffered events, buffered bytes)``.
    """

    scenario: LabScenario
    rows: tuple[dict[str, Any], ...]
    series: dict[str, list[tuple[int, int | None, int, int]]]
    events_written: int

    def row(self, strategy: str) -> dict[str, Any]:
        for r in self.rows:
            if r["strategy"] == strategy:
                return r
        raise KeyError(strategy)


class _Writer:
    """One producer: generates events per tick, writes them, asserts its watermark."""

    def __init__(
        self, spec: LabWriter, index: int, sc: LabScenario, client: EmbeddedClient, clock: ManualClock
    ) -> None:
        self.spec = spec
        self.index = index
        self.start = sc.start_time_ms
        self.tick = sc.tick_ms
        self.keys = spec.keys or (spec.name,)
        self.rng = np.random.default_rng([sc.seed, index])
        self.carry = 0.0
        self.count = 0
        self.idle_marked = False
        self.truth: list[tuple[int, int, int]] = []  # (writer, seq, event time) of committed events
        self.pad = bytes(spec.payload_bytes - 8)
        self.writer: EventWriter | None = None
        self.txw: TransactionalEventWriter | None = None
        self.txn: Transaction | None = None
        self.txn_events: list[tuple[int, int, int]] = []
        if spec.commit_every_ms is None:
            self.writer = EventWriter(  # each event stored at its write's simulated time
                client, sc.stream.name, writer_id=index + 1, clock=clock, config=_SYNC_WRITES
            )
        else:
            self.txw = TransactionalEventWriter(client, sc.stream.name, writer_id=index + 1, clock=clock)

    def bound(self, t: int) -> int:
        """What the writer asserts at ``t``: later events have event time at least this (if truthful)."""
        s = self.spec
        return self.start + t + s.event_time_skew_ms - s.jitter_ms + s.assert_error_ms

    def _events(self, t: int) -> list[tuple[int, int]]:
        """(generation time, event time) of the events generated in ``(t - tick, t]``."""
        s = self.spec
        if s.schedule_ms:
            offs = s.schedule_offsets_ms or (0,) * len(s.schedule_ms)
            return [
                (g, self.start + g + s.event_time_skew_ms + o)
                for g, o in zip(s.schedule_ms, offs, strict=True)
                if t - self.tick < g <= t
            ]
        self.carry += s.rate_per_s * self.tick / 1000.0
        n = math.floor(self.carry + 1e-9)
        self.carry -= n
        if n <= 0:
            return []
        gen = [t - self.tick + ((k + 1) * self.tick) // n for k in range(n)]
        jit = self.rng.integers(0, s.jitter_ms + 1, size=n).tolist() if s.jitter_ms else [0] * n
        return [(g, self.start + g + s.event_time_skew_ms - j) for g, j in zip(gen, jit, strict=True)]

    def step(self, t: int) -> None:
        s = self.spec
        rel = t - s.start_ms
        started = rel >= 0
        stopped = s.stop_ms is not None and t > s.stop_ms
        on = s.active_ms is None or rel % (s.active_ms + s.idle_ms) < s.active_ms
        active = started and not stopped and on
        if active:
            for _, et in self._events(t):
                if s.max_events is not None and self.count >= s.max_events:
                    break
                self._write(et)
        cadence = rel if started else t  # before its start a writer follows the run's clock
        if self.txw is not None:
            if t == 0 and s.assert_every_ms is not None:
                self._join(active)
            elif s.commit_every_ms is not None and cadence > 0 and cadence % s.commit_every_ms == 0:
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

    def _write(self, et: int) -> None:
        seq = self.count
        self.count += 1
        key = self.keys[seq % len(self.keys)]
        payload = self.index.to_bytes(4, "little") + seq.to_bytes(4, "little") + self.pad
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
    """One reader spec instance in every strategy's group: join, crash, offline, rate budget."""

    def __init__(self, spec: LabReader, rid: str, groups: list[ReaderGroup], tick_ms: int) -> None:
        self.spec = spec
        self.rid = rid
        self.groups = groups
        self.tick = tick_ms
        self.readers: list[EventReader] | None = None
        self.budget = [0.0] * len(groups)
        self.offline = False

    def step(self, t: int, strategies: list[Strategy]) -> None:
        s = self.spec
        if t < s.join_ms or self.offline:
            return
        if self.readers is None:
            self.readers = [g.create_reader(self.rid) for g in self.groups]
        if s.crash_ms is not None and t >= s.crash_ms:
            if t >= s.crash_ms + s.offline_after_ms:
                for g in self.groups:
                    g.reader_offline(self.rid)
                self.offline = True
            return
        for i, (reader, strat) in enumerate(zip(self.readers, strategies, strict=True)):
            if s.rate_per_s is not None:
                cap = max(1.0, s.rate_per_s)
                self.budget[i] = min(self.budget[i] + s.rate_per_s * self.tick / 1000.0, cap)
            _drain(reader, strat, self.budget, i, s.rate_per_s is not None)


def _drain(reader: EventReader, strat: Strategy, budget: list[float], i: int, limited: bool) -> None:
    stream_of: dict[str, str] = {}
    while not limited or budget[i] >= 1.0:
        r = reader.read_next_event(0)
        if r.kind is ReadKind.EMPTY:
            return
        if r.kind is ReadKind.EVENT:
            if limited:
                budget[i] -= 1.0
            seg = r.segment or ""
            stream = stream_of.get(seg)
            if stream is None:
                stream = stream_of[seg] = seg.split("/", 2)[0] + "/" + seg.split("/", 2)[1]
            p = r.payload or b""
            assert r.event_time is not None
            strat.on_event(
                stream,
                seg,
                int.from_bytes(p[:4], "little"),
                int.from_bytes(p[4:8], "little"),
                r.event_time,
                r.length,
            )
        elif r.kind is ReadKind.WATERMARK:
            assert r.watermark is not None
            strat.on_watermark(r.watermark)


def _scale(client: EmbeddedClient, stream: str, n: int) -> None:
    """Replace every active segment by ``n`` new ones (equal key ranges)."""
    active = client.get_stream(stream).active_segments
    ranges = [(i / n, (i + 1) / n if i + 1 < n else 1.0) for i in range(n)]
    client.scale_stream(stream, [s.name for s in active], ranges)


def run_compare(sc: LabScenario) -> LabResult:
    """Run ``sc`` through the four strategies side by side. O(ticks x readers + events x strategies)."""
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
        strategies = make_strategies(sc.strategies, sc.window_ms, clock)
        groups = [
            ReaderGroup(
                f"lab-{st.name}",
                ReaderGroupConfig(
                    (sc.stream.name,),
                    time_domain=st.time_domain,
                    position_report_interval_ms=sc.report_interval_ms,
                ),
                client,
                clock,
            )
            for st in strategies
        ]
        writers = [_Writer(w, i, sc, client, clock) for i, w in enumerate(sc.writers)]
        readers = [
            _Readers(spec, spec.name if spec.count == 1 else f"{spec.name}-{k}", groups, sc.tick_ms)
            for spec in sc.readers
            for k in range(spec.count)
        ]
        series: dict[str, list[tuple[int, int | None, int, int]]] = {st.name: [] for st in strategies}
        for t in range(0, sc.duration_ms + 1, sc.tick_ms):
            clock.set(sc.start_time_ms + t)
            if sc.stream.scale_every_ms and t and t % sc.stream.scale_every_ms == 0:
                _scale(client, sc.stream.name, sc.stream.segments)
            for w in writers:
                w.step(t)
            if t % sc.store.polling_period_ms == 0:
                store.advance_idle_watermarks()
            for r in readers:
                r.step(t, strategies)
            for st, g in zip(strategies, groups, strict=True):
                st.on_tick(t, g.segments())
            if t % sc.sample_ms == 0:
                for st in strategies:
                    wm = st.watermark
                    p = st.pipeline
                    series[st.name].append(
                        (t, None if wm == INT64_MIN else wm, p.buffered_events, p.buffered_bytes)
                    )
        truth = [e for w in writers for e in w.truth]
        rows = tuple(summarise(st, truth, series[st.name], sc) for st in strategies)
        return LabResult(sc, rows, series, len(truth))
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
    sc: LabScenario,
) -> dict[str, Any]:
    """One table row: lag, late fraction, completeness, result latency, reordering memory."""
    p = st.pipeline
    now = [sc.start_time_ms + t for t, _, _, _ in series]
    lags = [n - wm for n, (_, wm, _, _) in zip(now, series, strict=True) if wm is not None]
    windows = {et - (et % sc.window_ms) for _, _, et in truth}
    first: dict[int, tuple[int, int]] = {}
    for fired, start, _end, count in p.firings:
        first.setdefault(start, (fired, count))
    latencies = [fired - (start + sc.window_ms) for start, (fired, _) in first.items()]
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
        "result_latency_max_ms": max(latencies) if latencies else None,
        "buffer_peak_events": p.peak_events,
        "buffer_peak_bytes": p.peak_bytes,
    }
