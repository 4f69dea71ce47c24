"""Eviction of inactive segments from the container's active set (PDP-26 "Eviction of Inactive Segments").

A segment is inactive when no client has read, written or asked about it for
``StoreConfig.eviction_age_ms`` of ingestion time. The watermark advancer's trivial
updates do not count as use (``use=False``), so idle segments are still evicted: the
advancer no longer spends an operation per lag period on them. Beyond
``max_active_segments``, the least recently used go too. Segments with waiting future
reads stay. Eviction runs in each advancer pass (``Evictor.run_pass``), so between
passes the active set may exceed the cap. A use is dated with the processor's last
timestamp (the hot path reads no clock); each pass re-dates the segments used since
the previous one to the pass's time, so a store where nothing is stamped for a long
time still keeps what is being read.

Evicted state goes to a cold store: ``MemoryColdStore`` (the ``Segment`` objects, when
there is no data directory) or the durable store's (a state file per segment, see
``segmentstore.durable.data_dir``). The next read, write or info reactivates the segment with
all its state (the container calls ``Evictor.reactivate`` on a miss, so a hit stays a
plain dict lookup); if it has been idle for ``max_watermark_lag_ms`` its watermark is
advanced at once (PDP-26's open question), so a reader never sees a stale tail.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..checks import checked
from ..config import StoreConfig
from .container import SegmentContainer
from .operations import Append, CreateSegment, MergeTransaction, Operation
from .segment import Segment

__all__ = ["ColdStore", "EvictionStats", "Evictor", "MemoryColdStore"]


@dataclass(frozen=True, slots=True)
class EvictionStats:
    """Counters of eviction: segments active and cold now, evictions and reactivations so far."""

    active: int
    cold: int
    evicted: int
    reactivated: int
    advanced_on_reactivation: int


class ColdStore(Protocol):
    """Where evicted segments' state lives until they are used again."""

    def evict(self, seg: Segment) -> None:
        """Keep ``seg``'s state and release its resources; raise (changing nothing) if it cannot."""

    def load(self, name: str) -> Segment:
        """Rebuild the evicted segment ``name`` and forget it here."""

    def __contains__(self, name: object) -> bool: ...

    def __len__(self) -> int: ...

    def names(self) -> Iterable[str]: ...

    def _check(self) -> None: ...


class MemoryColdStore:
    """Cold map for a store without a data directory: the evicted ``Segment`` objects. O(1) each way."""

    def __init__(self) -> None:
        self._segments: dict[str, Segment] = {}

    def evict(self, seg: Segment) -> None:
        self._segments[seg.name] = seg

    def load(self, name: str) -> Segment:
        return self._segments.pop(name)

    def __contains__(self, name: object) -> bool:
        return name in self._segments

    def __len__(self) -> int:
        return len(self._segments)

    def names(self) -> Iterator[str]:
        return iter(self._segments)

    @checked
    def _check(self) -> None:
        for name, seg in self._segments.items():
            assert seg.name == name, f"cold segment stored under {name!r} is named {seg.name!r}"
            assert not seg.futures, f"cold segment {name!r} has waiting reads"
            seg._check()


class Evictor:
    """Moves inactive segments of one container to a cold store and back."""

    def __init__(self, container: SegmentContainer, config: StoreConfig, cold: ColdStore) -> None:
        self._container = container
        self._config = config
        self.cold = cold
        self._evicted = 0
        self._reactivated = 0
        self._advanced = 0
        container.set_cold(self)

    # ------------------------------------------------------------------ container hooks (lock held)
    def is_cold(self, name: object) -> bool:
        """Whether ``name`` is an evicted segment. O(1)."""
        return name in self.cold

    def cold_names(self) -> list[str]:
        """Names of the evicted segments. O(cold)."""
        return list(self.cold.names())

    def reactivate(self, name: str, advance: bool = True) -> Segment | None:
        """Bring ``name`` back into the active set; ``None`` if it is not cold. The container's lock is held.

        With ``advance``, a segment idle past ``max_watermark_lag_ms`` gets the
        advancer's trivial update at once (not counted as use).
        """
        if name not in self.cold:
            return None
        seg = self.cold.load(name)
        self._reactivated += 1
        if self._container.reinstate(seg, advance):
            self._advanced += 1
        return seg

    def activate_for_replay(self, op: Operation) -> None:
        """Reactivate (without advancing) the cold segments a replayed operation touches."""
        if not len(self.cold) or isinstance(op, CreateSegment):
            return
        if isinstance(op, MergeTransaction):
            names: tuple[str, ...] = (op.txn, op.parent)
        elif isinstance(op, Append):
            names = (op.name,)
        else:
            names = (getattr(op, "name", ""),)
        for n in names:
            if self._container.active(n) is None:
                self.reactivate(n, advance=False)

    # ------------------------------------------------------------------ the pass
    def run_pass(self) -> list[str]:
        """Evict segments unused for ``eviction_age_ms``, then the LRU beyond ``max_active_segments``.

        Returns the names evicted. O(active) plus O(k log active) for the LRU cap.
        """
        c = self._container
        cfg = self._config
        out: list[str] = []
        with c.lock:
            c.check_open()
            proc = c.processor
            if proc.read_only is not None:
                return out  # evicting writes state files, which a read-only store cannot
            now = proc.now()
            threshold = now - cfg.eviction_age_ms
            # A use is dated with the processor's last timestamp (no clock read on the hot
            # path). A segment still dated exactly that was used since the previous pass
            # (each pass re-dates those): date it ``now``, so a quiet store (no operation
            # stamped for a long time) does not evict what is being read.
            last = proc.last_timestamp
            victims = []
            for s in c.active_segments():
                used = s.last_used
                if used == last:
                    s.last_used = used = now
                if used <= threshold and not s.futures:
                    victims.append(s)
            excess = c.active_count - len(victims) - cfg.max_active_segments
            if excess > 0:
                chosen = {id(s) for s in victims}
                rest = (s for s in c.active_segments() if not s.futures and id(s) not in chosen)
                victims.extend(heapq.nsmallest(excess, rest, key=_last_used))
            for seg in victims:
                self.cold.evict(seg)  # raises, changing nothing, if it cannot
                c.evict(seg.name)
                out.append(seg.name)
                self._evicted += 1
        return out

    @property
    def stats(self) -> EvictionStats:
        c = self._container
        return EvictionStats(c.active_count, len(self.cold), self._evicted, self._reactivated, self._advanced)

    @checked
    def _check(self) -> None:
        """Assert no segment is both active and cold, and the cold store's own invariants."""
        c = self._container
        with c.lock:
            for name in self.cold.names():
                assert c.active(name) is None, f"segment {name!r} is both active and evicted"
            self.cold._check()


def _last_used(seg: Segment) -> int:
    return seg.last_used
