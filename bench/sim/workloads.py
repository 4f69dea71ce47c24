"""Workload models and vectorised event framing for the simulated writers.

- ``expected_events(spec, t0, t1)``: the integral of a workload's rate over ``[t0, t1)``
  (ms since the writer's start; constant, poisson, bursty, periodic idle; mmpp: its
  mean rate) — deterministic writers keep the fractional remainder, so counts are exact;
  ``schedule`` and ``trace`` workloads list their events instead (``bench.sim.arrivals``).
- ``generation_times``: deterministic production times, evenly spread within a tick.
- ``FrameBuilder``: frames in ``readergroup.format.events``' layout, built for a whole batch
  with numpy (one ``tobytes`` per append instead of one ``struct.pack`` per event).
  Each payload starts with the writer's index and the event's sequence number (two
  little-endian ``u32``), which ``payload_ids`` reads back from a batch of events.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from types import ModuleType

import numpy as np
import pyarrow as pa

from readergroup.format.events import HEADER_SIZE, KIND_EVENT, encode_event

from ..spec.scenario import WorkloadSpec

__all__ = [
    "expected_events",
    "generation_times",
    "FrameBuilder",
    "payload_ids",
    "ID_BYTES",
    "sim_kernels",
    "readonly",
]

ID_BYTES = 8
"""Bytes at the start of each payload: writer index (u32) and sequence number (u32)."""

_KERNELS_MODULE = f"{__package__}._sim_kernels"
_KERNEL_MIN_EVENTS = 2_048
"""Batches this large go through the numba kernels (``_sim_kernels``) even before they are loaded."""
_KERNEL_LOADED_MIN_EVENTS = 1
"""Once loaded, batches this large go through them (the same bytes and numbers as numpy's path): any
batch, as a kernel call costs less than numpy's path at any size (inside a run ~20 us for the
recorder's, whatever the batch)."""
_loaded: list[ModuleType] = []


def sim_kernels(n: int) -> ModuleType | None:
    """The simulator's kernels if a batch of ``n`` events should use them (importing them if so)."""
    if _loaded:
        return _loaded[0] if n >= _KERNEL_LOADED_MIN_EVENTS else None
    if n >= _KERNEL_MIN_EVENTS or (n >= _KERNEL_LOADED_MIN_EVENTS and _KERNELS_MODULE in sys.modules):
        from . import _sim_kernels

        _loaded.append(_sim_kernels)
        return _sim_kernels
    return None


def _overlap(t0: float, t1: float, period: float, on: float) -> float:
    """Length of ``[t0, t1)`` inside the windows ``[k*period, k*period + on)``. O(1)."""
    if on <= 0 or t1 <= t0:
        return 0.0

    def cumulative(t: float) -> float:
        k = math.floor(t / period)
        return k * on + min(t - k * period, on)

    return cumulative(t1) - cumulative(t0)


def expected_events(spec: WorkloadSpec, t0: int, t1: int) -> float:
    """Events a rate workload produces in ``[t0, t1)`` ms (0 for ``schedule``). O(1)."""
    if t1 <= t0 or spec.kind in ("schedule", "trace"):
        return 0.0
    span = t1 - t0
    if spec.kind in ("constant", "poisson"):
        return spec.rate_per_s * span / 1000.0
    if spec.kind == "mmpp":
        b, p = spec.burst_ms, spec.burst_every_ms
        return (spec.burst_rate_per_s * b + spec.rate_per_s * (p - b)) / p * span / 1000.0
    if spec.kind == "bursty":
        burst = _overlap(t0, t1, spec.burst_every_ms, spec.burst_ms)
        return (spec.rate_per_s * (span - burst) + spec.burst_rate_per_s * burst) / 1000.0
    if spec.kind == "periodic_idle":
        active = _overlap(t0, t1, spec.active_ms + spec.idle_ms, spec.active_ms)
        return spec.rate_per_s * active / 1000.0
    raise AssertionError(spec.kind)  # pragma: no cover - validated by the schema


def generation_times(t0: int, t1: int, n: int) -> np.ndarray:
    """``n`` production times spread evenly over ``[t0, t1)`` (ms, int64, non-decreasing)."""
    if n <= 0:
        return np.empty(0, np.int64)
    return t0 + ((np.arange(n, dtype=np.float64) + 0.5) * ((t1 - t0) / n)).astype(np.int64)


class FrameBuilder:
    """Frames of one writer's events, built in bulk. O(n) numpy work per ``build``.

    All keys of the same UTF-8 length (the default key names) take the vectorised
    path; otherwise each frame is encoded with ``encode_event``.
    """

    __slots__ = (
        "_fast",
        "_frame_len",
        "_key_len",
        "_key_mat",
        "_keys",
        "_payload_bytes",
        "_scratch",
        "_template",
        "writer",
    )

    def __init__(self, writer_index: int, keys: Sequence[str], payload_bytes: int) -> None:
        if payload_bytes < ID_BYTES:
            raise ValueError(f"payload_bytes must be >= {ID_BYTES}, got {payload_bytes}")
        self.writer = writer_index
        self._keys = list(keys)
        self._payload_bytes = payload_bytes
        encoded = [k.encode() for k in self._keys]
        self._key_len = len(encoded[0]) if encoded else 0
        self._fast = bool(encoded) and all(len(k) == self._key_len for k in encoded)
        self._frame_len = HEADER_SIZE + self._key_len + payload_bytes
        self._scratch = np.empty(0, np.uint8)  # build_by_segment's frames before they are copied out
        if self._fast:
            self._key_mat = np.frombuffer(b"".join(encoded), np.uint8).reshape(len(encoded), self._key_len)
            head = encode_event(self._keys[0], bytes(payload_bytes), 0, KIND_EVENT)[:HEADER_SIZE]
            self._template = np.frombuffer(head, np.uint8)

    @property
    def keys(self) -> list[str]:
        return self._keys

    @property
    def frame_size(self) -> int:
        """Bytes per frame when every frame has the same size (the vectorised path), else 0."""
        return self._frame_len if self._fast else 0

    def build(
        self, key_idx: np.ndarray, et: np.ndarray, seq: np.ndarray, sizes: np.ndarray | None = None
    ) -> bytes:
        """Frames of events ``i``: key ``keys[key_idx[i]]``, event time ``et[i]``, number ``seq[i]``
        (payload ``sizes[i]`` bytes if given, else ``payload_bytes``)."""
        n = len(key_idx)
        if n == 0:
            return b""
        if not self._fast or sizes is not None:
            w = self.writer.to_bytes(4, "little")
            if sizes is None:
                pad = bytes(self._payload_bytes - ID_BYTES)
                return b"".join(
                    encode_event(self._keys[k], w + int(s).to_bytes(4, "little") + pad, int(t))
                    for k, t, s in zip(key_idx.tolist(), et.tolist(), seq.tolist(), strict=True)
                )
            return b"".join(
                encode_event(self._keys[k], w + int(s).to_bytes(4, "little") + bytes(z - ID_BYTES), int(t))
                for k, t, s, z in zip(
                    key_idx.tolist(), et.tolist(), seq.tolist(), sizes.tolist(), strict=True
                )
            )
        kl = self._key_len
        buf = np.zeros((n, self._frame_len), np.uint8)
        buf[:, :HEADER_SIZE] = self._template
        buf[:, 5:13] = np.ascontiguousarray(et, dtype="<i8").view(np.uint8).reshape(n, 8)
        if kl:
            buf[:, HEADER_SIZE : HEADER_SIZE + kl] = self._key_mat[key_idx]
        p0 = HEADER_SIZE + kl
        ids = np.empty((n, 2), "<u4")
        ids[:, 0] = self.writer
        ids[:, 1] = seq
        buf[:, p0 : p0 + ID_BYTES] = ids.view(np.uint8).reshape(n, ID_BYTES)
        return buf.tobytes()

    def build_by_segment(
        self, key_idx: np.ndarray, et: np.ndarray, seq: np.ndarray, key_seg: np.ndarray, segments: int
    ) -> tuple[memoryview, list[int], list[int]] | None:
        """``build`` of the events grouped by segment ``key_seg[key_idx[i]]`` (stable), in one kernel call:
        the frames, and each run's segment and end (in events), ascending by segment; ``None`` if
        the batch takes the numpy path (small, or keys of several lengths). O(events + segments).

        The frames are a view of a scratch buffer that the next call overwrites: the caller copies
        out each segment's run (one copy, not two), before building again."""
        n = len(key_idx)
        k = sim_kernels(n) if self._fast and n else None
        if k is None:
            return None
        size = n * self._frame_len
        if len(self._scratch) < size:  # reused: fresh pages would cost more than framing them
            self._scratch = np.empty(max(size, 2 * len(self._scratch)), np.uint8)
        out = self._scratch[:size]
        runs = np.empty(2 * segments, np.int64)
        count = k.frames_by_segment(
            key_idx,
            et,
            seq,
            key_seg,
            segments,
            self._template,
            self._key_mat,
            self.writer,
            self._frame_len,
            out,
            runs[:segments],
            runs[segments:],
        )
        return out.data, runs[:count].tolist(), runs[segments : segments + count].tolist()


def readonly(a: np.ndarray) -> np.ndarray:
    """``a``, marked read-only: a kernel sees one array type whichever buffer it views (Arrow's are
    read-only, numpy's writable), so it is compiled once, in the warm-up. ``setflags``: ~0.2 us, half
    of setting ``a.flags.writeable`` (which makes a flags object first)."""
    a.setflags(write=False)
    return a


def payload_ids(payloads: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Writer indexes and sequence numbers from the first 8 bytes of each payload (vectorised). O(n)."""
    n = len(payloads)
    if n == 0:
        e = np.empty(0, np.int64)
        return e, e
    bufs = payloads.buffers()
    off_dtype = np.int64 if pa.types.is_large_binary(payloads.type) else np.int32
    k = sim_kernels(n)
    if k is not None:
        ids = np.empty(2 * n, np.int64)
        if bufs[2] is not None and k.payload_ids(
            readonly(np.frombuffer(bufs[1], off_dtype)), payloads.offset, n,
            readonly(np.frombuffer(bufs[2], np.uint8)), ids[:n], ids[n:],
        ):  # fmt: skip
            return ids[:n], ids[n:]
    offsets = np.frombuffer(bufs[1], off_dtype)[payloads.offset : payloads.offset + n + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8)
    lens = np.diff(offsets)
    size = int(lens[0])
    if size >= ID_BYTES and bool((lens == size).all()):  # equal payloads: a strided view, no gather
        base = int(offsets[0])
        rows = data[base : base + n * size].reshape(n, size)[:, :ID_BYTES]
    else:
        rows = data[offsets[:-1, None] + np.arange(ID_BYTES)]
    raw = np.ascontiguousarray(rows).view("<u4").reshape(n, 2)
    return raw[:, 0].astype(np.int64), raw[:, 1].astype(np.int64)
