"""The Spark source over wide streams: the same events in 4, 256 and 2,048 segments (issue 39).

Pravega's auto-scaling makes streams of thousands of segments ordinary. A served store
(``ingestwm serve`` in its own process) holds one stream per width, each with the same
20,000 events (``--tiny``: 2,000 in 4 and 16 segments) written by a default
``EventWriter`` over ``RemoteClient``, keys spread over all segments. Measured in one
``local[2]`` session, for each width:

- **batch read**: ``spark.read.format("ingestwm")...load().count()`` from earliest to
  latest, wall time, the median of three reads after one unmeasured; with the default
  packing (``maxPartitionBytes``) and, beside it, one input partition per segment range
  (``maxPartitionBytes=1``: how the source partitioned before), with the tasks each ran;
- **streaming query**: ``readStream`` from earliest into ``noop`` with a 500 ms trigger
  for ``_STREAM_S`` seconds (``emitWatermarkRows``: every trigger whose watermark moved
  is a micro-batch); the median of ``durationMs.latestOffset`` (the driver's planning of
  a micro-batch: one ``segment_states`` call) and of ``triggerExecution``, and the
  micro-batches completed.

Goals (issue 39): the 2,048-segment batch read within 3x of the 4-segment one, and
micro-batch planning at most 100 ms at 2,048 segments. The machine is shared and
small: compare the rows of one run, and say the load beside them.
Run ``python -m bench.perf.bench_spark_wide [--quick | --tiny]`` (quick: one read each).
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import tempfile
from typing import Any

from segmentstore.client import RemoteClient
from segmentstore.clock import monotonic_s

from .serving import serve_in_process
from .spark_data import raise_if_failed, retried
from .suite import Row, Size, module_main, row, sized

__all__ = ["run", "main", "SLOW", "BATCH_GOAL", "PLANNING_GOAL_MS"]

SLOW = True  # minutes: its pytest-benchmark run needs --bench-slow (bench.perf.suite)

BATCH_GOAL = 3.0
"""The widest stream's batch read within this factor of the 4-segment one's."""
PLANNING_GOAL_MS = 100.0
"""Micro-batch planning (``latestOffset``) at 2,048 segments, at most."""
_STREAM_S = 12.0
_TRIGGER = "500 milliseconds"


def _write(endpoint: str, stream: str, segments: int, events: int) -> int:
    """``events`` through a default ``EventWriter``, keys over every segment; the stream's bytes."""
    from readergroup.writing.writer import EventWriter

    with RemoteClient(endpoint, timeout_s=120) as c:
        c.create_stream(stream, segments)
        with EventWriter(c, stream) as w:
            for i in range(events):
                w.write_event(f"key-{i % 8192}", b"p" * 32, 1_700_000_000_000 + i)
        return sum(c.get_info(s.name).length for s in c.get_stream(stream).active_segments)


def _reader(spark: Any, endpoint: str, stream: str, **extra: str) -> Any:
    r = spark.read.format("ingestwm").option("endpoint", endpoint).option("stream", stream)
    for k, v in extra.items():
        r = r.option(k, v)
    return r.load()


def _batch_read(spark: Any, endpoint: str, stream: str, reads: int, **extra: str) -> tuple[float, int, int]:
    """(median wall s of ``count()``, the count, input partitions) over ``reads`` reads after one."""
    times = []
    count = 0
    for i in range(reads + 1):
        start = monotonic_s()
        count = retried(lambda: _reader(spark, endpoint, stream, **extra).count())
        if i:
            times.append(monotonic_s() - start)
    tasks = retried(lambda: _reader(spark, endpoint, stream, **extra).rdd.getNumPartitions())
    return statistics.median(times), count, tasks


def _streaming(spark: Any, endpoint: str, stream: str, seconds: float) -> tuple[float, float, int, int]:
    """(median latestOffset ms, median triggerExecution ms, micro-batches, rows) of a running query."""
    df = (
        spark.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", stream)
        .option("startingPosition", "earliest")
        .load()
    )
    with tempfile.TemporaryDirectory(prefix="bench-spark-wide-") as ckpt:
        q = df.writeStream.format("noop").option("checkpointLocation", ckpt).trigger(processingTime=_TRIGGER)
        query = q.start()
        try:
            deadline = monotonic_s() + seconds
            while monotonic_s() < deadline:
                raise_if_failed(query)
                query.awaitTermination(0.25)
            progress = [p for p in query.recentProgress if "latestOffset" in p["durationMs"]]
        finally:
            query.stop()
    batches = [p for p in progress if p.get("batchId") is not None and "addBatch" in p["durationMs"]]
    planning = [p["durationMs"]["latestOffset"] for p in progress]
    trigger = [p["durationMs"]["triggerExecution"] for p in batches] or [0]
    rows = sum(p["numInputRows"] for p in batches)
    return float(statistics.median(planning or [0])), float(statistics.median(trigger)), len(batches), rows


def run(size: Size = "full") -> list[Row]:
    """Batch reads and streaming queries over each width, one session; rows for ``ingestwm bench``."""
    from spark_source.session import local_session

    widths = sized(size, (4, 16), (4, 256, 2048), (4, 256, 2048))
    events = sized(size, 2_000, 20_000, 20_000)
    reads = sized(size, 1, 1, 3)
    stream_s = sized(size, 2.5, _STREAM_S, _STREAM_S)
    serve_process, port = serve_in_process()
    endpoint = f"127.0.0.1:{port}"
    out: list[Row] = []
    try:
        streams = {}
        for n in widths:
            streams[n] = f"wide/n{n}"
            nbytes = _write(endpoint, streams[n], n, events)
            out.append(row(f"{n} segments: {events:,} events written", nbytes / 1e6, "MB"))
        spark = local_session("ingestwm-bench-wide", log_level="fatal", fast_start=size == "tiny")
        batch: dict[int, float] = {}
        for n in widths:
            s, count, tasks = _batch_read(spark, endpoint, streams[n], reads)
            if count != events:
                raise RuntimeError(f"the batch read of {streams[n]} counted {count} rows, not {events}")
            batch[n] = s
            out.append(
                row(f"batch read, {n} segments ({tasks} tasks)", s * 1000, "ms", "4 segments", s / batch[4])
            )
            s1, _, tasks1 = _batch_read(spark, endpoint, streams[n], 1, maxPartitionBytes="1")
            out.append(
                row(
                    f"batch read, {n} segments, a task per segment ({tasks1} tasks)",
                    s1 * 1000,
                    "ms",
                    "packed",
                    s1 / s,
                )
            )
        widest = widths[-1]
        ratio = batch[widest] / batch[4]
        verdict = "meets" if ratio <= BATCH_GOAL else "MISSES"
        out.append(
            row(f"batch read {widest} / 4 segments: {verdict} the goal (<= {BATCH_GOAL:g}x)", ratio, "x")
        )
        for n in widths:
            plan_ms, trig_ms, batches, rows = retried(
                functools.partial(_streaming, spark, endpoint, streams[n], stream_s)
            )
            out.append(row(f"streaming, {n} segments: planning (latestOffset), median", plan_ms, "ms"))
            out.append(row(f"streaming, {n} segments: micro-batch (triggerExecution), median", trig_ms, "ms"))
            out.append(
                row(f"streaming, {n} segments: micro-batches in {stream_s:g} s ({rows:,} rows)", batches, "")
            )
            if n == widest:
                verdict = "meets" if plan_ms <= PLANNING_GOAL_MS else "MISSES"
                out.append(
                    row(
                        f"planning at {n} segments: {verdict} the goal (<= {PLANNING_GOAL_MS:g} ms)",
                        plan_ms,
                        "ms",
                    )
                )
    finally:
        serve_process.terminate()
        try:
            serve_process.wait(60)
        except subprocess.TimeoutExpired:
            serve_process.kill()
            serve_process.wait()
    return out


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m bench.perf.bench_spark_wide [--quick | --tiny]`` and print the table."""
    module_main(run, argv, __doc__, "one measured batch read per width instead of three")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
