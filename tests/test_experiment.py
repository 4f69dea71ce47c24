"""Experiments: randomness from the seed per component, stochastic workloads and faults, replications
with confidence intervals, sweeps of the lab, provenance, the generated schema reference."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from spark_fixtures import spark_fixture  # noqa: F401 (fixture)

from bench.cli import cli
from bench.lab import run_compare
from bench.sim import run_scenario
from bench.sim.arrivals import EventSource
from bench.spec import ScenarioError, load_scenario, scenario_from_dict
from bench.spec.scenario import scenario_to_dict
from bench.spec.schema_doc import schema_markdown
from bench.spec.seeds import Seeds
from bench.study import write_result
from bench.study.experiment import LAB_METRICS, SIM_METRICS, aggregate, execute, replication_tasks, run_task
from bench.study.replicate import run_replications
from bench.study.run_options import RunOptions
from bench.study.stats import (
    DOMAINS,
    FRACTION,
    NON_NEGATIVE,
    UNBOUNDED,
    domain_of,
    error_bars,
    mean_ci,
    summarise,
    t_quantile_975,
)
from bench.study.sweep import SweepError, load_sweep, run_experiment, sweep_tasks

ROOT = Path(__file__).resolve().parents[1]


def _quiet(_: str) -> None:
    """Where a test sends the lines a driver prints."""


SMALL_RANDOM = [
    "duration_ms=6000",
    "writers.steady.stop_ms=5000",
    "writers.bursty.stop_ms=5000",
    "readers.r.mtbf_ms=2500",
    "faults.store_mtbf_ms=3000",
    "metrics.plots=false",
]


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _source(spec: dict[str, Any], seed: int = 1, name: str = "w", end: int = 60_000) -> EventSource:
    sc = scenario_from_dict({"name": "t", "duration_ms": end, "writers": [{"name": name, **spec}]})
    return EventSource(sc.writers[0], name, sc.start_time_ms, end, Seeds(seed))


def _all(src: EventSource, end: int) -> dict[str, np.ndarray]:
    bs = src.produce_until(end)
    return {k: np.concatenate([getattr(b, k) for b in bs]) for k in ("gen", "key_idx", "et", "ready")}


# ---------------------------------------------------------------------- the seed


def test_a_component_draws_the_same_whoever_else_is_in_the_scenario() -> None:
    """Generators are spawned by the component's name, not by order: adding a writer changes nobody else."""
    base = {
        "name": "w",
        "workload": {"kind": "poisson", "rate_per_s": 500},
        "disorder": {"kind": "exponential", "ms": 50},
    }
    alone = scenario_from_dict({"name": "a", "duration_ms": 5000, "writers": [base]})
    crowd = scenario_from_dict(
        {
            "name": "b",
            "duration_ms": 5000,
            "writers": [{**base, "name": "first"}, base, {**base, "name": "z"}],
        }
    )
    a = _all(EventSource(alone.writers[0], "w", alone.start_time_ms, 5000, Seeds(3)), 5000)
    b = _all(EventSource(crowd.writers[1], "w", crowd.start_time_ms, 5000, Seeds(3)), 5000)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other = _all(EventSource(crowd.writers[0], "first", crowd.start_time_ms, 5000, Seeds(3)), 5000)
    assert not np.array_equal(a["gen"], other["gen"][: len(a["gen"])])
    assert Seeds(3).rng("x").integers(0, 1 << 30) == Seeds(3).rng("x").integers(0, 1 << 30)


def test_same_seed_same_bytes_other_seed_other_results(tmp_path: Path) -> None:
    """A stochastic scenario: identical files for one seed; series and summary differ for another."""
    outs = []
    for i, seed in enumerate((4, 4, 5)):
        result = run_scenario(load_scenario("random-faults", SMALL_RANDOM, seed=seed))
        write_result(result, tmp_path / f"run{i}")
        outs.append(_files(tmp_path / f"run{i}"))
    assert outs[0] == outs[1]
    assert outs[0]["series.csv"] != outs[2]["series.csv"]
    summary = json.loads(outs[2]["summary.json"])
    assert "writers.steady.workload (poisson)" in summary["random"]
    assert "readers.r.mtbf_ms" in summary["random"] and "faults.store_mtbf_ms" in summary["random"]
    # the faults happened and lost nothing: restarts, outages, every write delivered, watermark monotonic
    assert sum(r.get("crashes", 0) for r in summary["readers"].values()) > 0
    assert summary["store_outages"]
    ev = summary["events"]
    assert ev["unique"] == ev["written"] and ev["missing"] == 0 and ev["late_ingestion"] == 0
    assert summary["watermark"]["monotonic"]


def test_a_deterministic_scenario_says_nothing_is_random() -> None:
    sc = load_scenario("iot-sensors")
    assert sc.random_parts == []
    assert load_scenario("idle-tail").random_parts == [
        "writers.w.workload (poisson)",
        "writers.w.disorder (uniform)",
    ]


# ---------------------------------------------------------------------- arrivals, disorder, latency


def test_poisson_and_mmpp_arrivals_have_their_rates_and_vary_with_the_seed() -> None:
    poisson = {"workload": {"kind": "poisson", "rate_per_s": 1000}}
    counts = [len(_all(_source(poisson, seed), 60_000)["gen"]) for seed in range(4)]
    assert all(abs(c - 60_000) < 5 * math.sqrt(60_000) for c in counts)  # 5 sigma
    assert len(set(counts)) > 1
    mmpp = {
        "workload": {
            "kind": "mmpp",
            "rate_per_s": 10,
            "burst_rate_per_s": 1000,
            "burst_ms": 1000,
            "burst_every_ms": 5000,
        }
    }
    gen = _all(_source(mmpp, 1, end=600_000), 600_000)["gen"]
    assert 0.7 * 208 < len(gen) / 600 < 1.3 * 208  # mean rate (1000*1 + 10*4) / 5
    per_s = np.bincount(gen // 1000)
    assert per_s.max() > 500 and np.median(per_s) < 50  # bursts, and calm in between
    constant = {"workload": {"kind": "constant", "rate_per_s": 1000}}
    assert np.array_equal(
        _all(_source(constant, 1), 10_000)["gen"], _all(_source(constant, 2), 10_000)["gen"]
    )


def test_disorder_drift_and_latency_follow_their_distributions() -> None:
    spec = {
        "workload": {"kind": "constant", "rate_per_s": 10_000},
        "disorder": {"kind": "exponential", "ms": 40},
        "write_latency": {"kind": "fixed", "ms": 7},
        "clock_drift_ppm": 1000,
    }
    src = _source(spec, end=20_000)
    ev = _all(src, 20_000)
    clock = src.start_time_ms + ev["gen"] + np.floor(ev["gen"] * 1e-3).astype(np.int64)
    delay = clock - ev["et"]
    assert delay.min() >= 0 and 36 < delay.mean() < 44  # exponential of mean 40 (floored)
    assert (ev["ready"] % 100 == 7).all()  # the tick's end (every 100 ms) plus 7 ms
    logn = _all(
        _source({**spec, "disorder": {"kind": "lognormal", "ms": 20, "sigma": 0.5}, "clock_drift_ppm": 0}),
        20_000,
    )
    d = src.start_time_ms + logn["gen"] - logn["et"]
    assert 17 <= np.median(d) <= 21  # median 20 (floored)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_trace_file_is_replayed_with_its_keys_times_and_sizes(tmp_path: Path, fmt: str) -> None:
    rows = {
        "time_ms": [250, 100, 1000, 1000, 4999],
        "key": ["a", "b", "a", "c", "b"],
        "event_time_ms": [5, 1, 9, 8, 2],
        "size": [8, 40, 8, 100, 16],
    }
    path = tmp_path / f"trace.{fmt}"
    if fmt == "csv":
        lines = ["time_ms,key,event_time_ms,size"] + [
            ",".join(str(rows[c][i]) for c in rows) for i in range(5)
        ]
        path.write_text("\n".join(lines) + "\n")
    else:
        pq.write_table(pa.table(rows), path)
    (tmp_path / "sc.yaml").write_text(
        "name: tr\nduration_ms: 6000\nwriters:\n  - {name: w, workload: {kind: trace, trace: "
        + path.name
        + "}}\nreaders:\n  - {name: r}\nmetrics: {event_log: true, plots: false}\n"
    )
    sc = load_scenario(tmp_path / "sc.yaml")  # the trace path is relative to the scenario file
    src = EventSource(sc.writers[0], "w", sc.start_time_ms, 6000, Seeds(0))
    assert src.keys == ["a", "b", "c"]
    got = src.produce_until(6000)
    gen = np.concatenate([b.gen for b in got])
    assert gen.tolist() == [100, 250, 1000, 1000, 4999]
    assert np.concatenate([b.et for b in got]).tolist() == [1, 5, 9, 8, 2]
    sizes = np.concatenate([b.sizes for b in got if b.sizes is not None])
    assert sizes.tolist() == [40, 8, 8, 100, 16]
    s = run_scenario(sc).summary
    assert s["events"]["written"] == s["events"]["delivered"] == 5
    bad = tmp_path / "bad.csv"
    bad.write_text("when,key\n1,a\n")
    with pytest.raises(ScenarioError, match=r"writers\.w\.workload\.trace: .*no column 'time_ms'"):
        EventSource(
            scenario_from_dict(
                {
                    "name": "t",
                    "duration_ms": 10,
                    "writers": [{"name": "w", "workload": {"kind": "trace", "trace": str(bad)}}],
                }
            ).writers[0],
            "w",
            0,
            10,
            Seeds(0),
        )


# ---------------------------------------------------------------------- scaling and faults


def test_auto_scaling_splits_hot_segments_and_merges_cold_ones() -> None:
    sc = scenario_from_dict(
        {
            "name": "auto",
            "duration_ms": 12_000,
            "stream": {"name": "s/auto", "segments": 1},
            "scaling": {"mode": "auto", "every_ms": 1000, "target_rate_per_s": 500, "min_segments": 1},
            "writers": [
                {
                    "name": "w",
                    "key_count": 64,
                    "workload": {"kind": "constant", "rate_per_s": 1600},
                    "stop_ms": 5000,
                }
            ],
            "readers": [{"name": "r"}],
            "metrics": {"plots": False},
        }
    )
    r = run_scenario(sc)
    hist = r.summary["scaling"]["history"]
    splits = [h for h in hist if len(h["sealed"]) == 1]
    merges = [h for h in hist if len(h["sealed"]) == 2]
    assert splits and splits[0]["t_ms"] == 1000 and splits[0]["rates_per_s"]
    assert len([h for h in splits if h["t_ms"] == 2000]) == 2  # both halves still above 500/s
    assert merges and min(h["t_ms"] for h in merges) > 5000  # once the load is gone
    ev = r.summary["events"]
    assert ev["unique"] == ev["written"] and r.summary["watermark"]["monotonic"]


def test_a_store_outage_holds_the_writes_and_loses_nothing() -> None:
    sc = scenario_from_dict(
        {
            "name": "outage",
            "duration_ms": 6000,
            "writers": [{"name": "w", "workload": {"kind": "constant", "rate_per_s": 1000}, "stop_ms": 5000}],
            "readers": [{"name": "r"}],
            "faults": {"store_restart_at_ms": [2000], "store_downtime_ms": 1000},
            "metrics": {"sample_ms": 100, "plots": False},
        }
    )
    r = run_scenario(sc)
    written = {row["t_ms"]: row["events_written"] for row in r.recorder.samples}
    assert written[2100] == written[2900]  # nothing stored while the store is down
    assert written[3100] > written[2900] + 900  # the held events go in when it is back
    assert r.summary["events"]["written"] == r.summary["events"]["delivered"] == 5000


# ---------------------------------------------------------------------- statistics, replications, sweeps


def test_t_intervals_match_the_textbook() -> None:
    assert t_quantile_975(1) == 12.706 and t_quantile_975(30) == 2.042
    assert 2.021 > t_quantile_975(50) > 2.0 and 1.98 > t_quantile_975(1000) > 1.96
    s = summarise([1, 2, 3, 4, 5])
    assert s["mean"] == 3 and s["sd"] == pytest.approx(1.58114, abs=1e-5)
    assert s["ci95"] == pytest.approx(2.776 * 1.581139 / math.sqrt(5), rel=1e-4)
    assert summarise([7])["ci95"] is None and summarise([None])["n"] == 0


def _outside_domains(metrics: dict[str, Any]) -> list[str]:
    """The interval bounds of ``aggregate``'s results that leave their metric's domain."""
    bad = []
    for name, s in metrics.items():
        floor, ceiling = domain_of(name)
        for b in ("low", "high", "mean"):
            v = s[b]
            if v is not None and ((floor is not None and v < floor) or (ceiling is not None and v > ceiling)):
                bad.append(f"{name}.{b} = {v}")
    return bad


@pytest.mark.parametrize(
    ("values", "domain", "low", "high", "clipped"),
    [
        ([0, 0, 0], FRACTION, 0, 0, None),  # no spread: the interval is the point
        ([1, 1, 1], FRACTION, 1, 1, None),
        ([0.0, 0.01], FRACTION, 0, None, "low"),  # n = 2: t(0.975, 1) = 12.7 reaches below 0
        ([0.99, 1.0], FRACTION, None, 1, "high"),
        ([0.0, 1.0], FRACTION, 0, 1, "both"),
        ([0, 5000, 0], NON_NEGATIVE, 0, None, "low"),
        ([-5, 5], UNBOUNDED, None, None, None),  # a lag may be negative: not cut
    ],
)
def test_intervals_stay_in_the_metrics_domain_and_say_when_they_were_cut(
    values: list[float], domain: tuple[float | None, float | None], low: Any, high: Any, clipped: str | None
) -> None:
    s = summarise(values, domain)
    free = summarise(values)  # the plain Student-t interval
    assert s["mean"] == free["mean"] and s["sd"] == free["sd"] and s["ci95"] == free["ci95"]
    assert s["clipped"] == clipped and free["clipped"] is None
    assert s["low"] == (free["low"] if low is None else low)
    assert s["high"] == (free["high"] if high is None else high)
    floor, ceiling = domain
    assert floor is None or s["low"] >= floor
    assert ceiling is None or s["high"] <= ceiling
    below, above = error_bars([s])
    assert s["mean"] - below[0] == pytest.approx(s["low"]) and s["mean"] + above[0] == pytest.approx(
        s["high"]
    )
    text = mean_ci(s)
    assert (text.startswith(f"{s['mean']:g} [") and text.endswith("]")) if clipped else "±" in text


def test_one_value_has_no_interval_whatever_the_domain() -> None:
    s = summarise([0.4], FRACTION)
    assert (s["n"], s["mean"], s["low"], s["high"], s["clipped"]) == (1, 0.4, None, None, None)
    assert summarise([], FRACTION)["clipped"] is None and mean_ci(s) == "0.4"


def test_every_metric_has_its_domain() -> None:
    assert domain_of("producer.late_fraction") == domain_of("completeness") == FRACTION
    assert domain_of("mine.late") == domain_of("scale_events") == NON_NEGATIVE
    assert domain_of("spark.wm_lag_mean_ms") == domain_of("flink.result_latency_p50_ms") == UNBOUNDED
    assert set(SIM_METRICS) | set(LAB_METRICS) <= set(DOMAINS)  # none left unbounded by omission


def test_a_three_seed_lab_sweep_keeps_every_bound_in_its_domain(tmp_path: Path) -> None:
    """The issue's case: a few late events in some seeds only gave late fractions and counts
    whose Student-t intervals reached below 0; cut at 0 now, and results.csv says so."""
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "name: s\nbase: false-assertions\ntool: compare\nseed: 1\nreplications: 3\n"
        "set: [duration_ms=5000, writers.honest.stop_ms=4000, writers.liar.stop_ms=4000,"
        " writers.honest.workload.kind=poisson, writers.liar.workload.kind=poisson,"
        " strategies.spark_delay_ms=1800, group.max_event_time_lag_ms=1800]\n"
        "grid: {strategies.flink_bound_ms: [1800]}\nmetrics: [late_fraction]\n"
    )
    out = tmp_path / "out"
    lines: list[str] = []
    results = run_experiment(
        str(sweep), out=out, options=RunOptions(echo=lines.append, executor="local", jobs=1, progress=False)
    )
    metrics = results[0]["metrics"]
    assert _outside_domains(metrics) == []
    cut = {m for m, s in metrics.items() if s["clipped"]}
    assert "flink.late_fraction" in cut  # the case happened: a t interval below 0
    with (out / "results.csv").open() as f:
        row = next(csv.DictReader(f))
    for m, s in metrics.items():
        assert row[f"{m}_clipped"] == (s["clipped"] or "")
        floor, ceiling = domain_of(m)
        for b in ("low", "high"):
            if row[f"{m}_{b}"] != "":
                v = float(row[f"{m}_{b}"])
                assert (floor is None or v >= floor) and (ceiling is None or v <= ceiling), (m, b, v)
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["results"][0]["metrics"]["flink.late_fraction"]["low"] == 0
    assert any(" [0, " in line for line in lines)  # the printed table shows the cut interval


def test_replications_write_intervals_runs_bands_and_a_manifest(tmp_path: Path) -> None:
    sc = load_scenario("random-faults", SMALL_RANDOM, seed=10)
    doc = run_replications("simulate", sc, 3, tmp_path, RunOptions(echo=_quiet, jobs=1, progress=False))
    assert doc["seeds"] == [10, 11, 12]
    lag = doc["metrics"]["lag_mean_ms"]
    assert lag["n"] == 3 and lag["low"] < lag["mean"] < lag["high"]
    written = doc["metrics"]["events_written"]
    assert written["sd"] > 0  # the seeds really differ
    assert doc["series"]["group_lag_ms"][5]["n"] == 3
    lines = (tmp_path / "replications.csv").read_text().splitlines()
    assert lines[0] == "metric,n,mean,sd,ci95,low,high,clipped"
    assert any(x.startswith("lag_mean_ms,3,") for x in lines)
    assert _outside_domains(doc["metrics"]) == []
    assert all(_outside_domains({name: s}) == [] for name, rows in doc["series"].items() for s in rows)
    assert len((tmp_path / "runs.csv").read_text().splitlines()) == 4
    assert (tmp_path / "seed-11" / "summary.json").exists() and (
        tmp_path / "replications.png"
    ).stat().st_size > 10_000
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["seeds"] == [10, 11, 12] and m["versions"]["numpy"] == np.__version__
    assert m["scenarios"][0]["writers"][0]["workload"]["kind"] == "poisson"  # fully resolved
    assert m["git"] is None or len(m["git"]["commit"]) == 40
    assert m["wall_s"] >= 0 and m["started_utc"].endswith("+00:00")


def test_replications_on_worker_processes_give_the_in_process_results() -> None:
    """The pool's workers (forked from a forkserver with the simulator preloaded) run the same
    simulations as the calling process, and report their progress through the pool's queue."""
    sc = scenario_to_dict(load_scenario("random-faults", SMALL_RANDOM))
    tasks = replication_tasks("simulate", sc, 10, 2)
    one = execute(tasks, RunOptions(jobs=1, progress=False))
    two = execute(tasks, RunOptions(jobs=2, progress=False))
    assert [r["metrics"] for r in two] == [r["metrics"] for r in one]
    assert [r["series"] for r in two] == [r["series"] for r in one]
    assert one[0]["metrics"] != one[1]["metrics"]  # two seeds, two results


def test_the_lab_runs_the_simulators_workload_and_its_seed_matters() -> None:
    over = ["duration_ms=5000", "writers.honest.stop_ms=4000", "writers.liar.stop_ms=4000"]
    over_p = [*over, "writers.honest.workload.kind=poisson", "writers.liar.workload.kind=poisson"]
    lab = [run_compare(load_scenario("false-assertions", over_p, seed=s)) for s in (1, 1, 2)]
    assert lab[0].rows == lab[1].rows and lab[0].rows != lab[2].rows
    sim = run_scenario(load_scenario("false-assertions", [*over_p, "metrics.plots=false"], seed=1))
    assert sim.summary["events"]["written"] == lab[0].events_written  # the same events in both
    runs = [run_task(t) for t in replication_tasks("compare", load_scenario_data_for(over), 1, 2)]
    agg = aggregate(runs)
    assert agg["producer.late_fraction"]["n"] == 2 and "flink.wm_lag_mean_ms" in agg


def load_scenario_data_for(over: list[str]) -> dict[str, Any]:
    from bench.spec.scenario import apply_overrides, load_scenario_data

    return apply_overrides(load_scenario_data("false-assertions"), over)


def test_a_lab_sweep_over_a_strategy_knob_has_a_task_per_point_and_seed(tmp_path: Path) -> None:
    sweep = load_sweep("flink-bound")
    assert sweep.tool == "compare" and sweep.replications == 5
    tasks = sweep_tasks(sweep)
    assert len(tasks) == 6 * 5 and {t["seed"] for t in tasks} == {1, 2, 3, 4, 5}
    assert tasks[5]["scenario"]["strategies"]["flink_bound_ms"] == 250
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nbase: idle-tail\ngrid: {store.polling_period_ms: [1]}\nmetrics: [nope]\n")
    with pytest.raises(SweepError, match="unknown metric 'nope'"):
        load_sweep(str(bad))
    bad.write_text("name: b\nbase: idle-tail\ntool: compare\ngrid: {strategies.flink_bound_ms: [1]}\n")
    with pytest.raises(SweepError, match=r"pipeline\.window_ms"):
        load_sweep(str(bad))  # idle-tail has no windows: the lab cannot run it


def test_cli_compare_takes_set_seed_and_replications(tmp_path: Path) -> None:
    args = ["compare", "false-assertions", "--set", "duration_ms=3000", "--seed", "3"]
    r = CliRunner().invoke(cli, [*args, "-n", "2", "-j", "1", "--out", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    assert "2 replications (seeds 3..4)" in r.output and "producer" in r.output
    assert (tmp_path / "x" / "replications.json").exists() and (tmp_path / "x" / "manifest.json").exists()
    bad = CliRunner().invoke(
        cli,
        [*args, "--set", "group.processes=true"],  # the one thing only the simulator runs
    )
    assert bad.exit_code != 0 and "group.processes" in bad.output


def test_the_schema_reference_is_generated_from_the_code() -> None:
    text = schema_markdown()
    for needle in (
        "## WriterSpec",
        "`disorder`",
        "`mtbf_ms`",
        "`target_rate_per_s`",
        "## StrategiesSpec",
        "events/s",
    ):
        assert needle in text
    r = CliRunner().invoke(cli, ["scenario", "schema"])
    assert r.exit_code == 0 and r.output == text
    assert (ROOT / "docs" / "scenario-schema.md").read_text() == text, "docs/scenario-schema.md is stale"


def test_a_local_lab_sweep_writes_means_intervals_and_a_manifest(tmp_path: Path) -> None:
    from bench.study.sweep import run_experiment

    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "name: s\nbase: false-assertions\ntool: compare\nseed: 1\nreplications: 2\n"
        "set: [duration_ms=3000, writers.honest.stop_ms=2000, writers.liar.stop_ms=2000]\n"
        "grid: {strategies.flink_bound_ms: [0, 2500]}\nmetrics: [flink.late_fraction]\n"
    )
    out = tmp_path / "out"
    results = run_experiment(str(sweep), out=out, options=RunOptions(echo=_quiet, jobs=1, progress=False))
    late = [r["metrics"]["flink.late_fraction"] for r in results]
    assert [x["n"] for x in late] == [2, 2] and late[0]["mean"] > late[1]["mean"] == 0
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["point", "strategies.flink_bound_ms", "n"]
    assert {"flink.late_fraction", "flink.late_fraction_ci95", "flink.late_fraction_low"} <= set(header)
    assert len((out / "runs.csv").read_text().splitlines()) == 5
    m = json.loads((out / "manifest.json").read_text())
    assert m["seeds"] == [1, 2] and m["tool"] == "experiment (compare)"
    assert (out / "sweep.png").stat().st_size > 10_000


def test_the_issues_idle_tail_now_depends_on_its_seed() -> None:
    """``simulate idle-tail --seed 1`` and ``--seed 2`` wrote identical series before (constant arrivals)."""
    over = ["duration_ms=3000", "writers.w.stop_ms=2000", "metrics.plots=false"]
    a, b = (run_scenario(load_scenario("idle-tail", over, seed=s)) for s in (1, 2))
    assert [r["events_written"] for r in a.recorder.samples] != [
        r["events_written"] for r in b.recorder.samples
    ]


def test_shipped_sweeps_load_and_the_scenario_commands_answer() -> None:
    for name in ("lag-vs-polling", "flink-bound"):
        assert load_sweep(name).grid
    listing = CliRunner().invoke(cli, ["scenario", "list"])
    assert listing.exit_code == 0 and "random-faults" in listing.output and "[lab]" in listing.output
    shown = CliRunner().invoke(cli, ["scenario", "show", "idle-tail", "--set", "seed=9"])
    assert shown.exit_code == 0 and "seed: 9" in shown.output and "restart_ms:" in shown.output
    bad = CliRunner().invoke(cli, ["scenario", "show", "idle-tail", "--set", "writers.w.disorder.kind=gauss"])
    assert bad.exit_code != 0 and "writers.0.disorder.kind" in bad.output


@pytest.mark.slow
def test_spark_runs_report_progress_per_simulation_and_give_the_local_results(spark: Any) -> None:
    """``--executor spark`` showed nothing until every run was back; now each finished run counts."""
    from bench.spec.scenario import apply_overrides, load_scenario_data
    from bench.study.experiment import spark_execute

    data = apply_overrides(load_scenario_data("random-faults"), SMALL_RANDOM)
    short = replication_tasks("simulate", dict(data, duration_ms=1_000), 1, 1)
    # 120 times the simulated time of the short one (~1.1 s against ~0.01 s; the simulator keeps
    # getting faster: at thirty times, ~0.3 s, a loaded machine saw all three end between two looks
    # at Spark's status tracker)
    stops = ("writers.steady.stop_ms=119000", "writers.bursty.stop_ms=119000")
    long = replication_tasks("simulate", apply_overrides(data, ["duration_ms=120000", *stops]), 2, 2)
    sc = spark.sparkContext  # the executors' Python workers import the simulator before the job:
    sc.parallelize(range(2), 2).map(lambda _: bool(__import__("bench.study.experiment"))).collect()
    seen: list[int] = []
    runs = spark_execute(sc, short + long, show_progress=False, on_progress=seen.append, poll_s=0.02)
    assert [r["seed"] for r in runs] == [1, 2, 3]
    assert [r["metrics"] for r in runs] == [run_task(t)["metrics"] for t in short + long]
    assert seen == sorted(seen) and seen[-1] == 3
    assert len(seen) >= 2, seen  # the short run was counted before the long ones were back
