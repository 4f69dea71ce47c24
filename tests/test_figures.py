"""Figures a paper can use: PNG/SVG/PDF from simulate and compare, reproducible, labelled; p95/p99."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_lab import TINY

from bench.cli import cli
from bench.lab import lab_scenario_from_dict, run_compare
from bench.study import figures, format_table, write_outputs

SCALING = [
    "--set",
    "duration_ms=9000",
    "--set",
    "scaling.every_ms=3000",
    "--set",
    "scaling.stop_ms=7000",
    "--set",
    "writers.w.workload.rate_per_s=50",
]


def _svg_text(path: Path) -> str:
    root = ET.parse(path).getroot()  # raises if the SVG is not well-formed XML
    assert root.tag.endswith("svg")
    return " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))


def _valid_pdf(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF") and b"/Page" in data


def test_simulate_writes_svg_figures_with_units_and_labelled_scaling(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        cli, ["simulate", "scale-storm", *SCALING, "--format", "svg", "--out", str(tmp_path / "svg")]
    )
    assert r.exit_code == 0, r.output
    assert "watermarks.svg, lateness.svg" in r.output
    assert not list((tmp_path / "svg").glob("*.png"))
    text = _svg_text(tmp_path / "svg" / "watermarks.svg")
    for label in ("simulated time (s)", "time since start (s)", "group watermark lag (ms)"):
        assert label in text
    assert text.count("scale 2\u21924") == 2 and text.count("scale 4\u21922") == 2  # splits, merges
    svg = (tmp_path / "svg" / "watermarks.svg").read_text().lower()
    assert figures.OKABE_ITO[3].lower() in svg and "tab:blue" not in svg and "#1f77b4" not in svg
    assert "events (count)" in _svg_text(tmp_path / "svg" / "lateness.svg")


def test_a_bad_format_is_refused_before_anything_runs(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["simulate", "idle-tail", "--format", "jpg", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "'jpg' is not one of 'png', 'svg', 'pdf'" in r.output
    assert not (tmp_path / "x").exists()
    r = CliRunner().invoke(cli, ["compare", "iot-sensors", "--format", "gif"])
    assert r.exit_code != 0 and "'gif' is not one of" in r.output
    result = run_compare(lab_scenario_from_dict(TINY))
    with pytest.raises(ValueError, match="figure format must be one of png, svg, pdf, got 'eps'"):
        write_outputs(result, tmp_path / "y", fmt="eps")
    assert not (tmp_path / "y").exists()


def test_compare_figures_in_every_format_are_reproducible(tmp_path: Path) -> None:
    result = run_compare(lab_scenario_from_dict({**TINY, "scaling": {"every_ms": 2000, "mode": "shift"}}))
    for fmt in ("svg", "pdf"):  # PNG: test_sim_determinism
        a = write_outputs(result, tmp_path / "a", fmt=fmt)[-1]
        b = write_outputs(result, tmp_path / "b", fmt=fmt)[-1]
        assert a.name == f"compare.{fmt}" and a.read_bytes() == b.read_bytes(), fmt
    _valid_pdf(tmp_path / "a" / "compare.pdf")
    text = _svg_text(tmp_path / "a" / "compare.svg")
    for label in ("watermark lag (s)", "events held (count)", "result latency (s)", "time since start (s)"):
        assert label in text
    assert text.count("scale") >= 2  # t = 2, 4 s (the run ends at 6 s)
    for name in ("p50", "p95", "p99", "max", "ingestion", "spark"):
        assert name in text


def test_the_lab_reports_p50_p95_p99_result_latency() -> None:
    result = run_compare(lab_scenario_from_dict(TINY))
    head = format_table(result).splitlines()[1]
    assert "result p50 ms" in head and "p95 ms" in head and "p99 ms" in head
    flink = result.row("flink")  # one window fired, 1000 ms after its end (test_lab's hand computation)
    assert flink["result_latency_p95_ms"] == flink["result_latency_p99_ms"] == 1000
    latencies = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190]
    from bench.lab.compare import _percentile

    # nearest rank: the ceil(q * n)-th smallest
    assert (_percentile(latencies, 0.5), _percentile(latencies, 0.95), _percentile(latencies, 0.99)) == (
        90,
        180,
        190,
    )


def test_palette_and_styles() -> None:
    assert len(set(figures.OKABE_ITO)) == 8
    assert [figures.colour(i) for i in (0, 8)] == [figures.OKABE_ITO[0]] * 2
    assert figures.linestyle(0) == "-" and figures.linestyle(8) == "--"
