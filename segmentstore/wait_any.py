"""Waiting on many segments at once: ``ReadyFuture``, the answer to ``wait_any``.

A reader holding k segments at their tails used to re-read each of them to learn of
new data; ``wait_any`` replaces those k polls by one wait. A request is ``(segment,
offset, known watermark)``; it is *ready* when a read at ``offset`` would return
something the caller has not seen:

- data at ``offset`` (``offset < length``);
- the segment sealed (the read says end of segment);
- a tail watermark above ``known watermark`` (a zero-length read carries it);
- an error that read would raise (truncated below ``offset``, deleted, merged away).

The future's result is the sorted indexes of every ready request — at least one —
or ``()`` once it timed out. The caller then reads the ready segments as usual (so
errors surface where reads handle them). Registering costs O(k) and one waiting read
per segment; a wake-up costs O(k) once.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any

from .errors import InvalidArgumentError
from .limits import INT64_MAX, INT64_MIN

__all__ = [
    "ReadyFuture",
    "WaitRequest",
    "check_wait_requests",
    "check_wait_ms",
    "MAX_WAIT_REQUESTS",
    "MAX_WAIT_MS",
]

WaitRequest = tuple[str, int, int]
"""``(segment name, read offset, the watermark the caller knows there)``."""

MAX_WAIT_REQUESTS = 65_536

MAX_WAIT_MS = 2**31 - 1
"""The longest wait of a read or ``wait_any`` (~24.8 days); beyond it a platform timer may overflow."""


def check_wait_ms(what: str, wait_ms: object) -> int:
    """``wait_ms`` as an int in ``[0, MAX_WAIT_MS]``; ``InvalidArgumentError`` starting with ``what``."""
    if type(wait_ms) is not int or not 0 <= wait_ms <= MAX_WAIT_MS:
        raise InvalidArgumentError(
            f"{what}: wait_ms must be an int in [0, {MAX_WAIT_MS}], got {wait_ms!r:.40}"
        )
    return wait_ms


def check_wait_requests(requests: object) -> list[WaitRequest]:
    """The requests as a list of ``(str, int >= 0, int64)``; ``InvalidArgumentError`` naming the bad one."""
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
        raise InvalidArgumentError(
            f"wait_any: requests must be a sequence of (segment, offset, watermark), got {requests!r:.80}"
        )
    if not 0 < len(requests) <= MAX_WAIT_REQUESTS:
        raise InvalidArgumentError(
            f"wait_any: between 1 and {MAX_WAIT_REQUESTS} requests, got {len(requests)}"
        )
    out: list[WaitRequest] = []
    for i, r in enumerate(requests):
        if type(r) is tuple and len(r) == 3:  # the common case, checked as below: kept as it is
            name, offset, wm = r
            if (
                type(name) is str
                and type(offset) is int
                and offset >= 0
                and type(wm) is int
                and INT64_MIN <= wm <= INT64_MAX
            ):
                out.append(r)
                continue
        ok = isinstance(r, (tuple, list)) and len(r) == 3
        if ok:
            name, offset, wm = r
            ok = (
                type(name) is str
                and type(offset) is int
                and offset >= 0
                and type(wm) is int
                and INT64_MIN <= wm <= INT64_MAX
            )
        if not ok:
            raise InvalidArgumentError(
                f"wait_any: request {i} must be (segment name, offset >= 0, int64 watermark), got {r!r:.80}"
            )
        out.append((name, offset, wm))
    return out


class ReadyFuture(concurrent.futures.Future[tuple[int, ...]]):
    """The indexes of the ready requests of a ``wait_any``; ``()`` after a timeout."""

    def __init__(self, cancel: Callable[[ReadyFuture], None]) -> None:
        super().__init__()
        self.parts: list[Any] = []  # the waiting reads registered for it (the store's)
        self._cancel_parts = cancel

    def wait(self, timeout_s: float | None = None) -> tuple[int, ...]:
        """Block until a request is ready; after ``timeout_s`` seconds, ``()``."""
        try:
            return self.result(timeout_s)
        except concurrent.futures.TimeoutError:
            self.expire()
            return self.result()

    def expire(self) -> None:
        """Stop waiting now: unregister, and complete with ``()`` unless already complete."""
        self._cancel_parts(self)
        self.settle(())

    def settle(self, result: tuple[int, ...] | BaseException) -> None:
        """Complete once; later calls (a racing wake-up or timeout) are ignored."""
        try:
            if isinstance(result, BaseException):
                self.set_exception(result)
            else:
                self.set_result(result)
        except concurrent.futures.InvalidStateError:
            pass

    def __repr__(self) -> str:
        return f"<ReadyFuture of {len(self.parts)} reads {'done' if self.done() else 'waiting'}>"
