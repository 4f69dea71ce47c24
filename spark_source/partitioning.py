"""Spark input partitions by size, not by segment: a micro-batch's segment ranges packed into tasks.

A Spark task costs the same fixed time (~47 ms of a Python task on ``local[2]`` here)
however few bytes it reads, so one task per segment range made a micro-batch over a
stream of 2,048 segments cost 2,047 tasks for a few hundred bytes each. Like Spark's
file sources (``maxPartitionBytes``), ``pack_ranges`` fills each input partition with
whole ranges, in order (stream, epoch, segment, begin), up to ``maxPartitionBytes``; a range
larger than that is a partition of its own. The number of tasks of a micro-batch thus
follows the bytes in it, not the segments.

Like Kafka's source, ``minPartitions`` asks for at least that many tasks when the data
allows: the target becomes ``min(maxPartitionBytes, bytes / minPartitions)`` and ranges
above it are split at frame boundaries (``split_range``, one ``scan_records`` per cut,
on the driver) into parts packed into consecutive partitions.

Order: a range is read from its begin to its end by one task, and a task reads its
ranges one after the other, so each segment's events of a micro-batch come out of one
task in offset order, and micro-batches follow each other, as before; a task holding a
segment and a successor that joined in the same micro-batch reads the older epoch first
(across tasks Spark orders nothing: there, as before, ``offset`` within a segment and
the segments' epochs give the order). A range split by
``minPartitions`` is read by several tasks at once, each part in order: Spark orders no
rows across tasks, so per-key order within such a micro-batch is the ``offset`` column's
(sort by it within a segment), as with Kafka's ``minPartitions``. Offsets do not depend
on the packing: it is computed again, equal, from a micro-batch's start and end.

A task reads its ranges with ``read_ranges``: small ones (most of a wide stream's) many
at a time through ``read_ranges`` (their bytes and ingestion runs in one round trip),
handed to Spark as one record batch per call; large ones as ``read_range`` reads them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from readergroup.format.frame_batch import decode_events
from readergroup.format.pravega_frames import decode_pravega_events
from segmentstore import RangeRead
from segmentstore.client import SegmentStoreClient

from .options import DEFAULT_MAX_PARTITION_BYTES
from .planner import SegmentRange
from .reading import FETCH_AHEAD, BatchMeta, events_batch, frame_span, read_range, times_in_runs

__all__ = [
    "DEFAULT_MAX_PARTITION_BYTES",
    "SMALL_RANGE_BYTES",
    "GROUP_BYTES",
    "GROUP_RANGES",
    "pack_ranges",
    "split_range",
    "read_ranges",
    "Splitter",
]

SMALL_RANGE_BYTES = 1 << 20
"""Ranges up to this size are read many at once (``read_ranges``); larger ones fetch ahead themselves."""
GROUP_BYTES = 2 << 20
"""Bytes of small ranges one ``read_ranges`` asks for (a server answers 4 MiB in one reply)."""
GROUP_RANGES = 1024
"""Small ranges one ``read_ranges`` asks for at most."""

_EPOCH = re.compile(r"\.#epoch\.(\d+)$")

Splitter = Callable[[SegmentRange, int], list[SegmentRange]]
"""Cuts a range into parts of at most about ``n`` bytes at frame boundaries (``split_range``)."""


def pack_ranges(
    ranges: Sequence[SegmentRange],
    max_bytes: int,
    min_partitions: int | None = None,
    split: Splitter | None = None,
) -> list[list[SegmentRange]]:
    """The ranges in partitions of at most ``max_bytes`` (a larger range alone), in order. O(ranges).

    ``min_partitions``: aim for at least that many partitions, splitting ranges above
    ``bytes / min_partitions`` with ``split`` (needed then). No ranges: no partitions.
    """
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
    ordered = sorted(ranges, key=lambda r: (r.stream, _epoch(r.segment), r.segment, r.begin))
    total = sum(r.end - r.begin for r in ordered)
    target = max_bytes
    if min_partitions is not None and min_partitions > 1 and total > 0:
        target = max(1, min(max_bytes, -(-total // min_partitions)))
        if split is None:
            raise ValueError("min_partitions needs a split function")
        ordered = [part for r in ordered for part in (split(r, target) if r.end - r.begin > target else [r])]
    out: list[list[SegmentRange]] = []
    size = 0
    for r in ordered:
        n = r.end - r.begin
        if not out or (size > 0 and size + n > target):
            out.append([])
            size = 0
        out[-1].append(r)
        size += n
    return out


def _epoch(segment: str) -> int:
    """The epoch in a stream segment's name (``stream_segment_name``); 0 for another name."""
    m = _EPOCH.search(segment)
    return int(m.group(1)) if m else 0


def split_range(client: SegmentStoreClient, r: SegmentRange, part_bytes: int) -> list[SegmentRange]:
    """``r`` cut at frame boundaries into parts of at most ``part_bytes`` (a longer frame: a part alone).

    One ``scan_records`` per part (the store walks the frame headers; no event byte
    travels). The parts cover ``r`` exactly, in order.
    """
    out: list[SegmentRange] = []
    pos = r.begin
    while r.end - pos > part_bytes:
        end, frames = frame_span(client, r.segment, pos, part_bytes, pravega=r.pravega)
        if frames == 0:  # one frame longer than a part
            end, frames = frame_span(client, r.segment, pos, r.end - pos, 1, r.pravega)
            if frames == 0:
                break  # not a whole frame: the read reports it
        out.append(SegmentRange(r.stream, r.segment, pos, end, r.pravega))
        pos = end
    if pos < r.end:
        out.append(SegmentRange(r.stream, r.segment, pos, r.end, r.pravega))
    return out


def read_ranges(
    client: SegmentStoreClient,
    ranges: Sequence[SegmentRange],
    meta: BatchMeta,
    warn: Callable[[str], None] | None = None,
    ahead: int = FETCH_AHEAD,
) -> Iterator[pa.RecordBatch]:
    """The events of ``ranges`` as ``read_range`` gives them, range after range, in order.

    A task packed with many small ranges would wait two round trips per range: runs of
    ranges of at most ``SMALL_RANGE_BYTES`` are read ``GROUP_BYTES`` (at most
    ``GROUP_RANGES`` ranges) at a time with one ``read_ranges`` (bytes and ingestion runs
    together), decoded range by range and handed to Spark as one record batch per group.
    A range that ``read_ranges`` could not give whole (gone, truncated, cut short by the
    reply's size, malformed) is read by ``read_range``, which reports it as it always
    does; a larger range is read as ``read_range`` reads it (``ahead``: its fetch thread's
    reads ahead, 0 for none). O(bytes).
    """
    i = 0
    while i < len(ranges):
        j = i
        while j < len(ranges) and ranges[j].end - ranges[j].begin <= SMALL_RANGE_BYTES:
            j += 1
        if j - i < 2:  # a large range, or a small one alone
            r = ranges[i]
            yield from read_range(
                client, r.stream, r.segment, r.begin, r.end, meta, warn, ahead, pravega=r.pravega
            )
            i += 1
            continue
        while i < j:
            k, total = i, 0
            while (
                k < j
                and k - i < GROUP_RANGES
                and (k == i or total + ranges[k].end - ranges[k].begin <= GROUP_BYTES)
            ):
                total += ranges[k].end - ranges[k].begin
                k += 1
            yield from _read_group(client, ranges[i:k], meta, warn)
            i = k


def _read_group(
    client: SegmentStoreClient,
    group: Sequence[SegmentRange],
    meta: BatchMeta,
    warn: Callable[[str], None] | None,
) -> Iterator[pa.RecordBatch]:
    got = client.read_ranges([(r.segment, r.begin, r.end - r.begin) for r in group])
    held: list[pa.RecordBatch] = []
    for r, x in zip(group, got, strict=True):
        batch = _whole_range(r, x, meta)
        if batch is not None:
            if batch.num_rows:
                held.append(batch)
            continue
        if held:  # in order: what came before this range first
            yield _combined(held)
            held = []
        yield from read_range(client, r.stream, r.segment, r.begin, r.end, meta, warn, pravega=r.pravega)
    if held:
        yield _combined(held)


def _whole_range(r: SegmentRange, x: RangeRead, meta: BatchMeta) -> pa.RecordBatch | None:
    """The range's events from its ``read_ranges`` answer; None if it is not the whole range, cleanly."""
    if x.read is None or len(x.read.data) != r.end - r.begin or x.runs is None:
        return None
    runs = np.asarray(x.runs, dtype=np.int64)
    if runs.ndim != 2 or runs.shape[0] != 2 or runs.shape[1] == 0 or int(runs[0, -1]) < r.end - 1:
        return None  # more runs than one answer holds: read_range asks in parts
    cols, consumed = (decode_pravega_events if r.pravega else decode_events)(x.read.data, r.begin)
    if consumed != len(x.read.data):
        return None  # malformed, or not whole frames: read_range reports it
    times = times_in_runs(cols.offsets, runs) if len(cols) else np.empty(0, np.int64)
    return events_batch(r.stream, r.segment, meta, cols, times)


def _combined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
