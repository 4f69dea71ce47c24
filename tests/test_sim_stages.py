"""Multi-stage pipelines: window -> aggregate -> window after the reordering step, lag per stage."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path
from typing import Any

import pytest

from bench.sim import run_scenario
from bench.sim.stages import StageChain
from bench.spec import ScenarioError, load_scenario
from bench.spec.scenario import StageSpec, scenario_from_dict
from bench.study import write_result


def _chain(*specs: StageSpec) -> StageChain:
    return StageChain(tuple(specs))


def test_a_chain_forwards_records_and_watermarks_with_each_hops_delay() -> None:
    # stage 1: windows of 10 ms per key (sum), 5 ms away; stage 2: running max over all keys, 5 ms further
    ch = _chain(
        StageSpec("w10", "window", window_ms=10, delay_ms=5),
        StageSpec("max", "aggregate", key="all", function="max", delay_ms=5),
    )
    for key, ts in ((1, 1), (1, 2), (2, 3), (1, 12)):
        ch.input_record(key, ts, now=100)
    ch.input_watermark_at(9, now=100)  # closes [0, 10): results at ts 9, due at stage 2 at 110
    ch.sample(0, now=104)  # nothing has reached stage 1 yet
    assert [r[2:] for r in ch.rows] == [
        (9, 95, 12, 92, 4),
        (None, None, None, None, 0),
        (None, None, None, None, 0),
    ]
    ch.sample(1, now=105)  # stage 1 processed everything due at 105 and fired both keys' windows
    s1 = ch.stages[0]
    assert (s1.watermark, s1.records_in, s1.records_out, s1.latencies) == (9, 4, 2, [95, 95])  # 105 - 10
    assert ch.rows[-1][2:] == (None, None, None, None, 0)
    assert ch.rows[-2][2:] == (9, 96, 9, 96, 2)
    ch.sample(2, now=110)
    s2 = ch.stages[1]
    assert (s2.watermark, s2.op.totals) == (
        9,
        {"all": 2},
    )  # max of the per-key counts 2 (key 1) and 1 (key 2)
    lags = {r[1]: r[3] for r in ch.rows if r[0] == 2}
    assert lags == {0: 101, 1: 101, 2: 101}  # every stage has caught up with watermark 9
    ch.input_watermark_at(20, now=120)
    ch.sample(3, now=127)
    lags = {r[1]: r[3] for r in ch.rows if r[0] == 3}
    assert lags == {0: 107, 1: 107, 2: 118}  # W_2(127) = W_1(122) = 9: the delays show up as lag
    ch._check()
    summary = ch.summary()
    assert [s["name"] for s in summary] == ["reorder", "w10", "max"]
    assert summary[1]["result_latency_ms"]["count"] == 3 and summary[2]["records_out"] == 2  # 1 in flight


def test_without_delays_every_stage_has_the_reordering_steps_watermark_lag() -> None:
    ch = _chain(StageSpec("a", "window", window_ms=10), StageSpec("b", "window", window_ms=40, key="all"))
    for ts in range(0, 100, 3):
        ch.input_record(0, ts, now=1000 + ts)
        ch.input_watermark_at(ts - 1, now=1000 + ts)
        ch.sample(ts, now=1000 + ts)
    by_t = {t: [r for r in ch.rows if r[0] == t] for t in range(0, 100, 3)}
    for rows in by_t.values():
        lags = {r[3] for r in rows}
        assert len(lags) == 1  # L_0 = L_1 = L_2
    last = by_t[99]
    assert last[1][5] < last[2][5]  # but the 40 ms windows' results are older than the 10 ms ones'


def test_shipped_pipeline_lag_grows_through_the_stages(tmp_path: Path) -> None:
    sc = load_scenario("pipeline-stages", ["duration_ms=34000"])
    result = run_scenario(sc)
    stages = result.summary["pipeline"]["stages"]
    assert [s["name"] for s in stages] == ["reorder", "count-5s", "max-all", "max-30s"]
    means = [s["wm_lag_ms"]["mean"] for s in stages]
    for a, b in itertools.pairwise(means):
        # each hop adds its 300 ms: stage k's watermark is stage k-1's 300 ms earlier, so
        # per sample the step is 0 or a watermark step; on average 300 (a few ms of sampling)
        assert b >= a + 290, means
    rows = result.stage_rows
    for t, group in itertools.groupby(rows, key=lambda r: r[0]):
        lags = [r[3] for r in group]
        known = [x for x in lags if x is not None]
        assert known == sorted(known), t  # at every sample, stage k lags at least as much as stage k-1
    out = [s["output_lag_ms"]["mean"] for s in stages]
    assert out[3] > out[1] + 5000  # 30 s windows: results far older than the 5 s windows'
    assert stages[1]["records_out"] > 0 and stages[3]["records_out"] >= 1
    paths = write_result(result, tmp_path)
    assert {"stages.csv", "stages.png"} <= {p.name for p in paths}
    with (tmp_path / "stages.csv").open() as f:
        got = list(csv.DictReader(f))
    assert len(got) == len(rows) and got[0]["stage"] == "0"


def test_in_the_lab_every_strategy_feeds_its_own_chain_and_pays_its_lag_at_every_stage(
    tmp_path: Path,
) -> None:
    from bench.lab import lab_scenario_from_dict, lab_scenarios, run_compare
    from bench.spec.loader import read_mapping
    from bench.study import format_table, write_outputs

    data = read_mapping(lab_scenarios()["pipeline-stages"], "lab scenario")
    data["duration_ms"] = 35_000
    result = run_compare(lab_scenario_from_dict(data))
    names = ["count-5s", "max-all", "max-30s"]
    for row in result.rows:
        lags = [row["wm_lag_mean_ms"]] + [row[f"{n}_wm_lag_mean_ms"] for n in names]
        for a, b in itertools.pairwise(lags):
            assert b >= a + 290, (row["strategy"], lags)  # 300 ms per hop (means rounded)
        assert row["max-30s_output_lag_mean_ms"] > row["count-5s_output_lag_mean_ms"] + 5_000
    worst = max(result.rows, key=lambda r: r["wm_lag_mean_ms"])
    assert all(worst["max-30s_wm_lag_mean_ms"] >= r["max-30s_wm_lag_mean_ms"] for r in result.rows)
    table = format_table(result)
    assert "stage lag ms (watermark/output)" in table and "max-30s" in table
    svg = write_outputs(result, tmp_path, fmt="svg")[-1].read_text()
    assert "watermark lag per pipeline stage" in svg and "3: max-30s" in svg


def test_lab_stages_are_the_simulators_pipeline_stages() -> None:
    from bench.lab import LabScenarioError, lab_scenario_from_dict

    base: dict[str, Any] = {
        "name": "x",
        "duration_ms": 1000,
        "writers": [{"name": "w"}],
        "readers": [{"name": "r"}],
        "strategies": {},
    }

    def pipeline(*stages: dict[str, Any]) -> dict[str, Any]:
        return {**base, "pipeline": {"ordering": True, "window_ms": 500, "stages": list(stages)}}

    with pytest.raises(LabScenarioError, match=r"pipeline\.stages\.0\.window_ms: a window stage needs"):
        lab_scenario_from_dict(pipeline({"name": "a"}))
    with pytest.raises(LabScenarioError, match=r"pipeline\.stages: stage names must be unique"):
        lab_scenario_from_dict(pipeline({"name": "reorder", "kind": "aggregate"}))
    with pytest.raises(LabScenarioError, match=r"stages: unknown field"):  # one language: no lab-only list
        lab_scenario_from_dict({**base, "stages": [{"name": "a", "kind": "aggregate"}]})
    sc = lab_scenario_from_dict(pipeline({"name": "a", "kind": "aggregate"}))
    assert [s.name for s in sc.pipeline.stages] == ["a"]


@pytest.mark.parametrize(
    ("pipeline", "match"),
    [
        ({"stages": [{"name": "a", "window_ms": 10}]}, r"pipeline\.stages: stages follow the ordering step"),
        (
            {"ordering": True, "stages": [{"name": "a"}]},
            r"pipeline\.stages\.0\.window_ms: a window stage needs",
        ),
        (
            {"ordering": True, "stages": [{"name": "a", "kind": "aggregate", "window_ms": 5}]},
            r"stages\.0\.window_ms: an aggregate stage has no window_ms",
        ),
        ({"ordering": True, "stages": [{"name": "a", "kind": "join"}]}, r"stages\.0\.kind: must be one of"),
        (
            {"ordering": True, "stages": [{"name": "a", "window_ms": 5}, {"name": "a", "window_ms": 9}]},
            r"pipeline\.stages: stage names must be unique",
        ),
        (
            {"ordering": True, "stages": [{"name": "a", "window_ms": 5, "delay_ms": -1}]},
            r"delay_ms: must be >= 0",
        ),
    ],
)
def test_bad_stages_are_refused_with_their_path(pipeline: dict[str, Any], match: str) -> None:
    base = {
        "name": "x",
        "duration_ms": 1000,
        "writers": [{"name": "w"}],
        "readers": [{"name": "r"}],
        "pipeline": pipeline,
    }
    with pytest.raises(ScenarioError, match=match):
        scenario_from_dict(base)
