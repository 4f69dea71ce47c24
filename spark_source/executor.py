"""What a Spark Python worker keeps across the tasks it runs: the decoding kernels, loaded once, out of
the garbage collector's way; and its client of each store it reads, connected once.

PySpark reuses a Python worker for task after task (``spark.python.worker.reuse``) and runs
a full ``gc.collect()`` in it after each one (``pyspark.daemon``). A full collection walks
every container object the process holds: with the read path's modules loaded (numba's
dispatchers and their type system, pyarrow, the store client) that is ~80,000 objects and
~30 ms of CPU per task here, against ~5 ms for PySpark's own objects; two tasks per
micro-batch on two cores spent ~60 ms of a ~1 s micro-batch in it. ``prepare_worker``
imports the kernels once and then freezes what the process holds (``gc.freeze``): the
collections after each task walk only what was made since, the few objects a task leaves.
A module imported later (pandas, at a first conversion of Python values by pyarrow; a
UDF's) would be walked again after every task: a task that finds more modules than at
the last freeze freezes again (``gc.freeze`` is O(1)), before it makes its own objects.

Frozen objects are never collected as cycles: those of the task being started when the
heap is frozen (its partition, its reader) that form cycles stay for the worker's life,
once per freeze, i.e. once, and once more per burst of imports; objects of other tasks,
and of anything else the worker runs (a UDF), are collected as before.

A task's client (``task_client``): in a prepared worker, the one the worker's last task of the
same server and credentials left, its connections open. A new client's first read waited for
its handshakes and came over sockets whose buffers had not grown yet: ~14 ms before a task's
first record batch against ~5 ms over a kept client, ~27 ms against ~19 ms for a task of
300,000 events (EventWriter data from ``ingestwm serve``), time in which the JVM's task thread
waits for rows. A task that fails or is not read to its end closes its client; a kept one
forgets what it fetched ahead before the next task uses it, and its pool replaces connections
the server closed meanwhile (idle, restarted). At most ``KEPT_CLIENTS`` are kept.

The memory a task frees, kept for the next read (``keep_freed_memory``): a read of 2 MiB and
its decoded columns free a few MiB that the next read allocates again. glibc's malloc gave
such memory back to the kernel (its thresholds grow to the largest block freed, and free
memory beyond twice that is trimmed) and the next read took it again page by page: ~0.006
page faults per row in a worker under Spark, ~0.015 us of kernel time per row, an eighth of
the worker's CPU (the JVM takes ~0.55 us). A prepared worker under glibc keeps up to
``MALLOC_TRIM_BYTES`` of freed memory at the top of each heap and serves allocations below
``MALLOC_MMAP_BYTES`` from its heaps: no page faults per read. Only there, as with freezing:
the allocator's settings are the whole process's.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np

from segmentstore.client import RemoteClient
from segmentstore.client.security import ClientSecurity

from .reading import connect

__all__ = [
    "TASK_FETCH_AHEAD",
    "KEPT_CLIENTS",
    "MALLOC_MMAP_BYTES",
    "MALLOC_TRIM_BYTES",
    "keep_freed_memory",
    "prepare_worker",
    "worker_prepared",
    "under_pyspark_daemon",
    "task_client",
    "kept_clients",
]

TASK_FETCH_AHEAD = 0
"""Reads a task fetches ahead on a thread of its own (``read_range``'s ``ahead``): none.

A task's batches go to the JVM, which takes ~0.6 us of CPU per row here against the read
path's ~0.05 on one thread: while the JVM works through one record batch, the task has
long fetched and decoded the next (Arrow's stream over the worker's socket pipelines
them). The next read's round trip still overlaps the decoding: it is asked for ahead
(``RemoteClient.prefetch``) and received on the connection's reader thread. A fetch
thread, decoding ahead too, hides nothing more and costs CPU the JVM needs: three
threads passing the GIL (the task's, the fetch thread, the connection's reader) took
~10 ns per row more than two here (EventWriter data from ``ingestwm serve``).
"""

KEPT_CLIENTS = 4
"""Clients a prepared worker keeps between tasks, one per server, timeout and credentials (the least
recently used is closed when another comes)."""
MALLOC_MMAP_BYTES = 16 << 20
"""A prepared worker's allocations below this come from malloc's heaps, not a mapping of their own
(glibc's ``M_MMAP_THRESHOLD``; its default grows with what is freed, to at most 32 MiB)."""
MALLOC_TRIM_BYTES = 32 << 20
"""Freed memory a prepared worker keeps at the top of each malloc heap (glibc's ``M_TRIM_THRESHOLD``):
a read's few MiB stay for the next read."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # (glibc's malloc.h)

_lock = threading.Lock()
_prepared = False
_modules = 0  # len(sys.modules) at the last freeze
_kept: OrderedDict[tuple[str, int, ClientSecurity | None], RemoteClient] = OrderedDict()


def prepare_worker() -> bool:
    """At a task's start in a worker of PySpark's daemon: the first time, keep freed memory
    (``keep_freed_memory``), load the read path's kernels, collect and freeze the heap; later, freeze
    again if modules were imported since.

    Anywhere else (a process of one's own reading ranges, a test) it does nothing: only the
    daemon collects after every task, and freezing a process's heap or setting its allocator is
    not for a library to do there. Returns whether the worker is prepared. O(objects) the first
    time, O(1) after.
    """
    global _prepared, _modules
    if _prepared:
        if len(sys.modules) != _modules:
            with _lock:
                gc.freeze()
                _modules = len(sys.modules)
        return True
    if not under_pyspark_daemon():
        return False
    with _lock:
        if not _prepared:
            keep_freed_memory()
            _load_kernels()
            gc.collect()
            gc.freeze()
            _modules = len(sys.modules)
            _prepared = True
    return True


def keep_freed_memory() -> bool:
    """Under glibc, set this process's malloc to keep ``MALLOC_TRIM_BYTES`` of freed memory per heap and
    serve allocations below ``MALLOC_MMAP_BYTES`` from its heaps (module docstring); whether it did
    (not under another C library). ``prepare_worker`` calls it in a worker of PySpark's daemon. O(1)."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):  # not a name this platform knows
        libc = None
    if not libc or not libc.startswith("glibc"):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_BYTES)
    )


@contextlib.contextmanager
def task_client(endpoint: str, timeout_ms: int, security: ClientSecurity | None) -> Iterator[RemoteClient]:
    """The client a task reads with (``connect(..., read_ahead=False)``): in a worker ``prepare_worker``
    prepared, the one its last task of the same ``endpoint``, timeout and credentials left, kept
    again if the task reads to its end without an error; anywhere else, or after an error or a task
    stopped early, a client of its own, closed when the task ends. O(1) besides connecting.
    """
    key = (endpoint, timeout_ms, security)
    found: RemoteClient | None = None
    if _prepared:
        with _lock:
            found = _kept.pop(key, None)
    client = connect(endpoint, timeout_ms, read_ahead=False, security=security) if found is None else found
    kept = False
    try:
        yield client
        if _prepared:
            client.drop_prefetched()
            with _lock:
                other: RemoteClient | None = _kept.pop(key, None)  # (kept by another thread's task meanwhile)
                gone = [] if other is None else [other]
                _kept[key] = client
                while len(_kept) > KEPT_CLIENTS:
                    gone.append(_kept.popitem(last=False)[1])
            kept = True
            for c in gone:
                c.close()
    finally:
        if not kept:
            client.close()


def kept_clients() -> int:
    """How many clients this worker keeps for its next tasks."""
    with _lock:
        return len(_kept)


def under_pyspark_daemon() -> bool:
    """Whether this process runs PySpark's worker daemon (``python -m pyspark.daemon``) or is forked by it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "pyspark.daemon"


def _load_kernels() -> None:
    """Run the read path's decoders once on frames of each framing, as a read hands them (``bytes``),
    and make record batches of them.

    Their numba kernels compile or load a signature at its first call (argument types), and
    a module may be imported at a first use: these calls do what a read does, so that a
    read adds no lasting objects beside the frozen heap.
    """
    from readergroup.format.events import KIND_WATERMARK, encode_event
    from readergroup.format.frame_batch import decode_events, walk_frames
    from readergroup.format.pravega_frames import (
        decode_pravega_events,
        encode_pravega_event,
        walk_pravega_frames,
    )

    marker = encode_event("", b"", 1, KIND_WATERMARK)
    frames = marker + encode_event("key", bytes(32), 1) * 1024  # past the kernels' 32 KiB
    from .reading import BatchMeta, events_batch, times_in_runs, watermark_batch

    meta = BatchMeta(1, 0)
    pravega = encode_pravega_event(bytes(32)) * 1024
    for buf, walk, decode in (
        (frames, walk_frames, decode_events),
        (pravega, walk_pravega_frames, decode_pravega_events),
    ):
        walk(buf)
        cols, used = decode(buf, 0)
        one_run = np.array([[used - 1], [1]], np.int64)  # every byte written at 1 ms
        events_batch("s", "s/0", meta, cols, times_in_runs(cols.offsets, one_run))
    watermark_batch(meta)


def worker_prepared() -> bool:
    """Whether ``prepare_worker`` ran in this process."""
    return _prepared
