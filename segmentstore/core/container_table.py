"""The segment container's table of segments: lookup, creation and removal, the stamp of a write, open/closed.

``ContainerTable`` is the base every part of the container (``core.container``) builds
on, and what the read index reads through (``read_index.SegmentTable``): it holds the
segments, the lock that serialises them and the operation processor, finds a segment
(reactivating an evicted one through ``ColdSegments``), installs a new one after its
create is logged, removes one (failing its waiting reads), and applies the timestamped
attribute update every write and every watermark advance leaves. The operations
themselves live in ``core.container`` (segment lifecycle, replay), ``core.transactions``
(transactions, merges, leases) and ``core.container_state`` (the state API of
durability and eviction).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from ..attributes import CREATION_TIME, LAST_WRITE_TIME, is_core_attribute
from ..checks import checked
from ..clock import Clock
from ..config import StoreConfig
from ..errors import InvalidArgumentError, SegmentNotFoundError, SegmentSealedError, StoreClosedError
from ..results import SegmentInfo
from .operations import CreateSegment, Operation, UpdateAttributes
from .processor import OperationProcessor, OperationSink
from .read_index import ReadIndex, Wakeup, complete, take_wakeups
from .segment import TRANSACTION_SEPARATOR, Segment
from .storage import SegmentData
from .validation import check_name, quote

__all__ = ["ColdSegments", "ContainerTable"]

_NOTHING: dict[str, Segment] = {}
"""What ``lookup`` finds in a closed store: nothing (``segment`` then raises ``StoreClosedError``)."""


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


class ContainerTable:
    """The segments of one container and what every operation on them shares. Thread-safe.

    Not used alone: ``SegmentContainer`` is the container.
    """

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
        """See ``read_index.SegmentTable.segment``; a use unless ``use=False``. O(1)."""
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

    def lookup(self) -> tuple[Callable[[str], Segment | None], int]:
        """See ``read_index.SegmentTable.lookup``. O(1)."""
        return (_NOTHING.get if self._closed else self._segments.get), self._processor.last_timestamp

    def use(self, segments: Iterable[Segment]) -> None:
        """See ``read_index.SegmentTable.use``. O(k)."""
        ts = self._processor.last_timestamp
        for seg in segments:
            seg.last_used = ts

    def _miss(self, name: str) -> Segment:
        """Reactivate an evicted segment, or raise ``SegmentNotFoundError`` (saying why, if it knows)."""
        seg = self._evictor.reactivate(name) if self._evictor is not None else None
        if seg is None:
            why = self._expired.get(name) if type(name) is str else None
            raise SegmentNotFoundError(why or f"segment {quote(name)} does not exist") from None
        return seg

    def active(self, name: str) -> Segment | None:
        """See ``read_index.SegmentTable.active``. O(1)."""
        return self._segments.get(name)

    def active_segments(self) -> Iterator[Segment]:
        """See ``read_index.SegmentTable.active_segments``."""
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
        """See ``SegmentClient.exists``."""
        with self._lock:
            self.check_open()
            if type(name) is not str:
                check_name(name)
            if name in self._segments:
                return True
            return self._evictor is not None and self._evictor.is_cold(name)

    def get_info(self, name: str) -> SegmentInfo:
        """See ``SegmentClient.get_info``."""
        with self._lock:
            return self.segment(name).info()

    @property
    def active_count(self) -> int:
        """Segments in the active set. O(1)."""
        return len(self._segments)

    # ------------------------------------------------------------------ create and remove
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

    def _remove(self, seg: Segment, wakeups: list[Wakeup], why: str) -> None:
        del self._segments[seg.name]
        for f in seg.futures:
            wakeups.append((f, SegmentNotFoundError(why)))
        seg.futures = []
        seg.data.close()

    # ------------------------------------------------------------------ the stamp of a write
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

    def _log(self, op: Operation) -> None:
        if self._processor.log is not None:
            self._processor.log.write(op)

    # ------------------------------------------------------------------ lifecycle
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
