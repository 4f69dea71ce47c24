"""The simulation clock: a ``segmentstore`` ``Clock`` over a SimPy environment's ``now``.

SimPy time is an ``int`` of milliseconds since the scenario's start; ``SimClock.now()`` adds
the scenario's absolute start (ms since the epoch), so the store, the reader group and the
pipeline all see one simulated ingestion clock (docs/design.md §1). No wall clock is read.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SimClock"]


class SimClock:
    """``now() = start_ms + env.now``: milliseconds since the epoch on simulated time. O(1)."""

    __slots__ = ("_env", "start_ms")

    def __init__(self, env: Any, start_ms: int) -> None:
        if isinstance(start_ms, bool) or not isinstance(start_ms, int):
            raise TypeError(f"SimClock: start_ms must be an int of ms, got {start_ms!r}")
        self._env = env
        self.start_ms = start_ms

    def now(self) -> int:
        # (``env.now`` is a property returning ``env._now``: read directly, as a reader's poll asks the
        # clock about a dozen times)
        return self.start_ms + int(self._env._now)

    def elapsed(self) -> int:
        """Milliseconds since the scenario started."""
        return int(self._env.now)

    def __repr__(self) -> str:
        return f"SimClock(start_ms={self.start_ms}, elapsed={self.elapsed()})"
