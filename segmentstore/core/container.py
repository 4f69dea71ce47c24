"""The segment container: every segment operation, validated, stamped, logged and applied.

One lock serialises the container (Pravega serialises per container). Each operation
validates everything first and raises before it changes anything; then the operation
processor stamps it, the durable log (if any) records it, and it applies. Waiting
future reads are completed after the lock is released, so their callbacks may call
back into the store. Reads go through the container's ``ReadIndex`` (``reads``).

Durability and eviction plug in through an explicit state API, never through the
container's attributes: ``set_data_factory`` / ``attach_log`` (where bytes and
operations go), ``snapshot_state`` / ``restore_state`` / ``discard`` (snapshots and
recovery), ``set_cold`` / ``evict`` / ``reinstate`` (the evictor's cold store).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..attributes import (
    CREATION_TIME,
    LAST_WRITE_TIME,
    AttributeUpdate,
    as_updates,
    check_attribute_keys,
    is_core_attribute,
    plan_attribute_updates,
)
from ..checks import checked
from ..clock import Clock
from ..config import StoreConfig
from ..errors import (
    AppendTooLargeError,
    BadOffsetError,
    InvalidArgumentError,
    NotATransactionError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentSealedError,
    SegmentStoreError,
    SegmentTruncatedError,
    StoreClosedError,
    WrongParentError,
)
from ..limits import INT64_MAX
from ..results import AppendResult, MergeResult, SegmentInfo
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
from .processor import OperationProcessor, OperationSink
from .read_index import ReadIndex, Wakeup, complete, take_wakeups
from .segment import TRANSACTION_SEPARATOR, Segment, is_system_segment
from .storage import SegmentData
from .validation import as_bytes, check_name, check_new_name, check_offset, check_writer, quote

__all__ = ["ColdSegments", "ContainerState", "SegmentContainer"]

_EXPIRED_KEPT = 4096
"""Transactions whose expiry a later call's error names (the most recent ones)."""

_result = tuple.__new__
"""Builds an ``AppendResult`` from its four fields without its Python-level ``__new__`` (hot path)."""


class ColdSegments(Protocol):
    """What the container asks of its evictor (``core.eviction.Evictor``); called with the lock held."""

    def is_cold(self, name: object) -> bool:
        """Whether ``name`` is an evicted segment."""
        ...

    def cold_names(self) -> list[str]:
        """Names of the evicted segments."""
        ...

    def reactivate(self, name: str, advance: bool = True) -> Segment | None:
        """Bring ``name`` back (``reinstate``); ``None`` if it is not cold."""
        ...

    def activate_for_replay(self, op: Operation) -> None:
        """Reactivate, without advancing, the cold segments a replayed operation touches."""
        ...


@dataclass(frozen=True, slots=True)
class ContainerState:
    """The container's state: the processor's position and the active segments (live objects).

    Taken and given with the container's lock held: the segments are the container's own.
    """

    last_seq: int
    last_timestamp: int
    segments: tuple[Segment, ...]


class SegmentContainer:
    """All segments of one store and the operations on them. Thread-safe."""

    def __init__(self, clock: Clock, config: StoreConfig, log: OperationSink | None = None) -> None:
        self._clock = clock
        self._config = config
        self._lock = threading.Lock()
        self._segments: dict[str, Segment] = {}
        self._processor = OperationProcessor(clock, log)
        self._closed = False
        self._evictor: ColdSegments | None = None  # set_cold
        self._data_factory: Callable[[str, int], SegmentData] | None = None  # set_data_factory
        self.reads = ReadIndex(self, clock)
        self._max_append_bytes = config.max_append_bytes
        self._expired: dict[str, str] = {}  # transactions the lease aborted lately -> why (for the error)

    # ------------------------------------------------------------------ lookup
    @property
    def processor(self) -> OperationProcessor:
        return self._processor

    @property
    def lock(self) -> threading.Lock:
        return self._lock

    def segment(self, name: str, use: bool = True) -> Segment:
        """The segment, reactivated if evicted; a use unless ``use=False``. Lock held. O(1)."""
        if self._closed:
            raise StoreClosedError("the segment store is closed")
        try:
            seg = self._segments[name]
        except KeyError:
            seg = self._miss(name)
        except TypeError:
            raise InvalidArgumentError(
                f"segment name must be a str, got {type(name).__name__} {name!r}"
            ) from None
        if use:
            seg.last_used = self._processor.last_timestamp
        return seg

    def _miss(self, name: str) -> Segment:
        """Reactivate an evicted segment, or raise ``SegmentNotFoundError`` (saying why, if it knows)."""
        seg = self._evictor.reactivate(name) if self._evictor is not None else None
        if seg is None:
            why = self._expired.get(name) if type(name) is str else None
            raise SegmentNotFoundError(why or f"segment {quote(name)} does not exist") from None
        return seg

    def active(self, name: str) -> Segment | None:
        """The segment if it is in the active set, else ``None``. Lock held. O(1)."""
        return self._segments.get(name)

    def active_segments(self) -> Iterator[Segment]:
        """The segments in the active set. Lock held."""
        return iter(self._segments.values())

    def _writable(self, name: str) -> Segment:
        seg = self.segment(name)
        if seg.sealed:
            raise SegmentSealedError(f"segment {name!r} is sealed")
        return seg

    def segment_names(self) -> list[str]:
        """Names of all segments, transactions included. O(n)."""
        with self._lock:
            self.check_open()
            names = list(self._segments)
            if self._evictor is not None:
                names.extend(self._evictor.cold_names())
            return names

    def exists(self, name: str) -> bool:
        """Whether the segment exists. O(1)."""
        with self._lock:
            self.check_open()
            if type(name) is not str:
                check_name(name)
            if name in self._segments:
                return True
            return self._evictor is not None and self._evictor.is_cold(name)

    # ------------------------------------------------------------------ create
    def create_segment(self, name: str) -> SegmentInfo:
        """Create an empty segment; ``CREATION_TIME`` = ``LAST_WRITE_TIME`` = now. Temporal.

        The name has at most ``limits.MAX_SEGMENT_NAME_CHARS`` characters.
        """
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

    def create_transaction(self, parent: str) -> str:
        """Create a transaction segment for ``parent`` and return its name. Temporal."""
        with self._lock:
            p = self._writable(parent)
            if p.parent is not None:
                raise NotATransactionError(f"segment {parent!r} is a transaction; transactions cannot nest")
            seq, ts = self._processor.stamp()
            name = f"{parent}{TRANSACTION_SEPARATOR}{seq:016x}"
            self._create_locked(name, parent, seq, ts)
            return name

    def _create_locked(self, name: str, parent: str | None, seq: int, ts: int) -> Segment:
        """Make the segment's data (its file), then log the create, then install it. Lock held.

        The effect comes before the log record: a data file that cannot be made fails the
        create before anything is logged, and a failed log write removes the file again,
        so a create reported as failed is absent, also after a restart.
        """
        seg = self._new_segment(name, parent, ts, seq)
        try:
            self._log(CreateSegment(seq, ts, name, parent))
        except BaseException:
            seg.data.remove()
            raise
        self._segments[name] = seg
        return seg

    def _new_segment(self, name: str, parent: str | None, ts: int, seq: int) -> Segment:
        data = self._data_factory(name, seq) if self._data_factory is not None else None
        return Segment(name, ts, parent, data)

    def _apply_create(self, name: str, parent: str | None, ts: int, seq: int = 0) -> Segment:
        seg = self._segments[name] = self._new_segment(name, parent, ts, seq)
        return seg

    # ------------------------------------------------------------------ append
    def append(
        self,
        name: str,
        data: bytes,
        expected_offset: int | None = None,
        *,
        writer_id: int | None = None,
        event_number: int | None = None,
    ) -> AppendResult:
        """Append ``data`` (bytes-like, non-empty). Temporal; O(len(data)) amortised.

        With ``expected_offset`` the append happens only if the segment's length equals it.
        With ``writer_id`` and ``event_number`` the store keeps the writer's last event
        number as an attribute (key ``writer_id``); an append whose event number is not
        above it is a retry: it is acknowledged with ``duplicate=True`` and not stored.
        """
        if type(data) is not bytes:
            data = as_bytes(name, data)
        n = len(data)
        if not 0 < n <= self._max_append_bytes:
            self._refuse_length(name, n)
        if writer_id is not None or event_number is not None:
            check_writer(name, writer_id, event_number)
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
            if writer_id is not None:
                last = seg.attributes.get(writer_id)
                if last is not None and event_number is not None and event_number <= last:
                    return _result(AppendResult, (offset, 0, seg.last_write_time, True))
            seq, ts = self._processor.stamp()
            if self._processor.log is not None:
                self._processor.log.write(Append(seq, ts, name, offset, data, writer_id, event_number))
            seg.data.append(data)
            seg.length = end = offset + n
            seg.windex.record_write_trusted(end, ts)
            seg.last_write_time = ts
            seg.last_used = ts
            if writer_id is not None:
                seg.attributes[writer_id] = event_number  # type: ignore[assignment]
            if seg.futures:
                wakeups = take_wakeups(seg)
        finally:
            lock.release()
        if wakeups:
            complete(wakeups)
        return _result(AppendResult, (offset, n, ts, False))

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
        """Append many events as one operation with one timestamp. O(total bytes).

        The events are stored back to back; the result's ``length`` is their total size.
        """
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

    # ------------------------------------------------------------------ merge
    def merge_transaction(self, txn: str, parent: str | None = None) -> MergeResult:
        """Merge a sealed transaction into its parent, atomically, at the merge's own timestamp.

        The merged bytes take the merge's timestamp, never the transaction's own times
        (PDP-26: a merge is one large append). The transaction segment is gone afterwards.
        """
        wakeups: list[Wakeup] = []
        with self._lock:
            t = self.segment(txn)
            if t.parent is None:
                raise NotATransactionError(f"segment {txn!r} is not a transaction segment")
            if parent is not None and parent != t.parent:
                raise WrongParentError(f"transaction {txn!r} belongs to {t.parent!r}, not to {quote(parent)}")
            if not t.sealed:
                raise SegmentNotSealedError(f"transaction {txn!r} must be sealed before it is merged")
            if t.start_offset != 0:
                raise SegmentTruncatedError(
                    f"transaction {txn!r} was truncated (start offset {t.start_offset}); it cannot be merged"
                )
            p = self.segment(t.parent)
            if p.sealed:
                raise SegmentSealedError(
                    f"segment {t.parent!r} is sealed; transaction {txn!r} cannot be merged into it"
                )
            n = t.length
            if p.length + n > INT64_MAX:
                raise InvalidArgumentError(f"segment {t.parent!r} would exceed 2^63 bytes")
            data = t.data.read(0, n) if n else b""  # before the log: a failed read changes nothing
            seq, ts = self._processor.stamp()
            offset = p.length
            self._log(MergeTransaction(seq, ts, txn, t.parent, offset, n))
            self._apply_merge(t, p, ts, wakeups, data)
            if p.futures:
                wakeups.extend(take_wakeups(p))
        complete(wakeups)
        return MergeResult(offset, n, ts)

    def _apply_merge(
        self, t: Segment, p: Segment, ts: int, wakeups: list[Wakeup], data: bytes | None = None
    ) -> None:
        n = t.length
        if n:
            p.data.append(t.data.read(0, n) if data is None else data)
            p.length += n
            p.windex.record_write(p.length, ts)
        else:
            p.windex.record_time(ts)
        p.last_write_time = ts
        p.last_used = ts
        self._remove(t, wakeups, f"transaction {t.name!r} was merged into {p.name!r}")

    # ------------------------------------------------------------------ attributes
    def update_attributes(self, name: str, updates: Iterable[AttributeUpdate], *, use: bool = True) -> int:
        """Apply attribute updates atomically (all or none); return the operation's timestamp.

        Temporal: ``LAST_WRITE_TIME`` moves even for an empty list (the watermark
        advancer's trivial update). ``use=False`` is for the advancer: it does not count
        as a client's use of the segment.
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

    def _update_attributes_locked(self, seg: Segment, planned: dict[int, int | None]) -> list[Wakeup]:
        seq, ts = self._processor.stamp()
        self._log(UpdateAttributes(seq, ts, seg.name, tuple(planned.items())))
        self._apply_attributes(seg, planned, ts)
        return take_wakeups(seg) if seg.futures else []

    def _apply_attributes(self, seg: Segment, values: dict[int, int | None], ts: int) -> None:
        attrs = seg.attributes
        for key, value in values.items():
            if value is None:
                attrs.pop(key, None)  # removed
            else:
                attrs[key] = value
        seg.last_write_time = ts
        seg.windex.record_time(ts)

    def get_attributes(self, name: str, keys: Iterable[int] | None = None) -> dict[int, int]:
        """The segment's attributes, core ones included; only ``keys`` if given. O(k)."""
        if keys is not None:
            keys = check_attribute_keys(name, keys)
        with self._lock:
            attrs = self.segment(name).all_attributes()
        if keys is None:
            return attrs
        return {k: attrs[k] for k in keys if k in attrs}

    # ------------------------------------------------------------------ seal, truncate, delete
    def seal(self, name: str) -> int:
        """Seal the segment; return its final length. Temporal: seal time - 1 is its final watermark."""
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
        """Move the start offset to ``offset`` (a no-op at the current start). Not temporal.

        Below the current start offset it raises ``BadOffsetError``, as Pravega's
        ``BadOffsetException``: the bytes there are gone already.
        """
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
        """Delete the segment and its open transactions; reads waiting on them fail. Not temporal.

        A transaction cannot outlive its parent (Pravega deletes them together): left
        open, it would merge into a later segment created under the same name.
        O(segments) to find the transactions.
        """
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

    def _transactions_of(self, parent: str) -> list[Segment]:
        prefix = parent + TRANSACTION_SEPARATOR
        names = [n for n in self._segments if n.startswith(prefix)]
        if self._evictor is not None:
            names += [n for n in self._evictor.cold_names() if n.startswith(prefix)]
        return [self.segment(n, use=False) for n in names]

    def _remove(self, seg: Segment, wakeups: list[Wakeup], why: str) -> None:
        del self._segments[seg.name]
        for f in seg.futures:
            wakeups.append((f, SegmentNotFoundError(why)))
        seg.futures = []
        seg.data.close()

    # ------------------------------------------------------------------ info and reads
    def get_info(self, name: str) -> SegmentInfo:
        """Name, start offset, length, sealed, creation time, last write time. O(1)."""
        with self._lock:
            return self.segment(name).info()

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

    def expire_transactions(self) -> list[str]:
        """Abort open transactions unwritten for ``transaction_lease_ms``; return their names.

        A transaction's lease runs from its last temporal operation (creation, append,
        attribute update: ``ping`` is an empty one), on the ingestion clock. Sealed
        transactions are being committed and stay. Waiting reads of an aborted one fail.
        O(segments).
        """
        wakeups: list[Wakeup] = []
        with self._lock:
            self.check_open()
            if self._processor.read_only is not None:
                return []  # an abort cannot be logged: the transactions wait for a writable restart
            threshold = self._processor.now() - self._config.transaction_lease_ms
            due = [
                seg
                for seg in self._segments.values()
                if seg.parent is not None and not seg.sealed and seg.last_write_time <= threshold
            ]
            if due:
                seq, ts = self._processor.stamp_many(len(due))
                lease = self._config.transaction_lease_ms
                for seg in due:
                    self._log(Delete(seq, ts, seg.name))
                    why = (
                        f"transaction {seg.name!r} expired: no write for transaction_lease_ms ({lease} ms), "
                        "so the store aborted it"
                    )
                    self._remove(seg, wakeups, why)
                    self._expired[seg.name] = why
                    seq += 1
                while len(self._expired) > _EXPIRED_KEPT:  # the oldest first (dicts keep insertion order)
                    del self._expired[next(iter(self._expired))]
        complete(wakeups)
        return [seg.name for seg in due]

    # ------------------------------------------------------------------ state API (durability, eviction)
    def set_data_factory(self, factory: Callable[[str, int], SegmentData] | None) -> None:
        """Where new segments keep their bytes: ``factory(name, seq)`` (``None``: in memory)."""
        self._data_factory = factory

    def attach_log(self, log: OperationSink | None) -> None:
        """Send every operation from now on to ``log`` before it applies (``None``: stop logging)."""
        with self._lock:
            self._processor.log = log

    def set_cold(self, cold: ColdSegments | None) -> None:
        """The evictor asked on a miss (reactivation) and on replay."""
        self._evictor = cold

    def snapshot_state(self) -> ContainerState:
        """The processor's position and the active segments. Lock held. O(segments)."""
        p = self._processor
        return ContainerState(p.last_seq, p.last_timestamp, tuple(self._segments.values()))

    def restore_state(self, state: ContainerState) -> None:
        """Install recovered segments and continue after the state's sequence number and timestamp.

        The container must hold no segment yet. O(segments).
        """
        with self._lock:
            if self._segments:
                raise SegmentStoreError(
                    f"restore_state into a container that holds {len(self._segments)} segments already"
                )
            for seg in state.segments:
                self._segments[seg.name] = seg
            self._processor.restore_state(state.last_seq, state.last_timestamp)

    def discard(self) -> None:
        """Close every active segment's data and forget them (a failed recovery). O(segments)."""
        with self._lock:
            for seg in self._segments.values():
                seg.data.close()
            self._segments.clear()

    def close_data(self) -> None:
        """Close every active segment's data (the durable store's close). Lock held."""
        for seg in self._segments.values():
            seg.data.close()

    def evict(self, name: str) -> Segment:
        """Take ``name`` out of the active set and hand it to the caller (the evictor). Lock held. O(1)."""
        return self._segments.pop(name)

    def reinstate(self, seg: Segment, advance: bool) -> bool:
        """Put an evicted segment back; with ``advance``, give it the advancer's update if it has
        been idle past ``max_watermark_lag_ms`` (not counted as use). Returns whether it did. Lock held.
        """
        self._segments[seg.name] = seg
        if (
            advance
            and self._processor.read_only is None
            and not seg.sealed
            and seg.parent is None
            and not is_system_segment(seg.name)
            and seg.last_write_time <= self._processor.now() - self._config.max_watermark_lag_ms
        ):
            self._update_attributes_locked(seg, {})  # no waiting reads on a segment just loaded
            return True
        return False

    @property
    def active_count(self) -> int:
        """Segments in the active set. O(1)."""
        return len(self._segments)

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
            if op.writer_id is not None and op.event_number is not None:
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

    # ------------------------------------------------------------------ lifecycle
    def _log(self, op: Operation) -> None:
        if self._processor.log is not None:
            self._processor.log.write(op)

    def check_open(self) -> None:
        """Raise ``StoreClosedError`` after ``close``."""
        if self._closed:
            raise StoreClosedError("the segment store is closed")

    def close(self) -> None:
        """Fail every waiting read and refuse further operations."""
        wake: list[Wakeup] = []
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for seg in self._segments.values():
                for f in seg.futures:
                    wake.append((f, StoreClosedError("the segment store was closed")))
                seg.futures = []
        complete(wake)

    @checked
    def _check(self) -> None:
        """Assert the invariants of the container and every segment in it."""
        with self._lock:
            self._processor._check()
            last_ts = self._processor.last_timestamp
            for name, seg in self._segments.items():
                assert seg.name == name, f"segment stored under {name!r} is named {seg.name!r}"
                seg._check()
                assert seg.last_write_time <= last_ts, (
                    f"{name}: LAST_WRITE_TIME {seg.last_write_time} is after the processor's "
                    f"last timestamp {last_ts}"
                )
                if seg.parent is not None:
                    assert TRANSACTION_SEPARATOR in name, f"transaction {name!r} is misnamed"
                for key in seg.attributes:
                    assert not is_core_attribute(key) or key in (CREATION_TIME, LAST_WRITE_TIME)
