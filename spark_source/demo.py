"""The Spark part of ``ingestwm demo``: per-sensor event-time windows on the source's watermark.

``run_spark_demo`` reads a stream of an ingestwm server from its head with the
``ingestwm`` source (``maxEventTimeLag`` as given) in one ``availableNow`` streaming
query, counts each sensor's (routing key's) readings in tumbling event-time windows
driven by ``withWatermark("event_time_watermark", "0 seconds")``, and prints the
windows and the late readings (event time at or below the event-time watermark when
they arrived); a failed query is a ``SparkSourceError`` with the first line of Spark's
error. It returns both, so the caller can check or report them. The caller
starts the server and writes the workload (``iot-sensors``) first.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import SparkSourceError
from .eventtime import event_time_windows, late_rows

__all__ = ["WindowResult", "LateReading", "SparkDemoResult", "run_spark_demo"]

_LATE_SHOWN = 6  # late readings printed one per line; the rest are counted per sensor


@dataclass(frozen=True, slots=True)
class WindowResult:
    """One closed window of one sensor: ``[start_ms, end_ms)`` and the readings in it."""

    sensor: str
    start_ms: int
    end_ms: int
    count: int


@dataclass(frozen=True, slots=True)
class LateReading:
    """A reading that arrived with its event time at or below the event-time watermark."""

    sensor: str
    event_time_ms: int
    watermark_ms: int
    offset: int


@dataclass(frozen=True, slots=True)
class SparkDemoResult:
    """What the demo's query produced."""

    windows: tuple[WindowResult, ...]
    late: tuple[LateReading, ...]
    late_count: int
    batches: int


def _ms(t: dt.datetime) -> int:
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def _hms(ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000.0, tz=dt.UTC)
    return t.strftime("%H:%M:%S.") + f"{ms % 1000:03d}"


def run_spark_demo(
    endpoint: str,
    stream: str,
    max_event_time_lag_ms: int,
    echo: Callable[[str], None] = print,
    *,
    window_ms: int = 30_000,
    events_per_batch: int = 10,
    spark: Any = None,
) -> SparkDemoResult:
    """Run the windows query over everything in ``stream`` now; print and return windows and late readings.

    Spark judges lateness per micro-batch (against the watermark the previous batch
    left), so the stream is read ``events_per_batch`` events at a time, as a reader
    following the writers would.
    """
    from .session import local_session

    # fast_start: one short query, which a JVM that only warms up with C1 finishes sooner (~40 %)
    spark = spark if spark is not None else local_session("ingestwm-demo", log_level="fatal", fast_start=True)
    df = (
        spark.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", stream)
        .option("startingPosition", "earliest")
        .option("maxEventTimeLag", str(max_event_time_lag_ms))
        .option("maxEventsPerTrigger", str(events_per_batch))
        .load()
    )
    rows: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="ingestwm-demo-") as ckpt:
        query = (
            event_time_windows(df, window_ms, key="routing_key")
            .writeStream.foreachBatch(lambda batch, _id: rows.extend(batch.collect()))
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
        except Exception as e:  # StreamingQueryException: the JVM's stack trace follows its first line
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise SparkSourceError(f"the demo's Spark query on {stream} failed: {first}") from None
        late_count = late_rows(query)
        batches = len(query.recentProgress)
    windows = sorted(
        (
            WindowResult(r.key, _ms(r.window_start), _ms(r.window_end), int(r["count"]))
            for r in rows
            if not r.late
        ),
        key=lambda w: (w.sensor, w.start_ms),
    )
    late = sorted(
        (LateReading(r.key, _ms(r.event_time), _ms(r.watermark), int(r.offset)) for r in rows if r.late),
        key=lambda x: (x.sensor, x.event_time_ms),
    )
    echo(
        f"Spark: {stream} via format('ingestwm'), maxEventTimeLag {max_event_time_lag_ms} ms, "
        f"{window_ms // 1000} s event-time windows per sensor ({batches} micro-batches)"
    )
    echo(f"  {'sensor':<12} {'window (UTC)':<27} {'readings':>8}")
    for w in windows:
        echo(f"  {w.sensor:<12} {_hms(w.start_ms)}-{_hms(w.end_ms)} {w.count:>8}")
    echo(f"  late readings: {late_count} (event time <= event-time watermark on arrival)")
    for x in late[:_LATE_SHOWN]:
        echo(
            f"  {x.sensor:<12} event time {_hms(x.event_time_ms)}  watermark {_hms(x.watermark_ms)}  "
            f"late by {(x.watermark_ms - x.event_time_ms) / 1000:.1f} s"
        )
    if len(late) > _LATE_SHOWN:
        by_sensor = Counter(x.sensor for x in late[_LATE_SHOWN:])
        echo("  ... and " + ", ".join(f"{n} more from {k}" for k, n in sorted(by_sensor.items())))
    return SparkDemoResult(tuple(windows), tuple(late), late_count, batches)
