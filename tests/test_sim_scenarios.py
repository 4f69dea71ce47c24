"""Each shipped scenario, at a reduced size, reaches its key outcome on the real store and reader group."""

from __future__ import annotations

import warnings

import pytest

from bench.sim import SimResult, run_scenario
from bench.spec import load_scenario, shipped_scenarios

warnings.filterwarnings("ignore", category=Warning, module="numba")


def _run(name: str, *overrides: str) -> SimResult:
    result = run_scenario(load_scenario(name, overrides))
    s = result.summary
    assert s["watermark"]["monotonic"], s["watermark"]
    assert s["events"]["late_ingestion"] == 0
    return result


def test_every_scenario_named_by_the_issue_is_shipped() -> None:
    assert {
        "pdp26-diagram",
        "iot-sensors",
        "idle-tail",
        "reader-failover",
        "scale-storm",
        "txn-heavy",
        "noack-stall",
    } <= set(shipped_scenarios())


def test_iot_sensors_a_and_b_complete_in_event_time_order_and_c_all_late() -> None:
    r = _run(
        "iot-sensors",
        "writers.A.max_events=8",
        "writers.B.max_events=8",
        "writers.C.max_events=8",
        "duration_ms=100000",
    )
    w = r.summary["writers"]
    for sensor in ("A", "B"):
        assert w[sensor]["written"] == 8
        assert w[sensor]["ordered_output"] == 8, sensor
        assert w[sensor]["late_dropped"] == 0
    assert w["C"]["written"] == 8
    assert w["C"]["late_dropped"] == 8
    assert w["C"]["ordered_output"] == 0
    names = r.recorder.writer_names
    out = [(names[wi], ts) for _, wi, _, ts in r.ordered]
    assert [ts for _, ts in out] == sorted(ts for _, ts in out)  # one stream, in event-time order
    assert sorted(names[wi] for _, wi, _, _ in r.late) == ["C"] * 8
    assert r.summary["scaling"]["events"] == 1  # the stream scaled at 60 s, in the middle of it


def test_noack_stall_freezes_the_group_watermark_while_the_fault_lasts() -> None:
    r = _run(
        "noack-stall",
        "duration_ms=16000",
        "readers.r-stuck.noack.start_ms=4000",
        "readers.r-stuck.noack.end_ms=10000",
        "writers.w.stop_ms=14000",
    )
    (fault,) = r.summary["faults"]
    assert fault["stalled"] and fault["resumed"]
    during = {
        row["group_watermark"] for row in r.recorder.samples if fault["settled_ms"] <= row["t_ms"] < 10000
    }
    assert len(during) == 1
    (stuck,) = during
    assert stuck < r.scenario.start_time_ms + 4000  # not past what r-stuck acknowledged before stalling
    before = [row["group_watermark"] for row in r.recorder.samples if row["t_ms"] < 4000]
    assert before[-1] > before[0]  # it was moving before the fault
    assert r.summary["events"]["missing"] == 0


def test_idle_tail_lag_is_bounded_by_max_lag_plus_polling_period() -> None:
    r = _run("idle-tail", "duration_ms=15000", "writers.w.stop_ms=5000")
    sc = r.scenario
    bound = sc.store.max_watermark_lag_ms + sc.store.polling_period_ms
    idle = [row for row in r.recorder.samples if row["t_ms"] >= 5000]
    assert len(idle) > 30
    assert all(row["group_lag_ms"] <= bound for row in idle), max(row["group_lag_ms"] for row in idle)
    assert max(row["group_lag_ms"] for row in idle) > sc.store.max_watermark_lag_ms // 2  # really idle
    assert r.summary["events"]["missing"] == 0


def test_reader_failover_delivers_everything_and_nothing_late_after_the_crash() -> None:
    r = _run("reader-failover", "duration_ms=15000", "readers.r-2.crash_ms=5500", "writers.w.stop_ms=12000")
    ev = r.summary["events"]
    assert ev["written"] > 0
    assert ev["unique"] == ev["written"] and ev["missing"] == 0
    assert ev["duplicates"] > 0  # r-2's unreported events came again from their new owner
    assert r.summary["readers"]["r-2"]["state"] == "offline"
    after = [row for row in r.recorder.samples if row["t_ms"] > 5500]
    assert after[-1]["late_ingestion"] == 0


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        (
            "scale-storm",
            (
                "duration_ms=12000",
                "scaling.every_ms=1000",
                "scaling.stop_ms=9000",
                "writers.w.stop_ms=10000",
                "writers.ew.stop_ms=10000",
            ),
        ),
        (
            "txn-heavy",
            (
                "duration_ms=12000",
                "scaling.at_ms=[3000, 6000]",
                "writers.tx.stop_ms=10000",
                "writers.plain.stop_ms=10000",
            ),
        ),
    ],
)
def test_scale_storm_and_txn_heavy_deliver_every_event_with_a_monotonic_watermark(
    name: str, overrides: tuple[str, ...]
) -> None:
    r = _run(name, *overrides)
    ev = r.summary["events"]
    assert ev["written"] > 1000
    assert ev["unique"] == ev["written"] == ev["delivered"]
    assert ev["missing"] == 0
    assert r.summary["scaling"]["events"] >= 2
    gw = [row["group_watermark"] for row in r.recorder.samples if row["group_watermark"] is not None]
    assert gw == sorted(gw)
    if name == "txn-heavy":
        assert all(w.get("transactions_committed", 1) > 0 for w in r.summary["writers"].values())


def test_pdp26_diagram_delivers_the_eight_events_and_idle_tails_keep_moving() -> None:
    r = _run("pdp26-diagram")
    ev = r.summary["events"]
    assert ev["delivered"] == ev["written"] == 8
    idle = r.summary["watermark"]["idle"]
    assert idle["lag_ms"]["max"] <= idle["bound_ms"]
    final = r.summary["watermark"]["final_group_watermark"]
    assert final > r.scenario.start_time_ms + 660_001  # past the last write (12:01:00.001)
