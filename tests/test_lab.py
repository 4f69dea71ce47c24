"""The watermark-strategy lab: numbers on a tiny scenario computed by hand, outputs, the CLI, scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bench.cli import cli
from bench.lab import (
    LabResult,
    LabScenarioError,
    lab_scenario_from_dict,
    lab_scenarios,
    load_lab_scenario,
    run_compare,
)
from bench.lab.compared_strategies import SparkStrategy
from bench.sim.engine import run_scenario
from bench.sim.failure_schedule import failure_stream, timeline
from bench.sim.result import SimResult
from bench.spec.scenario import scenario_from_dict
from bench.spec.seeds import Seeds
from bench.study import format_table, write_outputs

S = 1_000_000

TINY = {
    "name": "tiny",
    "start_time_ms": S,
    "duration_ms": 6000,
    # the advancer never fires within the run: after the last event nothing moves the
    # ingestion watermark (the writer's markers are only in the producer's copy of the stream)
    "store": {"max_watermark_lag_ms": 100_000, "polling_period_ms": 1000},
    "stream": {"name": "lab/tiny", "segments": 1},
    "writers": [
        {
            "name": "A",
            "keys": ["A"],
            "workload": {
                "kind": "schedule",
                "events": [
                    {"at_ms": 1000, "key": "A"},
                    {"at_ms": 2000, "key": "A", "event_time_offset_ms": -1500},
                    {"at_ms": 3000, "key": "A"},
                ],
            },
            "assert_every_ms": 1000,
            "stop_ms": 3001,
        }
    ],
    "readers": [{"name": "r"}],
    "group": {"position_report_interval_ms": 0, "max_event_time_lag_ms": 500},
    "pipeline": {"ordering": True, "window_ms": 2000},
    "metrics": {"sample_ms": 1000},
    "strategies": {
        "tick_ms": 1000,
        "flink_bound_ms": 0,
        "flink_idle_timeout_ms": 100_000,
        "flink_interval_ms": 1000,
        "spark_delay_ms": 0,
        "spark_trigger_ms": 1000,
    },
}

# Worked by hand (S = 1_000_000; every frame is 15 + 1 + 16 = 32 bytes):
# events: e0 written at t=1000 with event time S+1000; e1 at t=2000 with S+500 (out of
#   order); e2 at t=3000 with S+3000. Windows of 2000: W1=[S, S+2000) holds e0, e1;
#   W2=[S+2000, S+4000) holds e2. Writer A asserts S+t after its events every
#   second (heartbeats after it stops) — the t=1000 assertion S+1000 is false for e1 —
#   into the producer's copy of the stream only. The readers poll every 50 ms; an event
#   appended at t is read at t.
# ingestion (lag 500) reads the events copy: no marker moves its tail. The group watermark
#   is the tail's, LAST_WRITE_TIME - 1: S-1 until t=1000 (creation time - 1), then S+999,
#   S+1999 from t=2000, S+2999 from t=3000 for good (the advancer waits 100 s); event time
#   runs 500 behind. t=1000: e0 buffered; t=2000: e1 (S+500 > S+499: a read's watermark
#   comes after its events) on time, buffered (2 held: 64 bytes), then WM S+1499 releases
#   both; t=3000: WM S+2499 fires W1 (2 events) at S+3000, latency 1000; e2 waits for good
#   (W2 never fires). Lags at t=0..6000: 501 four times, then 1501, 2501, 3501 -> mean 1358,
#   max 3501. Nothing late, completeness 2/3.
# producer reads the asserted copy (a marker at t is ingested at S+t): the watermark is the
#   last assertion passed minus one, S+t-1: t=1000: e0
#   (S+1000 > S-1... S+999) buffered; t=2000: e1 S+500 <= S+999: late; WM S+1999
#   fires W1 with e0 only at S+2000 (latency 0); t=3000: e2 buffered; t=4000: WM
#   S+3999 fires W2 at S+4000 (latency 0). Lag always 1; 1 late of 3; completeness 2/3;
#   at most 1 event held (32 bytes).
# flink (bound 0): WM = max event time - 1, emitted each tick after the reads. t=0: no
#   event, no watermark; t=1000: e0 buffered, WM S+999; t=2000: e1 late (<= S+999);
#   t=3000: e2 buffered (2 held), WM S+2999 releases e0 and fires W1 (1 event) at S+3000,
#   latency 1000; no event after: WM stays S+2999 (idle timeout 100 s not reached), W2
#   never fires. Lags at t=1000..6000: 1, 1001, 1, 1001, 2001, 3001 -> mean 1168, max 3001.
# spark (delay 0, trigger each tick), as Spark runs micro-batches: a batch runs with the
#   watermark computed after the batch before it, drops rows at or below the *previous*
#   batch's watermark and emits windows whose end it reached. t=1000: batch 0 (e0) runs
#   with WM 0; after it WM = S+1000. t=2000: e1 (S+500) is judged against batch 0's WM 0:
#   on time (2 held); batch 1 runs with WM S+1000, releasing e0 and e1 (W1 needs
#   WM >= S+2000). t=3000: e2 buffered; batch 2 runs with WM S+1000; after it WM S+3000.
#   t=4000: no rows, but the WM moved: a no-data batch 3 with WM S+3000 emits W1 (2
#   events) at S+4000, latency 2000. Lags at t=2000..6000: 1000, 2000, 1000, 2000, 3000
#   -> mean 1800, max 3000 (no watermark before t=2000: Spark's starts at 0).
EXPECTED = {
    "ingestion": dict(
        late=0,
        late_fraction=0.0,
        completeness=0.6667,
        windows_fired=1,
        wm_lag_mean_ms=1358,
        wm_lag_max_ms=3501,
        result_latency_p50_ms=1000,
        result_latency_max_ms=1000,
        buffer_peak_events=2,
        buffer_peak_bytes=64,
    ),
    "producer": dict(
        late=1,
        late_fraction=0.3333,
        completeness=0.6667,
        windows_fired=2,
        wm_lag_mean_ms=1,
        wm_lag_max_ms=1,
        result_latency_p50_ms=0,
        result_latency_max_ms=0,
        buffer_peak_events=1,
        buffer_peak_bytes=32,
    ),
    "flink": dict(
        late=1,
        late_fraction=0.3333,
        completeness=0.3333,
        windows_fired=1,
        wm_lag_mean_ms=1168,
        wm_lag_max_ms=3001,
        result_latency_p50_ms=1000,
        result_latency_max_ms=1000,
        buffer_peak_events=2,
        buffer_peak_bytes=64,
    ),
    "spark": dict(
        late=0,
        late_fraction=0.0,
        completeness=0.6667,
        windows_fired=1,
        wm_lag_mean_ms=1800,
        wm_lag_max_ms=3000,
        result_latency_p50_ms=2000,
        result_latency_max_ms=2000,
        buffer_peak_events=2,
        buffer_peak_bytes=64,
    ),
}


def test_tiny_scenario_matches_the_hand_computed_numbers() -> None:
    result = run_compare(lab_scenario_from_dict(TINY))
    assert result.events_written == 3
    assert [r["strategy"] for r in result.rows] == ["ingestion", "producer", "flink", "spark"]
    for name, want in EXPECTED.items():
        row = result.row(name)
        assert row["events"] == 3 and row["delivered"] == 3 and row["duplicates"] == 0 and row["windows"] == 2
        got = {k: row[k] for k in want}
        assert got == want, name


def test_outputs_table_csv_json_and_figure(tmp_path: Path) -> None:
    result = run_compare(lab_scenario_from_dict(TINY))
    table = format_table(result)
    assert table.splitlines()[0].startswith("tiny: 3 events")
    assert len(table.splitlines()) == 6 and "producer" in table
    paths = write_outputs(result, tmp_path)
    assert sorted(p.name for p in paths) == ["compare.csv", "compare.json", "compare.png"]
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert [r["strategy"] for r in doc["rows"]] == ["ingestion", "producer", "flink", "spark"]
    assert len(doc["series"]["flink"]) == 7  # one sample per second, t = 0..6000
    csv_lines = (tmp_path / "compare.csv").read_text().splitlines()
    assert len(csv_lines) == 5 and csv_lines[0].startswith("strategy,")
    assert (tmp_path / "compare.png").stat().st_size > 10_000


def test_cli_compare_prints_the_table_and_writes_outputs(tmp_path: Path) -> None:
    import yaml

    f = tmp_path / "tiny.yaml"
    f.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["compare", str(f), "--out", str(out), "--no-plot"])
    assert r.exit_code == 0, r.output
    assert "tiny: 3 events" in r.output and "spark" in r.output
    assert (out / "compare.csv").exists() and not (out / "compare.png").exists()
    bad = CliRunner().invoke(cli, ["compare", "no-such-scenario"])
    assert bad.exit_code != 0 and "no lab scenario" in bad.output


def test_scenario_errors_name_the_field() -> None:
    with pytest.raises(LabScenarioError, match=r"writers\.0\.when_idle"):
        lab_scenario_from_dict({**TINY, "writers": [{"name": "A", "when_idle": "sleep"}]})
    with pytest.raises(LabScenarioError, match=r"strategies\.nope: unknown field"):
        lab_scenario_from_dict({**TINY, "strategies": {"nope": 1}})
    with pytest.raises(LabScenarioError, match="tick_ms"):
        lab_scenario_from_dict({**TINY, "pipeline": {"ordering": True, "window_ms": 1500}})


def test_shipped_scenarios_load() -> None:
    names = lab_scenarios()
    shipped = (
        "iot-sensors",
        "idle-producers",
        "slow-readers",
        "catch-up",
        "transactions",
        "false-assertions",
    )
    for want in shipped:
        assert want in names
        load_lab_scenario(want)


def test_random_reader_crashes_hit_every_strategy_at_the_same_times() -> None:
    """``mtbf_ms`` in the lab: the one reader crashes, is declared offline and restarts when its
    failure schedule says (the simulator's, for the same seed), in every strategy's group."""
    sc = load_lab_scenario(
        "false-assertions",
        [
            "duration_ms=3000",
            "readers.reader.count=1",
            "readers.reader.mtbf_ms=2000",
            "readers.reader.offline_after_ms=500",
            "readers.reader.restart_ms.kind=fixed",
            "readers.reader.restart_ms.ms=500",
            "writers.honest.stop_ms=2900",  # the restarted reader polls every 50 ms from 2558: the
            "writers.liar.stop_ms=2900",  # last poll is at 2958, after the last write (2900)
        ],
    )
    plan = timeline(sc.readers[0], Seeds(sc.seed).rng(failure_stream("reader")), sc.duration_ms)
    assert [(t.t_ms, t.kind) for t in plan] == [
        (0, "join"),
        (1558, "crash"),
        (2058, "offline"),
        (2558, "restart"),
    ]
    result = run_compare(sc)
    assert result.events_written > 120  # ~60 after the crash, read only once the reader restarted
    for row in result.rows:  # the only reader: without its restart, nothing after 1.5 s arrives
        assert row["delivered"] - row["duplicates"] == row["events"] == result.events_written, row
    lags = {name: [(t, wm) for t, wm, _, _ in series] for name, series in result.series.items()}
    stalled = {name: [wm for t, wm in s if 1600 <= t <= 2500] for name, s in lags.items()}
    assert all(len(set(v)) == 1 for v in stalled.values()), stalled  # no watermark moves while it is down


def _false_assertions(readers: list[dict[str, object]]) -> dict[str, object]:
    path = Path(__file__).resolve().parents[1] / "bench/scenarios/false-assertions.yaml"
    d: dict[str, object] = yaml.safe_load(path.read_text())
    d.update(duration_ms=4000, readers=readers, metrics={"sample_ms": 100})
    return d


def test_a_no_ack_stall_holds_every_strategys_watermark_and_loses_nothing() -> None:
    """``noack`` in the lab: the only reader stays online but reads nothing from 1 s to 2.5 s; no
    strategy's watermark moves meanwhile, and afterwards it reads everything, once."""
    sc = lab_scenario_from_dict(
        _false_assertions([{"name": "reader", "noack": {"start_ms": 1000, "end_ms": 2500}}])
    )
    result = run_compare(sc)
    for row in result.rows:
        assert row["delivered"] == row["events"] == result.events_written and row["duplicates"] == 0, row
    stalled = {  # Spark's watermark from the last batch before the stall applies from the next trigger
        name: {wm for t, wm, _, _ in series if (2000 if name == "spark" else 1100) <= t <= 2400}
        for name, series in result.series.items()
    }
    assert all(len(v) == 1 for v in stalled.values()), stalled
    moved = {name: {wm for t, wm, _, _ in series if t >= 2500} for name, series in result.series.items()}
    assert all(len(v) > 1 for v in moved.values()), moved


def test_a_reader_that_leaves_hands_its_segments_over_in_every_strategy() -> None:
    """``leave_ms`` in the lab: one of two readers closes at 1.5 s; the other reads on from where
    it acknowledged, so every event is delivered in every strategy's group."""
    sc = lab_scenario_from_dict(_false_assertions([{"name": "stay"}, {"name": "goer", "leave_ms": 1500}]))
    result = run_compare(sc)
    assert result.events_written > 200
    for row in result.rows:
        assert row["delivered"] - row["duplicates"] == row["events"] == result.events_written, row


@pytest.mark.slow
def test_iot_sensors_shows_each_strategys_trade_off() -> None:
    r = run_compare(load_lab_scenario("iot-sensors"))
    assert r.events_written == 90
    # truthful producers: nothing late, at ~30 s of lag (sensor C's clock is the minimum)
    prod, ing, spark = r.row("producer"), r.row("ingestion"), r.row("spark")
    assert prod["late"] == 0 and prod["completeness"] > ing["completeness"]
    assert 30_000 <= prod["wm_lag_mean_ms"] < 31_000
    assert ing["late"] == 30  # all of sensor C: 30 s behind, maxEventTimeLag 10 s
    assert spark["late"] > ing["late"]  # B's clock (30 s ahead) drives Spark's maximum


def test_the_readme_shows_what_compare_prints() -> None:
    """The README's iot-sensors table is the command's output, not a copy that drifted."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    result = CliRunner().invoke(cli, ["compare", "iot-sensors"])
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line.strip()]
    assert table and all(line in readme for line in table), "README's `ingestwm compare iot-sensors` is stale"


def _lab_and_sim(d: dict[str, object]) -> tuple[LabResult, SimResult]:
    """The lab's and the simulator's runs of one scenario."""
    return run_compare(lab_scenario_from_dict(d)), run_scenario(scenario_from_dict(d))


def test_a_store_outage_holds_every_strategys_writes_and_reads_and_loses_nothing() -> None:
    """``faults`` in the lab: the store is down from 1 s to 2.5 s (as in the simulator): nothing is
    written or read meanwhile in any strategy; afterwards the held events arrive, each once."""
    d = _false_assertions([{"name": "reader"}])
    d["faults"] = {"store_restart_at_ms": [1000], "store_downtime_ms": 1500}
    result = run_compare(lab_scenario_from_dict(d))
    assert result.outages == ((1000, 2500),)
    for row in result.rows:
        assert row["delivered"] - row["duplicates"] == row["events"] == result.events_written > 200, row
    spark = result.strategies["spark"]
    assert isinstance(spark, SparkStrategy)
    # a batch holds what was read since the trigger before (every 1 s): none from 1 s to 2.5 s,
    # then the 1.5 s held back with what came after
    rows = {b.t_ms: len(b.rows) for b in spark.batches}
    assert rows[2000] == 0 and rows[3000] > 2 * rows[1000] > 80, rows
    for name, series in result.series.items():  # nothing read: buffers and watermarks stand still
        during = [(wm, held) for t, wm, held, _ in series if (2000 if name == "spark" else 1100) <= t < 2500]
        assert len(set(during)) == 1, (name, during)


def test_random_store_outages_are_the_simulators_for_the_same_seed() -> None:
    d = _false_assertions([{"name": "reader"}])
    d["faults"] = {"store_mtbf_ms": 1200, "store_downtime_ms": 300}
    lab, sim = _lab_and_sim(d)
    assert (
        lab.outages and [{"start_ms": a, "end_ms": b} for a, b in lab.outages] == sim.summary["store_outages"]
    )
    other = run_compare(lab_scenario_from_dict({**d, "seed": 14}))
    assert other.outages and other.outages != lab.outages


def test_auto_scaling_scales_the_lab_as_the_simulator_when_load_says_so() -> None:
    """``scaling.mode: auto`` in the lab: the rates the writers make split hot segments at the
    simulator's times, and every strategy still delivers every event once across the scalings."""
    d = _false_assertions([{"name": "reader"}])
    d["scaling"] = {"mode": "auto", "every_ms": 1000, "target_rate_per_s": 20, "min_segments": 2}
    lab, sim = _lab_and_sim(d)
    sim_times = [ev["t_ms"] for ev in sim.recorder.scale_events]
    assert sim_times and sorted(set(lab.scale_events_ms)) == sorted(set(sim_times))
    for row in lab.rows:
        assert row["delivered"] - row["duplicates"] == row["events"] == lab.events_written, row
    # the stream scales when the simulator's does, also between two of the strategies' steps
    off = {**d, "scaling": {"mode": "split", "at_ms": [1050]}}
    lab, sim = _lab_and_sim(off)
    assert lab.scale_events_ms == (1050,) == tuple(ev["t_ms"] for ev in sim.recorder.scale_events)


def test_processing_time_slows_every_strategys_reader_alike() -> None:
    """``processing`` in the lab: at 20 ms an event a reader takes five events a tick while six
    arrive, so every strategy falls behind alike, and catches up once writes stop."""
    fast = _false_assertions([{"name": "reader"}])
    for w in fast["writers"]:  # type: ignore[attr-defined]
        w["stop_ms"] = 2000
    slow = {**fast, "readers": [{"name": "reader", "processing": {"kind": "fixed", "ms": 20}}]}
    a, b = run_compare(lab_scenario_from_dict(fast)), run_compare(lab_scenario_from_dict(slow))
    assert a.events_written == b.events_written > 100
    for name in a.series:
        rb = b.row(name)
        assert rb["delivered"] - rb["duplicates"] == rb["events"] == b.events_written, rb
    spark_a, spark_b = a.strategies["spark"], b.strategies["spark"]
    assert isinstance(spark_a, SparkStrategy) and isinstance(spark_b, SparkStrategy)
    rows_by = [{b.t_ms: len(b.rows) for b in s.batches} for s in (spark_a, spark_b)]
    assert max(rows_by[1].values()) <= 5 * 10  # a Spark trigger spans 10 ticks: at most 5 a tick
    assert max(b.t_ms for b in spark_b.batches if b.rows) > max(b.t_ms for b in spark_a.batches if b.rows)
