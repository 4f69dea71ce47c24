"""Reading segment ranges: frame boundaries for planning, Arrow record batches for Spark.

Executors call ``read_range`` for each range of their partition: the bytes come
through the store's client in chunks of ``READ_CHUNK_BYTES``, ``decode_columns``
splits them into frames (writer markers dropped), one ``watermarks_at`` call per
chunk gives every event's ingestion time (``watermark_at(o) + 1`` for ``o`` below the
length, DESIGN §1), and the columns become one ``pyarrow.RecordBatch`` per chunk in
exactly the schema Spark expects (``ARROW_SCHEMA``). The batch's ``watermark`` and
``event_time_watermark`` are constants of the micro-batch. O(bytes) per range.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from readergroup.events import NO_EVENT_TIME, decode_columns, frame_ends_of
from readergroup.frontier import END_OF_TIME, NO_WATERMARK, event_time_watermark
from segmentstore.client import RemoteClient, SegmentStoreClient
from segmentstore.errors import SegmentNotFoundError, SegmentTruncatedError

from .errors import DataLossError

__all__ = [
    "SPARK_SCHEMA",
    "ARROW_SCHEMA",
    "COLUMNS",
    "KIND_EVENT_NAME",
    "KIND_WATERMARK_NAME",
    "READ_CHUNK_BYTES",
    "SCAN_CHUNK_BYTES",
    "BatchMeta",
    "WATERMARK_COLUMN_SLACK_US",
    "read_range",
    "watermark_batch",
    "frame_ends",
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
READ_CHUNK_BYTES = 4 << 20
SCAN_CHUNK_BYTES = 1 << 20


def connect(endpoint: str, timeout_ms: int) -> SegmentStoreClient:
    """A client of the server at ``endpoint`` (options endpoint and timeoutMs)."""
    return RemoteClient(endpoint, timeout_s=timeout_ms / 1000.0)


WATERMARK_COLUMN_SLACK_US = 999
"""Microseconds added to ``event_time_watermark`` (see ``BatchMeta.event_time_watermark_us``)."""


@dataclass(frozen=True, slots=True)
class BatchMeta:
    """What every row of a micro-batch shares: its end watermark, the event-time lag, data-loss policy."""

    watermark_ms: int
    max_event_time_lag_ms: int
    fail_on_data_loss: bool = True

    @property
    def watermark_us(self) -> int:
        """The ``watermark`` column: ms as µs, within int64 (``NO_WATERMARK`` stays the lowest µs)."""
        return min(max(self.watermark_ms * 1000, NO_WATERMARK), END_OF_TIME)

    @property
    def event_time_watermark_ms(self) -> int:
        return event_time_watermark(self.watermark_ms, self.max_event_time_lag_ms)

    @property
    def event_time_watermark_us(self) -> int:
        """The ``event_time_watermark`` column: ``watermark - lag`` ms, plus 999 µs.

        Spark's stateful operators drop input rows whose watermark column is ``<=`` the
        previous batch's watermark, so a batch in which the ingestion watermark did not
        move would lose its rows; the extra 999 µs keep them, and do not move Spark's
        watermark, which is whole milliseconds (the column's value divided by 1000,
        rounded down). Compared with millisecond event times it means the same.
        """
        us = self.event_time_watermark_ms * 1000 + WATERMARK_COLUMN_SLACK_US
        return min(max(us, NO_WATERMARK), END_OF_TIME)  # within int64 at the edges


def read_range(
    client: SegmentStoreClient,
    stream: str,
    segment: str,
    begin: int,
    end: int,
    meta: BatchMeta,
    warn: Callable[[str], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The events of ``segment`` in ``[begin, end)`` as record batches of ``ARROW_SCHEMA``."""
    warn = warn or _log.warning
    pos = begin
    carry = b""
    stream_s = pa.scalar(stream, pa.string())
    segment_s = pa.scalar(segment, pa.string())
    while pos < end:
        try:
            r = client.read(segment, pos, min(READ_CHUNK_BYTES, end - pos))
        except (SegmentTruncatedError, SegmentNotFoundError) as e:
            lost = f"segment {segment!r} of stream {stream!r}: data at offset {pos} is gone ({e})"
            if meta.fail_on_data_loss:
                raise DataLossError(lost + " (set option failOnDataLoss=false to skip lost data)") from e
            if isinstance(e, SegmentNotFoundError):
                warn(lost + "; skipping the rest of the range (failOnDataLoss=false)")
                return
            skip_to = min(end, client.get_info(segment).start_offset)
            warn(lost + f"; skipping to {skip_to} (failOnDataLoss=false)")
            pos, carry = (skip_to if skip_to > pos else end), b""
            continue
        if not r.data:
            raise DataLossError(
                f"segment {segment!r} of stream {stream!r}: no data at offset {pos}, below the planned "
                f"end {end}"
            )
        base = pos - len(carry)
        buf = carry + r.data if carry else r.data
        pos += len(r.data)
        cols, consumed = decode_columns(buf, base, events_only=True)
        carry = bytes(buf[consumed:])
        if len(cols["offset"]):
            yield _event_batch(client, stream_s, segment_s, segment, cols, meta)
    if carry:
        raise DataLossError(
            f"segment {segment!r} of stream {stream!r}: {len(carry)} bytes before offset {end} are not a "
            "whole frame (the planned end is not a frame boundary)"
        )


def _event_batch(
    client: SegmentStoreClient,
    stream_s: pa.Scalar,
    segment_s: pa.Scalar,
    segment: str,
    cols: dict[str, object],
    meta: BatchMeta,
) -> pa.RecordBatch:
    offsets = np.asarray(cols["offset"], dtype=np.int64)
    n = len(offsets)
    times = np.asarray(cols["event_time"], dtype=np.int64)
    no_time = times == NO_EVENT_TIME
    event_us = np.where(no_time, 0, times) * 1000
    ingestion_us = (np.asarray(client.watermarks_at(segment, offsets), dtype=np.int64) + 1) * 1000
    arrays = [
        pa.repeat(stream_s, n),
        pa.repeat(segment_s, n),
        pa.array(offsets, pa.int64()),
        cols["routing_key"],
        cols["payload"],
        pa.array(event_us, _TS, mask=no_time if no_time.any() else None),
        pa.array(ingestion_us, _TS),
        pa.repeat(pa.scalar(meta.watermark_us, _TS), n),
        pa.repeat(pa.scalar(meta.event_time_watermark_us, _TS), n),
        pa.repeat(pa.scalar(KIND_EVENT_NAME, pa.string()), n),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def watermark_batch(meta: BatchMeta) -> pa.RecordBatch:
    """One ``kind = 'watermark'`` row carrying the micro-batch's watermarks (other columns null)."""
    arrays = [pa.nulls(1, f.type) for f in ARROW_SCHEMA]
    arrays[COLUMNS.index("watermark")] = pa.array([meta.watermark_us], _TS)
    arrays[COLUMNS.index("event_time_watermark")] = pa.array([meta.event_time_watermark_us], _TS)
    arrays[COLUMNS.index("kind")] = pa.array([KIND_WATERMARK_NAME], pa.string())
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def frame_ends(
    client: SegmentStoreClient,
    segment: str,
    begin: int,
    max_bytes: int,
    max_frames: int | None = None,
) -> list[int]:
    """End offsets of the whole frames in ``[begin, begin + max_bytes)``, at most ``max_frames`` of them.

    ``begin`` must be a frame boundary. Reads at most ``max_bytes`` bytes in
    ``SCAN_CHUNK_BYTES`` chunks (fewer once ``max_frames`` is reached) and walks the
    headers without decoding keys or payloads (``frame_ends_of``): O(bytes read), a few ns per frame.
    """
    out: list[int] = []
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
        ends, consumed = frame_ends_of(buf)
        if max_frames is not None and len(out) + len(ends) >= max_frames:
            ends = ends[: max_frames - len(out)]
            out.extend((ends + base).tolist())
            return out
        out.extend((ends + base).tolist())
        carry = bytes(buf[consumed:])
        base += consumed
    return out
