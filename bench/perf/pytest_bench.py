"""``ingestwm bench --pytest``: the pytest-benchmark run over ``bench/perf``, saved and compared.

Each run is saved as JSON under ``.benchmarks/<size>/`` (in the working directory; one
folder per size, so that runs compare like with like). If an earlier run is there, this
one is compared with the latest and fails when a benchmark regressed by more than
``REGRESSION`` (pytest-benchmark's ``--benchmark-compare-fail``); the first run is the
baseline. Equivalent to::

    pytest bench/perf --benchmark-only --bench-size quick \\
        --benchmark-storage file://.benchmarks/quick --benchmark-autosave \\
        --benchmark-compare --benchmark-compare-fail=min:25%
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from . import REGRESSION
from .suite import Size, check_names

__all__ = ["STORAGE", "storage_dir", "has_saved_run", "pytest_command", "run_pytest"]

STORAGE = Path(".benchmarks")
_PERF_DIR = Path(__file__).resolve().parent


def storage_dir(size: Size, root: Path = STORAGE) -> Path:
    """Where the runs at ``size`` are saved: ``<root>/<size>``."""
    return root / size


def has_saved_run(storage: Path) -> bool:
    """Whether pytest-benchmark saved a run in ``storage`` (``<machine id>/<nnnn>_*.json``)."""
    return any(storage.glob("*/*.json"))


def pytest_command(
    size: Size,
    modules: Sequence[str] = (),
    storage: Path | None = None,
    compare: bool = False,
    slow: bool = False,
) -> list[str]:
    """The ``python -m pytest`` command line of a saved (and, with ``compare``, compared) benchmark run."""
    check_names(modules)
    storage = storage if storage is not None else storage_dir(size)
    targets = [str(_PERF_DIR / f"{m}.py") for m in modules] or [str(_PERF_DIR)]
    cmd = [
        sys.executable, "-m", "pytest", *targets, "-p", "no:cacheprovider",
        "--benchmark-only", f"--bench-size={size}",
        f"--benchmark-storage=file://{storage}", "--benchmark-autosave",
    ]  # fmt: skip
    if compare:
        cmd += ["--benchmark-compare", f"--benchmark-compare-fail={REGRESSION}"]
    if slow:
        cmd.append("--bench-slow")
    return cmd


def run_pytest(
    size: Size,
    modules: Sequence[str] = (),
    echo: Callable[[str], None] = print,
    root: Path = STORAGE,
    slow: bool = False,
) -> int:
    """Run the benchmarks under pytest-benchmark, save, compare with the last run; pytest's exit status."""
    storage = storage_dir(size, root)
    compare = has_saved_run(storage)
    cmd = pytest_command(size, modules, storage, compare, slow)
    if compare:
        echo(f"comparing with the last run in {storage}/ (fails if a benchmark is {REGRESSION} slower)")
    else:
        echo(f"no earlier run in {storage}/: this run is the baseline")
    echo(" ".join(cmd))
    return subprocess.call(cmd)
