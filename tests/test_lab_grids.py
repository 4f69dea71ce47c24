"""The lab's periodic actions off its tick's grid: Flink's emits and Spark's triggers each at its own time.

The lab's hook runs every ``strategies.tick_ms`` and, for a strategy with a period of its
own (``Strategy.period_ms``: Flink's emit interval, Spark's trigger), at its multiples too,
after that instant's reads. The lab used to run the hook at its ticks only, so an emit
interval of 150 ms on a 100 ms tick emitted every 300 ms and one of 50 ms every 100 ms; the
generated scenarios of ``ingestwm validate --generated`` found it (against Flink's driven job,
which emits every interval: docs/engines.md).
"""

from __future__ import annotations

import copy
from typing import Any

from bench.lab import lab_scenario_from_dict, run_compare
from bench.lab.compared_strategies import FlinkStrategy
from bench.lab.spark_model import SparkStrategy

S = 1_700_000_000_000

BASE: dict[str, Any] = {
    "name": "grids",
    "start_time_ms": S,
    "duration_ms": 3000,
    "stream": {"name": "lab/grids", "segments": 1},
    "writers": [{"name": "w", "keys": ["k"], "workload": {"kind": "constant", "rate_per_s": 10}}],
    "readers": [{"name": "r", "count": 2}],  # one of them holds the segment, the other reads nothing
    "pipeline": {"ordering": True, "window_ms": 1000},
    "strategies": {
        "tick_ms": 100,
        "flink_bound_ms": 0,
        "flink_idle_timeout_ms": 300,
        "flink_interval_ms": 150,
        "spark_trigger_ms": 250,
        "spark_delay_ms": 0,
    },
}


def _run(**strategies: Any) -> tuple[FlinkStrategy, SparkStrategy]:
    d = copy.deepcopy(BASE)
    d["strategies"].update(strategies)
    r = run_compare(lab_scenario_from_dict(d))
    fl, sp = r.strategies["flink"], r.strategies["spark"]
    assert isinstance(fl, FlinkStrategy) and isinstance(sp, SparkStrategy)
    fl._check()
    sp._check()
    return fl, sp


def test_flink_emits_at_every_multiple_of_its_interval_also_between_the_labs_ticks() -> None:
    fl, _ = _run()
    # the subtask that reads nothing: inactive from the emit of 0, idle at the first emit more than
    # 300 ms after it -- the one of 450 (with emits at the ticks that are multiples of 150: 600)
    assert [(at - S, status) for at, _sub, status in fl.statuses] == [(450, "idle")]
    assert {at - S for at, _wm in fl.emitted} <= set(range(0, 3001, 150))
    assert any((at - S) % 300 for at, _wm in fl.emitted)  # moves at emits between two ticks
    assert all(span == [S, S + 3000] for span in fl.spans.values())


def test_flink_emits_at_its_own_instants_when_its_interval_is_shorter_than_the_tick() -> None:
    """40 ms emits on a 100 ms tick: two or three emits between two ticks, each at its own time."""
    fl, _ = _run(flink_interval_ms=40, flink_idle_timeout_ms=70)
    reading = {a[1] for a in fl.arrivals}
    assert len(reading) == 1
    silent = [(at - S, status) for at, sub, status in fl.statuses if sub not in reading]
    assert silent == [(80, "idle")]  # inactive since the emit of 0: 80 - 0 > 70
    # the reading subtask goes idle between two events (100 ms apart) and back: at emits off the tick
    assert {(at - S) % 100 for at, sub, _status in fl.statuses if sub in reading} - {0}
    assert all(span == [S, S + 3000] for span in fl.spans.values())


def test_spark_runs_a_batch_at_every_multiple_of_its_trigger_also_between_the_labs_ticks() -> None:
    _, sp = _run()
    times = [b.t_ms for b in sp.batches]
    assert set(times) <= set(range(0, 3001, 250)) and 250 in times and 750 in times
    # a window is emitted by a batch between two ticks, stamped with that batch's time
    fired_by = {start: b.t_ms for b in sp.batches for start, _count in b.fired}
    assert {start: at - S for at, start, _end, _count in sp.pipeline.firings} == {
        start: fired_by[start] for start in fired_by
    }
