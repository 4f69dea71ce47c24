"""``ingestwm experiment --master spark://...`` on a real standalone cluster (a master and a worker
started from PySpark's ``spark-class``), with a custom strategy that lives on the driver's path only.

The driver is a process of its own (``PYTHONPATH`` naming the strategy's directory; this
process may hold the suite's local session), running the ``experiment`` command for two
sweeps with one SparkSession; the cluster's executors see what is installed, not that directory.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from spark_fixtures import StandaloneCluster, spark_cluster_fixture  # noqa: F401 (fixture)

from bench.study.run_options import RunOptions
from bench.study.sweep import run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ingestwm_cluster_probe"  # a name nothing installed has

STRATEGY = """
from . import bounds


class Lagged:
    \"\"\"The ingestion-time group watermark minus a lag (PDP-26's rule as a plugin).\"\"\"

    time_domain = "ingestion"

    def __init__(self, lag_ms=1000):
        self.lag_ms = bounds.checked(lag_ms)
        self.group = None

    def on_event(self, event):
        pass

    def on_group_watermark(self, watermark, now_ms):
        self.group = watermark

    def watermark(self, now_ms):
        return None if self.group is None else self.group - self.lag_ms
"""

BASE = {
    "name": "custom-on-cluster",
    "seed": 3,
    "duration_ms": 4000,
    "store": {"max_watermark_lag_ms": 1000, "polling_period_ms": 1000},
    "stream": {"name": "lab/custom", "segments": 1},
    "writers": [
        {
            "name": "A",
            "keys": ["a"],
            "workload": {"kind": "poisson", "rate_per_s": 20},
            "disorder": {"kind": "uniform", "ms": 1500},
        }
    ],
    "readers": [{"name": "reader"}],
    "group": {"max_event_time_lag_ms": 1000},
    "pipeline": {"ordering": True, "window_ms": 1000},
    "strategies": {"tick_ms": 100},
}


def _sweep(where: Path, class_path: str) -> Path:
    """A two-run compare sweep (two lags of the custom strategy, one seed) over ``BASE``."""
    where.mkdir(parents=True, exist_ok=True)
    base = dict(BASE, strategies={"tick_ms": 100, "custom": [{"name": "lagged", "class_path": class_path}]})
    (where / "base.yaml").write_text(yaml.safe_dump(base))
    sweep = {
        "name": "custom-cluster",
        "base": "base.yaml",
        "tool": "compare",
        "seed": 3,
        "replications": 1,
        "grid": {"strategies.custom.0.params.lag_ms": [200, 800]},
        "metrics": ["lagged.late_fraction"],
    }
    (where / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    return where / "sweep.yaml"


DRIVER = """
import json, sys, traceback

import click

from bench.cli import cli
from spark_source.session import local_session

master, runs, report = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
spark = local_session("ingestwm-experiment", master=master)  # what `experiment` creates, made once
codes = []
for args in runs:
    try:
        cli.main(args, prog_name="ingestwm", standalone_mode=False)
        codes.append({"code": 0, "error": None})
    except click.ClickException as e:  # what click prints as `Error: ...` and exits 1 with
        codes.append({"code": e.exit_code, "error": e.format_message()})
    except Exception:  # what would reach the user as a traceback
        codes.append({"code": "traceback", "error": traceback.format_exc()})
spark.stop()
with open(report, "w") as f:
    json.dump(codes, f)
"""
"""The driver: ``ingestwm experiment`` (the click command, as ``ingestwm`` runs it) once per argument
list, in one process whose SparkSession is the cluster's: one driver JVM and one set of executors
for every sweep (``experiment`` uses the session it finds, as ``getOrCreate`` does)."""


@dataclass
class Driven:
    """What the driver process said: per sweep its exit code and error line, and its whole stderr."""

    runs: list[dict[str, Any]]
    stderr: str


def _drive(cluster: StandaloneCluster, runs: list[list[str]], path: list[Path], work: Path) -> Driven:
    """Run ``DRIVER`` with ``path`` (the driver's only) first on its ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_SUBMIT"))}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), str(ROOT)])
    report = work / "driver.json"
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster.master_url, json.dumps(runs), str(report)],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return Driven(json.loads(report.read_text()), p.stderr)


def _package(src: Path) -> None:
    """Package ``PACKAGE`` in ``src``: the strategy in a submodule that imports a sibling."""
    (src / PACKAGE).mkdir(parents=True)
    (src / PACKAGE / "__init__.py").write_text("")
    (src / PACKAGE / "lagged.py").write_text(STRATEGY)
    (src / PACKAGE / "bounds.py").write_text("def checked(v):\n    return int(v)\n")


def _needy(src: Path, helper: Path) -> None:
    """Module ``ingestwm_cluster_needy`` in ``src``, importing ``ingestwm_cluster_helper`` from ``helper``
    (another directory on the driver's path: not part of what is shipped)."""
    src.mkdir(parents=True, exist_ok=True)
    helper.mkdir(parents=True, exist_ok=True)
    code = STRATEGY.replace("from . import bounds\n", "import ingestwm_cluster_helper\n")
    code = code.replace("bounds.checked(lag_ms)", "ingestwm_cluster_helper.checked(lag_ms)")
    (src / "ingestwm_cluster_needy.py").write_text(code)
    (helper / "ingestwm_cluster_helper.py").write_text("def checked(v):\n    return int(v)\n")


@pytest.fixture(scope="module", name="cluster_sweeps")
def cluster_sweeps_fixture(
    spark_cluster: StandaloneCluster, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Driven]:
    """Two sweeps by one driver on the cluster: ``good`` (the strategy in package ``PACKAGE``) and
    ``needy`` (a module importing another driver-only one); their directory and what the driver said."""
    work = tmp_path_factory.mktemp("cluster-sweeps")
    _package(work / "driver-only")
    _needy(work / "driver-only", work / "helper")
    good = _sweep(work / "good", f"{PACKAGE}.lagged:Lagged")
    needy = _sweep(work / "needy", "ingestwm_cluster_needy:Lagged")
    runs = [
        [
            "experiment",
            str(s),
            "--master",
            spark_cluster.master_url,
            "--out",
            str(work / f"{s.parent.name}-out"),
        ]
        for s in (good, needy)
    ]
    return work, _drive(spark_cluster, runs, [work / "driver-only", work / "helper"], work)


def _rows(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_sweep_with_a_driver_only_strategy_runs_on_the_cluster_as_it_runs_locally(
    spark_cluster: StandaloneCluster, cluster_sweeps: tuple[Path, Driven], monkeypatch: pytest.MonkeyPatch
) -> None:
    work, driven = cluster_sweeps
    assert driven.runs[0] == {"code": 0, "error": None}, driven.stderr
    assert "Traceback" not in driven.stderr
    # the same sweep in this process's local executor, the package on this process's path
    monkeypatch.syspath_prepend(str(work / "driver-only"))
    try:
        local = run_experiment(
            str(work / "good" / "sweep.yaml"),
            out=work / "good-local",
            options=RunOptions(echo=lambda _: None, jobs=1, progress=False),
        )
    finally:
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]
    assert len(local) == 2
    on_spark, here = _rows(work / "good-out" / "runs.csv"), _rows(work / "good-local" / "runs.csv")
    assert on_spark == here
    # the strategy's param reached it on the executors: its two lags give two late fractions
    assert len({row["lagged.late_fraction"] for row in on_spark}) == 2
    apps = spark_cluster.state()["completedapps"]
    assert any(a["name"] == "ingestwm-experiment" for a in apps), apps  # it ran on this cluster


def test_a_strategy_that_cannot_import_on_the_executors_is_one_line(
    cluster_sweeps: tuple[Path, Driven],
) -> None:
    """Shipped, but it imports a module that is on the driver's path only (not part of what is shipped)."""
    _, driven = cluster_sweeps
    failed = driven.runs[1]
    assert failed["code"] == 1, driven.stderr
    assert "Traceback" not in driven.stderr, driven.stderr
    error = failed["error"]
    assert "\n" not in error and error.startswith("on Spark executor "), error
    assert (
        "strategies.custom.0.class_path: cannot import module 'ingestwm_cluster_needy': "
        "No module named 'ingestwm_cluster_helper'"
    ) in error
    assert error.endswith("or from what is installed on every worker; docs/strategies.md)"), error
