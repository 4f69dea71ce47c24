"""PNG plots of a simulation (matplotlib, Agg backend; deterministic: no timestamps in the files).

- ``watermarks.png``: ingestion time, the group watermark, the event-time watermark and
  per-segment watermarks against simulated time (seconds since the start), with
  scaling events and stalls marked; below it the group watermark's lag.
- ``lateness.png``: each delivered event's event time against its ingestion time (when
  the scenario logs events) with late events marked, or the late counts over time;
  below it late events and the reordering buffer over time.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from .errors import OutputError
from .result import SimResult

__all__ = ["plot_result", "MAX_SEGMENT_LINES"]

MAX_SEGMENT_LINES = 40
"""Per-segment watermark lines drawn at most (the first segments by name)."""


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _rel(v: int | None, start: int) -> float | None:
    return None if v is None else (v - start) / 1000.0


def _save(fig: Any, path: Path) -> None:
    try:
        fig.savefig(path, dpi=100, metadata={"Software": None})
    except OSError as e:
        raise OutputError(f"cannot write plot {str(path)!r}: {e.strerror or e}") from None


def _marks(ax: Any, result: SimResult) -> None:
    for ev in result.recorder.scale_events:
        ax.axvline(ev["t_ms"] / 1000.0, color="0.6", linestyle=":", linewidth=0.8)
    for spec in result.scenario.readers:
        f = spec.noack
        if f is not None:
            end = f.end_ms if f.end_ms is not None else result.scenario.duration_ms
            ax.axvspan(
                f.start_ms / 1000.0, end / 1000.0, color="tab:red", alpha=0.08, label=f"{spec.name}: no ack"
            )
        if spec.crash_ms is not None:
            ax.axvline(spec.crash_ms / 1000.0, color="tab:red", linewidth=0.8, label=f"{spec.name} crashes")


def _watermarks(plt: Any, result: SimResult, path: Path) -> None:
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
        color="tab:blue",
        linewidth=1.8,
        label="group watermark (ingestion time)",
    )
    ax.plot(
        t,
        [_rel(r["event_time_watermark"], start) for r in rec.samples],
        color="tab:orange",
        linewidth=1.4,
        label="event-time watermark",
    )
    _marks(ax, result)
    ax.set_ylabel("time since start (s)")
    ax.set_title(f"{result.scenario.name}: watermark progression")
    ax.legend(loc="upper left", fontsize=8)
    ax2.plot(t, [r["group_lag_ms"] for r in rec.samples], color="tab:blue")
    bound = result.scenario.store.max_watermark_lag_ms + result.scenario.store.polling_period_ms
    ax2.axhline(bound, color="tab:green", linestyle=":", label="max_watermark_lag + polling_period")
    ax2.set_ylabel("group lag (ms)")
    ax2.set_xlabel("simulated time (s)")
    ax2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _lateness(plt: Any, result: SimResult, path: Path) -> None:
    rec = result.recorder
    start = result.scenario.start_time_ms
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 7), gridspec_kw={"height_ratios": [3, 2]})
    if rec.event_rows:
        groups: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        for row in rec.event_rows:
            if row[7] is not None:
                groups[row[5]].append(((row[8] - start) / 1000.0, (row[7] - start) / 1000.0, row[10]))
        for name in sorted(groups)[:20]:
            pts = groups[name]
            on = [(x, y) for x, y, late in pts if not late]
            off = [(x, y) for x, y, late in pts if late]
            if on:
                ax.scatter(*zip(*on, strict=True), s=10, label=f"{name}")
            if off:
                ax.scatter(*zip(*off, strict=True), s=22, marker="x", label=f"{name} (late)")
        t = [r["t_ms"] / 1000.0 for r in rec.samples]
        ax.plot(
            t,
            [_rel(r["event_time_watermark"], start) for r in rec.samples],
            color="tab:orange",
            label="event-time watermark",
        )
        ax.set_xlabel("ingestion time (s since start)")
        ax.set_ylabel("event time (s since start)")
        ax.set_title(f"{result.scenario.name}: event time vs ingestion time (x = late)")
        ax.legend(loc="upper left", fontsize=8, ncol=2)
    else:
        t = [r["t_ms"] / 1000.0 for r in rec.samples]
        ax.plot(t, [r["events_delivered"] for r in rec.samples], label="events delivered")
        ax.plot(t, [r["events_written"] for r in rec.samples], label="events written", linestyle="--")
        ax.set_ylabel("events")
        ax.set_title(f"{result.scenario.name}: events over time")
        ax.legend(loc="upper left", fontsize=8)
    t = [r["t_ms"] / 1000.0 for r in rec.samples]
    ax2.plot(t, [r["late_event_time"] for r in rec.samples], label="late (event time)")
    ax2.plot(t, [r["late_ingestion"] for r in rec.samples], label="late (ingestion time)")
    ax2.plot(t, [r["late_dropped"] for r in rec.samples], label="dropped by reordering", linestyle=":")
    ax2.plot(t, [r["buffered"] for r in rec.samples], label="buffered by reordering", linestyle="--")
    _marks(ax2, result)
    ax2.set_xlabel("simulated time (s)")
    ax2.set_ylabel("events")
    ax2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_result(result: SimResult, out_dir: Path) -> list[Path]:
    """Write ``watermarks.png`` and ``lateness.png`` into ``out_dir``; returns their paths."""
    plt = _pyplot()
    paths = [out_dir / "watermarks.png", out_dir / "lateness.png"]
    _watermarks(plt, result, paths[0])
    _lateness(plt, result, paths[1])
    return paths
