"""pytest-benchmark of the ``bench_*`` modules without ``test_*`` functions of their own: ``run(size)`` once.

A module that only has ``run(size)`` (Spark's, which measure Spark's own per-micro-batch
rates, or a new one) is still in the pytest-benchmark run: its whole run is timed once
(it measures side by side and keeps the best of its own rounds inside), and its rows —
the side-by-side figures — go into the saved JSON as ``extra_info["rows"]``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from .suite import Size, check_rows, discover, load

__all__ = ["test_run", "runs_whole"]


def runs_whole(mod: ModuleType) -> bool:
    """Whether ``test_run`` runs the module's ``run``: it has no ``test_*`` functions of its own."""
    return not any(n.startswith("test") and callable(getattr(mod, n)) for n in vars(mod))


def _without_own_tests() -> list[Any]:
    out = []
    for name in discover():
        mod = load(name)  # an import error fails the collection: the benchmark run fails, as it should
        if not runs_whole(mod):
            continue
        marks = [pytest.mark.slow] if getattr(mod, "SLOW", False) else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("name", _without_own_tests())
def test_run(name: str, benchmark: Any, bench_size: Size) -> None:
    rows = benchmark.pedantic(load(name).run, args=(bench_size,), rounds=1, iterations=1)
    benchmark.extra_info["rows"] = check_rows(name, rows)
