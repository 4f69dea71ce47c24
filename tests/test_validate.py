"""ingestwm validate: the lab's Spark model against Spark itself, its Flink model against Flink, the command.

The Spark tests replay the model's micro-batches through a real query (one shared
SparkSession) and require every batch to agree: watermark, late rows, windows emitted.
The Flink test runs only with ``ingestwm[flink]`` installed (and Java); it is skipped
with the reason otherwise.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from spark_fixtures import spark_fixture  # noqa: F401
from test_lab import TINY

from bench.cli import cli
from bench.lab import LabScenarioError, lab_scenario_from_dict, lab_scenarios, load_lab_scenario, run_compare
from bench.validate import FlinkTiming
from bench.validate.run import validate_flink, validate_spark

S = 1_000_000


def _two_inputs(policy: str) -> dict[str, Any]:
    """TINY's writer A on one segment, B (one event at t=4000) on the other; one Spark input per segment."""
    d = copy.deepcopy(TINY)
    d["name"] = f"two-inputs-{policy}"
    d["stream"] = {"name": "lab/two", "segments": 2}
    a = copy.deepcopy(d["writers"][0])
    a["keys"] = ["k1"]
    for e in a["workload"]["events"]:
        e["key"] = "k1"
    d["writers"] = [
        a,
        {
            "name": "B",
            "keys": ["k0"],
            "workload": {"kind": "schedule", "events": [{"at_ms": 4000, "key": "k0"}]},
            "assert_every_ms": 1000,
        },
    ]
    d["strategies"] = dict(d["strategies"], spark_input="segment", spark_policy=policy)
    return d


def test_spark_model_judges_rows_against_the_previous_batch_and_runs_no_data_batches() -> None:
    st = run_compare(lab_scenario_from_dict(TINY)).strategies["spark"]
    b = st.batches  # type: ignore[attr-defined]
    assert [(x.t_ms, x.watermark, x.late_watermark) for x in b] == [
        (1000, 0, 0),
        (2000, S + 1000, 0),  # e1 (S+500) is below S+1000 but judged against batch 0's watermark: on time
        (3000, S + 1000, S + 1000),
        (4000, S + 3000, S + 1000),  # no rows, the watermark moved: a no-data batch
    ]
    assert [x.late for x in b] == [0, 0, 0, 0]
    st._check()  # type: ignore[attr-defined]
    assert b[3].rows == () and b[3].fired == ((S, 2),)  # W1 = [S, S+2000) once the watermark reached its end


def test_an_input_without_data_holds_the_min_policy_at_zero_but_not_max() -> None:
    lo = run_compare(lab_scenario_from_dict(_two_inputs("min"))).strategies["spark"]
    hi = run_compare(lab_scenario_from_dict(_two_inputs("max"))).strategies["spark"]
    assert len(lo.inputs) == len(hi.inputs) == 2  # type: ignore[attr-defined]
    assert [x.watermark for x in lo.batches] == [0, 0, 0, 0, S + 3000]  # type: ignore[attr-defined]
    assert [x.watermark for x in hi.batches] == [0, S + 1000, S + 1000, S + 3000, S + 4000]  # type: ignore[attr-defined]


def test_spark_policy_is_min_or_max() -> None:
    d = copy.deepcopy(TINY)
    d["strategies"]["spark_policy"] = "median"
    with pytest.raises(LabScenarioError, match=r"strategies.spark_policy: must be one of min, max"):
        lab_scenario_from_dict(d)


def test_validate_says_an_engine_is_missing_instead_of_failing(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    r = CliRunner().invoke(
        cli, ["validate", "--engine", "flink", "--flink-python", "/nonexistent/python", str(path)]
    )
    assert r.exit_code == 0, r.output
    assert "not run" in r.output and "no Python interpreter at /nonexistent/python" in r.output
    assert "Traceback" not in r.output


def test_validate_refuses_an_unknown_scenario_before_running_anything() -> None:
    r = CliRunner().invoke(cli, ["validate", "--engine", "spark", "no-such-scenario"])
    assert r.exit_code != 0 and "no lab scenario 'no-such-scenario'" in r.output


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["min", "max"])
def test_spark_agrees_with_the_model_on_two_inputs(policy: str, spark: Any) -> None:
    v = validate_spark(run_compare(lab_scenario_from_dict(_two_inputs(policy))), spark)
    assert v.verdict == "exact", v.note
    assert v.wm_equal == v.wm_checked == 5


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(lab_scenarios()))
def test_spark_agrees_with_the_model_on_every_batch_of_a_shipped_scenario(name: str, spark: Any) -> None:
    v = validate_spark(run_compare(load_lab_scenario(name)), spark)
    assert v.verdict == "exact", v.note
    assert v.late_model == v.late_engine and v.windows_model == v.windows_engine


_NO_FLINK = (
    "PyFlink is not installed here: it pins pyarrow < 17, which PySpark 4.3's Arrow path refuses, so "
    "it lives in a venv of its own (ingestwm validate --flink-python PATH)"
    if importlib.util.find_spec("pyflink") is None
    else "no Java runtime for Flink"
    if shutil.which("java") is None
    else None
)

SPARSE = {  # at most one event per watermark emit: the regime of docs/engines.md
    "name": "flink-sparse",
    "duration_ms": 12000,
    "pipeline": {"ordering": True, "window_ms": 2000},
    "stream": {"name": "lab/sparse", "segments": 2},
    "writers": [
        {
            "name": "A",
            "keys": ["k1"],
            "workload": {
                "kind": "schedule",
                "events": [{"at_ms": t, "key": "k1"} for t in range(500, 9000, 1000)],
            },
        },
        {
            "name": "B",
            "keys": ["k0"],
            "workload": {
                "kind": "schedule",
                "events": [{"at_ms": t, "key": "k0"} for t in range(1000, 6000, 1000)],
            },
            "event_time_skew_ms": -1500,
        },
    ],
    "readers": [{"name": "reader"}],
    "strategies": {"flink_bound_ms": 500, "flink_idle_timeout_ms": 2000, "flink_interval_ms": 500},
}


@pytest.mark.slow
@pytest.mark.skipif(_NO_FLINK is not None, reason=_NO_FLINK or "")
def test_flink_agrees_with_the_model_on_late_events_and_windows() -> None:
    v = validate_flink(run_compare(lab_scenario_from_dict(SPARSE)), FlinkTiming(pace_ms=500))
    assert v.engine.startswith("Flink ")
    assert v.wm_checked == 14, v.note  # every event reached Flink's late filter
    assert (v.late_model, v.windows_model) == (v.late_engine, v.windows_engine), v.note
