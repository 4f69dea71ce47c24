"""Simulated events per second on a 1,000-segment, 100-reader scenario, with side-by-side baselines.

Rows (all measured in one run):

- ``sim batched``: the simulator on 1,000 segments and 100 readers (writers append one
  numpy-built batch per segment per tick, readers ``read_batch``): events delivered per
  wall-clock second of the simulation (the set-up before time 0 is reported apart), as
  a ratio of the goal (1 M events/s).
- ``sim stochastic``: the same with Poisson arrivals, lognormal event-time disorder and an
  exponential write latency (the random draws and the held events): ratio of the goal.
- ``sim event_writer``: the same topology with writers going through ``EventWriter``
  (one ``encode_event`` and routing per event): ratio batched / per-event.
- ``simpy scheduling``: the same SimPy processes and timeouts with no work in them:
  the share of the batched run's wall time that is SimPy's scheduling.

Run ``python -m bench.perf.bench_sim [--quick | --tiny]``; ``run(size)`` returns the rows.
"""

from __future__ import annotations

import gc
from collections.abc import Generator
from typing import Any

import simpy

from segmentstore.clock import monotonic_s

from ..sim.engine import run_scenario
from ..sim.result import SimResult
from ..sim.scenario import Scenario, scenario_from_dict
from .errors import BenchmarkError
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "bench_scenario", "GOAL_EVENTS_PER_S"]

GOAL_EVENTS_PER_S = 1_000_000


def bench_scenario(
    segments: int = 1_000,
    readers: int = 100,
    writers: int = 4,
    keys_per_writer: int = 1_000,
    rate_per_s: float = 1_000_000.0,
    duration_ms: int = 3_000,
    api: str = "batch",
    poll_ms: int = 1_000,
    tick_ms: int = 250,
    stochastic: bool = False,
) -> Scenario:
    """The benchmark's scenario: ``rate_per_s`` events/s over ``writers`` x ``keys_per_writer`` keys.

    ``stochastic``: Poisson arrivals, lognormal event-time disorder (median 20 ms) and an
    exponential write latency (mean 50 ms) instead of a constant, in-order, immediate workload.
    """
    random: dict[str, Any] = (
        {
            "workload": {"kind": "poisson", "rate_per_s": rate_per_s / writers},
            "disorder": {"kind": "lognormal", "ms": 20, "sigma": 1.0},
            "write_latency": {"kind": "exponential", "ms": 50},
        }
        if stochastic
        else {}
    )
    return scenario_from_dict(
        {
            "name": f"bench-{segments}x{readers}-{api}{'-random' if stochastic else ''}",
            "duration_ms": duration_ms,
            "seed": 1,
            "store": {"max_watermark_lag_ms": 2_000, "polling_period_ms": 500},
            "stream": {"name": "bench/sim", "segments": segments},
            "writers": [
                {
                    "name": "w",
                    "count": writers,
                    "key_count": keys_per_writer,
                    "workload": {"kind": "constant", "rate_per_s": rate_per_s / writers},
                    "tick_ms": tick_ms,
                    "payload_bytes": 8,
                    "api": api,
                    **random,
                }
            ],
            "readers": [{"name": "r", "count": readers, "poll_ms": poll_ms}],
            "group": {"position_report_interval_ms": 200, "max_event_time_lag_ms": 1_000},
            "metrics": {"sample_ms": 1_000, "segments": False, "plots": False},
        }
    )


def _check(result: SimResult) -> SimResult:
    """Events delivered, each once, none late by ingestion time, watermarks monotonic (docs/design.md §4)."""
    ev, name = result.summary["events"], result.scenario.name
    if not 0 < ev["delivered"] == ev["unique"] <= ev["written"] or ev["duplicates"] or ev["late_ingestion"]:
        raise BenchmarkError(f"{name}: wrong delivery {ev}")
    if not result.summary["watermark"]["monotonic"]:
        raise BenchmarkError(f"{name}: the group watermark went back")
    return result


def _timed(sc: Scenario) -> tuple[float, int, float, float]:
    """(wall s after set-up, events delivered, simulated s, set-up wall s) of one run, GC off; checked."""
    gc.collect()
    gc.disable()
    try:
        result = run_scenario(sc)
    finally:
        gc.enable()
    _check(result)
    return (
        result.wall_s - result.setup_wall_s,
        result.events_delivered,
        sc.duration_ms / 1000.0,
        result.setup_wall_s,
    )


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


def _scenarios(size: Size) -> tuple[Scenario, Scenario, Scenario]:
    """The batched, the per-event (at 1/20 of the rate) and the stochastic batched scenario at ``size``."""
    duration = sized(size, 1_500, 2_000, 5_000)
    rate = sized(size, 100_000.0, 1_000_000.0, 1_000_000.0)
    return (
        bench_scenario(rate_per_s=rate, duration_ms=duration),
        bench_scenario(rate_per_s=rate / 20, duration_ms=duration, api="event_writer"),
        bench_scenario(rate_per_s=rate, duration_ms=duration, stochastic=True),
    )


def run(size: Size = "full") -> list[Row]:
    """Measure the simulator; rows of name/value/unit/ratio_vs/ratio."""
    run_scenario(
        bench_scenario(segments=8, readers=2, writers=2, keys_per_writer=8, duration_ms=500)
    )  # warm up
    batched, per_event, stochastic = _scenarios(size)
    wall, events, sim_s, setup = _timed(batched)
    eps = events / wall
    wall_r, events_r, _, _ = _timed(stochastic)
    eps_r = events_r / wall_r
    wall_e, events_e, _, _ = _timed(per_event)
    eps_e = events_e / wall_e
    simpy_s = _simpy_only(batched)
    return [
        row(
            f"sim batched: 1000 segments, 100 readers ({events:,} events, {sim_s:g} s simulated)",
            eps,
            "events/s",
            "goal 1M events/s",
            eps / GOAL_EVENTS_PER_S,
        ),
        row(
            "sim stochastic: same, Poisson arrivals, lognormal disorder, exponential write latency",
            eps_r,
            "events/s",
            "goal 1M events/s",
            eps_r / GOAL_EVENTS_PER_S,
        ),
        row(
            "sim event_writer: same topology, EventWriter per event",
            eps_e,
            "events/s",
            "batched / event_writer",
            eps / eps_e,
        ),
        row("sim batched: simulated seconds per wall second", sim_s / wall, "x", "real time", sim_s / wall),
        row(
            "sim batched: set-up (1000 segments, group state), not counted above",
            setup,
            "s",
            "run",
            setup / wall,
        ),
        row(
            "simpy scheduling alone (same processes, no work)",
            simpy_s,
            "s",
            "share of batched run",
            simpy_s / wall,
        ),
    ]


# ---------------------------------------------------------------- pytest-benchmark (bench/perf/conftest.py)
def test_sim_batched(benchmark: Any, bench_size: Size) -> None:
    sc = _scenarios(bench_size)[0]
    _check(run_scenario(sc))
    benchmark.pedantic(run_scenario, args=(sc,), rounds=2, iterations=1)


def test_sim_event_writer(benchmark: Any, bench_size: Size) -> None:
    sc = _scenarios(bench_size)[1]
    _check(run_scenario(sc))
    benchmark.pedantic(run_scenario, args=(sc,), rounds=2, iterations=1)


def test_sim_stochastic(benchmark: Any, bench_size: Size) -> None:
    sc = _scenarios(bench_size)[2]
    _check(run_scenario(sc))
    benchmark.pedantic(run_scenario, args=(sc,), rounds=2, iterations=1)


def test_simpy_scheduling_alone(benchmark: Any, bench_size: Size) -> None:
    benchmark(_simpy_only, _scenarios(bench_size)[0])


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_sim [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "a shorter simulated run")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
