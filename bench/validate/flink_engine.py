"""Replay the lab's Flink splits through Apache Flink (PyFlink, ``ingestwm[flink]``) in a subprocess.

The lab's ``FlinkStrategy`` emits watermarks on a grid: every ``flink_interval_ms`` of
simulated time, all splits at once, each periodic emit seeing the events delivered
since the last one. Flink emits on a processing-time timer per source
(``pipeline.auto-watermark-interval``) whose phase nobody sets. The regime in which the
two agree exactly (docs/engines.md) is built here:

- the events first seen by the lab's emit number ``k`` are released to Flink together
  at ``t0 + k * pace_ms`` of wall time; Flink's emit interval is much shorter than the
  pace (``interval_ms``), so Flink emits after each release has arrived and before the
  next, and every event is judged against the watermark of the releases before it —
  as in the lab, whose events are judged against the emit before them;
- idleness is processing time in Flink: the lab's timeout ``T`` with emit interval
  ``I`` makes a split idle at emit ``last + floor(T / I) + 2``; Flink's timeout is set to
  ``(floor(T / I) + 1.5) * pace_ms - 2 * interval_ms`` so that it goes idle half-way
  between the same two releases;
- a split leaves (its source finishes, watermark +inf) half a pace after the lab's
  last emit for it.

Every release records its slip (how late the pacer was); a slip of more than a
quarter pace means the run left the regime, and the comparison says so.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from ..lab.compare import LabResult
from ..lab.compared_strategies import FlinkStrategy
from ..lab.lab_scenario import lab_strategies
from .errors import EngineRunError, EngineUnavailableError

__all__ = ["FlinkReplay", "FlinkTiming", "flink_available", "replay_flink", "flink_spec"]

_MAX_WM = 2**63 - 1


@dataclass(frozen=True, slots=True)
class FlinkTiming:
    """Wall-clock pacing of a replay: ms per lab emit, Flink's emit interval, the start margin."""

    pace_ms: int = 40
    interval_ms: int = 2
    start_margin_s: float = 3.0

    def __post_init__(self) -> None:
        if self.pace_ms < 8 * self.interval_ms or self.interval_ms < 1:
            raise EngineRunError(
                f"Flink pacing: pace_ms ({self.pace_ms}) must be at least 8 x interval_ms "
                f"({self.interval_ms}) >= 1, or emits would see half a release"
            )


@dataclass(frozen=True, slots=True)
class FlinkReplay:
    """What Flink did: per event (writer, seq) its watermark on arrival and lateness; windows fired."""

    arrivals: dict[tuple[int, int], tuple[int, bool]]
    fired: list[tuple[int, int]]  # (window start, count) fired before the end of input
    max_slip_ms: int
    version: str
    timing: FlinkTiming

    @property
    def late(self) -> int:
        return sum(1 for _, late in self.arrivals.values() if late)

    @property
    def in_regime(self) -> bool:
        return self.max_slip_ms * 4 <= self.timing.pace_ms


def flink_available(python: str | None = None) -> str | None:
    """None if PyFlink and Java are here, else why not (``pip install 'ingestwm[flink]'``, Java 11+)."""
    if python is None or python == sys.executable:
        if importlib.util.find_spec("pyflink") is None:
            return "PyFlink is not installed (pip install 'ingestwm[flink]')"
    elif not os.path.exists(python):
        return f"no Python interpreter at {python} for Flink"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (java on PATH or JAVA_HOME) for Flink"
    return None


def flink_spec(result: LabResult, timing: FlinkTiming, sync_file: str) -> dict[str, Any]:
    """The job's input: each split's events with their release index, its start and end releases."""
    sc = result.scenario
    st = result.strategies["flink"]
    assert isinstance(st, FlinkStrategy)
    cfg = lab_strategies(sc)  # the strategies' knobs, defaults resolved (a scenario may have none)
    step = cfg.flink_interval_ms

    def release(clock_ms: int) -> int:
        return math.ceil((clock_ms - sc.start_time_ms) / step)

    events: dict[str, list[list[int]]] = {name: [] for name in st.spans}
    for clock, segment, writer, seq, et, _wm, _late in st.arrivals:
        events.setdefault(segment, []).append([release(clock), writer, seq, et])
    splits = []
    for name, evs in sorted(events.items()):
        first, last = st.spans.get(name, [sc.start_time_ms, sc.start_time_ms + sc.duration_ms])
        splits.append({"name": name, "start": release(first) - 1, "end": release(last) + 0.5, "events": evs})
    idle = (cfg.flink_idle_timeout_ms // step + 1.5) * timing.pace_ms - 2 * timing.interval_ms
    return {
        "bound_ms": cfg.flink_bound_ms,
        "idle_ms": max(1, round(idle)),
        "interval_ms": timing.interval_ms,
        "pace_ms": timing.pace_ms,
        "window_ms": scenario_window_ms(sc),
        "start_margin_s": timing.start_margin_s,
        "sync_file": sync_file,
        "splits": splits,
    }


def replay_flink(
    result: LabResult, timing: FlinkTiming | None = None, python: str | None = None
) -> FlinkReplay:
    """Run the scenario's Flink splits through PyFlink in a subprocess (``python``: its interpreter)."""
    timing = timing or FlinkTiming()
    why = flink_available(python)
    if why is not None:
        raise EngineUnavailableError(why)
    work = tempfile.mkdtemp(prefix="ingestwm-validate-flink-")
    try:
        spec = flink_spec(result, timing, os.path.join(work, "t0"))
        spec_path, out_path = os.path.join(work, "spec.json"), os.path.join(work, "out.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        last = max((s["end"] for s in spec["splits"]), default=0)
        budget = 180 + last * timing.pace_ms / 1000 + timing.start_margin_s
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        try:
            proc = subprocess.run(
                [python or sys.executable, "-m", "bench.validate.flink_job", spec_path, out_path],
                capture_output=True,
                text=True,
                timeout=budget,
                env=env,
                cwd=work,
            )
        except subprocess.TimeoutExpired:
            raise EngineRunError(f"the Flink job did not finish within {budget:.0f} s") from None
        if proc.returncode != 0 or not os.path.exists(out_path):
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
            raise EngineRunError(f"the Flink job failed (exit {proc.returncode}):\n{tail}")
        with open(out_path) as f:
            doc = json.load(f)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    arrivals: dict[tuple[int, int], tuple[int, bool]] = {}
    fired: list[tuple[int, int]] = []
    slip = 0
    for rec in doc["records"]:
        if rec[0] == "arr":
            _, writer, seq, _et, wm, late, s = rec
            arrivals[(int(writer), int(seq))] = (int(wm), bool(late))
            slip = max(slip, int(s))
        elif rec[0] == "win" and int(rec[3]) < _MAX_WM:
            fired.append((int(rec[1]), int(rec[2])))
    return FlinkReplay(arrivals, sorted(fired), slip, str(doc["version"]), timing)


def scenario_window_ms(sc: Any) -> int:
    """The scenario's tumbling window (the lab refuses a scenario without one before it runs)."""
    window: int | None = sc.window_ms
    if window is None:
        raise EngineRunError(f"{sc.name}: the lab needs pipeline.window_ms")
    return window
