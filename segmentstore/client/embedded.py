"""``EmbeddedClient``: the client interface (``segmentstore.client.interface``) over an in-process store."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..attributes import AttributeUpdate
from ..controller.controller import StreamController, controller_of
from ..core.batched_appends import AppendAnswer
from ..core.batched_reads import (
    RangeRead,
    SegmentState,
    check_range_requests,
    check_state_requests,
    read_ranges,
    segment_states,
)
from ..results import AppendResult, PackedReads, RecordScan, RecordsRead, SegmentInfo, SegmentRead
from ..store import SegmentStore
from ..stream_metadata import StreamCut, StreamInfo, StreamSegment, SuccessorInfo, TransactionInfo
from ..wait_any import check_wait_ms
from .interface import SegmentStoreClient

__all__ = ["EmbeddedClient"]


class EmbeddedClient(SegmentStoreClient):
    """Direct calls into a ``SegmentStore`` of this process.

    Each method does what the protocol (``segmentstore.client.interface``) documents
    and carries no docstring of its own, so ``help()`` shows the protocol's.
    """

    def __init__(self, store: SegmentStore) -> None:
        self.store = store

    def change_count(self) -> int:
        """The store's ``SegmentStore.change_count``: equal at two moments, nothing a read sees changed
        between them (a reader skips a look at tails it found unchanged). Embedded only. O(1)."""
        return self.store.change_count

    def _controller(self) -> StreamController:
        return controller_of(self.store)

    def create_segment(self, name: str) -> SegmentInfo:
        return self.store.create_segment(name)

    def create_transaction(self, parent: str) -> str:
        return self.store.create_transaction(parent)

    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
    ) -> AppendResult:
        return self.store.append(name, data, expected_offset, writer_id=writer_id, event_number=event_number)

    def append_batch(
        self, name: str, events: Sequence[bytes], expected_offset: int | None = None
    ) -> AppendResult:
        return self.store.append_batch(name, events, expected_offset)

    def append_each(self, appends: Sequence[tuple[str, bytes | memoryview]]) -> tuple[AppendAnswer, ...]:
        """Many plain appends in one call, each its own operation with its own answer: an
        ``AppendResult``, or the ``SegmentNotFoundError``/``SegmentSealedError`` of that pair (the
        others stand); bad input changes nothing (``SegmentStore.append_each``,
        ``segmentstore.core.batched_appends``). O(pairs + bytes). Embedded only."""
        return self.store.append_each(appends)

    def merge_transaction(self, txn_name: str, parent: str | None = None) -> int:
        return self.store.merge_transaction(txn_name, parent)

    def seal(self, name: str) -> int:
        return self.store.seal(name)

    def truncate(self, name: str, offset: int) -> None:
        self.store.truncate(name, offset)

    def delete(self, name: str) -> None:
        self.store.delete(name)

    def get_info(self, name: str) -> SegmentInfo:
        return self.store.get_info(name)

    def exists(self, name: str) -> bool:
        return self.store.exists(name)

    def update_attributes(self, name: str, updates: Iterable[AttributeUpdate]) -> int:
        return self.store.update_attributes(name, updates)

    def get_attributes(self, name: str, keys: Iterable[int] | None = None) -> dict[int, int]:
        return self.store.get_attributes(name, keys)

    def read(self, name: str, offset: int, max_length: int, wait_ms: int = 0) -> SegmentRead:
        if check_wait_ms(f"segment {name!r}", wait_ms) == 0:
            return self.store.read(name, offset, max_length)
        return self.store.read_future(name, offset, max_length).wait(wait_ms / 1000.0)

    def wait_any(self, requests: Sequence[tuple[str, int, int]], wait_ms: int = 0) -> tuple[int, ...]:
        if check_wait_ms("wait_any", wait_ms) == 0:
            return self.store.ready_now(requests)
        return self.store.wait_any(requests).wait(wait_ms / 1000.0)

    def scan_records(
        self, name: str, offset: int, max_length: int, max_records: int | None = None
    ) -> RecordScan:
        return self.store.scan_records(name, offset, max_length, max_records)

    def segment_states(self, requests: Sequence[tuple[str, int]]) -> tuple[SegmentState, ...]:
        reqs = check_state_requests(requests)
        return segment_states(self.store.get_info, self.store.watermark_at, self.get_successors, reqs)

    def read_ranges(self, requests: Sequence[tuple[str, int, int]]) -> tuple[RangeRead, ...]:
        return read_ranges(self.store.read, self.store.ingestion_runs, check_range_requests(requests))

    def watermark_at(self, name: str, offset: int) -> int:
        return self.store.watermark_at(name, offset)

    def ingestion_time_at(self, name: str, offset: int) -> int:
        return self.store.ingestion_time_at(name, offset)

    def ingestion_runs(self, name: str, begin: int, end: int) -> np.ndarray:
        return self.store.ingestion_runs(name, begin, end)

    def watermarks_at(self, name: str, offsets: Any) -> np.ndarray:
        return self.store.watermarks_at(name, offsets)

    # -------------------------------------------------- batched reads (segmentstore.core.batched_reads)
    def read_many(self, requests: Sequence[tuple[Any, ...]]) -> tuple[RecordsRead | None, ...]:
        return self.store.read_many(requests)

    def read_packed(self, requests: Sequence[tuple[Any, ...]]) -> PackedReads:
        """``read_many``'s answers in columns (``PackedReads``): each block's bytes, their records'
        starts and watermarks in two arrays, as a decoder of many blocks takes them (a reader's look
        skips making an answer object per segment). Embedded only."""
        return self.store.read_packed(requests)

    # ------------------------------------------------------------------ streams (controller)
    def create_stream(self, stream: str, initial_segments: int = 1) -> StreamInfo:
        return self._controller().create_stream(stream, initial_segments)

    def get_stream(self, stream: str) -> StreamInfo:
        return self._controller().get_stream(stream)

    def list_streams(self, pattern: str | None = None) -> list[str]:
        return self._controller().list_streams(pattern)

    def scale_stream(
        self, stream: str, seal: Sequence[str], new_ranges: Sequence[tuple[float, float]]
    ) -> tuple[StreamSegment, ...]:
        return self._controller().scale_stream(stream, seal, new_ranges)

    def get_segment(self, segment_name: str) -> StreamSegment:
        return self._controller().get_segment(segment_name)

    def get_successors(self, segment_name: str) -> tuple[SuccessorInfo, ...]:
        return self._controller().get_successors(segment_name)

    def get_head_cut(self, stream: str) -> StreamCut:
        return self._controller().get_head_cut(stream)

    def get_tail_cut(self, stream: str) -> StreamCut:
        return self._controller().get_tail_cut(stream)

    def seal_stream(self, stream: str) -> None:
        self._controller().seal_stream(stream)

    def delete_stream(self, stream: str) -> None:
        self._controller().delete_stream(stream)

    def begin_transaction(self, stream: str) -> TransactionInfo:
        return self._controller().begin_transaction(stream)

    def commit_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        self._controller().commit_transaction(stream, txn_segments)

    def abort_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        self._controller().abort_transaction(stream, txn_segments)

    def close(self) -> None:
        """Nothing to release: the store belongs to its owner."""
