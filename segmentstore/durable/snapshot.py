"""Snapshots of a durable container: metadata, attributes, watermark indexes, processor state.

A snapshot file ``snapshot-<seq>.snap`` holds the state after every logged operation
up to ``seq``: each active segment (name, parent, seal state, times, attributes, where
its bytes live and how many are synced there, its watermark index entries), the
evicted segments (which state file holds them), and the processor's last sequence
number and timestamp. It is msgpack (never pickle) behind a magic, a format version
and a CRC-32, and it is written atomically: a temporary file, fsync, rename, fsync of
the directory. Cold-segment state files use the same encoding of one segment.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from ..core.segment import Segment
from ..core.watermark_index import WatermarkIndex
from ..errors import DataCorruptionError, StorageError

__all__ = [
    "SNAPSHOT_VERSION",
    "SegmentState",
    "ColdRef",
    "Snapshot",
    "snapshot_segment",
    "restore_segment",
    "encode_blob",
    "decode_blob",
    "encode_segment_state",
    "decode_segment_state",
    "write_atomic",
    "write_snapshot",
    "load_latest_snapshot",
    "snapshot_files",
]

SNAPSHOT_VERSION = 1
_MAGIC = b"IWMSNAP\x00"
_HEAD = struct.Struct("<8sHIQ")  # magic, version, crc32 of payload, payload length
_PREFIX = "snapshot-"
_SUFFIX = ".snap"


@dataclass(frozen=True, slots=True)
class SegmentState:
    """Everything needed to rebuild one segment, except its bytes (which are in ``file_id``'s file)."""

    name: str
    parent: str | None
    sealed: bool
    creation_time: int
    last_write_time: int
    last_used: int
    attributes: tuple[tuple[int, int], ...]
    file_id: int
    base: int
    start_offset: int
    length: int
    index_offsets: np.ndarray
    index_watermarks: np.ndarray
    writer_uuids: tuple[tuple[int, int], ...] = ()
    """Last event number per 128-bit writer id (``Segment.writer_uuids``); absent in older files."""


@dataclass(frozen=True, slots=True)
class ColdRef:
    """An evicted segment: its data file id and the file holding its ``SegmentState``."""

    name: str
    file_id: int
    state_file: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The container's state after the logged operation ``seq``."""

    seq: int
    timestamp: int
    segments: tuple[SegmentState, ...]
    cold: tuple[ColdRef, ...]


def snapshot_segment(seg: Segment, file_id: int, base: int) -> SegmentState:
    """The state of ``seg`` (its bytes must be synced separately). O(index entries)."""
    offsets, wms = seg.windex.entries()
    return SegmentState(
        seg.name,
        seg.parent,
        seg.sealed,
        seg.creation_time,
        seg.last_write_time,
        seg.last_used,
        tuple(seg.attributes.items()),
        file_id,
        base,
        seg.data.start_offset,
        seg.data.length,
        np.asarray(offsets, dtype=np.int64),
        np.asarray(wms, dtype=np.int64),
        tuple(seg.writer_uuids.items()),
    )


def restore_segment(st: SegmentState, data: Any) -> Segment:
    """Rebuild a segment from its state over ``data`` (a ``SegmentData`` of ``st.length`` bytes)."""
    try:
        windex = WatermarkIndex.restore_state(
            st.creation_time,
            st.start_offset,
            st.length,
            st.last_write_time,
            st.index_offsets,
            st.index_watermarks,
        )
    except Exception as e:
        raise DataCorruptionError(f"segment {st.name!r}: bad watermark index state: {e}") from e
    seg = Segment(st.name, st.creation_time, st.parent, data, windex)
    seg.sealed = st.sealed
    seg.last_write_time = st.last_write_time
    seg.last_used = st.last_used
    seg.attributes = dict(st.attributes)
    seg.writer_uuids = dict(st.writer_uuids)
    return seg


# ---------------------------------------------------------------------- encoding
def encode_segment_state(st: SegmentState) -> list[Any]:
    """``st`` as msgpack-ready lists (a 14th field only with 128-bit writers, so that a store no
    Pravega writer wrote stays readable by older builds). O(index entries)."""
    out: list[Any] = [
        st.name,
        st.parent,
        st.sealed,
        st.creation_time,
        st.last_write_time,
        st.last_used,
        [list(kv) for kv in st.attributes],
        st.file_id,
        st.base,
        st.start_offset,
        st.length,
        st.index_offsets.astype("<i8").tobytes(),
        st.index_watermarks.astype("<i8").tobytes(),
    ]
    if st.writer_uuids:
        out.append([[w.to_bytes(16, "big"), e] for w, e in st.writer_uuids])
    return out


def decode_segment_state(obj: Any, where: str) -> SegmentState:
    """Check and decode one segment state; ``DataCorruptionError`` naming ``where`` if malformed.

    A state of 13 fields (written before 128-bit writer ids existed) has an empty writer table.
    """
    try:
        if isinstance(obj, list) and len(obj) == 13:
            obj = [*obj, []]
        (name, parent, sealed, ct, lwt, used, attrs, fid, base, start, length, offs, wms, uuids) = obj
        ints = (ct, lwt, used, fid, base, start, length)
        ok = (
            isinstance(name, str)
            and (parent is None or isinstance(parent, str))
            and isinstance(sealed, bool)
            and all(type(v) is int for v in ints)
            and isinstance(offs, bytes)
            and isinstance(wms, bytes)
            and len(offs) == len(wms)
            and len(offs) % 8 == 0
            and 0 <= base <= start <= length
        )
        pairs = tuple((int(k), int(v)) for k, v in attrs)
        if not ok or not all(type(k) is int and type(v) is int for k, v in attrs):
            raise ValueError("a field has the wrong type or value")
        if not all(isinstance(w, bytes) and len(w) == 16 and type(e) is int for w, e in uuids):
            raise ValueError("a writer uuid entry has the wrong type or size")
        writers = tuple((int.from_bytes(w, "big"), e) for w, e in uuids)
    except (TypeError, ValueError) as e:
        raise DataCorruptionError(f"{where}: malformed segment state: {e}") from None
    return SegmentState(
        name,
        parent,
        sealed,
        ct,
        lwt,
        used,
        pairs,
        fid,
        base,
        start,
        length,
        np.frombuffer(offs, dtype="<i8").astype(np.int64),
        np.frombuffer(wms, dtype="<i8").astype(np.int64),
        writers,
    )


def encode_blob(obj: Any) -> bytes:
    """msgpack ``obj`` behind magic, version, CRC-32 and length. O(size)."""
    payload: bytes = msgpack.packb(obj, use_bin_type=True)
    return _HEAD.pack(_MAGIC, SNAPSHOT_VERSION, zlib.crc32(payload), len(payload)) + payload


def decode_blob(data: bytes, where: str) -> Any:
    """Check and unpack a blob from ``encode_blob``; ``DataCorruptionError`` naming ``where``."""
    if len(data) < _HEAD.size:
        raise DataCorruptionError(f"{where}: file of {len(data)} bytes is too short")
    magic, version, crc, n = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC:
        raise DataCorruptionError(f"{where}: bad magic at offset 0")
    if version != SNAPSHOT_VERSION:
        raise DataCorruptionError(f"{where}: format version {version}, this build reads {SNAPSHOT_VERSION}")
    payload = memoryview(data)[_HEAD.size :]
    if len(payload) != n or zlib.crc32(payload) != crc:
        raise DataCorruptionError(f"{where}: checksum or length mismatch at offset {_HEAD.size}")
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except Exception as e:
        raise DataCorruptionError(f"{where}: undecodable payload: {e}") from None


def write_atomic(path: Path, blob: bytes, durable: bool = True) -> None:
    """Write ``blob`` to ``path`` via a temporary file and rename (fsynced when ``durable``).

    On failure the temporary file is deleted (a full disk gets its space back) and
    ``StorageError`` names ``path``; ``path`` itself is untouched.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(blob)
            done = 0
            while done < len(blob):
                done += os.write(fd, view[done:])
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StorageError.of("cannot write", path, e) from e
    if durable:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


# ---------------------------------------------------------------------- snapshot files
def snapshot_files(directory: Path) -> list[tuple[int, Path]]:
    """The snapshot files in ``directory`` as ``(seq, path)``, oldest first. O(files)."""
    out: list[tuple[int, Path]] = []
    for p in directory.iterdir():
        n = p.name
        if n.startswith(_PREFIX) and n.endswith(_SUFFIX):
            try:
                out.append((int(n[len(_PREFIX) : -len(_SUFFIX)], 16), p))
            except ValueError:
                continue
    out.sort()
    return out


def write_snapshot(directory: Path, snap: Snapshot) -> Path:
    """Write ``snap`` atomically and delete older snapshots; returns its path. O(state size)."""
    obj = [
        snap.seq,
        snap.timestamp,
        [encode_segment_state(s) for s in snap.segments],
        [[c.name, c.file_id, c.state_file] for c in snap.cold],
    ]
    path = directory / f"{_PREFIX}{snap.seq:016x}{_SUFFIX}"
    write_atomic(path, encode_blob(obj))
    for seq, p in snapshot_files(directory):
        if seq < snap.seq:
            p.unlink(missing_ok=True)
    return path


def load_latest_snapshot(directory: Path) -> Snapshot | None:
    """The newest snapshot, checked; ``None`` if there is none. Leftover temporary files are removed."""
    for p in directory.glob(f"{_PREFIX}*{_SUFFIX}.tmp"):
        p.unlink(missing_ok=True)
    files = snapshot_files(directory)
    if not files:
        return None
    seq, path = files[-1]
    where = f"snapshot {path}"
    obj = decode_blob(path.read_bytes(), where)
    try:
        s_seq, ts, segs, cold = obj
        if type(s_seq) is not int or type(ts) is not int or s_seq != seq:
            raise ValueError(f"header says seq {s_seq!r}, timestamp {ts!r}")
        refs = tuple(ColdRef(str(n), int(f), str(sf)) for n, f, sf in cold)
    except (TypeError, ValueError) as e:
        raise DataCorruptionError(f"{where}: malformed snapshot: {e}") from None
    states = tuple(decode_segment_state(s, where) for s in segs)
    return Snapshot(s_seq, ts, states, refs)
