"""``--replications N`` of ``simulate`` and ``compare``: one scenario, N seeds, mean and 95 % intervals.

The seeds are the scenario's ``seed``, ``seed + 1``, ... ``seed + N - 1``; each run is
independent (every random part draws from generators spawned from its own seed). The
runs go to local processes (``--jobs``) or one Spark task each. Written to the output
directory:

- ``seed-<s>/``: each run's own outputs (simulate: ``summary.json`` and the series;
  compare: ``compare.csv``/``.json``), no figures;
- ``runs.csv``: one row per seed, one column per metric;
- ``replications.csv``: per metric ``n, mean, sd, ci95, low, high, clipped`` (Student t,
  95 %, within the metric's domain: ``clipped`` names the bound it cut, if any);
- ``replications.json``: the same, the series bands and the random parts;
- ``replications.<fmt>`` (``--format``: png, svg or pdf, in ``bench.study.figures``' style): the
  watermark lag over time, mean with its 95 % band, and (compare)
  each strategy's main metrics with 95 % error bars;
- ``manifest.json`` (``bench.study.manifest``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..spec.errors import OutputError
from ..spec.scenario import Scenario, scenario_to_dict
from . import figures
from .experiment import aggregate, aggregate_series, execute, replication_tasks
from .run_options import RunOptions
from .stats import error_bars, mean_ci

__all__ = ["run_replications", "format_replications", "LAB_SHOWN"]

_DEFAULT = RunOptions()

LAB_SHOWN = ("late_fraction", "completeness", "wm_lag_mean_ms", "result_latency_p50_ms", "buffer_peak_events")


def _cell(v: Any) -> Any:
    return "" if v is None else v


def format_replications(
    tool: str, name: str, seeds: list[int], metrics: Mapping[str, Mapping[str, Any]]
) -> str:
    """The replications' table: per metric (simulate) or per strategy (compare), mean ± 95 % half-width."""
    head = f"{name}: {len(seeds)} replications (seeds {seeds[0]}..{seeds[-1]}), mean ± 95 % CI half-width"
    clipped = any(s.get("clipped") for s in metrics.values())
    if tool == "compare":
        strategies: list[str] = []
        for m in metrics:
            s = m.rsplit(".", 1)[0]
            if s not in strategies:
                strategies.append(s)
        rows = [["strategy", *LAB_SHOWN]]
        for s in strategies:
            rows.append(
                [s, *(mean_ci(metrics[f"{s}.{m}"]) if f"{s}.{m}" in metrics else "-" for m in LAB_SHOWN)]
            )
    else:
        rows = [["metric", "mean", "sd", "95 % CI"]]
        for m, st in metrics.items():
            ci = "-" if st["low"] is None else f"[{st['low']:g}, {st['high']:g}]"
            if st.get("clipped"):
                ci += "*"
            rows.append(
                [
                    m,
                    "-" if st["mean"] is None else f"{st['mean']:g}",
                    "-" if st["sd"] is None else f"{st['sd']:.3g}",
                    ci,
                ]
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head]
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    if clipped:
        lines.append(
            "  * interval cut at the metric's domain (docs/metrics.md)"
            if tool != "compare"
            else "  mean [low, high]: the interval cut at the metric's domain (docs/metrics.md)"
        )
    return "\n".join(lines)


def _plot(
    tool: str,
    name: str,
    agg: Mapping[str, Any],
    bands: Mapping[str, list[dict[str, Any]]],
    out_dir: Path,
    n: int,
    fmt: str,
) -> Path:
    """``replications.<fmt>`` in the shared figure style (``bench.study.figures``)."""
    plt = figures.pyplot()
    panels = 2 if tool == "compare" else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.2), squeeze=False)
    ax = axes[0][0]
    for i, (series, rows) in enumerate(bands.items()):
        ts = [r["t_ms"] / 1000.0 for r in rows if r["mean"] is not None]
        mean = [r["mean"] / 1000.0 for r in rows if r["mean"] is not None]
        low = [
            (r["low"] if r["low"] is not None else r["mean"]) / 1000.0 for r in rows if r["mean"] is not None
        ]
        high = [
            (r["high"] if r["high"] is not None else r["mean"]) / 1000.0
            for r in rows
            if r["mean"] is not None
        ]
        colour = figures.colour(i)
        ax.plot(
            ts,
            mean,
            color=colour,
            linestyle=figures.linestyle(i),
            label=series.split(".")[0] if tool == "compare" else "group watermark lag",
        )
        ax.fill_between(ts, low, high, alpha=0.25, color=colour, linewidth=0)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("watermark lag (s)")
    ax.set_title("watermark lag: mean and 95 % band")
    figures.legend(ax)
    if tool == "compare":
        ax2 = axes[0][1]
        strategies = list(dict.fromkeys(m.rsplit(".", 1)[0] for m in agg))
        shown = ("late_fraction", "completeness")
        width = 0.8 / len(shown)
        for j, m in enumerate(shown):
            xs = [i + (j - (len(shown) - 1) / 2) * width for i in range(len(strategies))]
            means = [agg.get(f"{s}.{m}", {}).get("mean") or 0.0 for s in strategies]
            errs = error_bars([agg.get(f"{s}.{m}", {}) for s in strategies])
            ax2.bar(xs, means, width, yerr=errs, capsize=3, label=m, color=figures.colour(j))
        ax2.set_xticks(range(len(strategies)), strategies)
        ax2.set_ylim(0, 1.2)  # headroom for the legend above the bars
        ax2.set_ylabel("fraction of events (1)")
        ax2.set_title("per strategy: mean with 95 % CI")
        figures.legend(ax2, loc="upper right", ncols=2)
        ax2.grid(False, axis="x")
    fig.suptitle(f"{name}: {n} replications")
    fig.tight_layout()
    try:
        return figures.save(fig, out_dir, "replications", fmt)
    except OSError as e:
        raise OutputError(
            f"cannot write {str(out_dir / f'replications.{fmt}')!r}: {e.strerror or e}"
        ) from None
    finally:
        plt.close(fig)


def run_replications(
    tool: str,
    scenario: Scenario,
    replications: int,
    out_dir: Path,
    options: RunOptions = _DEFAULT,
    plots: bool = True,
) -> dict[str, Any]:
    """Run ``scenario`` with ``replications`` seeds; write and print the aggregate (figure as
    ``options.fmt``)."""
    data = scenario_to_dict(scenario)
    tasks = replication_tasks(tool, data, scenario.seed, replications)
    for t in tasks:
        t["scenario"]["metrics"] = {**t["scenario"]["metrics"], "plots": False}
    dirs = [str(out_dir / f"seed-{t['seed']}") for t in tasks] if options.executor == "local" else None
    runs = execute(tasks, options, dirs, label=scenario.name)
    seeds = [r["seed"] for r in runs]
    agg = aggregate(runs)
    bands = aggregate_series(runs)
    names = list(agg)
    try:
        with (out_dir / "runs.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["seed", *names])
            for r in runs:
                w.writerow([r["seed"], *(_cell(r["metrics"].get(m)) for m in names)])
        with (out_dir / "replications.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            cols = ("n", "mean", "sd", "ci95", "low", "high", "clipped")
            w.writerow(["metric", *cols])
            for m, s in agg.items():
                w.writerow([m, *(_cell(s[c]) for c in cols)])
        doc = {
            "scenario": scenario.name,
            "tool": tool,
            "seeds": seeds,
            "random": runs[0]["random"] if runs else [],
            "metrics": agg,
            "series": bands,
        }
        (out_dir / "replications.json").write_text(
            json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
    except OSError as e:
        raise OutputError(f"cannot write to {str(out_dir)!r}: {e.strerror or e}") from None
    files = ["runs.csv", "replications.csv", "replications.json"]
    if plots:
        files.append(_plot(tool, scenario.name, agg, bands, out_dir, len(runs), options.fmt).name)
    options.manifest().write(
        out_dir,
        f"{tool} --replications {replications}",
        seeds,
        [scenario_to_dict(scenario)],
        {"executor": options.executor, "random": doc["random"]},
    )
    files.append("manifest.json")
    echo = options.echo
    echo(format_replications(tool, scenario.name, seeds, agg))
    if not doc["random"]:
        echo("  note: nothing in this scenario is random, so every seed gives the same run")
    else:
        echo("  random: " + ", ".join(doc["random"]))
    echo(f"outputs in {out_dir}/: " + ", ".join(files) + (", seed-*/" if dirs else ""))
    return doc
