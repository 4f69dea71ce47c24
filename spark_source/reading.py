"""Reading segment ranges: frame boundaries for planning, Arrow record batches for Spark.

Executors call ``read_range`` for each range of their partition, and no step of it
works per event in Python:

- the bytes come through the store's client in reads of up to ``READ_CHUNK_BYTES``
  that start at frame boundaries, fetched on a background thread up to
  ``FETCH_AHEAD`` reads ahead of the decoding (``fetching``);
- ``decode_events`` turns each read's frames into columns with two numba kernels over
  the raw bytes (writer markers validated and dropped);
- every event's ingestion time is ``watermark_at(o) + 1`` (``o`` below the length,
  docs/design.md §1): the time of the ingestion run holding ``o`` (``ingestion_runs``,
  a few runs per append, asked for several reads ahead on the fetch thread), looked up
  for all of a read's events at once (``times_in_runs``);
- the columns become one ``pyarrow.RecordBatch`` per read in exactly the schema Spark
  expects (``ARROW_SCHEMA``); the columns every row of the range shares (stream,
  segment, the micro-batch's ``watermark`` and ``event_time_watermark``, kind) are
  built once or twice per range from whole buffers and sliced.

O(bytes) per range: ~0.1 µs per 57-byte event on one thread here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from readergroup.format.events import NO_EVENT_TIME, frame_ends_of
from readergroup.format.frame_batch import EventColumns, decode_events
from readergroup.format.pravega_frames import decode_pravega_events, pravega_frame_ends_of
from readergroup.reading.frontier import END_OF_TIME, NO_WATERMARK, event_time_watermark
from segmentstore.client import RemoteClient, SegmentStoreClient
from segmentstore.client.security import ClientSecurity
from segmentstore.errors import SegmentNotFoundError, SegmentTruncatedError
from segmentstore.results import RecordScan

from .errors import DataLossError
from .fetching import FETCH_AHEAD, READ_CHUNK_BYTES, fetched_ahead, runs_of, whole_frame_reads

__all__ = [
    "SPARK_SCHEMA",
    "ARROW_SCHEMA",
    "COLUMNS",
    "KIND_EVENT_NAME",
    "KIND_WATERMARK_NAME",
    "READ_CHUNK_BYTES",
    "FETCH_AHEAD",
    "SCAN_CHUNK_BYTES",
    "BatchMeta",
    "WATERMARK_COLUMN_SLACK_US",
    "MIN_TIMESTAMP_US",
    "MAX_TIMESTAMP_US",
    "read_range",
    "ingestion_times",
    "times_in_runs",
    "watermark_batch",
    "events_batch",
    "frame_ends",
    "frame_span",
    "connect",
]

_log = logging.getLogger("spark_source")

COLUMNS = (
    "stream",
    "segment",
    "offset",
    "routing_key",
    "payload",
    "event_time",
    "ingestion_time",
    "watermark",
    "event_time_watermark",
    "kind",
)
SPARK_SCHEMA = (
    "stream string, segment string, offset bigint, routing_key string, payload binary, "
    "event_time timestamp, ingestion_time timestamp, watermark timestamp, "
    "event_time_watermark timestamp, kind string"
)
_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("segment", pa.string()),
        ("offset", pa.int64()),
        ("routing_key", pa.string()),
        ("payload", pa.binary()),
        ("event_time", _TS),
        ("ingestion_time", _TS),
        ("watermark", _TS),
        ("event_time_watermark", _TS),
        ("kind", pa.string()),
    ]
)
KIND_EVENT_NAME = "event"
KIND_WATERMARK_NAME = "watermark"
SCAN_CHUNK_BYTES = 1 << 20


def connect(
    endpoint: str,
    timeout_ms: int,
    read_ahead: bool = True,
    security: ClientSecurity | None = None,
    probe: bool = False,
) -> RemoteClient:
    """A client of the server at ``endpoint`` (options endpoint, timeoutMs, token and tls*).

    ``read_ahead=False`` for ``read_range``, which fetches ahead itself and never past the range.
    ``probe``: first make one connection without retries, so that a server that is not
    running, or refuses the token or TLS, fails at once (``UnreachableStoreError``)
    rather than after ``timeoutMs`` of retries; the driver probes when a query starts.
    """
    security = security or ClientSecurity()
    if probe:
        security.probe(endpoint, connect_timeout_s=min(5.0, timeout_ms / 1000.0))
    return security.remote_client(endpoint, timeout_s=timeout_ms / 1000.0, read_ahead=read_ahead)


WATERMARK_COLUMN_SLACK_US = 999
"""Microseconds added to ``event_time_watermark`` (see ``BatchMeta.event_time_watermark_us``)."""


@dataclass(frozen=True, slots=True)
class BatchMeta:
    """What every row of a micro-batch shares: its end watermark, the event-time lag, data-loss policy."""

    watermark_ms: int
    max_event_time_lag_ms: int
    fail_on_data_loss: bool = True

    @property
    def watermark_us(self) -> int | None:
        """The ``watermark`` column: ms as µs; null (None) before there is a watermark (no sentinel)."""
        return _watermark_us(self.watermark_ms, 0)

    @property
    def event_time_watermark_ms(self) -> int:
        return event_time_watermark(self.watermark_ms, self.max_event_time_lag_ms)

    @property
    def event_time_watermark_us(self) -> int | None:
        """The ``event_time_watermark`` column: ``watermark - lag`` ms, plus 999 µs; null with no watermark.

        Spark's stateful operators drop input rows whose watermark column is ``<=`` the
        previous batch's watermark, so a batch in which the ingestion watermark did not
        move would lose its rows; the extra 999 µs keep them, and do not move Spark's
        watermark, which is whole milliseconds (the column's value divided by 1000,
        rounded down). Compared with millisecond event times it means the same. Null
        before any watermark (``timeDomain = event`` before a writer asserted a time):
        Spark's watermark ignores nulls, so it stays unset.
        """
        return _watermark_us(self.event_time_watermark_ms, WATERMARK_COLUMN_SLACK_US)


MIN_TIMESTAMP_US = -62_135_596_800_000_000
"""0001-01-01T00:00:00Z in µs: the earliest timestamp Spark (and Python's datetime) can hold."""
MAX_TIMESTAMP_US = 253_402_300_799_999_999
"""9999-12-31T23:59:59.999999Z in µs: the latest timestamp Spark (and Python's datetime) can hold."""


def _watermark_us(ms: int, extra_us: int) -> int | None:
    """A watermark in ms as a timestamp column's µs: None for ``NO_WATERMARK``/``END_OF_TIME``, else
    clamped to the timestamps Spark can hold (order kept)."""
    if ms == NO_WATERMARK or ms >= END_OF_TIME:
        return None
    return min(max(ms * 1000 + extra_us, MIN_TIMESTAMP_US), MAX_TIMESTAMP_US)


def read_range(
    client: SegmentStoreClient,
    stream: str,
    segment: str,
    begin: int,
    end: int,
    meta: BatchMeta,
    warn: Callable[[str], None] | None = None,
    ahead: int = FETCH_AHEAD,
    chunk_bytes: int = READ_CHUNK_BYTES,
    pravega: bool = False,
) -> Iterator[pa.RecordBatch]:
    """The events of ``segment`` in ``[begin, end)`` as record batches of ``ARROW_SCHEMA``, one per read.

    ``begin`` and ``end`` are frame boundaries. Reads of up to ``chunk_bytes``, ``ahead``
    of them fetched, decoded and given their ingestion times ahead on a background thread
    (0: none, all on this thread); this thread only assembles and yields the batches. ``pravega``:
    the stream holds Pravega's framing (null routing keys and event times). O(bytes).
    """
    decode = decode_pravega_events if pravega else decode_events
    warn = warn or _log.warning
    shared = _SharedColumns(stream, segment, meta)

    def decoded(start: int) -> Iterator[tuple[int, EventColumns, np.ndarray]]:
        """(position after, events, their ingestion times) per read; on the fetch thread if any."""
        for chunk in whole_frame_reads(client, stream, segment, start, end, chunk_bytes, True, pravega):
            cols, consumed = decode(chunk.data, chunk.base)
            times = _NO_TIMES
            if len(cols):
                assert chunk.runs is not None  # events come from whole frames, whose runs came with them
                times = times_in_runs(cols.offsets, chunk.runs)
            yield chunk.base + consumed, cols, times

    pos = begin
    while pos < end:
        chunks = fetched_ahead(functools.partial(decoded, pos), ahead if end - pos > chunk_bytes else 0)
        try:
            for after, cols, times in chunks:
                pos = after
                if len(cols):
                    yield _event_batch(shared, cols, times)
            return
        except (SegmentTruncatedError, SegmentNotFoundError) as e:
            lost = f"segment {segment!r} of stream {stream!r}: data at offset {pos} is gone ({e})"
            if meta.fail_on_data_loss:
                raise DataLossError(lost + " (set option failOnDataLoss=false to skip lost data)") from e
            if isinstance(e, SegmentNotFoundError):
                warn(lost + "; skipping the rest of the range (failOnDataLoss=false)")
                return
            skip_to = min(end, client.get_info(segment).start_offset)
            warn(lost + f"; skipping to {skip_to} (failOnDataLoss=false)")
            pos = skip_to if skip_to > pos else end
        finally:
            chunks.close()


def ingestion_times(client: SegmentStoreClient, segment: str, offsets: np.ndarray) -> np.ndarray:
    """The ingestion time of the byte at each offset (ascending, below the length): one store call.

    The store answers with the runs of bytes written at one time between the first
    offset and the last (``ingestion_runs``: a few per append, not per event); each
    offset takes its run's time. O(n + k log n) numpy work for n offsets over k runs.
    """
    if len(offsets) == 0:
        return np.empty(0, np.int64)
    return times_in_runs(offsets, runs_of(client, segment, int(offsets[0]), int(offsets[-1]) + 1))


def times_in_runs(offsets: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """Each offset's ingestion time (offsets ascending) from ``ingestion_runs`` covering them. O(n)."""
    runs = np.asarray(runs, dtype=np.int64)
    upto = np.searchsorted(offsets, runs[0], side="right")  # offsets in runs 0..j; the last run covers all
    times: np.ndarray = np.repeat(runs[1], np.diff(upto, prepend=0))
    if len(times) != len(offsets):
        raise ValueError(f"the ingestion runs end at {int(runs[0, -1])}, before offset {int(offsets[-1])}")
    return times


class _SharedColumns:
    """The columns every row of a range shares, built for the largest batch so far and sliced.

    Reads of a range hold a few events more or fewer each: a build leaves room for a
    quarter more rows, so a range builds them once or twice. O(rows) per build: the
    buffers are made whole (``_repeated``), not value by value as ``pa.repeat`` does
    (~100 ns per row for these five columns, as much as the rest of the read path).
    """

    __slots__ = ("_arrays", "_rows", "_values")

    def __init__(self, stream: str, segment: str, meta: BatchMeta) -> None:
        self._values = (stream, segment, meta.watermark_us, meta.event_time_watermark_us, KIND_EVENT_NAME)
        self._rows = 0
        self._arrays: tuple[pa.Array, ...] = ()

    def of(self, n: int) -> tuple[pa.Array, ...]:
        """Stream, segment, watermark, event-time watermark and kind columns of ``n`` rows."""
        if n > self._rows or not self._arrays:  # (a range of no events, only markers, is 0 rows)
            rows = n + n // 4
            self._arrays = tuple(_repeated(v, rows) for v in self._values)
            self._rows = rows
        return tuple(a.slice(0, n) for a in self._arrays)


def _repeated(value: str | int | None, n: int) -> pa.Array:
    """``n`` times ``value``: a string column (str), a timestamp column of µs (int), or null timestamps."""
    if value is None:
        return pa.nulls(n, _TS)
    if isinstance(value, int):  # (not pa.array: it imports pandas, see _int64_column)
        return _int64_column(_TS, np.full(n, value, np.int64))
    data = value.encode()
    if len(data) * n > np.iinfo(np.int32).max:  # beyond a string column's 32-bit offsets: Arrow's own way
        return pa.repeat(pa.scalar(value, pa.string()), n)
    offsets = (np.arange(n + 1, dtype=np.int64) * len(data)).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


_NO_TIMES = np.empty(0, np.int64)

_MS_MIN = MIN_TIMESTAMP_US // 1000
_MS_MAX = MAX_TIMESTAMP_US // 1000


def _ms_to_us(ms: np.ndarray) -> np.ndarray:
    """Milliseconds as microseconds, saturated at the years 1 and 9999 (the timestamps Spark and
    Python's datetime hold): order is kept (a later event time compares as the far end of time
    against any watermark), never wrapped nor out of range for ``collect()``."""
    if ms.size and (ms.max() > _MS_MAX or ms.min() < _MS_MIN):
        ms = np.clip(ms, _MS_MIN, _MS_MAX)
    return ms * 1000


def _event_batch(shared: _SharedColumns, cols: EventColumns, ingestion_ms: np.ndarray) -> pa.RecordBatch:
    n = len(cols)
    times = cols.event_times
    if n and times.min() >= _MS_MIN and times.max() <= _MS_MAX:  # (the usual batch: two passes, not five)
        event_time = _int64_column(_TS, times * 1000)
    else:
        no_time = times == NO_EVENT_TIME
        has_none = bool(no_time.any())
        event_us = _ms_to_us(np.where(no_time, 0, times) if has_none else times)
        event_time = _int64_column(_TS, event_us, no_time if has_none else None)
    stream_col, segment_col, watermark_col, et_watermark_col, kind_col = shared.of(n)
    arrays = [
        stream_col,
        segment_col,
        _int64_column(_INT64, cols.offsets),
        cols.routing_keys,
        cols.payloads,
        event_time,
        _int64_column(_TS, ingestion_ms * 1000),
        watermark_col,
        et_watermark_col,
        kind_col,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


_INT64 = pa.int64()


def _int64_column(t: pa.DataType, values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """An int64 or timestamp column of ``values`` (int64, C-contiguous) without copying them, null
    where ``null`` (bool) is true: what ``pa.array(values, t, mask=null)`` gives, which takes ~3 ns
    per value checking large ones (segment offsets) and, for a type with a time zone, imports pandas
    (~0.5 s and ~30,000 objects in each Spark worker)."""
    v = np.ascontiguousarray(values, np.int64)
    if null is None:
        return pa.Array.from_buffers(t, len(v), [None, pa.py_buffer(v)])
    valid = pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(t, len(v), [valid, pa.py_buffer(v)], null_count=int(null.sum()))


def events_batch(
    stream: str, segment: str, meta: BatchMeta, cols: EventColumns, ingestion_ms: np.ndarray
) -> pa.RecordBatch:
    """Decoded events of one segment with their ingestion times as a batch of ``ARROW_SCHEMA``. O(rows)."""
    return _event_batch(_SharedColumns(stream, segment, meta), cols, ingestion_ms)


def watermark_batch(meta: BatchMeta) -> pa.RecordBatch:
    """One ``kind = 'watermark'`` row carrying the micro-batch's watermarks (other columns null)."""
    arrays = [pa.nulls(1, f.type) for f in ARROW_SCHEMA]
    arrays[COLUMNS.index("watermark")] = _repeated(meta.watermark_us, 1)
    arrays[COLUMNS.index("event_time_watermark")] = _repeated(meta.event_time_watermark_us, 1)
    arrays[COLUMNS.index("kind")] = _repeated(KIND_WATERMARK_NAME, 1)  # (pa.array imports pandas)
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def frame_span(
    client: SegmentStoreClient,
    segment: str,
    begin: int,
    max_bytes: int,
    max_frames: int | None = None,
    pravega: bool = False,
    scan: Callable[[str, int, int, int | None], RecordScan] | None = None,
) -> tuple[int, int]:
    """``(end, frames)``: the whole frames in ``[begin, begin + max_bytes)``, at most ``max_frames``.

    ``begin`` must be a frame boundary. Frames are length-prefixed records, so the store
    walks their headers where the bytes are (``scan_records``, or ``scan`` standing in for
    it) and no event byte travels: one call per 16 MiB. Nothing is validated (``frame_ends``
    does that). Pravega's frames (``pravega``) are not the store's u32-prefixed records: their
    ends are found by ``frame_ends``, reading the bytes.
    """
    if pravega:
        ends = frame_ends(client, segment, begin, max_bytes, max_frames, pravega=True)
        return (int(ends[-1]), len(ends)) if len(ends) else (begin, 0)
    scan_records = scan or client.scan_records
    pos = begin
    found = 0
    limit = begin + max_bytes
    while (max_frames is None or found < max_frames) and pos < limit:  # (no frame fits in 0 bytes)
        want = None if max_frames is None else max_frames - found
        got = scan_records(segment, pos, limit - pos, want)
        if got.records == 0:
            break
        found += got.records
        pos = got.end
    return pos, found


def frame_ends(
    client: SegmentStoreClient,
    segment: str,
    begin: int,
    max_bytes: int,
    max_frames: int | None = None,
    pravega: bool = False,
) -> np.ndarray:
    """End offsets (int64) of the whole frames in ``[begin, begin + max_bytes)``, at most ``max_frames``.

    ``begin`` must be a frame boundary. Reads at most ``max_bytes`` bytes in
    ``SCAN_CHUNK_BYTES`` chunks (fewer once ``max_frames`` is reached) and walks the
    headers without decoding keys or payloads (``frame_ends_of``): O(bytes read), a few
    ns per frame, no Python object per frame. ``pravega``: Pravega's framing.
    """
    ends_of = pravega_frame_ends_of if pravega else frame_ends_of
    out: list[np.ndarray] = []
    found = 0
    limit = begin + max_bytes
    carry = b""
    base = begin  # segment offset of carry + the next read's bytes
    read_pos = begin
    while read_pos < limit:
        r = client.read(segment, read_pos, min(SCAN_CHUNK_BYTES, limit - read_pos))
        if not r.data:
            break
        buf = carry + r.data if carry else r.data
        read_pos += len(r.data)
        ends, consumed = ends_of(buf)
        if max_frames is not None and found + len(ends) >= max_frames:
            out.append(ends[: max_frames - found] + base)
            break
        out.append(ends + base)
        found += len(ends)
        carry = bytes(buf[consumed:])
        base += consumed
    return np.concatenate(out) if out else np.empty(0, np.int64)
