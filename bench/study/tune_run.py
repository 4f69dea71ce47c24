"""``ingestwm tune``'s driver: load a lab scenario, run the search (``bench.study.tune``), write the
outputs (``bench.study.tune_report``) and the manifest, print the table.

Options are checked before anything runs; a scenario in which nothing is random runs one
seed per bound (every seed would give the same run).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..lab.lab_scenario import load_lab_scenario
from ..spec.errors import TuneError
from ..spec.scenario import scenario_to_dict
from .run_options import RunOptions
from .simulate_run import DEFAULT_RUNS_DIR, prepare_output_dir
from .tune import TuneResult, candidates, tune
from .tune_report import format_tune, write_tune

__all__ = ["tune_scenario"]

_DEFAULT = RunOptions()


def tune_scenario(
    name_or_path: str | Path,
    target: float,
    replications: int | None = None,
    overrides: Sequence[str] = (),
    seed: int | None = None,
    out: Path | None = None,
    options: RunOptions = _DEFAULT,
    max_bound_ms: int = 10_000,
    resolution_ms: int = 10,
) -> TuneResult:
    """Load a lab scenario, ``tune`` it, write ``tune.csv``, ``tune_points.csv``, ``tune.json``, the
    figure and ``manifest.json``, and print the table."""
    candidates(max_bound_ms, resolution_ms)  # bad options fail before anything runs
    echo = options.echo
    sc = load_lab_scenario(name_or_path, overrides, seed)
    n = replications if replications is not None else (sc.replications if sc.replications > 1 else 5)
    if n < 1:
        raise TuneError(f"--replications must be >= 1, got {n}")
    if n > 1 and not sc.random_parts:  # a trace replayed as it is: every seed gives the same run
        echo(f"note: nothing in {sc.name} is random, so one run per bound is exact (not {n})")
        n = 1
    out_dir = prepare_output_dir(out if out is not None else DEFAULT_RUNS_DIR / f"tune-{sc.name}")
    echo(
        f"tune {sc.name}: least bound with late fraction <= {target:g} "
        f"({'95 % upper confidence bound' if n > 1 else 'one run, no interval'}) over {n} seeds, "
        f"0..{max_bound_ms} ms at {resolution_ms} ms, {options.where()}"
    )
    res = tune(sc, target, n, max_bound_ms, resolution_ms, options)
    files = write_tune(res, out_dir, options.fmt)
    options.manifest().write(
        out_dir,
        "tune",
        list(res.seeds),
        [scenario_to_dict(sc)],
        {"executor": options.executor, "random": list(res.random), "late_target": target},
    )
    files.append("manifest.json")
    echo(format_tune(res))
    echo(f"outputs in {out_dir}/: " + ", ".join(files))
    return res
