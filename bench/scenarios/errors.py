"""The spec loader's one error root: a YAML spec file, field or override is invalid, and where."""

from __future__ import annotations

__all__ = ["SpecError"]


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
