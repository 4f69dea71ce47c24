"""The validation package's errors: one root, and the engine that cannot run here."""

from __future__ import annotations

__all__ = ["ValidateError", "EngineUnavailableError", "EngineRunError"]


class ValidateError(Exception):
    """Root of ``bench.validate``'s errors."""


class EngineUnavailableError(ValidateError):
    """An engine is not installed or cannot start here (no PyFlink, no Java); the message says which."""


class EngineRunError(ValidateError):
    """An engine ran but its run cannot be compared (a failed query, a replay that lost alignment)."""
