"""The experiment side's errors: the loader's ``SpecError`` and the one root ``SimulationError``.

Every message names the field or file at fault. They sit here, with the scenario language at
the bottom of ``bench/``, because every layer above raises them: the language (``SpecError``,
``ScenarioError``, ``SweepError``: the shared YAML loader raises them with the dotted path of
the field), the simulation, the lab and the study layer (``OutputError``, ``ExecutorError``,
``TuneError``). ``SimulationError`` is the root a caller catches for all but ``SpecError``'s
plain loader errors; its name is the simulator's, where it began.
"""

from __future__ import annotations

__all__ = [
    "SpecError",
    "SimulationError",
    "ScenarioError",
    "SweepError",
    "OutputError",
    "ExecutorError",
    "TuneError",
]


class SpecError(ValueError):
    """A spec file, field or override is invalid; ``field`` is its dotted path (``""`` if none).

    The scenarios' ``ScenarioError`` (the lab's ``LabScenarioError`` is the same class)
    and the sweeps' ``SweepError`` are subclasses: the loader raises the class its caller names.
    """

    def __init__(self, message: str, field: str = "") -> None:
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}" if field else message)

    def under(self, prefix: str) -> SpecError:
        """The same error (same class) with its field path below ``prefix``."""
        path = f"{prefix}.{self.field}" if self.field else prefix
        return type(self)(self.detail, path)


class SimulationError(Exception):
    """Root of every error raised by ``bench.spec``, ``bench.sim``, ``bench.lab`` and ``bench.study``."""


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
