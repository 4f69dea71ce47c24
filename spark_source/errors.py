"""The Spark connector's errors: one root, one class for each thing that can be wrong.

Every error names the option, stream, segment or offset that was wrong. Errors raised
by the store's client (``SegmentStoreError``) pass through unchanged.
"""

from __future__ import annotations

__all__ = [
    "SparkSourceError",
    "InvalidOptionError",
    "InvalidOffsetError",
    "DataLossError",
    "SinkError",
    "JavaUnavailableError",
]


class SparkSourceError(Exception):
    """Root of every error ``spark_source`` raises."""


class InvalidOptionError(SparkSourceError, ValueError):
    """An option of the source or sink is missing, unknown or has a bad value (names the option)."""


class InvalidOffsetError(SparkSourceError, ValueError):
    """A source offset (from a checkpoint or a starting position) is malformed (names the field)."""


class DataLossError(SparkSourceError):
    """Data the query still needed is gone (truncated or deleted segment) and ``failOnDataLoss`` is true."""


class SinkError(SparkSourceError):
    """The sink cannot write or commit a micro-batch (names the stream, column or batch)."""


class JavaUnavailableError(SparkSourceError):
    """No usable Java for Spark: names the ``java`` looked for (``JAVA_HOME`` or ``PATH``) and why."""
