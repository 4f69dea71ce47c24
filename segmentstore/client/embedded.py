"""The one client interface to a segment store, and its in-process (embedded) implementation.

Everything above ``segmentstore`` talks to the store only through ``SegmentStoreClient``.
``EmbeddedClient`` calls a ``SegmentStore`` in the same process; ``RemoteClient``
(``segmentstore.client.remote``) speaks the wire protocol to ``ingestwm serve``. Both return
the same frozen result types and raise the same ``SegmentStoreError`` subclasses.
"""

from __future__ import annotations

import abc
import concurrent.futures
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from ..attributes import AttributeUpdate
from ..controller.controller import StreamController, controller_of
from ..errors import InvalidArgumentError, SegmentStoreError
from ..results import AppendResult, SegmentInfo, SegmentRead
from ..store import SegmentStore
from ..stream_metadata import StreamCut, StreamInfo, StreamSegment, SuccessorInfo, TransactionInfo

__all__ = ["SegmentStoreClient", "EmbeddedClient"]


class SegmentStoreClient(abc.ABC):
    """Segment operations as a client sees them (Pravega's segment store client)."""

    @abc.abstractmethod
    def create_segment(self, name: str) -> SegmentInfo:
        """Create an empty segment."""

    @abc.abstractmethod
    def create_transaction(self, parent: str) -> str:
        """Create a transaction segment of ``parent``; returns its name."""

    @abc.abstractmethod
    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
    ) -> AppendResult:
        """Append bytes; a retry with the same writer id and event number is not stored twice."""

    def append_async(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
    ) -> concurrent.futures.Future[AppendResult]:
        """``append`` without waiting: the future gets its result or error (in call order per thread).

        This default appends at once; ``RemoteClient`` keeps many appends in flight.
        """
        fut: concurrent.futures.Future[AppendResult] = concurrent.futures.Future()
        try:
            fut.set_result(
                self.append(name, data, expected_offset, writer_id=writer_id, event_number=event_number)
            )
        except SegmentStoreError as e:
            fut.set_exception(e)
        return fut

    @abc.abstractmethod
    def append_batch(
        self, name: str, events: Sequence[bytes], expected_offset: int | None = None
    ) -> AppendResult:
        """Append many events as one operation with one timestamp."""

    @abc.abstractmethod
    def merge_transaction(self, txn_name: str, parent: str | None = None) -> int:
        """Merge a sealed transaction into its parent; returns the offset in the parent."""

    @abc.abstractmethod
    def seal(self, name: str) -> int:
        """Seal a segment; returns its final length."""

    @abc.abstractmethod
    def truncate(self, name: str, offset: int) -> None:
        """Drop the bytes below ``offset``."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Delete a segment."""

    @abc.abstractmethod
    def get_info(self, name: str) -> SegmentInfo:
        """Segment metadata, with creation time."""

    @abc.abstractmethod
    def exists(self, name: str) -> bool:
        """Whether the segment exists."""

    @abc.abstractmethod
    def update_attributes(self, name: str, updates: Iterable[AttributeUpdate]) -> int:
        """Apply attribute updates atomically; returns the timestamp."""

    @abc.abstractmethod
    def get_attributes(self, name: str, keys: Iterable[int] | None = None) -> dict[int, int]:
        """Attributes, core ones included."""

    @abc.abstractmethod
    def read(self, name: str, offset: int, max_length: int, wait_ms: int = 0) -> SegmentRead:
        """Read at ``offset``; at the tail wait up to ``wait_ms`` for data or a watermark increase."""

    @abc.abstractmethod
    def wait_any(self, requests: Sequence[tuple[str, int, int]], wait_ms: int = 0) -> tuple[int, ...]:
        """Wait on many segments at once, up to ``wait_ms``; ``()`` if nothing happened.

        ``requests`` are ``(segment, offset, known watermark)``; the result is the sorted
        indexes of those whose read at ``offset`` would return something new: data, a
        seal, a tail watermark above the known one, or an error (truncated, deleted).
        One call however many segments (``segmentstore.wait_any``).
        """

    @abc.abstractmethod
    def watermark_at(self, name: str, offset: int) -> int:
        """DESIGN §1 ``watermark_at``."""

    @abc.abstractmethod
    def ingestion_time_at(self, name: str, offset: int) -> int:
        """DESIGN §1 ``ingestion_time_at``."""

    @abc.abstractmethod
    def watermarks_at(self, name: str, offsets: Any) -> np.ndarray:
        """``watermark_at`` for an array of offsets."""

    # ------------------------------------------------------------------ streams (controller)
    @abc.abstractmethod
    def create_stream(self, stream: str, initial_segments: int = 1) -> StreamInfo:
        """Create ``scope/name`` with ``initial_segments`` segments splitting [0, 1) evenly."""

    @abc.abstractmethod
    def get_stream(self, stream: str) -> StreamInfo:
        """The stream's state and active segments (sorted by ``key_low``)."""

    @abc.abstractmethod
    def list_streams(self, pattern: str | None = None) -> list[str]:
        """Stream names matching the fnmatch ``pattern`` (all if ``None``), sorted."""

    @abc.abstractmethod
    def scale_stream(
        self, stream: str, seal: Sequence[str], new_ranges: Sequence[tuple[float, float]]
    ) -> tuple[StreamSegment, ...]:
        """Seal active segments and create successors exactly covering their ranges; returns them."""

    @abc.abstractmethod
    def get_segment(self, segment_name: str) -> StreamSegment:
        """The stream segment of that name (active or sealed), with key range and creation time."""

    @abc.abstractmethod
    def get_successors(self, segment_name: str) -> tuple[SuccessorInfo, ...]:
        """Successors of a segment sealed by a scale, each with all its predecessors; else ``()``."""

    @abc.abstractmethod
    def get_head_cut(self, stream: str) -> StreamCut:
        """The stream's first segments at their start offsets."""

    @abc.abstractmethod
    def get_tail_cut(self, stream: str) -> StreamCut:
        """The active segments at their current lengths."""

    @abc.abstractmethod
    def seal_stream(self, stream: str) -> None:
        """Seal every active segment of the stream (idempotent)."""

    @abc.abstractmethod
    def delete_stream(self, stream: str) -> None:
        """Delete a sealed stream and its segments."""

    @abc.abstractmethod
    def begin_transaction(self, stream: str) -> TransactionInfo:
        """One transaction segment per active segment of the stream."""

    @abc.abstractmethod
    def commit_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """Seal and merge every transaction segment into its parent (rolled if the stream scaled)."""

    @abc.abstractmethod
    def abort_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """Delete the transaction segments that still exist (idempotent)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the client's resources (not the store's)."""

    def __enter__(self) -> SegmentStoreClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class EmbeddedClient(SegmentStoreClient):
    """Direct calls into a ``SegmentStore`` of this process."""

    def __init__(self, store: SegmentStore) -> None:
        self.store = store

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
        return self.store.append(
            name, data, expected_offset, writer_id=writer_id, event_number=event_number
        )

    def append_batch(
        self, name: str, events: Sequence[bytes], expected_offset: int | None = None
    ) -> AppendResult:
        return self.store.append_batch(name, events, expected_offset)

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
        if type(wait_ms) is not int or wait_ms < 0:
            raise InvalidArgumentError(f"segment {name!r}: wait_ms must be an int >= 0, got {wait_ms!r}")
        if wait_ms == 0:
            return self.store.read(name, offset, max_length)
        return self.store.read_future(name, offset, max_length).wait(wait_ms / 1000.0)

    def wait_any(self, requests: Sequence[tuple[str, int, int]], wait_ms: int = 0) -> tuple[int, ...]:
        if type(wait_ms) is not int or wait_ms < 0:
            raise InvalidArgumentError(f"wait_any: wait_ms must be an int >= 0, got {wait_ms!r}")
        fut = self.store.wait_any(requests)
        return fut.wait(wait_ms / 1000.0) if wait_ms else fut.wait(0)

    def watermark_at(self, name: str, offset: int) -> int:
        return self.store.watermark_at(name, offset)

    def ingestion_time_at(self, name: str, offset: int) -> int:
        return self.store.ingestion_time_at(name, offset)

    def watermarks_at(self, name: str, offsets: Any) -> np.ndarray:
        return self.store.watermarks_at(name, offsets)

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
