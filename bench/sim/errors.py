"""The simulator's one error root and its subclasses; every message names the field or file at fault."""

from __future__ import annotations

__all__ = ["SimulationError", "ScenarioError", "SweepError", "OutputError"]


class SimulationError(Exception):
    """Root of every error raised by ``bench.sim`` (the simulator and its sweeps)."""


class ScenarioError(SimulationError):
    """A scenario file, field or override is invalid; ``field`` is its dotted path (``""`` if none)."""

    def __init__(self, message: str, field: str = "") -> None:
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}" if field else message)

    def under(self, prefix: str) -> ScenarioError:
        """The same error with its field path below ``prefix``."""
        path = f"{prefix}.{self.field}" if self.field else prefix
        return type(self)(self.detail, path)


class SweepError(SimulationError):
    """A sweep file is invalid (names the key at fault)."""


class OutputError(SimulationError):
    """An output directory cannot be created or written."""
