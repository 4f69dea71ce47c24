"""The reader group's replicated state: its invariants (``GroupModel._check``).

A mixin of ``group_model.GroupModel``: the attributes it reads are the model's, declared here.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

from segmentstore import StreamSegment
from segmentstore.checks import checked

from ..config import ReaderGroupConfig
from .checkpoint import Checkpoint
from .least_load import LeastLoad
from .state_records import Entry, Pending, Slot
from .watermark_floor import WatermarkFloor

__all__ = ["GroupModelChecks"]


class GroupModelChecks:
    """``GroupModel``'s invariant check (a mixin: it runs on the model, on its state)."""

    config: ReaderGroupConfig
    floor: int
    entries: dict[str, Entry]
    by_wm: WatermarkFloor
    unassigned: SortedList
    readers: dict[str, Slot]
    completed: dict[str, tuple[StreamSegment, int]]
    checkpoints: deque[Pending]
    results: deque[tuple[int, Checkpoint]]
    futures: int
    _least: LeastLoad

    if TYPE_CHECKING:

        def active(self) -> Pending | None: ...

    @checked
    def _check(self) -> None:
        """Assert the replica's invariants (called by property and stress tests). O(n^2) overlaps."""
        self.by_wm._check()
        assert len(self.by_wm) == len(self.entries)
        for wm, name in self.by_wm:
            assert self.entries[name].watermark == wm, f"{name}: stale watermark key"
        unassigned = {n for _, n in self.unassigned}
        assert len(unassigned) == len(self.unassigned)
        owned: dict[str, str] = {}
        for rid, slot in self.readers.items():
            assert slot.reader_id == rid
            for n in slot.segments:
                assert n not in owned, f"{n} is held by {owned[n]} and {rid}"
                owned[n] = rid
        tokens = [s.token for s in self.readers.values()]
        assert len(set(tokens)) == len(tokens), "two readers share a membership token"
        for name, e in self.entries.items():
            assert e.seg.name == name and name not in self.completed
            assert e.position >= 0
            if e.waiting:
                assert e.owner is None and name not in unassigned, f"future {name} is readable"
                assert not (e.waiting & set(self.completed)), f"{name} waits for a completed segment"
            elif e.owner is None:
                assert name in unassigned, f"{name} is readable but neither assigned nor unassigned"
                assert (e.watermark, name) in self.unassigned
            else:
                assert owned.get(name) == e.owner, f"{name}: owner {e.owner} does not hold it"
                assert name not in unassigned
        assert set(owned) <= set(self.entries) and unassigned <= set(self.entries)
        if self.by_wm:
            assert self.by_wm.least() >= self.floor, "the group watermark decreased"
        readable = [e.seg for e in self.entries.values() if not e.waiting]
        assert self.futures == len(self.entries) - len(readable), "stale count of future segments"
        self._least.check(self.readers.values())
        for i, a in enumerate(readable):
            for b in readable[i + 1 :]:
                assert not (a.stream == b.stream and a.overlaps(b.key_low, b.key_high)), (
                    f"readable segments {a.name} and {b.name} overlap"
                )
        cp = self.active()
        if cp is not None and cp.waiting is not None:
            assert cp.waiting <= set(self.readers), "checkpoint waits for an offline reader"
            assert not (cp.waiting & cp.crossed)
        pending = [c.name for c in self.checkpoints]
        assert len(set(pending)) == len(pending), "two checkpoints in progress share a name"
        tokens = [c.token for c in self.checkpoints] + [t for t, _ in self.results]
        assert len(set(tokens)) == len(tokens), "two checkpoints share a token"
        assert len(self.results) <= self.config.checkpoints_kept
        for name, (c, _) in self.completed.items():  # kept only while it can be named again
            assert c.name == name
            assert any(
                e.seg.stream == c.stream and e.seg.epoch < c.epoch and e.seg.overlaps(c.key_low, c.key_high)
                for e in self.entries.values()
            ), f"completed segment {name} is kept though no entry precedes it"
