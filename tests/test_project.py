"""The project's set-up contract: README commands, CI script, and a cheap package import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _readme_commands() -> list[str]:
    """The README's set-up commands: its ``sh`` blocks that make a virtual environment.

    Its other ``sh`` blocks are examples, run by ``tests/test_docs.py``.
    """
    blocks = _FENCE.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    return [b.strip() for b in blocks if b.startswith("python3 -m venv")]


def _script_commands(path: Path) -> list[str]:
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_readme_has_exactly_two_single_line_set_up_commands() -> None:
    commands = _readme_commands()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count("python3 -m venv") == len(commands), "a set-up command outside its own sh block"
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands), commands
    main, tests = commands
    assert "ingestwm" in main and "pytest" not in main
    assert "pytest" in tests and "[test,flink]" in tests  # CI runs the Flink checks too
    assert all(c.startswith("python3 -m venv") for c in commands)


def test_ci_runs_exactly_the_readme_test_command_and_fails_with_it() -> None:
    ci = ROOT / ".ci" / "run"
    assert ci.stat().st_mode & 0o111, ".ci/run is not executable"
    commands = _script_commands(ci)
    test_command = _readme_commands()[1]
    assert commands.count(test_command) == 1
    # its exit status is the script's: it is the last command, and errors stop the script
    assert commands[-1] == test_command
    assert any(c.startswith("set -") and "e" in c.split()[1] for c in commands)
    pytest_runs = [c for c in commands if "pytest" in c]
    assert pytest_runs == [test_command]


def test_importing_segmentstore_does_not_import_numba() -> None:
    code = "import segmentstore, sys; assert 'numba' not in sys.modules, 'numba imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_every_package_and_data_file_ships_in_the_wheel() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("segmentstore", "readergroup", "flink_compat", "spark_source", "bench")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk <= listed, f"packages missing from pyproject: {sorted(on_disk - listed)}"
    for top in ("bench", "readergroup"):  # shipped scenarios; shipped watermark transcripts
        patterns = config["package-data"][top]
        folders = {str(p.parent.relative_to(ROOT / top)) for p in (ROOT / top).rglob("*.yaml")}
        assert folders, f"no YAML files in {top}/"
        for folder in folders:
            assert f"{folder}/*.yaml" in patterns, f"{top}/{folder}/*.yaml is not in the package data"
