"""``ingestwm tune``: each strategy's least bound meeting a late-fraction target, found by a search that
agrees with an exhaustive scan, never runs an evaluation twice, and says when the target is not met."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.cli import main
from bench.spec.errors import ScenarioError, TuneError
from bench.spec.scenario import load_scenario, scenario_from_dict, scenario_to_dict
from bench.study.experiment import run_task
from bench.study.run_options import RunOptions
from bench.study.stats import FRACTION, summarise
from bench.study.tune import BoundSearch, candidates, knobs, meets, tune

_QUIET = RunOptions(echo=lambda _: None)
"""Options of a test's tune: nothing printed."""

SMALL = {
    "name": "tune-small",
    "seed": 1,
    "duration_ms": 3000,
    "store": {"max_watermark_lag_ms": 1000, "polling_period_ms": 500},
    "stream": {"name": "t/small", "segments": 2},
    "writers": [
        {
            "name": "s",
            "count": 4,
            "workload": {"kind": "poisson", "rate_per_s": 40},
            "disorder": {"kind": "lognormal", "ms": 200, "sigma": 0.8},
        }
    ],
    "readers": [{"name": "r", "count": 1, "poll_ms": 50}],
    "group": {"max_event_time_lag_ms": 500},
    "pipeline": {"ordering": True, "window_ms": 1000},
    "metrics": {"sample_ms": 100},
    "strategies": {
        "flink_bound_ms": 500,
        "spark_delay_ms": 500,
        "custom": [
            {
                "name": "learned",
                "class_path": "bench.lab.strategies_contrib:PercentileDelayStrategy",
                "params": {"q": 0.5, "window": 64, "min_samples": 8, "margin_ms": 0},
                "bound_param": "margin_ms",
            }
        ],
    },
}
N = 3
GRID_MAX, GRID_STEP = 1600, 100
BOUNDED = ("ingestion", "flink", "spark", "learned")


def _at(data: dict[str, Any], bound: dict[str, int], seed: int) -> dict[str, Any]:
    from bench.study.tune import set_bounds

    sc = scenario_from_dict(data)
    d = set_bounds(scenario_to_dict(sc), knobs(sc), bound)
    d["seed"] = seed
    return {"tool": "compare", "seed": seed, "scenario": d, "lab_columns": ["result_latency_p99_ms"]}


@pytest.fixture(scope="module")
def grid_runs() -> dict[int, list[dict[str, Any]]]:
    """Every candidate bound, every strategy at it, every seed: the exhaustive scan's data."""
    out = {}
    for b in candidates(GRID_MAX, GRID_STEP):
        out[b] = [run_task(_at(SMALL, dict.fromkeys(BOUNDED, b), s)) for s in range(1, 1 + N)]
    return out


def _strategy_part(run: dict[str, Any], s: str) -> tuple[dict[str, Any], dict[str, Any]]:
    pre = s + "."
    return (
        {k: v for k, v in run["metrics"].items() if k.startswith(pre)},
        {k: v for k, v in run["series"].items() if k.startswith(pre)},
    )


class _Replay:
    """A stand-in for ``execute`` that answers each task from the scan (each strategy at its own bound),
    and records every task it was given."""

    def __init__(self, grid: dict[int, list[dict[str, Any]]]) -> None:
        self.grid = grid
        self.calls: list[list[dict[str, Any]]] = []

    def __call__(self, tasks: Sequence[dict[str, Any]], *args: Any, **kw: Any) -> list[dict[str, Any]]:
        self.calls.append(list(tasks))
        out = []
        for t in tasks:
            i = t["seed"] - SMALL["seed"]
            metrics: dict[str, Any] = {}
            series: dict[str, Any] = {}
            for s in ("ingestion", "producer", "flink", "spark", "learned"):
                b = t["params"].get(s, GRID_MAX)
                m, se = _strategy_part(self.grid[b][i], s)
                metrics.update(m)
                series.update(se)
            out.append({"point": t["point"], "seed": t["seed"], "params": t["params"], "metrics": metrics,
                        "series": series, "random": []})  # fmt: skip
        return out


def _late_fraction(runs: list[dict[str, Any]], s: str) -> dict[str, Any]:
    fs = []
    for r in runs:
        d = r["metrics"][f"{s}.delivered"]
        fs.append(r["metrics"][f"{s}.late"] / d if d else 0.0)
    return summarise(fs, FRACTION)


def _scan(grid: dict[int, list[dict[str, Any]]], s: str, target: float, top: int) -> int | None:
    """The exhaustive answer: the least candidate <= top that meets (checked monotone here)."""
    met = [(b, meets(_late_fraction(runs, s), target)) for b, runs in sorted(grid.items()) if b <= top]
    first = next((i for i, (_, m) in enumerate(met) if m), None)
    assert first is None or all(m for _, m in met[first:]), f"{s}: not monotone here: {met}"
    return None if first is None else met[first][0]


def test_the_lab_strategies_are_independent_of_one_another_s_bound() -> None:
    """What lets one run serve every strategy's search: a row depends on its own bound only."""
    a = run_task(_at(SMALL, {"ingestion": 300, "flink": 300, "spark": 300, "learned": 300}, 1))
    b = run_task(_at(SMALL, {"ingestion": 300, "flink": 1200, "spark": 0, "learned": 900}, 1))
    c = run_task(_at(SMALL, {"ingestion": 800, "flink": 300, "spark": 0, "learned": 300}, 1))
    assert _strategy_part(a, "ingestion") == _strategy_part(b, "ingestion")
    assert _strategy_part(a, "flink") == _strategy_part(c, "flink")
    assert _strategy_part(b, "spark") == _strategy_part(c, "spark")
    assert _strategy_part(a, "learned") == _strategy_part(c, "learned")
    assert _strategy_part(a, "producer") == _strategy_part(b, "producer") == _strategy_part(c, "producer")
    assert _strategy_part(a, "ingestion") != _strategy_part(c, "ingestion")  # the bound does matter


def test_tune_searches_only_the_strategies_that_run() -> None:
    """``strategies.only``: the other strategies have no row and no bound to search."""
    st = {**SMALL["strategies"], "only": ["spark", "producer"]}  # type: ignore[dict-item]
    sc = scenario_from_dict({**SMALL, "duration_ms": 1000, "strategies": st})
    assert [k.strategy for k in knobs(sc)] == ["spark"]
    res = tune(sc, 0.5, 1, 400, 200, options=_QUIET)
    assert [(r.strategy, r.status) for r in res.results] == [("producer", "as it is"), ("spark", "met")]


@pytest.mark.parametrize("target", [0.02, 0.1])
def test_the_search_finds_what_an_exhaustive_scan_finds_and_runs_nothing_twice(
    grid_runs: dict[int, list[dict[str, Any]]], target: float
) -> None:
    replay = _Replay(grid_runs)
    sc = scenario_from_dict(SMALL)
    res = tune(sc, target, N, GRID_MAX, GRID_STEP, options=_QUIET, run=replay)
    by = {r.strategy: r for r in res.results}
    for s in BOUNDED:
        want = _scan(grid_runs, s, target, GRID_MAX)
        got = by[s].evaluation.bound_ms if by[s].status == "met" else None
        assert got == want, (s, got, want)
    assert by["producer"].status == "as it is" and by["producer"].knob is None
    # never rerun: each (strategy, bound) probed once; one execute call per round, N runs each
    probed = [(s, call[0]["params"][s]) for call in replay.calls for s in call[0]["probing"]]
    assert len(probed) == len(set(probed))
    assert len(replay.calls) == res.rounds and res.tasks == N * res.rounds
    assert all(len(call) == N for call in replay.calls)
    assert len({(e.strategy, e.bound_ms) for e in res.points}) == len(res.points)
    assert res.rounds < len(candidates(GRID_MAX, GRID_STEP))  # a search, not a scan
    for r in res.results:  # reported from the cache: the point is one of the evaluated ones
        assert r.evaluation in res.points


def test_a_target_no_bound_meets_is_reported_not_met_at_the_maximum(
    grid_runs: dict[int, list[dict[str, Any]]],
) -> None:
    sc = scenario_from_dict(SMALL)
    top = 300
    res = tune(sc, 0.0, N, top, GRID_STEP, options=_QUIET, run=_Replay(grid_runs))
    ing = next(r for r in res.results if r.strategy == "ingestion")
    assert _scan(grid_runs, "ingestion", 0.0, top) is None
    assert ing.status == "not met" and ing.evaluation.bound_ms == top and not ing.evaluation.met


def test_bound_search_agrees_with_a_scan_for_every_threshold() -> None:
    grid = candidates(1000, 10)
    for start in (0, 500, 1000, 337):
        for threshold in [*range(0, 1001, 10), 10_000]:  # meets iff bound >= threshold
            se = BoundSearch(grid, start)
            while (b := se.propose()) is not None:
                se.record(b, b >= threshold)
            assert se.result == (threshold if threshold <= 1000 else None)
            assert len(se.tried) <= 2 * 11 + 2


def test_meets_with_an_interval_and_with_one_run() -> None:
    assert meets(summarise([0.0, 0.0, 0.0], FRACTION), 0.0)
    assert not meets(summarise([0.0005, 0.0015], FRACTION), 0.001)  # the mean does, its interval not
    assert meets(summarise([0.0009], FRACTION), 0.001)  # one run: the point estimate
    assert not meets(summarise([0.0011], FRACTION), 0.001)


def test_bound_param_must_name_an_int_param() -> None:
    with pytest.raises(ScenarioError, match=r"strategies.custom.0.bound_param: must name one of its params"):
        load_scenario("learned-bound", ['strategies.custom.0.bound_param="lag"'])
    with pytest.raises(ScenarioError, match=r"params.q is its bound: it must be an int >= 0"):
        load_scenario("learned-bound", ['strategies.custom.0.bound_param="q"'])
    sc = load_scenario("learned-bound", ['strategies.custom.1.bound_param="initial_bound_ms"'])
    assert [k.strategy for k in knobs(sc)] == ["ingestion", "flink", "spark", "pct95"]


def test_bad_options_fail_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(TuneError, match="--resolution-ms"):
        candidates(100, 0)
    assert main(["tune", "learned-bound", "--late-target", "2"]) != 0
    assert "--late-target" in capsys.readouterr().err
    assert main(["tune", "no-such", "--late-target", "0.1", "--out", str(tmp_path / "o")]) != 0
    assert "no lab scenario 'no-such'" in capsys.readouterr().err


def test_cli_tunes_a_file_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL), encoding="utf-8")
    out = tmp_path / "out"
    args = ["tune", str(path), "--late-target", "0.05", "-n", "2", "-j", "1", "--max-bound-ms", "1200",
            "--resolution-ms", "200", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert re.search(
        r"round 1: ingestion \d+ ms, flink \d+ ms, spark \d+ ms, learned 0 ms \(2 runs\)", printed
    )
    assert {p.name for p in out.iterdir()} >= {"tune.csv", "tune_points.csv", "tune.json", "tune.png",
                                                 "manifest.json"}  # fmt: skip
    rows = {r["strategy"]: r for r in csv.DictReader((out / "tune.csv").open())}
    assert set(rows) == {"ingestion", "producer", "flink", "spark", "learned"}
    assert rows["producer"]["status"] == "as it is" and rows["producer"]["bound_ms"] == ""
    assert rows["ingestion"]["field"] == "group.max_event_time_lag_ms"
    doc = json.loads((out / "tune.json").read_text())
    points = list(csv.DictReader((out / "tune_points.csv").open()))
    assert len(points) == len(doc["points"])
    for r in rows.values():
        assert r["status"] in ("met", "not met", "as it is")
        if r["status"] == "met":
            assert float(r["late_fraction_high"]) <= 0.05
            assert f"{r['strategy']}" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["late_target"] == 0.05 and manifest["seeds"] == [1, 2]


def test_cli_on_a_shipped_scenario_with_nothing_random_runs_one_seed_and_says_not_met(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """iot-sensors: sensor C's readings are 30 s old when ingested, so no maxEventTimeLag up to 20 s keeps
    them; nothing in it is random, so one run per bound is exact."""
    out = tmp_path / "iot"
    args = ["tune", "iot-sensors", "--late-target", "0.01", "--set", "duration_ms=30000", "--max-bound-ms",
            "20000", "--resolution-ms", "1000", "-j", "1", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "nothing in iot-sensors is random, so one run per bound is exact" in printed
    assert "ingestion: not met up to group.max_event_time_lag_ms = 20000 ms" in printed
    rows = {r["strategy"]: r for r in csv.DictReader((out / "tune.csv").open())}
    assert rows["ingestion"]["status"] == "not met" and rows["ingestion"]["bound_ms"] == ""
    assert rows["ingestion"]["n"] == "1" and rows["ingestion"]["late_fraction_high"] == ""
    doc = json.loads((out / "tune.json").read_text())
    ing = next(s for s in doc["strategies"] if s["strategy"] == "ingestion")
    assert ing["reported"]["bound_ms"] == 20000 and not ing["reported"]["met"]


def test_a_strategy_whose_row_moves_with_another_s_bound_is_an_error(
    grid_runs: dict[int, list[dict[str, Any]]],
) -> None:
    """The joint runs rest on independence: a riding strategy's row is compared with its cached one."""

    class Coupled(_Replay):
        def __call__(self, tasks: Sequence[dict[str, Any]], *args: Any, **kw: Any) -> list[dict[str, Any]]:
            runs = super().__call__(tasks, *args, **kw)
            for t, r in zip(tasks, runs, strict=True):  # producer's late count follows flink's bound
                r["metrics"]["producer.late"] += t["params"]["flink"]
            return runs

    with pytest.raises(TuneError, match="'producer' at bound None gave other results"):
        tune(
            scenario_from_dict(SMALL),
            0.05,
            N,
            GRID_MAX,
            GRID_STEP,
            options=_QUIET,
            run=Coupled(grid_runs),
        )
