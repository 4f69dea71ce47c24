"""The simulator with its readers as separate processes (``group.processes: true``, issue 16).

The reader-failover scenario, shortened, with each reader instance in a process of its
own against the world's store served on loopback, in real time: the crashing reader
is killed with SIGKILL and declared offline, its segments move to the other
processes, and everything written is delivered, nothing late, the watermark monotonic.
"""

from __future__ import annotations

import pytest

from bench.sim import load_scenario, run_scenario

pytestmark = pytest.mark.slow


def test_reader_failover_with_reader_processes() -> None:
    sc = load_scenario(
        "reader-failover",
        [
            "group.processes=true",
            "group.reader_timeout_ms=2000",
            "group.position_report_interval_ms=200",
            "duration_ms=8000",
            "readers.r-2.crash_ms=2000",
            "readers.r-2.offline_after_ms=4000",  # the lease (2 s) declares it offline first
            "writers.w.stop_ms=4000",
            "metrics.plots=false",
        ],
    )
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
