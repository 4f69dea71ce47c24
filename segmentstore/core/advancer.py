"""The watermark advancer: moves the tail watermark of idle segments (PDP-26 "Watermark Advancer").

One code path, two ways to drive it: ``run_pass()`` called by a simulation on its own
clock (no threads, deterministic), or ``start()`` for a background thread that runs a
pass every ``polling_period_ms`` of real time and survives (and logs) a failed pass.
Each pass also expires future reads whose ingestion-clock deadline has passed, aborts
open transactions whose lease ran out (``StoreConfig.transaction_lease_ms``), and
then evicts inactive segments (``segmentstore.core.eviction``): an evicted idle segment
costs no operation until it is used again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from ..config import StoreConfig
from .container import SegmentContainer
from .eviction import Evictor

__all__ = ["AdvancerStats", "WatermarkAdvancer"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AdvancerStats:
    """Counters of the advancer: the overhead of idleness."""

    passes: int
    segments_examined: int
    segments_advanced: int
    failed_passes: int
    segments_evicted: int = 0
    transactions_expired: int = 0


class WatermarkAdvancer:
    """Periodically advances idle segments' watermarks through the operation processor."""

    def __init__(
        self, container: SegmentContainer, config: StoreConfig, evictor: Evictor | None = None
    ) -> None:
        self._container = container
        self._config = config
        self._evictor = evictor
        self._evicted = 0
        self._expired = 0
        self._passes = 0
        self._examined = 0
        self._advanced = 0
        self._failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run_pass(self) -> list[str]:
        """One pass: expire due reads, advance idle segments, abort expired transactions, evict. O(n)."""
        with self._lock:
            self._container.reads.expire_future_reads()
            advanced, examined = self._container.advance_idle_watermarks()
            self._expired += len(self._container.expire_transactions())
            if self._evictor is not None:
                self._evicted += len(self._evictor.run_pass())
            self._passes += 1
            self._examined += examined
            self._advanced += len(advanced)
            return advanced

    @property
    def stats(self) -> AdvancerStats:
        return AdvancerStats(
            self._passes, self._examined, self._advanced, self._failed, self._evicted, self._expired
        )

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the background thread (wall-clock mode). Idempotent."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="ingestwm-advancer", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the background thread and wait for it. Idempotent."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)
        self._thread = None

    def _loop(self) -> None:
        period_s = self._config.polling_period_ms / 1000.0
        while not self._stop.wait(period_s):
            try:
                self.run_pass()
            except Exception:
                if self._stop.is_set():
                    return
                self._failed += 1
                _log.exception("watermark advancer pass failed; the next pass runs as scheduled")
