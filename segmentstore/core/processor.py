"""The operation processor: one per container, it orders and timestamps every operation.

It hands out ``(seq, timestamp)`` pairs with ``timestamp = max(clock.now(), last_ts)``,
so timestamps never go backwards, also when the wall clock steps back and after
recovery (``restore``). The caller holds the container's lock, validates an operation
completely, then stamps it, logs it and applies it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import accumulate, repeat, starmap
from operator import countOf
from typing import Any, Protocol

from ..checks import checked
from ..clock import Clock
from ..errors import InvalidClockError, StorageError, StoreReadOnlyError
from ..limits import INT64_MAX, INT64_MIN
from .operations import Operation

__all__ = ["OperationProcessor", "OperationSink", "checked_now"]


def checked_now(clock: Clock) -> int:
    """``clock.now()``, refused with ``InvalidClockError`` unless it is an int64 of milliseconds. O(1).

    A float (seconds times 1000), ``None`` or a value beyond int64 would be stored
    as an ingestion time and break every later operation; refusing it before anything
    is stamped leaves the store as it was, and usable once the clock is fixed.
    """
    now = clock.now()
    if type(now) is int and INT64_MIN < now <= INT64_MAX:
        return now
    return _refuse(clock, now)


def _refuse(clock: Clock, now: object) -> int:
    value = None
    if not isinstance(now, bool) and hasattr(now, "__index__"):
        value = operator.index(now)  # type: ignore[arg-type]  # an int subclass, a numpy integer
        if INT64_MIN < value <= INT64_MAX:
            return value
    what = "beyond int64" if value is not None else type(now).__name__
    raise InvalidClockError(
        f"the store's clock {type(clock).__name__} returned {now!r} ({what}); a clock must return "
        "whole milliseconds as an int in int64 (nothing was changed)"
    )


class OperationSink(Protocol):
    """Where stamped operations go before they apply (the durable log)."""

    def write(self, op: Operation) -> None: ...


class OperationProcessor:
    """Assigns sequence numbers and monotonic timestamps; forwards operations to the log."""

    __slots__ = ("_clock", "_last_ts", "_now", "_read_only", "_seq", "log")

    def __init__(self, clock: Clock, log: OperationSink | None = None) -> None:
        self._clock = clock
        self._now: Callable[[], int] = clock.now  # bound once: the stamp is on every append's path
        self._last_ts = INT64_MIN
        self._seq = 0
        self._read_only: StorageError | None = None
        self.log = log

    @property
    def read_only(self) -> StorageError | None:
        """Why the store refuses writes (``set_read_only``), or ``None``."""
        return self._read_only

    def set_read_only(self, cause: StorageError | None) -> None:
        """Refuse every operation from now on with ``StoreReadOnlyError`` saying ``cause`` (``None``: stop).

        The refusal is the stamp itself (``_now`` raises), so it costs the hot path nothing,
        and every operation has been validated, and nothing changed, when it comes.
        """
        self._read_only = cause
        self._now = self._clock.now if cause is None else self._refuse_write

    def _refuse_write(self) -> int:
        cause = self._read_only
        assert cause is not None
        raise StoreReadOnlyError(
            f"the store is read-only: it serves reads and refuses writes, because at start-up {cause} "
            "(free space or fix the permissions, then restart the store)",
            cause.path,
            cause.errno,
        )

    @property
    def last_timestamp(self) -> int:
        return self._last_ts

    @property
    def last_seq(self) -> int:
        return self._seq

    def now(self) -> int:
        """The timestamp the next operation would get, without stamping one. O(1)."""
        now = checked_now(self._clock)
        return now if now > self._last_ts else self._last_ts

    def stamp(self) -> tuple[int, int]:
        """Give the next operation its ``(seq, timestamp)``. O(1)."""
        now = self._now()
        if type(now) is not int or not INT64_MIN < now <= INT64_MAX:
            now = _refuse(self._clock, now)
        last = self._last_ts
        if now > last:
            self._last_ts = last = now
        seq = self._seq = self._seq + 1
        return seq, last

    def stamp_each(self, stamps: list[int], count: int) -> None:
        """Stamp ``count`` operations as ``count`` calls of ``stamp`` would, their timestamps appended
        to ``stamps``: each its own clock reading, checked as ``stamp`` checks it, and its own
        sequence number. O(count), the work per operation in C (a clock's own ``now`` aside).

        The clock is read ``count`` times first, then the readings are stamped in order, each the
        greatest so far (never back): the same timestamps as a loop of ``stamp`` whose operations
        took no time between two readings. On a reading ``stamp`` would refuse, or a clock that
        raises, the operations before it are stamped (in ``stamps``) and the error raised, as that
        loop would leave them; a read-only store refuses the first (nothing stamped).
        """
        nows: list[Any] = []
        try:
            nows += starmap(self._now, repeat((), count))  # (a clock's error keeps the readings before it)
        finally:
            self._stamp_readings(nows, stamps)

    def _stamp_readings(self, nows: list[Any], stamps: list[int]) -> None:
        """``stamp_each``'s readings stamped, each the greatest so far, up to the first ``stamp`` would
        refuse (then raised). O(len), in C when every reading is an int64 int."""
        good = nows
        try:
            if nows and (
                countOf(map(type, nows), int) < len(nows) or min(nows) <= INT64_MIN or max(nows) > INT64_MAX
            ):  # rare: each taken as stamp takes it, up to the first it refuses
                good = []
                for now in nows:
                    ok = type(now) is int and INT64_MIN < now <= INT64_MAX
                    good.append(now if ok else _refuse(self._clock, now))
        finally:
            if good:
                ts = accumulate(good, max, initial=self._last_ts)
                next(ts)  # (the initial value: the last timestamp before these)
                stamps += ts
                self._last_ts = stamps[-1]
                self._seq += len(good)

    def stamp_many(self, count: int) -> tuple[int, int]:
        """``count`` operations at one timestamp (one clock reading): (first seq, timestamp). O(1).

        For a compound operation (a delete with its transactions) that must not be left
        half done by a clock refused between two of its parts.
        """
        seq, ts = self.stamp()
        self._seq += count - 1
        return seq, ts

    def restore_state(self, seq: int, timestamp: int) -> None:
        """After recovery: continue after ``seq`` and never below ``timestamp``."""
        if seq > self._seq:
            self._seq = seq
        if timestamp > self._last_ts:
            self._last_ts = timestamp

    @checked
    def _check(self) -> None:
        assert self._seq >= 0, f"sequence number went negative: {self._seq}"
        refusing = self._now == self._refuse_write
        assert refusing == (self._read_only is not None), (
            f"read-only is {self._read_only!r}, but the stamp {'refuses' if refusing else 'takes'} writes"
        )
