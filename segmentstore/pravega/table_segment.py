"""One table segment held in memory: its log's records, the key index over them, and the reads Pravega has.

``TableSegment`` is the state a table segment's log (``table_log``) replays to; it does
no I/O (``tables`` appends the records it plans, then applies them). Semantics are
Pravega's (``ContainerKeyIndex``, ``TableEntryDeltaIterator``, ``PravegaRequestProcessor``):

- **Versions.** A key's version is the offset of the put that wrote it (a compaction
  keeps it). An update names, per key, ``NO_VERSION`` (``i64::MIN``: unconditional),
  ``NOT_EXISTS`` (-1: the key must not exist) or the version it must have. Every
  condition of a command is checked against the table as it was before the command,
  so a command naming one key twice with the same version passes and the last value
  wins (the Rust synchronizer does this with its outer keys). If any key named with a
  version does not exist the answer is ``TableKeyNotFoundError``, otherwise any
  mismatch is ``TableKeyBadVersionError``; either way nothing changes.
- **Deltas** (``ReadTableEntriesDelta``) replay the log from a position at a record
  boundary: each key changed in the range once, with its latest value, at most
  ``count`` keys, and the position after the last record read, so a reader following
  positions always moves forward. A position below the start (compacted away) starts at
  the start with ``should_clear``; past the end is ``InvalidArgumentError``, as
  Pravega's ``IllegalArgumentException``. A key whose last record in the range is a
  removal is left out, as Pravega leaves it out (a delta never says a key went; the
  0.3.7 synchronizer writes tombstones instead and never removes them). At the end, the
  reply is empty with the position asked for (Pravega's falls back to 0; the client
  ignores the position of an empty reply).
- **Iteration** (``ReadTableKeys``/``ReadTableEntries``) goes through the live keys in
  byte order; the continuation token is the last key returned, prefixed with ``k``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ..checks import checked
from ..errors import InvalidArgumentError
from .errors import TableKeyBadVersionError, TableKeyNotFoundError
from .table_log import PUT, REMOVAL, TableRecord

__all__ = ["NO_VERSION", "NOT_EXISTS", "TableSegment", "Entry"]

NO_VERSION = -(2**63)
"""A key version that means "whatever the key's version" (the client's ``KEY_NO_VERSION``)."""
NOT_EXISTS = -1
"""A key version that means "the key must not exist" (also the version of a key read that is absent)."""
_TOKEN = b"k"

Entry = tuple[bytes, bytes, int]
"""A key, its value and its version, as replies carry them."""


def _names(keys: Sequence[bytes]) -> str:
    shown = ", ".join(repr(k[:40]) for k in keys[:3])
    return shown + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


class TableSegment:
    """The records of one table segment from ``start`` (its first offset held) and the key index."""

    def __init__(self, name: str, start: int = 0) -> None:
        self.name = name
        self.start = start
        self.length = start
        self.records: list[TableRecord] = []
        self._offsets: list[int] = []
        self.index: dict[bytes, TableRecord] = {}  # key -> the put holding its value
        self._sorted: list[bytes] | None = None
        self.live_bytes = 0  # bytes of the records in ``index``

    # ------------------------------------------------------------------ changes
    def apply(self, records: Sequence[TableRecord]) -> None:
        """Apply records that follow the log's end (after they were appended, or on replay). O(records)."""
        for r in records:
            if r.offset != self.length:
                raise InvalidArgumentError(
                    f"table segment {self.name!r}: a record at {r.offset} does not follow the log's end "
                    f"{self.length}"
                )
            self.records.append(r)
            self._offsets.append(r.offset)
            old = self.index.pop(r.key, None)
            if old is not None:
                self.live_bytes -= old.size
            if r.kind == PUT:
                self.index[r.key] = r
                self.live_bytes += r.size
                if old is None:
                    self._sorted = None
            elif old is not None:
                self._sorted = None
            self.length = r.end

    def check_versions(self, keys: Sequence[tuple[bytes, int]]) -> None:
        """Raise if a conditional key's version does not hold against the table as it is. O(keys)."""
        bad: list[bytes] = []
        for key, version in keys:
            if version == NO_VERSION:
                continue
            current = self.index.get(key)
            if current is None:
                if version != NOT_EXISTS:
                    raise TableKeyNotFoundError(
                        f"table segment {self.name!r}: key {key[:80]!r} does not exist (version {version} "
                        "was expected)"
                    )
            elif current.version != version:
                bad.append(key)
        if bad:
            raise TableKeyBadVersionError(
                f"table segment {self.name!r}: {len(bad)} key(s) have another version than the update "
                f"names: {_names(bad)}"
            )

    def plan_puts(self, entries: Sequence[tuple[bytes, bytes]]) -> list[TableRecord]:
        """The records putting ``entries`` at the log's end; each version is its own offset. O(entries)."""
        out, at = [], self.length
        for key, value in entries:
            r = TableRecord(at, PUT, at, key, value)
            out.append(r)
            at = r.end
        return out

    def plan_removals(self, keys: Sequence[bytes]) -> list[TableRecord]:
        """The records removing ``keys`` at the log's end. O(keys)."""
        out, at = [], self.length
        for key in keys:
            r = TableRecord(at, REMOVAL, at, key, b"")
            out.append(r)
            at = r.end
        return out

    def plan_compaction(self) -> list[TableRecord]:
        """Copies of every live put, at the log's end, with their versions. O(live keys)."""
        out, at = [], self.length
        for old in sorted(self.index.values(), key=lambda r: r.offset):
            r = TableRecord(at, PUT, old.version, old.key, old.value)
            out.append(r)
            at = r.end
        return out

    def drop_before(self, start: int) -> None:
        """Forget the records before ``start`` (a record boundary; every live put is after it). O(records)."""
        i = bisect.bisect_left(self._offsets, start)
        if start != self.length and (i == len(self._offsets) or self._offsets[i] != start):
            raise InvalidArgumentError(f"table segment {self.name!r}: {start} is not a record boundary")
        if any(r.offset < start for r in self.index.values()):
            raise InvalidArgumentError(f"table segment {self.name!r}: live keys lie before {start}")
        del self.records[:i]
        del self._offsets[:i]
        self.start = start

    # ------------------------------------------------------------------ reads
    def get(self, keys: Sequence[bytes]) -> list[TableRecord | None]:
        """The put holding each key's value, ``None`` for a key that does not exist. O(keys)."""
        return [self.index.get(k) for k in keys]

    def page(self, token: bytes, count: int, budget: int) -> tuple[list[TableRecord], bytes]:
        """Live keys after ``token`` in byte order: at most ``count``, stopping once ``budget`` bytes are
        taken; and the token to continue with (the same one when nothing is left). O(count + log keys)."""
        if token and token[:1] != _TOKEN:
            raise InvalidArgumentError(
                f"table segment {self.name!r}: continuation token {token[:40]!r} is not one this server gave"
            )
        if self._sorted is None:
            self._sorted = sorted(self.index)
        keys = self._sorted
        i = bisect.bisect_right(keys, token[1:]) if token else 0
        out: list[TableRecord] = []
        size = 0
        while i < len(keys) and len(out) < count and size < budget:
            r = self.index[keys[i]]
            out.append(r)
            size += r.size
            i += 1
        return out, (_TOKEN + out[-1].key if out else token)

    def delta(self, position: int, count: int, budget: int) -> tuple[list[Entry], bool, bool, int]:
        """Keys changed from ``position`` on: ``(entries, should_clear, reached_end, last_position)``.

        At most ``count`` keys, stopping once ``budget`` bytes are taken. O(records read + log records).
        """
        if position < 0 or position > self.length:
            raise InvalidArgumentError(
                f"table segment {self.name!r}: position {position} is outside the table's log "
                f"(0 to {self.length})"
            )
        should_clear = position < self.start
        begin = max(position, self.start)
        i = bisect.bisect_left(self._offsets, begin)
        if begin < self.length and (i == len(self._offsets) or self._offsets[i] != begin):
            raise InvalidArgumentError(
                f"table segment {self.name!r}: position {position} is not at an entry boundary "
                "(use a position this server returned)"
            )
        out: dict[bytes, Entry] = {}
        size, at = 0, begin
        while i < len(self.records) and len(out) < count and size < budget:
            r = self.records[i]
            if r.kind == PUT:
                out.pop(r.key, None)
                out[r.key] = (r.key, r.value, r.version)
                size += r.size
            else:
                out.pop(r.key, None)
            at = r.end
            i += 1
        return list(out.values()), should_clear, at >= self.length, at

    @checked
    def _check(self) -> None:
        """The records tile ``[start, length)``; the index and live bytes are their replay."""
        at = self.start
        index: dict[bytes, TableRecord] = {}
        assert self._offsets == [r.offset for r in self.records], "offsets out of step with the records"
        for r in self.records:
            assert r.offset == at, f"record at {r.offset}, expected {at}"
            assert r.kind in (PUT, REMOVAL), f"record kind {r.kind}"
            if r.kind == PUT:
                assert 0 <= r.version <= r.offset, f"put at {r.offset} has version {r.version}"
                index[r.key] = r
            else:
                assert not r.value, "a removal with a value"
                index.pop(r.key, None)
            at = r.end
        assert at == self.length, f"records end at {at}, length {self.length}"
        assert index.keys() == self.index.keys(), "index keys differ from the replay"
        assert all(index[k] is self.index[k] for k in index), "index values differ from the replay"
        assert self.live_bytes == sum(r.size for r in self.index.values()), "live bytes"
        versions = [r.version for r in self.index.values()]
        assert len(set(versions)) == len(versions), "two live keys share a version"
        assert self._sorted is None or self._sorted == sorted(self.index), "sorted keys are stale"
