"""Spark bounded reads and the sink, each beside its plain-Python reference in one session.

- Bounded read: ``spark.read.format("ingestwm")`` of a served stream between its
  earliest and latest cuts (2 segments, 32-byte payloads) into the ``noop`` sink, vs a
  minimal Python batch source of the same schema yielding prebuilt Arrow batches of the
  same rows over the same 2 partitions (the ceiling of a Python data source).
- Sink: ``writeStream.format("ingestwm")`` (at-least-once) of ``rate-micro-batch`` rows
  turned into ``(routing_key, payload, event_time)``, vs ``foreachBatch`` of the same
  rows whose partitions encode the same frames and append them through
  ``RemoteClient.append_many``: the same bytes, the same source and micro-batch sizes.
  Two such references: the plain one (``foreachPartition`` over Rows, ``encode_event``
  per row), and one that frames each Arrow batch in bulk (``mapInArrow`` with
  ``encode_events``) before ``append_many``: what is left is the writer's own work.

Each side runs once as a warm-up (not at ``--tiny``, which only checks that everything
runs); the bounded read is then timed end to end, three times alternating with its ceiling
(the medians are compared), the sinks by Spark's ``processedRowsPerSecond`` over measured
micro-batches after a warm-up one (each micro-batch one ``availableNow`` query on a shared
checkpoint), in two rounds of the three in turn (medians). Before timing, the bounded read
is checked to return every event once and each sink's stream to hold every row it was
given. The machine is shared and small: compare the ratios of one run, not figures across
runs. Run ``python -m bench.perf.bench_spark_io [--quick | --tiny]``.
"""

from __future__ import annotations

import statistics
import zlib
from collections.abc import Iterator
from typing import Any

from segmentstore import SegmentStore, StoreConfig, WallClock
from segmentstore.client import EmbeddedClient
from segmentstore.clock import monotonic_s
from segmentstore.net.server import SegmentStoreServer

from .bench_spark import available_now_batches
from .spark_data import PARTITIONS, ceiling_batches, check_ceiling, preload
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "SLOW"]

SLOW = True  # minutes: its pytest-benchmark run needs --bench-slow (bench.perf.suite)

_BOUNDED_RUNS = 3
_SINK_ROUNDS = 2


def _ceiling_reader(rows: int, stream: str, segments: list[str]) -> type:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from spark_source.reading import SPARK_SCHEMA

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [
                InputPartition((rows // PARTITIONS, stream, segments[p % len(segments)]))
                for p in range(PARTITIONS)
            ]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            n, name, segment = partition.value
            return ceiling_batches(n, name, segment)

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ingestwm_bench_batch_ceiling"

        def schema(self) -> str:
            return SPARK_SCHEMA

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    return Ceiling


def _timed_noop(df: Any) -> float:
    t0 = monotonic_s()
    df.write.format("noop").mode("overwrite").save()
    return monotonic_s() - t0


def _rows_df(spark: Any, rows_per_batch: int) -> Any:
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", PARTITIONS)
        .load()
        .selectExpr(
            "concat('sensor-', lpad(cast(value % 64 as string), 2, '0')) as routing_key",
            "unhex(repeat('00', 32)) as payload",
            "timestamp as event_time",
        )
    )


def _append_many_partition(endpoint: str, segments: list[str]) -> Any:
    """A ``foreachPartition`` function: encode each row's frame, ``append_many`` per segment."""

    def write(rows: Iterator[Any]) -> None:
        from readergroup.format.events import encode_event
        from segmentstore.client import RemoteClient

        by_segment: dict[str, list[bytes]] = {s: [] for s in segments}
        for r in rows:
            seg = segments[zlib.crc32(r.routing_key.encode()) % len(segments)]
            by_segment[seg].append(
                encode_event(r.routing_key, bytes(r.payload), int(r.event_time.timestamp() * 1000))
            )
        with RemoteClient(endpoint) as client:
            for seg, frames in by_segment.items():
                if frames:
                    client.append_many(seg, frames)

    return write


def _append_many_arrow(endpoint: str, segments: list[str]) -> Any:
    """A ``mapInArrow`` function: frame each Arrow batch in bulk, ``append_many`` per segment."""

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from readergroup.format.frame_batch import encode_events
        from segmentstore.client import RemoteClient

        n = 0
        with RemoteClient(endpoint) as client:
            for b in batches:
                keys = b.column("routing_key")
                micros = b.column("event_time").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
                enc = encode_events(keys, b.column("payload"), pc.divide(micros, 1000))
                frames = enc.frames()
                crc = np.array([zlib.crc32(k.encode()) % len(segments) for k in keys.unique().to_pylist()])
                seg_of = crc[pc.index_in(keys, keys.unique()).to_numpy()]
                for j, seg in enumerate(segments):
                    picked = [frames[i] for i in np.flatnonzero(seg_of == j).tolist()]
                    if picked:
                        client.append_many(seg, picked)
                n += len(frames)
        yield pa.RecordBatch.from_pydict({"n": [n]})

    return write


def _sink_batches(df: Any, start: Any, rows_per_batch: int, batches: int, warm: int) -> list[dict[str, Any]]:
    """``warm`` warm-up micro-batches (0 or 1) and ``batches`` measured ones, each one ``availableNow``
    query.

    ``rate-micro-batch`` never runs dry: a running query would be stopped mid-batch.
    """

    def one(ckpt: str) -> Any:
        return start(df.writeStream.option("checkpointLocation", ckpt).trigger(availableNow=True))

    progress = available_now_batches(one, batches + warm)
    return [p for p in progress if p["numInputRows"] >= rows_per_batch][warm : warm + batches]


def _rate(progress: list[dict[str, Any]]) -> float:
    ms = sum(p["durationMs"]["triggerExecution"] for p in progress)
    return float(sum(p["numInputRows"] for p in progress) / (ms / 1000.0))


def _events_in(client: EmbeddedClient, stream: str) -> int:
    from readergroup.format.events import decode_columns

    n = 0
    for s in client.get_stream(stream).active_segments:
        info = client.get_info(s.name)
        cols, _ = decode_columns(client.read(s.name, 0, info.length).data, 0, events_only=True)
        n += len(cols["offset"])
    return n


def run(size: Size = "full") -> list[Row]:
    """Bounded read vs its ceiling and the sink vs ``append_many``, in one session."""
    from spark_source.session import local_session

    rows = sized(size, 40_000, 400_000, 2_000_000)
    sink_rows = sized(size, 10_000, 100_000, 500_000)
    batches = sized(size, 1, 2, 3)
    bounded_runs, sink_rounds = (
        sized(size, 1, _BOUNDED_RUNS, _BOUNDED_RUNS),
        sized(size, 1, _SINK_ROUNDS, _SINK_ROUNDS),
    )
    warm = 0 if size == "tiny" else 1  # a tiny run checks that everything runs, its figures are noise
    store = SegmentStore(clock=WallClock(), config=StoreConfig(advancer_thread=False))
    server = SegmentStoreServer(store)
    server.start()
    endpoint = f"127.0.0.1:{server.port}"
    try:
        client = EmbeddedClient(store)
        preload(client, "bench/bounded", rows)
        # --tiny is a smoke run: a JVM that warms up with C1 only starts sooner; figures need C2
        spark = local_session("ingestwm-bench", log_level="fatal", fast_start=size == "tiny")
        got = (
            spark.read.format("ingestwm")
            .option("endpoint", endpoint)
            .option("stream", "bench/bounded")
            .load()
            .where("kind = 'event'")
            .count()
        )
        if got != rows:
            raise AssertionError(f"the bounded read returned {got} events of {rows}")
        ours_df = spark.read.format("ingestwm").option("endpoint", endpoint).option("stream", "bench/bounded")
        segments = [seg.name for seg in client.get_stream("bench/bounded").active_segments]
        check_ceiling(client, "bench/bounded", segments)
        spark.dataSource.register(_ceiling_reader(rows, "bench/bounded", segments))
        ceiling_df = spark.read.format("ingestwm_bench_batch_ceiling")
        distinct = ours_df.load().where("kind = 'event'").select("segment", "offset").distinct().count()
        if distinct != rows:
            raise AssertionError(f"the bounded read returned {distinct} distinct events of {rows}")
        for _ in range(warm):
            _timed_noop(ours_df.load())
            _timed_noop(ceiling_df.load())
        ours_runs, ceiling_runs = [], []
        for _ in range(bounded_runs):  # alternated, so that load from elsewhere hits both alike
            ours_runs.append(_timed_noop(ours_df.load()))
            ceiling_runs.append(_timed_noop(ceiling_df.load()))
        ours_s, ceiling_s = statistics.median(ours_runs), statistics.median(ceiling_runs)

        for name in ("bench/sink", "bench/append_many", "bench/append_many_arrow"):
            client.create_stream(name, PARTITIONS)
        segments = [s.name for s in client.get_stream("bench/append_many").active_segments]
        arrow_segments = [s.name for s in client.get_stream("bench/append_many_arrow").active_segments]
        sinks = {
            "ours": lambda w: w.format("ingestwm").options(endpoint=endpoint, stream="bench/sink").start(),
            "plain": lambda w: w.foreachBatch(
                lambda bdf, _id: bdf.foreachPartition(_append_many_partition(endpoint, segments))
            ).start(),
            "bulk": lambda w: w.foreachBatch(
                lambda bdf, _id: bdf.mapInArrow(
                    _append_many_arrow(endpoint, arrow_segments), "n long"
                ).collect()
            ).start(),
        }
        sink_rates: dict[str, list[float]] = {k: [] for k in sinks}
        for _ in range(sink_rounds):  # the three in turn, so that load from elsewhere hits all alike
            for name, start in sinks.items():
                sink_rates[name].append(
                    _rate(_sink_batches(_rows_df(spark, sink_rows), start, sink_rows, batches, warm))
                )
        for name in ("bench/sink", "bench/append_many", "bench/append_many_arrow"):
            if _events_in(client, name) < sink_rows * (batches + warm) * sink_rounds:
                raise AssertionError(f"stream {name} holds fewer events than the batches it was given")
    finally:
        server.stop()
        store.close()

    ours, ceiling = rows / ours_s, rows / ceiling_s
    s_ours, s_plain, s_bulk = (statistics.median(sink_rates[k]) for k in ("ours", "plain", "bulk"))
    return [
        row(f"bounded read, python ceiling, {rows:,} rows", ceiling, "rows/s", "itself", 1.0),
        row(f"bounded read, ingestwm, {rows:,} rows", ours, "rows/s", "python ceiling", ours / ceiling),
        row(f"sink, foreachBatch + append_many, {sink_rows:,} rows/batch", s_plain, "rows/s", "itself", 1.0),
        row(
            f"sink, format('ingestwm'), {sink_rows:,} rows/batch",
            s_ours,
            "rows/s",
            "foreachBatch + append_many",
            s_ours / s_plain,
        ),
        row(
            f"sink, foreachBatch + bulk frames + append_many, {sink_rows:,} rows/batch",
            s_bulk,
            "rows/s",
            "foreachBatch + append_many",
            s_bulk / s_plain,
        ),
        row(
            f"sink, format('ingestwm') vs bulk frames + append_many, {sink_rows:,} rows/batch",
            s_ours,
            "rows/s",
            "bulk frames + append_many",
            s_ours / s_bulk,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_spark_io [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "fewer rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
