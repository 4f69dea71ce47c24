"""What a Spark Python worker keeps across the tasks it runs: the decoding kernels, loaded once, out of
the garbage collector's way, and its clients of the store.

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

A task's first batch waited ~12 ms here for a new client: its connections and hellos, and
the reply buffer growing to a read's size (the JVM has nothing to do meanwhile).
``task_client`` keeps the client of a worker's last task for the next ones (by endpoint,
timeout and credentials; at most ``KEPT_CLIENTS``, the oldest closed), with nothing read
ahead left in it. Only under the daemon too: anywhere else a task's client is its own.

Frozen objects are never collected as cycles: those of the task being started when the
heap is frozen (its partition, its reader) that form cycles stay for the worker's life,
once per freeze, i.e. once, and once more per burst of imports; objects of other tasks,
and of anything else the worker runs (a UDF), are collected as before.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from segmentstore.client import RemoteClient, SegmentStoreClient
from segmentstore.client.security import ClientSecurity

from .reading import FETCH_AHEAD, connect

__all__ = [
    "TASK_FETCH_AHEAD",
    "KEPT_CLIENTS",
    "prepare_worker",
    "worker_prepared",
    "under_pyspark_daemon",
    "task_client",
]

KEPT_CLIENTS = 4
"""Clients of the store a worker keeps between tasks (one per endpoint, timeout and credentials)."""

TASK_FETCH_AHEAD = FETCH_AHEAD
"""Reads a task fetches and decodes ahead on a thread of its own (``read_range``'s ``ahead``).

While the task's thread hands a batch to the JVM (PySpark writes it to the worker's socket
and waits there for the JVM to take it), the fetch thread decodes the next ones, so the
JVM finds the next batch ready. Without it the worker decodes only between two writes,
and the JVM waited meanwhile: over a served store, 10^6-row micro-batches ran at 0.83-0.86
of the ceiling's rate with none or one ahead, 0.89-0.98 with two or four (medians of six
rounds each, side by side, load average 1.5-2.3), though three threads passing the GIL
cost ~10 ns of CPU per row more than two. The next read is asked for ahead too
(``RemoteClient.prefetch``), so the fetch thread seldom waits for the store.
"""

_lock = threading.Lock()
_prepared = False
_modules = 0  # len(sys.modules) at the last freeze
_clients: OrderedDict[tuple[str, int, ClientSecurity], SegmentStoreClient] = OrderedDict()


def prepare_worker() -> bool:
    """At a task's start in a worker of PySpark's daemon: the first time, load the read path's kernels,
    collect and freeze the heap; later, freeze again if modules were imported since.

    Anywhere else (a process of one's own reading ranges, a test) it does nothing: only the
    daemon collects after every task, and freezing a process's heap is not for a library to
    do there. Returns whether the worker is prepared. O(objects) the first time, O(1) after.
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
            _load_kernels()
            gc.collect()
            gc.freeze()
            _modules = len(sys.modules)
            _prepared = True
    return True


@contextmanager
def task_client(endpoint: str, timeout_ms: int, security: ClientSecurity) -> Iterator[SegmentStoreClient]:
    """The client a task reads with (``reading.connect`` without read-ahead): in a prepared worker
    (``prepare_worker``), the one its last task with these settings used, kept for the next; else a
    new one, closed after. One task at a time uses a kept client. O(1)."""
    if not _prepared:
        client = connect(endpoint, timeout_ms, read_ahead=False, security=security)
        try:
            yield client
        finally:
            client.close()
        return
    key = (endpoint, timeout_ms, security)
    with _lock:
        kept = _clients.pop(key, None)
    client = kept if kept is not None else connect(endpoint, timeout_ms, read_ahead=False, security=security)
    try:
        yield client
    finally:
        if isinstance(client, RemoteClient):
            client.drop_read_ahead()  # (a task that stopped early leaves a read asked for ahead)
        with _lock:
            old = [c for c in (_clients.pop(key, None),) if c is not None]  # (one kept per key)
            _clients[key] = client
            old += [_clients.popitem(last=False)[1] for _ in range(len(_clients) - KEPT_CLIENTS)]
        for c in old:
            c.close()


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
