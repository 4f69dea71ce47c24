"""One store, whichever client wrote it: streams the real Pravega client (``pravega`` 0.3.8) wrote
through ``ingestwm serve --pravega-port`` — routing keys over 4 segments, then a scale to 2 while it
writes — read by an ingestwm reader group over ``RemoteClient``, by flink_compat's ``PravegaSource``
and by the Spark source (batch, and streaming with the watermark columns).

The server runs in a subprocess (the client holds the GIL while it waits; ``pravega_helpers``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pravega_client  # (pravega==0.3.8, in the test extra: never skipped)
import pytest
from pravega_helpers import Served, served
from spark_fixtures import ms, spark_fixture  # noqa: F401 (fixtures)

from flink_compat import JobRunner, MapOperator, PravegaSource
from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.reading.group import ReaderGroup, ReaderGroupManager
from readergroup.reading.reader import ReadKind
from segmentstore import FRAMING_PRAVEGA
from segmentstore.client.remote import RemoteClient

pytestmark = pytest.mark.slow

STREAM = "rd/s"
KEYS = 24


@dataclass
class Written:
    server: Served
    payloads: dict[bytes, str]  # payload -> the routing key it was written with
    before_scale: set[bytes]
    wrote_until_ms: int

    def remote(self) -> RemoteClient:
        return RemoteClient(("127.0.0.1", self.server.port), timeout_s=30)


def _payload(key: str, i: int) -> bytes:
    return json.dumps({"k": key, "i": i, "pad": "x" * (i % 40)}).encode()


@pytest.fixture(scope="module")
def written() -> Iterator[Written]:
    """``rd/s``: 4 segments, 240 keyed events, a scale to a fixed 2 segments, 160 more (the writer
    follows the successors), all written by the real ``StreamWriter``."""
    with served() as s:
        m = pravega_client.StreamManager(s.controller_uri, False, False)
        m.create_scope("rd")
        m.create_stream("rd", "s", 4)
        w = m.create_writer("rd", "s")
        payloads: dict[bytes, str] = {}
        for i in range(240):
            key = f"key-{i % KEYS}"
            p = _payload(key, i)
            w.write_event_bytes(p, routing_key=key)
            payloads[p] = key
        w.flush()
        before = set(payloads)
        fixed = pravega_client.StreamScalingPolicy.fixed_scaling_policy(2)
        assert m.update_stream_with_policy("rd", "s", scaling_policy=fixed) is True
        for i in range(240, 400):
            key = f"key-{i % KEYS}"
            p = _payload(key, i)
            w.write_event_bytes(p, routing_key=key)
            payloads[p] = key
        w.flush()
        with RemoteClient(("127.0.0.1", s.port), timeout_s=30) as c:
            info = c.get_stream(STREAM)
            assert info.framing == FRAMING_PRAVEGA and info.epoch == 1 and len(info.active_segments) == 2
        yield Written(s, payloads, before, int(time.time() * 1000))


def test_an_ingestwm_reader_group_reads_every_pravega_written_event_once(written: Written) -> None:
    with written.remote() as c:
        group = ReaderGroup(
            "rg",
            ReaderGroupConfig(
                (STREAM,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=0
            ),
            c,
        )
        readers = [group.create_reader(f"r{i}") for i in range(3)]
        events = []
        marks: dict[str, list[int]] = {rd.reader_id: [] for rd in readers}
        deadline = time.monotonic() + 30
        while len(events) < len(written.payloads) and time.monotonic() < deadline:
            for rd in readers:
                r = rd.read_next_event(timeout_ms=20)
                if r.kind is ReadKind.EVENT:
                    events.append(r)
                elif r.kind is ReadKind.WATERMARK:
                    marks[rd.reader_id].append(r.watermark)
        for rd in readers:  # what a reader returned counts as processed once it is called again: it reports
            r = rd.read_next_event(timeout_ms=0)
            if r.kind is ReadKind.EVENT:
                events.append(r)  # (the loop ran out of time: the checks below say what is missing)
            elif r.kind is ReadKind.WATERMARK:
                marks[rd.reader_id].append(r.watermark)
        assert Counter(r.payload for r in events) == Counter(
            list(written.payloads)
        )  # every event once, exact
        assert all(r.routing_key is None and r.event_time is None for r in events)  # Pravega stores neither
        per_segment: dict[str, list[int]] = {}
        for r in events:
            assert r.ingestion_time == c.ingestion_time_at(r.segment, r.position)
            per_segment.setdefault(r.segment, []).append(r.ingestion_time)
        segments = [f"rd/s/{n}.#epoch.{n // 4}" for n in range(6)]  # 4 segments, then their 2 successors
        assert set(per_segment) == {n for n in segments if c.get_info(n).length}
        assert {n.split("#")[1] for n in per_segment} == {"epoch.0", "epoch.1"}
        assert all(t == sorted(t) for t in per_segment.values())  # monotone per segment
        # a key's events stay in order across the scale (Pravega's guarantee, kept by the group)
        for k in {f"key-{i}" for i in range(KEYS)}:
            seq = [json.loads(r.payload)["i"] for r in events if json.loads(r.payload)["k"] == k]
            assert seq == sorted(seq), k
        for m in marks.values():  # each reader's strictly ascend; the group's moved
            assert m == sorted(set(m))
        assert len({w for m in marks.values() for w in m}) >= 2
        # every event returned and reported: the group's watermark reached the open segments' tails
        # (the least of them: the client's appends to two segments may land a millisecond apart)
        tails = [
            c.watermark_at(x.name, c.get_info(x.name).length) for x in c.get_stream(STREAM).active_segments
        ]
        assert group.group_watermark >= min(tails)
        for rd in readers:
            rd._check()
            rd.close()


def test_flink_compat_reads_the_pravega_stream_with_ingestion_watermarks(written: Written) -> None:
    with written.remote() as c:
        group = ReaderGroupManager(c).create_reader_group(
            "flink", ReaderGroupConfig((STREAM,), time_domain=TimeDomain.INGESTION_TIME)
        )
        source = PravegaSource(
            group,
            parallelism=2,
            max_event_time_lag=0,
            deserializer=lambda read: (read.routing_key, json.loads(read.payload), read.ingestion_time),
            timestamp_assigner=lambda value, _ts: value[1]["i"],  # Pravega stores no event time: the user's
        )
        runner = JobRunner(source, lambda: [MapOperator(lambda v: v)])
        deadline = time.monotonic() + 30
        newest = 0
        while time.monotonic() < deadline:
            runner.run_until_quiet()
            records = runner.output.records
            marks = [w.timestamp for w in runner.downstream_watermarks[0]]
            newest = max((r.value[2] for r in records), default=0)
            if len(records) == len(written.payloads) and marks and marks[-1] >= newest - 1:
                break
            time.sleep(0.02)
        assert sorted(r.value[1]["i"] for r in records) == list(range(400))
        assert all(r.value[0] is None and r.timestamp == r.value[1]["i"] for r in records)
        assert marks == sorted(set(marks)) and marks[-1] >= newest - 1  # the ingestion watermark, lag 0


def test_spark_reads_the_pravega_stream_in_batch_and_streaming_with_watermark_columns(
    spark: Any, written: Written, tmp_path: Path
) -> None:
    endpoint = f"127.0.0.1:{written.server.port}"
    batch = spark.read.format("ingestwm").option("endpoint", endpoint).option("stream", STREAM).load()
    rows = batch.collect()
    assert Counter(bytes(r.payload) for r in rows) == Counter(list(written.payloads))
    assert all(r.kind == "event" and r.routing_key is None and r.event_time is None for r in rows)
    assert batch.schema.simpleString().startswith("struct<stream:string,segment:string,offset:bigint")
    df = (
        spark.readStream.format("ingestwm")
        .option("endpoint", endpoint)
        .option("stream", STREAM)
        .option("startingPosition", "earliest")
        .option("maxEventsPerTrigger", "150")  # several micro-batches: frame ends found by the driver
        .load()
    )
    batches: list[list[Any]] = []
    w = df.writeStream.foreachBatch(lambda b, _i: batches.append(b.collect())).trigger(availableNow=True)
    q = w.option("checkpointLocation", str(tmp_path / "ckpt")).start()
    q.awaitTermination()
    ev = [r for b in batches for r in b if r.kind == "event"]
    assert Counter(bytes(r.payload) for r in ev) == Counter(list(written.payloads))
    sizes = [sum(r.kind == "event" for r in b) for b in batches]
    assert max(sizes) <= 150 and len([n for n in sizes if n]) >= 3
    with written.remote() as c:
        for r in ev:
            assert r.routing_key is None and r.event_time is None
            assert ms(r.ingestion_time) == c.ingestion_time_at(r.segment, r.offset)
    # each micro-batch carries one ingestion watermark, rising; no later batch has an event at or below it
    marks = []
    for k, b in enumerate(batches):
        wms = {ms(r.watermark) for r in b if r.kind == "event"}
        if not wms:
            continue
        assert len(wms) == 1
        wm = wms.pop()
        assert wm is not None and all(r.event_time_watermark is not None for r in b)
        marks.append(wm)
        later = [ms(r.ingestion_time) for b2 in batches[k + 1 :] for r in b2 if r.kind == "event"]
        assert all(t > wm for t in later), "an event at or below an earlier batch's watermark"  # type: ignore[operator]
    assert marks == sorted(marks) and marks[-1] > marks[0]
