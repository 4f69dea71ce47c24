"""A reader owning several segments reads them all in one store call per poll (issue 36).

Store calls are counted on the client the group uses, embedded and remote, on a manual
clock (a poll is one instant). A poll's call with new data in every segment is one
``read_many`` (the blocks, the watermarks at their events and the tails together),
never a ``read``, ``watermarks_at`` or ``wait_any`` per segment; a second look at the
tails within one call at one instant is not made (a later call looks again, unless the embedded
store's change count says nothing changed since a look at the same segments); the events
and watermarks delivered are the same as with a ``read`` and a ``watermarks_at`` per
segment (``batched_reads`` off).
"""

from __future__ import annotations

import importlib
import random
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.perf.call_counts import count_calls, uncount
from readergroup.config import ReaderGroupConfig, TimeDomain
from readergroup.format import events as event_format
from readergroup.format.events import NO_EVENT_TIME
from readergroup.reading.block_merge import merge_kernel
from readergroup.reading.group import ReaderGroup
from readergroup.reading.reader import _NOT_LOOKED, EventBatch, EventReader, ReadKind
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore, StoreConfig, TickingClock
from segmentstore.client import EmbeddedClient, SegmentStoreClient

START_MS = 1_000_000
S = "test/batched"
_SEGMENTS = 8


@pytest.fixture
def manual(clock: ManualClock, client: SegmentStoreClient) -> tuple[ManualClock, SegmentStoreClient]:
    """The manual clock and a client of its store, embedded or remote (conftest's ``clock``, ``client``)."""
    return clock, client


def _poll(reader: EventReader) -> list[EventBatch]:
    """What the simulator's reader does each poll: batches until an empty one."""
    out = []
    while True:
        b = reader.read_batch(1000)
        out.append(b)
        if not len(b) and b.watermark is None and b.checkpoint_name is None:
            return out


def _run(
    clock: ManualClock, c: SegmentStoreClient, batched: bool
) -> tuple[list[Any], list[Counter[str]], list[int]]:
    """Three rounds of writes to every segment, each followed by a poll (the clock moved between):
    what was delivered, the store calls of each poll and its ``read_batch`` calls."""
    c.create_stream(S, _SEGMENTS)
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=50)
    reader = ReaderGroup("g", cfg, c, clock).create_reader("r")
    reader.batched_reads = batched
    writer = EventWriter(c, S)
    _poll(reader)
    seen: list[Any] = []
    calls = []
    polls = []
    for i in range(3):
        clock.advance(100)
        for k in range(64):
            writer.write_event(f"k{k}", b"x%d" % i)
        writer.flush()
        clock.advance(100)
        counted = count_calls(c)
        batches = _poll(reader)
        polls.append(len(batches))
        for b in batches:
            cols = (b.offset.tolist(), b.ingestion_time.tolist())
            seen.append((b.watermark, b.checkpoint_name, b.segments, *cols))
        calls.append(Counter(counted))
        uncount(c)
    return seen, calls, polls


def test_a_poll_reads_every_segment_in_one_store_call(manual: tuple[ManualClock, SegmentStoreClient]) -> None:
    clock, c = manual
    seen, calls, polls = _run(clock, c, batched=True)
    assert any(len(offsets) for *_, offsets, _ in seen)  # events came
    for n, batches in zip(calls, polls, strict=True):
        # every segment's block, its events' watermarks and the tails in one call; over the wire each
        # later read_batch call of the poll looks at the tails once more (an event may have come
        # since); embedded, a call after which the store's change count stood still does not
        assert batches >= 2
        if isinstance(c, EmbeddedClient):  # its answers in columns (``read_packed``)
            assert n["read_many"] == 0 and 1 <= n["read_packed"] < batches, (n, batches)
        else:
            assert 1 <= n["read_many"] <= batches, (n, batches)
        assert n["read"] == n["watermarks_at"] == n["wait_any"] == n["watermark_at"] == 0, n


def test_batched_reads_deliver_what_a_read_per_segment_does() -> None:
    runs = []
    for batched in (True, False):
        clock = ManualClock(START_MS)
        with SegmentStore(clock=clock) as store:
            seen, calls, _ = _run(clock, EmbeddedClient(store), batched)
        runs.append(seen)
        if not batched:
            assert all(n["read"] >= _SEGMENTS and n["watermarks_at"] >= _SEGMENTS for n in calls)
    assert runs[0] == runs[1]


def test_a_reader_holding_more_segments_than_a_read_takes_reads_them_in_parts_in_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More segments than one ``read_packed`` takes (``MAX_READ_MANY`` requests; 4,096 in the store, 4
    here, so 8 segments make three parts): each part is a packed read (no ``read_many`` of answer
    objects), and the reader delivers what a read per segment delivers."""
    from readergroup.reading import reader_blocks

    runs = []
    for batched in (True, False):
        clock = ManualClock(START_MS)
        with SegmentStore(clock=clock) as store, monkeypatch.context() as mp:
            mp.setattr(reader_blocks, "MAX_READ_MANY", 4)
            seen, calls, _ = _run(clock, EmbeddedClient(store), batched)
        runs.append(seen)
        if batched:
            assert all(n["read_many"] == 0 and n["read_packed"] >= 3 for n in calls), calls
    assert any(len(offsets) for *_, offsets, _ in runs[0])
    assert runs[0] == runs[1]


def test_an_idle_poll_is_one_look_at_the_tails(manual: tuple[ManualClock, SegmentStoreClient]) -> None:
    """Nothing new and nothing to report: a poll is one ``read_many`` (the tails and the state log),
    no append to the group's state, and an empty batch; embedded, where the store's change count
    says nothing changed since the last look, not even that."""
    clock, c = manual
    c.create_stream(S, _SEGMENTS)
    cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=50)
    reader = ReaderGroup("g", cfg, c, clock).create_reader("r")
    for _ in range(3):  # joined, holds every segment, reported, caught up
        clock.advance(100)
        _poll(reader)
    for _ in range(3):
        clock.advance(100)
        calls = count_calls(c)
        batches = _poll(reader)
        assert len(batches) == 1 and not len(batches[0]) and batches[0].watermark is None
        assert dict(calls) == ({} if isinstance(c, EmbeddedClient) else {"read_many": 1})
        uncount(c)


def test_an_unchanged_store_is_looked_at_again_for_a_segment_not_known_at_its_tail() -> None:
    """Embedded, a look is skipped while the store's change count stands where a look found every
    segment at its tail; a segment not known to be at its tail (as after a read that stopped short of
    it) is looked at again, though nothing changed."""
    clock = ManualClock(START_MS)
    with SegmentStore(clock=clock) as store:
        c = EmbeddedClient(store)
        c.create_stream(S, _SEGMENTS)
        cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=50)
        reader = ReaderGroup("g", cfg, c, clock).create_reader("r")
        for _ in range(4):  # joined, holds every segment, reported, caught up: idle polls make no call
            clock.advance(100)
            _poll(reader)
        for short in (False, True):  # (a look of its own: a poll's refill would read such a segment first)
            clock.advance(100)
            if short:
                next(iter(reader._segs.values())).at_tail = False
            reader._looked = _NOT_LOOKED
            calls = count_calls(c)
            assert reader._ready_tails(0) == []
            assert dict(calls) == ({"read_packed": 1} if short else {}), (short, calls)
            uncount(c)


def test_blocks_past_a_full_reply_are_read_in_further_calls() -> None:
    """Segments with more data than one ``read_many`` reply holds: the rest is asked again, and
    the reader delivers what a read per segment delivers."""
    runs = []
    for batched in (True, False):
        clock = ManualClock(START_MS)
        with SegmentStore(clock=clock) as store:
            c = EmbeddedClient(store)
            c.create_stream(S, 4)
            writer = EventWriter(c, S)
            for k in range(4_000):
                writer.write_event(f"k{k}", bytes(700))  # ~2.9 MB over 4 segments
            writer.flush()
            clock.advance(100)
            cfg = ReaderGroupConfig((S,), time_domain=TimeDomain.INGESTION_TIME)
            reader = ReaderGroup("g", cfg, c, clock).create_reader("r")
            reader.batched_reads = batched
            calls = count_calls(c)
            got = [(b.segments, b.offset.tolist(), b.ingestion_time.tolist()) for b in _poll(reader)]
            runs.append(got)
            assert sum(len(offsets) for _, offsets, _ in got) == 4_000
            if batched:
                # 4 blocks of ~0.7 MB, 2 MiB a reply: the packed answer leaves some unread, asked again
                assert calls["read_packed"] >= 1 and calls["read_many"] >= 1 and calls["read"] == 0
    assert runs[0] == runs[1]


def test_a_reader_sees_writes_made_after_its_last_look_at_the_same_instant(
    manual: tuple[ManualClock, SegmentStoreClient],
) -> None:
    """Read your own writes after ``flush()``: a look found nothing, then an event came at the same
    clock instant; the next read call looks again (a look is skipped only within one call)."""
    clock, client = manual
    client.create_stream(S, _SEGMENTS)
    group = ReaderGroup("g", ReaderGroupConfig((S,)), client, clock)
    reader = group.create_reader("r")
    writer = EventWriter(client, S, writer_id=1, clock=clock)
    writer.write_event("k0", b"first", event_time=START_MS)
    writer.flush()
    assert _payloads(reader.read_batch()) == [b"first"]
    assert len(reader.read_batch()) == 0  # at its tails, at this instant
    writer.write_event("k1", b"second", event_time=START_MS)
    writer.flush()  # same instant: the clock has not moved
    assert _payloads(reader.read_batch()) == [b"second"]
    writer.write_event("k2", b"third", event_time=START_MS)
    writer.flush()
    events = []
    for _ in range(5):
        r = reader.read_next_event(0)
        if r.is_event:
            events.append(r.payload)
    assert events == [b"third"]
    writer.close()
    reader.close()


def test_a_segment_looked_at_before_a_write_is_looked_at_again_once_its_block_is_delivered(
    manual: tuple[ManualClock, SegmentStoreClient],
) -> None:
    """A look skipped because the store did not change covers only the segments that look saw: ``a``
    was still delivering a block read before an event came, the look after that event (at a report)
    saw only ``b``; once ``a``'s block is delivered the reader looks at ``a`` and finds the event."""
    clock, client = manual
    client.create_stream("test/a", 1)
    client.create_stream("test/b", 1)
    cfg = ReaderGroupConfig(("test/a", "test/b"), position_report_interval_ms=50)
    reader = ReaderGroup("g", cfg, client, clock).create_reader("r")
    a, b = EventWriter(client, "test/a", clock=clock), EventWriter(client, "test/b", clock=clock)
    for i in range(6):
        a.write_event("k", b"a%d" % i, event_time=START_MS)
    a.flush()
    clock.advance(1)
    b.write_event("k", b"b0", event_time=START_MS)
    b.flush()
    got = _payloads(reader.read_batch(2))  # both blocks read (one look); a's 6 events, b's 1 buffered
    clock.advance(1)
    a.write_event("k", b"late", event_time=START_MS)  # a's block was read before this
    a.flush()
    clock.advance(100)  # a report is due: its sync looks at the tails, a's block still being delivered
    for _ in range(20):
        batch = reader.read_batch(1)
        if not len(batch) and batch.watermark is None:
            break
        got += _payloads(batch)
    assert got == [b"a0", b"a1", b"a2", b"a3", b"a4", b"a5", b"b0", b"late"]
    reader._check()
    a.close()
    b.close()
    reader.close()


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 1), st.integers(0, 7), st.integers(1, 6)),
        st.tuples(st.just("tick"), st.sampled_from([0, 1, 5, 25, 60])),  # (reports every 20 ms)
        st.tuples(st.just("advance")),
        st.tuples(st.just("batch"), st.integers(1, 3)),
        st.tuples(st.just("event")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_OPS, st.sampled_from([64, 200, 1 << 20]), st.sampled_from(list(TimeDomain)), st.sampled_from([0, 1]))
def test_an_empty_read_means_every_event_written_before_it_was_delivered(
    ops: list[tuple[Any, ...]], buffer: int, domain: TimeDomain, tick: int
) -> None:
    """Writes (flushed) at the same instant or later, clock steps, advancer passes, batch and single
    reads in any order: whenever the group's one reader answers "nothing", it has delivered every
    event written so far; the looks it skips (the embedded store's change count stood still) never
    hide one. Small read buffers leave blocks short of the tail; every time domain (a batch with a
    watermark alone says nothing of what is left); a clock that only moves when told, or also ticks
    at every reading. The case a careless skip hides, a segment still delivering a block while the
    look after a write passes it by, is pinned by
    ``test_a_segment_looked_at_before_a_write_is_looked_at_again_once_its_block_is_delivered``:
    this property finds it only in thousands of examples (once in 3,000 while it was written)."""
    clock = TickingClock(START_MS, tick)
    with SegmentStore(
        clock=clock, config=StoreConfig(max_watermark_lag_ms=40, advancer_thread=False)
    ) as store:
        c = EmbeddedClient(store)
        streams = ("test/one", "test/three")
        c.create_stream(streams[0], 1)
        c.create_stream(streams[1], 3)
        cfg = ReaderGroupConfig(
            streams, time_domain=domain, position_report_interval_ms=20, read_buffer_bytes=buffer
        )
        reader = ReaderGroup("g", cfg, c, clock).create_reader("r")
        writers = [EventWriter(c, s, clock=clock) for s in streams]
        written: list[bytes] = []
        got: list[bytes] = []
        for op in ops:
            if op[0] == "write":
                _, i, key, k = op
                for _ in range(k):
                    written.append(b"e%d" % len(written))
                    writers[i].write_event(f"k{key}", written[-1])
                writers[i].flush()
            elif op[0] == "tick":
                clock.advance(op[1])
            elif op[0] == "advance":
                store.advance_idle_watermarks()
            elif op[0] == "batch":
                b = reader.read_batch(op[1])
                got += _payloads(b)
                if not len(b) and b.watermark is None and b.checkpoint_name is None:
                    assert sorted(got) == sorted(written)
            else:
                r = reader.read_next_event(0)
                if r.is_event:
                    assert r.payload is not None
                    got.append(r.payload)
                elif r.kind is ReadKind.EMPTY:
                    assert sorted(got) == sorted(written)
            reader._check()
        assert len(got) == len(set(got))  # none twice


def _payloads(batch: EventBatch) -> list[bytes]:
    return [bytes(p) for p in batch.payload.to_pylist()]


def test_late_counts_of_batches_merged_from_several_segments_follow_the_watermarks_before_them(
    manual: tuple[ManualClock, SegmentStoreClient],
) -> None:
    """A batch merged from several segments' blocks (one kernel call) counts its late events as the
    watermark emitted before it says: by ingestion time (at or below it) and by event time (at or
    below it minus the lag; events without an event time never)."""
    clock, c = manual
    importlib.import_module("readergroup.format._frame_kernels")  # numba loaded: batches merge in the kernel
    assert merge_kernel() is not None
    c.create_stream(S, _SEGMENTS)
    lag = 10
    cfg = ReaderGroupConfig(
        (S,), time_domain=TimeDomain.INGESTION_TIME, position_report_interval_ms=50, max_event_time_lag_ms=lag
    )
    reader = ReaderGroup("g", cfg, c, clock).create_reader("r")
    writer = EventWriter(c, S)
    rng = random.Random(5)
    emitted = None
    late = late_ingestion = merged = 0
    for _ in range(20):
        clock.advance(40)
        for k in range(48):
            et = None if k % 7 == 0 else clock.now() - rng.randrange(0, 120)
            writer.write_event(f"k{k}", b"x", event_time=et)
        writer.flush()
        clock.advance(40)
        for b in _poll(reader):
            if b.watermark is not None:
                emitted = b.watermark
            merged += len(b.segments) > 1
            if emitted is not None and len(b):
                late_ingestion += int(np.count_nonzero(b.ingestion_time <= emitted))
                et = b.event_time
                late += int(np.count_nonzero((et != NO_EVENT_TIME) & (et <= emitted - lag)))
    assert merged and late  # batches of several segments came, and late events among them
    assert reader.stats.late_events == late
    assert reader.stats.late_ingestion_events == late_ingestion


_PACKED_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.lists(st.integers(0, 7), min_size=1, max_size=4),
            st.integers(1, 6),
            st.sampled_from([2, 40, 300]),
        ),
        st.tuples(st.just("tick"), st.sampled_from([0, 1, 25, 60])),
        st.tuples(st.just("advance")),
        st.tuples(st.just("batch"), st.integers(1, 50)),
        st.tuples(st.just("event")),
        st.tuples(st.just("scale"), st.integers(0, 7)),
        st.tuples(st.just("truncate"), st.integers(0, 7)),
    ),
    max_size=50,
)


def _replay(ops: list[tuple[Any, ...]], buffer: int, packed: bool) -> list[Any]:
    """``ops`` against a fresh embedded store and one reader reading packed answers (``read_packed``)
    or ``read_many``'s; every result it returned, and its positions at the end."""
    clock = ManualClock(START_MS)  # (one that ticks at every reading ticks for the writer's thread too)
    out: list[Any] = []
    with SegmentStore(
        clock=clock, config=StoreConfig(max_watermark_lag_ms=40, advancer_thread=False)
    ) as store:
        c = EmbeddedClient(store)
        c.create_stream(S, 3)
        cfg = ReaderGroupConfig((S,), position_report_interval_ms=20, read_buffer_bytes=buffer)
        reader = ReaderGroup("g", cfg, c, clock).create_reader("r")
        reader._packed = packed
        writer = EventWriter(c, S, clock=clock)
        for op in ops:
            active = c.get_stream(S).active_segments
            if op[0] == "write":
                _, keys, k, size = op
                for key in keys:
                    for _ in range(k):
                        writer.write_event(f"k{key}", bytes(size))
                writer.flush()
            elif op[0] == "tick":
                clock.advance(op[1])
            elif op[0] == "advance":
                store.advance_idle_watermarks()
            elif op[0] == "scale" and len(active) < 8:
                seg = active[op[1] % len(active)]
                mid = (seg.key_low + seg.key_high) / 2
                c.scale_stream(S, [seg.name], [(seg.key_low, mid), (mid, seg.key_high)])
            elif op[0] == "truncate":  # what a reader has not read yet is gone: it moves on
                seg = active[op[1] % len(active)]
                c.truncate(seg.name, c.get_info(seg.name).length)
            elif op[0] == "batch":
                b = reader.read_batch(op[1])
                cols = (b.offset, b.length, b.event_time, b.ingestion_time, b.segment_index)
                out.append((b.watermark, b.checkpoint_name, b.segments, *(a.tolist() for a in cols)))
                out.append((b.routing_key.to_pylist(), b.payload.to_pylist()))
            elif op[0] == "event":
                r = reader.read_next_event(0)
                out.append(tuple(r))
            reader._check()
            out.append(reader.get_position())
        out.append(reader.stats)
        out.append(reader.get_position())
        writer.close()
        reader.close()
    return out


@settings(max_examples=200, deadline=None)
@given(_PACKED_OPS, st.sampled_from([64, 200, 1 << 20]))
def test_a_reader_reading_packed_answers_returns_what_it_returns_from_read_many(
    ops: list[tuple[Any, ...]], buffer: int
) -> None:
    """Over an embedded store a reader takes its looks' answers in columns (``read_packed``: no answer
    object per segment, the blocks decoded side by side from one buffer); with ``read_many``'s answers
    instead it returns exactly the same: writes of small and large events (larger than a 64-byte
    buffer: the packed decode declines them), seals and successors, truncations under the reader
    (its read fails, it moves on), advancer passes, batch and single reads, clock steps; and its
    acknowledged positions after each step are the same."""
    event_format._kernels()  # loaded (as a reader's first large block loads them): blocks decode together
    assert _replay(ops, buffer, True) == _replay(ops, buffer, False)
