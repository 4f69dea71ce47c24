"""File-backed segment bytes with one bounded in-memory cache shared by all segments.

Each segment's bytes ``[base, length)`` live in one data file (file byte 0 is segment
offset ``base``). The write-ahead log is the source of truth: an append only goes
into the segment's in-memory tail, which is written to the file once it reaches a
block (64 KiB), under cache pressure, before a snapshot and on eviction. Snapshots
``sync`` every file, so the bytes up to a snapshot's lengths are durable; recovery
truncates each file to its snapshot length and rebuilds the rest from the log.

Memory is bounded by ``SegmentCache.capacity`` (``StoreConfig.cache_bytes``): it
counts unflushed tails and clean blocks read back from files (an LRU). Not
thread-safe: the container's lock guards every call.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import OrderedDict
from pathlib import Path

from ..checks import checked
from ..core.records import walk_records
from ..errors import DataCorruptionError, StorageError

__all__ = ["BLOCK_BYTES", "SegmentCache", "FileSegmentData"]

_log = logging.getLogger(__name__)

BLOCK_BYTES = 64 * 1024
"""Cache block size, and the tail size at which an append writes through to the file."""


class SegmentCache:
    """An LRU of clean file blocks plus the unflushed tails of all segments, within ``capacity`` bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._blocks: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._owned: dict[int, set[int]] = {}
        self._dirty: dict[int, FileSegmentData] = {}  # segments with a tail, oldest first
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.tail_flushes = 0

    def get(self, key: int, block: int) -> bytes | None:
        """A cached block, refreshed in the LRU; ``None`` if absent. O(1)."""
        k = (key, block)
        b = self._blocks.get(k)
        if b is None:
            self.misses += 1
            return None
        self._blocks.move_to_end(k)
        self.hits += 1
        return b

    def put(self, key: int, block: int, data: bytes) -> None:
        """Cache a clean block, evicting least recently used blocks beyond capacity. O(1) amortised."""
        k = (key, block)
        old = self._blocks.pop(k, None)
        if old is not None:
            self.used -= len(old)
        self._blocks[k] = data
        self._owned.setdefault(key, set()).add(block)
        self.used += len(data)
        if self.used > self.capacity:
            self.shrink()

    def discard(self, key: int, block: int) -> None:
        """Forget one block (it changed on disk). O(1)."""
        b = self._blocks.pop((key, block), None)
        if b is not None:
            self.used -= len(b)
            owned = self._owned.get(key)
            if owned is not None:
                owned.discard(block)

    def drop_segment(self, key: int) -> None:
        """Forget every cached block of one segment. O(its blocks)."""
        for block in self._owned.pop(key, ()):
            b = self._blocks.pop((key, block), None)
            if b is not None:
                self.used -= len(b)

    def segment_bytes(self, key: int) -> int:
        """Bytes of clean blocks cached for one segment. O(its blocks)."""
        return sum(len(self._blocks.get((key, b), b"")) for b in self._owned.get(key, ()))

    def shrink(self) -> None:
        """Evict clean blocks, then write back the oldest tails, until within capacity."""
        blocks = self._blocks
        while self.used > self.capacity and blocks:
            (key, block), b = blocks.popitem(last=False)
            self.used -= len(b)
            self.evictions += 1
            owned = self._owned.get(key)
            if owned is not None:
                owned.discard(block)
        while self.used > self.capacity and self._dirty:
            seg = next(iter(self._dirty.values()))
            if not seg.flush(raise_errors=False):
                break  # the file cannot be written now; the tail stays in memory

    @checked
    def _check(self) -> None:
        """Assert the accounting adds up."""
        total = sum(len(b) for b in self._blocks.values())
        total += sum(len(s._tail) for s in self._dirty.values())
        assert total == self.used, f"cache accounts {self.used} bytes, holds {total}"
        for key, seg in self._dirty.items():
            assert seg._tail and seg.key == key, f"segment {key} is listed dirty without a tail"
        for key, block in self._blocks:
            assert block in self._owned.get(key, ()), f"block {key}/{block} has no owner entry"


class FileSegmentData:
    """One segment's bytes in a data file plus an in-memory tail; ``SegmentData`` protocol.

    Append O(len) (plus a file write per block), read O(n) from the tail or cached
    blocks, one ``pread`` per missing 64 KiB block.
    """

    __slots__ = ("_base", "_cache", "_fd", "_flushed", "_start", "_tail", "key", "path", "unsynced")

    def __init__(
        self,
        cache: SegmentCache,
        key: int,
        path: Path,
        *,
        base: int = 0,
        start_offset: int = 0,
        length: int = 0,
        create: bool = False,
    ) -> None:
        self._cache = cache
        self.key = key
        self.path = path
        self._base = base
        self._start = start_offset
        self._tail = bytearray()
        self.unsynced = False
        self._fd = -1
        if create:
            try:
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as e:
                raise StorageError.of("cannot create segment data file", path, e) from e
        else:
            try:
                self._fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                raise DataCorruptionError(
                    f"segment data file {path} is missing (segment length {length})"
                ) from None
            except OSError as e:
                raise StorageError.of("cannot open segment data file", path, e) from e
            size = os.fstat(self._fd).st_size
            need = length - base
            if size < need:
                os.close(self._fd)
                raise DataCorruptionError(
                    f"segment data file {path} holds {size} bytes, but {need} were synced to it"
                )
            if size > need:  # bytes written after the snapshot: the log has them again
                try:
                    os.ftruncate(self._fd, need)
                except OSError as e:
                    os.close(self._fd)
                    raise StorageError.of("cannot cut the unsynced end of segment data file", path, e) from e
                self.unsynced = True
        self._flushed = length

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def length(self) -> int:
        return self._flushed + len(self._tail)

    @property
    def base(self) -> int:
        return self._base

    def append(self, data: bytes | memoryview) -> None:
        tail = self._tail
        if not tail:
            self._cache._dirty[self.key] = self
        tail += data
        cache = self._cache
        cache.used += len(data)
        if len(tail) >= BLOCK_BYTES:
            self.flush(raise_errors=False)
        if cache.used > cache.capacity:
            cache.shrink()

    def flush(self, raise_errors: bool = True) -> bool:
        """Write the in-memory tail to the file (not synced); ``False`` if that failed."""
        tail = self._tail
        if not tail:
            return True
        pos = self._flushed - self._base
        try:
            with memoryview(tail) as view:  # released also on failure: the tail must grow again
                done = 0
                while done < len(tail):
                    with view[done:] as part:
                        done += os.pwrite(self._fd, part, pos + done)
        except OSError as e:
            with contextlib.suppress(OSError):  # drop a partial write; the tail is retried
                os.ftruncate(self._fd, pos)
            if raise_errors:
                raise StorageError.of(f"cannot write (at byte {pos}) segment data file", self.path, e) from e
            _log.warning("segment data file %s: write at %d failed (%s); kept in memory", self.path, pos, e)
            return False
        cache = self._cache
        cache.discard(self.key, pos // BLOCK_BYTES)  # a partial block there grew
        cache.used -= len(tail)
        cache.tail_flushes += 1
        del cache._dirty[self.key]
        self._flushed += len(tail)
        self._tail = bytearray()
        self.unsynced = True
        return True

    def sync(self) -> None:
        """Flush the tail and ``fdatasync`` the file if anything changed since the last sync."""
        self.flush()
        if self.unsynced:
            try:
                if hasattr(os, "fdatasync"):
                    os.fdatasync(self._fd)
                else:  # pragma: no cover - macOS
                    os.fsync(self._fd)
            except OSError as e:
                raise StorageError.of("cannot sync segment data file", self.path, e) from e
            self.unsynced = False

    def walk_records(self, offset: int, n: int, max_records: int) -> tuple[int, int]:
        """``records.walk_records`` over bytes ``[offset, offset + n)``, read from the cache or file."""
        return walk_records(self.read(offset, n), max_records)

    def read(self, offset: int, n: int) -> bytes:
        flushed = self._flushed
        if offset >= flushed:
            i = offset - flushed
            return bytes(self._tail[i : i + n])
        end = offset + n
        out: list[bytes] = []
        pos = offset
        base = self._base
        cache = self._cache
        key = self.key
        while pos < end and pos < flushed:
            fpos = pos - base
            b = fpos // BLOCK_BYTES
            blk = cache.get(key, b)
            if blk is None:
                lo = b * BLOCK_BYTES
                hi = min(lo + BLOCK_BYTES, flushed - base)
                try:
                    blk = os.pread(self._fd, hi - lo, lo)
                except OSError as e:
                    raise StorageError.of(
                        f"cannot read (at byte {lo}) segment data file", self.path, e
                    ) from e
                if len(blk) != hi - lo:
                    raise DataCorruptionError(
                        f"segment data file {self.path}: short read of {hi - lo} bytes at {lo}"
                    )
                cache.put(key, b, blk)
            i = fpos - b * BLOCK_BYTES
            take = min(len(blk) - i, end - pos)
            out.append(blk[i : i + take])
            pos += take
        if pos < end and self._tail:
            out.append(bytes(self._tail[: end - pos]))
        return out[0] if len(out) == 1 else b"".join(out)

    def truncate(self, offset: int) -> None:
        """Move the start offset (the file keeps its bytes until the segment is deleted)."""
        self._start = offset

    def close(self) -> None:
        """Release the file and every cached byte (an unflushed tail is dropped: the log has it)."""
        cache = self._cache
        if self._tail:
            cache.used -= len(self._tail)
            cache._dirty.pop(self.key, None)
            self._tail = bytearray()
        cache.drop_segment(self.key)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        """Close, and delete the data file (a create that failed after the file was made)."""
        self.close()
        with contextlib.suppress(OSError):  # left behind, the next snapshot's clean-up deletes it
            self.path.unlink(missing_ok=True)

    def nbytes(self) -> int:
        """Bytes this segment holds in memory (tail and cached blocks). O(its blocks)."""
        return len(self._tail) + self._cache.segment_bytes(self.key)

    @checked
    def _check(self) -> None:
        assert self._base <= self._start <= self.length, f"{self.path}: bad start offset"
        if self._fd >= 0:
            size = os.fstat(self._fd).st_size
            assert size == self._flushed - self._base, (
                f"{self.path}: file holds {size} bytes, expected {self._flushed - self._base}"
            )
