"""No output holds a sentinel: every number a shipped scenario writes is a real time, duration or count.

The store and the operators keep "no watermark yet" as ``INT64_MIN`` and ``+inf`` as
``INT64_MAX`` (``bench.sim.sentinels``); outputs write both as no value (an empty CSV
cell, JSON ``null``) and leave them out of lags and means (docs/metrics.md). Here every
shipped scenario runs, shortened, through ``simulate`` and (with ``strategies:``)
``compare``, and every file they write — CSV, JSON, the manifest — is read back: no number
may be near the int64 range, a time (a watermark, a clock reading) must lie within a day of
the run, and a lag or latency must be shorter than the run plus a day. A scaling scenario
with stages, where Flink's union reaches ``+inf``, is added: the stage lags came out as
``-8e18`` there.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bench.cli import cli
from bench.lab import lab_scenarios
from bench.sim.sentinels import REAL_LIMIT
from bench.spec import shipped_scenarios
from bench.spec.scenario import scenario_path

DAY_MS = 86_400_000
SHORT_MS = 6000
TIMES = {
    "time_ms",
    "start_time_ms",
    "watermark",
    "group_watermark",
    "event_time_watermark",
    "final_group_watermark",
    "watermark_settled",
    "watermark_before_end",
    "watermark_final",
    "output_frontier",
    "event_time",
    "ingestion_time",
}
"""Fields that hold a time (ms since the epoch): within a day of the run."""


def _kind(key: str) -> str:
    if key in TIMES:
        return "time"
    if "lag" in key or "latency" in key:
        return "duration"
    return "number"


class Scan:
    """What is wrong with the numbers of one run's files (``problems``), given the run's span."""

    def __init__(self, start_ms: int, duration_ms: int) -> None:
        self.start, self.duration = start_ms, duration_ms
        self.problems: list[str] = []
        self.numbers = 0

    def value(self, where: str, key: str, v: Any) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return
        self.numbers += 1
        kind = _kind(key)
        if not math.isfinite(v) or abs(v) >= REAL_LIMIT:
            self.problems.append(f"{where}: {key} = {v} is not a real value")
        elif kind == "time" and not self.start - DAY_MS <= v <= self.start + self.duration + DAY_MS:
            self.problems.append(f"{where}: {key} = {v} is outside the run's time span")
        elif kind == "duration" and abs(v) > self.duration + DAY_MS:
            self.problems.append(f"{where}: {key} = {v} is longer than the run")

    def json_doc(self, where: str, doc: Any, key: str = "") -> None:
        if isinstance(doc, dict):
            for k, v in doc.items():
                self.json_doc(f"{where}.{k}", v, str(k))
        elif isinstance(doc, list):
            if ".series." in where and len(doc) == 4 and not any(isinstance(x, (list, dict)) for x in doc):
                # a compare.json sample: [t_ms, watermark, buffered events, buffered bytes]
                for k, v in zip(("t_ms", "watermark", "buffered_events", "buffered_bytes"), doc, strict=True):
                    self.value(where, k, v)
                return
            for i, v in enumerate(doc):
                self.json_doc(f"{where}[{i}]", v, key)
        else:
            self.value(where, key, doc)

    def file(self, path: Path) -> None:
        if path.suffix == ".json":
            text = path.read_text(encoding="utf-8")

            def refuse(c: str) -> None:
                self.problems.append(f"{path.name}: {c} (not JSON)")

            self.json_doc(path.name, json.loads(text, parse_constant=refuse))
        elif path.suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as f:
                rows = csv.reader(f)
                head = next(rows)
                for n, row in enumerate(rows, 2):
                    for key, cell in zip(head, row, strict=True):
                        if cell == "":
                            continue
                        try:
                            v = float(cell) if any(c in cell for c in ".eEinfa") else int(cell)
                        except ValueError:
                            continue
                        self.value(f"{path.name}:{n}", key, v)


def _short(name: str, tmp: Path, **extra: Any) -> tuple[Path, dict[str, Any]]:
    data = yaml.safe_load(scenario_path(name).read_text(encoding="utf-8"))
    data["duration_ms"] = min(int(data["duration_ms"]), SHORT_MS)
    data.setdefault("metrics", {})["plots"] = False
    data["replications"] = 1
    data.update(extra)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path, data


def _scan_run(args: list[str], out: Path, data: dict[str, Any]) -> Scan:
    r = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    scan = Scan(int(data.get("start_time_ms", 1_700_000_000_000)), int(data["duration_ms"]))
    for f in sorted(out.rglob("*")):
        if f.is_file():
            scan.file(f)
    if "∞" in r.output:  # a table may say +inf, as a symbol: never as a number
        assert "9223372036854775807" not in r.output
    return scan


@pytest.mark.parametrize("name", shipped_scenarios())
def test_every_output_of_a_shipped_scenario_holds_real_values(name: str, tmp_path: Path) -> None:
    path, data = _short(name, tmp_path)
    scans = [_scan_run(["simulate", str(path)], tmp_path / "sim", data)]
    if name in lab_scenarios():
        scans.append(_scan_run(["compare", str(path), "--no-plot"], tmp_path / "cmp", data))
    for scan in scans:
        assert scan.numbers > 0
        assert scan.problems == []


def test_a_scaling_pipeline_whose_flink_watermark_ends_writes_no_sentinel(tmp_path: Path) -> None:
    """Splits and merges with stages: Flink's union of per-segment sources (``segment_union``) reaches
    +inf at a scale; its stage lags have no value then."""
    path, data = _short(
        "pipeline-stages",
        tmp_path,
        scaling={"every_ms": 3000, "mode": "split_merge"},
        strategies={
            "tick_ms": 100,
            "flink_bound_ms": 1000,
            "flink_idle_timeout_ms": 5000,
            "flink_source": "segment_union",  # the reader topology never ends event time
        },
    )
    scan = _scan_run(["compare", str(path), "--no-plot"], tmp_path / "cmp", data)
    assert scan.problems == []
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert "flink" in doc["watermark_end_of_time_ms"]  # the case this test is for happened
    ended = doc["watermark_end_of_time_ms"]["flink"]
    assert all(wm is None for t, wm, _, _ in doc["series"]["flink"] if t >= ended)
    reps = _scan_run(["compare", str(path), "-n", "2", "-j", "1", "--no-plot"], tmp_path / "reps", data)
    assert (tmp_path / "reps" / "replications.json").is_file() and reps.problems == []
