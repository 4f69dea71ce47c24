"""``ingestwm validate``'s outputs: one text table, ``validate.csv`` and ``validate.json``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .verdict import Verdict

__all__ = ["format_verdicts", "write_verdicts"]


def _pair(a: int | None, b: int | None) -> str:
    return "-" if a is None else f"{a} / {b}"


def format_verdicts(verdicts: Sequence[Verdict]) -> str:
    """A fixed-width table: per scenario and strategy, model / engine, then the verdict and why."""
    head = [
        "scenario",
        "strategy",
        "engine",
        "pace ms",
        "late",
        "windows",
        "watermark equal",
        "max |Δwm| ms",
        "verdict",
    ]
    body = []
    for v in verdicts:
        body.append(
            [
                v.scenario,
                v.strategy,
                v.engine,
                "-" if v.pace_ms is None else str(v.pace_ms),
                _pair(v.late_model, v.late_engine),
                _pair(v.windows_model, v.windows_engine),
                f"{v.wm_equal}/{v.wm_checked}" if v.wm_checked else "-",
                "-" if v.wm_max_diff_ms is None else str(v.wm_max_diff_ms),
                v.verdict,
            ]
        )
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body]
    lines.append(
        "(late, windows: model / engine; watermark: per micro-batch for Spark, per event for Flink;"
        " pace: Flink's wall-clock ms per lab tick in the paced replay, - in the driven Java job)"
    )
    for v in verdicts:
        if v.verdict != "exact":
            lines.append(f"{v.scenario} {v.strategy}: {v.verdict}: {v.note}")
    return "\n".join(lines)


def write_verdicts(verdicts: Sequence[Verdict], out_dir: Path, meta: dict[str, Any]) -> list[Path]:
    """Write ``validate.csv`` and ``validate.json`` (rows and ``meta``); returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [v.as_dict() for v in verdicts]
    paths = [out_dir / "validate.csv", out_dir / "validate.json"]
    with paths[0].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(Verdict.__slots__))
        w.writeheader()
        w.writerows(rows)
    paths[1].write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return paths
