"""The ``ingestwm`` CLI: --help everywhere, one-line errors with a non-zero exit, and each command."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import spark_fixture  # noqa: F401 (fixture)

from bench.cli import main
from bench.perf.errors import BenchmarkError
from bench.perf.suite import format_table, run_bench

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ["demo", "simulate", "bench", "experiment", "tune", "serve"]


@pytest.mark.parametrize("args", [["--help"], *([c, "--help"] for c in COMMANDS)])
def test_help_everywhere(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 0
    assert "Usage:" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["simulate", "no-such-scenario"], "unknown scenario 'no-such-scenario'"),
        (["simulate", "idle-tail", "--set", "store.nope=1"], "store.nope: unknown field"),
        (
            ["simulate", "idle-tail", "--set", "store.polling_period_ms=fast"],
            "store.polling_period_ms: must be an int",
        ),
        (["simulate", "idle-tail", "--set", "oops"], "not key=value"),
        (["experiment", "no-such-sweep"], "unknown sweep 'no-such-sweep'"),
    ],
)
def test_bad_input_exits_non_zero_with_one_line(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert words in err[0]


def test_an_unwritable_output_dir_is_one_line_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["simulate", "idle-tail", "--out", str(blocker / "sub")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not writable" in err[0]
    assert main(["demo", "--out", str(blocker)]) != 0
    assert "not writable" in capsys.readouterr().err


def test_the_console_script_prints_no_traceback_on_bad_input() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli", "simulate", "idle-tail", "--set", "writers.nobody.tick_ms=1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == "Error: writers.nobody: no item named 'nobody' (items: w)"


@pytest.mark.slow
@pytest.mark.xdist_group("spark")  # Spark in this process: the Spark tests' worker
def test_demo_reports_watermarks_lateness_and_where_the_plots_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # the Spark part: the same stream through format("ingestwm"); every late row is sensor C's
    spark = out[out.index("The same stream through Spark") :]
    assert "late readings: 30 " in spark and "... and 24 more from sensor-C" in spark
    late_lines = [ln for ln in spark.splitlines() if "late by" in ln]
    assert len(late_lines) == 6 and all("sensor-C" in ln for ln in late_lines)
    window_rows = [
        ln.split() for ln in spark.splitlines() if ln.strip().startswith("sensor-") and "late" not in ln
    ]
    assert {r[0] for r in window_rows} == {"sensor-A", "sensor-B"}
    assert sum(int(r[-1]) for r in window_rows) == 60  # every A and B reading lands in a window
    assert "Watermark progression" in out
    assert "A: 30/30 delivered; 30 emitted in event-time order; 0 discarded as late" in out
    assert "B: 30/30 delivered; 30 emitted in event-time order; 0 discarded as late" in out
    assert "C: 30/30 delivered; 0 emitted in event-time order; 30 discarded as late" in out
    assert "Why late:" in out and str(tmp_path) in out
    for name in ("summary.json", "series.csv", "events.csv", "watermarks.png", "lateness.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_simulate_writes_summary_series_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "simulate",
            "noack-stall",
            "--set",
            "duration_ms=6000",
            "--set",
            "readers.r-stuck.noack.start_ms=2000",
            "--set",
            "readers.r-stuck.noack.end_ms=4000",
            "--set",
            "metrics.parquet=true",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "watermark stalled, then resumed" in out
    with (tmp_path / "series.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6000 // 250 + 1
    for name in ("summary.json", "segments.csv", "series.parquet", "watermarks.png", "lateness.png"):
        assert (tmp_path / name).exists()


def test_bench_refuses_an_unknown_module_and_prints_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BenchmarkError, match="no benchmark module 'bench_missing'"):
        run_bench("tiny", print, modules=["bench_missing"])
    assert main(["bench", "--tiny", "--only", "bench_missing"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no benchmark module 'bench_missing' in bench/perf" in err[0]
    table = format_table(
        [{"module": "m", "name": "x", "value": 1234567.0, "unit": "ev/s", "ratio_vs": "goal", "ratio": 1.5}]
    )
    assert table[0].split() == ["module", "benchmark", "value", "unit", "ratio", "ratio", "of"]
    assert table[2].split() == ["m", "x", "1.235e+06", "ev/s", "1.50x", "goal"]


@pytest.mark.slow
def test_experiment_runs_a_two_point_grid_on_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark: Any
) -> None:
    """On the caller's SparkSession when there is one (a notebook's), which it leaves running."""
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(
        "name: tiny\nbase: idle-tail\nseed: 2\n"
        "set: [duration_ms=6000, writers.w.stop_ms=2000, writers.w.count=2]\n"
        "grid:\n  store.polling_period_ms: [250, 1000]\n"
    )
    out = tmp_path / "out"
    assert main(["experiment", str(sweep), "--master", "local[2]", "--out", str(out)]) == 0
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["store.polling_period_ms"] for r in rows] == ["250", "1000"]
    for r in rows:
        bound = 2000 + int(r["store.polling_period_ms"])
        assert int(r["idle_lag_max_ms"]) <= bound
        assert r["events_written"] == r["events_delivered"] != "0"
    assert (out / "sweep.png").stat().st_size > 0 and (out / "sweep.json").exists()
    assert spark.range(3).count() == 3  # the session it was given still runs (it used to stop it)


def test_a_negative_seed_is_a_usage_error_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    """``--seed -1`` was a numpy traceback from deep in the simulator; a YAML seed of -1 too."""
    assert main(["simulate", "idle-tail", "--seed", "-1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "'--seed'" in err and "-1 is not in the range x>=0" in err
    assert main(["simulate", "idle-tail", "--set", "seed=-1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed" in err[0] and "must be >= 0" in err[0]


class _Module:
    def __init__(self, run: Any) -> None:
        self.run = run


def test_a_failing_benchmark_is_one_line_the_others_run_and_the_exit_is_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench.perf.suite as suite

    def boom(size: str) -> list[dict[str, Any]]:
        raise RuntimeError("the query q failed: Job aborted\n\tat org.apache.spark.SparkException(...)")

    def fine(size: str) -> list[dict[str, Any]]:
        return [suite.row("x per second", 10.0, "1/s")]

    fakes = {"bench_store": _Module(boom), "bench_index": _Module(fine)}
    monkeypatch.setattr(suite, "load", lambda name: fakes[name])
    assert main(["bench", "--tiny", "--only", "bench_store", "--only", "bench_index"]) == 1
    captured = capsys.readouterr()
    assert "bench_store FAILED: RuntimeError: the query q failed: Job aborted" in captured.out
    assert "org.apache" not in captured.out + captured.err and "Traceback" not in captured.err
    assert any(ln.startswith("bench_index") and "x per second" in ln for ln in captured.out.splitlines())
    assert captured.err.strip() == "Error: 1 of 2 benchmark modules failed: bench_store"


def _no_java_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PATH")}
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return {**env, "PATH": str(empty), "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.parametrize("where", ["path", "java_home", "broken_java"])
def test_demo_without_java_is_one_line_naming_what_was_looked_for(where: str, tmp_path: Path) -> None:
    """No Java (nothing on PATH, JAVA_HOME pointing nowhere, a java that fails): one line, no traceback."""
    extra: dict[str, str] = {}
    if where == "java_home":
        extra["JAVA_HOME"] = str(tmp_path / "no-jdk")
    if where == "broken_java":
        home = tmp_path / "jdk"
        (home / "bin").mkdir(parents=True)
        java = home / "bin" / "java"
        java.write_text("#!/bin/sh\necho 'Error: could not create the Java Virtual Machine.' >&2\nexit 1\n")
        java.chmod(0o755)
        extra["JAVA_HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli", "demo", "--out", str(tmp_path / "out")],
        cwd=ROOT,
        env=_no_java_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in done.stderr, done.stderr
    assert err[0].startswith("Error: ") and "--no-spark" in err[0] and "JAVA_HOME" in err[0]
    looked_for = {
        "path": str(tmp_path / "empty-bin"),
        "java_home": str(tmp_path / "no-jdk"),
        "broken_java": "could not create the Java Virtual Machine",
    }
    assert looked_for[where] in err[0]
    assert not (tmp_path / "out").exists()  # failed before the simulation ran


def test_check_java_finds_a_working_java_and_refuses_a_slow_one(tmp_path: Path) -> None:
    from spark_source.errors import JavaUnavailableError
    from spark_source.session import check_java

    fake = tmp_path / "bin"
    fake.mkdir()
    java = fake / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"17.0.9\" 2023-10-17' >&2\n")
    java.chmod(0o755)
    assert check_java({"PATH": str(fake)}) == str(java)
    old = tmp_path / "old" / "bin"
    old.mkdir(parents=True)
    (old / "java").write_text("#!/bin/sh\necho 'java version \"1.8.0_392\"' >&2\n")
    (old / "java").chmod(0o755)
    with pytest.raises(JavaUnavailableError, match=r"Java 8 at .*Spark needs Java 17 or later"):
        check_java({"JAVA_HOME": str(old.parent), "PATH": str(fake)})
    slow = tmp_path / "slow" / "bin"
    slow.mkdir(parents=True)
    (slow / "java").write_text("#!/bin/sh\nsleep 5\n")
    (slow / "java").chmod(0o755)
    with pytest.raises(JavaUnavailableError, match=r"did not answer in 0.5 s .*--no-spark"):
        check_java({"JAVA_HOME": str(slow.parent)}, timeout_s=0.5)


@pytest.mark.slow
def test_bench_spark_prints_its_table_and_no_spark_noise(tmp_path: Path) -> None:
    """``ingestwm bench --tiny --only bench_spark`` printed pages of killed tasks and broken pipes."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli", "bench", "--tiny", "--only", "bench_spark"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    out = done.stdout + done.stderr
    for noise in ("TaskKilledException", "Traceback", "StackOverflowError", "BrokenPipeError", "EOFError"):
        assert noise not in out, out[-4000:]
    assert "Setting default log level" not in out and " ERROR " not in out
    assert sum(ln.startswith("bench_spark ") for ln in done.stdout.splitlines()) >= 10
