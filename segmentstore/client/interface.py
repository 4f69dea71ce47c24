"""The one client interface to a segment store: segments (``SegmentClient``) and streams (``StreamClient``).

Everything above ``segmentstore`` talks to a store only through ``SegmentStoreClient``,
both protocols in one. ``EmbeddedClient`` calls a ``SegmentStore`` in this process;
``RemoteClient`` speaks the wire protocol to ``ingestwm serve``. Both return the same
frozen result types and raise the same ``SegmentStoreError`` subclasses. The wire
protocol's command registry (``segmentstore.net.commands``) is derived from these
protocols: a command per method, its arguments from the signature, its wire types
from the hints, and whether it may be sent again (``idempotent``) from the mark below.
This module imports no server code.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar

import numpy as np

from ..attributes import AttributeUpdate
from ..errors import SegmentStoreError
from ..results import AppendResult, RecordScan, SegmentInfo, SegmentRead
from ..stream_metadata import StreamCut, StreamInfo, StreamSegment, SuccessorInfo, TransactionInfo

__all__ = [
    "SegmentClient",
    "StreamClient",
    "SegmentStoreClient",
    "idempotent",
    "is_idempotent",
    "wire_methods",
]

_F = TypeVar("_F", bound=Callable[..., Any])
_IDEMPOTENT = "__ingestwm_idempotent__"


def idempotent(method: _F) -> _F:
    """Mark an interface method as safe to send again when its outcome is unknown (a lost reply)."""
    setattr(method, _IDEMPOTENT, True)
    return method


def is_idempotent(method: Callable[..., Any]) -> bool:
    """Whether ``method`` is marked ``idempotent``."""
    return bool(getattr(method, _IDEMPOTENT, False))


class SegmentClient(Protocol):
    """Segment operations as a client sees them (Pravega's segment store client)."""

    def create_segment(self, name: str) -> SegmentInfo:
        """Create an empty segment."""
        ...

    def create_transaction(self, parent: str) -> str:
        """Create a transaction segment of ``parent``; returns its name."""
        ...

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
        ...

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

    def append_batch(
        self, name: str, events: Sequence[bytes], expected_offset: int | None = None
    ) -> AppendResult:
        """Append many events as one operation with one timestamp."""
        ...

    def merge_transaction(self, txn_name: str, parent: str | None = None) -> int:
        """Merge a sealed transaction into its parent; returns the offset in the parent."""
        ...

    def seal(self, name: str) -> int:
        """Seal a segment; returns its final length."""
        ...

    @idempotent
    def truncate(self, name: str, offset: int) -> None:
        """Drop the bytes below ``offset``."""
        ...

    def delete(self, name: str) -> None:
        """Delete a segment."""
        ...

    @idempotent
    def get_info(self, name: str) -> SegmentInfo:
        """Segment metadata, with creation time."""
        ...

    @idempotent
    def exists(self, name: str) -> bool:
        """Whether the segment exists."""
        ...

    def update_attributes(self, name: str, updates: Iterable[AttributeUpdate]) -> int:
        """Apply attribute updates atomically; returns the timestamp."""
        ...

    @idempotent
    def get_attributes(self, name: str, keys: Iterable[int] | None = None) -> dict[int, int]:
        """Attributes, core ones included."""
        ...

    @idempotent
    def read(self, name: str, offset: int, max_length: int, wait_ms: int = 0) -> SegmentRead:
        """Read at ``offset``; at the tail wait up to ``wait_ms`` for data or a watermark increase."""
        ...

    @idempotent
    def scan_records(
        self, name: str, offset: int, max_length: int, max_records: int | None = None
    ) -> RecordScan:
        """Where the whole length-prefixed records from ``offset`` end, counted where the bytes are.

        Records are a u32 little-endian length and that many bytes; ``offset`` must be a
        record boundary. At most ``max_records`` records ending within ``max_length``
        bytes; one call may stop early (``RecordScan``): go on from its ``end``.
        """
        ...

    @idempotent
    def wait_any(self, requests: Sequence[tuple[str, int, int]], wait_ms: int = 0) -> tuple[int, ...]:
        """Wait on many segments at once, up to ``wait_ms``; ``()`` if nothing happened.

        ``requests`` are ``(segment, offset, known watermark)``; the result is the sorted
        indexes of those whose read at ``offset`` would return something new: data, a
        seal, a tail watermark above the known one, or an error (truncated, deleted).
        One call however many segments (``segmentstore.wait_any``).
        """
        ...

    @idempotent
    def watermark_at(self, name: str, offset: int) -> int:
        """docs/design.md §1 ``watermark_at``."""
        ...

    @idempotent
    def ingestion_time_at(self, name: str, offset: int) -> int:
        """docs/design.md §1 ``ingestion_time_at``."""
        ...

    @idempotent
    def ingestion_runs(self, name: str, begin: int, end: int) -> np.ndarray:
        """Bytes ``[begin, end)`` as runs of one ingestion time.

        A ``(2, k)`` int64 array: row 0 each run's last offset (the last one ``end - 1``),
        row 1 its ingestion time. The byte at ``o`` has the time of the first run whose
        last offset is ``>= o`` (``np.searchsorted(runs[0], offsets)``). A range of more
        than 65,536 runs is answered in parts: a last offset below ``end - 1`` says ask
        again from the byte after it.
        """
        ...

    @idempotent
    def watermarks_at(self, name: str, offsets: Any) -> np.ndarray:
        """``watermark_at`` for an array of offsets."""
        ...


class StreamClient(Protocol):
    """Stream metadata operations (Pravega's controller client)."""

    def create_stream(self, stream: str, initial_segments: int = 1) -> StreamInfo:
        """Create ``scope/name`` with ``initial_segments`` segments splitting [0, 1) evenly."""
        ...

    @idempotent
    def get_stream(self, stream: str) -> StreamInfo:
        """The stream's state and active segments (sorted by ``key_low``)."""
        ...

    @idempotent
    def list_streams(self, pattern: str | None = None) -> list[str]:
        """Stream names matching the fnmatch ``pattern`` (all if ``None``), sorted."""
        ...

    def scale_stream(
        self, stream: str, seal: Sequence[str], new_ranges: Sequence[tuple[float, float]]
    ) -> tuple[StreamSegment, ...]:
        """Seal active segments and create successors exactly covering their ranges; returns them."""
        ...

    @idempotent
    def get_segment(self, segment_name: str) -> StreamSegment:
        """The stream segment of that name (active or sealed), with key range and creation time."""
        ...

    @idempotent
    def get_successors(self, segment_name: str) -> tuple[SuccessorInfo, ...]:
        """Successors of a segment sealed by a scale, each with all its predecessors; else ``()``."""
        ...

    @idempotent
    def get_head_cut(self, stream: str) -> StreamCut:
        """The stream's first segments at their start offsets."""
        ...

    @idempotent
    def get_tail_cut(self, stream: str) -> StreamCut:
        """The active segments at their current lengths."""
        ...

    @idempotent
    def seal_stream(self, stream: str) -> None:
        """Seal every active segment of the stream (idempotent)."""
        ...

    def delete_stream(self, stream: str) -> None:
        """Delete a sealed stream and its segments."""
        ...

    def begin_transaction(self, stream: str) -> TransactionInfo:
        """One transaction segment per active segment of the stream."""
        ...

    @idempotent
    def commit_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """Seal and merge every transaction segment into its parent (rolled if the stream scaled).

        Idempotent: a transaction committed already is not merged again.
        """
        ...

    @idempotent
    def abort_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """Delete the transaction segments that still exist (idempotent)."""
        ...


class SegmentStoreClient(SegmentClient, StreamClient, Protocol):
    """The whole client interface: segments and streams, and the client's own lifecycle."""

    def close(self) -> None:
        """Release the client's resources (not the store's)."""
        ...

    def __enter__(self) -> SegmentStoreClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_CLIENT_SIDE = frozenset({"append_async"})
"""Interface methods a client implements on its own side, not as a command of their own."""


def wire_methods() -> Iterator[tuple[str, Callable[..., Any]]]:
    """``(name, method)`` of every command the interface defines, segments first, in definition order."""
    for proto in (SegmentClient, StreamClient):
        for name, value in vars(proto).items():
            if callable(value) and not name.startswith("_") and name not in _CLIENT_SIDE:
                yield name, value
