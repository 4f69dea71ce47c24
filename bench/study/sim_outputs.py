"""A simulation run's files: ``write_result(result, out_dir, fmt)``.

``summary.json``, the CSV (and, with ``metrics.parquet``, Parquet) series the recorder
holds (``bench.sim.recorder``), ``stages.csv`` with ``pipeline.stages``, and the plots
(``sim_plots``) when ``metrics.plots`` is on. Deterministic: the same result gives the
same bytes. O(samples + delivered events).
"""

from __future__ import annotations

from pathlib import Path

from ..sim.recorder import write_outputs
from ..sim.result import SimResult
from ..sim.stages import write_stages_csv
from .sim_plots import plot_result

__all__ = ["write_result"]


def write_result(result: SimResult, out_dir: Path, fmt: str = "png") -> list[Path]:
    """Write the summary, series and plots (as ``fmt``: png, svg, pdf) into ``out_dir``; returns the files."""
    sc = result.scenario
    paths = write_outputs(out_dir, result.summary, result.recorder, sc.metrics.parquet)
    if result.stage_rows:
        paths.append(write_stages_csv(out_dir, result.stage_rows))
    if sc.metrics.plots:
        paths += plot_result(result, out_dir, fmt)
    return paths
