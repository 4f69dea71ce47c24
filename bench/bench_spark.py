"""Spark source throughput: rows/s of ``format("ingestwm")`` vs Spark's built-in ``rate`` source.

Both run in one local[2] SparkSession into the ``noop`` sink; the figure of each is
``numInputRows / triggerExecution`` of its measured micro-batches (Spark's
``processedRowsPerSecond``):

- ``ingestwm``: N events (32-byte payloads, 4 segments) preloaded into a store served
  on the loopback, read in one ``availableNow`` micro-batch (after a warm-up query;
  the query's first micro-batch, which carries only the starting watermark, aside):
  executors read through ``RemoteClient``, decode frames and yield Arrow batches.
- ``rate``: ``rowsPerSecond`` high enough that each 1 s trigger carries more rows than
  a batch can process, 2 partitions; the first batches are warm-up.
- ``ceiling``: a Python data source of the same schema whose ``read()`` yields the
  same number of rows as prebuilt Arrow batches (no store, no decoding): the most any
  Python data source gets through PySpark's Arrow hand-over to the JVM.
- ``read path``: the same ranges read by ``read_range`` in this process, one thread:
  what the Python side alone sustains (without Spark's Arrow hand-over to the JVM).

Goal: ``ingestwm`` >= 0.7x ``rate``. What limits it is the ceiling: Spark turns every
Arrow row of a Python source into a JVM row, ~1 µs per row on these cores, while
``rate`` generates rows inside the JVM; the read path itself is several times faster
than the hand-over. Run ``python -m bench.bench_spark [--quick]``; ``run(quick)``
returns the rows.
"""

from __future__ import annotations

import tempfile
from typing import Any

from readergroup.events import encode_event
from segmentstore import SegmentStore, StoreConfig, WallClock
from segmentstore.client import EmbeddedClient
from segmentstore.clock import monotonic_s
from segmentstore.remote import RemoteClient
from segmentstore.server import SegmentStoreServer

from .runner import Row, module_main, row

__all__ = ["run", "main"]

SEGMENTS = 4
PAYLOAD = bytes(32)
_CHUNK_FRAMES = 4096


def _preload(client: EmbeddedClient, stream: str, events: int) -> None:
    """``events`` frames spread over the stream's segments, appended in chunks of 4096 frames."""
    client.create_stream(stream, SEGMENTS)
    segments = [s.name for s in client.get_stream(stream).active_segments]
    chunk = b"".join(
        encode_event(f"sensor-{i % 64:02d}", PAYLOAD, 1_700_000_000_000 + i) for i in range(_CHUNK_FRAMES)
    )
    per_segment = events // SEGMENTS
    for seg in segments:
        left = per_segment
        while left > 0:
            n = min(left, _CHUNK_FRAMES)
            client.append(seg, chunk if n == _CHUNK_FRAMES else chunk[: len(chunk) // _CHUNK_FRAMES * n])
            left -= n


def _rate_of(progress: list[dict[str, Any]], skip: int) -> float:
    measured = [p for p in progress[skip:] if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in measured)
    ms = sum(p["durationMs"]["triggerExecution"] for p in measured)
    return rows / (ms / 1000.0) if ms else 0.0


def _ingestwm(spark: Any, endpoint: str, stream: str) -> tuple[float, int]:
    df = (
        spark.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", stream)
        .option("startingPosition", "earliest")
        .load()
    )
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as ckpt:
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        progress = list(q.recentProgress)
    # batch 0 of a query only carries the starting watermark (one row): not measured
    return _rate_of(progress, 1), sum(p["numInputRows"] for p in progress[1:])


def _rate(spark: Any, rows_per_s: int, batches: int) -> float:
    df = spark.readStream.format("rate").option("rowsPerSecond", rows_per_s).option("numPartitions", 2).load()
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as ckpt:
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="1 second")
            .start()
        )
        deadline = monotonic_s() + 300
        try:
            while len([p for p in q.recentProgress if p["numInputRows"] > 0]) < batches + 2:
                if monotonic_s() > deadline:
                    raise TimeoutError(f"the rate source made fewer than {batches + 2} batches in 300 s")
                q.awaitTermination(0.2)
            progress = list(q.recentProgress)
        finally:
            q.stop()
    return _rate_of([p for p in progress if p["numInputRows"] > 0], 2)


def _ceiling_source(rows: int) -> type:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from spark_source.reading import SPARK_SCHEMA

    class Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"i": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"i": 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return (
                [InputPartition(rows // SEGMENTS) for _ in range(SEGMENTS)] if end["i"] > start["i"] else []
            )

        def read(self, partition: InputPartition) -> Any:
            return _ceiling_batches(int(partition.value))

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ingestwm_bench_ceiling"

        def schema(self) -> str:
            return SPARK_SCHEMA

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader()

    return Ceiling


def _ceiling_batches(rows: int) -> Any:
    """``rows`` rows of the source's schema in prebuilt batches of 64k rows."""
    import pyarrow as pa

    from spark_source.reading import ARROW_SCHEMA

    n = min(rows, 65_536)
    ts = pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC"))
    text = pa.array(["sensor-01"] * n)
    cols = {"offset": pa.array(range(n), pa.int64()), "payload": pa.array([PAYLOAD] * n, pa.binary())}
    arrays = [cols.get(f.name, ts if pa.types.is_timestamp(f.type) else text) for f in ARROW_SCHEMA]
    batch = pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    while rows > 0:
        yield batch if rows >= n else batch.slice(0, rows)
        rows -= n


def _ceiling(spark: Any, rows: int) -> float:
    spark.dataSource.register(_ceiling_source(rows))
    df = spark.readStream.format("ingestwm_bench_ceiling").load()
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as ckpt:
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        return _rate_of(list(q.recentProgress), 0)


def _read_path(endpoint: str, client: EmbeddedClient, stream: str) -> float:
    """Rows/s of ``read_range`` over the whole stream in this process (one thread)."""
    from spark_source.reading import BatchMeta, read_range

    remote = RemoteClient(endpoint)
    try:
        t0 = monotonic_s()
        n = 0
        for s in client.get_stream(stream).active_segments:
            length = client.get_info(s.name).length
            for b in read_range(remote, stream, s.name, 0, length, BatchMeta(0, 0)):
                n += b.num_rows
        return n / (monotonic_s() - t0)
    finally:
        remote.close()


def run(quick: bool = False) -> list[Row]:
    """Measure both sources in one session; rows for ``ingestwm bench``."""
    from spark_source.session import local_session

    events = 400_000 if quick else 2_000_000
    store = SegmentStore(clock=WallClock(), config=StoreConfig(advancer_thread=False))
    server = SegmentStoreServer(store)
    server.start()
    endpoint = f"127.0.0.1:{server.port}"
    try:
        client = EmbeddedClient(store)
        _preload(client, "bench/warm", 40_000)
        _preload(client, "bench/main", events)
        spark = local_session("ingestwm-bench")
        _ingestwm(spark, endpoint, "bench/warm")
        ours, n = _ingestwm(spark, endpoint, "bench/main")
        assert n == events, f"the source delivered {n} rows of {events}"
        ceiling = _ceiling(spark, events)
        rate = _rate(spark, max(2_000_000, int(ceiling * 3)), 2 if quick else 4)
        python = _read_path(endpoint, client, "bench/main")
    finally:
        server.stop()
        store.close()
    return [
        row("spark rate source (noop sink)", rate, "rows/s", "itself", 1.0),
        row(f"spark ingestwm source, {events} events", ours, "rows/s", "rate source", ours / rate),
        row("python data source ceiling (prebuilt Arrow)", ceiling, "rows/s", "rate source", ceiling / rate),
        row("spark ingestwm source vs the ceiling", ours, "rows/s", "python source ceiling", ours / ceiling),
        row(
            "ingestwm read path in Python, 1 thread", python, "rows/s", "spark ingestwm source", python / ours
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.bench_spark [--quick]`` and print the table."""
    module_main(run, argv, __doc__, "fewer events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
