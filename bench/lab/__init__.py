"""bench.lab: the watermark-strategy lab (``ingestwm compare SCENARIO``).

One workload runs through four event-time watermark strategies side by side in one
run — ingestion time with ``maxEventTimeLag``, producer-asserted watermarks, Flink's
bounded out-of-orderness with idleness, Spark's ``max(event_time) - delay`` — with the
same readers, reordering buffer and windows, on a ``ManualClock`` (deterministic: the
workload's randomness comes from the scenario's seed).

- ``lab_scenario``: the lab's view of the one scenario language (``bench.sim.scenario``):
  which scenarios it can run, the strategies' resolved knobs.
- ``lab_autoscale``: ``scaling.mode: auto`` in the lab (the writers' rates, the simulator's plan).
- ``lab_run``: what ``ingestwm compare`` does (overrides, seed, replications, manifest).
- ``compared_strategies``: the four strategies and the shared pipeline.
- ``flink_reader``: the ``flink`` strategy as Flink jobs read a Pravega stream (a subtask
  per reader, Flink's valve across subtasks: ``strategies.flink_source: reader``).
- ``compare``: ``run_compare`` and the per-strategy summary row.
- ``report``: the table, CSV/JSON and the figure.
- ``tune``, ``tune_report``, ``tune_run``: ``ingestwm tune``, each strategy's least bound meeting
  a late-fraction target (the search, its outputs, the command's driver).
- ``plugins``: custom strategies (``strategies.custom``, ``module:Class``; docs/strategies.md);
  ``strategies_contrib`` holds an example (a learned percentile bound).
"""

from .compare import LabResult, run_compare
from .lab_scenario import (
    LabScenario,
    LabScenarioError,
    lab_scenario_from_dict,
    lab_scenarios,
    load_lab_scenario,
)
from .plugins import LabEvent, LabStrategyError, LabWatermarkStrategy
from .report import format_table, plot, write_outputs

__all__ = [
    "LabEvent",
    "LabStrategyError",
    "LabWatermarkStrategy",
    "LabResult",
    "LabScenario",
    "LabScenarioError",
    "format_table",
    "lab_scenario_from_dict",
    "lab_scenarios",
    "load_lab_scenario",
    "plot",
    "run_compare",
    "write_outputs",
]
