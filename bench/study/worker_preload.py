"""Imported once by the forkserver of ``experiment.execute``'s worker pool: what every replication needs.

Importing this module imports the simulator and the lab and loads every numba kernel a
run calls (the store's, the frame codec's, the batch merge's, the simulator's: from
numba's cache, or compiled on a first start), about 2 s of CPU. The forkserver does it
once; each worker process then forks from it with all of that in memory, instead of
paying it per worker as a spawned process does. No kernel runs here: the parallel
kernels' threads start in the workers (a process must not fork after starting them).
"""

from __future__ import annotations

from segmentstore.core.warmup import kernel_dispatchers

from ..lab import compare as _compare
from ..sim import engine as _engine

__all__: list[str] = []


def _load_kernels() -> None:
    from readergroup.format import _frame_kernels  # noqa: F401
    from readergroup.reading import _batch_kernels  # noqa: F401

    from ..sim import _sim_kernels  # noqa: F401

    kernel_dispatchers()  # the store's (imported, signatures loaded)


_load_kernels()
del _compare, _engine
