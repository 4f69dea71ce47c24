"""A waiting reader costs (almost) nothing while nothing happens, and wakes when something does.

Store calls are counted on the client the group uses, embedded and remote, on a clock
that ticks at every reading. Before ``wait_any`` an idle ``read_next_event(500)`` over
16 segments made ~400 reads; now it makes one ``wait_any`` per wait slice.
"""

from __future__ import annotations

import threading

import pytest

from bench.perf.call_counts import count_calls
from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventRead, EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import TickingClock
from segmentstore.client import EmbeddedClient, SegmentStoreClient

S = "test/waiting"
_SEGMENTS = 16


def _caught_up_reader(c: SegmentStoreClient, clock: TickingClock) -> EventReader:
    c.create_stream(S, _SEGMENTS)
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=50)
    group = ReaderGroup("g", cfg, c, clock)
    reader = group.create_reader("r")
    while reader.read_next_event(0).kind is not ReadKind.EMPTY:
        pass
    return reader


def test_an_idle_reader_makes_one_store_call_per_wait_slice(
    ticking: tuple[TickingClock, SegmentStoreClient],
) -> None:
    clock, c = ticking
    reader = _caught_up_reader(c, clock)
    calls = count_calls(c)
    r = reader.read_next_event(timeout_ms=500)
    assert r.kind is ReadKind.EMPTY
    assert calls["read"] == calls["watermarks_at"] == 0  # nothing changed: no segment was read alone
    # ~500 ms / 100 ms slices, plus the first look (no wait: the tails read at once, one read_many;
    # embedded, none: the store's change count says nothing changed since the reader's last look)
    assert calls["read_many"] == (0 if isinstance(c, EmbeddedClient) else 1)
    assert 1 <= calls["wait_any"] <= 8
    assert sum(calls.values()) == calls["wait_any"] + calls["read_many"]


def test_a_waiting_reader_wakes_on_an_event_and_reads_only_its_segment(
    ticking: tuple[TickingClock, SegmentStoreClient],
) -> None:
    clock, c = ticking
    reader = _caught_up_reader(c, clock)
    calls = count_calls(c)
    got: list[EventRead] = []
    t = threading.Thread(target=lambda: got.append(reader.read_next_event(timeout_ms=30_000)))
    t.start()
    threading.Event().wait(0.15)
    EventWriter(c, S).write_event("key", b"hello")  # the writer's calls are counted too
    t.join(timeout=30)
    assert not t.is_alive()
    assert [(r.kind, r.payload) for r in got if r.is_event] == [(ReadKind.EVENT, b"hello")] or (
        got and got[0].is_watermark  # INGESTION_TIME: the append's watermark may come first
    )
    if got[0].is_watermark:
        nxt = reader.read_next_event(timeout_ms=5_000)
        assert nxt.is_event and nxt.payload == b"hello"
    assert calls["read"] <= 3  # the segment that changed (a block and perhaps its tail), not all 16
    assert calls["wait_any"] <= 6


@pytest.mark.parametrize("what", ["seal", "watermark"])
def test_a_waiting_reader_wakes_on_a_seal_or_a_watermark_rise(
    ticking: tuple[TickingClock, SegmentStoreClient], what: str
) -> None:
    clock, c = ticking
    reader = _caught_up_reader(c, clock)
    before = reader.stats.last_watermark
    got: list[EventRead] = []
    t = threading.Thread(target=lambda: got.append(reader.read_next_event(timeout_ms=30_000)))
    t.start()
    threading.Event().wait(0.15)
    if what == "seal":
        c.seal_stream(S)
    else:
        for s in c.get_stream(S).active_segments:
            c.update_attributes(s.name, [])  # a write with no bytes: each tail's watermark rises
    t.join(timeout=30)
    assert not t.is_alive()
    assert got[0].is_watermark
    assert before is None or (got[0].watermark or 0) > before
