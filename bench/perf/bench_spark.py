"""Spark source throughput at equal rows per micro-batch, measured side by side in one session.

Three sources run in one local[2] SparkSession into the ``noop`` sink, each for several
micro-batches of the same number of rows (10^6; ``--quick`` uses 2 * 10^5 and says so)
over 2 partitions, after one warm-up micro-batch. The figure of each is
``numInputRows / triggerExecution`` summed over its measured micro-batches (Spark's
``processedRowsPerSecond``):

- (a) ``ingestwm``: ``format("ingestwm")`` reading a store served on the loopback
  (2 segments, 32-byte payloads, ``maxEventsPerTrigger`` = rows per batch): the
  driver plans frame-exact ranges, executors read them through ``RemoteClient``,
  decode frames and yield Arrow batches.
- (b) ``ceiling``: a minimal Python streaming source of the same 10-column schema whose
  ``read()`` yields prebuilt Arrow batches of 65,536 rows: no store, no decoding. The
  most any Python data source gets through PySpark's Arrow hand-over here.
- (c) ``rate-micro-batch`` with the same ``rowsPerBatch``: rows generated in the JVM,
  the reference for Spark itself.

It prints rows/s and the ratios (a)/(b) and (b)/(c), and where the time of (a) goes:
driver planning (Spark's ``latestOffset`` + ``queryPlanning`` per micro-batch) and,
measured on one thread in this process over the same ranges, fetching the bytes,
decoding the frames and building Arrow. Before timing, (a) is checked to deliver every
preloaded event exactly once. Run ``python -m bench.perf.bench_spark [--quick | --tiny]``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from readergroup.events import decode_columns, encode_event
from segmentstore import SegmentStore, StoreConfig, WallClock
from segmentstore.client import EmbeddedClient, RemoteClient
from segmentstore.clock import monotonic_s
from segmentstore.net.server import SegmentStoreServer

from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "preload", "ceiling_batches", "SEGMENTS", "PARTITIONS", "SLOW"]

SLOW = True  # minutes: its pytest-benchmark run needs --bench-slow (bench.perf.suite)

SEGMENTS = 2
PARTITIONS = 2
PAYLOAD = bytes(32)
ARROW_BATCH_ROWS = 65_536
_CHUNK_FRAMES = 4096


def preload(client: EmbeddedClient, stream: str, events: int) -> None:
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


def _measured(progress: list[dict[str, Any]], rows_per_batch: int) -> list[dict[str, Any]]:
    """The full micro-batches (at least half the target rows), the first one (warm-up) left out."""
    full = [p for p in progress if p["numInputRows"] >= rows_per_batch // 2]
    return full[1:]


def _rate_of(measured: list[dict[str, Any]]) -> float:
    rows = sum(p["numInputRows"] for p in measured)
    ms = sum(p["durationMs"]["triggerExecution"] for p in measured)
    return rows / (ms / 1000.0) if ms else 0.0


def _run_batches(df: Any, rows_per_batch: int, batches: int) -> list[dict[str, Any]]:
    """Run ``df`` into ``noop`` until ``batches`` full micro-batches after the warm-up; their progress."""
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as ckpt:
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="0 seconds")
            .start()
        )
        deadline = monotonic_s() + 600
        try:
            while len(_measured(list(q.recentProgress), rows_per_batch)) < batches:
                if q.exception() is not None:
                    raise RuntimeError(f"the query failed: {q.exception()}")
                if monotonic_s() > deadline:
                    raise TimeoutError(f"fewer than {batches} full micro-batches in 600 s")
                q.awaitTermination(0.1)
            return _measured(list(q.recentProgress), rows_per_batch)[:batches]
        finally:
            q.stop()


def _ingestwm(spark: Any, endpoint: str, stream: str, rows_per_batch: int, batches: int) -> Any:
    df = (
        spark.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", stream)
        .option("startingPosition", "earliest")
        .option("maxEventsPerTrigger", str(rows_per_batch))
        .load()
    )
    return _run_batches(df, rows_per_batch, batches)


def _rate_micro_batch(spark: Any, rows_per_batch: int, batches: int) -> Any:
    df = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", PARTITIONS)
        .load()
    )
    return _run_batches(df, rows_per_batch, batches)


def _ceiling_source(rows_per_batch: int) -> type:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from spark_source.reading import SPARK_SCHEMA

    class Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"i": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"i": start["i"] + 1}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            n = (end["i"] - start["i"]) * rows_per_batch // PARTITIONS
            return [InputPartition(n) for _ in range(PARTITIONS)] if n else []

        def read(self, partition: InputPartition) -> Any:
            return ceiling_batches(int(partition.value))

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ingestwm_bench_ceiling"

        def schema(self) -> str:
            return SPARK_SCHEMA

        def streamReader(self, schema: Any) -> DataSourceStreamReader:
            return Reader()

    return Ceiling


def ceiling_batches(rows: int) -> Iterator[Any]:
    """``rows`` rows of the source's schema, as prebuilt batches of 65,536 rows."""
    import pyarrow as pa

    from spark_source.reading import ARROW_SCHEMA

    n = min(rows, ARROW_BATCH_ROWS)
    ts = pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC"))
    text = pa.array(["sensor-01"] * n)
    cols = {"offset": pa.array(range(n), pa.int64()), "payload": pa.array([PAYLOAD] * n, pa.binary())}
    arrays = [cols.get(f.name, ts if pa.types.is_timestamp(f.type) else text) for f in ARROW_SCHEMA]
    batch = pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    while rows > 0:
        yield batch if rows >= n else batch.slice(0, rows)
        rows -= n


def _ceiling(spark: Any, rows_per_batch: int, batches: int) -> Any:
    spark.dataSource.register(_ceiling_source(rows_per_batch))
    return _run_batches(spark.readStream.format("ingestwm_bench_ceiling").load(), rows_per_batch, batches)


def _read_split(endpoint: str, client: EmbeddedClient, stream: str) -> dict[str, float]:
    """Seconds per row of (a)'s executor work, phase by phase, on one thread over the whole stream.

    The phases are those of ``spark_source.reading.read_range``: ``client.read`` of 4 MiB
    chunks (fetch), ``decode_columns`` (decode) and the rest of the Arrow batch (arrow:
    ingestion times and columns), measured by running ``read_range`` with its two
    calls wrapped.
    """
    import spark_source.reading as reading

    spent = {"fetch": 0.0, "decode": 0.0}

    def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = monotonic_s()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += monotonic_s() - t0

        return call

    remote = RemoteClient(endpoint)
    setattr(reading, "decode_columns", timed("decode", decode_columns))  # noqa: B010
    try:
        remote.read = timed("fetch", remote.read)  # type: ignore[method-assign]
        rows = 0
        t0 = monotonic_s()
        for s in client.get_stream(stream).active_segments:
            length = client.get_info(s.name).length
            for b in reading.read_range(remote, stream, s.name, 0, length, reading.BatchMeta(0, 0)):
                rows += b.num_rows
        total = monotonic_s() - t0
    finally:
        setattr(reading, "decode_columns", decode_columns)  # noqa: B010
        remote.close()
    arrow = total - spent["fetch"] - spent["decode"]
    return {
        "rows": rows,
        "fetch": spent["fetch"] / rows,
        "decode": spent["decode"] / rows,
        "arrow": arrow / rows,
    }


def run(size: Size = "full") -> list[Row]:
    """Measure (a), (b) and (c) in one session at equal rows per micro-batch; rows for ``ingestwm bench``."""
    from spark_source.session import local_session

    rows_per_batch = sized(size, 20_000, 200_000, 1_000_000)
    batches = sized(size, 1, 2, 4)
    events = rows_per_batch * (batches + 2)  # a warm-up batch, the measured ones, and slack
    note = f" (--{size}; the goal is stated at 1,000,000)" if size != "full" else ""
    what = f"{rows_per_batch:,} rows/batch{note}"
    store = SegmentStore(clock=WallClock(), config=StoreConfig(advancer_thread=False))
    server = SegmentStoreServer(store)
    server.start()
    endpoint = f"127.0.0.1:{server.port}"
    try:
        client = EmbeddedClient(store)
        preload(client, "bench/check", 20_000)
        preload(client, "bench/main", events)
        spark = local_session("ingestwm-bench")
        _check_delivery(spark, endpoint, "bench/check", 20_000)
        ours = _ingestwm(spark, endpoint, "bench/main", rows_per_batch, batches)
        ceiling = _ceiling(spark, rows_per_batch, batches)
        rate = _rate_micro_batch(spark, rows_per_batch, batches)
        split = _read_split(endpoint, client, "bench/main")
    finally:
        server.stop()
        store.close()
    a, b, c = _rate_of(ours), _rate_of(ceiling), _rate_of(rate)
    planning_ms = sum(
        p["durationMs"].get("latestOffset", 0) + p["durationMs"].get("queryPlanning", 0) for p in ours
    ) / len(ours)
    per_row_us = {k: split[k] * 1e6 for k in ("fetch", "decode", "arrow")}
    return [
        row(f"(c) spark rate-micro-batch, {what}", c, "rows/s", "itself", 1.0),
        row(f"(b) python ceiling (prebuilt Arrow), {what}", b, "rows/s", "(c) rate-micro-batch", b / c),
        row(f"(a) spark ingestwm source, {what}", a, "rows/s", "(b) python source ceiling", a / b),
        row("(a) driver planning per micro-batch", planning_ms, "ms"),
        row("(a) fetch bytes, 1 thread", per_row_us["fetch"], "us/row"),
        row("(a) decode frames, 1 thread", per_row_us["decode"], "us/row"),
        row("(a) build Arrow, 1 thread", per_row_us["arrow"], "us/row"),
        row(
            "(a) read path in Python, 1 thread",
            1e6 / sum(per_row_us.values()),
            "rows/s",
            "(a) spark ingestwm source",
            1e6 / sum(per_row_us.values()) / a,
        ),
    ]


def _check_delivery(spark: Any, endpoint: str, stream: str, events: int) -> None:
    """(a) delivers every event of ``stream`` exactly once (checked before anything is timed)."""
    df = (
        spark.read.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", stream)
        .load()
        .where("kind = 'event'")
    )
    got = df.groupBy().agg({"offset": "count"}).collect()[0][0]
    distinct = df.select("segment", "offset").distinct().count()
    if got != events or distinct != events:
        raise AssertionError(f"the source delivered {got} rows ({distinct} distinct) of {events}")


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_spark [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "2 * 10^5 rows per micro-batch instead of 10^6")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
