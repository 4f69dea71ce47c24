"""``LeastLoad``: the fewest segments any reader of a group holds, cached between updates.

The group model's rebalancing asks it on every reader's sync (``release_count``,
``acquire_count``); recounting every reader each time would be O(readers). The cache
keeps ``(least, how many readers hold exactly that)`` and the model's handlers tell it
what changed — one reader's load fell, one's rose (or it left), a reader joined empty —
so it stays exact, or is dropped when the minimum may rise (the last reader at the
minimum took more) and recounted on the next question. O(1) per change, O(readers) per
recount. Deterministic: it only caches a function of the replica.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from segmentstore.checks import checked

from .state_records import Slot

__all__ = ["LeastLoad"]


class LeastLoad:
    """The least number of segments a reader holds, kept by the model's handlers. Not thread-safe."""

    __slots__ = ("_least",)

    def __init__(self) -> None:
        self._least: tuple[int, int] | None = None  # (fewest segments a reader holds, readers holding that)

    def get(self, readers: Mapping[str, Slot]) -> int:
        """The fewest segments any of ``readers`` holds (0 without readers). O(1) cached, else O(readers)."""
        if self._least is None:
            loads = [len(s.segments) for s in readers.values()]
            least = min(loads, default=0)
            self._least = (least, loads.count(least))
        return self._least[0]

    def fell(self, new: int) -> None:
        """A reader holds ``new`` segments, fewer than before (no other reader's load changed)."""
        if self._least is not None:
            least, at = self._least
            if new < least:
                self._least = (new, 1)
            elif new == least:
                self._least = (least, at + 1)

    def rose(self, before: int) -> None:
        """A reader that held ``before`` segments holds more, or left (no other reader's load changed)."""
        if self._least is not None and before == self._least[0]:
            least, at = self._least
            self._least = (least, at - 1) if at > 1 else None  # the last at the minimum: it may rise

    def joined(self) -> None:
        """A reader joined, holding nothing."""
        if self._least is not None:
            least, at = self._least
            self._least = (least, at + 1) if least == 0 else (0, 1)

    def drop(self) -> None:
        """Every load may have changed (a reset): recount on the next question."""
        self._least = None

    def check(self, readers: Iterable[Slot]) -> None:
        """``_check`` against the model's readers (what it caches equals a recount). O(readers)."""
        self._check_loads([len(s.segments) for s in readers])

    @checked
    def _check(self) -> None:
        """Assert the cached pair is well formed (a recount needs the readers: ``check``)."""
        assert self._least is None or min(self._least) >= 0, self._least

    def _check_loads(self, loads: list[int]) -> None:
        self._check()
        if self._least is not None:
            least = min(loads, default=0)
            assert self._least == (least, loads.count(least)), f"stale least load {self._least}"
