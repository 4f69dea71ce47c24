"""The replications' process pool is kept between ``execute`` calls: its workers stay warm (issue 36)."""

from __future__ import annotations

from bench.study import experiment
from bench.study.experiment import execute, replication_tasks, shutdown_pool
from bench.study.run_options import RunOptions

_SCENARIO = {
    "name": "pool",
    "duration_ms": 200,
    "seed": 3,
    "stream": {"name": "sim/pool", "segments": 2},
    "writers": [
        {"name": "w", "count": 1, "key_count": 4, "workload": {"kind": "constant", "rate_per_s": 200}}
    ],
    "readers": [{"name": "r", "count": 1, "poll_ms": 50}],
    "metrics": {"plots": False},
}


def _worker_pids() -> set[int]:
    """The pool's worker processes (which of them runs a tiny task is up to the scheduler)."""
    assert experiment._pool, "no pool kept"
    pool = experiment._pool[0][1]
    procs = pool._processes  # pid -> process: the workers it started
    assert procs and all(p.is_alive() for p in procs.values())
    return set(procs)


def test_the_workers_stay_warm_across_execute_calls() -> None:
    tasks = replication_tasks("simulate", _SCENARIO, 3, 4)
    try:
        first = execute(tasks, RunOptions(jobs=2, progress=False))
        pids = _worker_pids()
        second = execute(tasks, RunOptions(jobs=2, progress=False))
        assert _worker_pids() == pids and 1 <= len(pids) <= 2  # no worker started anew for the second call
        assert [r["metrics"] for r in first] == [r["metrics"] for r in second]
        assert [r["metrics"] for r in execute(tasks, RunOptions(jobs=1, progress=False))] == [
            r["metrics"] for r in first
        ]  # in-process: the same results
    finally:
        shutdown_pool()
    assert not experiment._pool
    shutdown_pool()  # idempotent
