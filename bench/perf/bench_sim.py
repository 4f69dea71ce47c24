"""Simulated events per second on 1,000 segments / 100 readers and 4,096 / 1,000, with side-by-side baselines.

Every scenario sets only what defines it (segments, readers and their poll period, writers, keys,
rate, arrival process, disorder and write latency); every other field is the scenario language's
default, as a user's scenario gets it: the writers' 100 ms tick and 16-byte payloads, 100 ms
position reports, the store's advancer every second for segments idle 10 s, per-segment metrics
(issue 46: a row at a 250 ms tick, 8-byte payloads and other store settings measured a
configuration nobody runs). A row whose scenario departs from a default says which field and why.
The Pravega-scale rows run ``bench/perf/pravega-scale.yaml`` (``PRAVEGA_SCALE``), the scenario
anyone can run with ``ingestwm simulate bench/perf/pravega-scale.yaml``.

Rows (all measured in one run, each run's result checked by ``_check`` before it counts):

- ``sim batched``: the simulator on 1,000 segments and 100 readers (writers append one
  numpy-built batch per segment per tick, readers ``read_batch``): events delivered per
  second of the simulation (the set-up before time 0 is reported apart), as a ratio of
  the goal (1 M events/s). The seconds are the process's CPU seconds (the simulator runs
  on one thread): on a shared machine the wall clock also counts other processes' turns;
  the wall-clock rate is in the name, and ``CPU share`` says how much the two differ.
- ``sim stochastic``: the same with Poisson arrivals, lognormal event-time disorder and an
  exponential write latency (the random draws and the held events): ratio of the goal.
- ``sim batched`` / ``sim stochastic`` on 4,096 segments and 1,000 readers, the same
  rate (1 M events/s): the per-reader and per-segment costs at scale; ratio of the goal.
- ``sim event_writer``: the 1,000-segment topology with writers going through
  ``EventWriter`` (one ``encode_event`` and routing per event): ratio batched / per-event.
- ``simpy scheduling``: the same SimPy processes and timeouts with no work in them:
  the share of the batched run's wall time that is SimPy's scheduling.
- ``replications``: seeds of the stochastic scenario run by ``bench.study.experiment.execute``
  (``--replications N --jobs K``) on 1 worker (in-process) and on 2 worker processes,
  same results required: the speed-up 2 workers give (at most 2: on 2 cores, less on a
  shared machine). The pool is started and warmed before, a full run per worker (its
  forkserver imports the simulator and loads the kernels once, ~2 s of CPU; the pool is
  kept between ``execute`` calls), as in a sweep, whose runs all go to one warm pool. The
  two are timed in turns, best of 3 rounds each (2 at ``--quick``): on a shared machine a
  process holding a core for a while costs a round, not the ratio. ``--tiny`` runs both
  on 1 worker (no pool).
- ``sim pravega-scale``: ``PRAVEGA_SCALE`` (4,096 segments, 1,000 readers polling every
  100 ms, Poisson arrivals, lognormal disorder, exponential write latency; issue 46), in
  events per CPU second of the simulation and, as ``ingestwm simulate`` reports it, in
  events per second of wall time end to end (the set-up included; goal 1 M); and the same
  with a ``read`` and ``watermarks_at`` per segment (``EventReader.batched_reads`` off: the
  read path before issue 36, the group-sync savings kept; in one process the two are about
  equal, the batched reads pay off over ``RemoteClient``: ``bench_remote_reader``).
- ``sim Pravega scale``: ``PRAVEGA_SCALE`` at 10,000 segments and 10,000 readers, and the
  benchmark process's peak resident memory after it (an upper bound of that run's).
- ``idle reader poll``: CPU µs of one idle reader's poll (``read_batch`` until empty) in
  a group of 4,096 empty segments and 1,000 readers on a manual clock, timed once the
  assignment settled (or after a bounded number of rounds), with the group state log's size.

The kernels (numba) are loaded before anything is timed. ``--tiny`` shrinks the
topologies (256 x 32 and 512 x 128) so that the smoke test stays short; the durations are
shorter than the scenario file's at every size (``duration_ms``, said in the rows).

Run ``python -m bench.perf.bench_sim [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import gc
import resource
from collections.abc import Generator
from pathlib import Path
from typing import Any, NamedTuple

import simpy

from readergroup.config import ReaderGroupConfig
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventReader
from segmentstore import ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient
from segmentstore.clock import monotonic_s, process_s
from segmentstore.core.warmup import warm_kernels

from ..sim.engine import run_scenario
from ..sim.readers import MAX_BATCH
from ..sim.result import SimResult
from ..spec.scenario import Scenario, load_scenario, scenario_from_dict, scenario_to_dict
from ..study.experiment import execute, replication_tasks
from ..study.run_options import RunOptions
from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "bench_scenario", "pravega_scale", "GOAL_EVENTS_PER_S", "PRAVEGA_SCALE"]

GOAL_EVENTS_PER_S = 1_000_000
PRAVEGA_SCALE = Path(__file__).with_name("pravega-scale.yaml")
"""Issue 46's scenario: 4,096 segments, 1,000 readers polling every 100 ms, 1 M events/s, defaults."""


def bench_scenario(
    segments: int = 1_000,
    readers: int = 100,
    writers: int = 4,
    keys_per_writer: int = 1_000,
    rate_per_s: float = 1_000_000.0,
    duration_ms: int = 3_000,
    api: str = "batch",
    poll_ms: int = 1_000,
    stochastic: bool = False,
) -> Scenario:
    """The benchmark's scenario: ``rate_per_s`` events/s over ``writers`` x ``keys_per_writer`` keys,
    ``readers`` polling every ``poll_ms``; every field not named here at the scenario language's default.

    ``stochastic``: Poisson arrivals, lognormal event-time disorder (median 20 ms) and an
    exponential write latency (mean 50 ms), as ``PRAVEGA_SCALE``, instead of constant, in-order,
    immediate writes.
    """
    polls = "" if poll_ms == 1_000 else f"-poll{poll_ms}"
    kind = "poisson" if stochastic else "constant"
    random: dict[str, Any] = (
        {
            "disorder": {"kind": "lognormal", "ms": 20, "sigma": 1.0},
            "write_latency": {"kind": "exponential", "ms": 50},
        }
        if stochastic
        else {}
    )
    return scenario_from_dict(
        {
            "name": f"bench-{segments}x{readers}-{api}{'-random' if stochastic else ''}{polls}",
            "duration_ms": duration_ms,
            "stream": {"segments": segments},
            "writers": [
                {
                    "name": "w",
                    "count": writers,
                    "key_count": keys_per_writer,
                    "workload": {"kind": kind, "rate_per_s": rate_per_s / writers},
                    "api": api,
                    **random,
                }
            ],
            "readers": [{"name": "r", "count": readers, "poll_ms": poll_ms}],
        }
    )


def pravega_scale(duration_ms: int, segments: int | None = None, readers: int | None = None) -> Scenario:
    """``PRAVEGA_SCALE`` for ``duration_ms``, at other ``segments`` and ``readers`` if given."""
    overrides = [f"duration_ms={duration_ms}"]
    if segments is not None:
        overrides.append(f"stream.segments={segments}")
    if readers is not None:
        overrides.append(f"readers.r.count={readers}")
    return load_scenario(PRAVEGA_SCALE, overrides)


def _check(result: SimResult) -> SimResult:
    """Events delivered, each once, none late by ingestion time, watermarks monotonic (docs/design.md §4)."""
    _check_metrics(result.scenario.name, result.summary["events"], result.summary["watermark"]["monotonic"])
    return result


def _check_metrics(name: str, ev: dict[str, Any], monotonic: bool) -> None:
    if not 0 < ev["delivered"] == ev["unique"] <= ev["written"] or ev["duplicates"] or ev["late_ingestion"]:
        raise BenchmarkError(f"{name}: wrong delivery {ev}")
    if not monotonic:
        raise BenchmarkError(f"{name}: the group watermark went back")


class _Timed(NamedTuple):
    wall: float
    """Wall seconds of the simulated period (after the set-up)."""
    cpu: float
    """CPU seconds of this process in that period (``SimResult.run_cpu_s``)."""
    events: int
    sim_s: float
    setup: float
    total_wall: float
    """Wall seconds of the whole run, the set-up included: what ``ingestwm simulate`` reports."""

    def rate(self) -> float:
        """Events per CPU second: on a shared machine the wall clock also counts the others' turns."""
        return self.events / self.cpu

    def wall_rate(self) -> str:
        return f"{self.events / self.wall / 1e6:.2f} M/s wall"


def _timed(sc: Scenario) -> _Timed:
    """One run, checked: its wall and CPU seconds after set-up, events delivered, simulated s. The
    collector runs as in ``ingestwm simulate`` (``run_scenario`` tunes it: not off, as it was before
    issue 46, which left its cost out of every row)."""
    gc.collect()
    result = run_scenario(sc)
    _check(result)
    return _Timed(
        result.wall_s - result.setup_wall_s,
        result.run_cpu_s,
        result.events_delivered,
        sc.duration_ms / 1000.0,
        result.setup_wall_s,
        result.wall_s,
    )


def _timed_before(sc: Scenario) -> _Timed:
    """``_timed`` with a read per segment (``EventReader.batched_reads`` off): as before issue 36."""
    EventReader.batched_reads = False
    try:
        return _timed(sc)
    finally:
        EventReader.batched_reads = True


def _peak_rss_mb() -> float:
    """The process's peak resident memory so far (MB): an upper bound of any one run's."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _IdlePolls(NamedTuple):
    us: float
    """CPU µs per idle poll."""
    rounds: int
    """Poll rounds before the timed ones: until one without an update but reports (the group's
    assignment stood still for a round), or the cap."""
    state_bytes: int
    """The group state log's bytes (snapshot and batches after it) once settled."""


def _idle_poll_cost(segments: int, readers: int, rounds: int, settle_rounds: int) -> _IdlePolls:
    """CPU µs of an idle reader's poll: ``readers`` readers of a group over ``segments`` empty
    segments poll every 100 ms of a manual clock (``read_batch`` until empty, as the simulator's
    readers do; reports every 100 ms), first until the assignment settles, then ``rounds`` rounds timed."""
    clock = ManualClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        client = EmbeddedClient(store)
        client.create_stream("bench/idle", segments)
        cfg = ReaderGroupConfig(("bench/idle",), position_report_interval_ms=100)
        group = ReaderGroup("idle", cfg, client, clock)
        rs = [group.create_reader(f"r-{i:05d}") for i in range(readers)]
        state = group.state

        def round_() -> None:
            clock.advance(100)
            for r in rs:
                while len(b := r.read_batch(MAX_BATCH)) or b.watermark is not None:
                    pass

        settled = 0
        while settled < settle_rounds:
            settled += 1
            layout = state.model.layout
            round_()
            if state.model.layout == layout:
                break
        gc.collect()
        gc.disable()
        try:
            t0 = process_s()
            for _ in range(rounds):
                round_()
            cpu = process_s() - t0
        finally:
            gc.enable()
        log = client.get_info(state.segment)
        return _IdlePolls(cpu / (rounds * readers) * 1e6, settled, log.length - log.start_offset)


def _simpy_only(sc: Scenario) -> float:
    """Wall seconds of SimPy running the scenario's processes and timeouts with no work in them."""
    env = simpy.Environment()

    def ticker(period: int) -> Generator[simpy.Event, Any, None]:
        while True:
            yield env.timeout(period)

    env.process(ticker(sc.store.polling_period_ms))
    for w in sc.writers:
        for _ in range(w.count):
            env.process(ticker(w.tick_ms))
    for r in sc.readers:
        for _ in range(r.count):
            env.process(ticker(r.poll_ms))
    env.process(ticker(sc.metrics.sample_ms))
    t0 = monotonic_s()
    env.run(until=sc.duration_ms + 1)
    return monotonic_s() - t0


def _replications(sc: Scenario, seeds: int, workers: int, rounds: int) -> tuple[float, float]:
    """Wall s of ``seeds`` replications of ``sc`` on 1 worker and on ``workers`` (same metrics required):
    the best of ``rounds`` rounds each, taken in turns (1, ``workers``, 1, ...), so a moment when another
    process held a core costs one round, not the row. The pool's workers are warmed first with a
    full run each (as a sweep's workers are after their first run: imports, kernels, heap)."""
    tasks = replication_tasks("simulate", scenario_to_dict(sc), sc.seed, seeds)
    if workers > 1:  # the pool's workers are up and warm (kept between execute calls)
        warm = replication_tasks("simulate", scenario_to_dict(sc), sc.seed + seeds, workers)
        execute(warm, RunOptions(jobs=workers, progress=False))
    walls: dict[int, float] = {}
    results: dict[int, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for jobs in (1, workers):
            t0 = monotonic_s()
            runs = execute(tasks, RunOptions(jobs=jobs, progress=False))
            wall = monotonic_s() - t0
            walls[jobs] = min(wall, walls.get(jobs, wall))
            for r in runs:
                m = r["metrics"]
                ev = {
                    "delivered": m["events_delivered"],
                    "unique": m["events_delivered"],
                    "written": m["events_written"],
                    "duplicates": m["duplicates"],
                    "late_ingestion": m["late_ingestion"],
                }
                _check_metrics(f"{sc.name} seed {r['seed']}", ev, m["monotonic"])
            results.setdefault(jobs, [r["metrics"] for r in runs])
    if results[1] != results[workers]:
        raise BenchmarkError(f"{sc.name}: replications on {workers} workers differ from those on 1")
    return walls[1], walls[workers]


def _scenarios(size: Size) -> dict[str, Scenario]:
    """The benchmark's scenarios at ``size``: batched, per-event (at 1/20 of the rate) and stochastic
    on the small topology, batched and stochastic on the large one, the replicated one, and
    ``PRAVEGA_SCALE`` (shorter than its file's 10 s) as it is and at 10,000 x 10,000."""
    ms = sized(size, 1_000, 2_000, 5_000)
    rate = sized(size, 100_000.0, 1_000_000.0, 1_000_000.0)
    segs, readers = sized(size, (256, 32), (1_000, 100), (1_000, 100))
    big_segs, big_readers = sized(size, (512, 128), (4_096, 1_000), (4_096, 1_000))
    rep_segs, rep_readers, rep_rate = sized(
        size, (64, 8, 20_000.0), (segs, readers, rate), (segs, readers, rate)
    )
    return {
        "batched": bench_scenario(segs, readers, rate_per_s=rate, duration_ms=ms),
        "event_writer": bench_scenario(
            segs, readers, rate_per_s=rate / 20, duration_ms=ms, api="event_writer"
        ),
        "stochastic": bench_scenario(segs, readers, rate_per_s=rate, duration_ms=ms, stochastic=True),
        "big_batched": bench_scenario(big_segs, big_readers, rate_per_s=rate, duration_ms=ms),
        "big_stochastic": bench_scenario(
            big_segs, big_readers, rate_per_s=rate, duration_ms=ms, stochastic=True
        ),
        "replicated": bench_scenario(
            rep_segs, rep_readers, rate_per_s=rep_rate, duration_ms=ms, stochastic=True
        ),
        "big_stochastic_100ms": pravega_scale(
            ms, *sized(size, (big_segs, big_readers), (None, None), (None, None))
        ),
        "pravega": pravega_scale(
            sized(size, 1_000, 1_000, 2_000), *sized(size, (1_024, 1_024), (10_000, 10_000), (10_000, 10_000))
        ),
    }


def _warm_up() -> None:
    """Load the store's numba kernels and the frame codec's (a run with blocks of 32 KiB and more), and
    the stochastic path's (write latency: the writers' split of pending events), each compiled on
    its first call after a change to its source, which would otherwise land in a timed row."""
    warm_kernels()
    for stochastic in (False, True):
        sc = bench_scenario(
            segments=8,
            readers=2,
            writers=2,
            keys_per_writer=8,
            rate_per_s=200_000,
            poll_ms=500,
            stochastic=stochastic,
        )
        _check(run_scenario(sc))


def run(size: Size = "full") -> list[Row]:
    """Measure the simulator; rows of name/value/unit/ratio_vs/ratio."""
    _warm_up()
    sc = _scenarios(size)
    b, r = _timed(sc["batched"]), _timed(sc["stochastic"])
    bb, br = _timed(sc["big_batched"]), _timed(sc["big_stochastic"])
    e = _timed(sc["event_writer"])
    b100 = _timed(sc["big_stochastic_100ms"])
    b100_before = _timed_before(sc["big_stochastic_100ms"])
    pr = _timed(sc["pravega"])
    rss = _peak_rss_mb()
    idle_segs, idle_readers = sized(size, (512, 128), (4_096, 1_000), (4_096, 1_000))
    idle = _idle_poll_cost(idle_segs, idle_readers, sized(size, 5, 10, 20), sized(size, 200, 400, 400))
    simpy_s = _simpy_only(sc["batched"])
    seeds, workers = sized(size, (2, 1), (4, 2), (4, 2))  # tiny: no process pool (its start-up is seconds)
    rounds = sized(size, 1, 2, 3)
    one, two = _replications(sc["replicated"], seeds, workers, rounds)
    rep = f"{sc['replicated'].stream.segments} segments, {sc['replicated'].readers[0].count} readers"
    small = f"{sc['batched'].stream.segments} segments, {sc['batched'].readers[0].count} readers"
    big = f"{sc['big_batched'].stream.segments} segments, {sc['big_batched'].readers[0].count} readers"
    few = "polling every 1 s (poll_ms=1000, not the default 50: the per-event costs, with few polls)"
    ps = sc["big_stochastic_100ms"]
    scale = (
        f"pravega-scale.yaml, {ps.duration_ms / 1000:g} s of its 10 (duration_ms: the benchmark's length)"
        + (
            ""
            if ps.stream.segments == 4_096
            else f", {ps.stream.segments:,} x {ps.readers[0].count:,} (--tiny)"
        )
    )
    pravega = f"{sc['pravega'].stream.segments:,} segments, {sc['pravega'].readers[0].count:,} readers"
    goal, unit = "goal 1M events/s", "events/CPU s"
    end_to_end = b100.events / b100.total_wall
    return [
        row(f"sim batched: {small} {few}, constant arrivals ({b.events:,} events, {b.sim_s:g} s simulated; "
            f"{b.wall_rate()})", b.rate(), unit, goal, b.rate() / GOAL_EVENTS_PER_S),
        row(f"sim stochastic: {small} {few}, Poisson arrivals, lognormal disorder, exponential write latency "
            f"({r.wall_rate()})", r.rate(), unit, goal, r.rate() / GOAL_EVENTS_PER_S),
        row(f"sim batched: {big} {few} ({bb.events:,} events; {bb.wall_rate()})", bb.rate(), unit, goal,
            bb.rate() / GOAL_EVENTS_PER_S),
        row(f"sim stochastic: {big} {few} ({br.wall_rate()})", br.rate(), unit, goal,
            br.rate() / GOAL_EVENTS_PER_S),
        row(f"sim pravega-scale: 4,096 segments, 1,000 readers polling every 100 ms, every other field at "
            f"its default ({scale}; {b100.events:,} events; {b100.wall_rate()})", b100.rate(), unit, goal,
            b100.rate() / GOAL_EVENTS_PER_S),
        row(f"sim pravega-scale end to end, as `ingestwm simulate` reports it: events per second of wall "
            f"time, the set-up included ({b100.events:,} events in {b100.total_wall:.2f} s)", end_to_end,
            "events/s", goal, end_to_end / GOAL_EVENTS_PER_S),
        row("sim pravega-scale, a read per segment (batched_reads off; the sync savings kept)",
            b100_before.rate(), unit, "batched / per segment", b100.rate() / b100_before.rate()),
        row(f"sim Pravega scale: pravega-scale.yaml at {pravega} ({sc['pravega'].duration_ms / 1000:g} s; "
            f"{pr.events:,} events; set-up {pr.setup:.1f} s; {pr.wall_rate()})", pr.rate(), unit, goal,
            pr.rate() / GOAL_EVENTS_PER_S),
        row(f"sim Pravega scale: peak resident memory of the benchmark process (after {pravega})", rss, "MB",
            "8 GB", rss / 8192),
        row(f"idle reader poll: CPU per poll, {idle_segs:,} segments, {idle_readers:,} readers, nothing "
            f"written (timed after {idle.rounds} rounds: the first without an update but reports, or the "
            f"cap; group state log {idle.state_bytes:,} bytes)", idle.us, "µs", "goal 20 µs", idle.us / 20),
        row(f"sim event_writer: {small} {few}, EventWriter per event (api=event_writer, at 1/20 of the rate: "
            "the per-event write path)", e.rate(), unit, "batched / event_writer", b.rate() / e.rate()),
        row("sim batched: simulated seconds per wall second", b.sim_s / b.wall, "x", "real time",
            b.sim_s / b.wall),
        row("sim batched: CPU share of the wall time (1: the machine was not shared)", b.cpu / b.wall, "x",
            "wall time", b.cpu / b.wall),
        row(f"sim batched: set-up ({big}, group state), not counted above", bb.setup, "s", "run",
            bb.setup / bb.wall),
        row("simpy scheduling alone (same processes as the first row, no work)", simpy_s, "s",
            "share of batched run", simpy_s / b.wall),
        row(f"replications: {seeds} seeds of the stochastic {rep} scenario on {workers} worker processes "
            f"(best of {rounds} rounds each)", two, "s", f"1 worker / {workers} workers", one / two),
    ]  # fmt: skip


# ---------------------------------------------------------------- pytest-benchmark (bench/perf/conftest.py)
def test_sim_batched(benchmark: Any, bench_size: Size) -> None:
    sc = _scenarios(bench_size)["batched"]
    _check(run_scenario(sc))
    benchmark.pedantic(run_scenario, args=(sc,), rounds=2, iterations=1)


def test_sim_event_writer(benchmark: Any, bench_size: Size) -> None:
    sc = _scenarios(bench_size)["event_writer"]
    _check(run_scenario(sc))
    benchmark.pedantic(run_scenario, args=(sc,), rounds=2, iterations=1)


def test_sim_stochastic(benchmark: Any, bench_size: Size) -> None:
    sc = _scenarios(bench_size)["stochastic"]
    _check(run_scenario(sc))
    benchmark.pedantic(run_scenario, args=(sc,), rounds=2, iterations=1)


def test_simpy_scheduling_alone(benchmark: Any, bench_size: Size) -> None:
    benchmark(_simpy_only, _scenarios(bench_size)["batched"])


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_sim [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "a shorter simulated run")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
