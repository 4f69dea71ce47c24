"""flink_compat over an ``EVENT_TIME`` reader group: the writers' own watermarks, end to end.

The sensor IT case of ``test_flink_source`` with producer watermarks: each sensor writes
with its own skew (C runs 30 s behind) and asserts its time after every round. Under
``INGESTION_TIME`` with a 10 s lag, C's events are all late; here the watermark follows
the slowest sensor, so every event is on time, in event-time order, exactly once — across
splits and merges, on a clock that ticks at every reading.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from flink_compat.errors import InvalidConfigError
from flink_compat.operators import LATE_DATA, EventTimeOrderingOperator
from flink_compat.pravega_source import PravegaSource
from flink_compat.runner import JobRunner
from flink_compat.watermark import Watermark
from readergroup import EventWriter
from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.reading.group import ReaderGroupManager
from segmentstore import SegmentStore, TickingClock
from segmentstore.client import EmbeddedClient

STREAM = "itcase/et"
SKEW = {"sensor-A": 0, "sensor-B": 30_000, "sensor-C": -30_000}
ROUNDS = 30
ROUND_MS = 4_000


def _decode(read: Any) -> tuple[str, int]:
    sensor, ts = json.loads(read.payload)
    return sensor, ts


def _scale(client: EmbeddedClient) -> None:
    upper = [s for s in client.get_stream(STREAM).active_segments if s.key_low >= 0.5 - 1e-9]
    if len(upper) == 1:
        client.scale_stream(STREAM, [upper[0].name], [(0.5, 0.85), (0.85, 1.0)])
    else:
        client.scale_stream(STREAM, [s.name for s in upper], [(0.5, 1.0)])


def test_producer_watermarks_make_every_sensor_on_time_across_scaling() -> None:
    clock = TickingClock(10_000_000)
    with SegmentStore(clock=clock) as store:
        client = EmbeddedClient(store)
        client.create_stream(STREAM, 2)
        group = ReaderGroupManager(client, clock).create_reader_group(
            "et", ReaderGroupConfig((STREAM,), time_domain=TimeDomain.EVENT_TIME)
        )
        source = PravegaSource(group, parallelism=3, max_event_time_lag=10_000, deserializer=_decode)
        runner = JobRunner(source, lambda: [EventTimeOrderingOperator()])
        writers = {s: EventWriter(client, STREAM, writer_id=i + 1) for i, s in enumerate(SKEW)}
        written: list[tuple[str, int]] = []
        asserted: dict[str, int] = {}

        def tick(ms: int = 1_000) -> None:
            clock.advance(ms)
            runner.run_until_quiet()
            runner._check()
            group._check()

        for sensor, w in writers.items():  # join before the first event: the PIP's eager watermark
            asserted[sensor] = clock.now() + SKEW[sensor]
            w.note_time(asserted[sensor])
        for rnd in range(ROUNDS):
            for sensor, w in writers.items():
                t = max(clock.now() + SKEW[sensor], asserted[sensor])
                w.write_event(sensor, json.dumps([sensor, t]).encode(), t)
                written.append((sensor, t))
                w.note_time(t)  # every later event of this sensor is at or after t
                asserted[sensor] = t
            for _ in range(ROUND_MS // 1_000):
                tick()
            if rnd % 10 == 9:
                _scale(client)
        for _ in range(5):
            tick()
        last = runner.downstream_watermarks[0][-1]
        assert last == Watermark(min(asserted.values()) - 1)  # the slowest sensor's assertion, no lag
        for sensor, w in writers.items():  # the sensors finish: everything becomes final
            w.note_time(asserted[sensor] + 3_600_000)
        for _ in range(5):
            tick()
        out = runner.output.records
        assert Counter(tuple(r.value) for r in out) == Counter(written)  # C included, exactly once
        ts = [r.timestamp for r in out]
        assert ts == sorted(ts)  # type: ignore[type-var]
        assert runner.side_output(LATE_DATA) == []
        assert runner.chain(0)[0].num_late_records_dropped == 0  # type: ignore[attr-defined]
        assert client.get_stream(STREAM).epoch == 3
        assert sum(s.stats.late_events for s in (t.reader for t in runner.subtasks)) == 0  # type: ignore[attr-defined]


def test_a_processing_time_group_is_refused_with_both_domains_named() -> None:
    clock = TickingClock(1)
    with SegmentStore(clock=clock) as store:
        client = EmbeddedClient(store)
        client.create_stream(STREAM, 1)
        plain = ReaderGroupManager(client, clock).create_reader_group("p", ReaderGroupConfig((STREAM,)))
        with pytest.raises(InvalidConfigError, match="INGESTION_TIME or EVENT_TIME"):
            PravegaSource(plain, parallelism=1)
