"""What a Spark sweep ships of its custom strategies: driver-only source, zipped; nothing installed;
a compiled module refused on the driver, before Spark starts (the cluster run: test_spark_cluster.py)."""

from __future__ import annotations

import importlib.machinery
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from test_lab_plugins import _tiny  # the lab's tiny scenario with these custom strategies

from bench.spec.errors import ScenarioError
from bench.study.experiment import _executor_error, _spark_task, execute
from bench.study.run_options import RunOptions
from bench.study.strategy_shipping import ship_plan, write_archive

STRATEGY = """
class Lagged:
    def __init__(self, lag_ms=0):
        self.lag_ms = lag_ms
    def on_event(self, event):
        pass
    def watermark(self, now_ms):
        return None
"""


def _task(*custom: tuple[str, str]) -> dict[str, Any]:
    """A task whose scenario names these ``(name, class_path)`` custom strategies (all the planner reads)."""
    strategies = {"custom": [{"name": n, "class_path": c} for n, c in custom]}
    return {"tool": "compare", "seed": 1, "scenario": {"duration_ms": 1000, "strategies": strategies}}


def _unzipped(archive: Path) -> list[str]:
    with zipfile.ZipFile(archive) as z:
        return sorted(z.namelist())


def test_installed_and_ingestwm_modules_are_not_shipped() -> None:
    tasks = [
        _task(("pct", "bench.lab.strategies_contrib:PercentileDelayStrategy")),
        _task(("stdlib", "json:JSONDecoder"), ("lib", "yaml:SafeLoader")),
    ]
    assert ship_plan(tasks) == ()


def test_a_package_on_the_drivers_path_only_is_zipped_whole_and_imports_from_the_zip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    pkg = src / "shipprobe_pkg"
    (pkg / "inner" / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "inner" / "strat.py").write_text(STRATEGY)
    (pkg / "inner" / "__pycache__" / "strat.cpython-311.pyc").write_bytes(b"stale")
    (pkg / "helper.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(src))
    tasks = [_task(("a", "shipprobe_pkg.inner.strat:Lagged")), _task(("b", "shipprobe_pkg.helper:X"))]
    (plan,) = ship_plan(tasks)
    assert plan.module == "shipprobe_pkg" and plan.package and plan.sources == (pkg,)
    assert plan.strategies == ("'a' (shipprobe_pkg.inner.strat:Lagged)", "'b' (shipprobe_pkg.helper:X)")
    archive = write_archive(plan, tmp_path)
    assert _unzipped(archive) == [
        "shipprobe_pkg/__init__.py",
        "shipprobe_pkg/helper.py",
        "shipprobe_pkg/inner/__init__.py",
        "shipprobe_pkg/inner/strat.py",
    ]
    probe = "import shipprobe_pkg.inner.strat as m; print(m.Lagged(lag_ms=7).lag_ms, m.__file__)"
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(archive)!r}); {probe}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert out[0] == "7" and out[1].startswith(str(archive))


def test_a_single_module_is_shipped_as_itself_and_a_changed_one_is_a_new_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "shipprobe_mod.py").write_text(STRATEGY)
    monkeypatch.syspath_prepend(str(src))
    (plan,) = ship_plan([_task(("m", "shipprobe_mod:Lagged"))])
    assert not plan.package and plan.sources == (src / "shipprobe_mod.py",)
    first = write_archive(plan, tmp_path)
    assert _unzipped(first) == ["shipprobe_mod.py"]
    assert write_archive(plan, tmp_path) == first  # same code, same file: Spark adds a path once
    (src / "shipprobe_mod.py").write_text(STRATEGY + "\nVERSION = 2\n")
    assert write_archive(plan, tmp_path) != first


def test_a_compiled_module_on_the_drivers_path_only_is_refused_naming_the_strategy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / f"shipprobe_fast{suffix}").write_bytes(b"\x7fELF")
    (tmp_path / "shipprobe_mixed").mkdir()
    (tmp_path / "shipprobe_mixed" / "__init__.py").write_text("")
    (tmp_path / "shipprobe_mixed" / f"_speedups{suffix}").write_bytes(b"\x7fELF")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScenarioError) as e:
        ship_plan([_task(("ok", "bench.lab.strategies_contrib:X"), ("fast", "shipprobe_fast:Cls"))])
    msg = str(e.value)
    assert msg.startswith(
        "strategies.custom.1.class_path: custom strategy 'fast' (shipprobe_fast:Cls) cannot reach the "
        "Spark executors: module 'shipprobe_fast' is a compiled extension"
    )
    assert "install it on every worker" in msg and "\n" not in msg
    with pytest.raises(ScenarioError, match=r"custom\.0\.class_path: custom strategy 'mx' .*compiled ext"):
        ship_plan([_task(("mx", "shipprobe_mixed:Cls"))])


def test_a_spark_sweep_refuses_an_unshippable_strategy_before_spark_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / f"shipprobe_native{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"\x7fELF")
    monkeypatch.syspath_prepend(str(tmp_path))

    def no_spark(*_a: object, **_k: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr("spark_source.session.local_session", no_spark)
    with pytest.raises(ScenarioError, match=r"custom strategy 'n' \(shipprobe_native:Cls\) cannot reach"):
        execute(
            [_task(("n", "shipprobe_native:Cls"))], RunOptions(executor="spark", master="spark://127.0.0.1:1")
        )


def test_a_run_failing_on_an_executor_comes_back_as_data_and_becomes_one_line() -> None:
    """What a Spark task returns when the module does not import there (no retry, no traceback)."""
    task = {
        "tool": "compare",
        "point": 1,
        "seed": 4,
        "scenario": _tiny({"name": "gone", "class_path": "shipprobe_nowhere:Cls"}),
    }
    out = _spark_task(task)
    assert set(out) == {"failed"}
    line = str(_executor_error(out["failed"]))
    assert line.startswith("on Spark executor ") and "(point 1, seed 4): " in line and "\n" not in line
    assert "strategies.custom.0.class_path: cannot import module 'shipprobe_nowhere'" in line
    assert line.endswith("installed on every worker; docs/strategies.md)")
