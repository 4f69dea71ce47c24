"""bench.scenarios: the shipped YAML specs, and the one loader every tool reads them with.

- ``*.yaml``: scenarios in the one scenario language (``bench.sim.scenario``): the
  simulator runs any (``ingestwm simulate NAME``), the lab any with windows
  (``ingestwm compare NAME``; those made for it have a ``strategies:`` section).
- ``sweeps/*.yaml``: parameter grids of either (``ingestwm experiment NAME``, ``bench.sim.sweep``).
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
