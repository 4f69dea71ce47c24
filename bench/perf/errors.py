"""The benchmark suite's one error root."""

from __future__ import annotations

__all__ = ["BenchmarkError"]


class BenchmarkError(Exception):
    """A benchmark module is unknown or malformed, a size is unknown, or a result is not right."""
