"""Custom lab strategies: loaded by ``module:Class``, run beside the four, bad ones refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from test_lab import EXPECTED, TINY, S

from bench.cli import cli
from bench.lab import (
    LabScenarioError,
    LabStrategyError,
    lab_scenario_from_dict,
    load_lab_scenario,
    run_compare,
)
from bench.lab.compared_strategies import LabEvent
from bench.lab.strategies_contrib import PercentileDelayStrategy
from bench.sim.failure_schedule import failure_stream, timeline
from bench.spec.seeds import Seeds
from bench.study import format_table, write_outputs
from bench.study.run_options import RunOptions


class IngestionMinus:
    """The built-in ``ingestion`` strategy, rewritten as a plugin: group watermark - lag_ms."""

    time_domain = "ingestion"

    def __init__(self, lag_ms: int) -> None:
        self.lag_ms = lag_ms
        self.group: int | None = None
        self.events: list[LabEvent] = []

    def on_event(self, event: LabEvent) -> None:
        self.events.append(event)

    def on_group_watermark(self, watermark: int, now_ms: int) -> None:
        self.group = watermark

    def watermark(self, now_ms: int) -> int | None:
        return None if self.group is None else self.group - self.lag_ms


class Asserted(IngestionMinus):
    """The built-in ``producer`` strategy as a plugin: the writers' asserted watermark as it is."""

    time_domain = "event"

    def watermark(self, now_ms: int) -> int | None:
        return self.group


class Raises:
    def on_event(self, event: LabEvent) -> None:
        raise ZeroDivisionError("boom")

    def watermark(self, now_ms: int) -> int | None:
        return None


class ReturnsText:
    def on_event(self, event: LabEvent) -> None:
        pass

    def watermark(self, now_ms: int) -> Any:
        return "soon"


class NoWatermark:
    def on_event(self, event: LabEvent) -> None:
        pass


class BadDomain(IngestionMinus):
    time_domain = "wall-clock"


def _tiny(*custom: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(TINY)
    d["strategies"]["custom"] = list(custom)
    return d


def _me(cls: str) -> str:
    return f"{__name__}:{cls}"


def test_a_custom_strategy_gets_its_own_row_equal_to_the_builtin_it_reimplements(tmp_path: Path) -> None:
    sc = lab_scenario_from_dict(
        _tiny({"name": "mine", "class_path": _me("IngestionMinus"), "params": {"lag_ms": 500}})
    )
    result = run_compare(sc)
    assert [r["strategy"] for r in result.rows] == ["ingestion", "producer", "flink", "spark", "mine"]
    mine = result.row("mine")
    assert {k: mine[k] for k in EXPECTED["ingestion"]} == EXPECTED["ingestion"]
    assert {k: v for k, v in mine.items() if k != "strategy"} == {
        k: v for k, v in result.row("ingestion").items() if k != "strategy"
    }
    assert "mine" in format_table(result)
    write_outputs(result, tmp_path, plots=False)
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["rows"][-1]["strategy"] == "mine" and len(doc["series"]["mine"]) == 7
    assert (tmp_path / "compare.csv").read_text().splitlines()[-1].startswith("mine,")


# Everything that moves the group watermark between and within reads at once: six writers
# (Poisson and on/off bursts) with drifting clocks, exponential disorder and write latency;
# three readers with a processing time that crash at random and restart; random store
# outages; load-driven scaling; two stages after the reordering step.
BUSY = {
    "name": "busy",
    "seed": 3,
    "start_time_ms": S,
    "duration_ms": 12_000,
    "store": {"max_watermark_lag_ms": 2000, "polling_period_ms": 500},
    "stream": {"name": "lab/busy", "segments": 2},
    "scaling": {"mode": "auto", "every_ms": 2000, "target_rate_per_s": 300, "min_segments": 2},
    "writers": [
        {
            "name": "steady",
            "count": 4,
            "key_count": 16,
            "workload": {"kind": "poisson", "rate_per_s": 150},
            "clock_drift_sd_ppm": 50,
            "disorder": {"kind": "exponential", "ms": 100},
            "write_latency": {"kind": "exponential", "ms": 20},
            "assert_every_ms": 100,
            "stop_ms": 10_000,
        },
        {
            "name": "bursty",
            "count": 2,
            "key_count": 8,
            "workload": {
                "kind": "mmpp",
                "rate_per_s": 50,
                "burst_rate_per_s": 1500,
                "burst_ms": 1000,
                "burst_every_ms": 4000,
            },
            "disorder": {"kind": "exponential", "ms": 200},
            "assert_every_ms": 200,
            "when_idle": "mark_idle",
            "stop_ms": 10_000,
        },
    ],
    "readers": [
        {
            "name": "r",
            "count": 3,
            "poll_ms": 50,
            "processing": {"kind": "exponential", "ms": 0.2},
            "mtbf_ms": 4000,
            "offline_after_ms": 500,
            "restart_ms": {"kind": "exponential", "ms": 1000},
        }
    ],
    "faults": {"store_mtbf_ms": 5000, "store_downtime_ms": 500},
    "group": {"position_report_interval_ms": 200, "max_event_time_lag_ms": 300},
    "pipeline": {
        "ordering": True,
        "window_ms": 2000,
        "stages": [
            {
                "name": "w5",
                "kind": "window",
                "window_ms": 5000,
                "key": "key",
                "function": "sum",
                "delay_ms": 100,
            },
            {"name": "mx", "kind": "aggregate", "key": "all", "function": "max", "delay_ms": 100},
        ],
    },
    "metrics": {"sample_ms": 250},
    "strategies": {
        "tick_ms": 50,
        "flink_bound_ms": 300,
        "flink_idle_timeout_ms": 2000,
        "spark_delay_ms": 300,
    },
}


def test_plugins_equal_the_builtins_they_reimplement_under_crashes_outages_scaling_and_latency() -> None:
    """A plugin's watermark is asked and applied where the built-ins apply theirs (each group
    watermark, between the events of a read; each tick), so "group watermark - lag" is the
    ``ingestion`` row and "the asserted watermark" the ``producer`` row, column for column."""
    d = copy.deepcopy(BUSY)
    d["strategies"]["custom"] = [
        {"name": "mine", "class_path": _me("IngestionMinus"), "params": {"lag_ms": 300}},
        {"name": "told", "class_path": _me("Asserted"), "params": {"lag_ms": 0}},
    ]
    sc = lab_scenario_from_dict(d)
    r = run_compare(sc)
    assert r.scale_events_ms and r.outages  # the workload really scaled and lost its store
    crashes = [
        t.kind
        for name in ("r-0", "r-1", "r-2")
        for t in timeline(sc.readers[0], Seeds(sc.seed).rng(failure_stream(name)), sc.duration_ms)
    ]
    assert crashes.count("crash") >= 2 and crashes.count("restart") >= 2
    for builtin, plugin in (("ingestion", "mine"), ("producer", "told")):
        row, own = r.row(builtin), r.row(plugin)
        assert 0 < row["late"] < row["delivered"], builtin
        assert {k: v for k, v in own.items() if k != "strategy"} == {
            k: v for k, v in row.items() if k != "strategy"
        }, builtin
        assert r.series[plugin] == r.series[builtin]
        theirs, ours = r.strategies[builtin].pipeline, r.strategies[plugin].pipeline
        assert theirs.chain is not None and ours.chain is not None and ours.chain.rows == theirs.chain.rows
        assert ours.firings == theirs.firings


def test_the_plugin_sees_each_event_once_with_both_times() -> None:
    from bench.lab.compare import run_compare as rc
    from bench.lab.plugins import PluginStrategy

    seen: list[PluginStrategy] = []
    orig = PluginStrategy.__init__

    def spy(self: PluginStrategy, *a: Any) -> None:
        orig(self, *a)
        seen.append(self)

    PluginStrategy.__init__ = spy  # type: ignore[method-assign]
    try:
        rc(
            lab_scenario_from_dict(
                _tiny({"name": "m", "class_path": _me("IngestionMinus"), "params": {"lag_ms": 0}})
            )
        )
    finally:
        PluginStrategy.__init__ = orig  # type: ignore[method-assign]
    seen[0]._check()
    assert seen[0].regressions == 0
    events = seen[0].impl.events
    s = TINY["start_time_ms"]
    assert [(e.writer, e.seq, e.event_time - s, e.ingestion_time - s) for e in events] == [
        (0, 0, 1000, 1000),
        (0, 1, 500, 2000),
        (0, 2, 3000, 3000),
    ]
    assert all(e.segment.startswith("lab/tiny/") and e.stream == "lab/tiny" for e in events)


@pytest.mark.parametrize(
    ("class_path", "params", "match"),
    [
        ("no_colon_here", {}, r"strategies\.custom\.0\.class_path: must be 'module:Class'"),
        ("no_such_module_xyz:Thing", {}, r"class_path: cannot import module 'no_such_module_xyz'"),
        (
            "bench.lab.strategies_contrib:Nope",
            {},
            r"class_path: module 'bench.lab.strategies_contrib' has no",
        ),
        ("bench.lab.strategies_contrib:__all__", {}, r"class_path: .* is a list, not a class"),
        (_me("NoWatermark"), {}, r"class_path: .* lacks watermark\(\)"),
        (_me("BadDomain"), {"lag_ms": 1}, r"class_path: .*time_domain must be one of"),
        (_me("IngestionMinus"), {"lag": 1}, r"strategies\.custom\.0\.params: .* rejected \{'lag': 1\}"),
        (
            "bench.lab.strategies_contrib:PercentileDelayStrategy",
            {"q": 1.5},
            r"params: .*q must be a number in \(0, 1\]",
        ),
    ],
)
def test_a_bad_custom_strategy_is_refused_when_the_scenario_loads(
    class_path: str, params: dict[str, Any], match: str
) -> None:
    with pytest.raises(LabScenarioError, match=match):
        lab_scenario_from_dict(_tiny({"name": "x", "class_path": class_path, "params": params}))


def test_custom_names_must_not_clash() -> None:
    ok = {"name": "x", "class_path": _me("IngestionMinus"), "params": {"lag_ms": 1}}
    with pytest.raises(LabScenarioError, match=r"strategies\.custom\.0\.name: 'flink' is already"):
        lab_scenario_from_dict(_tiny({**ok, "name": "flink"}))
    with pytest.raises(LabScenarioError, match=r"strategies\.custom\.1\.name: 'x' is already"):
        lab_scenario_from_dict(_tiny(ok, ok))
    with pytest.raises(LabScenarioError, match=r"strategies\.custom\.0\.params: must be a mapping"):
        lab_scenario_from_dict(_tiny({**ok, "params": [1, 2]}))


def test_a_failing_plugin_is_named_in_the_error() -> None:
    with pytest.raises(
        LabStrategyError, match=r"'bad' \(.*:Raises\)\.on_event raised ZeroDivisionError: boom"
    ):
        run_compare(lab_scenario_from_dict(_tiny({"name": "bad", "class_path": _me("Raises")})))
    with pytest.raises(LabStrategyError, match=r"'txt' .*watermark returned 'soon'; it must return an int"):
        run_compare(lab_scenario_from_dict(_tiny({"name": "txt", "class_path": _me("ReturnsText")})))


def test_cli_reports_a_bad_class_path_in_one_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(_tiny({"name": "x", "class_path": "nowhere_mod:X"})))
    r = CliRunner().invoke(cli, ["compare", str(f)])
    assert r.exit_code != 0
    assert "strategies.custom.0.class_path: cannot import module 'nowhere_mod'" in r.output
    assert "Traceback" not in r.output


def _ev(ingestion: int, event: int) -> LabEvent:
    return LabEvent(ingestion, "s/t", "s/t/0", 0, 0, event, ingestion, 32)


def test_percentile_strategy_learns_the_bound_from_a_sliding_window() -> None:
    p = PercentileDelayStrategy(q=0.9, window=10, min_samples=5, initial_bound_ms=7_000)
    assert p.watermark(0) is None  # no group watermark yet
    p.on_group_watermark(100_000, 100_000)
    for d in (100, 200, 300, 400):
        p.on_event(_ev(50_000, 50_000 - d))
    assert p.bound_ms == 7_000 and p.watermark(0) == 93_000  # fewer than min_samples
    for d in range(500, 1100, 100):  # delays 100..1000: the 9th of 10 is 900
        p.on_event(_ev(50_000, 50_000 - d))
    assert p.bound_ms == 900 and p.watermark(0) == 99_100
    for _ in range(10):  # the window forgets: ten delays of 50 ms
        p.on_event(_ev(60_000, 59_950))
    assert p.bound_ms == 50
    p._check()


def test_learned_bound_trades_late_events_for_latency() -> None:
    data = yaml.safe_load(Path(load_lab_scenario_path("learned-bound")).read_text())
    data["duration_ms"] = 40_000
    r = run_compare(lab_scenario_from_dict(data))
    p80, p95, ing = r.row("pct80"), r.row("pct95"), r.row("ingestion")
    assert p95["late"] == 0 < p80["late"] < ing["late"]  # B's 8 s-old readings are within p95 only
    assert p80["result_latency_p50_ms"] < p95["result_latency_p50_ms"]


def load_lab_scenario_path(name: str) -> Path:
    from bench.lab import lab_scenarios

    load_lab_scenario(name)
    return lab_scenarios()[name]


def test_custom_strategies_have_their_rows_in_replications_and_sweeps(tmp_path: Path) -> None:
    from bench.study.compare_run import compare_scenario
    from bench.study.sweep import run_experiment

    base = tmp_path / "tiny.yaml"
    mine = {"name": "mine", "class_path": _me("IngestionMinus"), "params": {"lag_ms": 500}}
    base.write_text(yaml.safe_dump(_tiny(mine)))
    lines: list[str] = []
    doc = compare_scenario(
        str(base),
        out=tmp_path / "reps",
        replications=2,
        options=RunOptions(echo=lines.append, jobs=1, fmt="svg"),
    )
    assert isinstance(doc, dict)
    assert doc["metrics"]["mine.wm_lag_mean_ms"]["mean"] == doc["metrics"]["ingestion.wm_lag_mean_ms"]["mean"]
    assert "\nmine " in "\n".join(lines)  # its own row in the printed table
    assert "mine" in (tmp_path / "reps" / "replications.svg").read_text()
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "mine-lag",
                "base": "tiny.yaml",
                "tool": "compare",
                "grid": {"strategies.custom.mine.params.lag_ms": [0, 500]},
                "metrics": ["wm_lag_mean_ms"],
            }
        )
    )
    results = run_experiment(
        str(sweep), out=tmp_path / "sw", options=RunOptions(echo=lines.append, jobs=1, fmt="pdf")
    )
    lag = [r["metrics"]["mine.wm_lag_mean_ms"]["mean"] for r in results]
    assert lag[0] + 500 == lag[1] == results[1]["metrics"]["ingestion.wm_lag_mean_ms"]["mean"]
    assert (tmp_path / "sw" / "sweep.pdf").read_bytes().startswith(b"%PDF")
