"""Pravega's table segments in the store: each one an append-only log in a system segment, durable like any.

A reader group of the Rust client keeps its state in a table segment
(``scope/<group>_kvtable/0.#epoch.0``); ``TableSegments`` holds those of one store.
The table named ``T`` lives in the store segment ``_system/_tables/T`` (``TABLE_PREFIX``),
out of the way of streams and of the idle-watermark advancer, as ingestwm's own
reader groups keep theirs in ``_system/_rg/<group>``. Every update is one store append
of its records (``table_log``), made conditional on the log's length so that nothing
else can slip between what was checked and what is written; only after the store
acknowledged it (durably, as the store's sync policy says) does the in-memory
``TableSegment`` change, so a refused or failed update leaves the table as it was.

The key index is not stored: a table is replayed from its segment the first time it is
used after a start (O(log bytes)), and again if its segment's length is not the one
this process wrote (another writer, a failed append whose outcome is unknown). When the
bytes of superseded records exceed both the live ones and ``compact_min_bytes``, an
update is followed by a compaction, as Pravega's: the live puts are appended again
(versions kept) and the segment is truncated before them; a crash between the two
leaves copies that replay to the same table.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import BadOffsetError, InvalidArgumentError, SegmentNotFoundError, SegmentStoreError
from ..store import per_store
from .table_log import TableRecord, encode_records, parse_records
from .table_segment import NOT_EXISTS, Entry, TableSegment

if TYPE_CHECKING:
    from ..store import SegmentStore

__all__ = [
    "TABLE_PREFIX",
    "MAX_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "NO_OFFSET",
    "TableSegments",
    "tables_of",
]

TABLE_PREFIX = "_system/_tables/"
MAX_KEY_BYTES = 8192
"""Longest key (Pravega's ``TableStore.MAXIMUM_KEY_LENGTH``)."""
MAX_VALUE_BYTES = 1024 * 1024 - MAX_KEY_BYTES
"""Longest value (Pravega's ``TableStore.MAXIMUM_VALUE_LENGTH``)."""
NO_OFFSET = -1
"""An update's ``table_segment_offset`` when it is not conditional on the table's length."""
_READ_CHUNK = 4 * 1024 * 1024


class TableSegments:
    """The table segments of ``store`` (thread-safe; every operation O(its keys) once a table is loaded)."""

    def __init__(self, store: SegmentStore, compact_min_bytes: int = 1024 * 1024) -> None:
        self.store = store
        self.compact_min_bytes = compact_min_bytes
        self._lock = threading.RLock()
        self._tables: dict[str, TableSegment] = {}
        self.compactions = 0

    @staticmethod
    def segment_of(name: str) -> str:
        """The store segment holding table ``name``."""
        return TABLE_PREFIX + name

    # ------------------------------------------------------------------ lifecycle
    def create(self, name: str) -> None:
        """Create an empty table; ``SegmentExistsError`` if there is one."""
        with self._lock:
            self.store.create_segment(self.segment_of(name))
            self._tables[name] = TableSegment(name)

    def delete(self, name: str, must_be_empty: bool) -> None:
        """Delete a table (``TableNotEmptyError`` if ``must_be_empty`` and it holds keys)."""
        from .errors import TableNotEmptyError

        with self._lock:
            t = self.table(name)
            if must_be_empty and t.index:
                raise TableNotEmptyError(f"table segment {name!r} holds {len(t.index)} keys: not deleted")
            self._tables.pop(name, None)
            self.store.delete(self.segment_of(name))

    def table(self, name: str) -> TableSegment:
        """The table, replayed from its segment if this process does not hold it as the segment is.

        ``SegmentNotFoundError`` naming the table if there is none.
        """
        with self._lock:
            seg = self.segment_of(name)
            try:
                info = self.store.get_info(seg)
            except SegmentNotFoundError:
                self._tables.pop(name, None)
                raise SegmentNotFoundError(f"table segment {name!r} does not exist") from None
            t = self._tables.get(name)
            if t is not None and t.length == info.length and t.start == info.start_offset:
                return t
            t = TableSegment(name, info.start_offset)
            at = info.start_offset
            data = bytearray()
            while at < info.length:
                r = self.store.read(seg, at, min(_READ_CHUNK, info.length - at))
                if not r.data:
                    break
                data += r.data
                at += len(r.data)
            t.apply(parse_records(bytes(data), info.start_offset, name))
            self._tables[name] = t
            return t

    # ------------------------------------------------------------------ updates
    def put(self, name: str, entries: Sequence[tuple[bytes, bytes, int]], table_offset: int) -> list[int]:
        """Put ``(key, value, version)`` entries, each conditional on its version; their new versions."""
        for key, value, _ in entries:
            _check_key(name, key)
            if len(value) > MAX_VALUE_BYTES:
                raise InvalidArgumentError(
                    f"table segment {name!r}: a value of {len(value)} bytes for key {key[:40]!r} exceeds "
                    f"{MAX_VALUE_BYTES} bytes"
                )
        with self._lock:
            t = self.table(name)
            _check_offset(t, table_offset)
            t.check_versions([(k, v) for k, _, v in entries])
            records = t.plan_puts([(k, v) for k, v, _ in entries])
            self._append(t, records)
            versions = [r.version for r in records]
            self._maybe_compact(t)
            return versions

    def remove(self, name: str, keys: Sequence[tuple[bytes, int]], table_offset: int) -> None:
        """Remove keys, each conditional on its version (a key that does not exist is removed already)."""
        for key, _ in keys:
            _check_key(name, key)
        with self._lock:
            t = self.table(name)
            _check_offset(t, table_offset)
            t.check_versions(keys)
            self._append(t, t.plan_removals([k for k, _ in keys]))
            self._maybe_compact(t)

    def _append(self, t: TableSegment, records: list[TableRecord]) -> None:
        """Append ``records`` at the log's end, then apply them (nothing changes if the store refuses)."""
        if not records:
            return
        seg = self.segment_of(t.name)
        try:
            self.store.append(seg, encode_records(records), expected_offset=t.length)
        except SegmentStoreError:
            self._tables.pop(t.name, None)  # whether it was written is the store's to say: replay next time
            raise
        t.apply(records)

    def _maybe_compact(self, t: TableSegment) -> None:
        dead = t.length - t.start - t.live_bytes
        if dead < max(t.live_bytes, self.compact_min_bytes):
            return
        try:
            copies = t.plan_compaction()
            limit = self.store.config.max_append_bytes
            batch: list[TableRecord] = []
            size = 0
            for r in copies:  # in appends the store accepts
                if batch and size + r.size > limit:
                    self._append(t, batch)
                    batch, size = [], 0
                batch.append(r)
                size += r.size
            new_start = t.length if not copies else copies[0].offset
            self._append(t, batch)
            self.store.truncate(self.segment_of(t.name), new_start)
            t.drop_before(new_start)
            self.compactions += 1
        except SegmentStoreError:
            self._tables.pop(t.name, None)  # the update itself is done; the table replays next time

    # ------------------------------------------------------------------ reads
    def get(self, name: str, keys: Sequence[bytes]) -> list[Entry]:
        """Each key's ``(key, value, version)``; an absent key has an empty value and version -1."""
        with self._lock:
            found = self.table(name).get(keys)
        return [
            (k, r.value, r.version) if r else (k, b"", NOT_EXISTS) for k, r in zip(keys, found, strict=True)
        ]

    def page(self, name: str, token: bytes, count: int, budget: int) -> tuple[list[Entry], bytes]:
        """Live entries after ``token`` in key order, and the next token (``TableSegment.page``)."""
        with self._lock:
            records, token = self.table(name).page(token, count, budget)
        return [(r.key, r.value, r.version) for r in records], token

    def delta(self, name: str, position: int, count: int, budget: int) -> tuple[list[Entry], bool, bool, int]:
        """The keys changed from ``position`` on (``TableSegment.delta``)."""
        with self._lock:
            return self.table(name).delta(position, count, budget)

    def info(self, name: str) -> tuple[int, int, int]:
        """``(start offset, length, live keys)`` of a table."""
        with self._lock:
            t = self.table(name)
            return t.start, t.length, len(t.index)

    def _check(self) -> None:
        """Every table held is its segment's replay, and passes its own ``_check``."""
        with self._lock:
            for name, t in list(self._tables.items()):
                t._check()
                self._tables.pop(name)
                fresh = self.table(name)
                fresh._check()
                assert fresh.index.keys() == t.index.keys(), f"table {name!r}: replay differs"
                assert all(fresh.index[k].version == t.index[k].version for k in t.index), name
                assert all(fresh.index[k].value == t.index[k].value for k in t.index), name
                self._tables[name] = t


def _check_key(name: str, key: bytes) -> None:
    if not key or len(key) > MAX_KEY_BYTES:
        raise InvalidArgumentError(
            f"table segment {name!r}: a key of {len(key)} bytes (a key has 1 to {MAX_KEY_BYTES} bytes)"
        )


def _check_offset(t: TableSegment, table_offset: int) -> None:
    if table_offset != NO_OFFSET and table_offset != t.length:
        raise BadOffsetError(
            f"table segment {t.name!r}: the update expects the table's length to be {table_offset}, "
            f"it is {t.length}",
            expected=table_offset,
            actual=t.length,
        )


tables_of = per_store(TableSegments)
"""The store's one ``TableSegments`` (two would each hold a stale index of the other's writes). O(1)."""
