"""``ingestwm experiment SWEEP``: a parameter grid of simulations or lab comparisons, with replications.

A sweep file (YAML) names a base scenario, a grid of overrides and what to run::

    name: lag-vs-polling
    base: idle-tail                 # a shipped scenario, or a path relative to the sweep file
    tool: simulate                  # or compare: the lab's strategies over each point
    seed: 1
    replications: 5                 # seeds seed .. seed+4 at every point (default: the base's)
    set: [duration_ms=30000]        # fixed overrides for every point (optional)
    grid:                           # the cartesian product of these values, in file order
      store.max_watermark_lag_ms: [1000, 4000]
      store.polling_period_ms: [250, 1000]
    metrics: [lag_mean_ms, lag_max_ms]   # what the figure shows (optional)

Any scenario field can be a grid axis (``strategies.flink_bound_ms`` too). Every point
is validated on the driver first (a bad sweep fails before anything runs); then every
(point, seed) is one task (``bench.study.experiment``): one Spark task each
(``--executor spark``, the default) or one process each (``--executor local``). The
driver writes ``runs.csv`` (one row per run), ``results.csv`` (one row per point: per
metric its mean, then ``_sd``, ``_ci95``, ``_low``, ``_high`` — the interval within the
metric's domain — and ``_clipped``: which bound the domain cut, if any), ``sweep.json``,
``sweep.<fmt>`` (``--format`` png, svg or pdf: means with 95 % error bars) and
``manifest.json``. With ``tool: compare`` a metric name without a strategy
(``late_fraction``) means one line per strategy (custom strategies included).
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..spec.errors import OutputError, ScenarioError, SweepError
from ..spec.loader import find, read_mapping, shipped
from ..spec.scenario import apply_overrides, load_scenario_data, parse_override, scenario_from_dict
from . import figures
from .experiment import SIM_METRICS, TOOLS, aggregate, execute, replication_tasks
from .run_options import RunOptions
from .simulate_run import DEFAULT_RUNS_DIR, prepare_output_dir
from .stats import error_bars, mean_ci

__all__ = [
    "Sweep",
    "load_sweep",
    "sweep_points",
    "sweep_tasks",
    "run_point",
    "run_experiment",
    "METRICS",
    "shipped_sweeps",
    "DEFAULT_PLOT",
]

_SPARK = RunOptions(executor="spark")
"""``ingestwm experiment`` runs on Spark by default: a sweep is many runs."""

METRICS = SIM_METRICS
DEFAULT_PLOT = {
    "simulate": ("lag_mean_ms", "lag_max_ms", "advances_per_s", "late_event_time"),
    "compare": ("late_fraction", "wm_lag_mean_ms", "completeness", "result_latency_p50_ms"),
}
_KEYS = {"name", "description", "base", "seed", "set", "grid", "tool", "replications", "metrics"}


@dataclass(frozen=True, slots=True)
class Sweep:
    """A validated sweep: base scenario data, fixed overrides, grid axes (key, values) in order."""

    name: str
    base: dict[str, Any]
    seed: int
    fixed: tuple[str, ...]
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    description: str = ""
    tool: str = "simulate"
    replications: int = 1
    metrics: tuple[str, ...] = ()


def shipped_sweeps() -> list[str]:
    """Names of the sweeps shipped in ``bench/scenarios/sweeps``, sorted."""
    return list(shipped("sweeps"))


def _sweep_path(name_or_path: str) -> Path:
    path = find(name_or_path, "sweeps")
    if path is None:
        raise SweepError(
            f"unknown sweep {name_or_path!r}: not a file and not one of {', '.join(shipped_sweeps())}"
        )
    return path


def _int(data: Mapping[str, Any], key: str, default: int, low: int, where: str) -> int:
    v = data.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise SweepError(f"sweep {where}: {key} must be an int >= {low}, got {v!r}")
    return v


def load_sweep(name_or_path: str, replications: int | None = None) -> Sweep:
    """Read and validate a sweep file (a shipped name or a path); ``replications`` overrides the file's."""
    path = _sweep_path(name_or_path)
    where = repr(str(path))
    data = read_mapping(path, "sweep", SweepError)
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise SweepError(f"sweep {where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    for key in ("name", "base", "grid"):
        if key not in data:
            raise SweepError(f"sweep {where}: {key!r} is required")
    base_ref = str(data["base"])
    rel = path.parent / base_ref
    try:
        base = load_scenario_data(rel if rel.is_file() else base_ref)
    except ScenarioError as e:
        raise SweepError(f"sweep {where}: base: {e}") from None
    grid = data["grid"]
    if not isinstance(grid, Mapping) or not grid:
        raise SweepError(f"sweep {where}: grid must map override keys to lists of values")
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"sweep {where}: grid.{key} must be a non-empty list")
        axes.append((str(key), tuple(values)))
    fixed = data.get("set") or []
    if not isinstance(fixed, list) or not all(isinstance(x, str) for x in fixed):
        raise SweepError(f"sweep {where}: set must be a list of key=value strings")
    tool = data.get("tool", "simulate")
    if tool not in TOOLS:
        raise SweepError(f"sweep {where}: tool must be one of {', '.join(TOOLS)}, got {tool!r}")
    seed = _int(data, "seed", 0, 0, where)
    base_reps = base.get("replications", 1)
    reps = replications if replications is not None else _int(data, "replications", base_reps, 1, where)
    if reps < 1:
        raise SweepError(f"sweep {where}: replications must be >= 1, got {reps}")
    metrics = data.get("metrics") or list(DEFAULT_PLOT[tool])
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise SweepError(f"sweep {where}: metrics must be a list of metric names")
    if tool == "simulate":
        bad = [m for m in metrics if m not in SIM_METRICS]
        if bad:
            raise SweepError(f"sweep {where}: unknown metric {bad[0]!r}; known: {', '.join(SIM_METRICS)}")
    sweep = Sweep(
        str(data["name"]),
        base,
        seed,
        tuple(fixed),
        tuple(axes),
        str(data.get("description", "")),
        tool,
        reps,
        tuple(metrics),
    )
    for point in sweep_points(sweep):  # validate every point on the driver
        try:
            sc = scenario_from_dict(point["scenario"])
            if tool == "compare":
                from ..lab.lab_scenario import lab_ready

                lab_ready(sc)
        except ScenarioError as e:
            raise SweepError(f"sweep {sweep.name!r}, point {point['params']}: {e}") from None
    return sweep


def _override(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value)}"


def sweep_points(sweep: Sweep) -> list[dict[str, Any]]:
    """Every grid point as a plain dict: index, parameter values and the scenario data to run."""
    points = []
    keys = [k for k, _ in sweep.grid]
    for i, values in enumerate(itertools.product(*(v for _, v in sweep.grid))):
        sets = [
            *sweep.fixed,
            "metrics.plots=false",
            "metrics.event_log=false",
            "metrics.segments=false",
            *(_override(k, v) for k, v in zip(keys, values, strict=True)),
        ]
        for s in sets:
            parse_override(s)
        data = apply_overrides(sweep.base, sets)
        data["seed"] = sweep.seed
        data["name"] = f"{sweep.name}-{i}"
        points.append({"index": i, "params": dict(zip(keys, values, strict=True)), "scenario": data})
    return points


def sweep_tasks(sweep: Sweep) -> list[dict[str, Any]]:
    """Every (point, seed) of the sweep as a task, points first."""
    return [
        t
        for p in sweep_points(sweep)
        for t in replication_tasks(
            sweep.tool, p["scenario"], sweep.seed, sweep.replications, p["index"], p["params"]
        )
    ]


def run_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """Run one grid point once (its seed); returns its table row (point, parameters, metrics)."""
    from .experiment import run_task

    res = run_task(
        {
            "tool": "simulate",
            "point": point["index"],
            "params": point["params"],
            "scenario": point["scenario"],
        }
    )
    return {"point": point["index"], **point["params"], **res["metrics"]}


# ---------------------------------------------------------------------- outputs


def _lines(sweep: Sweep, metric: str, metric_names: list[str]) -> list[str]:
    """The full metric names a plotted ``metric`` stands for (compare: one per strategy)."""
    if metric in metric_names:
        return [metric]
    return [m for m in metric_names if m.endswith("." + metric)]


def _plot(sweep: Sweep, results: list[dict[str, Any]], out_dir: Path, fmt: str) -> Path:
    """``sweep.<fmt>`` in the shared figure style (``bench.study.figures``): one panel per metric."""
    plt = figures.pyplot()
    x_key = sweep.grid[0][0]
    others = [k for k, _ in sweep.grid[1:]]
    names = list(results[0]["metrics"]) if results else []
    n = len(sweep.metrics)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(tuple(r["params"][k] for k in others), []).append(r)
    for ax, metric in zip(axes.flat, sweep.metrics, strict=False):
        line = 0
        for full in _lines(sweep, metric, names):
            for combo, rs in groups.items():
                rs = sorted(rs, key=lambda r: r["params"][x_key])
                xs = [r["params"][x_key] for r in rs]
                ms = [r["metrics"][full]["mean"] for r in rs]
                err = error_bars([r["metrics"][full] for r in rs])
                parts = [f"{k.split('.')[-1]}={v}" for k, v in zip(others, combo, strict=True)]
                if full != metric:
                    parts.insert(0, full[: -len(metric) - 1])
                ax.errorbar(
                    xs,
                    ms,
                    yerr=err,
                    marker="o",
                    capsize=3,
                    color=figures.colour(line),
                    linestyle=figures.linestyle(line),
                    label=", ".join(parts) or None,
                )
                line += 1
        ax.set_xlabel(_axis_label(x_key))
        ax.set_ylabel(_axis_label(metric))
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if labels:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)))
    reps = f", {sweep.replications} seeds each (mean, 95 % CI)" if sweep.replications > 1 else ""
    fig.suptitle(f"{sweep.tool} sweep {sweep.name}: {len(results)} points{reps}")
    fig.tight_layout(rect=(0, 0.08 if labels else 0, 1, 0.95))
    try:
        return figures.save(fig, out_dir, "sweep", fmt)
    except OSError as e:
        raise OutputError(f"cannot write {str(out_dir / f'sweep.{fmt}')!r}: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def _axis_label(name: str) -> str:
    """A field or metric name with its unit (``_ms``: ms, ``_per_s``: 1/s, fractions: 1)."""
    for suffix, unit in (("_ms", "ms"), ("_per_s", "1/s"), ("_bytes", "bytes"), ("_events", "events")):
        if name.endswith(suffix):
            return f"{name} ({unit})"
    if name.endswith(("fraction", "completeness")):
        return f"{name} (1)"
    return name


def _cell(v: Any) -> Any:
    return "" if v is None else v


def write_sweep(
    sweep: Sweep, runs: list[dict[str, Any]], out_dir: Path, fmt: str = "png"
) -> list[dict[str, Any]]:
    """Write runs.csv, results.csv, sweep.json and sweep.<fmt>; returns the per-point results."""
    figures.check(fmt)
    keys = [k for k, _ in sweep.grid]
    by_point: dict[int, list[dict[str, Any]]] = {}
    for r in runs:
        by_point.setdefault(r["point"], []).append(r)
    results = [
        {"point": p, "params": rs[0]["params"], "seeds": [r["seed"] for r in rs], "metrics": aggregate(rs)}
        for p, rs in sorted(by_point.items())
    ]
    names = list(results[0]["metrics"]) if results else []
    try:
        with (out_dir / "runs.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["point", "seed", *keys, *names])
            for r in runs:
                w.writerow(
                    [
                        r["point"],
                        r["seed"],
                        *(r["params"][k] for k in keys),
                        *(_cell(r["metrics"].get(m)) for m in names),
                    ]
                )
        stats = ("sd", "ci95", "low", "high", "clipped")
        with (out_dir / "results.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["point", *keys, "n", *(c for m in names for c in (m, *(f"{m}_{s}" for s in stats)))])
            for res in results:
                ms = res["metrics"]
                w.writerow(
                    [res["point"], *(res["params"][k] for k in keys), len(res["seeds"])]
                    + [_cell(ms[m][c]) for m in names for c in ("mean", *stats)]
                )
        doc = {
            "name": sweep.name,
            "tool": sweep.tool,
            "seed": sweep.seed,
            "replications": sweep.replications,
            "grid": [[k, list(v)] for k, v in sweep.grid],
            "set": list(sweep.fixed),
            "random": runs[0]["random"] if runs else [],
            "results": results,
            "runs": [{k: r[k] for k in ("point", "seed", "params", "metrics")} for r in runs],
        }
        (out_dir / "sweep.json").write_text(
            json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
    except OSError as e:
        raise OutputError(f"cannot write to {str(out_dir)!r}: {e.strerror or e}") from None
    _plot(sweep, results, out_dir, fmt)
    return results


def run_experiment(
    sweep_ref: str,
    out: Path | None = None,
    replications: int | None = None,
    options: RunOptions = _SPARK,
) -> list[dict[str, Any]]:
    """Run every (point, seed) where ``options`` say (default: Spark tasks on ``local[*]``); write the
    tables, figure (as ``options.fmt``) and manifest; return the results."""
    echo = options.echo
    sweep = load_sweep(sweep_ref, replications)
    out_dir = prepare_output_dir(out if out is not None else DEFAULT_RUNS_DIR / f"experiment-{sweep.name}")
    tasks = sweep_tasks(sweep)
    points = len(tasks) // sweep.replications
    size = f"{points} points x {sweep.replications} seeds = {len(tasks)} runs"
    echo(f"{sweep.tool} sweep {sweep.name}: {size} {options.where()} ...")
    runs = execute(tasks, options, label=sweep.name)
    runs = sorted(runs, key=lambda r: (r["point"], r["seed"]))
    results = write_sweep(sweep, runs, out_dir, options.fmt)
    options.manifest().write(
        out_dir,
        f"experiment ({sweep.tool})",
        sorted({r["seed"] for r in runs}),
        [scenario_to_dict_of(t["scenario"]) for t in tasks if t["seed"] == sweep.seed],
        {"sweep": sweep.name, "executor": options.executor, "random": runs[0]["random"] if runs else []},
    )
    keys = [k for k, _ in sweep.grid]
    shown = [
        m
        for res in results[:1]
        for m in res["metrics"]
        if any(m == x or m.endswith("." + x) for x in sweep.metrics)
    ]
    echo("  ".join([*(k.split(".")[-1] for k in keys), *shown]))
    for res in results:
        echo(
            "  ".join(
                [*(str(res["params"][k]) for k in keys), *(mean_ci(res["metrics"][m], "±") for m in shown)]
            )
        )
    if sweep.replications > 1:
        echo(f"(mean±half-width of the 95 % Student-t interval over {sweep.replications} seeds)")
        if any(res["metrics"][m]["clipped"] for res in results for m in shown):
            echo("(mean [low, high]: the interval cut at the metric's domain, docs/metrics.md)")
    echo(f"outputs in {out_dir}/: runs.csv, results.csv, sweep.json, sweep.{options.fmt}, manifest.json")
    return results


def scenario_to_dict_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """The fully resolved scenario (every default filled in) of raw scenario data."""
    from ..spec.scenario import scenario_to_dict

    return scenario_to_dict(scenario_from_dict(data))
