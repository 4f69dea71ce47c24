"""Every numba kernel of the store made ready at once, before a server answers (docs/design.md §7).

The kernels (``_kernels``: the watermark index's batch lookups and bulk appends;
``_record_kernels``: the record walk) are imported lazily so that an embedded store that
never needs them never imports numba. A server must not do that on its event loop: the
first request needing a kernel would hold every connection while numba imports (about
0.5 s) and, on a first start after installation (an empty numba cache), compiles (10-40 s).
So ``SegmentStoreServer.start`` calls ``warm_kernels`` before it accepts a connection; it
also starts the threads of the parallel kernels (numba does at their first launch).

Every kernel a request can call has explicit signatures, all compiled when its module
is imported, and numba compiles nothing more for them (a dispatcher with explicit
signatures refuses new ones): once warm, no request compiles, and none waits on
another's compilation. ``warm_kernels`` checks that and reports what it did.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..clock import monotonic_s

__all__ = ["KernelWarmup", "warm_kernels", "kernel_dispatchers"]


@dataclass(frozen=True, slots=True)
class KernelWarmup:
    """What ``warm_kernels`` did: how long it took, kernel signatures ready, how many it compiled."""

    seconds: float
    signatures: int
    compiled: int
    """Signatures compiled now (numba's cache did not hold them: a first start); the rest were loaded."""

    def describe(self) -> str:
        """One line for ``ingestwm serve``."""
        how = (
            f"{self.compiled} compiled (numba's cache was empty: a first start), "
            f"{self.signatures - self.compiled} loaded from the cache"
            if self.compiled
            else "loaded from numba's cache"
        )
        return f"kernels ready in {self.seconds:.2f} s ({self.signatures} kernel signatures, {how})"


_lock = threading.Lock()
_done: KernelWarmup | None = None


def _modules() -> tuple[ModuleType, ...]:
    from . import _record_kernels, records, watermark_index

    kernels = watermark_index._kernels()  # imports them and binds the scalar entry point
    records.prepare(1 << 62)  # binds the record walk
    return kernels, _record_kernels


def kernel_dispatchers() -> dict[str, Any]:
    """The store's numba kernels that Python code calls, by ``module.name`` (imports them). O(kernels)."""
    from numba.core.registry import CPUDispatcher

    out: dict[str, Any] = {}
    for mod in _modules():
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and not name.startswith("_"):
                out[f"{mod.__name__}.{name}"] = obj
    return out


def _start_thread_pool() -> None:
    """One batch lookup large enough for the parallel kernels (sorted and not): numba starts its
    threads at the first parallel launch (about 0.1 s), here rather than under a request."""
    import numpy as np

    from .watermark_index import _PAR_MIN, WatermarkIndex

    index = WatermarkIndex(0)
    for i in range(1, 65):
        index.record_write(i * 16, i)
    queries = np.arange(_PAR_MIN, dtype=np.int64) % index.length
    index.watermarks_at(np.sort(queries))
    index.watermarks_at(queries)


def warm_kernels() -> KernelWarmup:
    """Import (load from numba's cache, or compile) every kernel of the store; the first call's report.

    Thread-safe and idempotent: later calls return the first report at once. Raises
    ``RuntimeError`` if a kernel could still compile on a call (it has no explicit signature).
    """
    global _done
    with _lock:
        if _done is not None:
            return _done
        started = monotonic_s()
        dispatchers = kernel_dispatchers()
        lazy = sorted(n for n, d in dispatchers.items() if d._can_compile or not d.signatures)
        if lazy:
            raise RuntimeError(f"numba kernels without explicit signatures would compile on a call: {lazy}")
        _start_thread_pool()
        signatures = sum(len(d.signatures) for d in dispatchers.values())
        compiled = sum(sum(d.stats.cache_misses.values()) for d in dispatchers.values())
        _done = KernelWarmup(monotonic_s() - started, signatures, compiled)
        return _done
