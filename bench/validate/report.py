"""``ingestwm validate``'s outputs: one text table, ``validate.csv`` and ``validate.json``."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .edges import EDGE_COLUMNS, EdgeCounts
from .mutations import MutationOutcome
from .verdict import Verdict

__all__ = [
    "format_verdicts",
    "write_verdicts",
    "format_edges",
    "format_mutations",
    "write_rows",
    "mutation_rows",
]


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


def _table(head: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body]
    return lines


def format_edges(edges: Sequence[EdgeCounts]) -> str:
    """Per generated scenario, the edge cases its lab run hit (``edges.EdgeCounts``), and the totals."""
    head = [
        "scenario",
        "ties flink",
        "ties spark",
        "behind spark",
        "window edges flink",
        "window edges spark",
        "idle transitions",
        "rebalances",
    ]
    rows = [[e.scenario, *(str(getattr(e, c)) for c in EDGE_COLUMNS)] for e in edges]
    rows.append(["total", *(str(sum(getattr(e, c) for e in edges)) for c in EDGE_COLUMNS)])
    lines = _table(head, rows)
    lines.append(
        "(ties: events at exactly the watermark they met; behind: Spark rows between the previous batch's "
        "watermark and their own batch's; window edges: a watermark on a window's last millisecond; "
        "rebalances: readers joining late, offline, leaving or restarting, and scale events)"
    )
    return "\n".join(lines)


def format_mutations(outcomes: Sequence[MutationOutcome]) -> str:
    """Per mutation: the model it breaks, the scenarios on which each engine's check found it, and
    whether it was caught; then, for each, the first difference the check named."""
    head = ["mutation", "model", "flink caught", "spark caught", "lab _check", "verdict", "bug"]
    rows = []
    for o in outcomes:
        cells = [f"{len(o.caught[e])}/{o.scenarios}" if e in o.caught else "-" for e in ("flink", "spark")]
        rows.append(
            [
                o.mutation.name,
                "+".join(o.mutation.models),
                *cells,
                str(o.invariant_broken) if o.invariant_broken else "-",
                "SURVIVED" if o.survived else "caught",
                o.mutation.bug,
            ]
        )
    lines = _table(head, rows)
    lines.append(
        "(caught: runs whose check said differs; lab _check: lab runs in which the mutated model broke "
        "one of its own invariants, not counted)"
    )
    for o in outcomes:
        if o.first:
            lines.append(f"{o.mutation.name}: {o.first}")
    return "\n".join(lines)


def write_rows(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """``rows`` (dicts with the same keys) as a CSV file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return path


def mutation_rows(outcomes: Sequence[MutationOutcome]) -> list[dict[str, Any]]:
    """One row per mutation (``mutations.csv``)."""
    return [
        {
            "mutation": o.mutation.name,
            "models": "+".join(o.mutation.models),
            "bug": o.mutation.bug,
            "scenarios": o.scenarios,
            "flink_caught": len(o.caught.get("flink", ())) if "flink" in o.caught else None,
            "spark_caught": len(o.caught.get("spark", ())) if "spark" in o.caught else None,
            "flink_caught_by": " ".join(o.caught.get("flink", ())),
            "spark_caught_by": " ".join(o.caught.get("spark", ())),
            "invariant_broken": o.invariant_broken,
            "survived": o.survived,
            "first_difference": o.first,
        }
        for o in outcomes
    ]
