"""What the Spark benchmarks read, and the checks that they read it right (before timing).

- ``preload``: equal 4,096-frame appends spread evenly over the segments (bench_spark's
  (a), bench_spark_io); ``preload_served``: a default ``EventWriter`` over
  ``RemoteClient``, as users write (bench_spark's (d)).
- ``ceiling_source``: the ceiling (b), a minimal Python streaming source yielding
  prebuilt Arrow batches of the rows ``preload``'s events give (``ceiling_batches``);
  ``check_ceiling`` compares them with what the source reads.
- ``check_delivery``: a stream read through the ``ingestwm`` source with the timed
  options delivers every event once, every column equal to the per-event decoder and
  ``watermark_at`` (over any client: the store in this process or a served one).
- ``check_batch_counts``: each timed micro-batch delivered exactly the events between its
  start and end offsets, and no two overlap (checked after every round, before the next).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from readergroup.format.events import decode_frames, encode_event
from segmentstore.client import RemoteClient, SegmentStoreClient

__all__ = [
    "SEGMENTS",
    "PARTITIONS",
    "PAYLOAD",
    "ARROW_BATCH_ROWS",
    "preload",
    "preload_served",
    "ceiling_source",
    "ceiling_batches",
    "check_ceiling",
    "check_delivery",
    "check_batch_counts",
    "raise_if_failed",
    "retried",
]

_T = TypeVar("_T")

SEGMENTS = 2
PARTITIONS = 2
PAYLOAD = bytes(32)
ARROW_BATCH_ROWS = 65_536
_CHUNK_FRAMES = 4096


def preload(client: SegmentStoreClient, stream: str, events: int) -> None:
    """``events`` frames spread evenly over the stream's segments, appended in chunks of 4096 frames."""
    client.create_stream(stream, SEGMENTS)
    segments = [s.name for s in client.get_stream(stream).active_segments]
    chunk = b"".join(
        encode_event(f"sensor-{i % 64:02d}", PAYLOAD, 1_700_000_000_000 + i) for i in range(_CHUNK_FRAMES)
    )
    frame = len(chunk) // _CHUNK_FRAMES
    per_segment = events // SEGMENTS
    for seg in segments:
        left = per_segment
        while left > 0:
            n = min(left, _CHUNK_FRAMES)
            client.append(seg, chunk if n == _CHUNK_FRAMES else chunk[: frame * n])
            left -= n


def preload_served(endpoint: str, stream: str, events: int) -> dict[str, float]:
    """``events`` written as users write them: a default ``EventWriter`` over ``RemoteClient``, 64 keys.

    The writer batches what is written while an append is in flight, so appends come in
    the sizes its pipeline makes (hundreds per 10^6 events), and keys hash to the
    segments unevenly. Returns the layout: ingestion runs (appends at distinct times)
    per 10^6 events and each segment's MB.
    """
    from readergroup.writing.writer import EventWriter

    with RemoteClient(endpoint, timeout_s=120) as c:
        c.create_stream(stream, SEGMENTS)
        with EventWriter(c, stream) as w:
            for i in range(events):
                w.write_event(f"sensor-{i % 64:02d}", PAYLOAD, 1_700_000_000_000 + i)
        layout: dict[str, float] = {}
        runs = 0
        for n, seg in enumerate(sorted(s.name for s in c.get_stream(stream).active_segments)):
            length = c.get_info(seg).length
            layout[f"segment {n} MB"] = length / 1e6
            pos = 0
            while pos < length:  # runs_of in parts: the store answers at most 65,536 runs at once
                r = c.ingestion_runs(seg, pos, length)
                runs += r.shape[1]
                pos = int(r[0, -1]) + 1
        layout["runs per 10^6 events"] = runs * 1e6 / events
    return layout


def ceiling_source(rows_per_batch: int, stream: str, segments: list[str]) -> type:
    """The ceiling's source: one batch of ``rows_per_batch`` rows per trigger, ``batches`` of them in all."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from spark_source.reading import SPARK_SCHEMA

    class Reader(DataSourceStreamReader):
        def __init__(self, batches: int) -> None:
            self.batches = batches

        def initialOffset(self) -> dict[str, int]:
            return {"i": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"i": min(start["i"] + 1, self.batches)}  # runs dry: stopped idle (_run_batches)

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            n = (end["i"] - start["i"]) * rows_per_batch // PARTITIONS
            parts = [(n, stream, segments[p % len(segments)]) for p in range(PARTITIONS)]
            return [InputPartition(v) for v in parts] if n else []

        def read(self, partition: InputPartition) -> Any:
            n, name, segment = partition.value
            return ceiling_batches(n, name, segment)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ingestwm_bench_ceiling"

        def schema(self) -> str:
            return SPARK_SCHEMA

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader(int(self.options["batches"]))

    return Ceiling


_CEILING: dict[tuple[str, str, int], Any] = {}
"""Each worker process's prebuilt batch per (stream, segment, rows): built once, yielded every batch."""


def ceiling_batches(rows: int, stream: str, segment: str) -> Iterator[Any]:
    """``rows`` rows of the source's schema, as prebuilt batches of 65,536 rows, like (a)'s rows.

    The rows carry what (a) delivers for ``preload``'s events of ``segment``: the same
    stream and segment names, routing keys, payloads and kind, so that both hand the
    JVM the same bytes per row (only the numeric values differ, not their widths).
    The batch is built on first use in each worker and kept: the ceiling does no work
    per micro-batch but yielding.
    """
    import numpy as np
    import pyarrow as pa

    from spark_source.reading import ARROW_SCHEMA, KIND_EVENT_NAME

    n = min(rows, ARROW_BATCH_ROWS)
    key = (stream, segment, n)
    batch = _CEILING.get(key)
    if batch is None:
        ts_type = pa.timestamp("us", tz="UTC")
        i = np.arange(n, dtype=np.int64)
        now_us = 1_700_000_000_000_000
        frame = len(encode_event("sensor-00", PAYLOAD, 0))
        cols = {
            "stream": pa.repeat(pa.scalar(stream), n),
            "segment": pa.repeat(pa.scalar(segment), n),
            "offset": pa.array(i * frame, pa.int64()),
            "routing_key": pa.array([f"sensor-{k % 64:02d}" for k in range(n)], pa.string()),
            "payload": pa.array([PAYLOAD] * n, pa.binary()),
            "event_time": pa.array((1_700_000_000_000 + i % _CHUNK_FRAMES) * 1000, ts_type),
            "kind": pa.repeat(pa.scalar(KIND_EVENT_NAME), n),
        }
        ts = pa.array(np.full(n, now_us, np.int64), ts_type)
        arrays = [cols.get(f.name, ts) for f in ARROW_SCHEMA]
        batch = _CEILING[key] = pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    while rows > 0:
        yield batch if rows >= n else batch.slice(0, rows)
        rows -= n


def check_ceiling(client: SegmentStoreClient, stream: str, segments: list[str]) -> None:
    """(b)'s rows hold what (a) reads from ``segments`` (before timing): same strings and payloads.

    Compared with ``read_range`` over the first rows of each segment: every column but
    the ingestion time and the watermarks (values of the same width) is equal.
    """
    from spark_source.reading import BatchMeta, read_range

    same = ("stream", "segment", "offset", "routing_key", "payload", "event_time", "kind")
    for seg in segments:
        n = min(ARROW_BATCH_ROWS, 10_000)
        ceiling = next(ceiling_batches(n, stream, seg))
        end = int(decode_frames(client.read(seg, 0, 64 * n).data, 0)[0][n - 1].end_offset)
        real = list(read_range(client, stream, seg, 0, end, BatchMeta(0, 0), ahead=0))
        for c in same:
            want = [v for b in real for v in b.column(c).to_pylist()]
            if ceiling.column(c).to_pylist() != want:
                raise AssertionError(f"the ceiling's column {c!r} differs from what (a) reads from {seg!r}")


def check_delivery(
    spark: Any, endpoint: str, client: SegmentStoreClient, stream: str, rows_per_batch: int
) -> None:
    """The source's streaming path delivers every event of ``stream`` once, every column right.

    The timed run's path (``maxEventsPerTrigger``, here a quarter of the stream's events, so
    the check crosses three batch boundaries at every size) with an ``availableNow`` trigger
    into the memory sink; the rows are compared with ``decode_frames`` of each segment and
    ``watermark_at`` per event, read through ``client``: an ``EmbeddedClient`` of the store in
    this process or a ``RemoteClient`` of a served one. ``rows_per_batch`` caps a batch.
    """
    want = []
    for s in client.get_stream(stream).active_segments:
        frames = [f for f in decode_frames(_all_bytes(client, s.name), 0)[0] if f.is_event]
        times = client.watermarks_at(s.name, [f.offset for f in frames])
        for f, w in zip(frames, times.tolist(), strict=True):
            et = None if f.event_time is None else f.event_time * 1000
            want.append((s.name, f.offset, f.routing_key, f.payload, et, (w + 1) * 1000))
    per_batch = max(1, min(rows_per_batch, -(-len(want) // 4)))
    df = (
        spark.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", stream)
        .option("startingPosition", "earliest")
        .option("maxEventsPerTrigger", str(per_batch))
        .load()
        .where("kind = 'event'")
        .selectExpr(
            "segment",
            "offset",
            "routing_key",
            "payload",
            "unix_micros(event_time) as event_us",
            "unix_micros(ingestion_time) as ingestion_us",
        )
    )
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as ckpt:
        q = (
            df.writeStream.format("memory")
            .queryName("ingestwm_bench_check")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        if not q.awaitTermination(600):
            q.stop()
            raise TimeoutError("the delivery check's availableNow query did not end in 600 s")
        raise_if_failed(q)
        got = sorted(
            (r.segment, r.offset, r.routing_key, bytes(r.payload), r.event_us, r.ingestion_us)
            for r in spark.table("ingestwm_bench_check").collect()
        )
        spark.catalog.dropTempView("ingestwm_bench_check")
    if got != sorted(want):
        raise AssertionError(
            f"the source delivered {len(got)} rows of {stream!r}, not its {len(want)} events as written"
        )


def _all_bytes(client: SegmentStoreClient, segment: str) -> bytes:
    """Every byte of ``segment``, in as many reads as the client's replies need."""
    length = client.get_info(segment).length
    parts = []
    pos = 0
    while pos < length:
        data = client.read(segment, pos, length - pos).data
        if not data:
            raise AssertionError(f"segment {segment!r}: no data at offset {pos}, below its length {length}")
        parts.append(data)
        pos += len(data)
    return b"".join(parts)


def check_batch_counts(client: SegmentStoreClient, stream: str, progress: list[dict[str, Any]]) -> int:
    """Each micro-batch in ``progress`` (an ``ingestwm`` query of ``stream``) holds exactly its events.

    ``numInputRows`` must equal the events (writer markers left out) between the batch's
    start and end offsets, segment by segment, counted by decoding those bytes through
    ``client``; and no batch may start a segment before the previous one in ``progress``
    ended it. So every event of the timed ranges came once. Returns the events counted.
    O(bytes of the batches).
    """
    from readergroup.format.frame_batch import decode_events
    from spark_source.fetching import whole_frame_reads

    def positions(offset: Any) -> tuple[dict[str, int], dict[str, int]]:
        obj = json.loads(offset) if isinstance(offset, str) else offset
        s = (obj or {}).get("streams", {}).get(stream, {})
        return dict(s.get("positions", {})), dict(s.get("starts", {}))

    ended: dict[str, int] = {}
    total = 0
    for p in progress:
        src = p["sources"][0]
        begin, _ = positions(src["startOffset"])
        end, starts = positions(src["endOffset"])
        events = 0
        for seg, stop in sorted(end.items()):
            start = begin.get(seg, starts.get(seg, 0))
            if start < ended.get(seg, 0):
                raise AssertionError(f"{stream}: a timed micro-batch read {seg!r} from {start} again")
            for chunk in whole_frame_reads(client, stream, seg, start, stop):
                events += len(decode_events(chunk.data, chunk.base)[0])
            ended[seg] = stop
        if p["numInputRows"] != events:
            raise AssertionError(
                f"{stream}: a timed micro-batch delivered {p['numInputRows']} rows; its offsets hold "
                f"{events} events"
            )
        total += events
    return total


def raise_if_failed(q: Any) -> None:
    """Raise the query's failure (its first line) if it failed."""
    if q.exception() is not None:
        first = (str(q.exception()).strip().splitlines() or [""])[0]
        raise RuntimeError(f"the query {q.name or q.id} failed: {first}")


_NO_CONNECT_BACK = "Python worker failed to connect back"


def retried(query: Callable[[], _T], attempts: int = 5) -> _T:
    """``query()``, run again (``attempts`` in all) if Spark's new Python process did not connect back.

    Spark gives the Python process it starts for a query 10 s to connect back (fixed, not
    a setting); on the shared machine at load averages of 10 to 19 on 2 cores its start
    took longer, three times in a row once, and the query failed before reading anything.
    Any other failure is raised at once, and this one after the last attempt.
    """
    for attempt in range(1, attempts + 1):
        try:
            return query()
        except Exception as e:
            if _NO_CONNECT_BACK not in str(e) or attempt == attempts:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
