"""EventReader: what a reader delivers — events with ingestion times, watermarks, batches, positions."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.errors import InvalidReadError, ReaderNotInGroupError
from readergroup.format import events
from readergroup.format.events import KIND_IDLE, KIND_WATERMARK, NO_EVENT_TIME, encode_event
from readergroup.reading import reader as reader_module
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import EventRead, EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore, StoreConfig
from segmentstore.client import EmbeddedClient, SegmentStoreClient

STREAM = "test/reader"


def _group(
    client: SegmentStoreClient, clock: ManualClock, segments: int = 1, **options: object
) -> ReaderGroup:
    client.create_stream(STREAM, segments)
    opts: dict[str, object] = {"time_domain": TimeDomain.INGESTION_TIME, "position_report_interval_ms": 0}
    opts.update(options)
    return ReaderGroup("g", ReaderGroupConfig((STREAM,), **opts), client, clock)  # type: ignore[arg-type]


def _write(client: SegmentStoreClient, clock: ManualClock, n: int, key: str = "k", step: int = 5) -> None:
    w = EventWriter(client, STREAM)
    for i in range(n):
        clock.advance(step)
        et = clock.now() - 3 if i % 2 else None
        w.write_event(f"{key}{i % 7}", f"{key}-{i}".encode(), event_time=et).result(10)  # stored now
    w.close()


def _drain(reader: EventReader, limit: int = 10_000) -> list[EventRead]:
    out: list[EventRead] = []
    for _ in range(limit):
        r = reader.read_next_event()
        if r.kind is ReadKind.EMPTY:
            return out
        out.append(r)
    raise AssertionError("the reader never ran dry")


def test_events_carry_key_payload_event_time_and_the_stores_ingestion_time(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock, segments=3)
    _write(client, clock, 40)
    reads = _drain(group.create_reader("r"))
    events = [r for r in reads if r.is_event]
    assert sorted(r.payload for r in events if r.payload) == sorted(f"k-{i}".encode() for i in range(40))
    for r in events:
        assert r.segment is not None and r.routing_key is not None and r.payload is not None
        assert r.ingestion_time == client.ingestion_time_at(r.segment, r.position)
        assert r.end_position == r.position + r.length
        i = int(r.payload.split(b"-")[1])
        assert r.routing_key == f"k{i % 7}"
        assert (r.event_time is None) == (i % 2 == 0)
        if r.event_time is not None:
            assert r.event_time == r.ingestion_time - 3
        assert not r.is_watermark and not r.is_checkpoint


def test_watermarks_strictly_ascend_and_no_later_event_is_at_or_below_one(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock, segments=2)
    reader = group.create_reader("r")
    last_wm = None
    events = 0
    for round_ in range(6):
        _write(client, clock, 15, key=f"r{round_}", step=round_ + 1)
        for r in _drain(reader):
            if r.is_watermark:
                assert r.watermark is not None
                assert last_wm is None or r.watermark > last_wm
                last_wm = r.watermark
            else:
                assert r.ingestion_time is not None
                assert last_wm is None or r.ingestion_time > last_wm
                events += 1
    assert events == 90
    assert last_wm is not None and last_wm >= clock.now() - 1 - 6  # caught up: close to the last append
    assert reader.stats.late_ingestion_events == 0


def test_a_caught_up_reader_follows_idle_segments_through_zero_length_tail_reads(
    clock: ManualClock, client: SegmentStoreClient, store: SegmentStore
) -> None:
    group = _group(client, clock, segments=2)
    _write(client, clock, 4)
    reader = group.create_reader("r")
    _drain(reader)
    assert reader.read_next_event().kind is ReadKind.EMPTY  # nothing moved: nothing to say
    lag = store.config.max_watermark_lag_ms
    for _ in range(3):
        clock.advance(lag + 1)
        assert store.advance_idle_watermarks()  # both segments are idle
        r = reader.read_next_event()
        assert r.is_watermark
        assert r.watermark == clock.now() - 1  # both tails were touched now: within one read
        assert reader.read_next_event().kind is ReadKind.EMPTY


def test_the_batch_api_returns_the_same_events_as_columns(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    client.create_stream(STREAM, 3)
    _write(client, clock, 300)
    cfg = ReaderGroupConfig((STREAM,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=0)
    one = ReaderGroup("one", cfg, client, clock).create_reader("r")
    many = ReaderGroup("many", cfg, client, clock).create_reader("r")
    singles = [
        (r.segment, r.position, r.routing_key, r.payload, r.event_time, r.ingestion_time)
        for r in _drain(one)
        if r.is_event
    ]
    rows = []
    watermarks = []
    for _ in range(100):
        b = many.read_batch(max_events=37)
        if b.watermark is not None:
            watermarks.append(b.watermark)
        if not len(b) and b.watermark is None:
            break
        assert len(b) <= 37 and b.checkpoint_name is None
        assert b.offset.dtype == np.int64 and b.ingestion_time.dtype == np.int64
        t = b.to_arrow()
        assert t.num_rows == len(b)
        assert t.schema.field("payload").type == pa.binary()
        for i in range(len(b)):
            et = int(b.event_time[i])
            rows.append(
                (
                    b.segments[b.segment_index[i]],
                    int(b.offset[i]),
                    b.routing_key[i].as_py(),
                    b.payload[i].as_py(),
                    None if et == NO_EVENT_TIME else et,
                    int(b.ingestion_time[i]),
                )
            )
            assert t.column("event_time")[i].as_py() == (None if et == NO_EVENT_TIME else et)
    assert sorted(rows, key=str) == sorted(singles, key=str)
    assert len(rows) == 300
    assert watermarks == sorted(set(watermarks))
    for seg in {r[0] for r in rows}:  # segment order is kept within each segment
        offs = [r[1] for r in rows if r[0] == seg]
        assert offs == sorted(offs)


def test_batches_from_several_segments_are_the_same_through_the_merge_kernel(
    clock: ManualClock, client: SegmentStoreClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_batch`` merges blocks of several segments in one kernel call once the kernels are
    loaded: the same batches (slices, order, columns, watermarks) as its Python path."""
    client.create_stream(STREAM, 3)
    segs = [s.name for s in client.get_stream(STREAM).active_segments]
    for i in range(240):  # ingestion times interleave across the segments, some shared
        clock.advance(i % 3)
        et = None if i % 5 == 0 else 1_000 + i
        client.append(segs[(i * 7) % 3], encode_event(f"k\u00e9{i % 11}", f"p{i}".encode() * (i % 4), et))
    cfg = ReaderGroupConfig((STREAM,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=0)
    events._kernels()  # loaded: the merge kernel is used
    assert reader_module._merge_kernel() is not None

    def batches(group: str, kernel: bool) -> list[tuple[Any, ...]]:
        if not kernel:
            monkeypatch.setattr(reader_module, "_merge_kernel", lambda: None)
        r = ReaderGroup(group, cfg, client, clock).create_reader("r")
        out = []
        for _ in range(100):
            b = r.read_batch(max_events=37)
            if not len(b) and b.watermark is None:
                break
            out.append(
                (
                    b.watermark,
                    b.segments,
                    b.segment_index.dtype,
                    b.segment_index.tolist(),
                    *(c.tolist() for c in (b.offset, b.length, b.event_time, b.ingestion_time)),
                    b.routing_key.type,
                    b.routing_key.to_pylist(),
                    b.payload.type,
                    b.payload.to_pylist(),
                )
            )
        monkeypatch.undo()
        return out

    merged = batches("merged", kernel=True)
    assert sum(len(b[3]) for b in merged) == 240 and max(len(b[1]) for b in merged) == 3
    assert merged == batches("python", kernel=False)


def test_frames_split_across_reads_and_frames_larger_than_the_read_buffer(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock, read_buffer_bytes=64)
    seg = client.get_stream(STREAM).active_segments[0].name
    payloads = [bytes([i]) * n for i, n in enumerate([1, 30, 200, 5, 64, 1000, 2])]
    for p in payloads:
        clock.advance(1)
        client.append(seg, encode_event("key", p))
    reader = group.create_reader("r")
    events = [r for r in _drain(reader) if r.is_event]
    assert [r.payload for r in events] == payloads
    for r in events:
        assert r.ingestion_time == client.ingestion_time_at(seg, r.position)
    assert reader.get_position().as_dict() == {seg: client.get_info(seg).length}


def test_writer_markers_are_skipped_and_the_position_moves_past_them(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock)
    seg = client.get_stream(STREAM).active_segments[0].name
    frames = [
        encode_event("a", b"1"),
        encode_event("w", b"", 5, kind=KIND_WATERMARK),
        encode_event("a", b"2"),
        encode_event("i", b"", None, kind=KIND_IDLE),
    ]
    for f in frames:
        clock.advance(1)
        client.append(seg, f)
    reader = group.create_reader("r")
    assert [r.payload for r in _drain(reader) if r.is_event] == [b"1", b"2"]
    assert reader.get_position().as_dict() == {seg: client.get_info(seg).length}


def test_a_read_with_timeout_waits_for_data_appended_meanwhile(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock, time_domain=TimeDomain.PROCESSING_TIME)
    reader = group.create_reader("r")
    assert reader.read_next_event(timeout_ms=10).kind is ReadKind.EMPTY
    seg = client.get_stream(STREAM).active_segments[0].name
    timer = threading.Timer(0.05, lambda: client.append(seg, encode_event("k", b"late")))
    timer.start()
    try:
        r = reader.read_next_event(timeout_ms=30_000)
    finally:
        timer.join()
    assert r.is_event and r.payload == b"late"


def test_get_position_and_close_hand_back_the_acknowledged_positions(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock)
    _write(client, clock, 10)
    first = group.create_reader("first")
    got: list[EventRead] = []
    while len(got) < 4:
        r = first.read_next_event()
        if r.is_event:
            got.append(r)
    seg = got[-1].segment
    assert seg is not None
    assert first.get_position().as_dict() == {seg: got[-1].end_position}
    first.close()
    first.close()  # idempotent
    with pytest.raises(ReaderNotInGroupError):
        first.read_next_event()
    second = group.create_reader("second")
    rest = [r.payload for r in _drain(second) if r.is_event]
    assert rest == [f"k-{i}".encode() for i in range(4, 10)]


def test_a_reader_declared_offline_fails_on_its_next_read(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    group = _group(client, clock)
    _write(client, clock, 3)
    reader = group.create_reader("r")
    assert reader.read_next_event().kind in (ReadKind.EVENT, ReadKind.WATERMARK)
    group.reader_offline("r")
    with pytest.raises(ReaderNotInGroupError):
        reader.read_next_event()
    with pytest.raises(ReaderNotInGroupError):
        group.reader_offline("r")


def test_late_event_time_counts_use_the_emitted_watermark_minus_the_lag(
    clock: ManualClock, client: SegmentStoreClient
) -> None:
    # reports only when caught up: the emitted watermark stays put while the four events are delivered
    group = _group(client, clock, max_event_time_lag_ms=10, position_report_interval_ms=10**9)
    seg = client.get_stream(STREAM).active_segments[0].name
    clock.advance(100)
    client.append(seg, encode_event("k", b"a", event_time=clock.now() - 50))
    reader = group.create_reader("r")
    _drain(reader)
    wm = reader.stats.last_watermark
    before = reader.stats.late_events
    assert wm is not None
    clock.advance(100)
    late = [wm - 10, wm - 11]  # the event-time watermark is wm - 10: both are late
    on_time = [wm - 9, clock.now()]
    for et in late + on_time:
        client.append(seg, encode_event("k", b"b", event_time=et))
    for r in _drain(reader):
        if r.is_watermark:
            break
    assert reader.stats.late_events == before + 2
    assert reader.stats.late_ingestion_events == 0


def test_bad_read_arguments_are_named(clock: ManualClock, client: SegmentStoreClient) -> None:
    reader = _group(client, clock).create_reader("r")
    with pytest.raises(InvalidReadError, match="max_events"):
        reader.read_batch(max_events=0)
    with pytest.raises(InvalidReadError, match="timeout_ms"):
        reader.read_next_event(timeout_ms=-1)


def test_eventread_kinds() -> None:
    w = EventRead(ReadKind.WATERMARK, 0, watermark=5)
    assert w.is_watermark and not w.is_event and not w.is_checkpoint and w.watermark == 5
    c = EventRead(ReadKind.CHECKPOINT, 3, checkpoint_name="c")
    assert c.is_checkpoint and c.checkpoint_name == "c" and c.epoch == 3
    assert not EventRead(ReadKind.EMPTY, 0).is_event


def test_a_store_with_a_short_lag_still_never_delivers_below_a_watermark(
    clock: ManualClock,
) -> None:
    store = SegmentStore(clock=clock, config=StoreConfig(max_watermark_lag_ms=1, polling_period_ms=1))
    client = EmbeddedClient(store)
    try:
        group = _group(client, clock, segments=2)
        reader = group.create_reader("r")
        last = None
        for i in range(200):
            clock.advance(1)
            if i % 3 == 0:
                store.advance_idle_watermarks()
            if i % 2 == 0:
                _write(client, clock, 1, key=f"x{i}", step=0)
            r = reader.read_next_event()
            if r.is_watermark:
                last = r.watermark
            elif r.is_event:
                assert last is None or (r.ingestion_time is not None and r.ingestion_time > last)
    finally:
        store.close()


def test_check_catches_a_reader_out_of_step_with_its_segments_and_group(
    clock: ManualClock, store: SegmentStore
) -> None:
    client = EmbeddedClient(store)
    group = _group(client, clock, segments=2, read_buffer_bytes=64)
    _write(client, clock, 30)
    reader = group.create_reader("r")
    for _ in range(7):  # mid-block: events buffered in both segments
        reader.read_next_event()
        reader._check()
    s = next(s for s in reader._segs.values() if s.n)
    s.idx = s.n + 1
    with pytest.raises(AssertionError, match=r"(?s)outside the block.*SegmentInput state: .*idx="):
        reader._check()
    s.idx = 0
    s.nxt_wm = s.nxt_wm.copy()
    s.nxt_wm[0] -= 10
    with pytest.raises(AssertionError, match="watermark after an event"):
        reader._check()
    s.nxt_wm[0] += 10
    reader._check()
    group.state.model.readers["r"].segments.discard(s.name)  # the group took it away behind the reader's back
    with pytest.raises(AssertionError, match=r"(?s)the group assigns it.*EventReader state: "):
        reader._check()
