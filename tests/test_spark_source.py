"""The ingestwm Spark source through Spark itself: streaming and batch reads from a served store."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import (  # noqa: F401 (fixtures)
    Served,
    ms,
    run_available_now,
    served_fixture,
    served_wall_fixture,
    settle,
    spark_fixture,
    wait_until,
)

from spark_source.eventtime import events_only
from spark_source.reading import WATERMARK_COLUMN_SLACK_US
from spark_source.source import committed_positions

pytestmark = pytest.mark.slow


def events(
    n: int, tag: str = "e", keys: int = 7, event_time: int | None = 1_000
) -> list[tuple[str, bytes, int | None]]:
    return [(f"k{i % keys}", f"{tag}{i}".encode(), event_time) for i in range(n)]


def test_available_now_reads_every_event_once_within_the_event_limit(
    spark: Any, served: Served, tmp_path: Path
) -> None:
    served.client.create_stream("s/limits", 3)
    served.clock.advance(5)
    written = events(150, event_time=served.clock.now() - 2_000)
    served.write("s/limits", written)
    df = served.reader(
        spark, "s/limits", startingPosition="earliest", maxEventsPerTrigger=40, maxEventTimeLag="1 s"
    )
    rows, progress = run_available_now(df, str(tmp_path / "ckpt"))
    ev = [r for r in rows if r.kind == "event"]
    assert Counter(r.payload for r in ev) == Counter(p for _, p, _ in written)
    assert len({(r.segment, r.offset) for r in ev}) == 150
    assert all(p["numInputRows"] <= 40 for p in progress) and sum(p["numInputRows"] for p in progress) >= 150
    assert len([p for p in progress if p["numInputRows"]]) >= 4
    segments = {s.name for s in served.client.get_stream("s/limits").active_segments}
    for r in ev:
        assert r.stream == "s/limits" and r.segment in segments
        assert ms(r.event_time) == served.clock.now() - 2_000
        assert ms(r.ingestion_time) == served.client.ingestion_time_at(r.segment, r.offset)
        assert ms(r.ingestion_time) <= ms(r.watermark) + 1  # type: ignore[operator]
        lag_us = (r.watermark - r.event_time_watermark).total_seconds() * 1e6
        assert lag_us == 1_000_000 - WATERMARK_COLUMN_SLACK_US


def test_a_processing_time_query_follows_new_events_and_commits_positions(spark: Any, served: Served) -> None:
    served.client.create_stream("s/follow", 2)
    df = served.reader(
        spark, "s/follow", startingPosition="earliest", consumerName="follower", maxBytesPerTrigger=300
    )
    q = df.writeStream.format("memory").queryName("follow").trigger(processingTime="100 milliseconds").start()
    segments = [s.name for s in served.client.get_stream("s/follow").active_segments]
    lengths: list[dict[str, int]] = []
    try:
        written: list[bytes] = []
        for round_ in range(3):
            batch = events(20, f"r{round_}-")
            served.clock.advance(100)
            served.write("s/follow", batch)
            written += [p for _, p, _ in batch]
            settle(q)
            got = [r.payload for r in spark.sql("select payload from follow where kind = 'event'").collect()]
            assert Counter(got) == Counter(written)
            lengths.append({s: served.client.get_info(s).length for s in segments})
    finally:
        q.stop()
    frame = 15 + 2 + 4  # header, key "kN", payload "rN-M": 21 or 22 bytes
    assert all(p["numInputRows"] <= 300 // frame for p in q.recentProgress)
    # every trigger records the end of the last micro-batch Spark committed: no batch behind
    committed = committed_positions(served.client, "s/follow", "follower")
    assert committed == lengths[2]


@pytest.mark.parametrize("emit", ["true", "false"])
def test_committed_positions_follow_the_last_micro_batch(spark: Any, served: Served, emit: str) -> None:
    served.client.create_stream("s/commit", 2)
    segments = [s.name for s in served.client.get_stream("s/commit").active_segments]
    df = served.reader(
        spark, "s/commit", startingPosition="earliest", consumerName=f"c{emit}", emitWatermarkRows=emit
    )
    q = (
        df.writeStream.format("memory")
        .queryName(f"commit_{emit}")
        .trigger(processingTime="50 milliseconds")
        .start()
    )
    try:
        served.write("s/commit", events(40))
        settle(q)
        lengths = {s: served.client.get_info(s).length for s in segments}
        wait_until(
            lambda: committed_positions(served.client, "s/commit", f"c{emit}") == lengths, 30, "positions"
        )
    finally:
        q.stop()


def test_an_idle_stream_keeps_the_event_time_watermark_moving(spark: Any, served_wall: Served) -> None:
    s = served_wall
    s.client.create_stream("s/idle", 2)
    s.write("s/idle", events(5, event_time=s.clock.now()))
    df = s.reader(spark, "s/idle", startingPosition="earliest", maxEventTimeLag="1 second")
    df = df.withWatermark("event_time_watermark", "0 seconds")
    q = df.writeStream.format("memory").queryName("idle").trigger(processingTime="200 milliseconds").start()
    try:

        def marks() -> list[Any]:
            return spark.sql(
                "select event_time_watermark from idle where kind = 'watermark' order by event_time_watermark"
            ).collect()

        wait_until(lambda: len(marks()) >= 3, 60, "three watermark rows")
        last_event = spark.sql(
            "select max(ingestion_time) t, max(watermark) w from idle where kind = 'event'"
        ).first()
    finally:
        q.stop()
    wm = [ms(r.event_time_watermark) for r in marks()]
    assert wm == sorted(set(wm)), "watermark rows carry a strictly increasing watermark"
    assert wm[-1] > ms(last_event.t) - 1_000  # type: ignore[operator]  # past the last event, with no new event
    rows = spark.sql("select * from idle where kind = 'watermark'").collect()
    assert all(r.stream is None and r.payload is None and r.event_time is None for r in rows)
    spark_wm = [p["eventTime"].get("watermark") for p in q.recentProgress]
    assert len({w for w in spark_wm if w}) >= 3, "Spark's own watermark follows the watermark rows"
    # events_only keeps its filter above withWatermark (a plain filter is pushed below it)
    plain = _optimized(spark, df.filter("kind = 'event'"))
    assert plain.index("EventTimeWatermark") < plain.index("Filter")
    ours = _optimized(spark, events_only(df))
    assert ours.index("Filter") < ours.index("EventTimeWatermark")


def _optimized(spark: Any, df: Any) -> str:
    mode = spark.sparkContext._jvm.org.apache.spark.sql.execution.ExplainMode.fromString("extended")
    text: str = df._jdf.queryExecution().explainString(mode)
    return text[text.index("== Optimized Logical Plan ==") : text.index("== Physical Plan ==")]


def test_scaling_during_a_query_loses_nothing_and_the_watermark_never_decreases(
    spark: Any, served: Served
) -> None:
    c = served.client
    c.create_stream("s/scale", 2)
    seen: list[tuple[int, Any]] = []
    df = served.reader(spark, "s/scale", startingPosition="earliest")
    q = (
        df.writeStream.foreachBatch(lambda b, i: seen.extend((i, r) for r in b.collect()))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    written: list[bytes] = []
    try:

        def round_(tag: str) -> None:
            batch = events(30, tag, keys=13)
            served.clock.advance(50)
            served.write("s/scale", batch)
            written.extend(p for _, p, _ in batch)

        round_("a")
        settle(q)
        s0 = c.get_stream("s/scale").active_segments[0]
        c.scale_stream("s/scale", [s0.name], [(s0.key_low, 0.2), (0.2, s0.key_high)])
        round_("b")
        a, b = c.get_stream("s/scale").active_segments[:2]
        c.scale_stream("s/scale", [a.name, b.name], [(a.key_low, b.key_high)])
        round_("c")
        settle(q)
    finally:
        q.stop()
    ev = [r for _, r in seen if r.kind == "event"]
    assert Counter(r.payload for r in ev) == Counter(written)
    assert len({r.segment for r in ev}) >= 4  # read from predecessors and successors
    per_batch = sorted({(i, ms(r.watermark)) for i, r in seen})
    assert [w for _, w in per_batch] == sorted(w for _, w in per_batch)


def test_a_batch_read_stops_at_the_ending_cut(spark: Any, served: Served) -> None:
    c = served.client
    c.create_stream("s/batch", 2)
    first = events(30, "first")
    served.write("s/batch", first)
    cut = c.get_tail_cut("s/batch").to_json()
    s0 = c.get_stream("s/batch").active_segments[0]
    c.scale_stream("s/batch", [s0.name], [(s0.key_low, 0.3), (0.3, s0.key_high)])
    served.write("s/batch", events(20, "second"))

    def read(**options: str) -> list[Any]:
        r = spark.read.format("ingestwm").option("endpoint", served.endpoint).option("stream", "s/batch")
        for k, v in options.items():
            r = r.option(k, v)
        return r.load().collect()  # type: ignore[no-any-return]

    upto = read(endingPosition=cut)
    assert Counter(r.payload for r in upto) == Counter(p for _, p, _ in first)
    everything = read()
    assert len(everything) == 50 and all(r.kind == "event" for r in everything)
    from_cut = read(startingPosition=cut)
    assert {r.payload for r in from_cut} == {f"second{i}".encode() for i in range(20)}


def test_bad_options_fail_when_the_query_is_defined(spark: Any, served: Served) -> None:
    def load(**options: str) -> None:
        r = spark.readStream.format("ingestwm")
        for k, v in options.items():
            r = r.option(k, v)
        r.load()

    with pytest.raises(Exception, match="maxEventTimeLag must be a duration"):
        load(endpoint=served.endpoint, stream="s/x", maxEventTimeLag="-1 s")
    with pytest.raises(
        Exception, match=r"(?i)unknown option 'maxEventsPerTriger'.*did you mean maxEventsPerTrigger\?"
    ):
        load(endpoint=served.endpoint, stream="s/x", maxEventsPerTriger="5")
    with pytest.raises(Exception, match="option endpoint is required"):
        load(stream="s/x")


def test_a_missing_stream_fails_the_query_at_start_naming_it(spark: Any, served: Served) -> None:
    q = (
        served.reader(spark, "s/nowhere", startingPosition="earliest")
        .writeStream.format("memory")
        .queryName("nowhere")
        .start()
    )
    with pytest.raises(Exception, match="s/nowhere"):
        q.awaitTermination(60)
    assert not q.isActive
