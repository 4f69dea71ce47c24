"""The outputs of ``ingestwm tune``: a table, ``tune.csv``, ``tune_points.csv``, ``tune.json``, the figure.

``tune.csv`` has one row per strategy: its bound field and the bound found (empty for a
strategy without one), ``status`` (``met``; ``not met``: the row is then at
``max_bound_ms``; ``as it is``: no bound), how many bounds were evaluated, ``n``, and per
cost (``bench.study.tune.COSTS``) its mean, ``_sd``, ``_ci95``, ``_low``, ``_high`` (the
95 % interval within the metric's domain) and ``_clipped``, as ``results.csv`` of
``experiment``. ``tune_points.csv`` has the same columns for every evaluated (strategy,
bound), with the round it ran in and whether it met the target. ``tune.<fmt>``: the
late fraction against the mean watermark lag of every strategy (the points the search
evaluated, joined in bound order, with 95 % error bars both ways), the target as a
line, each strategy's chosen point marked.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from ..spec.errors import OutputError
from . import figures
from .stats import error_bars, mean_ci
from .tune import COSTS, Evaluation, StrategyResult, TuneResult

__all__ = ["format_tune", "write_tune", "plot_tune", "RULE"]

RULE = (
    "a bound meets the target when the upper end of the 95 % Student-t interval of the mean late "
    "fraction over the seeds (cut at [0, 1]) is <= the target; with one seed, when its late fraction is"
)

_STATS = ("sd", "ci95", "low", "high", "clipped")
_SHOWN = (
    ("late_fraction", "late fraction"),
    ("wm_lag_mean_ms", "lag mean ms"),
    ("wm_lag_p99_ms", "lag p99 ms"),
    ("result_latency_p50_ms", "result p50 ms"),
    ("result_latency_p99_ms", "result p99 ms"),
    ("buffer_peak_events", "buf events"),
)


def _cell(v: Any) -> Any:
    return "" if v is None else v


def _bound_text(r: StrategyResult, res: TuneResult) -> str:
    if r.knob is None:
        return "-"
    if r.status == "not met":
        return f"> {res.max_bound_ms}"
    return str(r.evaluation.bound_ms)


def _fraction(s: dict[str, Any]) -> str:
    if s["mean"] is None:
        return "-"
    if s["high"] is None:
        return f"{s['mean']:.4g}"
    return f"{s['mean']:.4g} [{s['low']:.3g}, {s['high']:.3g}]"


def format_tune(res: TuneResult) -> str:
    """The terminal table: one line per strategy, bound, status and costs (mean ± 95 % half-width)."""
    head = ["strategy", "bound ms", "status", *(h for _, h in _SHOWN)]
    body = []
    for r in res.results:
        st = r.evaluation.stats
        body.append(
            [
                r.strategy,
                _bound_text(r, res),
                r.status,
                *(_fraction(st[m]) if m == "late_fraction" else mean_ci(st[m], "±") for m, _ in _SHOWN),
            ]
        )
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        f"{res.scenario.name}: late fraction <= {res.target:g}, {res.replications} seeds "
        f"({res.seeds[0]}..{res.seeds[-1]}); {len(res.points)} points in {res.rounds} rounds, "
        f"{res.tasks} runs"
    ]
    for row in [head, *body]:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    for r in res.results:
        if r.status == "not met":
            lines.append(
                f"{r.strategy}: not met up to {r.knob.field if r.knob else ''} = {res.max_bound_ms} ms"
            )
    lines.append(
        "(late fraction: mean [95 % interval]; costs: mean±half-width; "
        + (
            "met: its upper end <= the target)"
            if res.replications > 1
            else "one seed: no interval, met: <= the target)"
        )
    )
    return "\n".join(lines)


def _row(e: Evaluation) -> list[Any]:
    return [_cell(e.stats[m][c]) for m in COSTS for c in ("mean", *_STATS)]


def _cost_columns() -> list[str]:
    return [c for m in COSTS for c in (m, *(f"{m}_{s}" for s in _STATS))]


def _evaluation_doc(e: Evaluation) -> dict[str, Any]:
    return {
        "strategy": e.strategy,
        "bound_ms": e.bound_ms,
        "round": e.round,
        "met": e.met,
        "metrics": e.stats,
        "runs": list(e.runs),
    }


def write_tune(res: TuneResult, out_dir: Path, fmt: str = "png") -> list[str]:
    """Write ``tune.csv``, ``tune_points.csv``, ``tune.json`` and ``tune.<fmt>``; returns their names."""
    try:
        with (out_dir / "tune.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["strategy", "field", "bound_ms", "status", "evaluations", "n", *_cost_columns()])
            for r in res.results:
                e = r.evaluation
                w.writerow(
                    [
                        r.strategy,
                        r.knob.field if r.knob else "",
                        _cell(e.bound_ms if r.status == "met" else None),
                        r.status,
                        r.evaluations,
                        len(e.runs),
                        *_row(e),
                    ]
                )
        with (out_dir / "tune_points.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["strategy", "bound_ms", "round", "met", "n", *_cost_columns()])
            for e in res.points:
                w.writerow([e.strategy, _cell(e.bound_ms), e.round + 1, e.met, len(e.runs), *_row(e)])
        doc = {
            "scenario": res.scenario.name,
            "late_target": res.target,
            "rule": RULE,
            "replications": res.replications,
            "seeds": list(res.seeds),
            "max_bound_ms": res.max_bound_ms,
            "resolution_ms": res.resolution_ms,
            "rounds": res.rounds,
            "runs": res.tasks,
            "random": list(res.random),
            "strategies": [
                {
                    "strategy": r.strategy,
                    "field": r.knob.field if r.knob else None,
                    "scenario_bound_ms": r.knob.current if r.knob else None,
                    "bound_ms": r.evaluation.bound_ms if r.status == "met" else None,
                    "status": r.status,
                    "evaluations": r.evaluations,
                    "reported": _evaluation_doc(r.evaluation),
                }
                for r in res.results
            ],
            "points": [_evaluation_doc(e) for e in res.points],
        }
        (out_dir / "tune.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as e:
        raise OutputError(f"cannot write to {str(out_dir)!r}: {e.strerror or e}") from None
    return ["tune.csv", "tune_points.csv", "tune.json", plot_tune(res, out_dir, fmt).name]


def plot_tune(res: TuneResult, out_dir: Path, fmt: str = "png") -> Path:
    """``tune.<fmt>``: late fraction against mean lag per strategy, the target, the chosen points."""
    plt = figures.pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, r in enumerate(res.results):
        pts = [
            e
            for e in res.points
            if e.strategy == r.strategy and e.stats["wm_lag_mean_ms"]["mean"] is not None
        ]
        if not pts:
            continue
        xs = [e.stats["wm_lag_mean_ms"]["mean"] / 1000.0 for e in pts]
        ys = [e.stats["late_fraction"]["mean"] for e in pts]
        xerr = [[v / 1000.0 for v in side] for side in error_bars([e.stats["wm_lag_mean_ms"] for e in pts])]
        yerr = error_bars([e.stats["late_fraction"] for e in pts])
        if r.knob is None:
            label = f"{r.strategy}: no bound"
        elif r.status == "met":
            label = f"{r.strategy}: {r.knob.field.rsplit('.', 1)[-1]} = {r.evaluation.bound_ms} ms"
        else:
            label = f"{r.strategy}: not met up to {res.max_bound_ms} ms"
        ax.errorbar(
            xs,
            ys,
            xerr=xerr,
            yerr=yerr,
            marker="o" if r.knob is not None else "D",
            markersize=4,
            capsize=2,
            elinewidth=0.8,
            color=figures.colour(i),
            linestyle=figures.linestyle(i) if len(pts) > 1 else "none",
            label=label,
        )
        if r.status == "met" and r.knob is not None:
            e = r.evaluation
            x, y = e.stats["wm_lag_mean_ms"]["mean"] / 1000.0, e.stats["late_fraction"]["mean"]
            ax.plot(
                x, y, marker="*", markersize=15, color=figures.colour(i), markeredgecolor="black", zorder=5
            )
    ax.axhline(res.target, color="black", linestyle=":", linewidth=1, label=f"target {res.target:g}")
    ax.set_yscale("symlog", linthresh=max(res.target / 10.0, 1e-6))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("watermark lag, mean (s)")
    ax.set_ylabel("late fraction (1)")
    conf = f"{res.replications} seeds, mean and 95 % CI" if res.replications > 1 else "one seed"
    ax.set_title(
        f"{res.scenario.name}: late fraction against watermark lag ({conf})\n"
        "★ each strategy's least bound meeting the target",
        fontsize=10,
    )
    figures.legend(ax)
    fig.tight_layout()
    try:
        return figures.save(fig, out_dir, "tune", fmt)
    except OSError as e:
        raise OutputError(f"cannot write {str(out_dir / f'tune.{fmt}')!r}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
