"""The durable store: a data directory with a lock, the operation log, snapshots and segment files.

Layout of ``data_dir``::

    LOCK                      flock-ed by the one process using the directory
    log/wal-<n>.log           the write-ahead operation log (``segmentstore.durable.log``)
    snapshot-<seq>.snap       the newest snapshot (``segmentstore.durable.snapshot``)
    segments/<id>.dat         segment bytes; <id> is the seq of the segment's creation
    cold/<id>-<seq>-<k>.state state of evicted segments (``segmentstore.core.eviction``)

Opening: lock, load the newest snapshot (segments and evicted-segment references),
replay the log after it through ``SegmentContainer.replay`` (which restores the
processor's sequence number and last timestamp), then attach the log as the
processor's sink. Every ``snapshot_every_ops`` logged operations, the next write first
takes a snapshot: tails are written and every data and state file fsynced, the
snapshot is written atomically, the log rolls, and log files, snapshots, data files
and state files the new snapshot does not need are deleted. ``close`` takes a final
snapshot, syncs, and releases the lock. Recovery is correct after a kill -9 at any
moment: nothing the newest snapshot needs is deleted or changed before it is durable.

File-system errors: an operation whose file cannot be made or whose log record cannot
be written fails with ``StorageError`` naming the file and changes nothing, also after
a restart (a create makes its data file before it is logged and deletes it if the log
refuses). A log that cannot be written at start-up (a full disk, a read-only directory)
opens the store read-only: it serves reads and refuses every write with
``StoreReadOnlyError`` naming the file (``SegmentStore.read_only``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..checks import checked
from ..clock import monotonic_s
from ..config import StoreConfig
from ..core.container import ContainerState, SegmentContainer
from ..core.operations import Operation
from ..core.segment import Segment
from ..errors import DataCorruptionError, InvalidArgumentError, StorageError, StoreLockedError
from .files import FileSegmentData, SegmentCache
from .log import OpLog, fsync_dir, scan_log
from .snapshot import (
    ColdRef,
    SegmentState,
    Snapshot,
    decode_blob,
    decode_segment_state,
    encode_blob,
    encode_segment_state,
    load_latest_snapshot,
    restore_segment,
    snapshot_segment,
    write_atomic,
    write_snapshot,
)

__all__ = ["DurableStore", "DurableStats", "RecoveryStats"]

_log = logging.getLogger(__name__)

_READ_ONLY_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
"""Why a log that cannot be written at start-up opens the store read-only instead of failing."""


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    """What opening the data directory did: the snapshot used, operations replayed, time taken."""

    snapshot_seq: int | None
    segments_from_snapshot: int
    operations_replayed: int
    seconds: float


@dataclass(frozen=True, slots=True)
class DurableStats:
    """Counters of the durable store."""

    log_records: int
    log_bytes: int
    log_syncs: int
    log_files: int
    snapshots: int
    ops_since_snapshot: int
    cache_used: int
    cache_capacity: int
    cache_hits: int
    cache_misses: int
    recovery: RecoveryStats


class DurableStore:
    """Owns a data directory for one container; see the module docstring."""

    def __init__(self, data_dir: Path, container: SegmentContainer, config: StoreConfig) -> None:
        self.dir = data_dir
        self._seg_dir = data_dir / "segments"
        self._cold_dir = data_dir / "cold"
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = _lock(data_dir)
        except OSError as e:
            raise InvalidArgumentError(f"data_dir {data_dir} cannot be used: {e}") from e
        try:
            self._seg_dir.mkdir(exist_ok=True)
            self._cold_dir.mkdir(exist_ok=True)
        except OSError as e:
            self._release()
            raise InvalidArgumentError(f"data_dir {data_dir} cannot be used: {e}") from e
        self._container = container
        self._config = config
        self.cache = SegmentCache(config.cache_bytes)
        self.cold = DiskColdStore(self)
        self._unsynced: set[Path] = set()
        self._log: OpLog | None = None
        self._since = 0
        self._last_seq = 0
        self._snapshots = 0
        self._closed = False
        self.recovery = RecoveryStats(None, 0, 0, 0.0)
        container.set_data_factory(self._new_data)

    def data_path(self, file_id: int) -> Path:
        return self._seg_dir / f"{file_id:016x}.dat"

    def _new_data(self, name: str, seq: int) -> FileSegmentData:
        return FileSegmentData(self.cache, seq, self.data_path(seq), create=True)

    # ------------------------------------------------------------------ open
    def recover(self) -> RecoveryStats:
        """Load the newest snapshot, replay the log after it, and start logging. O(state + log)."""
        started = monotonic_s()
        c = self._container
        try:
            snap = load_latest_snapshot(self.dir)
            after = 0
            if snap is not None:
                segments = []
                for st in snap.segments:
                    data = FileSegmentData(
                        self.cache,
                        st.file_id,
                        self.data_path(st.file_id),
                        base=st.base,
                        start_offset=st.start_offset,
                        length=st.length,
                    )
                    segments.append(restore_segment(st, data))
                c.restore_state(ContainerState(snap.seq, snap.timestamp, tuple(segments)))
                for ref in snap.cold:
                    if not (self._cold_dir / ref.state_file).is_file():
                        raise DataCorruptionError(
                            f"snapshot {snap.seq}: state file {self._cold_dir / ref.state_file} "
                            f"of evicted segment {ref.name!r} is missing"
                        )
                    self.cold._refs[ref.name] = ref
                after = self._last_seq = snap.seq
            replayed = 0
            for op in scan_log(self.dir / "log", after):
                c.replay(op)
                self._last_seq = op.seq
                replayed += 1
            try:
                self._log = OpLog(self.dir / "log", self._config.sync, self._config.sync_interval_ms)
            except StorageError as e:
                if e.errno not in _READ_ONLY_ERRNOS:
                    raise
                self._start_read_only(e)
        except BaseException:
            c.discard()
            self._release()
            raise
        self._since = replayed
        if self._log is not None:
            c.attach_log(self)
        self.recovery = RecoveryStats(
            None if snap is None else snap.seq,
            0 if snap is None else len(snap.segments),
            replayed,
            monotonic_s() - started,
        )
        return self.recovery

    def _start_read_only(self, cause: StorageError) -> None:
        """The log cannot be written (a full disk, a read-only directory): serve reads, refuse writes."""
        _log.warning(
            "data directory %s opened READ-ONLY: %s; reads are served, writes refused until a restart "
            "with space (or permission) to write",
            self.dir,
            cause,
        )
        self._container.processor.set_read_only(cause)

    @property
    def read_only(self) -> StorageError | None:
        """Why the store opened read-only (the file it could not write), or ``None``."""
        return self._container.processor.read_only

    # ------------------------------------------------------------------ the sink
    def write(self, op: Operation) -> None:
        """Log ``op`` (the container's lock is held); snapshot first when one is due."""
        log = self._log
        assert log is not None
        if self._since >= self._config.snapshot_every_ops:
            try:
                self._snapshot_locked()
            except Exception:
                _log.exception("snapshot of %s failed; the log keeps growing until one succeeds", self.dir)
                self._since = 0
        log.write(op)
        self._since += 1
        self._last_seq = op.seq

    def snapshot(self) -> None:
        """Take a snapshot now and truncate the log."""
        with self._container.lock:
            self._snapshot_locked()

    def _snapshot_locked(self) -> None:
        log = self._log
        assert log is not None
        state = self._container.snapshot_state()
        for seg in state.segments:
            _file_data(seg).sync()
        for path in list(self._unsynced):
            _fsync_path(path)
        self._unsynced.clear()
        fsync_dir(self._cold_dir)
        fsync_dir(self._seg_dir)
        states = []
        for seg in state.segments:
            d = _file_data(seg)
            states.append(snapshot_segment(seg, d.key, d.base))
        cold = tuple(self.cold._refs.values())
        snap = Snapshot(self._last_seq, state.last_timestamp, tuple(states), cold)
        write_snapshot(self.dir, snap)
        self._snapshots += 1
        self._since = 0
        log.delete_files_before(log.roll())
        self._collect_garbage(states, cold, snap.seq)

    def _collect_garbage(self, states: list[SegmentState], cold: tuple[ColdRef, ...], seq: int) -> None:
        """Delete data and state files the newest snapshot (of operations up to ``seq``) does not reference.

        A data file numbered above ``seq`` stays: it belongs to a create being logged right
        now (the file is made before the create is logged, and a due snapshot comes first).
        """
        keep = {self.data_path(s.file_id).name for s in states}
        keep.update(self.data_path(r.file_id).name for r in cold)
        for p in self._seg_dir.iterdir():
            if p.name not in keep and not _made_after(p.name, seq):
                p.unlink(missing_ok=True)
        keep_state = {r.state_file for r in cold}
        for p in self._cold_dir.iterdir():
            if p.name not in keep_state:
                p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Final snapshot, sync, close every file and release the lock. Idempotent."""
        if self._closed:
            return
        self._closed = True
        c = self._container
        try:
            c.attach_log(None)  # the store closed the container first: nothing is logged any more
            with c.lock:
                if self._log is not None and self._since > 0:
                    try:
                        self._snapshot_locked()
                    except Exception:
                        _log.exception("final snapshot of %s failed; recovery will replay the log", self.dir)
                c.close_data()
        finally:
            if self._log is not None:
                self._log.close()
            self._release()

    def _release(self) -> None:
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    @property
    def stats(self) -> DurableStats:
        log = self._log
        ls = log.stats if log is not None else None
        cache = self.cache
        return DurableStats(
            ls.records if ls else 0,
            ls.bytes if ls else 0,
            ls.syncs if ls else 0,
            ls.files if ls else 0,
            self._snapshots,
            self._since,
            cache.used,
            cache.capacity,
            cache.hits,
            cache.misses,
            self.recovery,
        )

    @checked
    def _check(self) -> None:
        """Assert the log, the cache and every open data file agree with the container."""
        c = self._container
        with c.lock:
            if self._log is not None and not self._closed:
                self._log._check()
            self.cache._check()
            assert self.cache.used <= self.cache.capacity or self.cache._dirty, "cache over capacity"
            for seg in c.active_segments():
                if not self._closed:
                    _file_data(seg)._check()


class DiskColdStore:
    """Evicted segments of a durable store: one state file each; only the references stay in memory."""

    def __init__(self, durable: DurableStore) -> None:
        self._durable = durable
        self._refs: dict[str, ColdRef] = {}

    def evict(self, seg: Segment) -> None:
        d = self._durable
        data = _file_data(seg)
        data.flush()
        st = snapshot_segment(seg, data.key, data.base)
        seq = d._container.processor.last_seq
        k = 0
        while True:
            path = d._cold_dir / f"{data.key:016x}-{seq:016x}-{k}.state"
            if not path.exists():
                break
            k += 1
        write_atomic(path, encode_blob(encode_segment_state(st)), durable=False)
        d._unsynced.add(path)
        if data.unsynced:
            d._unsynced.add(data.path)
        data.close()
        self._refs[seg.name] = ColdRef(seg.name, data.key, path.name)

    def load(self, name: str) -> Segment:
        d = self._durable
        ref = self._refs[name]
        path = d._cold_dir / ref.state_file
        where = f"state file {path} of evicted segment {name!r}"
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise DataCorruptionError(f"{where} is missing") from None
        except OSError as e:
            raise StorageError.of(f"evicted segment {name!r}: cannot read state file", path, e) from e
        st = decode_segment_state(decode_blob(raw, where), where)
        if st.name != name or st.file_id != ref.file_id:
            raise DataCorruptionError(f"{where} holds segment {st.name!r} (file {st.file_id})")
        data = FileSegmentData(
            d.cache,
            st.file_id,
            d.data_path(st.file_id),
            base=st.base,
            start_offset=st.start_offset,
            length=st.length,
        )
        try:
            seg = restore_segment(st, data)
        except BaseException:
            data.close()
            raise
        del self._refs[name]
        return seg

    def __contains__(self, name: object) -> bool:
        return name in self._refs

    def __len__(self) -> int:
        return len(self._refs)

    def names(self) -> list[str]:
        return list(self._refs)

    @checked
    def _check(self) -> None:
        for name, ref in self._refs.items():
            assert ref.name == name, f"cold reference stored under {name!r} names {ref.name!r}"


def _file_data(seg: object) -> FileSegmentData:
    data = getattr(seg, "data", None)
    assert isinstance(data, FileSegmentData), f"segment {seg!r} is not file-backed"
    return data


def _made_after(file_name: str, seq: int) -> bool:
    """Whether ``file_name`` is the data file of a segment created by an operation after ``seq``."""
    stem = file_name.removesuffix(".dat")
    try:
        return stem != file_name and int(stem, 16) > seq
    except ValueError:
        return False


def _fsync_path(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # deleted since (its segment is gone)
    try:
        os.fsync(fd)
    except OSError as e:
        raise StorageError.of("cannot sync", path, e) from e
    finally:
        os.close(fd)


def _lock(data_dir: Path) -> int:
    """Take the exclusive lock of ``data_dir``; ``StoreLockedError`` if another holder has it."""
    path = data_dir / "LOCK"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        finally:
            os.close(fd)
        raise StoreLockedError(
            f"data directory {data_dir} is in use by another store (lock file {path}, held by pid {holder})"
        ) from None
    try:  # who holds it, for the error above; a full disk must not stop a read-only start
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as e:
        _log.warning("lock file %s: cannot write the holder's pid (%s)", path, e)
    return fd
