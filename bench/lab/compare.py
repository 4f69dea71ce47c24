"""Run one scenario's workload through the watermark strategies, each as if it ran alone, deterministically.

The lab runs on the simulator (``bench.sim``): the same store on a simulated clock, the
same writers (``WriterActor``: the same events, appends, transaction commits and
re-routing at the same instants, numbered alike), the same scaling (fixed or
``scaling.mode: auto``), watermark advancer and store outages (``faults``), in the
same SimPy order — so the same scenario and seed give ``simulate`` and ``compare`` the
same appends. Each strategy has a reader group of its own (in its time domain, with the
scenario's ``group`` settings) whose readers are the scenario's, read as the simulator
reads them (``bench.lab.lab_readers``): the ``ingestion`` strategy's group has the
simulator's group watermark. Every ``strategies.tick_ms``, and at the multiples of a
strategy's own period (Flink's emit interval, Spark's trigger) between them, after that
instant's reads, each strategy's periodic hook runs (also while the store is down: engines keep their
clocks), and every ``metrics.sample_ms`` a sample is taken.

**Each strategy as if alone.** Nothing one strategy needs is seen by another: the
strategies that read in the event-time domain (``producer``, custom ones with
``time_domain = "event"``) read the *asserted* copy of the stream — a run of the same
workload whose writers also write their producer-watermark assertions
(``bench.lab.asserting_writer``); all the others read the *events* copy, the workload
as ``simulate`` writes it, with no marker in it. The copies run one after the other, each
on a store of its own; their events (writer, number, event time) must be the same, and
are checked. Reader groups of one copy share its store but not their state: a strategy's
row does not depend on which others run beside it (``strategies.only`` picks some). The
same scenario and seed give the same numbers: all randomness comes from per-component
generators spawned from the seed.

Events are identified by (writer index, sequence number) in their payload (the
simulator's numbering), and redelivered ones are counted as duplicates.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.reading.block_merge import load_kernels as load_reader_kernels
from readergroup.reading.group import ReaderGroup
from segmentstore import Clock, SegmentStore

from ..sim.actors import World, WriterActor, advancer, instance_names, scaler
from ..sim.sentinels import END_OF_TIME, real_time
from ..spec.errors import SimulationError
from ..spec.scenario import Scenario, StageSpec, StrategiesSpec
from .asserting_writer import AssertingWriter
from .compared_strategies import (
    FlinkStrategy,
    IngestionStrategy,
    ProducerStrategy,
    Strategy,
)
from .engine_rules import ENGINE_RULES, EngineRules
from .flink_reader import FlinkReaderStrategy
from .lab_readers import LabReader
from .lab_scenario import LabStrategies, lab_ready, lab_strategies
from .plugins import PluginStrategy, time_domain_of
from .spark_model import SparkStrategy

__all__ = [
    "EVENTS",
    "ASSERTED",
    "LabResult",
    "READER_KERNEL_MIN_POLLS",
    "make_strategies",
    "run_compare",
    "summarise",
]

EVENTS, ASSERTED = "events", "asserted"
"""The lab's two copies of the stream: the workload as ``simulate`` writes it, and the same workload
with the writers' producer-watermark assertions (read by the event-time strategies only)."""

Sample = tuple[int, int | None, int, int]
Proc = Generator[simpy.Event, Any, None]


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
    store's outages ``[start, end)`` (ms since the start); ``group_watermarks[name]`` the
    watermark of the strategy's reader group (in its time domain; ``None``: none yet) at each
    sample, ``(t_ms, watermark)``; ``copies[name]`` the copy of the stream it read
    (``events`` or ``asserted``).
    """

    scenario: Scenario
    rows: tuple[dict[str, Any], ...]
    series: dict[str, list[Sample]]
    events_written: int
    strategies: dict[str, Strategy] = dataclasses.field(default_factory=dict)
    scale_events_ms: tuple[int, ...] = ()
    outages: tuple[tuple[int, int], ...] = ()
    ended_ms: dict[str, int] = dataclasses.field(default_factory=dict)
    group_watermarks: dict[str, list[tuple[int, int | None]]] = dataclasses.field(default_factory=dict)
    copies: dict[str, str] = dataclasses.field(default_factory=dict)

    def row(self, strategy: str) -> dict[str, Any]:
        for r in self.rows:
            if r["strategy"] == strategy:
                return r
        raise KeyError(strategy)


_BUILTIN: dict[str, type[Strategy]] = {
    "ingestion": IngestionStrategy,
    "producer": ProducerStrategy,
    "flink": FlinkReaderStrategy,
    "spark": SparkStrategy,
}


def _builtin(name: str, config: LabStrategies) -> type[Strategy] | None:
    if name == "flink" and config.flink_source != "reader":
        return FlinkStrategy
    return _BUILTIN.get(name)


def time_domain(name: str, config: LabStrategies) -> TimeDomain:
    """The time domain of strategy ``name``'s reader group."""
    cls = _builtin(name, config)
    if cls is not None:
        return cls.time_domain
    for spec in config.custom:
        if spec.name == name:
            return time_domain_of(spec)
    raise KeyError(name)


def make_strategies(
    config: LabStrategies,
    window_ms: int,
    clock: Clock,
    stages: Sequence[StageSpec] = (),
    names: Sequence[str] | None = None,
    rules: EngineRules = ENGINE_RULES,
) -> list[Strategy]:
    """The strategies named (all: the four built-in ones, then the custom ones), in table order.

    The ``flink`` one in the topology of ``config.flink_source``. With ``stages``, each
    strategy's pipeline feeds its own chain of them. The built-in ones follow ``rules``
    (``engine_rules``: the engines' own unless a run is given others).
    """
    every = [*_BUILTIN, *(c.name for c in config.custom)]
    out: list[Strategy] = []
    for name in every:
        if names is not None and name not in names:
            continue
        cls = _builtin(name, config)
        if cls is not None:
            out.append(cls(config, window_ms, clock, rules))
        else:
            out.append(
                PluginStrategy(next(c for c in config.custom if c.name == name), config, window_ms, clock)
            )
    for st in out:
        st.pipeline.attach_stages(stages)
    return out


READER_KERNEL_MIN_POLLS = 1_000
"""A lab run whose readers poll this many times in all (each spec's count x duration / poll period)
loads the readers' kernels first (``block_merge.load_kernels``, ~0.5 s; the first run after an
install compiles them, ~3 s): else a run whose writers' batches stay small never does, and its
readers decode and merge in Python. No shipped lab scenario (2,400-7,200 polls) ran slower for it end
to end, idle-producers and slow-readers about a quarter faster, with the same outputs. The
simulator's world does not: its readers alone gained nothing measurable (``iot-sensors``: ~1 s
either way)."""


class _LabWorld(World):
    """The simulator's world, keeping every acknowledged event: (writer, number, event time)."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.truth: list[tuple[int, int, int]] = []
        polls = sum(r.count * (scenario.duration_ms // r.poll_ms) for r in scenario.readers)
        if polls >= READER_KERNEL_MIN_POLLS:
            load_reader_kernels()

    def written(self, writer: int, seqs: np.ndarray, event_times: np.ndarray) -> None:
        super().written(writer, seqs, event_times)
        self.truth.extend(zip([writer] * len(seqs), seqs.tolist(), event_times.tolist(), strict=True))


@dataclass(slots=True)
class _CopyRun:
    """One copy's run: its strategies (by name) and what they recorded."""

    strategies: dict[str, Strategy]
    series: dict[str, list[Sample]]
    group_watermarks: dict[str, list[tuple[int, int | None]]]
    ended: dict[str, int]
    truth: list[tuple[int, int, int]]
    scale_events_ms: tuple[int, ...]
    outages: tuple[tuple[int, int], ...]


def _group(world: World, st: Strategy) -> ReaderGroup:
    """A reader group of its own for ``st``: the scenario's group settings, in ``st``'s time domain."""
    sc = world.scenario
    g = sc.group
    return ReaderGroup(
        f"lab-{st.name}",
        ReaderGroupConfig(
            (world.stream,),
            time_domain=st.time_domain,
            position_report_interval_ms=g.position_report_interval_ms,
            read_buffer_bytes=g.read_buffer_bytes,
            max_event_time_lag_ms=g.max_event_time_lag_ms if isinstance(st, IngestionStrategy) else 0,
            reader_timeout_ms=g.reader_timeout_ms,
        ),
        world.client,
        world.clock,
    )


def _ticker(
    world: World,
    runs: list[tuple[Strategy, ReaderGroup]],
    out: _CopyRun,
    progress: Callable[[int], None] | None,
) -> Proc:
    """Every ``tick_ms``, and at the multiples of each strategy's own ``period_ms``, after that
    instant's reads: the strategy's hook; every ``sample_ms`` a sample."""
    env, sc, clock = world.env, world.scenario, world.clock
    tick = (sc.strategies or StrategiesSpec()).tick_ms
    report_every = max(tick, (sc.duration_ms // 200) // tick * tick)
    periods = sorted({q for st, _ in runs if (q := st.period_ms) is not None and q % tick})
    grids = [range(0, sc.duration_ms + 1, step) for step in (tick, *periods)]
    at = -1
    for t in heapq.merge(*grids):
        if t == at:
            continue  # on two grids
        at = t
        if t > env.now:
            yield env.timeout(t - env.now)
        yield env.timeout(0)  # after every actor due at this instant
        if progress is not None and t % report_every == 0:
            progress(t)
        for st, g in runs:
            period = st.period_ms
            if t % tick == 0 or (period is not None and t % period == 0):
                st.on_tick(t, g.segments())
        if t % sc.metrics.sample_ms:
            continue
        for st, g in runs:
            wm, p = st.watermark, st.pipeline
            if p.chain is not None:
                p.chain.sample(t, clock.now())
            if wm == END_OF_TIME:
                out.ended.setdefault(st.name, t)
            out.series[st.name].append((t, real_time(wm), p.buffered_events, p.buffered_bytes))
            out.group_watermarks[st.name].append((t, real_time(g.group_watermark)))


def _check_copy(
    writers: Sequence[WriterActor],
    readers: Sequence[LabReader],
    strategies: Sequence[Strategy],
    broken: Callable[[AssertionError], None] | None = None,
) -> None:
    """After a copy's run: the actors' invariants; each strategy received what its readers read and
    keeps its own (a strategy's broken invariant goes to ``broken``, if given, instead of raising)."""
    for w in writers:
        if isinstance(w, AssertingWriter):
            w._check()
    for r in readers:
        r._check()
    for st in strategies:
        read = sum(r.events for r in readers if r.strategy is st)
        p = st.pipeline
        assert read == p.delivered + p.duplicates, (
            f"{st.name}: its readers read {read} events, it got {p.delivered}"
        )
        try:
            st._check()
        except AssertionError as e:
            if broken is None:
                raise
            broken(e)


def _run_copy(
    sc: Scenario,
    copy: str,
    names: Sequence[str],
    progress: Callable[[int], None] | None,
    after: Callable[[str, SegmentStore], None] | None,
    rules: EngineRules,
    broken: Callable[[AssertionError], None] | None,
) -> _CopyRun:
    """Run the workload (``copy`` asserted: with the writers' assertions) read by the strategies ``names``."""
    window_ms = sc.pipeline.window_ms
    assert window_ms is not None
    world = _LabWorld(sc)
    try:
        env = world.env
        strategies = make_strategies(
            lab_strategies(sc), window_ms, world.clock, sc.pipeline.stages, names, rules
        )
        writer = AssertingWriter if copy == ASSERTED else WriterActor
        writers = [writer(world, spec, i, name) for i, (spec, name) in enumerate(world.writer_specs)]
        runs = [(st, _group(world, st)) for st in strategies]
        readers = [
            LabReader(world, spec, name, g, st)
            for st, g in runs
            for spec in sc.readers
            for name in instance_names(spec.name, spec.count)
        ]
        for st in strategies:
            st.on_readers(world.reader_names)
        out = _CopyRun(
            {st.name: st for st in strategies},
            {st.name: [] for st in strategies},
            {st.name: [] for st in strategies},
            {},
            world.truth,
            (),
            tuple(world.outages),
        )
        env.process(advancer(world))  # in the simulator's order: same-instant actors run alike
        env.process(scaler(world))
        for wa in writers:
            env.process(wa.process())
        for wa in writers:
            if isinstance(wa, AssertingWriter):
                env.process(wa.assertions())
        for ra in readers:
            env.process(ra.process())
        env.process(_ticker(world, runs, out, progress))
        env.run(until=sc.duration_ms + 1)
        _check_copy(writers, readers, strategies, broken)
        out.scale_events_ms = tuple(dict.fromkeys(int(ev["t_ms"]) for ev in world.recorder.scale_events))
        if after is not None:
            after(copy, world.store)
        return out
    finally:
        world.close()


def run_compare(
    sc: Scenario,
    progress: Callable[[int], None] | None = None,
    after: Callable[[str, SegmentStore], None] | None = None,
    rules: EngineRules = ENGINE_RULES,
    broken: Callable[[AssertionError], None] | None = None,
) -> LabResult:
    """Run ``sc`` through its strategies (``strategies.only``, else all), each as if alone.

    O(events x strategies + polls x readers x strategies). ``progress`` (optional) is
    called with the simulated time (ms, over the copies run) every 1/200 of the run;
    ``after`` with each copy's name (``events``, ``asserted``) and its store once that copy
    has run, before the store closes. ``rules``: the engines' rules the Flink and Spark models
    follow (``engine_rules``; other rules: ``ingestwm validate --mutations``, whose wrong models
    may break their own invariants: ``broken``, if given, gets each instead of its raising).
    """
    lab_ready(sc)
    config = lab_strategies(sc)
    names = (sc.strategies or StrategiesSpec()).names
    copy_of = {n: ASSERTED if time_domain(n, config) is TimeDomain.EVENT_TIME else EVENTS for n in names}
    copies = [c for c in (EVENTS, ASSERTED) if c in copy_of.values()]
    runs: list[_CopyRun] = []
    for k, copy in enumerate(copies):
        report = None
        if progress is not None:
            done, n, d = k, len(copies), sc.duration_ms

            def report(t: int, done: int = done, n: int = n, d: int = d) -> None:
                progress((done * d + t) // n)

        names_here = [n for n in names if copy_of[n] == copy]
        runs.append(_run_copy(sc, copy, names_here, report, after, rules, broken))
    first = runs[0]
    for other in runs[1:]:
        if sorted(other.truth) != sorted(first.truth) or other.scale_events_ms != first.scale_events_ms:
            raise SimulationError(
                f"{sc.name}: the asserted copy of the stream holds other events or scaled at other times "
                "than the events copy (the writers' assertions changed the workload)"
            )
    strategies = {n: r.strategies[n] for r in runs for n in r.strategies}
    series = {n: r.series[n] for r in runs for n in r.series}
    truth = first.truth
    rows = tuple(summarise(strategies[n], truth, series[n], sc) for n in names)
    return LabResult(
        sc,
        rows,
        {n: series[n] for n in names},
        len(truth),
        {n: strategies[n] for n in names},
        first.scale_events_ms,
        first.outages,
        {n: t for r in runs for n, t in r.ended.items()},
        {n: r.group_watermarks[n] for r in runs for n in r.group_watermarks},
        copy_of,
    )


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
