"""The lab's outputs: one text table, CSV, JSON, and one matplotlib figure with every strategy.

``format_table`` is what ``ingestwm compare`` prints; ``write_outputs`` writes
``compare.csv``, ``compare.json`` (rows and series) and ``compare.<png|svg|pdf>``
(watermark lag over time, reordering buffer over time, late fraction and completeness,
result latency p50/p95/p99/max) in the shared figure style (``bench.study.figures``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from ..lab.compare import LabResult
from ..lab.lab_scenario import lab_strategies
from . import figures

__all__ = ["COLUMNS", "format_table", "write_outputs", "plot"]

COLUMNS = (
    ("strategy", "strategy"),
    ("late", "late"),
    ("late_fraction", "late frac"),
    ("completeness", "complete"),
    ("windows_fired", "windows"),
    ("wm_lag_mean_ms", "lag mean ms"),
    ("wm_lag_max_ms", "lag max ms"),
    ("result_latency_p50_ms", "result p50 ms"),
    ("result_latency_p95_ms", "p95 ms"),
    ("result_latency_p99_ms", "p99 ms"),
    ("result_latency_max_ms", "max ms"),
    ("buffer_peak_events", "buf events"),
    ("buffer_peak_bytes", "buf bytes"),
)


def _cell(key: str, row: dict[str, Any]) -> str:
    v = row[key]
    if v is None:
        return "-"
    if key == "windows_fired":
        return f"{v}/{row['windows']}"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def format_table(result: LabResult) -> str:
    """A fixed-width table, one line per strategy, under a one-line header with the event count."""
    head = [h for _, h in COLUMNS]
    body = [[_cell(k, r) for k, _ in COLUMNS] for r in result.rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        f"{result.scenario.name}: {result.events_written} events, windows of {result.scenario.window_ms} ms; "
        f"flink: {_flink_source(result)} topology",
        _line(head, widths),
    ]
    lines.extend(_line(row, widths) for row in body)
    stages = result.scenario.pipeline.stages
    if stages:
        head = ["stage lag ms (watermark/output)", *(s.name for s in stages)]
        body = [
            [
                r["strategy"],
                *(
                    f"{_dash(r[f'{s.name}_wm_lag_mean_ms'])}/{_dash(r[f'{s.name}_output_lag_mean_ms'])}"
                    for s in stages
                ),
            ]
            for r in result.rows
        ]
        widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
        lines.append(_line(head, widths))
        lines.extend(_line(row, widths) for row in body)
    for name, t in result.ended_ms.items():
        lines.append(
            f"{name}: watermark ∞ (event time ended) from t = {t / 1000:g} s; "
            "its lags are over the samples before"
        )
    return "\n".join(lines)


def _flink_source(result: LabResult) -> str:
    """The topology the ``flink`` row used (``strategies.flink_source``: reader or segment_union)."""
    return lab_strategies(result.scenario).flink_source


def _dash(v: Any) -> str:
    return "-" if v is None else str(v)


def _line(cells: list[str], widths: list[int]) -> str:
    pairs = enumerate(zip(cells, widths, strict=True))
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in pairs)


def write_outputs(result: LabResult, out_dir: Path, plots: bool = True, fmt: str = "png") -> list[Path]:
    """Write ``compare.csv``, ``compare.json`` and (with ``plots``) ``compare.<fmt>``; returns the paths."""
    figures.check(fmt)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "compare.csv", out_dir / "compare.json"]
    with paths[0].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(result.rows[0]))
        w.writeheader()
        w.writerows(result.rows)
    doc = {
        "scenario": result.scenario.name,
        "events": result.events_written,
        "flink_source": _flink_source(result),
        "rows": list(result.rows),
        "series": {k: [list(s) for s in v] for k, v in result.series.items()},
    }
    if result.scenario.scaling.mode == "auto":  # load-driven: the scenario does not say when
        doc["scale_events_ms"] = list(result.scale_events_ms)
    if result.ended_ms:  # the series hold null from then on (docs/metrics.md)
        doc["watermark_end_of_time_ms"] = dict(result.ended_ms)
    if result.outages:
        doc["store_outages"] = [{"start_ms": a, "end_ms": b} for a, b in result.outages]
    paths[1].write_text(json.dumps(doc, indent=1) + "\n")
    if plots:
        paths.append(plot(result, out_dir / f"compare.{fmt}"))
    return paths


def plot(result: LabResult, path: Path) -> Path:
    """One figure, four panels: lag over time, buffer over time, late/completeness bars, latency bars.

    With ``stages``, two more: the mean watermark lag and output lag of each stage per strategy.

    The format is the path's suffix (``png``, ``svg`` or ``pdf``). Each strategy keeps
    its Okabe-Ito colour in every panel; scaling events are marked on the time panels.
    """
    fmt = figures.check(path.suffix.lstrip("."))
    plt = figures.pyplot()
    sc = result.scenario
    names = [r["strategy"] for r in result.rows]
    stages = [st.name for st in sc.pipeline.stages]
    fig, ax = plt.subplots(3 if stages else 2, 2, figsize=(12, 12 if stages else 8))
    start = sc.start_time_ms
    for i, name in enumerate(names):
        label = f"flink ({_flink_source(result)})" if name == "flink" else name
        style = {"color": figures.colour(i), "linestyle": figures.linestyle(i), "label": label}
        pts = [  # none yet or +inf (event time ended): no lag, left out as in the table
            (t / 1000, (start + t - wm) / 1000) for t, wm, _, _ in result.series[name] if wm is not None
        ]
        ax[0][0].plot([p[0] for p in pts], [p[1] for p in pts], **style)
        ax[0][1].plot(
            [t / 1000 for t, *_ in result.series[name]], [b for _, _, b, _ in result.series[name]], **style
        )
    ax[0][0].set(
        title="watermark lag (now - watermark)", xlabel="time since start (s)", ylabel="watermark lag (s)"
    )
    ax[0][1].set(title="reordering buffer", xlabel="time since start (s)", ylabel="events held (count)")
    marks = [t / 1000 for t in result.scale_events_ms]
    for a in (ax[0][0], ax[0][1]):
        if marks:
            figures.mark_scaling(a, marks, "scale")
        for k, (down, up) in enumerate(result.outages):
            a.axvspan(down / 1000, up / 1000, color="0.6", alpha=0.2, label="store down" if k == 0 else None)
    x = list(range(len(names)))
    late = [r["late_fraction"] for r in result.rows]
    comp = [r["completeness"] for r in result.rows]
    ax[1][0].bar([i - 0.2 for i in x], late, width=0.4, label="late fraction", color=figures.OKABE_ITO[4])
    ax[1][0].bar([i + 0.2 for i in x], comp, width=0.4, label="completeness", color=figures.OKABE_ITO[2])
    ax[1][0].set(
        title="late events and window completeness",
        ylim=(0, 1.25),
        ylabel="fraction (of events delivered / written)",
        xlabel="strategy",
    )
    keys = ("p50", "p95", "p99", "max")
    width = 0.8 / len(keys)
    for k, key in enumerate(keys):
        vals = [(r[f"result_latency_{key}_ms"] or 0) / 1000 for r in result.rows]
        offs = [i - 0.4 + width * (k + 0.5) for i in x]
        ax[1][1].bar(offs, vals, width=width, label=key, color=figures.OKABE_ITO[(3, 1, 5, 7)[k]])
    ax[1][1].set(
        title="result latency (window fired - window end)", ylabel="result latency (s)", xlabel="strategy"
    )
    bar_axes = [ax[1][0], ax[1][1]]
    if stages:
        width = 0.8 / (len(stages) + 1)
        levels = ["reorder", *stages]
        for a, what, label in (
            (ax[2][0], "wm_lag", "mean watermark lag (s)"),
            (ax[2][1], "output_lag", "mean output lag (s)"),
        ):
            for k, stage in enumerate(levels):
                if k == 0 and what == "output_lag":
                    continue  # the reordering step's output lag is not in the rows
                key = "wm_lag_mean_ms" if k == 0 else f"{stage}_{what}_mean_ms"
                vals = [(r[key] or 0) / 1000 for r in result.rows]
                offs = [i - 0.4 + width * (k + 0.5) for i in x]
                a.bar(offs, vals, width=width, label=f"{k}: {stage}", color=figures.colour(k))
            a.set(title=f"{label[5:-4]} per pipeline stage", ylabel=label, xlabel="strategy")
            bar_axes.append(a)
    rotate = 20 if len(names) > 5 else 0
    for a in bar_axes:
        a.set_xticks(x, names, rotation=rotate)
    for a in bar_axes[1:]:  # room above the bars for the legend
        low, high = a.get_ylim()
        a.set_ylim(low, high + 0.3 * (high - low))
    for a in ax.flat:
        figures.legend(a)
    fig.suptitle(f"{sc.name}: {result.events_written} events, windows of {(sc.window_ms or 0) / 1000:g} s")
    fig.tight_layout()
    try:
        out = figures.save(fig, path.parent, path.stem, fmt)
    finally:
        plt.close(fig)
    return out
