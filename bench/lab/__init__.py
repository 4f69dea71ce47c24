"""bench.lab: the watermark-strategy lab — one workload through several strategies, each as if alone.

One workload runs through four event-time watermark strategies — ingestion time with
``maxEventTimeLag``, producer-asserted watermarks, Flink's bounded out-of-orderness with
idleness, Spark's ``max(event_time) - delay`` — and the scenario's custom ones, each
with a reader group of its own (the same readers), the same reordering buffer and
windows. The workload is the simulator's, run on its SimPy clock (deterministic: the
randomness comes from the scenario's seed), so ``simulate`` and ``compare`` run the same
appends; the writers' producer assertions go only into the copy of the stream the
event-time strategies read. Imports only ``bench.spec`` and ``bench.sim`` below it;
``ingestwm compare``'s outputs, replications and ``ingestwm tune`` are the study
layer's (``bench.study``).

- ``lab_scenario``: the lab's view of the one scenario language (``bench.spec.scenario``):
  which scenarios it can run, the strategies' resolved knobs.
- ``lab_autoscale``: ``scaling.mode: auto`` in the lab (the writers' rates, the simulator's plan).
- ``compared_strategies``: the four strategies and the shared pipeline.
- ``flink_reader``: the ``flink`` strategy as Flink jobs read a Pravega stream (a subtask
  per reader, Flink's valve across subtasks: ``strategies.flink_source: reader``).
- ``lab_readers``: a strategy's readers, read as the simulator's readers read.
- ``asserting_writer``: the writers of the asserted copy (the workload's, plus their markers).
- ``compare``: ``run_compare`` (the copies, each strategy's group), ``LabResult``, the
  per-strategy summary row.
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

__all__ = [
    "LabEvent",
    "LabStrategyError",
    "LabWatermarkStrategy",
    "LabResult",
    "LabScenario",
    "LabScenarioError",
    "lab_scenario_from_dict",
    "lab_scenarios",
    "load_lab_scenario",
    "run_compare",
]
