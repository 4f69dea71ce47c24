"""``ingestwm bench``: run every ``bench/bench_*.py`` module's ``run(quick)`` and print one table.

Each module measures its figures side by side in one run and returns rows
``{"name", "value", "unit", "ratio_vs", "ratio"}``; this runner only collects and prints
them. A module whose imports fail (a missing optional dependency) is skipped with a
note naming the missing module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Row", "row", "discover", "run_bench", "format_table", "module_main"]

Row = dict[str, Any]
"""One benchmark figure: ``name``, ``value``, ``unit`` and what ``ratio`` compares it with (``ratio_vs``)."""


def row(name: str, value: float, unit: str, ratio_vs: str | None = None, ratio: float | None = None) -> Row:
    """A result row as every ``bench_*`` module returns it."""
    return {"name": name, "value": value, "unit": unit, "ratio_vs": ratio_vs, "ratio": ratio}


def module_main(
    run: Callable[[bool], list[Row]], argv: list[str] | None, description: str | None, quick_help: str
) -> list[Row]:
    """``python -m bench.bench_X [--quick]``: run one module and print its table; returns the rows."""
    import argparse

    parser = argparse.ArgumentParser(description=(description or "").strip().splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    rows = run(parser.parse_args(argv).quick)
    for text in format_table(rows):
        print(text)
    return rows


def discover() -> list[str]:
    """Names of the ``bench_*`` modules of the ``bench`` package, sorted."""
    import bench

    return sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if abs(v) >= 1e6:
            return f"{v:.3e}"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.3g}"
    return str(v)


def format_table(rows: Sequence[Row]) -> list[str]:
    """Rows as aligned text lines: module, benchmark, value, unit, ratio, what the ratio compares."""
    head = ("module", "benchmark", "value", "unit", "ratio", "ratio of")
    body = [
        (
            str(r.get("module", "")),
            str(r.get("name", "")),
            _fmt(r.get("value")),
            str(r.get("unit", "")),
            "-" if r.get("ratio") is None else f"{float(r['ratio']):.2f}x",
            str(r.get("ratio_vs") or ""),
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    right = {2, 4}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(head), "  ".join("-" * w for w in widths), *(line(b) for b in body)]


def run_bench(
    quick: bool, echo: Callable[[str], None] = print, modules: Sequence[str] | None = None
) -> list[Row]:
    """Run the benchmark modules (all by default); print the table; return every row with its module."""
    names = list(modules) if modules is not None else discover()
    rows: list[Row] = []
    for name in names:
        try:
            mod = importlib.import_module(f"bench.{name}")
        except ImportError as e:
            echo(f"skipping {name}: missing dependency {e.name or e}")
            continue
        run = getattr(mod, "run", None)
        if not callable(run):
            echo(f"skipping {name}: it has no run(quick) function")
            continue
        echo(f"running {name} ({'quick' if quick else 'full'}) ...")
        try:
            got = run(quick)
        except ImportError as e:
            echo(f"skipping {name}: missing dependency {e.name or e}")
            continue
        rows += [{"module": name, **r} for r in got]
    echo("")
    for text in format_table(rows):
        echo(text)
    return rows
