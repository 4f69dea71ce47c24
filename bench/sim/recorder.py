"""Metrics of a simulation: per-batch accounting, samples over simulated time, and the output files.

``Recorder`` is fed by the actors: events written (by global sequence number), every
batch a reader returns (vectorised: late by ingestion time — at or below the highest
group watermark emitted so far in the epoch, docs/design.md §4.1 —, late by event time — at or
below that watermark minus ``max_event_time_lag``, docs/design.md §1 —, duplicates after a
failover, per writer), watermarks returned (strict ascent per reader, §4.2), scale
events and samples (group watermark and lag, per-segment watermarks and unread bytes,
the reordering buffer, the advancer's work). ``write_outputs`` writes them: a JSON
summary, CSV series (Parquet too if asked) — all deterministic: no wall-clock figure
is written.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from readergroup.format.events import NO_EVENT_TIME
from readergroup.reading.frontier import event_time_watermark
from readergroup.reading.reader import EventBatch
from segmentstore.limits import INT64_MIN

from ..spec.errors import OutputError
from .sentinels import real_time
from .workloads import payload_ids, sim_kernels

__all__ = ["SERIES_COLUMNS", "SEGMENT_COLUMNS", "EVENT_COLUMNS", "Recorder", "stats", "write_outputs"]

_NONE = np.empty(0, np.int64)
_NONE.flags.writeable = False  # an empty batch's writers and numbers (shared)
_I32, _I64, _U8 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8)  # (made once: ~0.3 us a call)


SERIES_COLUMNS = (
    "t_ms",
    "time_ms",
    "group_watermark",
    "group_lag_ms",
    "event_time_watermark",
    "events_written",
    "events_delivered",
    "events_unique",
    "duplicates",
    "late_ingestion",
    "late_event_time",
    "late_dropped",
    "buffered",
    "windows_fired",
    "unread_bytes",
    "group_segments",
    "active_segments",
    "readers_online",
    "advancer_passes",
    "advancer_advanced",
    "scale_events",
    "held_by",
    "held_by_state",
    "held_by_advanced_by",
)
SEGMENT_COLUMNS = ("t_ms", "segment", "owner", "status", "position", "length", "watermark", "lag_ms")
EVENT_COLUMNS = (
    "t_ms",
    "reader",
    "segment",
    "offset",
    "routing_key",
    "writer",
    "seq",
    "event_time",
    "ingestion_time",
    "late_ingestion",
    "late_event_time",
    "event_time_watermark",
)


class Recorder:
    """Counters and series of one simulation. Per batch O(n) numpy work; per sample O(segments)."""

    def __init__(self, writer_names: Sequence[str], max_event_time_lag_ms: int, event_log: bool) -> None:
        self.writer_names = list(writer_names)
        nw = max(1, len(self.writer_names))
        self.lag = max_event_time_lag_ms
        self.event_log = event_log
        self.written = np.zeros(nw, np.int64)
        self._counts = np.zeros((3, nw), np.int64)  # per writer: delivered, late by ingestion / event time
        self._etw_of: int | None = None  # the group watermark ``_etw`` was computed from
        self._etw = INT64_MIN
        self._ids = np.empty((2, 0), np.int64)  # count_batch's scratch ids
        self.duplicates = 0
        self._next_seq = 0
        self._seen = np.zeros(1024, np.bool_)
        self._written_mask = np.zeros(1024, np.bool_)
        self.epoch = 0
        self.group_emitted = INT64_MIN  # highest group watermark any reader returned in the epoch
        self.reader_last: dict[str, int] = {}
        self.watermarks_returned = 0
        self.watermark_violations = 0
        self.samples: list[dict[str, Any]] = []
        self.segment_rows: list[tuple[Any, ...]] = []
        self.event_rows: list[tuple[Any, ...]] = []
        self.watermark_rows: list[tuple[int, str, int | None]] = []
        self.scale_events: list[dict[str, Any]] = []
        self.group_samples_decreasing = 0
        self.segment_lengths: dict[str, int] = {}  # each segment's length at the last sample it was in

    @property
    def delivered(self) -> np.ndarray:
        """Events delivered, per writer (a view of the counters). O(1)."""
        row: np.ndarray = self._counts[0]
        return row

    @property
    def late_ingestion(self) -> np.ndarray:
        """Events late by ingestion time, per writer (a view). O(1)."""
        row: np.ndarray = self._counts[1]
        return row

    @property
    def late_event_time(self) -> np.ndarray:
        """Events late by event time, per writer (a view). O(1)."""
        row: np.ndarray = self._counts[2]
        return row

    # ------------------------------------------------------------------ writes
    def allocate(self, n: int) -> np.ndarray:
        """``n`` fresh global sequence numbers. O(n)."""
        start = self._next_seq
        self._next_seq += n
        if self._next_seq > len(self._seen):
            cap = max(self._next_seq, 2 * len(self._seen))
            self._seen = np.concatenate([self._seen, np.zeros(cap - len(self._seen), np.bool_)])
            self._written_mask = np.concatenate(
                [self._written_mask, np.zeros(cap - len(self._written_mask), np.bool_)]
            )
        return np.arange(start, start + n, dtype=np.int64)

    def on_written(self, writer: int, seqs: np.ndarray) -> None:
        """Events acknowledged by the store (appended, or committed for transactions)."""
        self.written[writer] += len(seqs)
        self._written_mask[seqs] = True

    # ------------------------------------------------------------------ reads
    def on_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.group_emitted = INT64_MIN
            self.reader_last.clear()

    def on_reader_joined(self, reader: str) -> None:
        """A reader (re)joined: its watermarks ascend from here (a restarted reader is a new session)."""
        self.reader_last.pop(reader, None)

    def on_watermark(self, t_ms: int, reader: str, watermark: int) -> None:
        """A watermark returned by ``reader``: must ascend strictly per reader (docs/design.md §4.2)."""
        last = self.reader_last.get(reader, INT64_MIN)
        if watermark <= last:
            self.watermark_violations += 1
        self.reader_last[reader] = watermark
        self.group_emitted = max(self.group_emitted, watermark)
        self.watermarks_returned += 1
        if self.event_log:
            self.watermark_rows.append((t_ms, reader, real_time(watermark)))

    def on_batch(self, t_ms: int, reader: str, batch: EventBatch) -> tuple[np.ndarray, np.ndarray]:
        """Account one batch (its watermark first); returns the events' writer indexes and numbers.

        An empty batch costs a few attribute tests; one of events (without the event log) one
        call of a compiled kernel (``_sim_kernels.ACCOUNT_ENTRIES``) on views of its buffers."""
        ids = self.count_batch(t_ms, reader, batch, keep=True)
        assert ids is not None
        return ids

    def count_batch(
        self, t_ms: int, reader: str, batch: EventBatch, keep: bool = False
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``on_batch``, returning the ids only if ``keep`` (else maybe None): without, the kernel writes
        them to a scratch buffer, not two new arrays (~2 us less a batch in a simulation, where
        this code is cold at every batch). O(events)."""
        if batch.epoch != self.epoch:
            self.on_epoch(batch.epoch)
        if batch.watermark is not None:
            self.on_watermark(t_ms, reader, batch.watermark)
        n = len(batch)
        if n == 0:
            return _NONE, _NONE
        it = batch.ingestion_time
        et = batch.event_time
        gw = self.group_emitted
        no_wm = gw == INT64_MIN
        if gw != self._etw_of:  # (the group watermark changes far less often than batches come)
            self._etw = event_time_watermark(gw, self.lag)
            self._etw_of = gw
        etw = self._etw
        k = None if self.event_log else sim_kernels(n)
        if k is not None and it.dtype is _I64 and et.dtype is _I64:  # one kernel call counts the batch
            pays = batch.payload
            _, ob, db = pays.buffers()
            if db is not None:
                large = type(pays) is pa.LargeBinaryArray
                if keep:
                    ids = np.empty((2, n), np.int64)
                else:
                    if self._ids.shape[1] < n:
                        self._ids = np.empty((2, max(n, 2 * self._ids.shape[1])), np.int64)
                    ids = self._ids
                # the compiled entry, not numba's dispatch: it takes exactly these types, unchecked
                # (the columns int64 of any layout, as tested above; the rest made here)
                dup = k.ACCOUNT_ENTRIES[large](
                    np.frombuffer(ob, _I64 if large else _I32), pays.offset, n, np.frombuffer(db, _U8),
                    it, et, gw, etw, self._counts, self._seen, ids,
                )  # fmt: skip
                if dup >= 0:
                    self.duplicates += dup
                    return (ids[0], ids[1]) if keep else None
        w, s = payload_ids(batch.payload)
        nw = len(self.written)
        if no_wm:  # nothing is late before the first watermark
            late_i = late_e = np.zeros(n, np.bool_)
        else:
            late_i = it <= gw
            late_e = (et != NO_EVENT_TIME) & (et <= etw)
            if late_i.any():
                self._counts[1] += np.bincount(w[late_i], minlength=nw)
            if late_e.any():
                self._counts[2] += np.bincount(w[late_e], minlength=nw)
        self._counts[0] += np.bincount(w, minlength=nw)
        seen = self._seen[s]
        self.duplicates += int(np.count_nonzero(seen))
        self._seen[s] = True
        if self.event_log:
            segs = batch.segments
            keys = batch.routing_key.to_pylist()
            for si, off, k, wi, sq, e, ing, li, le in zip(
                batch.segment_index.tolist(),
                batch.offset.tolist(),
                keys,
                w.tolist(),
                s.tolist(),
                et.tolist(),
                it.tolist(),
                late_i.tolist(),
                late_e.tolist(),
                strict=True,
            ):
                self.event_rows.append(
                    (
                        t_ms,
                        reader,
                        segs[si],
                        off,
                        k,
                        self.writer_names[wi],
                        sq,
                        None if e == NO_EVENT_TIME else e,
                        ing,
                        int(li),
                        int(le),
                        None if no_wm else real_time(etw),
                    )
                )
        return w, s

    # ------------------------------------------------------------------ totals
    @property
    def events_allocated(self) -> int:
        return self._next_seq

    @property
    def events_unique(self) -> int:
        return int(np.count_nonzero(self._seen[: self._next_seq]))

    @property
    def events_missing(self) -> int:
        """Events the store acknowledged that no reader delivered."""
        n = self._next_seq
        return int(np.count_nonzero(self._written_mask[:n] & ~self._seen[:n]))

    def add_sample(self, row: dict[str, Any]) -> None:
        prev = next(
            (r["group_watermark"] for r in reversed(self.samples) if r["group_watermark"] is not None), None
        )
        if prev is not None and row["group_watermark"] is not None and row["group_watermark"] < prev:
            self.group_samples_decreasing += 1
        self.samples.append(row)


def stats(values: Iterable[float]) -> dict[str, float | None]:
    """count, mean, p50, p99 and max of ``values`` (``None`` where empty)."""
    a = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if a.size == 0:
        return {"count": 0, "mean": None, "p50": None, "p99": None, "max": None}
    return {
        "count": int(a.size),
        "mean": _num(float(a.mean())),
        "p50": _num(float(np.percentile(a, 50))),
        "p99": _num(float(np.percentile(a, 99))),
        "max": _num(float(a.max())),
    }


def _num(v: float) -> float | int:
    if math.isfinite(v) and v == int(v):
        return int(v)
    return round(v, 3)


# ---------------------------------------------------------------------- files


def _csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])


def _parquet(path: Path, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    pq.write_table(pa.table(data), path, compression="zstd")


def write_outputs(out_dir: Path, summary: dict[str, Any], rec: Recorder, parquet: bool) -> list[Path]:
    """Write ``summary.json``, ``series.csv``, ``segments.csv`` (and the event logs if kept)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / "summary.json", out_dir / "series.csv"]
        paths[0].write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        series = [tuple(r[c] for c in SERIES_COLUMNS) for r in rec.samples]
        _csv(paths[1], SERIES_COLUMNS, series)
        if rec.segment_rows:
            paths.append(out_dir / "segments.csv")
            _csv(paths[-1], SEGMENT_COLUMNS, rec.segment_rows)
        if rec.event_log:
            paths.append(out_dir / "events.csv")
            _csv(paths[-1], EVENT_COLUMNS, rec.event_rows)
            paths.append(out_dir / "watermarks.csv")
            _csv(paths[-1], ("t_ms", "reader", "watermark"), rec.watermark_rows)
        if parquet:
            paths.append(out_dir / "series.parquet")
            _parquet(paths[-1], SERIES_COLUMNS, series)
            if rec.segment_rows:
                paths.append(out_dir / "segments.parquet")
                _parquet(paths[-1], SEGMENT_COLUMNS, rec.segment_rows)
    except OSError as e:
        raise OutputError(f"cannot write to output directory {str(out_dir)!r}: {e.strerror or e}") from None
    return paths
