"""What ``ingestwm simulate`` does, apart from its command-line parsing (kept in ``bench.cli.app``).

``prepare_output_dir`` checks an output directory is writable *before* a run starts;
``simulate`` loads a scenario with overrides, runs it with an optional progress bar,
writes the outputs and prints a short summary. Bad input raises a ``SimulationError``
subclass whose message is one line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from segmentstore import SegmentStore

from ..sim.engine import run_scenario
from ..sim.result import SimResult
from ..spec.errors import OutputError, ScenarioError
from ..spec.scenario import Scenario, load_scenario, scenario_to_dict
from .run_options import RunOptions
from .sim_outputs import write_result

__all__ = [
    "DEFAULT_RUNS_DIR",
    "prepare_output_dir",
    "default_out_dir",
    "run_with_progress",
    "simulate",
    "simulate_replications",
    "summary_lines",
    "fmt_ms",
]

_DEFAULT = RunOptions()

DEFAULT_RUNS_DIR = Path("runs")


def prepare_output_dir(path: Path) -> Path:
    """Create ``path`` if needed and check a file can be written in it; raises ``OutputError``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".ingestwm-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OutputError(f"output directory {str(path)!r} is not writable: {e.strerror or e}") from None
    return path


def default_out_dir(scenario: Scenario) -> Path:
    """``runs/<scenario>-seed<seed>``: the same scenario and seed land in the same place."""
    return DEFAULT_RUNS_DIR / f"{scenario.name}-seed{scenario.seed}"


def run_with_progress(
    scenario: Scenario,
    show: bool | None = None,
    after: Callable[[SegmentStore], None] | None = None,
) -> SimResult:
    """Run ``scenario`` with a tqdm bar over simulated seconds (shown only on a terminal by default)."""
    from tqdm import tqdm

    if show is None:
        show = sys.stderr.isatty()
    total = scenario.duration_ms / 1000.0
    with tqdm(total=total, unit="sim s", desc=scenario.name, disable=not show, leave=False) as bar:

        def report(t_ms: int) -> None:
            bar.update(t_ms / 1000.0 - bar.n)

        return run_scenario(scenario, progress=report if show else None, after=after)


def fmt_ms(ms: int | float | None) -> str:
    """A duration in ms as ``1.25 s`` (or ``-`` for none)."""
    if ms is None:
        return "-"
    return f"{ms / 1000.0:,.2f} s"


def simulate(
    name_or_path: str,
    overrides: Sequence[str] = (),
    seed: int | None = None,
    out: Path | None = None,
    options: RunOptions = _DEFAULT,
) -> tuple[SimResult, list[Path]]:
    """Load, run and write a scenario (figures as ``options.fmt``) and its manifest; print a short
    summary. Returns the result and the files written."""
    scenario = load_scenario(name_or_path, overrides, seed)
    out_dir = prepare_output_dir(out if out is not None else default_out_dir(scenario))
    result = run_with_progress(scenario, options.progress)
    paths = write_result(result, out_dir, options.fmt)
    paths.append(
        options.manifest().write(
            out_dir,
            "simulate",
            [scenario.seed],
            [scenario_to_dict(scenario)],
            {"random": scenario.random_parts},
        )
    )
    echo = options.echo
    for line in summary_lines(result):
        echo(line)
    echo(f"outputs in {out_dir}/: " + ", ".join(p.name for p in paths))
    return result, paths


def simulate_replications(
    name_or_path: str,
    replications: int | None,
    overrides: Sequence[str] = (),
    seed: int | None = None,
    out: Path | None = None,
    options: RunOptions = _DEFAULT,
) -> dict[str, Any] | tuple[SimResult, list[Path]]:
    """``simulate`` over ``replications`` seeds (default: the scenario's ``replications``); one run if 1."""
    from .replicate import run_replications

    scenario = load_scenario(name_or_path, overrides, seed)
    n = replications if replications is not None else scenario.replications
    if n < 1:
        raise ScenarioError(f"must be >= 1, got {n}", "replications")
    if n == 1:
        return simulate(name_or_path, overrides, seed, out, options)
    out_dir = prepare_output_dir(
        out if out is not None else DEFAULT_RUNS_DIR / f"{scenario.name}-seed{scenario.seed}-x{n}"
    )
    return run_replications("simulate", scenario, n, out_dir, options, scenario.metrics.plots)


def summary_lines(result: SimResult) -> list[str]:
    """A few lines on what happened: events, lateness, watermark lag and monotonicity, faults."""
    s: dict[str, Any] = result.summary
    ev, wm = s["events"], s["watermark"]
    lines = [
        f"{s['scenario']} (seed {s['seed']}): {fmt_ms(s['duration_ms'])} simulated in {result.wall_s:.2f} s",
        f"  events: {ev['written']:,} written, {ev['delivered']:,} delivered ({ev['unique']:,} distinct, "
        f"{ev['duplicates']:,} again after failover, {ev['missing']:,} missing)",
        f"  late: {ev['late_ingestion']:,} by ingestion time, {ev['late_event_time']:,} by event time",
        f"  group watermark lag: mean {fmt_ms(wm['lag_ms']['mean'])}, max {fmt_ms(wm['lag_ms']['max'])}; "
        f"{'monotonic' if wm['monotonic'] else 'NOT monotonic'}",
    ]
    held = wm.get("held_by") or []
    if held:
        parts = [
            f"{h['segment']} ({h['state']}, {h['bytes'] if h['bytes'] is not None else '?'} bytes, moved by "
            f"{'the advancer' if h['advanced_by'] == 'advancer' else 'reads'}) {fmt_ms(h['ms'])} "
            f"({h['fraction']:.0%})"
            for h in held[:3]
        ]
        more = f"; {len(held) - 3} more" if len(held) > 3 else ""
        lines.append("  group watermark held by: " + "; ".join(parts) + more)
    idle = wm.get("idle")
    if idle is not None:
        lines.append(
            f"  after the last write: lag max {fmt_ms(idle['lag_ms']['max'])} "
            f"(bound max_watermark_lag + polling_period = {fmt_ms(idle['bound_ms'])})"
        )
    for f in s.get("faults", []):
        lines.append(
            f"  fault {f['kind']} on {f['reader']} from {fmt_ms(f['start_ms'])} to {fmt_ms(f['end_ms'])}: "
            f"watermark {'stalled' if f['stalled'] else 'kept moving'}"
            f"{', then resumed' if f['resumed'] else ''}"
        )
    if "pipeline" in s:
        p = s["pipeline"]
        lines.append(
            f"  reordering: {p['ordered_output']:,} emitted in event-time order, "
            f"{p['late_dropped']:,} dropped late, "
            f"up to {p['buffered_max']:,} buffered; {p['windows_fired']} windows fired"
        )
    stages = s.get("pipeline", {}).get("stages")
    if stages:
        for what, key in (("watermark lag", "wm_lag_ms"), ("output lag", "output_lag_ms")):
            chain = " -> ".join(f"{st['name']} {fmt_ms(st[key]['mean'])}" for st in stages)
            lines.append(f"  stages, {what} (mean): {chain}")
    if s["scaling"]["events"]:
        lines.append(f"  scaling: {s['scaling']['events']} scale events")
    random = s.get("random") or []
    lines.append(
        "  random: " + ", ".join(random) if random else "  random: nothing (every seed gives this run)"
    )
    return lines
