"""Ingestion clocks: the only place the project reads the system time.

Time is an ``int`` of milliseconds since the epoch. Domain code receives a clock and
calls ``now()``; it never reads the system time itself (docs/design.md §1). ``WallClock``
is real time; ``ManualClock`` is advanced, or set (also backwards, to simulate a
wall-clock step back), by its owner: tests and the simulator. ``TickingClock`` is a
manual clock that also moves on its own at every reading, as a busy wall clock seen
by a fast caller does: every operation gets its own millisecond, so code that assumed
"nothing moves between two calls" fails under it as it would in production.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "WallClock", "ManualClock", "TickingClock", "monotonic_s", "process_s"]


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now() -> int`` milliseconds since the epoch."""

    def now(self) -> int: ...


class WallClock:
    """The system's real-time clock, read once per call. O(1)."""

    __slots__ = ()

    def now(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "WallClock()"


class ManualClock:
    """A clock that moves only when told to. Thread-safe; O(1) per call."""

    __slots__ = ("_lock", "_now")

    def __init__(self, start_ms: int = 0) -> None:
        self._now = _check_ms("start_ms", start_ms)
        self._lock = threading.Lock()

    def now(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` (>= 0) and return the new time."""
        _check_ms("ms", ms)
        if ms < 0:
            raise ValueError(f"ManualClock.advance: ms must be >= 0, got {ms}; use set() to step back")
        with self._lock:
            self._now += ms
            return self._now

    def set(self, ms: int) -> int:
        """Set the time to ``ms``; going backwards is allowed (a wall-clock step back)."""
        _check_ms("ms", ms)
        with self._lock:
            self._now = ms
            return ms

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"


class TickingClock(ManualClock):
    """A ``ManualClock`` that also moves ``step_ms`` (default 1) forward at every ``now()``."""

    __slots__ = ("_step",)

    def __init__(self, start_ms: int = 0, step_ms: int = 1) -> None:
        super().__init__(start_ms)
        if _check_ms("step_ms", step_ms) < 0:
            raise ValueError(f"TickingClock: step_ms must be >= 0, got {step_ms}")
        self._step = step_ms

    def now(self) -> int:
        with self._lock:
            self._now += self._step
            return self._now

    def __repr__(self) -> str:
        return f"TickingClock({self._now}, step_ms={self._step})"


def monotonic_s() -> float:
    """Seconds from a monotonic clock, for timeouts and pacing (never for ingestion time)."""
    return time.monotonic()


def process_s() -> float:
    """CPU seconds of this process (every thread), for benchmarks on a shared machine."""
    return time.process_time()


def _check_ms(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int of milliseconds, got {type(value).__name__} {value!r}")
    return value
