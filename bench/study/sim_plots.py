"""Plots of a simulation, as PNG, SVG or PDF (``bench.study.figures``: Okabe-Ito colours, reproducible files).

- ``watermarks.<fmt>``: ingestion time, the group watermark, the event-time watermark and
  per-segment watermarks against simulated time (seconds since the start), with
  scaling events (labelled ``scale n→m``: segments sealed → created) and stalls
  marked; below it the group watermark's lag.
- ``lateness.<fmt>``: each delivered event's event time against its ingestion time (when
  the scenario logs events) with late events marked, or the events over time; below it
  late events and the reordering buffer over time.
- ``stages.<fmt>`` (with ``pipeline.stages``): each stage's watermark lag and output lag.

Every panel has its axis labels with units and its legend inside the axes.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from ..sim.result import SimResult
from ..spec.errors import OutputError
from . import figures

__all__ = ["plot_result", "MAX_SEGMENT_LINES"]

MAX_SEGMENT_LINES = 40
"""Per-segment watermark lines drawn at most (the first segments by name)."""


_BLUE, _ORANGE, _GREEN, _VERMILLION = (figures.OKABE_ITO[i] for i in (3, 0, 2, 4))


def _rel(v: int | None, start: int) -> float | None:
    return None if v is None else (v - start) / 1000.0


def _save(fig: Any, out_dir: Path, stem: str, fmt: str) -> Path:
    try:
        return figures.save(fig, out_dir, stem, fmt)
    except OSError as e:
        raise OutputError(f"cannot write plot {out_dir / stem!s}.{fmt}: {e.strerror or e}") from None


def _marks(ax: Any, result: SimResult) -> None:
    evs = result.recorder.scale_events
    figures.mark_scaling(
        ax,
        [ev["t_ms"] / 1000.0 for ev in evs],
        [f"scale {len(ev['sealed'])}\u2192{len(ev['created'])}" for ev in evs],
    )
    for spec in result.scenario.readers:
        f = spec.noack
        if f is not None:
            end = f.end_ms if f.end_ms is not None else result.scenario.duration_ms
            ax.axvspan(
                f.start_ms / 1000.0, end / 1000.0, color=_VERMILLION, alpha=0.1, label=f"{spec.name}: no ack"
            )
        if spec.crash_ms is not None:
            ax.axvline(spec.crash_ms / 1000.0, color=_VERMILLION, linewidth=0.9, label=f"{spec.name} crashes")


def _watermarks(plt: Any, result: SimResult, out_dir: Path, fmt: str) -> Path:
    rec = result.recorder
    start = result.scenario.start_time_ms
    t = [r["t_ms"] / 1000.0 for r in rec.samples]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    per_seg: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rec.segment_rows:
        if row[6] is not None:
            per_seg[row[1]].append((row[0] / 1000.0, (row[6] - start) / 1000.0))
    for i, name in enumerate(sorted(per_seg)[:MAX_SEGMENT_LINES]):
        xs, ys = zip(*per_seg[name], strict=True)
        ax.plot(xs, ys, color="0.75", linewidth=0.7, label="segment watermarks" if i == 0 else None)
    ax.plot(
        t,
        [r["time_ms"] / 1000.0 - start / 1000.0 for r in rec.samples],
        color="black",
        linewidth=1,
        linestyle="--",
        label="ingestion time (now)",
    )
    ax.plot(
        t,
        [_rel(r["group_watermark"], start) for r in rec.samples],
        color=_BLUE,
        linewidth=1.8,
        label="group watermark (ingestion time)",
    )
    ax.plot(
        t,
        [_rel(r["event_time_watermark"], start) for r in rec.samples],
        color=_ORANGE,
        linewidth=1.4,
        label="event-time watermark",
    )
    _marks(ax, result)
    ax.set_ylabel("time since start (s)")
    ax.set_xlabel("simulated time (s)")
    ax.tick_params(labelbottom=True)
    ax.set_title(f"{result.scenario.name}: watermark progression")
    figures.legend(ax)
    ax2.plot(t, [r["group_lag_ms"] for r in rec.samples], color=_BLUE, label="group watermark lag")
    bound = result.scenario.store.max_watermark_lag_ms + result.scenario.store.polling_period_ms
    ax2.axhline(bound, color=_GREEN, linestyle=":", label="max_watermark_lag + polling_period")
    _marks(ax2, result)
    ax2.set_ylabel("group watermark lag (ms)")
    ax2.set_xlabel("simulated time (s)")
    figures.legend(ax2)
    fig.tight_layout()
    try:
        return _save(fig, out_dir, "watermarks", fmt)
    finally:
        plt.close(fig)


def _lateness(plt: Any, result: SimResult, out_dir: Path, fmt: str) -> Path:
    rec = result.recorder
    start = result.scenario.start_time_ms
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 7), gridspec_kw={"height_ratios": [3, 2]})
    if rec.event_rows:
        groups: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        for row in rec.event_rows:
            if row[7] is not None:
                groups[row[5]].append(((row[8] - start) / 1000.0, (row[7] - start) / 1000.0, row[10]))
        for i, name in enumerate(sorted(groups)[:20]):
            pts = groups[name]
            on = [(x, y) for x, y, late in pts if not late]
            off = [(x, y) for x, y, late in pts if late]
            c = figures.colour(i + 1)  # orange (0) is the event-time watermark
            if on:
                ax.scatter(*zip(*on, strict=True), s=10, color=c, label=f"{name}")
            if off:
                ax.scatter(*zip(*off, strict=True), s=22, marker="x", color=c, label=f"{name} (late)")
        t = [r["t_ms"] / 1000.0 for r in rec.samples]
        ax.plot(
            t,
            [_rel(r["event_time_watermark"], start) for r in rec.samples],
            color=_ORANGE,
            label="event-time watermark",
        )
        ax.set_xlabel("ingestion time (s since start)")
        ax.set_ylabel("event time (s since start)")
        ax.set_title(f"{result.scenario.name}: event time vs ingestion time (x = late)")
        figures.legend(ax, ncol=2)
    else:
        t = [r["t_ms"] / 1000.0 for r in rec.samples]
        ax.plot(t, [r["events_delivered"] for r in rec.samples], color=_BLUE, label="events delivered")
        ax.plot(
            t,
            [r["events_written"] for r in rec.samples],
            color=_ORANGE,
            label="events written",
            linestyle="--",
        )
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("events (count)")
        ax.set_title(f"{result.scenario.name}: events over time")
        figures.legend(ax)
    t = [r["t_ms"] / 1000.0 for r in rec.samples]
    ax2.plot(t, [r["late_event_time"] for r in rec.samples], color=_VERMILLION, label="late (event time)")
    ax2.plot(t, [r["late_ingestion"] for r in rec.samples], color=_BLUE, label="late (ingestion time)")
    ax2.plot(
        t,
        [r["late_dropped"] for r in rec.samples],
        color=figures.OKABE_ITO[5],
        label="dropped by reordering",
        linestyle=":",
    )
    ax2.plot(
        t, [r["buffered"] for r in rec.samples], color=_GREEN, label="buffered by reordering", linestyle="--"
    )
    _marks(ax2, result)
    ax2.set_xlabel("simulated time (s)")
    ax2.set_ylabel("events (count)")
    figures.legend(ax2)
    fig.tight_layout()
    try:
        return _save(fig, out_dir, "lateness", fmt)
    finally:
        plt.close(fig)


def _stages(plt: Any, result: SimResult, out_dir: Path, fmt: str) -> Path:
    """Watermark lag and output lag of every stage (0: the reordering step) over time."""
    names = ["reorder", *(st.name for st in result.scenario.pipeline.stages)]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for k, name in enumerate(names):
        rows = [r for r in result.stage_rows if r[1] == k]
        style = {"color": figures.colour(k), "linestyle": figures.linestyle(k), "label": f"{k}: {name}"}
        ax.plot(
            [r[0] / 1000.0 for r in rows], [None if r[3] is None else r[3] / 1000.0 for r in rows], **style
        )
        ax2.plot(
            [r[0] / 1000.0 for r in rows], [None if r[5] is None else r[5] / 1000.0 for r in rows], **style
        )
    ax.set_title(f"{result.scenario.name}: lag per pipeline stage")
    ax.set_ylabel("watermark lag, now - W_k (s)")
    ax2.set_ylabel("output lag, now - newest result (s)")
    for a in (ax, ax2):
        a.set_xlabel("simulated time (s)")
        a.tick_params(labelbottom=True)
        _marks(a, result)
        figures.legend(a)
    fig.tight_layout()
    try:
        return _save(fig, out_dir, "stages", fmt)
    finally:
        plt.close(fig)


def plot_result(result: SimResult, out_dir: Path, fmt: str = "png") -> list[Path]:
    """Write ``watermarks.<fmt>`` and ``lateness.<fmt>`` (png, svg, pdf) into ``out_dir``; returns them."""
    figures.check(fmt, OutputError)
    plt = figures.pyplot()
    paths = [_watermarks(plt, result, out_dir, fmt), _lateness(plt, result, out_dir, fmt)]
    if result.stage_rows:
        paths.append(_stages(plt, result, out_dir, fmt))
    return paths
