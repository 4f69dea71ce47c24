"""The simulator's one error root and its subclasses; every message names the field or file at fault.

Scenario and sweep errors are also ``bench.scenarios.SpecError``: the shared YAML loader
raises them with the dotted path of the field.
"""

from __future__ import annotations

from ..scenarios.errors import SpecError

__all__ = ["SimulationError", "ScenarioError", "SweepError", "OutputError", "ExecutorError", "TuneError"]


class SimulationError(Exception):
    """Root of every error raised by ``bench.sim`` (the simulator and its sweeps)."""


class ScenarioError(SimulationError, SpecError):
    """A scenario file, field or override is invalid; ``field`` is its dotted path (``""`` if none)."""


class SweepError(SimulationError, SpecError):
    """A sweep file is invalid (names the key at fault)."""


class OutputError(SimulationError):
    """An output directory cannot be created or written."""


class ExecutorError(SimulationError):
    """A run failed on a Spark executor with the simulator's error (its one line, and where it ran)."""


class TuneError(SimulationError):
    """``ingestwm tune`` cannot search as asked (names the option or strategy at fault)."""
