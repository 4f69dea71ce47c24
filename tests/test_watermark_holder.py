"""``simulate`` says what held the group watermark: which segment, idle or unread, moved by the advancer
or by reads, and for how long (summary.json, series.csv, the printed summary)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from bench.sim.engine import run_scenario
from bench.sim.holder import HOLDER_COLUMNS
from bench.spec.scenario import load_scenario
from bench.study import write_result
from bench.study.simulate_run import summary_lines

ROOT = Path(__file__).resolve().parents[1]
SENSORS = str(ROOT / "docs" / "tutorial" / "sensors.yaml")
SHORT = ["duration_ms=8000", "writers.sensor.stop_ms=6000", "metrics.plots=false"]


def test_a_segment_no_key_reaches_holds_the_group_watermark_moved_by_the_advancer(tmp_path: Path) -> None:
    """The tutorial's sensors: 10 keys on 4 segments leave one empty; it holds the watermark, and the
    lag saw-tooths with the advancer's passes."""
    res = run_scenario(load_scenario(SENSORS, SHORT))
    held = res.summary["watermark"]["held_by"]
    top = held[0]
    assert top["bytes"] == 0 and top["state"] == "idle" and top["advanced_by"] == "advancer"
    assert top["fraction"] > 0.5
    total = sum(h["ms"] for h in held)
    assert total == res.scenario.duration_ms
    samples = res.recorder.samples
    by_top = [r for r in samples if r["held_by"] == top["segment"] and r["held_by_state"] == "idle"]
    assert max(r["group_lag_ms"] for r in by_top) >= res.scenario.store.max_watermark_lag_ms // 2
    line = next(ln for ln in summary_lines(res) if "group watermark held by" in ln)
    assert f"{top['segment']} (idle, 0 bytes, moved by the advancer)" in line
    write_result(res, tmp_path)
    rows = list(csv.DictReader((tmp_path / "series.csv").open()))
    assert list(rows[0])[-3:] == list(HOLDER_COLUMNS)
    assert sum(1 for r in rows if r["held_by"] == top["segment"]) >= len(by_top)
    assert json.loads((tmp_path / "summary.json").read_text())["watermark"]["held_by"] == held


def test_one_segment_is_held_by_its_reads_while_written() -> None:
    res = run_scenario(load_scenario(SENSORS, [*SHORT, "stream.segments=1"]))
    writing = [r for r in res.recorder.samples if 0 < r["t_ms"] < 6000]
    assert all(r["held_by_advanced_by"] == "reads" for r in writing[1:])
    assert all(h["bytes"] > 0 for h in res.summary["watermark"]["held_by"])


def test_readers_behind_hold_it_on_unread_segments() -> None:
    res = run_scenario(load_scenario("slow-readers", ["duration_ms=6000", "metrics.plots=false"]))
    held = res.summary["watermark"]["held_by"]
    assert held[0]["state"] == "unread" and held[0]["advanced_by"] == "reads"
    unread = [r for r in res.recorder.samples if r["held_by_state"] == "unread"]
    assert unread and all(r["unread_bytes"] > 0 for r in unread)
