"""bench.study: what turns runs into results a researcher publishes — outputs, replications, sweeps.

Above the simulation (``bench.sim``) and the lab (``bench.lab``), which it runs; below
``validate``, the benchmarks and the CLI.

- ``simulate_run``: what ``ingestwm simulate`` does (output directory, progress bar,
  summary); ``sim_outputs``: a run's files (``write_result``); ``sim_plots``: its figures.
- ``compare_run``: what ``ingestwm compare`` does; ``compare_report``: its table,
  CSV/JSON and figure.
- ``tune``, ``tune_report``, ``tune_run``: ``ingestwm tune``, each strategy's least bound
  meeting a late-fraction target (the search, its outputs, the command's driver).
- ``experiment``: tasks (one run of simulate or compare) in local processes or Spark
  tasks, and their aggregation; ``worker_preload``: what the local pool's forkserver
  loads once; ``strategy_shipping``: custom strategies' modules to Spark's executors.
- ``replicate``: ``--replications``; ``sweep``: ``ingestwm experiment``, grids of either.
- ``run_options``: ``RunOptions``, how every driver runs and reports (executor, jobs, master,
  progress, echo, provenance, figure format), built once by the CLI.
- ``stats``: mean, sd, Student-t 95 % intervals cut to each metric's domain.
- ``manifest``: ``manifest.json``, the provenance of every output directory.
- ``figures``: the house style of every figure (Okabe-Ito colours, reproducible files).
"""

from .compare_report import format_table, plot, write_outputs
from .compare_run import compare_scenario
from .replicate import run_replications
from .run_options import RunOptions
from .sim_outputs import write_result
from .simulate_run import simulate, simulate_replications
from .sweep import load_sweep, run_experiment, shipped_sweeps
from .tune_run import tune_scenario

__all__ = [
    "compare_scenario",
    "format_table",
    "load_sweep",
    "plot",
    "run_experiment",
    "run_replications",
    "RunOptions",
    "shipped_sweeps",
    "simulate",
    "simulate_replications",
    "tune_scenario",
    "write_outputs",
    "write_result",
]
