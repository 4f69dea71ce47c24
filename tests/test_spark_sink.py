"""The ingestwm Spark sink: exactly-once commits per batch id, and writes from Spark queries."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import Served, ms, run_available_now, served_fixture, spark_fixture  # noqa: F401 (fixtures)

from readergroup.format.events import decode_frames
from readergroup.writing.transaction import TransactionalEventWriter
from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.client import EmbeddedClient
from spark_source.errors import SinkError
from spark_source.sink import CountMessage, SinkState, TransactionMessage


def stream_payloads(client: EmbeddedClient, stream: str) -> list[tuple[str, bytes, int | None]]:
    """Every event of a stream (all segments, sealed ones too) as (key, payload, event_time)."""
    out: list[tuple[str, bytes, int | None]] = []
    seen: set[str] = set()
    todo = [s.name for s in client.get_stream(stream).active_segments]
    todo += [cut for cut in client.get_head_cut(stream).as_dict()]
    while todo:
        seg = todo.pop()
        if seg in seen:
            continue
        seen.add(seg)
        info = client.get_info(seg)
        frames, _ = decode_frames(client.read(seg, info.start_offset, info.length).data, info.start_offset)
        out += [(f.routing_key, f.payload, f.event_time) for f in frames if f.is_event]
        todo += [s.segment.name for s in client.get_successors(seg)]
    return out


def open_txn(client: EmbeddedClient, stream: str, events: list[bytes]) -> TransactionMessage:
    txn = TransactionalEventWriter(client, stream).begin_txn()
    for i, p in enumerate(events):
        txn.write_event(f"k{i}", p)
    txn.flush()
    return TransactionMessage(stream, txn.info.segment_names, len(events))


@pytest.fixture
def client() -> Any:
    store = SegmentStore(clock=ManualClock(1_000))
    c = EmbeddedClient(store)
    c.create_stream("out/s", 2)
    yield c
    store.close()


def test_a_batch_id_is_committed_once(client: EmbeddedClient) -> None:
    state = SinkState(client, "out/s", "q1")
    assert state.last_committed() == -1
    assert state.commit(0, [open_txn(client, "out/s", [b"a", b"b"]), CountMessage(0), None])
    replay = open_txn(client, "out/s", [b"a", b"b"])
    assert not state.commit(0, [replay])  # Spark replays batch 0: not written twice
    assert not any(client.exists(s) for s in replay.segments)  # the replay's transaction is aborted
    assert state.commit(1, [open_txn(client, "out/s", [b"c"])])
    assert Counter(p for _, p, _ in stream_payloads(client, "out/s")) == Counter([b"a", b"b", b"c"])
    assert SinkState(client, "out/s", "q1").last_committed() == 1  # kept in the store
    assert SinkState(client, "out/s", "q2").last_committed() == -1  # per sink id


def test_a_commit_interrupted_by_a_crash_is_finished_by_the_replay(client: EmbeddedClient) -> None:
    state = SinkState(client, "out/s", "q1")
    t1, t2 = open_txn(client, "out/s", [b"x1"]), open_txn(client, "out/s", [b"x2"])
    state.record(5, [t1, t2])  # the driver wrote its intent, committed t1, then died
    client.commit_transaction(t1.stream, list(t1.segments))
    replay = [open_txn(client, "out/s", [b"x1"]), open_txn(client, "out/s", [b"x2"])]
    assert not state.commit(5, replay)
    assert sorted(p for _, p, _ in stream_payloads(client, "out/s")) == [b"x1", b"x2"]
    assert state.last_committed() == 5


def _leased() -> tuple[SegmentStore, ManualClock, EmbeddedClient]:
    clock = ManualClock(1_000)
    store = SegmentStore(clock=clock, config=StoreConfig(transaction_lease_ms=5_000))
    c = EmbeddedClient(store)
    c.create_stream("out/s", 2)
    return store, clock, c


def test_a_recorded_batch_whose_transactions_the_lease_aborted_is_written_by_the_replay() -> None:
    """The driver recorded batch 5's transactions and died before committing them; the restart came
    after their lease ran out (the store aborted them). The replay must write batch 5, not skip it.

    (Before: the recorded transactions no longer existed, which passed for "committed before
    the crash": batch 5 was marked committed and the replay's transactions aborted: lost.)
    """
    store, clock, c = _leased()
    try:
        state = SinkState(c, "out/s", "q1")
        state.record(5, [open_txn(c, "out/s", [b"x1"]), open_txn(c, "out/s", [b"x2"])])
        clock.advance(5_000)
        store.advance_idle_watermarks()  # the lease runs out: both aborted
        replay = [open_txn(c, "out/s", [b"x1"]), open_txn(c, "out/s", [b"x2"])]
        assert state.commit(5, replay)
        assert sorted(p for _, p, _ in stream_payloads(c, "out/s")) == [b"x1", b"x2"]
        assert state.last_committed() == 5
        assert not state.commit(5, [open_txn(c, "out/s", [b"x1"])])  # and only once
        assert sorted(p for _, p, _ in stream_payloads(c, "out/s")) == [b"x1", b"x2"]
    finally:
        store.close()


def test_a_recorded_batch_committed_in_part_before_its_lease_ran_out_fails_clearly() -> None:
    """One of batch 5's transactions was committed before the crash, the other aborted by its lease:
    neither skipping nor writing the replay is exactly once, so the commit fails naming the batch."""
    store, clock, c = _leased()
    try:
        state = SinkState(c, "out/s", "q1")
        t1, t2 = open_txn(c, "out/s", [b"x1"]), open_txn(c, "out/s", [b"x2"])
        state.record(5, [t1, t2])
        c.commit_transaction(t1.stream, list(t1.segments))
        clock.advance(5_000)
        store.advance_idle_watermarks()
        replay = [open_txn(c, "out/s", [b"x1"]), open_txn(c, "out/s", [b"x2"])]
        with pytest.raises(SinkError, match="batch 5"):
            state.commit(5, replay)
        assert state.last_committed() == -1
        assert [p for _, p, _ in stream_payloads(c, "out/s")] == [b"x1"]
    finally:
        store.close()


def test_timestamps_before_1970_round_down_to_their_millisecond() -> None:
    """A timestamp event time is the millisecond it falls in (floor, as Spark's ``unix_millis``).

    (Before: -0.5 ms became 0, after the instant; -1.5 ms became -1.)
    """
    import pyarrow as pa

    from spark_source.sink import _encoded, _InputColumns

    us = [-500, -1_000, -1_500, 0, 1_999, None]
    batch = pa.record_batch(
        [pa.array(["k"] * len(us)), pa.array([b"p"] * len(us)), pa.array(us, pa.timestamp("us", tz="UTC"))],
        names=["routing_key", "payload", "event_time"],
    )
    (events,) = list(_encoded(iter([batch]), _InputColumns(0, 1, 2, None)))
    frames, _ = decode_frames(events.data, 0)
    assert [f.event_time for f in frames] == [-1, -1, -2, 0, 1, None]


def test_a_failed_commit_names_the_stream(client: EmbeddedClient) -> None:
    t = open_txn(client, "out/s", [b"y"])
    client.seal_stream("out/s")
    with pytest.raises(SinkError, match="out/s"):
        SinkState(client, "out/s", "q1").commit(0, [t])


@pytest.mark.slow
def test_a_query_copies_a_stream_exactly_once(spark: Any, served: Served, tmp_path: Path) -> None:
    c = served.client
    c.create_stream("in/s", 2)
    c.create_stream("out/s", 3)
    written = [(f"k{i % 9}", f"p{i}".encode(), 5_000 + i) for i in range(60)]
    served.write("in/s", written)
    df = served.reader(spark, "in/s", startingPosition="earliest", maxEventsPerTrigger=25)
    q = (
        df.filter("kind = 'event'")
        .select("routing_key", "payload", "event_time")
        .writeStream.format("ingestwm")
        .option("endpoint", served.endpoint)
        .option("stream", "out/s")
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert Counter(stream_payloads(c, "out/s")) == Counter(written)
    state = SinkState(c, "out/s", next(iter(_sink_ids(c))))
    assert state.last_committed() == max(p["batchId"] for p in q.recentProgress)


def _sink_ids(client: EmbeddedClient) -> list[str]:
    prefix = "_system/spark_sink/out/s/"
    return [n[len(prefix) :] for n in client.store.list_segments() if n.startswith(prefix)]


@pytest.mark.slow
def test_a_batch_write_at_least_once_and_its_read_back(spark: Any, served: Served) -> None:
    served.client.create_stream("out/b", 1)
    rows = [(f"sensor-{i % 3}", f"reading {i}", i * 1000) for i in range(12)]
    df = spark.createDataFrame(rows, "routing_key string, payload string, event_time bigint")
    df.write.format("ingestwm").option("endpoint", served.endpoint).option("stream", "out/b").mode(
        "append"
    ).save()
    back = (
        spark.read.format("ingestwm")
        .option("endpoint", served.endpoint)
        .option("stream", "out/b")
        .load()
        .collect()
    )
    assert sorted((r.routing_key, r.payload.decode(), ms(r.event_time)) for r in back) == sorted(rows)
    with pytest.raises(Exception, match="routing_key"):
        spark.createDataFrame([("x",)], "payload string").write.format("ingestwm").option(
            "endpoint", served.endpoint
        ).option("stream", "out/b").mode("append").save()


@pytest.mark.slow
def test_rows_of_every_shape_are_written_as_encode_event_frames(spark: Any, served: Served) -> None:
    """Bulk framing in the sink: unicode and empty keys, empty payloads, no or negative event times."""
    served.client.create_stream("out/shapes", 2)
    rows = [
        (
            ["", "ü-ñ", "k", "sensor-7"][i % 4],
            bytes([i % 251]) * (i % 5),
            None if i % 3 == 0 else (i - 9_000) * 7,
        )
        for i in range(25_000)  # several Arrow batches per task
    ]
    df = spark.createDataFrame(rows, "routing_key string, payload binary, event_time bigint").repartition(2)
    df.write.format("ingestwm").option("endpoint", served.endpoint).option("stream", "out/shapes").mode(
        "append"
    ).save()
    assert Counter(stream_payloads(served.client, "out/shapes")) == Counter(rows)
    with pytest.raises(Exception, match="sink column 'routing_key' has a null value"):
        spark.createDataFrame([(None, b"p")], "routing_key string, payload binary").write.format(
            "ingestwm"
        ).option("endpoint", served.endpoint).option("stream", "out/shapes").mode("append").save()


def test_the_sources_watermark_rows_are_skipped_and_a_null_key_is_explained() -> None:
    import pyarrow as pa

    from spark_source.reading import ARROW_SCHEMA, BatchMeta, watermark_batch
    from spark_source.sink import _check_input, _encoded

    class _Field:
        def __init__(self, name: str, typ: str) -> None:
            self.name = name
            self.dataType = type("T", (), {"typeName": staticmethod(lambda: typ)})()

    schema = type("S", (), {"fields": [_Field("routing_key", "string"), _Field("payload", "binary"),
                                       _Field("kind", "string")]})()  # fmt: skip
    cols = _check_input(schema)
    wm = watermark_batch(BatchMeta(5_000, 0))
    events = pa.record_batch(
        [pa.array(["k1", "k2"]), pa.array([b"a", b"b"]), pa.array(["event", "event"])],
        names=["routing_key", "payload", "kind"],
    )
    mixed = pa.concat_batches([events, wm.select(["routing_key", "payload", "kind"])])
    assert wm.schema == ARROW_SCHEMA
    encoded = list(_encoded(iter([wm.select(["routing_key", "payload", "kind"]), mixed]), cols))
    assert [len(e) for e in encoded] == [2]
    no_kind = _check_input(type("S", (), {"fields": schema.fields[:2]})())
    with pytest.raises(
        SinkError, match=r"routing_key' has a null value.*kind = 'watermark'.*emitWatermarkRows"
    ):
        list(_encoded(iter([mixed.select(["routing_key", "payload"])]), no_kind))


@pytest.mark.slow
def test_the_source_piped_into_the_sink_copies_every_event_once(
    spark: Any, served: Served, tmp_path: Path
) -> None:
    c = served.client
    c.create_stream("pipe/in", 2)
    c.create_stream("pipe/out", 1)
    written = [(f"k{i % 4}", f"p{i}".encode(), 7_000 + i) for i in range(30)]
    served.write("pipe/in", written)
    q = (
        served.reader(spark, "pipe/in", startingPosition="earliest")  # watermark rows included
        .writeStream.format("ingestwm")
        .option("endpoint", served.endpoint)
        .option("stream", "pipe/out")
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None
    assert Counter(stream_payloads(c, "pipe/out")) == Counter(written)
