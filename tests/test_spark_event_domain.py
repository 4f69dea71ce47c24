"""The Spark source with ``timeDomain = event``: offsets carry the writers' asserted watermarks.

Planner-level (no Spark): the offset's watermark is the producer watermark at the
micro-batch's end positions, never decreasing, and with truthful writers no event of a
micro-batch is at or below the watermark of the micro-batch before it — across splits
and merges, with admission limits, on a clock that ticks at every reading. Then one
Spark query (slow): the sensor whose clock is 30 s behind, all late under ingestion
time with a 10 s lag, is all on time with its own watermarks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from spark_fixtures import Served, ms, run_available_now, served_fixture, spark_fixture  # noqa: F401

from readergroup.format.events import NO_EVENT_TIME
from readergroup.writing.writer import EventWriter
from segmentstore import SegmentStore, TickingClock
from segmentstore.client import EmbeddedClient
from spark_source.errors import InvalidOptionError
from spark_source.eventtime import event_time_windows, late_rows
from spark_source.offsets import SourceOffset
from spark_source.options import parse_source_options
from spark_source.planner import NO_WATERMARK, READ_ALL, Limit, Planner
from spark_source.reading import BatchMeta, read_range
from spark_source.source import _meta

S = "s/et"
BASE = {"endpoint": "127.0.0.1:1", "stream": S, "startingPosition": "earliest", "timeDomain": "event"}


def _planner(c: EmbeddedClient, **extra: str) -> Planner:
    return Planner(c, parse_source_options({**BASE, **extra}, streaming=True))


def _batch(
    p: Planner, c: EmbeddedClient, start: SourceOffset, limit: Limit, target: SourceOffset | None = None
) -> tuple[SourceOffset, list[int]]:
    """The next micro-batch: its end offset and its events' event times."""
    end = p.next_offset(start, limit, target)
    ets: list[int] = []
    for r in p.ranges(start, end):
        for b in read_range(c, r.stream, r.segment, r.begin, r.end, BatchMeta(end.watermark, 0)):
            ets += [t // 1000 if t is not None else NO_EVENT_TIME for t in _event_times_us(b)]
    return end, ets


def _event_times_us(b: object) -> list[int | None]:
    import pyarrow as pa

    assert isinstance(b, pa.RecordBatch)
    col = b.column(b.schema.get_field_index("event_time")).cast(pa.int64())
    out: list[int | None] = col.to_pylist()
    return out


def test_options_name_the_domain_and_refuse_a_lag_with_event_time() -> None:
    with pytest.raises(InvalidOptionError, match="timeDomain must be 'ingestion' or 'event', got 'wall'"):
        parse_source_options({**BASE, "timeDomain": "wall"}, streaming=True)
    with pytest.raises(InvalidOptionError, match="maxEventTimeLag applies to timeDomain 'ingestion'"):
        parse_source_options({**BASE, "maxEventTimeLag": "5 seconds"}, streaming=True)
    opts = parse_source_options({**BASE, "timeDomain": " Event "}, streaming=True)
    assert opts.time_domain == "event" and _meta(opts, 1_000).event_time_watermark_ms == 1_000
    lagged = {**BASE, "timeDomain": "ingestion", "maxEventTimeLag": "5s"}
    ingest = parse_source_options(lagged, streaming=True)
    assert _meta(ingest, 10_000).event_time_watermark_ms == 5_000


def test_the_offset_watermark_is_the_slowest_active_writer() -> None:
    clock = TickingClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_stream(S, 2)
        p = _planner(c)
        start = p.initial_offset()
        a, b = EventWriter(c, S, writer_id=1), EventWriter(c, S, writer_id=2)
        a.write_event("k", b"before", event_time=5).result(10)  # before any assertion: no watermark yet
        end, ets = _batch(p, c, start, READ_ALL)
        assert end.watermark == NO_WATERMARK and ets == [5]
        a.note_time(1_000)
        b.note_time(400)
        end, _ = _batch(p, c, end, READ_ALL)  # markers only: a batch for the watermark alone
        assert end.watermark == 399
        b.mark_idle()
        end, _ = _batch(p, c, end, READ_ALL)
        assert end.watermark == 999  # b left the active set: a alone
        b.note_time(300)  # re-joins below: the offset's watermark never goes back
        end2, _ = _batch(p, c, end, READ_ALL)
        assert end2.watermark == 999
        seg = c.get_stream(S).active_segments[0]
        c.scale_stream(
            S,
            [seg.name],
            [
                (seg.key_low, (seg.key_low + seg.key_high) / 2),
                ((seg.key_low + seg.key_high) / 2, seg.key_high),
            ],
        )
        a.note_time(2_000)
        b.note_time(2_500)
        end3, _ = _batch(p, c, end2, READ_ALL)
        assert end3.watermark == 1_999  # the successors inherit, the new markers count


def test_a_bounded_run_takes_the_targets_watermark_only_at_its_end() -> None:
    """availableNow / batch reads: the target's watermark bounds the run, it is not its start."""
    clock = TickingClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_stream(S, 2)
        w = EventWriter(c, S, writer_id=1)
        w.note_time(100)
        for t in range(100, 130):
            w.write_event(f"k{t % 5}", b"e", event_time=t)
            w.note_time(t)
        w.note_time(10_000)
        p = _planner(c)
        target = p.target_offset()
        assert target.watermark == 9_999
        off, late, n = p.initial_offset(), 0, 0
        for _ in range(100):
            end, ets = _batch(p, c, off, Limit(max_events=4), target)
            if end is off:
                break
            late += sum(t <= off.watermark for t in ets)
            n += len(ets)
            off = end
        assert (n, late, off.watermark) == (30, 0, 9_999)


_ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["note", "write", "write", "idle"]), st.integers(0, 2), st.integers(0, 30)),
        st.tuples(st.sampled_from(["split", "merge", "batch", "batch"]), st.just(0), st.integers(0, 7)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops, st.sampled_from([None, 1, 3]))
@example(  # an idle writer re-joins above the watermark its leaving let through, not the one before
    ops=[("note", 1, 1), ("note", 2, 1), ("idle", 0, 0), ("batch", 0, 0), ("write", 0, 0)], max_events=None
)
def test_truthful_writers_are_never_behind_the_previous_batch_watermark(
    ops: list[tuple[str, int, int]], max_events: int | None
) -> None:
    clock = TickingClock(1_000_000)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_stream(S, 2)
        p = _planner(c)
        limit = Limit(max_events=max_events)
        writers = [EventWriter(c, S, writer_id=i + 1) for i in range(3)]
        times = [1_000] * 3
        idle = [False] * 3
        for writer, t in zip(writers, times, strict=True):
            writer.note_time(t)
        off = p.initial_offset()
        seen: list[int] = []
        written = 0

        def batch() -> None:
            nonlocal off
            end, ets = _batch(p, c, off, limit)
            assert end.watermark >= off.watermark
            late = [t for t in ets if t <= off.watermark]
            assert not late, (late, off.watermark)
            seen.extend(ets)
            off = end

        for op, w, x in ops:
            if op == "note":
                times[w] = max(times[w], off.watermark + 1) + x  # joins above the watermark
                idle[w] = False
                writers[w].note_time(times[w])
            elif op == "idle":
                writers[w].mark_idle()
                idle[w] = True
            elif op == "write":
                if idle[w]:  # re-joins above the watermark as it is now, not as it was when it left
                    times[w] = max(times[w], off.watermark + 1)
                    idle[w] = False
                writers[w].note_time(times[w])
                writers[w].write_event(f"k{x}", b"e", event_time=times[w] + x)
                written += 1
            elif op == "split":
                segs = sorted(c.get_stream(S).active_segments, key=lambda s: s.key_low)
                s = segs[x % len(segs)]
                mid = (s.key_low + s.key_high) / 2
                c.scale_stream(S, [s.name], [(s.key_low, mid), (mid, s.key_high)])
            elif op == "merge":
                segs = sorted(c.get_stream(S).active_segments, key=lambda s: s.key_low)
                if len(segs) > 1:
                    i = x % (len(segs) - 1)
                    a, b = segs[i], segs[i + 1]
                    c.scale_stream(S, [a.name, b.name], [(a.key_low, b.key_high)])
            else:
                batch()
        for wr in writers:
            wr.flush()  # writes are asynchronous
        for _ in range(200):
            before = off
            batch()
            if off is before or off == before:
                break
        assert len(seen) == written


@pytest.mark.slow
def test_a_sensor_behind_is_on_time_with_its_own_watermarks(
    spark: Any, served: Served, tmp_path: Path
) -> None:
    """``test_spark_eventtime``'s windows, with producer watermarks: nothing of sensor C is late."""
    c, clock = served.client, served.clock
    c.create_stream("iot/e", 2)
    sensors = {"sensor-A": -1_000, "sensor-C": -30_000}
    writers = {s: EventWriter(c, "iot/e", writer_id=i + 1) for i, s in enumerate(sensors)}
    for s, w in writers.items():
        w.note_time(clock.now() + sensors[s])
    for i in range(12):
        clock.advance(5_000)  # type: ignore[attr-defined]
        for s, w in writers.items():
            t = clock.now() + sensors[s]
            w.write_event(s, f"{i}".encode(), t)
            w.note_time(t)
    for w in writers.values():  # the sensors are done: every window may close
        w.note_time(clock.now() + 3_600_000)
    df = served.reader(spark, "iot/e", startingPosition="earliest", maxEventsPerTrigger=8, timeDomain="event")
    df = df.withColumn("value", df["payload"].cast("string").cast("double"))
    windows = event_time_windows(df, "20 seconds", value="value")
    rows, progress = run_available_now(windows, str(tmp_path / "ck"))
    assert [r for r in rows if r.late] == [] and late_rows(progress) == 0
    for s in sensors:
        mine = [r for r in rows if r.key == s]
        assert sum(r["count"] for r in mine) == 12 and sum(r.value_sum for r in mine) == sum(range(12))
        assert all(ms(r.watermark) >= ms(r.window_end) - 1 for r in mine)  # type: ignore[operator]


def test_no_watermark_yet_is_a_null_column_and_event_times_stay_in_range() -> None:
    from spark_source.reading import MAX_TIMESTAMP_US, MIN_TIMESTAMP_US, watermark_batch

    meta = BatchMeta(NO_WATERMARK, 0)
    assert meta.watermark_us is None and meta.event_time_watermark_us is None
    assert watermark_batch(meta).column(7).null_count == 1
    store = SegmentStore(clock=TickingClock(1_000_000))
    c = EmbeddedClient(store)
    c.create_stream(S, 1)
    with EventWriter(c, S) as w:
        for t in (-(2**62), 2**62, 5):
            w.write_event("k", b"p", t)
    seg = c.get_stream(S).active_segments[0].name
    (b,) = read_range(c, S, seg, 0, c.get_info(seg).length, meta)
    assert b.column(b.schema.get_field_index("watermark")).null_count == b.num_rows
    times = _event_times_us(b)
    assert times == [MIN_TIMESTAMP_US // 1000 * 1000, MAX_TIMESTAMP_US // 1000 * 1000, 5_000]
    b.to_pylist()  # every timestamp converts to a datetime (years 1..9999)


@pytest.mark.slow
def test_events_before_any_asserted_time_are_delivered_with_null_watermarks(
    spark: Any, served: Served, tmp_path: Path
) -> None:
    served.client.create_stream("et/none", 1)
    served.write("et/none", [("k", f"{i}".encode(), 1_000 + i) for i in range(5)])  # no note_time
    df = served.reader(spark, "et/none", startingPosition="earliest", timeDomain="event")
    rows, _ = run_available_now(df, str(tmp_path / "ck"))  # collect()s in foreachBatch
    assert sorted(r.payload for r in rows if r.kind == "event") == [f"{i}".encode() for i in range(5)]
    assert all(r.watermark is None and r.event_time_watermark is None for r in rows)
