"""The simulator with its readers as separate processes (``group.processes: true``, issue 16).

The reader-failover scenario, shortened, with each reader instance in a process of its
own against the world's store served on loopback, in real time: the crashing reader
is killed with SIGKILL and declared offline, its segments move to the other
processes, and everything written is delivered, nothing late, the watermark monotonic.
One of the other readers crashes at random (``mtbf_ms``) too: its process is killed
and, once it was declared offline and ``restart_ms`` passed, a new one joins under its
name, at the times its failure schedule gives (the in-process simulator's).
"""

from __future__ import annotations

import pytest

from bench.sim import run_scenario
from bench.sim.failure_schedule import failure_stream, timeline
from bench.spec import load_scenario
from bench.spec.seeds import Seeds

pytestmark = pytest.mark.slow


def test_reader_failover_and_random_crashes_with_reader_processes() -> None:
    sc = load_scenario(
        "reader-failover",
        [
            "group.processes=true",
            "group.reader_timeout_ms=2000",
            "group.position_report_interval_ms=200",
            "duration_ms=6000",
            "readers.r-2.crash_ms=2000",
            "readers.r-2.offline_after_ms=4000",  # the lease (2 s) declares it offline first
            "writers.w.stop_ms=4000",
            "readers.r.mtbf_ms=6000",  # seed 5: r-0 crashes at 2234 ms and restarts at 3234; r-1 runs
            "readers.r.offline_after_ms=500",
            "readers.r.restart_ms.kind=fixed",
            "readers.r.restart_ms.ms=500",
            "metrics.plots=false",
        ],
    )
    plan = timeline(sc.readers[0], Seeds(sc.seed).rng(failure_stream("r-0")), sc.duration_ms)
    assert [t.kind for t in plan].count("restart") == 1 and plan[-1].kind == "restart", plan
    r = run_scenario(sc)
    s = r.summary
    ev = s["events"]
    assert ev["written"] > 0 and ev["missing"] == 0 and ev["unique"] == ev["written"], ev
    assert ev["late_ingestion"] == 0
    assert s["watermark"]["monotonic"], s["watermark"]
    assert s["watermark"]["returned"] > 0
    assert s["readers"]["r-2"]["state"] == "offline"
    assert s["readers"]["r-0"]["events"] + s["readers"]["r-1"]["events"] > 0
    assert ev["duplicates"] >= 0 and r.recorder.samples[-1]["readers_online"] >= 1
    r0 = s["readers"]["r-0"]
    assert (r0["state"], r0["crashes"], r0["restarts"]) == ("online", 1, 1), r0
    assert "crashes" not in s["readers"]["r-1"], s["readers"]["r-1"]
