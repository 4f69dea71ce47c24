"""The Flink compatibility layer's errors: one root, one class for each thing that can be wrong.

Every error names the option, operator or subtask that was wrong.
"""

from __future__ import annotations

__all__ = [
    "FlinkCompatError",
    "InvalidConfigError",
    "MissingTimestampError",
    "CheckpointError",
]


class FlinkCompatError(Exception):
    """Root of every error ``flink_compat`` raises."""


class InvalidConfigError(FlinkCompatError, ValueError):
    """An option has the wrong type or value (negative lag, zero window size, ...)."""


class MissingTimestampError(FlinkCompatError):
    """An event-time operator received a record without a timestamp."""


class CheckpointError(FlinkCompatError):
    """A checkpoint cannot be taken or restored (malformed state, wrong operator, ...)."""
