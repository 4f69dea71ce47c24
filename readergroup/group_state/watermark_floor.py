"""``WatermarkFloor``: the least watermark over a changing set of segments, for the group watermark.

``GroupModel`` keeps one ``(watermark, segment)`` pair per incomplete segment and asks
for the least watermark after every update; a report moves a few segments' watermarks
up. A binary heap in C (``heapq``) whose entries are lower bounds: each live segment has
an entry at or below its watermark, so ``move`` up only writes the new watermark down
(no heap work: most reports move segments that are not the least), ``remove`` only
forgets the segment, and ``least`` looks at the top: an entry below its segment's
watermark is replaced by the watermark (one sift), one of a removed segment or above it
(left by a ``remove`` and ``add`` again, or a move down) is popped. The heap is rebuilt
from the live pairs when it holds more than about twice as many entries. Costs: ``add``
and a move down O(log n), a move up and ``remove`` O(1) amortised, ``least`` O(1)
amortised plus O(log n) per segment moved since it was the least, iteration O(n log n).
Deterministic (no set-iteration order): equal replicas answer alike.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from segmentstore.checks import checked

__all__ = ["WatermarkFloor"]

_SLACK = 64  # stale entries tolerated beyond the live ones before a rebuild


class WatermarkFloor:
    """``(watermark, segment)`` pairs, one per segment; the least watermark in O(1) amortised.

    The part of ``sortedcontainers.SortedList`` the group model used (``add``, ``remove``,
    ``len``, sorted iteration) and ``least()`` for ``[0][0]``. Not thread-safe.
    """

    __slots__ = ("_heap", "_live")

    def __init__(self, pairs: Iterable[tuple[int, str]] = ()) -> None:
        self._live: dict[str, int] = {}
        for wm, name in pairs:
            if name in self._live:
                raise ValueError(f"segment {name!r} given twice")
            self._live[name] = wm
        self._heap: list[tuple[int, str]] = [(wm, name) for name, wm in self._live.items()]
        heapq.heapify(self._heap)

    def add(self, pair: tuple[int, str]) -> None:
        """Add ``(watermark, segment)``; ``ValueError`` if the segment is in already. O(log n)."""
        wm, name = pair
        if name in self._live:
            raise ValueError(f"segment {name!r} is in the floor already (at {self._live[name]})")
        self._live[name] = wm
        self._push(pair)

    def remove(self, pair: tuple[int, str]) -> None:
        """Remove ``(watermark, segment)``; ``ValueError`` if not in. O(1) amortised."""
        wm, name = pair
        if self._live.get(name) != wm:
            raise ValueError(f"({wm}, {name!r}) is not in the floor")
        del self._live[name]
        if len(self._heap) > 2 * len(self._live) + _SLACK:
            self._rebuild()

    def move(self, name: str, old: int, new: int) -> None:
        """``remove((old, name))`` then ``add((new, name))``, in one step: O(1) up, O(log n) down."""
        live = self._live
        if live.get(name) != old:
            raise ValueError(f"({old}, {name!r}) is not in the floor")
        live[name] = new
        if new < old:  # its entry is no lower bound any more
            self._push((new, name))

    def least(self) -> int:
        """The least watermark; ``IndexError`` when empty. O(1) amortised (O(log n) per stale top)."""
        heap, live = self._heap, self._live
        while heap:
            wm, name = heap[0]
            now = live.get(name)
            if now == wm:
                return wm
            if now is not None and now > wm:  # a lower bound: the segment moved up since
                heapq.heapreplace(heap, (now, name))
            else:  # removed, or moved down (its lower entry is in the heap too)
                heapq.heappop(heap)
        raise IndexError("the watermark floor is empty")

    def _push(self, pair: tuple[int, str]) -> None:
        if len(self._heap) >= 2 * len(self._live) + _SLACK:
            self._rebuild()  # (holds ``pair``: its segment is live)
        else:
            heapq.heappush(self._heap, pair)

    def _rebuild(self) -> None:
        self._heap = [(w, n) for n, w in self._live.items()]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._live)

    def __bool__(self) -> bool:
        return bool(self._live)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        """The pairs in ascending order (as a ``SortedList`` iterates). O(n log n)."""
        return iter(sorted((wm, name) for name, wm in self._live.items()))

    @checked
    def _check(self) -> None:
        """Assert: a heap holding an entry at or below each live pair, at most twice as many entries as
        live pairs (+ slack), its least the least live watermark."""
        heap = self._heap
        assert all(heap[(i - 1) // 2] <= heap[i] for i in range(1, len(heap))), "not a heap"
        lowest: dict[str, int] = {}
        for w, n in heap:
            if w < lowest.get(n, w + 1):
                lowest[n] = w
        assert all(lowest.get(n, wm + 1) <= wm for n, wm in self._live.items()), "a live pair has no entry"
        assert len(heap) <= 2 * len(self._live) + _SLACK + 1, "stale entries were not compacted"
        if self._live:
            assert self.least() == min(self._live.values())
