"""The one client interface to a segment store: segments (``SegmentClient``) and streams (``StreamClient``).

Everything above ``segmentstore`` talks to a store only through ``SegmentStoreClient``,
both protocols in one. ``EmbeddedClient`` calls a ``SegmentStore`` in this process;
``RemoteClient`` speaks the wire protocol to ``ingestwm serve``. Both return the same
frozen result types and raise the same ``SegmentStoreError`` subclasses. The wire
protocol's command registry (``segmentstore.net.commands``) is derived from these
protocols: a command per method, its arguments from the signature, its wire types
from the hints, and whether it may be sent again (``idempotent``) from the mark below.
This module imports no server code.

Each operation is documented once, here: what it does, what it raises and what it
costs. ``EmbeddedClient``, ``RemoteClient``, the ``SegmentStore`` façade and the
store's internals refer to it and say only what is particular to them. *Temporal*
means the operation takes a timestamp from the store's ingestion clock and moves the
segment's ``LAST_WRITE_TIME`` (docs/design.md §1).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar

import numpy as np

from ..attributes import AttributeUpdate
from ..core.batched_reads import RangeRead, SegmentState
from ..errors import SegmentStoreError
from ..results import AppendResult, RecordScan, RecordsRead, SegmentInfo, SegmentRead
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
    """Segment operations as a client sees them (Pravega's segment store client).

    Besides the errors each operation names, any may raise ``SegmentNotFoundError`` (no
    such segment), ``InvalidArgumentError`` (a bad argument: nothing changed),
    ``StoreClosedError``, ``StoreReadOnlyError`` (a write to a store that cannot log),
    and over ``RemoteClient`` the connection errors of ``client.resend``.
    """

    def create_segment(self, name: str) -> SegmentInfo:
        """Create an empty, open segment; returns its info. Temporal: ``CREATION_TIME`` =
        ``LAST_WRITE_TIME`` = the create's timestamp. O(1).

        The name is a str of at most ``limits.MAX_SEGMENT_NAME_CHARS`` characters without the
        transaction separator (reserved for ``create_transaction``). Raises
        ``SegmentExistsError`` if the name is taken (an evicted segment's included),
        ``InvalidArgumentError`` for a bad name.
        """
        ...

    def create_transaction(self, parent: str) -> str:
        """Create a transaction segment of ``parent``; returns its name. Temporal. O(1).

        Raises ``SegmentNotFoundError``, ``SegmentSealedError`` (a sealed parent), and
        ``NotATransactionError`` when ``parent`` is a transaction itself (they do not nest).
        A transaction not written for ``StoreConfig.transaction_lease_ms`` is aborted by the
        store; a later call on it names why it is gone.
        """
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
        """Append ``data`` (bytes-like, non-empty); returns where it landed and its ingestion timestamp.

        Temporal; O(len(data)) amortised. With ``expected_offset`` the append happens only if
        the segment's length equals it, else ``BadOffsetError``. With ``writer_id`` and
        ``event_number`` the store keeps the writer's last event number as an attribute (key
        ``writer_id``); an append whose event number is not above it is a retry: it is
        acknowledged with ``duplicate=True`` and not stored. Raises ``SegmentNotFoundError``,
        ``SegmentSealedError``, ``AppendTooLargeError`` above ``StoreConfig.max_append_bytes``,
        ``InvalidArgumentError`` for an empty or non-bytes payload.
        """
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
        """Append many events as one operation: one timestamp, one index entry. O(total bytes).

        The events (each non-empty bytes) are stored back to back; the result's ``length`` is
        their total size. ``expected_offset`` and the errors as for ``append``.
        """
        ...

    def merge_transaction(self, txn_name: str, parent: str | None = None) -> int:
        """Merge a sealed transaction into its parent, atomically; returns its offset in the parent.

        The merged bytes take the merge's own timestamp, never the transaction's times
        (PDP-26: a merge is one large append); the transaction segment is gone afterwards.
        O(transaction bytes). Raises ``NotATransactionError``, ``WrongParentError`` (``parent``
        given and not the transaction's), ``SegmentNotSealedError`` (seal it first),
        ``SegmentTruncatedError`` (a truncated transaction), ``SegmentSealedError`` (a sealed
        parent).
        """
        ...

    def seal(self, name: str) -> int:
        """Seal a segment; returns its final length. Temporal: the seal's time - 1 is its final watermark.

        Waiting reads complete. Raises ``SegmentSealedError`` if it is sealed already. O(1).
        """
        ...

    @idempotent
    def truncate(self, name: str, offset: int) -> None:
        """Drop the bytes below ``offset`` (a no-op at the current start offset). Not temporal.

        Raises ``BadOffsetError`` beyond the length, or below the current start offset (the
        bytes are gone already, as Pravega's ``BadOffsetException``).
        """
        ...

    def delete(self, name: str) -> None:
        """Delete a segment and its open transactions; reads waiting on them fail. Not temporal.

        A transaction cannot outlive its parent (left open, it would merge into a later
        segment of the same name). O(segments) to find the transactions.
        """
        ...

    @idempotent
    def get_info(self, name: str) -> SegmentInfo:
        """The segment's name, start offset, length, sealed, creation and last write time. O(1)."""
        ...

    @idempotent
    def exists(self, name: str) -> bool:
        """Whether a segment of that name exists (an evicted one does). O(1)."""
        ...

    def update_attributes(self, name: str, updates: Iterable[AttributeUpdate]) -> int:
        """Apply attribute updates atomically (all or none); returns the operation's timestamp.

        Temporal: ``LAST_WRITE_TIME`` moves even for an empty list (the watermark advancer's
        trivial update). Raises ``SegmentSealedError``, ``BadAttributeUpdateError`` (a core
        attribute, a condition that does not hold, an accumulation past 64 bits),
        ``InvalidArgumentError`` (not an ``AttributeUpdate``). O(updates).
        """
        ...

    @idempotent
    def get_attributes(self, name: str, keys: Iterable[int] | None = None) -> dict[int, int]:
        """The segment's attributes, core ones (``CREATION_TIME``, ``LAST_WRITE_TIME``) included.

        Only ``keys``, if given (a key not set is left out). O(keys).
        """
        ...

    @idempotent
    def read(self, name: str, offset: int, max_length: int, wait_ms: int = 0) -> SegmentRead:
        """Read up to ``max_length`` bytes at ``offset``; at the tail wait up to ``wait_ms`` for data,
        a watermark increase or a seal.

        The result carries ``watermark_at(offset + len(data))``. Raises
        ``SegmentTruncatedError`` below the start offset, ``BadOffsetError`` beyond the length.
        O(bytes read).
        """
        ...

    @idempotent
    def scan_records(
        self, name: str, offset: int, max_length: int, max_records: int | None = None
    ) -> RecordScan:
        """Where the whole length-prefixed records from ``offset`` end, counted where the bytes are.

        Records are a u32 little-endian length and that many bytes; ``offset`` must be a
        record boundary. At most ``max_records`` records ending within ``max_length``
        bytes; one call may stop early (``RecordScan``): go on from its ``end``. O(bytes).
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
    def segment_states(self, requests: Sequence[tuple[str, int]]) -> tuple[SegmentState, ...]:
        """Many segments' info, watermark at a position and at the tail, and successors, in one call.

        ``requests`` are ``(segment, position)``; the result has one ``SegmentState`` per
        request, in order (``segmentstore.core.batched_reads``): a segment that is gone is
        answered with ``info=None`` and its error's message, not raised; a position outside
        ``[start offset, length]`` gets ``watermark=None``. A malformed request raises
        ``InvalidArgumentError`` naming it. What a planner or reader asks of its whole
        frontier once per round: one round trip (per ``MAX_STATE_REQUESTS`` segments)
        instead of two or three per segment. O(k log n).
        """
        ...

    @idempotent
    def read_ranges(self, requests: Sequence[tuple[str, int, int]]) -> tuple[RangeRead, ...]:
        """Reads ``(segment, offset, max_length)`` of many segments, each with its bytes' ingestion runs.

        One ``RangeRead`` per request, in order (``segmentstore.core.batched_reads``): where a
        ``read`` would raise (truncated, deleted, beyond the length) its ``error`` says so and
        the others are answered. The reads share one reply, so a later one may come back
        shorter than asked (or empty): ask again from its end. Never waits. What a task
        reading many small ranges asks: one round trip instead of two per range. O(bytes).
        """
        ...

    @idempotent
    def watermark_at(self, name: str, offset: int) -> int:
        """Every byte at or after ``offset``, and in the segment's successors, has an ingestion
        time above this (docs/design.md §1 ``watermark_at``). O(log n).
        """
        ...

    @idempotent
    def ingestion_time_at(self, name: str, offset: int) -> int:
        """The timestamp of the append or merge that wrote byte ``offset`` (docs/design.md §1). O(log n)."""
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
        """``watermark_at`` for an integer array of offsets, in one call."""
        ...

    # -------------------------------------------------- batched reads (segmentstore.core.batched_reads)
    @idempotent
    def read_many(self, requests: Sequence[tuple[Any, ...]]) -> tuple[RecordsRead | None, ...]:
        """Many reads in one call, each with ``watermark_at`` at its records (``RecordsRead``).

        ``requests`` are ``(segment, offset, max_length)`` or ``(segment, offset, max_length,
        known watermark)``, ``max_length`` at most ``read_many.MAX_READ_MANY_LENGTH``, at most
        ``read_many.MAX_READ_MANY`` of them; the answers come in request order. Each is what
        ``read`` (never waiting) returns, with the watermark at the start of every whole
        length-prefixed record of its data and at the end of the last one; ``None`` if the
        request has a known watermark and the read would bring nothing new (no data, no
        seal, a tail watermark not above it, no error but an offset beyond the length: not
        ready, in ``wait_any``'s terms); a failed
        read answers its error's class and message instead (the others stand); past
        ``read_many.READ_MANY_REPLY_BYTES`` of reply the rest come back unread. Bad
        requests refuse the whole call. O(bytes + records).
        """
        ...


class StreamClient(Protocol):
    """Stream metadata operations (Pravega's controller client).

    Besides the errors each operation names, any may raise ``StreamNotFoundError`` and
    the errors every ``SegmentClient`` call may raise.
    """

    def create_stream(self, stream: str, initial_segments: int = 1) -> StreamInfo:
        """Create ``scope/name`` with ``initial_segments`` segments splitting [0, 1) evenly.

        Raises ``StreamExistsError``; ``InvalidArgumentError`` for a bad name or more than
        ``limits.MAX_STREAM_SEGMENTS`` segments.
        """
        ...

    @idempotent
    def get_stream(self, stream: str) -> StreamInfo:
        """The stream's state and active segments (sorted by ``key_low``). O(active)."""
        ...

    @idempotent
    def list_streams(self, pattern: str | None = None) -> list[str]:
        """Stream names matching the fnmatch ``pattern`` (all if ``None``), sorted. O(streams)."""
        ...

    def scale_stream(
        self, stream: str, seal: Sequence[str], new_ranges: Sequence[tuple[float, float]]
    ) -> tuple[StreamSegment, ...]:
        """Seal active segments and create successors exactly covering their ranges; returns them.

        Successors are created first, then the change is recorded, then ``seal`` is sealed.
        Raises ``InvalidScaleError`` (a segment not active, ranges that do not tile the sealed
        ones), ``StreamSealedError``.
        """
        ...

    @idempotent
    def get_segment(self, segment_name: str) -> StreamSegment:
        """The stream segment of that name (active or sealed), with key range and creation time. O(1)."""
        ...

    @idempotent
    def get_successors(self, segment_name: str) -> tuple[SuccessorInfo, ...]:
        """Successors of a segment sealed by a scale, each with all its predecessors; else ``()``. O(k)."""
        ...

    @idempotent
    def get_head_cut(self, stream: str) -> StreamCut:
        """The stream's first segments at their start offsets (after truncation). O(segments)."""
        ...

    @idempotent
    def get_tail_cut(self, stream: str) -> StreamCut:
        """The active segments at their current lengths. O(active)."""
        ...

    @idempotent
    def seal_stream(self, stream: str) -> None:
        """Seal every active segment of the stream: no more writes, scales or commits (idempotent)."""
        ...

    def delete_stream(self, stream: str) -> None:
        """Delete a sealed stream and its segments; ``StreamNotSealedError`` if it is open."""
        ...

    def begin_transaction(self, stream: str) -> TransactionInfo:
        """One transaction segment per active segment of the stream; ``StreamSealedError`` if sealed."""
        ...

    @idempotent
    def commit_transaction(self, stream: str, txn_segments: Sequence[str]) -> None:
        """Seal each of the transaction's segments (all of them) and merge it into its parent.

        If the stream scaled since the transaction began, the commit is rolled
        (``controller.transactions``): readers see its events after every event written
        before the commit, in per-routing-key order. Idempotent: a transaction committed
        already is not merged again. ``StreamSealedError`` on a sealed stream (abort instead).
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
