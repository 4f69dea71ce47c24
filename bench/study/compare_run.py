"""What ``ingestwm compare`` does, apart from its command-line parsing (kept in ``bench.cli.app``).

``compare_scenario`` loads a scenario with ``--set`` overrides and a ``--seed``, checks
the lab can run it, runs it once (printing the table; ``--out``: the CSV, JSON, figure
in ``--format`` and ``manifest.json``) or over ``replications`` seeds (``bench.study.replicate``: mean and
95 % intervals per strategy and metric).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..lab.compare import LabResult, run_compare
from ..lab.lab_scenario import LabScenarioError, load_lab_scenario
from ..spec.scenario import Scenario, scenario_to_dict
from .compare_report import format_table, write_outputs
from .run_options import RunOptions
from .simulate_run import DEFAULT_RUNS_DIR, prepare_output_dir

__all__ = ["compare_scenario"]

_DEFAULT = RunOptions()


def _with_progress(sc: Scenario, show: bool | None) -> LabResult:
    """``run_compare`` with a tqdm bar over simulated seconds (on a terminal by default)."""
    from tqdm import tqdm

    if show is None:
        show = sys.stderr.isatty()
    with tqdm(
        total=sc.duration_ms / 1000.0, unit="sim s", desc=sc.name, disable=not show, leave=False
    ) as bar:

        def report(t_ms: int) -> None:
            bar.update(t_ms / 1000.0 - bar.n)

        return run_compare(sc, progress=report if show else None)


def compare_scenario(
    name_or_path: str,
    overrides: Sequence[str] = (),
    seed: int | None = None,
    out: Path | None = None,
    plots: bool = True,
    replications: int | None = None,
    options: RunOptions = _DEFAULT,
) -> LabResult | dict[str, Any]:
    """Run the lab on a scenario once (a ``LabResult``) or over seeds (the aggregate); print and write
    (figures as ``options.fmt``)."""
    sc = load_lab_scenario(name_or_path, overrides, seed)
    n = replications if replications is not None else sc.replications
    if n < 1:
        raise LabScenarioError(f"must be >= 1, got {n}", "replications")
    if n > 1:
        from .replicate import run_replications

        out_dir = prepare_output_dir(out if out is not None else DEFAULT_RUNS_DIR / f"compare-{sc.name}-x{n}")
        return run_replications("compare", sc, n, out_dir, options, plots)
    if out is not None:
        prepare_output_dir(out)
    result = _with_progress(sc, options.progress)
    echo = options.echo
    echo(format_table(result))
    if out is not None:
        for path in write_outputs(result, out, plots=plots, fmt=options.fmt):
            echo(f"wrote {path}")
        path = options.manifest().write(
            out, "compare", [sc.seed], [scenario_to_dict(sc)], {"random": sc.random_parts}
        )
        echo(f"wrote {path}")
    return result
