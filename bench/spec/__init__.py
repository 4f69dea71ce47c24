"""bench.spec: the one scenario language every tool reads — the simulator, the lab, sweeps, ``validate``.

The bottom of ``bench/``: it imports nothing else of it (the shipped files it finds are data,
in ``bench/scenarios/``).

- ``scenario``: the frozen scenario schema, YAML loading, ``--set`` overrides;
  ``fields`` (shared field types: distributions, ...) and ``writers`` (a writer's spec).
- ``loader``: finding shipped files, reading YAML, building frozen dataclasses with errors
  that name the field, ``key=value`` overrides (scenarios and sweeps alike).
- ``schema_doc``: the schema as Markdown (``ingestwm scenario schema``, docs/scenario-schema.md).
- ``strategy_classes``: custom strategies by ``module:Class``, loaded and checked when a
  scenario loads (the lab runs them: ``bench.lab.plugins``).
- ``seeds``: what a scenario's seed means — one generator per component, spawned by name.
- ``errors``: ``SpecError`` and the experiment side's one root ``SimulationError``.
"""

from .errors import (
    ExecutorError,
    OutputError,
    ScenarioError,
    SimulationError,
    SpecError,
    SweepError,
    TuneError,
)
from .loader import build_dataclass, find, read_mapping, read_yaml, shipped
from .scenario import (
    Scenario,
    apply_overrides,
    load_scenario,
    parse_override,
    scenario_from_dict,
    scenario_to_dict,
    shipped_scenarios,
)
from .seeds import Seeds

__all__ = [
    "ExecutorError",
    "OutputError",
    "Scenario",
    "ScenarioError",
    "Seeds",
    "SimulationError",
    "SpecError",
    "SweepError",
    "TuneError",
    "apply_overrides",
    "build_dataclass",
    "find",
    "load_scenario",
    "parse_override",
    "read_mapping",
    "read_yaml",
    "scenario_from_dict",
    "scenario_to_dict",
    "shipped",
    "shipped_scenarios",
]
