"""The ``ingestwm`` Spark data source: streaming and batch reads of streams, and its registration.

``spark.readStream.format("ingestwm")`` reads one or more streams (or a pattern) from
an ingestwm server (option ``endpoint``). Spark pickles the source into other
processes: the query's runner process plans offsets (``IngestStreamReader`` holds a
``Planner`` and one client there), and executors run ``read()``, which sees only the
options and the ``IngestPartition`` and opens its own client. Offsets are JSON
(``SourceOffset``) so a restart from the checkpoint resumes exactly where the last
committed micro-batch ended. ``commit(end)`` records the committed position of every
segment read, as attributes of the consumer's system segment (option ``consumerName``),
which ``committed_positions`` reads back.

Every row of a micro-batch carries the micro-batch's end watermark (``watermark``) and
``event_time_watermark = watermark - maxEventTimeLag``: with
``withWatermark("event_time_watermark", "0 seconds")`` Spark's event-time watermark
follows the store's ingestion watermark exactly (the column carries 999 µs more, which
keeps Spark's stateful operators from taking a batch whose watermark did not move for
late: see ``BatchMeta.event_time_watermark_us``). A micro-batch without events in which
the watermark moved carries one ``kind = 'watermark'`` row (``emitWatermarkRows``); the
first micro-batch of a query reads nothing and carries the starting watermark, so Spark
knows it before the first events.

With option ``timeDomain = event`` both columns carry the writers' asserted watermark
(producer watermarks, ``EventWriter.note_time`` / ``mark_idle``) at the micro-batch's
end: it is event time already, so no lag is taken (``maxEventTimeLag`` is refused).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from segmentstore.attributes import AttributeUpdate
from segmentstore.client import SegmentStoreClient
from segmentstore.errors import SegmentExistsError, SegmentNotFoundError

from .errors import InvalidOptionError
from .executor import TASK_FETCH_AHEAD, prepare_worker, task_client
from .offsets import SourceOffset
from .options import EVENT, SourceOptions, parse_source_options
from .partitioning import pack_ranges, read_ranges, split_range
from .planner import READ_ALL, Limit, Planner, SegmentRange
from .reading import SPARK_SCHEMA, BatchMeta, connect, watermark_batch

__all__ = [
    "FORMAT",
    "IngestDataSource",
    "IngestStreamReader",
    "IngestBatchReader",
    "IngestPartition",
    "register",
    "consumer_segment",
    "position_attribute_key",
    "committed_positions",
]

FORMAT = "ingestwm"


class IngestPartition(InputPartition):
    """Segment ranges for one Spark task, the micro-batch's watermarks, and whether to emit a watermark row.

    ``watermark_row``: the task emits one ``kind = 'watermark'`` row if its ranges held no
    event (writer markers only, or no ranges at all).
    """

    def __init__(self, ranges: Sequence[SegmentRange], meta: BatchMeta, watermark_row: bool = False) -> None:
        super().__init__(None)
        self.ranges = tuple(ranges)
        self.meta = meta
        self.watermark_row = watermark_row

    def __repr__(self) -> str:
        return f"IngestPartition({list(self.ranges)!r}, watermark={self.meta.watermark_ms})"


def _read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, IngestPartition):
        return  # Spark's placeholder for a batch read without partitions
    prepare_worker()
    events = 0
    if partition.ranges:
        with task_client(options.endpoint, options.timeout_ms, options.security) as client:
            for batch in read_ranges(client, partition.ranges, partition.meta, ahead=TASK_FETCH_AHEAD):
                events += batch.num_rows
                yield batch
    if partition.watermark_row and events == 0:
        yield watermark_batch(partition.meta)


def _packed(
    options: SourceOptions, client: SegmentStoreClient | None, ranges: list[SegmentRange]
) -> list[list[SegmentRange]]:
    """The ranges in input partitions by size (options maxPartitionBytes, minPartitions): ``partitioning``."""
    split = None
    if client is not None:
        c = client
        split = lambda r, n: split_range(c, r, n)  # noqa: E731
    return pack_ranges(ranges, options.max_partition_bytes, options.min_partitions, split)


def _meta(options: SourceOptions, watermark: int) -> BatchMeta:
    lag = 0 if options.time_domain == EVENT else options.max_event_time_lag_ms  # event: already event time
    return BatchMeta(watermark, lag, options.fail_on_data_loss)


def consumer_segment(consumer: str) -> str:
    """The system segment whose attributes hold ``consumer``'s committed positions."""
    return f"_system/spark_source/{consumer}"


def position_attribute_key(segment: str) -> int:
    """The attribute key of ``segment``'s committed position (a stable positive int64)."""
    digest = hashlib.sha256(b"spark_source.position:" + segment.encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**62 - 1) | 2**62


def committed_positions(client: SegmentStoreClient, stream: str, consumer: str = "spark") -> dict[str, int]:
    """``{segment: position}`` a query reading as ``consumer`` last committed, for ``stream``'s open segments.

    Positions live in a system segment, not on the stream's segments: an attribute update
    is a temporal operation and would move their watermarks.
    """
    keys = {position_attribute_key(s.name): s.name for s in client.get_stream(stream).active_segments}
    try:
        attrs = client.get_attributes(consumer_segment(consumer), list(keys))
    except SegmentNotFoundError:
        return {}
    return {keys[k]: v for k, v in attrs.items() if k in keys}


class IngestStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch planning (runner process) and reading (executors) of a streaming query."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._client: SegmentStoreClient | None = None
        self._planner: Planner | None = None
        self._target: SourceOffset | None = None
        self._consumer_ready = False
        self._recorded: dict[str, int] = {}  # the positions last written to the consumer's segment
        self._limit: Limit | None = None  # the last latestOffset's
        self._ahead: threading.Thread | None = None  # scanning for the next micro-batch (prepare_next)

    def __getstate__(self) -> dict[str, Any]:
        """Only the options travel to executors; clients are opened where they are used."""
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_options"])  # type: ignore[misc]

    def _plan(self) -> Planner:
        """The planner, once no thread scans ahead with it (only this thread starts one)."""
        if self._ahead is not None:
            self._ahead.join()
            self._ahead = None
        if self._planner is None:
            o = self._options
            self._client = connect(o.endpoint, o.timeout_ms, security=o.security, probe=True)
            self._planner = Planner(self._client, self._options)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        return self._plan().initial_offset().to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_events_per_trigger is not None:
            return ReadMaxRows(self._options.max_events_per_trigger)
        if self._options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self._options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._plan().target_offset()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if isinstance(limit, ReadAllAvailable):
            lim = READ_ALL
        elif isinstance(limit, ReadMaxRows):
            lim = Limit(limit.max_rows, self._options.max_bytes_per_trigger)
        elif isinstance(limit, ReadMaxBytes):
            lim = Limit(self._options.max_events_per_trigger, limit.max_bytes)
        else:
            lim = Limit(self._options.max_events_per_trigger, self._options.max_bytes_per_trigger)
        begin = SourceOffset.from_dict(start)
        self._record(begin)  # everything before ``start`` is processed and committed by now
        self._limit = lim
        return self._plan().next_offset(begin, lim, self._target).to_dict()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        s, e = SourceOffset.from_dict(start), SourceOffset.from_dict(end)
        meta = _meta(self._options, e.watermark)
        ranges = self._plan().ranges(s, e)
        moved = self._options.emit_watermark_rows and e.watermark > s.watermark
        # The first task stands in for the batch: a watermark row if it read no event (markers only)
        parts: list[InputPartition] = [
            IngestPartition(rs, meta, watermark_row=moved and i == 0)
            for i, rs in enumerate(_packed(self._options, self._client, ranges))
        ]
        if not parts and moved:
            parts.append(IngestPartition([], meta, watermark_row=True))
        self._scan_ahead(e)
        return parts

    def _scan_ahead(self, end: SourceOffset) -> None:
        """While the micro-batch ending at ``end`` runs, find where the next one's frames end.

        A limited micro-batch's planning waits for the store to walk the frames it admits
        (``admission``); asked for now, on a thread of this process, the walks are done when
        Spark asks for the next offset, which finds their answers. Not for a run with a
        target (``availableNow``: its last batches are short) nor without a limit (no walk).
        """
        lim, planner = self._limit, self._planner
        if lim is None or lim.unlimited or self._target is not None or planner is None:
            return
        self._ahead = threading.Thread(
            target=planner.prepare_next, args=(end, lim), name="ingestwm-scan-ahead", daemon=True
        )
        self._ahead.start()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self._options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Record the committed position of every segment read (see ``committed_positions``)."""
        self._record(SourceOffset.from_dict(end))

    def _record(self, offset: SourceOffset) -> None:
        """Write ``offset``'s positions to the consumer's segment, unless they were the last written.

        Spark calls ``commit(end)`` of a micro-batch only when it plans the one after, so
        positions would lag a micro-batch, and stay unwritten while no batch follows
        (``emitWatermarkRows=false`` on an idle stream). ``latestOffset(start)`` runs at every
        trigger with ``start`` the end of the last micro-batch Spark committed (a micro-batch
        not committed before a restart is run again before any ``latestOffset``), so it records
        ``start`` too: the positions follow within one trigger. One store call when they changed.
        """
        positions = {seg: pos for so in offset.streams.values() for seg, pos in so.positions.items()}
        if not positions or positions == self._recorded:
            return
        self._plan()
        assert self._client is not None
        name = consumer_segment(self._options.consumer_name)
        if not self._consumer_ready:
            with contextlib.suppress(SegmentExistsError):
                self._client.create_segment(name)
            self._consumer_ready = True
        self._client.update_attributes(
            name, [AttributeUpdate(position_attribute_key(seg), pos) for seg, pos in positions.items()]
        )
        self._recorded = positions

    def stop(self) -> None:
        if self._ahead is not None:
            self._ahead.join()
            self._ahead = None
        if self._client is not None:
            self._client.close()
        self._client = self._planner = None


class IngestBatchReader(DataSourceReader):
    """A batch read from ``startingPosition`` (default earliest) to ``endingPosition`` (default latest)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        """Walks the segments from the starting to the ending cut, successors included. O(segments)."""
        o = self._options
        client = connect(o.endpoint, o.timeout_ms, security=o.security, probe=True)
        try:
            planner = Planner(client, self._options)
            offset = planner.initial_offset()
            target = planner.target_offset(self._options.ending)
            ranges: list[SegmentRange] = []
            for _ in range(100_000):
                nxt = planner.next_offset(offset, READ_ALL, target)
                if nxt == offset or nxt.to_dict() == offset.to_dict():
                    break
                ranges.extend(planner.ranges(offset, nxt))
                offset = nxt
            packed = _packed(self._options, client, ranges)
        finally:
            client.close()
        meta = _meta(self._options, offset.watermark)
        return [IngestPartition(rs, meta) for rs in packed]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self._options, partition)


class IngestDataSource(DataSource):
    """``format("ingestwm")``: reads streams of an ingestwm server and writes to one."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        parse_source_options(self.options, streaming=None)  # bad options fail at load()
        return SPARK_SCHEMA

    def _check_schema(self, schema: Any) -> None:
        names = [f.name for f in schema.fields] if hasattr(schema, "fields") else None
        expected = [c.split()[0] for c in SPARK_SCHEMA.split(", ")]
        if names is not None and names != expected:
            raise InvalidOptionError(
                f"the ingestwm source has a fixed schema ({SPARK_SCHEMA}); do not pass .schema(...), "
                f"got {names}"
            )

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        self._check_schema(schema)
        return IngestStreamReader(parse_source_options(self.options, streaming=True))

    def reader(self, schema: Any) -> DataSourceReader:
        self._check_schema(schema)
        return IngestBatchReader(parse_source_options(self.options, streaming=False))

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from .sink import IngestStreamWriter

        return IngestStreamWriter(self.options, schema)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from .sink import IngestBatchWriter

        return IngestBatchWriter(self.options, schema)


def register(spark: Any) -> None:
    """Make ``format("ingestwm")`` available in a Spark session."""
    spark.dataSource.register(IngestDataSource)
