"""The write-ahead operation log: CRC-checked, length-prefixed records in rolling files.

Layout: ``<data_dir>/log/wal-<n>.log`` files, numbered in write order. Each file starts
with an 8-byte magic; then records ``[u32 length][u32 CRC-32 of payload][payload]``
where the payload is one ``codec``-encoded operation. A file is rolled (fsynced unless
the policy is ``"none"``, then a new one started) past ``roll_bytes`` and after every
snapshot; files whose operations a snapshot holds are deleted (log truncation).

What each ``StoreConfig.sync`` policy promises for an acknowledged operation:

- ``"always"``: the record is written and ``fdatasync``-ed before the operation is
  acknowledged. It survives a process crash (kill -9), an OS crash and a power loss.
- ``"interval"``: the record is handed to the OS (``write``) before the
  acknowledgement, and a background flusher ``fdatasync``-s the log every
  ``sync_interval_ms`` (group commit). It survives a process crash; an OS crash or
  power loss loses at most the operations of the last ``sync_interval_ms`` or so.
- ``"none"``: the record is handed to the OS before the acknowledgement and synced
  only when a file rolls, at snapshots and on close. It survives a process crash; an
  OS crash or power loss may lose anything the OS had not written back yet.

Reading back (recovery): a torn record at the very end of the last file holding records
(incomplete, a bad CRC on its last record, or zero fill) is cut off with a warning naming
the file and offset. Anything else that does not check out (a bad record followed by more data,
a damaged earlier file, sequence numbers going backwards) raises ``DataCorruptionError``
naming the file and offset: nothing is skipped silently.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

from ..checks import checked
from ..clock import monotonic_s
from ..config import SyncPolicy
from ..core.operations import Operation
from ..errors import DataCorruptionError, StorageError, StoreClosedError
from .log_codec import decode_operation, encode_operation_parts

__all__ = ["OpLog", "LogStats", "scan_log", "log_files", "fsync_dir", "LOG_MAGIC"]

_log = logging.getLogger(__name__)

LOG_MAGIC = b"IWMWAL\x00\x01"
_FRAME = struct.Struct("<II")
_MIN_PAYLOAD = 18  # the codec's fixed header
_PREFIX = "wal-"
_SUFFIX = ".log"
_DEFAULT_ROLL_BYTES = 64 * 1024 * 1024


def log_files(directory: Path) -> list[tuple[int, Path]]:
    """The log files in ``directory`` as ``(number, path)``, in write order. O(files)."""
    out: list[tuple[int, Path]] = []
    if not directory.is_dir():
        return out
    for p in directory.iterdir():
        n = p.name
        if n.startswith(_PREFIX) and n.endswith(_SUFFIX):
            digits = n[len(_PREFIX) : -len(_SUFFIX)]
            if digits.isdigit():
                out.append((int(digits), p))
    out.sort()
    return out


def fsync_dir(directory: Path) -> None:
    """Make created, renamed and deleted directory entries durable; ``StorageError`` naming it if not."""
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageError.of("cannot sync directory", directory, e) from e


def _datasync(fd: int) -> None:
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS
        os.fsync(fd)


class LogStats:
    """Counters of the log (records, bytes, syncs, files)."""

    __slots__ = ("bytes", "files", "records", "syncs")

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.syncs = 0
        self.files = 0


class OpLog:
    """Appends operations to rolling log files with the configured sync policy.

    Not thread-safe for writers (the container's lock serialises ``write``); the
    ``"interval"`` flusher thread only syncs. Cost per record: one ``writev`` (plus one
    ``fdatasync`` with ``"always"``).
    """

    def __init__(
        self,
        directory: Path,
        sync: SyncPolicy = "none",
        sync_interval_ms: int = 50,
        roll_bytes: int = _DEFAULT_ROLL_BYTES,
    ) -> None:
        self.directory = directory
        self.sync_policy = sync
        self._interval_s = sync_interval_ms / 1000.0
        self._roll_bytes = roll_bytes
        self._always = sync == "always"
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError.of("cannot create operation log directory", directory, e) from e
        files = log_files(directory)
        self._number = files[-1][0] if files else 0
        self._fd = -1
        self._path = directory
        self._pos = 0
        self._broken: str | None = None
        self._closed = False
        self._dirty = False
        self._sync_lock = threading.Lock()
        self.stats = LogStats()
        self._open_next()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if sync == "interval":
            self._flusher = threading.Thread(
                target=self._flush_loop, name="ingestwm-log-flusher", daemon=True
            )
            self._flusher.start()

    # ------------------------------------------------------------------ files
    @property
    def current_file(self) -> Path:
        return self._path

    @property
    def current_number(self) -> int:
        return self._number

    def _open_next(self) -> None:
        """Start the next log file; on failure delete what was made and raise ``StorageError``."""
        number = self._number + 1
        path = self.directory / f"{_PREFIX}{number:010d}{_SUFFIX}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as e:
            raise StorageError.of("cannot create operation log file", path, e) from e
        try:
            if os.write(fd, LOG_MAGIC) != len(LOG_MAGIC):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            if self.sync_policy != "none":
                _datasync(fd)
                fsync_dir(self.directory)
        except BaseException as e:
            os.close(fd)
            with contextlib.suppress(OSError):  # an empty file between two logs would read as damage
                path.unlink()
            if isinstance(e, OSError):
                raise StorageError.of("cannot write operation log file", path, e) from e
            raise
        self._number = number
        self._fd, self._path, self._pos = fd, path, len(LOG_MAGIC)
        self.stats.files += 1

    def roll(self) -> int:
        """Sync and close the current file, start the next; returns the new file's number."""
        self._check_writable()
        with self._sync_lock:
            old = self._fd
            if self.sync_policy != "none":
                try:
                    _datasync(old)
                except OSError as e:
                    raise StorageError.of("cannot sync operation log file", self._path, e) from e
            self._dirty = False
            self._open_next()
            os.close(old)
        return self._number

    def delete_files_before(self, number: int) -> int:
        """Delete the log files numbered below ``number`` (their operations are in a snapshot)."""
        n = 0
        for num, path in log_files(self.directory):
            if num < number:
                path.unlink(missing_ok=True)
                n += 1
        if n:
            fsync_dir(self.directory)
        return n

    # ------------------------------------------------------------------ writing
    def write(self, op: Operation) -> None:
        """Append one record; returns once the sync policy's promise holds. O(record size)."""
        if self._broken is not None or self._closed:
            self._check_writable()
        parts = encode_operation_parts(op)
        head = parts[0]
        if len(parts) == 2:  # an append: header and payload, the payload never copied
            body = parts[1]
            size = len(head) + len(body)
            parts = [_FRAME.pack(size, zlib.crc32(body, zlib.crc32(head))), head, body]
        else:
            size = len(head)
            parts = [_FRAME.pack(size, zlib.crc32(head)), head]
        total = size + _FRAME.size
        fd = self._fd
        try:
            written = os.writev(fd, parts)
            if written != total:  # a short write: finish it
                rest = memoryview(b"".join(parts))
                while written < total:
                    written += os.write(fd, rest[written:])
            if self._always:
                _datasync(fd)
                self.stats.syncs += 1
        except OSError as e:
            self._undo(e)
        self._pos += total
        self._dirty = True
        st = self.stats
        st.records += 1
        st.bytes += total
        if self._pos >= self._roll_bytes:
            try:  # the record is written: a roll that fails must not fail its operation
                self.roll()
            except StorageError as e:
                _log.warning(
                    "operation log %s: cannot roll (%s); writing on, retried at the next record",
                    self._path,
                    e,
                )

    def _undo(self, e: OSError) -> None:
        """After a failed write: cut the partial record so the log stays readable, then raise."""
        try:
            os.ftruncate(self._fd, self._pos)
        except OSError:
            self._broken = f"operation log {self._path}: a failed write could not be undone ({e})"
        raise StorageError.of(
            f"the operation was not done: cannot write (at byte {self._pos}) operation log file",
            self._path,
            e,
        ) from e

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"operation log {self.directory} is closed")
        if self._broken is not None:
            raise StorageError(self._broken, str(self._path))

    def sync(self) -> None:
        """``fdatasync`` the current file now (snapshots and close call this)."""
        with self._sync_lock:
            if self._fd >= 0:
                _datasync(self._fd)
                self._dirty = False
                self.stats.syncs += 1

    def _flush_loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            if not self._dirty:
                continue
            try:
                with self._sync_lock:
                    if self._fd < 0:
                        return
                    self._dirty = False
                    _datasync(self._fd)
                    self.stats.syncs += 1
            except OSError:
                _log.exception("operation log %s: group commit failed; retrying", self._path)
                self._dirty = True

    def close(self) -> None:
        """Stop the flusher, sync and close the current file. Idempotent."""
        if self._closed:
            return
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        with self._sync_lock:
            if self._fd >= 0:
                try:
                    if self._broken is None:
                        _datasync(self._fd)
                finally:
                    os.close(self._fd)
                    self._fd = -1
        self._closed = True

    @checked
    def _check(self) -> None:
        """Assert the writer's position matches the file on disk."""
        if self._fd >= 0 and self._broken is None:
            size = os.fstat(self._fd).st_size
            assert size == self._pos, f"{self._path}: size {size} != write position {self._pos}"


# ---------------------------------------------------------------------- reading
def scan_log(directory: Path, after_seq: int = 0, repair: bool = True) -> Iterator[Operation]:
    """Yield the logged operations with ``seq > after_seq``, oldest first, checking every record.

    A torn tail of the last file is cut off (``repair``) with a warning; any other damage
    raises ``DataCorruptionError`` naming the file and offset. O(log size).
    """
    files = log_files(directory)
    last_seq = after_seq
    prev_seq = 0
    started = monotonic_s()
    count = 0
    sizes = [p.stat().st_size for _, p in files]
    for i, (_num, path) in enumerate(files):
        # the last file with records: later ones (if any) hold no more than a file header
        is_last = all(n <= len(LOG_MAGIC) for n in sizes[i + 1 :])
        data = path.read_bytes()
        buf = memoryview(data)
        end = len(data)
        if end < len(LOG_MAGIC) or data[: len(LOG_MAGIC)] != LOG_MAGIC:
            if is_last and end < len(LOG_MAGIC) and LOG_MAGIC.startswith(data):
                _cut(path, 0, repair, "a torn file header")
                continue
            raise DataCorruptionError(f"operation log {path}: bad file header at offset 0")
        pos = len(LOG_MAGIC)
        unpack, crc32, frame = _FRAME.unpack_from, zlib.crc32, _FRAME.size
        while pos < end:
            torn = None
            rec_end = pos + frame + _MIN_PAYLOAD
            if rec_end <= end:  # the fast check; _check_record says what is wrong otherwise
                length, crc = unpack(data, pos)
                rec_end = pos + frame + length
                if rec_end > end or length < _MIN_PAYLOAD or crc32(buf[pos + frame : rec_end]) != crc:
                    torn = _check_record(data, pos, end)
            else:
                torn = _check_record(data, pos, end)
            if torn is not None:
                if is_last and (torn == "incomplete" or data.count(0, pos) == end - pos):
                    _cut(path, pos, repair, f"a torn record ({torn})")
                    break
                if is_last and torn == "bad checksum" and _record_end(data, pos) == end:
                    _cut(path, pos, repair, "a torn last record (bad checksum)")
                    break
                raise DataCorruptionError(
                    f"operation log {path}: corrupt record at offset {pos} ({torn}); "
                    "the log cannot be recovered past it"
                )
            try:
                op = decode_operation(buf[pos + frame : rec_end])
            except DataCorruptionError as e:
                raise DataCorruptionError(
                    f"operation log {path}: undecodable record at offset {pos}: {e}"
                ) from None
            if op.seq <= prev_seq:
                raise DataCorruptionError(
                    f"operation log {path}: record at offset {pos} has sequence number {op.seq}, "
                    f"not above the previous {prev_seq}"
                )
            prev_seq = op.seq
            if op.seq > last_seq:
                last_seq = op.seq
                count += 1
                yield op
            pos = rec_end
        buf.release()
    _log.debug("scanned %d operations in %.3fs", count, monotonic_s() - started)


def _record_end(data: bytes, pos: int) -> int:
    length: int = _FRAME.unpack_from(data, pos)[0]
    return pos + _FRAME.size + length


def _check_record(data: bytes, pos: int, end: int) -> str | None:
    """Why the record at ``pos`` is bad, or ``None`` if it is whole and its CRC matches."""
    if end - pos < _FRAME.size:
        return "incomplete"
    length, crc = _FRAME.unpack_from(data, pos)
    start = pos + _FRAME.size
    if start + length > end:
        return "incomplete"
    if length < _MIN_PAYLOAD:
        return f"impossible length {length}"
    if zlib.crc32(memoryview(data)[start : start + length]) != crc:
        return "bad checksum"
    return None


def _cut(path: Path, pos: int, repair: bool, what: str) -> None:
    size = path.stat().st_size
    _log.warning(
        "operation log %s: %s at offset %d; cutting off the last %d bytes",
        path,
        what,
        pos,
        size - pos,
    )
    if repair:
        if pos == 0:
            path.unlink()
        else:
            with open(path, "r+b") as f:
                f.truncate(pos)
                f.flush()
                os.fsync(f.fileno())
