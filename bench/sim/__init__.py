"""bench.sim: a discrete-event simulation (SimPy) driving the real segment store and reader groups.

- ``scenario``: the frozen scenario schema, YAML loading, ``--set`` overrides.
- ``workloads``: rate models, event times (skew, jitter) and vectorised framing.
- ``actors`` / ``readers``: the world and its SimPy processes (writers, transactions,
  scaling, the watermark advancer, readers with joins, leaves, crashes and stalls).
- ``pipeline``: ``flink_compat``'s event-time reordering and windows after the readers.
- ``stages``: ``pipeline.stages``, a chain of window/aggregate operators with lag per stage.
- ``recorder`` / ``plots``: samples over simulated time, JSON/CSV/Parquet and PNG/SVG/PDF
  figures (``bench.figures``).
- ``engine``: ``run_scenario`` and ``write_result``; ``result``: the ``SimResult`` they share.
- ``sim_clock``: ``SimClock``, the store's ingestion clock on SimPy time.
- ``simulate``: what ``ingestwm simulate`` does (output directory, progress bar, summary).
- ``sweep``: ``ingestwm experiment`` — a grid of simulations, one per Spark task.
"""

from .engine import run_scenario, write_result
from .errors import OutputError, ScenarioError, SimulationError, SweepError
from .result import SimResult
from .scenario import (
    Scenario,
    apply_overrides,
    load_scenario,
    scenario_from_dict,
    scenario_to_dict,
    shipped_scenarios,
)
from .sim_clock import SimClock

__all__ = [
    "OutputError",
    "Scenario",
    "ScenarioError",
    "SimClock",
    "SimResult",
    "SimulationError",
    "SweepError",
    "apply_overrides",
    "load_scenario",
    "run_scenario",
    "scenario_from_dict",
    "scenario_to_dict",
    "shipped_scenarios",
    "write_result",
]
