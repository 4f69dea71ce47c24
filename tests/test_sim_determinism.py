"""Same scenario and seed -> byte-identical output files, in this process and in another one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.sim import run_scenario
from bench.spec import load_scenario
from bench.study import write_result

OVERRIDES = [
    "duration_ms=8000",
    "readers.r-2.crash_ms=3500",
    "writers.w.stop_ms=7000",
    "metrics.event_log=true",
    "metrics.sample_ms=500",
]


def _files(d: Path) -> dict[str, bytes]:
    """Every output file but the manifest (its start and wall times differ by design)."""
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name != "manifest.json"}


def test_two_runs_with_the_same_seed_write_identical_files(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        write_result(run_scenario(load_scenario("reader-failover", OVERRIDES, seed=42)), out)
        outs.append(_files(out))
    assert set(outs[0]) >= {
        "summary.json",
        "series.csv",
        "segments.csv",
        "events.csv",
        "watermarks.png",
        "lateness.png",
    }
    assert outs[0] == outs[1]
    # another seed draws other jitter: the event times differ
    other = tmp_path / "other"
    write_result(run_scenario(load_scenario("reader-failover", OVERRIDES, seed=43)), other)
    assert _files(other)["events.csv"] != outs[0]["events.csv"]
    # ... and another process (another string hash seed) writes the same bytes
    proc_out = tmp_path / "proc"
    args = [
        sys.executable,
        "-m",
        "bench.cli",
        "simulate",
        "reader-failover",
        "--seed",
        "42",
        "--out",
        str(proc_out),
    ]
    for o in OVERRIDES:
        args += ["--set", o]
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _files(proc_out) == outs[0]
    assert (proc_out / "manifest.json").exists()
