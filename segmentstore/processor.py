"""The operation processor: one per container, it orders and timestamps every operation.

It hands out ``(seq, timestamp)`` pairs with ``timestamp = max(clock.now(), last_ts)``,
so timestamps never go backwards, also when the wall clock steps back and after
recovery (``restore``). The caller holds the container's lock, validates an operation
completely, then stamps it, logs it and applies it.
"""

from __future__ import annotations

from typing import Protocol

from .attributes import INT64_MIN
from .clock import Clock
from .operations import Operation

__all__ = ["OperationProcessor", "OperationSink"]


class OperationSink(Protocol):
    """Where stamped operations go before they apply (the durable log)."""

    def write(self, op: Operation) -> None: ...


class OperationProcessor:
    """Assigns sequence numbers and monotonic timestamps; forwards operations to the log."""

    __slots__ = ("_clock", "_last_ts", "_seq", "log", "stamped")

    def __init__(self, clock: Clock, log: OperationSink | None = None) -> None:
        self._clock = clock
        self._last_ts = INT64_MIN
        self._seq = 0
        self.log = log
        self.stamped = 0

    @property
    def last_timestamp(self) -> int:
        return self._last_ts

    @property
    def last_seq(self) -> int:
        return self._seq

    def now(self) -> int:
        """The timestamp the next operation would get, without stamping one. O(1)."""
        now = self._clock.now()
        return now if now > self._last_ts else self._last_ts

    def stamp(self) -> tuple[int, int]:
        """Give the next operation its ``(seq, timestamp)``. O(1)."""
        now = self._clock.now()
        if now > self._last_ts:
            self._last_ts = now
        self._seq += 1
        self.stamped += 1
        return self._seq, self._last_ts

    def restore(self, seq: int, timestamp: int) -> None:
        """After recovery: continue after ``seq`` and never below ``timestamp``."""
        if seq > self._seq:
            self._seq = seq
        if timestamp > self._last_ts:
            self._last_ts = timestamp

    def _check(self) -> None:
        assert self._seq >= 0, f"sequence number went negative: {self._seq}"
