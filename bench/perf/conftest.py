"""pytest-benchmark over ``bench/perf``: collects the ``test_*`` functions of every ``bench_*.py`` module.

``pytest bench/perf --benchmark-only`` runs them (outside the test suite: ``testpaths``
is ``tests``). Options: ``--bench-size tiny|quick|full`` (default ``quick``) is the size
the tests build their data at (the ``bench_size`` fixture); ``--bench-slow`` also runs
the modules marked ``SLOW`` (Spark: minutes), which are skipped otherwise. See
``bench/perf/__init__.py`` for saving, comparing and the regression threshold.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .suite import SIZES, Size

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_collect_file",
    "pytest_collection_modifyitems",
    "bench_size",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ingestwm benchmarks")
    group.addoption(
        "--bench-size", choices=SIZES, default="quick", help="data size of the benchmarks (default quick)"
    )
    group.addoption("--bench-slow", action="store_true", help="also run the SLOW benchmark modules (Spark)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a SLOW benchmark module (Spark): run with --bench-slow")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect ``bench_*.py`` like test files (``test_*.py`` and files named as arguments are anyway)."""
    if parent.session.isinitpath(file_path):
        return None
    if file_path.suffix == ".py" and file_path.name.startswith("bench_"):
        module: pytest.Module = pytest.Module.from_parent(parent, path=file_path)
        return module
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of ``SLOW`` modules ``slow``; skip ``slow`` ones unless ``--bench-slow``.

    ``slow`` ones run without pytest-timeout's limit: a whole Spark run at full size may
    take longer than the test suite's ``timeout``.
    """
    skip = pytest.mark.skip(reason="a SLOW benchmark module (minutes): run with --bench-slow")
    no_limit = config.pluginmanager.hasplugin("timeout")
    for item in items:
        if getattr(getattr(item, "module", None), "SLOW", False):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is None:
            continue
        if not config.getoption("--bench-slow"):
            item.add_marker(skip)
        elif no_limit:
            item.add_marker(pytest.mark.timeout(0))


@pytest.fixture
def bench_size(request: pytest.FixtureRequest) -> Size:
    """The ``--bench-size`` the benchmarks build their data at."""
    size: Size = request.config.getoption("--bench-size")
    return size
