"""``ingestwm experiment SWEEP``: a parameter grid of simulations, one per Spark task, into one table.

A sweep file (YAML) names a base scenario and a grid of overrides::

    name: lag-vs-polling
    base: idle-tail                 # a shipped scenario, or a path relative to the sweep file
    seed: 1
    set: [duration_ms=30000]        # fixed overrides for every point (optional)
    grid:                           # the cartesian product of these values, in file order
      store.max_watermark_lag_ms: [1000, 4000]
      store.polling_period_ms: [250, 1000]

Every point is validated on the driver first (a bad sweep fails before Spark starts);
then ``sc.parallelize(points, len(points)).map(run_point)`` runs one simulation per
task (``run_point`` is a module-level function, importable on the workers; points are
plain dicts, never pickled objects from disk). The driver writes ``results.csv``,
``sweep.json`` and ``sweep.png``.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..scenarios.yaml_specs import find, read_mapping, shipped
from .engine import run_scenario
from .errors import OutputError, ScenarioError, SweepError
from .scenario import apply_overrides, load_scenario_data, parse_override, scenario_from_dict
from .simulate import DEFAULT_RUNS_DIR, prepare_output_dir

__all__ = ["Sweep", "load_sweep", "sweep_points", "run_point", "run_experiment", "METRICS", "shipped_sweeps"]

METRICS = (
    "events_written",
    "events_delivered",
    "late_ingestion",
    "late_event_time",
    "lag_mean_ms",
    "lag_p99_ms",
    "lag_max_ms",
    "idle_lag_max_ms",
    "advances_per_s",
    "examined_per_pass",
    "monotonic",
)


@dataclass(frozen=True, slots=True)
class Sweep:
    """A validated sweep: base scenario data, fixed overrides, grid axes (key, values) in order."""

    name: str
    base: dict[str, Any]
    seed: int
    fixed: tuple[str, ...]
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    description: str = ""


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


def load_sweep(name_or_path: str) -> Sweep:
    """Read and validate a sweep file (a shipped name or a path)."""
    path = _sweep_path(name_or_path)
    data = read_mapping(path, "sweep", SweepError)
    unknown = sorted(set(data) - {"name", "description", "base", "seed", "set", "grid"})
    if unknown:
        raise SweepError(f"sweep {str(path)!r}: unknown key {unknown[0]!r}")
    for key in ("name", "base", "grid"):
        if key not in data:
            raise SweepError(f"sweep {str(path)!r}: {key!r} is required")
    base_ref = str(data["base"])
    rel = path.parent / base_ref
    try:
        base = load_scenario_data(rel if rel.is_file() else base_ref)
    except ScenarioError as e:
        raise SweepError(f"sweep {str(path)!r}: base: {e}") from None
    grid = data["grid"]
    if not isinstance(grid, Mapping) or not grid:
        raise SweepError(f"sweep {str(path)!r}: grid must map override keys to lists of values")
    axes: list[tuple[str, tuple[Any, ...]]] = []
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"sweep {str(path)!r}: grid.{key} must be a non-empty list")
        axes.append((str(key), tuple(values)))
    fixed = data.get("set") or []
    if not isinstance(fixed, list) or not all(isinstance(x, str) for x in fixed):
        raise SweepError(f"sweep {str(path)!r}: set must be a list of key=value strings")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SweepError(f"sweep {str(path)!r}: seed must be an int")
    sweep = Sweep(str(data["name"]), base, seed, tuple(fixed), tuple(axes), str(data.get("description", "")))
    for point in sweep_points(sweep):  # validate every point on the driver
        try:
            scenario_from_dict(point["scenario"])
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


def run_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """Run one grid point (on a Spark worker); returns its table row. Module-level: workers import it."""
    scenario = scenario_from_dict(point["scenario"])
    s = run_scenario(scenario).summary
    wm = s["watermark"]
    idle = wm.get("idle")
    row: dict[str, Any] = {"point": point["index"], **point["params"]}
    row.update(
        {
            "events_written": s["events"]["written"],
            "events_delivered": s["events"]["delivered"],
            "late_ingestion": s["events"]["late_ingestion"],
            "late_event_time": s["events"]["late_event_time"],
            "lag_mean_ms": wm["lag_ms"]["mean"],
            "lag_p99_ms": wm["lag_ms"]["p99"],
            "lag_max_ms": wm["lag_ms"]["max"],
            "idle_lag_max_ms": idle["lag_ms"]["max"] if idle else None,
            "advances_per_s": s["advancer"]["advances_per_s"],
            "examined_per_pass": s["advancer"]["examined_per_pass"],
            "monotonic": wm["monotonic"],
        }
    )
    return row


def _plot(sweep: Sweep, rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    x_key = sweep.grid[0][0]
    others = [k for k, _ in sweep.grid[1:]]
    series: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        series.setdefault(tuple(r[k] for k in others), []).append(r)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, metric in zip(
        axes.flat, ("lag_mean_ms", "lag_max_ms", "advances_per_s", "late_event_time"), strict=True
    ):
        for combo, rs in series.items():
            rs = sorted(rs, key=lambda r: r[x_key])
            label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(others, combo, strict=True)) or None
            ax.plot([r[x_key] for r in rs], [r[metric] for r in rs], marker="o", label=label)
        ax.set_xlabel(x_key)
        ax.set_ylabel(metric)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if labels:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    fig.suptitle(f"sweep {sweep.name}: {len(rows)} simulations")
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    try:
        fig.savefig(path, dpi=100, metadata={"Software": None})
    except OSError as e:
        raise OutputError(f"cannot write {str(path)!r}: {e.strerror or e}") from None
    plt.close(fig)


def run_experiment(
    sweep_ref: str,
    master: str = "local[*]",
    out: Path | None = None,
    echo: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run every point of the sweep on Spark (one task each); write the table and plots; return the rows."""
    sweep = load_sweep(sweep_ref)
    out_dir = prepare_output_dir(out if out is not None else DEFAULT_RUNS_DIR / f"experiment-{sweep.name}")
    points = sweep_points(sweep)
    echo(f"sweep {sweep.name}: {len(points)} simulations on Spark ({master}) ...")
    from spark_source.session import local_session

    spark = local_session("ingestwm-experiment", master=master)
    try:
        rows = spark.sparkContext.parallelize(points, len(points)).map(run_point).collect()
    finally:
        spark.stop()
    rows = sorted(rows, key=lambda r: r["point"])
    columns = ["point", *(k for k, _ in sweep.grid), *METRICS]
    try:
        with (out_dir / "results.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(columns)
            for r in rows:
                w.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
        (out_dir / "sweep.json").write_text(
            json.dumps(
                {
                    "name": sweep.name,
                    "seed": sweep.seed,
                    "grid": [[k, list(v)] for k, v in sweep.grid],
                    "set": list(sweep.fixed),
                    "rows": rows,
                },
                indent=2,
                sort_keys=True,
            )
            + "\n",
            encoding="utf-8",
        )
    except OSError as e:
        raise OutputError(f"cannot write to {str(out_dir)!r}: {e.strerror or e}") from None
    _plot(sweep, rows, out_dir / "sweep.png")
    short = [c.split(".")[-1] for c in columns]
    echo("  ".join(short))
    for r in rows:
        echo("  ".join("" if r.get(c) is None else str(r.get(c)) for c in columns))
    echo(f"outputs in {out_dir}/: results.csv, sweep.json, sweep.png")
    return rows
