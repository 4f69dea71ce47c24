"""bench.scenarios: the shipped YAML specs, and the one loader every tool reads them with.

- ``*.yaml``: simulator scenarios (``ingestwm simulate NAME``, ``bench.sim.scenario``).
- ``lab/*.yaml``: lab scenarios (``ingestwm compare NAME``, ``bench.lab.lab_scenario``).
- ``sweeps/*.yaml``: parameter grids (``ingestwm experiment NAME``, ``bench.sim.sweep``).
- ``yaml_specs``: finding shipped files, reading YAML, building frozen dataclasses with
  errors that name the field, ``key=value`` overrides; ``errors``: ``SpecError``.
"""

from .errors import SpecError
from .yaml_specs import (
    apply_overrides,
    build_dataclass,
    find,
    parse_override,
    read_mapping,
    read_yaml,
    shipped,
)

__all__ = [
    "SpecError",
    "apply_overrides",
    "build_dataclass",
    "find",
    "parse_override",
    "read_mapping",
    "read_yaml",
    "shipped",
]
