"""The segment container: every segment operation, validated, stamped, logged and applied.

One lock serialises the container (Pravega serialises per container). Each operation
validates everything first and raises before it changes anything; then the operation
processor stamps it, the durable log (if any) records it, and it applies. Waiting
future reads are completed after the lock is released, so their callbacks may call
back into the store. Reads go through the container's ``ReadIndex`` (``reads``).

``SegmentContainer`` is assembled from its concepts: the table of segments
(``core.container_table``: lookup, create and remove, the stamp of a write, close),
transactions (``core.transactions``: create, merge, lease expiry), many appends in one call
(``core.batched_appends``: ``append_each``), the state API of
durability and eviction (``core.container_state``), and here the segment lifecycle
(create, append, attributes, seal, truncate, delete), the advancer's pass and replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..attributes import (
    AttributeUpdate,
    as_updates,
    check_attribute_keys,
    plan_attribute_updates,
)
from ..errors import (
    AppendTooLargeError,
    BadOffsetError,
    InvalidArgumentError,
    SegmentExistsError,
    SegmentSealedError,
    SegmentStoreError,
)
from ..results import AppendResult, SegmentInfo
from .batched_appends import ContainerAppends, apply_append
from .container_state import ContainerState, ContainerStateAPI
from .container_table import ColdSegments
from .operations import (
    Append,
    CreateSegment,
    Delete,
    MergeTransaction,
    Operation,
    Seal,
    Truncate,
    UpdateAttributes,
)
from .read_index import Wakeup, complete, take_wakeups
from .segment import TRANSACTION_SEPARATOR, Segment, is_system_segment
from .transactions import ContainerTransactions
from .validation import as_bytes, check_new_name, check_offset, check_writer, check_writer_uuid, quote

__all__ = ["ColdSegments", "ContainerState", "SegmentContainer"]

_result = tuple.__new__
"""Builds an ``AppendResult`` from its four fields without its Python-level ``__new__`` (hot path)."""


class SegmentContainer(ContainerTransactions, ContainerAppends, ContainerStateAPI):
    """All segments of one store and the operations on them. Thread-safe."""

    # ------------------------------------------------------------------ create
    def create_segment(self, name: str) -> SegmentInfo:
        """See ``SegmentClient.create_segment``."""
        check_new_name(name)
        if TRANSACTION_SEPARATOR in name:
            raise InvalidArgumentError(
                f"segment name {name!r} contains {TRANSACTION_SEPARATOR!r}, which is reserved "
                "for transaction segments (use create_transaction)"
            )
        with self._lock:
            self.check_open()
            if name in self._segments or (self._evictor and self._evictor.is_cold(name)):
                raise SegmentExistsError(f"segment {name!r} exists already")
            seq, ts = self._processor.stamp()
            return self._create_locked(name, None, seq, ts).info()

    # ------------------------------------------------------------------ append
    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
        writer_uuid: int | None = None,
    ) -> AppendResult:
        """See ``SegmentClient.append``. The hot path: checked before the lock, one plain
        acquire, logged, applied, and the result built without ``AppendResult.__new__``.

        ``writer_uuid`` (instead of ``writer_id``) deduplicates by a 128-bit writer id, such
        as a Pravega writer's, kept in the segment's writer table (``get_writer_event_number``).
        """
        if type(data) is not bytes:
            data = as_bytes(name, data)
        n = len(data)
        if not 0 < n <= self._max_append_bytes:
            self._refuse_length(name, n)
        if writer_id is not None or event_number is not None or writer_uuid is not None:
            if writer_uuid is None:
                check_writer(name, writer_id, event_number)
            else:
                check_writer_uuid(name, writer_id, writer_uuid, event_number)
        if expected_offset is not None and type(expected_offset) is not int:
            check_offset(name, "expected_offset", expected_offset)  # 0.0 or False equal 0, yet are bad
        wakeups: list[Wakeup] | None = None
        lock = self._lock
        lock.acquire()  # cheaper than `with` on this hot path
        try:
            seg = self._segments.get(name) if type(name) is str and not self._closed else None
            if seg is None or seg.sealed:
                seg = self._writable(name)  # raises, or reactivates an evicted segment
            offset = seg.length
            if expected_offset is not None and expected_offset != offset:
                check_offset(name, "expected_offset", expected_offset)
                raise BadOffsetError(
                    f"segment {name!r}: conditional append expected offset {expected_offset}, "
                    f"but the segment's length is {offset}",
                    expected=expected_offset,
                    actual=offset,
                )
            if event_number is not None:  # with writer_id or writer_uuid (checked above)
                if writer_uuid is None:
                    last = seg.attributes.get(writer_id)  # type: ignore[arg-type]
                else:
                    last = seg.writer_uuids.get(writer_uuid)
                if last is not None and event_number <= last:
                    return _result(AppendResult, (offset, 0, seg.last_write_time, True))
            ts = apply_append(self._processor, seg, name, offset, data, writer_id, event_number, writer_uuid)
            if event_number is not None:
                if writer_uuid is None:
                    seg.attributes[writer_id] = event_number  # type: ignore[index]
                else:
                    seg.writer_uuids[writer_uuid] = event_number
            if seg.futures:
                wakeups = take_wakeups(seg)
        finally:
            lock.release()
        if wakeups:
            complete(wakeups)
        return _result(AppendResult, (offset, n, ts, False))

    def get_writer_event_number(self, name: str, writer_uuid: int) -> int | None:
        """The last event number the 128-bit writer ``writer_uuid`` appended to ``name``; ``None`` if it
        never did. Sealed segments answer too (a writer reconnecting learns what was stored). O(1)."""
        if isinstance(writer_uuid, bool) or not isinstance(writer_uuid, int) or not 0 <= writer_uuid < 2**128:
            raise InvalidArgumentError(
                f"segment {quote(name)}: writer_uuid must be an int in [0, 2^128), got {writer_uuid!r}"
            )
        with self._lock:
            return self.segment(name).writer_uuids.get(writer_uuid)

    def _refuse_length(self, name: str, n: int) -> None:
        if n == 0:
            raise InvalidArgumentError(f"segment {quote(name)}: append of 0 bytes")
        raise AppendTooLargeError(
            f"segment {quote(name)}: append of {n} bytes exceeds max_append_bytes ({self._max_append_bytes})",
            n,
            self._max_append_bytes,
        )

    def append_batch(
        self, name: str, events: Sequence[bytes], expected_offset: int | None = None
    ) -> AppendResult:
        """See ``SegmentClient.append_batch``: the events checked and joined, then one ``append``."""
        if isinstance(events, (bytes, bytearray, memoryview, str)):
            raise InvalidArgumentError(
                f"segment {quote(name)}: append_batch takes a sequence of bytes objects, "
                f"got a single {type(events).__name__}"
            )
        if not isinstance(events, Iterable):
            raise InvalidArgumentError(
                f"segment {quote(name)}: append_batch takes a sequence of bytes objects, "
                f"got {type(events).__name__} {events!r:.60}"
            )
        events = list(events)  # iterated twice below
        try:
            data = b"".join(events)
        except TypeError:
            bad = next((e for e in events if not isinstance(e, (bytes, bytearray, memoryview))), None)
            raise InvalidArgumentError(
                f"segment {quote(name)}: events must be bytes, got {type(bad).__name__} {bad!r:.60}"
            ) from None
        for e in events:
            if len(e) == 0:
                raise InvalidArgumentError(f"segment {quote(name)}: append_batch holds an empty event")
        return self.append(name, data, expected_offset)

    # ------------------------------------------------------------------ attributes
    def update_attributes(self, name: str, updates: Iterable[AttributeUpdate], *, use: bool = True) -> int:
        """See ``SegmentClient.update_attributes``. ``use=False`` is for the advancer: it does not
        count as a client's use of the segment (eviction still sees it idle).
        """
        updates = as_updates(name, updates)
        with self._lock:
            seg = self.segment(name, use=use)
            if seg.sealed:
                raise SegmentSealedError(f"segment {name!r} is sealed")
            planned = plan_attribute_updates(name, seg.attributes, updates)
            wakeups = self._update_attributes_locked(seg, planned)
            ts = seg.last_write_time  # read under the lock: woken callbacks may write next
        if wakeups:
            complete(wakeups)
        return ts

    def get_attributes(self, name: str, keys: Iterable[int] | None = None) -> dict[int, int]:
        """See ``SegmentClient.get_attributes``."""
        if keys is not None:
            keys = check_attribute_keys(name, keys)
        with self._lock:
            attrs = self.segment(name).all_attributes()
        if keys is None:
            return attrs
        return {k: attrs[k] for k in keys if k in attrs}

    # ------------------------------------------------------------------ seal, truncate, delete
    def seal(self, name: str) -> int:
        """See ``SegmentClient.seal``."""
        with self._lock:
            seg = self._writable(name)
            seq, ts = self._processor.stamp()
            self._log(Seal(seq, ts, name))
            self._apply_seal(seg, ts)
            wakeups = take_wakeups(seg) if seg.futures else []
            length = seg.length
        complete(wakeups)
        return length

    def _apply_seal(self, seg: Segment, ts: int) -> None:
        seg.sealed = True
        seg.last_write_time = ts
        seg.windex.record_time(ts)

    def truncate(self, name: str, offset: int) -> None:
        """See ``SegmentClient.truncate``."""
        with self._lock:
            seg = self.segment(name)
            check_offset(name, "truncate offset", offset)
            if offset > seg.length:
                raise BadOffsetError(
                    f"segment {name!r}: truncate offset {offset} is beyond the length {seg.length}",
                    expected=seg.length,
                    actual=offset,
                )
            if offset < seg.start_offset:
                raise BadOffsetError(
                    f"segment {name!r}: truncate offset {offset} is below the start offset "
                    f"{seg.start_offset} (truncated already)",
                    expected=seg.start_offset,
                    actual=offset,
                )
            if offset == seg.start_offset:
                return
            seq, ts = self._processor.stamp()
            self._log(Truncate(seq, ts, name, offset))
            self._apply_truncate(seg, offset)

    def _apply_truncate(self, seg: Segment, offset: int) -> None:
        seg.data.truncate(offset)
        seg.windex.truncate(offset)

    def delete(self, name: str) -> None:
        """See ``SegmentClient.delete``. The transactions are logged before the parent."""
        wakeups: list[Wakeup] = []
        with self._lock:
            seg = self.segment(name)
            txns = [] if seg.parent is not None else self._transactions_of(name)
            seq, ts = self._processor.stamp_many(len(txns) + 1)
            for txn in txns:  # logged before the parent: replaying the log deletes them first
                self._log(Delete(seq, ts, txn.name))
                self._remove(txn, wakeups, f"transaction {txn.name!r} ended: {name!r} was deleted")
                seq += 1
            self._log(Delete(seq, ts, name))
            self._remove(seg, wakeups, f"segment {name!r} was deleted")
        complete(wakeups)

    # ------------------------------------------------------------------ advancer
    def advance_idle_watermarks(self) -> tuple[list[str], int]:
        """One watermark-advancer pass: a trivial attribute update on every idle segment.

        Candidates (PDP-26): non-transaction, not sealed, not system segments whose
        ``LAST_WRITE_TIME`` is at least ``max_watermark_lag_ms`` old. Advancing does
        not count as use (eviction still sees the segment as idle). Returns the names
        advanced and the number of segments examined. O(segments).
        """
        wakeups: list[Wakeup] = []
        advanced: list[str] = []
        with self._lock:
            self.check_open()
            if self._processor.read_only is not None:
                return advanced, 0  # nothing can be logged: the watermarks stand still
            threshold = self._processor.now() - self._config.max_watermark_lag_ms
            examined = len(self._segments)
            for seg in list(self._segments.values()):
                if (
                    seg.last_write_time <= threshold
                    and not seg.sealed
                    and seg.parent is None
                    and not is_system_segment(seg.name)
                ):
                    wakeups.extend(self._update_attributes_locked(seg, {}))
                    advanced.append(seg.name)
        complete(wakeups)
        return advanced, examined

    # ------------------------------------------------------------------ recovery
    def replay(self, op: Operation) -> None:
        """Apply a logged operation again (recovery), with its recorded timestamp."""
        with self._lock:
            if self._evictor is not None:
                self._evictor.activate_for_replay(op)
            self._replay_locked(op)
            self._processor.restore_state(op.seq, op.timestamp)

    def _replay_locked(self, op: Operation) -> None:
        ts = op.timestamp
        wake: list[Wakeup] = []
        if isinstance(op, Append):
            seg = self._segments[op.name]
            if seg.length != op.offset:
                raise SegmentStoreError(
                    f"replay: append to {op.name!r} at {op.offset}, but its length is {seg.length}"
                )
            seg.data.append(op.data)
            seg.length += len(op.data)
            seg.windex.record_write(seg.length, ts)
            seg.last_write_time = ts
            if op.event_number is not None:
                if op.writer_uuid is not None:
                    seg.writer_uuids[op.writer_uuid] = op.event_number
                elif op.writer_id is not None:
                    seg.attributes[op.writer_id] = op.event_number
        elif isinstance(op, CreateSegment):
            self._apply_create(op.name, op.parent, ts, op.seq)
        elif isinstance(op, MergeTransaction):
            self._apply_merge(self._segments[op.txn], self._segments[op.parent], ts, wake)
        elif isinstance(op, UpdateAttributes):
            self._apply_attributes(self._segments[op.name], dict(op.values), ts)
        elif isinstance(op, Seal):
            self._apply_seal(self._segments[op.name], ts)
        elif isinstance(op, Truncate):
            self._apply_truncate(self._segments[op.name], op.offset)
        elif isinstance(op, Delete):
            self._remove(self._segments[op.name], wake, "deleted")
        else:  # pragma: no cover - every operation type is handled above
            raise SegmentStoreError(f"replay: unknown operation {op!r}")
