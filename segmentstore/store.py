"""``SegmentStore``: façade over the clock, config, container, read index, advancer (docs/design.md §6)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from .attributes import AttributeUpdate
from .checks import checked
from .clock import Clock, WallClock
from .config import StoreConfig
from .core.advancer import AdvancerStats, WatermarkAdvancer
from .core.batched_appends import AppendAnswer
from .core.batched_reads import READ_MANY_REPLY_BYTES, check_read_requests
from .core.container import SegmentContainer
from .core.eviction import EvictionStats, Evictor, MemoryColdStore
from .errors import InvalidArgumentError, StorageError
from .future_read import FutureRead
from .results import (
    AppendResult,
    MergeResult,
    PackedReads,
    RecordScan,
    RecordsRead,
    SegmentInfo,
    SegmentRead,
)
from .wait_any import ReadyFuture, WaitRequest

if TYPE_CHECKING:
    from .durable.data_dir import DurableStats, DurableStore

__all__ = ["SegmentStore", "per_store", "read_to_tail"]


class _Append(Protocol):
    def __call__(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
        writer_uuid: int | None = None,
    ) -> AppendResult: ...


class SegmentStore:
    """A Pravega-style segment store with ingestion-time watermarks.

    ``clock`` is the ingestion clock (default ``WallClock()``); ``config`` a frozen
    ``StoreConfig``; ``data_dir`` makes the store durable (a write-ahead log with
    snapshots), ``None`` keeps everything in memory. Thread-safe. Use as a context
    manager or call ``close()``.

    The operations a client has are documented once, on the client interface
    (``segmentstore.client.interface.SegmentClient``; streams: ``StreamClient``, through
    ``controller_of(store)``); a method here says only what differs.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        config: StoreConfig | None = None,
        data_dir: str | Path | None = None,
    ) -> None:
        if config is None:
            config = StoreConfig()
        elif not isinstance(config, StoreConfig):
            raise InvalidArgumentError(f"config must be a StoreConfig, got {type(config).__name__}")
        if clock is None:
            clock = WallClock()
        elif not callable(getattr(clock, "now", None)):
            raise InvalidArgumentError(f"clock must have a now() method, got {clock!r}")
        self.clock: Clock = clock
        self.config = config
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._container = SegmentContainer(clock, config)
        self._reads = self._container.reads
        self.append = self._container.append
        self._durable: DurableStore | None = None
        if self.data_dir is None:
            self._evictor = Evictor(self._container, config, MemoryColdStore())
        else:
            from .durable.data_dir import DurableStore

            self._durable = DurableStore(self.data_dir, self._container, config)
            self._evictor = Evictor(self._container, config, self._durable.cold)
            self._durable.recover()
        self._advancer = WatermarkAdvancer(self._container, config, self._evictor)
        threaded = config.advancer_thread
        if threaded is None:
            threaded = isinstance(clock, WallClock)
        if threaded:
            self._advancer.start()

    # ------------------------------------------------------------------ segments
    def create_segment(self, name: str) -> SegmentInfo:
        """See ``SegmentClient.create_segment``."""
        return self._container.create_segment(name)

    def create_transaction(self, parent: str) -> str:
        """See ``SegmentClient.create_transaction``."""
        return self._container.create_transaction(parent)

    append: _Append
    """See ``SegmentClient.append``.

    Bound to the container's method in ``__init__``: a single append is the hot path,
    and a forwarding call here would cost a tenth of it. Besides the interface's 64-bit
    ``writer_id``, ``writer_uuid`` deduplicates by a 128-bit writer id (a Pravega
    writer's), kept apart from the attributes; ``get_writer_event_number`` reads it.
    """

    def get_writer_event_number(self, name: str, writer_uuid: int) -> int | None:
        """The last event number the 128-bit writer ``writer_uuid`` appended to ``name``, ``None`` if
        it never did (durable like the appends, sealed segments included). O(1)."""
        return self._container.get_writer_event_number(name, writer_uuid)

    def append_batch(
        self, name: str, events: Sequence[bytes], expected_offset: int | None = None
    ) -> AppendResult:
        """See ``SegmentClient.append_batch``."""
        return self._container.append_batch(name, events, expected_offset)

    def append_each(self, appends: Sequence[tuple[str, bytes | memoryview]]) -> tuple[AppendAnswer, ...]:
        """Many plain appends in one call, each its own operation (``segmentstore.core.batched_appends``):
        an ``AppendResult`` per ``(segment, data)`` pair in order, or the ``SegmentNotFoundError`` or
        ``SegmentSealedError`` of that pair (the others stand); bad input changes nothing.
        O(pairs + bytes)."""
        return self._container.append_each(appends)

    def merge_transaction(self, txn_name: str, parent: str | None = None) -> int:
        """See ``SegmentClient.merge_transaction``. ``merge_transaction_result`` says more."""
        return self._container.merge_transaction(txn_name, parent).offset

    def merge_transaction_result(self, txn_name: str, parent: str | None = None) -> MergeResult:
        """``merge_transaction``, returning the merged bytes' offset, length and timestamp."""
        return self._container.merge_transaction(txn_name, parent)

    def seal(self, name: str) -> int:
        """See ``SegmentClient.seal``."""
        return self._container.seal(name)

    def truncate(self, name: str, offset: int) -> None:
        """See ``SegmentClient.truncate``."""
        self._container.truncate(name, offset)

    def delete(self, name: str) -> None:
        """See ``SegmentClient.delete``."""
        self._container.delete(name)

    def get_info(self, name: str) -> SegmentInfo:
        """See ``SegmentClient.get_info``."""
        return self._container.get_info(name)

    def exists(self, name: str) -> bool:
        """See ``SegmentClient.exists``."""
        return self._container.exists(name)

    def list_segments(self) -> list[str]:
        """Names of every segment, transactions included."""
        return self._container.segment_names()

    # ------------------------------------------------------------------ attributes
    def update_attributes(self, name: str, updates: Iterable[AttributeUpdate]) -> int:
        """See ``SegmentClient.update_attributes``."""
        return self._container.update_attributes(name, updates)

    def get_attributes(self, name: str, keys: Iterable[int] | None = None) -> dict[int, int]:
        """See ``SegmentClient.get_attributes``."""
        return self._container.get_attributes(name, keys)

    # ------------------------------------------------------------------ reads and watermarks
    def read(self, name: str, offset: int, max_length: int) -> SegmentRead:
        """``SegmentClient.read`` without waiting (``wait_ms=0``); ``read_future`` waits."""
        return self._reads.read(name, offset, max_length)

    def scan_records(
        self, name: str, offset: int, max_length: int, max_records: int | None = None
    ) -> RecordScan:
        """See ``SegmentClient.scan_records``."""
        return self._reads.scan_records(name, offset, max_length, max_records)

    def read_future(
        self, name: str, offset: int, max_length: int, timeout_ms: int | None = None
    ) -> FutureRead:
        """``SegmentClient.read``, waiting as a future: it completes at the tail on data, a watermark
        increase, a seal or its ``timeout_ms`` (on the ingestion clock).
        """
        return self._reads.read_future(name, offset, max_length, timeout_ms)

    def wait_any(self, requests: Sequence[WaitRequest]) -> ReadyFuture:
        """``SegmentClient.wait_any`` as a future of the ready indexes (``segmentstore.wait_any``)."""
        return self._reads.wait_any(requests)

    def ready_now(self, requests: Sequence[WaitRequest]) -> tuple[int, ...]:
        """``SegmentClient.wait_any`` with ``wait_ms=0``: the ready indexes now, or ``()``; no future."""
        return self._reads.ready_now(requests)

    def watermark_at(self, name: str, offset: int) -> int:
        """See ``SegmentClient.watermark_at``."""
        return self._reads.watermark_at(name, offset)

    def ingestion_time_at(self, name: str, offset: int) -> int:
        """See ``SegmentClient.ingestion_time_at``."""
        return self._reads.ingestion_time_at(name, offset)

    def ingestion_runs(self, name: str, begin: int, end: int) -> np.ndarray:
        """See ``SegmentClient.ingestion_runs``."""
        return self._reads.ingestion_runs(name, begin, end)

    def watermarks_at(self, name: str, offsets: Any) -> np.ndarray:
        """See ``SegmentClient.watermarks_at``."""
        return self._reads.watermarks_at(name, offsets)

    def read_many(self, requests: Sequence[tuple[Any, ...]]) -> tuple[RecordsRead | None, ...]:
        """See ``SegmentClient.read_many`` (``segmentstore.core.batched_reads``)."""
        return self._reads.read_many(check_read_requests(requests), READ_MANY_REPLY_BYTES)

    def read_packed(self, requests: Sequence[tuple[Any, ...]]) -> PackedReads:
        """``read_many``'s answers in columns (``PackedReads``), for a decoder of many blocks at once."""
        return self._reads.read_packed(check_read_requests(requests), READ_MANY_REPLY_BYTES)

    # ------------------------------------------------------------------ advancer
    def advance_idle_watermarks(self) -> list[str]:
        """One advancer pass on the store's clock; returns the names of the segments advanced."""
        return self._advancer.run_pass()

    def expire_future_reads(self) -> int:
        """Complete future reads whose deadline on the ingestion clock has passed."""
        return self._reads.expire_future_reads()

    @property
    def advancer_stats(self) -> AdvancerStats:
        return self._advancer.stats

    @property
    def eviction_stats(self) -> EvictionStats:
        """Segments active and evicted now, evictions and reactivations so far."""
        return self._evictor.stats

    @property
    def durable_stats(self) -> DurableStats | None:
        """Log, snapshot, cache and recovery counters; ``None`` without a data directory."""
        return self._durable.stats if self._durable is not None else None

    def snapshot(self) -> None:
        """Take a snapshot and truncate the log now (no-op without a data directory)."""
        if self._durable is not None:
            self._durable.snapshot()

    @property
    def read_only(self) -> StorageError | None:
        """Why the store refuses writes, naming the file it could not write at start-up (a full
        disk, a read-only directory); ``None`` for a writable store. Reads are served either way."""
        return self._container.processor.read_only

    @property
    def last_timestamp(self) -> int:
        """The last timestamp the operation processor handed out."""
        return self._container.processor.last_timestamp

    @property
    def change_count(self) -> int:
        """The last sequence number the operation processor handed out: it moves with every change a
        read could see (every create, append, seal, truncation, merge, delete and attribute update,
        the advancer's too, is a stamped operation), so while it stands still every read answers as
        before. O(1)."""
        return self._container.processor.last_seq

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the advancer, fail waiting reads and release resources. Idempotent."""
        self._advancer.stop()
        self._container.close()
        if self._durable is not None:
            self._durable.close()

    def __enter__(self) -> SegmentStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @checked
    def _check(self) -> None:
        """Assert every invariant of the store's structures."""
        self._container._check()
        self._evictor._check()
        if self._durable is not None:
            self._durable._check()


_T = TypeVar("_T")


def per_store(make: Callable[[SegmentStore], _T]) -> Callable[[SegmentStore], _T]:
    """A getter of the one ``make(store)`` of each store in this process, made on first use.

    For what keeps state in a store's system segments (the stream controller, Pravega's
    transactions and tables): two of them over one store would each hold a stale view of
    the other's writes. Thread-safe; the store is held weakly. O(1) after the first call.
    """
    made: weakref.WeakKeyDictionary[SegmentStore, _T] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    def get(store: SegmentStore) -> _T:
        one = made.get(store)
        if one is None:
            with lock:
                one = made.get(store)
                if one is None:
                    one = made[store] = make(store)
        return one

    return get


def read_to_tail(store: SegmentStore, name: str) -> tuple[bytes, int]:
    """Every byte of ``name`` from its start offset to its tail, and the tail's offset. O(bytes)."""
    data = bytearray()
    offset = store.get_info(name).start_offset
    while True:
        r = store.read(name, offset, store.config.max_append_bytes)
        data += r.data
        offset += len(r.data)
        if r.at_tail:
            return bytes(data), offset
