"""bench.sim: a discrete-event simulation (SimPy) driving the real segment store and reader groups.

- ``scenario``: the frozen scenario schema, YAML loading, ``--set`` overrides.
- ``workloads``: rate models, event times (skew, jitter) and vectorised framing.
- ``actors`` / ``readers``: the world and its SimPy processes (writers, transactions,
  scaling, the watermark advancer, readers with joins, leaves, crashes and stalls).
- ``pipeline``: ``flink_compat``'s event-time reordering and windows after the readers.
- ``metrics`` / ``plots``: samples over simulated time, JSON/CSV/Parquet and PNG outputs.
- ``runner``: ``run_scenario`` and ``write_result``.
"""

from .clock import SimClock
from .errors import OutputError, ScenarioError, SimulationError, SweepError
from .runner import SimResult, run_scenario, write_result
from .scenario import (
    Scenario,
    apply_overrides,
    load_scenario,
    scenario_from_dict,
    scenario_to_dict,
    shipped_scenarios,
)

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
