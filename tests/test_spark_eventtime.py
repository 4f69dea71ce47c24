"""Event-time helpers on the source's watermark: the shared watermark transcripts, and windows.

A transcript (readergroup/transcript_cases/*.yaml, shared with flink_compat) says what the readers
of a group deliver and what must come out. Here each reader is a stream ``t/r<i>`` read
through the ``ingestwm`` source (pattern ``t/*``), so the source's watermark is the
minimum over the readers that hold segments; a reader that starts idle gets its stream
when it becomes active. A transcript's events up to a watermark step of their reader are
committed at that step as one transaction, at ingestion time ``watermark + 1``, so the
store's tail watermark is exactly the step's watermark and Spark sees no state between
steps; after each step the test waits until Spark has processed everything (its
watermark and the timers it fires included). ``reorder_by_event_time`` must then give
the transcript's event-time watermarks, on-time events (release order), late and pending ones.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Served, ms, run_available_now, served_fixture, settle, spark_fixture  # noqa: F401

from readergroup.format.events import encode_event
from readergroup.transcripts import Transcript, load_transcript, transcript_files
from segmentstore.attributes import AttributeUpdate
from spark_source.demo import run_spark_demo
from spark_source.eventtime import event_time_windows, late_rows, reorder_by_event_time

pytestmark = pytest.mark.slow

TRANSCRIPTS = transcript_files()
_TOUCH = 1 << 40  # a user attribute: updating it is a temporal operation that moves the tail watermark


def _supported(t: Transcript) -> str | None:
    for r in range(t.readers):
        statuses = [s for s in t.steps if s.reader == r and s.kind == "status"]
        first = next((s for s in t.steps if s.reader == r), None)
        lazy = first is not None and first.kind == "status" and first.idle
        if any(s.idle for s in statuses[1 if lazy else 0 :]):
            return f"reader {r} goes idle after it was active (a stream cannot give its segments back)"
    return None


def _spark_ms(iso: str) -> int:
    return round(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.stem for p in TRANSCRIPTS])
def test_transcript_gives_the_same_outputs_as_flink(path: Path, spark: Any, served: Served) -> None:
    t = load_transcript(path)
    reason = _supported(t)
    if reason:
        pytest.skip(f"transcript {t.name}: {reason}")
    c, clock = served.client, served.clock
    clock.set(1)  # type: ignore[attr-defined]
    pending_start = {
        r
        for r in range(t.readers)
        if (first := next((s for s in t.steps if s.reader == r), None)) is not None
        and first.kind == "status"
        and first.idle
    }
    for r in range(t.readers):
        if r not in pending_start:
            c.create_stream(f"t/r{r}", 1)
    rows: list[Any] = []
    df = served.reader(spark, "t/*", startingPosition="earliest", maxEventTimeLag=t.max_event_time_lag)
    mode = "drop" if t.name == "pdp26-prototype-output" else "flag"  # both modes, one transcript each
    q = (
        reorder_by_event_time(df, late=mode)
        .writeStream.foreachBatch(lambda b, _i: rows.extend(b.collect()))
        .trigger(processingTime="50 milliseconds")
        .start()
    )
    txns: dict[int, tuple[Any, int]] = {}

    def publish(r: int, watermark: int | None) -> None:
        stream = f"t/r{r}"
        if r in txns:
            info, newest = txns.pop(r)
            clock.set(max(clock.now(), newest, watermark + 1 if watermark is not None else 0))  # type: ignore[attr-defined]
            c.commit_transaction(stream, list(info.segment_names))
        elif watermark is not None:
            clock.set(max(clock.now(), watermark + 1))  # type: ignore[attr-defined]
            c.update_attributes(c.get_stream(stream).active_segments[0].name, [AttributeUpdate(_TOUCH, 1)])
        settle(q)

    try:
        for step in t.steps:
            if step.kind == "event":
                assert step.event is not None
                if step.reader not in txns:
                    txns[step.reader] = (c.begin_transaction(f"t/r{step.reader}"), 0)
                info, newest = txns[step.reader]
                e = step.event
                c.append(info.segments[0].name, encode_event(e.key, e.payload, e.event_time))
                txns[step.reader] = (info, max(newest, e.ingestion_time))
            elif step.kind == "watermark":
                assert step.watermark is not None
                publish(step.reader, step.watermark)
            elif not step.idle and step.reader in pending_start:
                pending_start.discard(step.reader)
                c.create_stream(f"t/r{step.reader}", 1)
                settle(q)
        for r in list(txns):
            publish(r, None)
        progress = q.recentProgress
        late_count = late_rows(q)
    finally:
        q.stop()
    marks = sorted(
        {_spark_ms(p["eventTime"]["watermark"]) for p in progress if "watermark" in p["eventTime"]}
    )
    assert tuple(m for m in marks if m > 0) == t.expected.watermarks
    released = sorted(
        (r for r in rows if not r.late), key=lambda r: (r.watermark, r.event_time, r.ingestion_time)
    )
    assert tuple((r.routing_key, ms(r.event_time)) for r in released) == t.expected.on_time
    late_rows_out = sorted((r for r in rows if r.late), key=lambda r: (r.ingestion_time, r.stream, r.offset))
    late = tuple((r.routing_key, ms(r.event_time)) for r in late_rows_out)
    assert late == (() if mode == "drop" else t.expected.late)
    assert late_count == len(t.expected.late)  # counted in the observed metrics, dropped or not
    delivered = {(s.event.key, s.event.event_time) for s in t.steps if s.event is not None}
    out = {(r.routing_key, ms(r.event_time)) for r in rows} | set(t.expected.late)
    assert tuple(sorted(delivered - out, key=lambda k: k[1])) == t.expected.pending


def test_windows_per_key_with_late_rows_flagged_and_counted(
    spark: Any, served: Served, tmp_path: Path
) -> None:
    """Sensor C's clock is 30 s behind: with a 10 s lag all its readings are late; A's are windowed."""
    c, clock = served.client, served.clock
    c.create_stream("iot/w", 2)
    for i in range(12):
        clock.advance(5_000)  # type: ignore[attr-defined]
        now = clock.now()
        served.write(
            "iot/w", [("sensor-A", f"{i}".encode(), now - 1_000), ("sensor-C", b"100", now - 30_000)]
        )
    clock.advance(60_000)  # type: ignore[attr-defined]
    served.store.advance_idle_watermarks()
    df = served.reader(
        spark, "iot/w", startingPosition="earliest", maxEventsPerTrigger=8, maxEventTimeLag="10 s"
    )
    df = df.withColumn("value", df["payload"].cast("string").cast("double"))
    rows, progress = run_available_now(
        event_time_windows(df, "20 seconds", value="value"), str(tmp_path / "ck")
    )
    windows = sorted((r for r in rows if not r.late), key=lambda r: (r.key, r.window_start))
    late = [r for r in rows if r.late]
    assert sorted(r.key for r in late) == ["sensor-C"] * 12 and late_rows(progress) == 12
    assert all(ms(r.event_time) <= ms(r.watermark) for r in late)  # type: ignore[operator]
    assert all(r["count"] == 1 and ms(r.window_end) - ms(r.window_start) == 20_000 for r in late)  # type: ignore[operator]
    assert {r.key for r in windows} == {"sensor-A"}
    assert sum(r["count"] for r in windows) == 12 and sum(r.value_sum for r in windows) == sum(range(12))
    assert max(r.value_max for r in windows) == 11 and min(r.value_min for r in windows) == 0
    for r in windows:
        assert ms(r.window_start) % 20_000 == 0 and ms(r.window_end) - ms(r.window_start) == 20_000  # type: ignore[operator]
        assert ms(r.watermark) >= ms(r.window_end) - 1  # type: ignore[operator]  # fired once the watermark got there

    lines: list[str] = []
    result = run_spark_demo(
        served.endpoint, "iot/w", 10_000, lines.append, window_ms=30_000, events_per_batch=6, spark=spark
    )
    assert {x.sensor for x in result.late} == {"sensor-C"} and result.late_count == len(result.late) == 12
    assert sum(w.count for w in result.windows) == 12 and {w.sensor for w in result.windows} == {"sensor-A"}
    assert (
        any("late readings: 12" in line for line in lines)
        and sum("sensor-C" in line and "late by" in line for line in lines) == 6
        and lines[-1] == "  ... and 6 more from sensor-C"
    )
