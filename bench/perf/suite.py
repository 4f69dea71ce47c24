"""The benchmark suite: sizes, result rows, discovery of the ``bench_*`` modules, one table of ratios.

A benchmark module is ``bench/perf/bench_<area>.py`` (found by its file name: a new one
is picked up by ``ingestwm bench``, by ``pytest bench/perf`` and by the smoke test in
``tests/test_bench_smoke.py`` without being listed anywhere). It has:

- ``run(size)``: every figure of its area measured side by side in one run (a baseline
  timed in the same loop as what it is compared with), checked to be right before it
  is timed; returns rows ``{"name", "value", "unit", "ratio_vs", "ratio"}`` (``row``).
  ``size`` is ``"full"`` (the stated figures), ``"quick"`` (seconds per module) or
  ``"tiny"`` (a smoke run: everything runs, the figures mean little).
- ``test_*(benchmark, bench_size)`` functions: pytest-benchmark tests on the same
  measurement functions (``bench/perf/conftest.py`` collects them from ``bench_*.py``).
  A module without any is timed as a whole (``run(size)`` once: ``test_whole_runs.py``).
- ``SLOW = True`` if it takes minutes (Spark): its pytest-benchmark tests then run only
  with ``--bench-slow``, and its smoke test is marked ``slow``.
- ``main(argv)``: ``python -m bench.perf.bench_<area> [--quick | --tiny]``.

``run_bench`` imports the modules and prints their rows as one table: a module that
cannot be imported is an error, never skipped; one whose run fails is one line and a
non-zero exit after the table of the others.
"""

from __future__ import annotations

import argparse
import importlib
import math
import pkgutil
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Literal, TypeVar

from .errors import BenchmarkError

__all__ = [
    "Row",
    "Size",
    "SIZES",
    "row",
    "sized",
    "discover",
    "load",
    "check_names",
    "check_rows",
    "run_bench",
    "format_table",
    "module_main",
    "one_line",
]

Row = dict[str, Any]
"""One benchmark figure: ``name``, ``value``, ``unit`` and what ``ratio`` compares it with (``ratio_vs``)."""

Size = Literal["tiny", "quick", "full"]
SIZES: tuple[Size, ...] = ("tiny", "quick", "full")

_T = TypeVar("_T")


def row(name: str, value: float, unit: str, ratio_vs: str | None = None, ratio: float | None = None) -> Row:
    """A result row as every ``bench_*`` module returns it."""
    return {"name": name, "value": value, "unit": unit, "ratio_vs": ratio_vs, "ratio": ratio}


def sized(size: Size, tiny: _T, quick: _T, full: _T) -> _T:
    """The value for ``size``: ``sized(size, 1_000, 100_000, 1_000_000)``."""
    if size not in SIZES:
        raise BenchmarkError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    return {"tiny": tiny, "quick": quick, "full": full}[size]


def discover() -> list[str]:
    """Names of the ``bench_*`` modules in ``bench/perf``, sorted (listed from the folder, not imported)."""
    from . import __path__ as here

    return sorted(m.name for m in pkgutil.iter_modules(here) if m.name.startswith("bench_"))


def load(name: str) -> ModuleType:
    """Import ``bench.perf.<name>``; an unknown name, or no ``run(size)`` in it, is a ``BenchmarkError``.

    Errors raised while importing it (a misspelled import, a missing dependency) propagate.
    """
    check_names([name])
    mod = importlib.import_module(f"{__package__}.{name}")
    if not callable(getattr(mod, "run", None)):
        raise BenchmarkError(f"benchmark module {name!r} has no run(size) function")
    return mod


def check_names(names: Sequence[str]) -> None:
    """A ``BenchmarkError`` naming the first of ``names`` that is not a module of ``bench/perf``."""
    known = discover()
    for name in names:
        if name not in known:
            raise BenchmarkError(f"no benchmark module {name!r} in bench/perf (modules: {', '.join(known)})")


def check_rows(name: str, rows: Any) -> list[Row]:
    """``rows`` if they are a list of well-formed rows with finite numbers; else a ``BenchmarkError``."""
    if not isinstance(rows, list) or not rows:
        raise BenchmarkError(f"{name}.run returned {rows!r}, not a non-empty list of rows")
    for r in rows:
        if not isinstance(r, dict) or not {"name", "value", "unit", "ratio_vs", "ratio"} <= set(r):
            raise BenchmarkError(f"{name}.run returned a malformed row {r!r} (use bench.perf.suite.row)")
        for key in ("value", "ratio"):
            v = r[key]
            if v is None and key == "ratio":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise BenchmarkError(f"{name}: row {r['name']!r} has {key} {v!r}, not a finite number")
    return rows


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
    size: Size, echo: Callable[[str], None] = print, modules: Sequence[str] | None = None
) -> list[Row]:
    """Run the benchmark modules (all by default); print the table; return every row with its module.

    Every module is imported before any runs, so a broken one fails the run at once. A
    module whose run raises is reported in one line (``bench_x FAILED: ...``) and the
    others still run; after the table of those that ran, a ``BenchmarkError`` names the
    failed ones (``ingestwm bench`` then exits non-zero). Spark's session, if a module
    started one, is stopped at the end.
    """
    names = list(modules) if modules is not None else discover()
    loaded = [(name, load(name)) for name in names]
    rows: list[Row] = []
    failed: list[str] = []
    try:
        for name, mod in loaded:
            echo(f"running {name} ({size}) ...")
            try:
                got = check_rows(name, mod.run(size))
            except BenchmarkError:
                raise
            except Exception as e:  # a benchmark's failure, reported in one line; the others still run
                echo(f"{name} FAILED: {one_line(e)}")
                failed.append(name)
                continue
            rows += [{"module": name, **r} for r in got]
    finally:
        from spark_source.session import stop_local_session

        stop_local_session()
    if rows:
        echo("")
        for text in format_table(rows):
            echo(text)
    if failed:
        raise BenchmarkError(f"{len(failed)} of {len(loaded)} benchmark modules failed: {', '.join(failed)}")
    return rows


def one_line(e: BaseException) -> str:
    """``Type: first line of the message`` (a Spark query's exception carries the JVM's stack below)."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def module_main(
    run: Callable[[Size], list[Row]],
    argv: list[str] | None,
    description: str | None,
    quick_help: str = "smaller sizes: seconds, not minutes",
) -> list[Row]:
    """``python -m bench.perf.bench_X [--quick | --tiny]``: run one module, print its table; its rows."""
    parser = argparse.ArgumentParser(description=(description or "").strip().splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help=quick_help)
    group.add_argument("--tiny", action="store_true", help="smallest sizes (a smoke run)")
    args = parser.parse_args(argv)
    size: Size = "tiny" if args.tiny else "quick" if args.quick else "full"
    from spark_source.session import stop_local_session

    try:
        rows = run(size)
    finally:
        stop_local_session()
    for text in format_table(rows):
        print(text)
    return rows
