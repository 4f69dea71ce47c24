"""The Spark source's offset planning, driven through an embedded client (no Spark needed).

What a query relies on: micro-batches cover every event exactly once, in per-segment
order, across scaling and new streams; limits are honoured at frame boundaries; the
offset's watermark is the store's (min over the frontier) and never decreases; a
bounded run stops at its target; lost data fails or is skipped as configured.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from readergroup.errors import FrameFormatError
from readergroup.format.events import encode_event
from readergroup.writing.writer import EventWriter
from segmentstore import ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient, RemoteClient
from segmentstore.errors import ConnectionLostError, ReadTimeoutError, StoreClosedError
from segmentstore.net.server import SegmentStoreServer
from segmentstore.results import SegmentRead
from spark_source.errors import DataLossError
from spark_source.offsets import SourceOffset
from spark_source.options import parse_source_options
from spark_source.planner import NO_WATERMARK, READ_ALL, Limit, Planner, water_fill
from spark_source.reading import BatchMeta, read_range

START = 1_000_000


def make(clock: ManualClock | None = None) -> tuple[ManualClock, SegmentStore, EmbeddedClient]:
    clock = clock or ManualClock(START)
    store = SegmentStore(clock=clock)
    return clock, store, EmbeddedClient(store)


def planner(client: EmbeddedClient, stream: str = "s/a", **extra: str) -> Planner:
    opts = parse_source_options(
        {"endpoint": "127.0.0.1:1", "stream": stream, "startingPosition": "earliest", **extra}, streaming=True
    )
    return Planner(client, opts)


def write(
    clock: ManualClock, client: EmbeddedClient, stream: str, keys: list[str], tag: str = ""
) -> list[bytes]:
    payloads = []
    with EventWriter(client, stream) as w:
        for i, k in enumerate(keys):
            clock.advance(1)
            p = f"{tag}{k}-{i}".encode()
            w.write_event(k, p, clock.now() - 5)
            payloads.append(p)
    return payloads


def drain(
    p: Planner,
    client: EmbeddedClient,
    start: SourceOffset,
    limit: Limit = READ_ALL,
    target: SourceOffset | None = None,
) -> tuple[SourceOffset, list[list[tuple[str, int, bytes]]], list[int]]:
    """next_offset until nothing is new: (last offset, events per batch, watermark per batch)."""
    batches: list[list[tuple[str, int, bytes]]] = []
    marks: list[int] = []
    for _ in range(10_000):
        end = p.next_offset(start, limit, target)
        if end is start:
            return start, batches, marks
        events: list[tuple[str, int, bytes]] = []
        for r in p.ranges(start, end):
            for b in read_range(client, r.stream, r.segment, r.begin, r.end, BatchMeta(end.watermark, 0)):
                d = b.to_pydict()
                events.extend(zip(d["segment"], d["offset"], d["payload"], strict=True))
        batches.append(events)
        marks.append(end.watermark)
        start = end
    raise AssertionError("planning did not converge")


def payloads(batches: list[list[tuple[str, int, bytes]]]) -> list[bytes]:
    return [e[2] for b in batches for e in b]


def test_every_event_exactly_once_with_an_event_limit() -> None:
    clock, _, c = make()
    c.create_stream("s/a", 3)
    written = write(clock, c, "s/a", [f"k{i % 11}" for i in range(200)])
    p = planner(c)
    _, batches, marks = drain(p, c, p.initial_offset(), Limit(max_events=25))
    assert batches[0] == []  # the first batch only brings Spark the starting watermark
    assert all(0 < len(b) <= 25 for b in batches[1:])
    assert Counter(payloads(batches)) == Counter(written)
    assert marks == sorted(marks)
    assert len(batches) == 1 + 8  # 200 / 25: the budget is shared, never wasted


def test_byte_limit_ends_at_frame_boundaries_and_always_progresses() -> None:
    _, _, c = make()
    c.create_stream("s/a", 2)
    with EventWriter(c, "s/a") as w:
        for i in range(30):
            w.write_event(f"k{i}", bytes(300 if i == 7 else 20), None)
    p = planner(c)
    start = p.next_offset(p.initial_offset(), READ_ALL, None)  # the watermark-only first batch
    sizes = []
    total = 0
    for _ in range(100):
        end = p.next_offset(start, Limit(max_bytes=120), None)
        if end is start:
            break
        size = sum(r.end - r.begin for r in p.ranges(start, end))
        n = sum(
            len(b)
            for r in p.ranges(start, end)
            for b in read_range(c, r.stream, r.segment, r.begin, r.end, BatchMeta(0, 0))
        )
        assert n >= 1
        total += n
        sizes.append(size)
        start = end
    assert total == 30
    assert [s for s in sizes if s > 120] and all(
        s <= 120 or s < 400 for s in sizes
    )  # only the big frame alone


def test_scaling_successors_join_after_all_predecessors_and_keep_key_order() -> None:
    clock, _, c = make()
    c.create_stream("s/a", 2)
    keys = [f"k{i % 7}" for i in range(60)]
    written = write(clock, c, "s/a", keys, "a")
    p = planner(c)
    start = p.initial_offset()
    start, first, _ = drain(p, c, start)
    s0, _ = c.get_stream("s/a").active_segments
    c.scale_stream("s/a", [s0.name], [(s0.key_low, 0.25), (0.25, s0.key_high)])  # split
    written += write(clock, c, "s/a", keys, "b")
    a, b = c.get_stream("s/a").active_segments[:2]
    c.scale_stream("s/a", [a.name, b.name], [(a.key_low, b.key_high)])  # merge them back
    written += write(clock, c, "s/a", keys, "c")
    end, rest, marks = drain(p, c, start)
    got = payloads(first) + payloads(rest)
    assert Counter(got) == Counter(written)
    for k in set(keys):  # per routing key, the events come in the order they were written
        mine = [x for x in got if x.decode().split("-")[0][1:] == k]
        assert mine == [x for x in written if x.decode().split("-")[0][1:] == k]
    assert marks == sorted(marks)
    active = {s.name for s in c.get_stream("s/a").active_segments}
    assert set(end.streams["s/a"].positions) - end.streams["s/a"].done == active


def test_a_merge_successor_waits_for_every_predecessor() -> None:
    clock, _, c = make()
    c.create_stream("s/a", 2)
    write(clock, c, "s/a", [f"k{i}" for i in range(20)])
    s0, s1 = c.get_stream("s/a").active_segments
    c.scale_stream("s/a", [s0.name, s1.name], [(0.0, 1.0)])  # merge
    p = planner(c)
    start = p.initial_offset()
    succ = c.get_stream("s/a").active_segments[0].name
    one = start
    for _ in range(40):  # one frame per batch: the predecessors finish one after the other
        one = p.next_offset(one, Limit(max_events=1), None)
        positions = one.streams["s/a"].positions
        if succ in positions:
            info0, info1 = c.get_info(s0.name), c.get_info(s1.name)
            assert positions[s0.name] == info0.length and positions[s1.name] == info1.length
            break
    else:
        pytest.fail("the successor never joined")


def test_watermark_is_the_min_over_the_frontier_and_idle_batches_carry_it() -> None:
    clock, store, c = make()
    c.create_stream("s/a", 2)
    p = planner(c)
    start = p.initial_offset()
    assert start.watermark == NO_WATERMARK
    write(clock, c, "s/a", ["x"] * 3)
    first = p.next_offset(start, READ_ALL, None)  # reads nothing, brings Spark the starting watermark
    assert (
        p.ranges(start, first) == []
        and first.watermark == c.get_stream("s/a").active_segments[0].creation_time - 1
    )
    end = p.next_offset(first, READ_ALL, None)
    segs = [s.name for s in c.get_stream("s/a").active_segments]
    expected = min(c.watermark_at(s, end.streams["s/a"].positions[s]) for s in segs)
    assert end.watermark == expected
    assert p.next_offset(end, READ_ALL, None) is end  # nothing new: no batch
    clock.advance(60_000)
    store.advance_idle_watermarks()
    idle = p.next_offset(end, READ_ALL, None)
    assert idle is not end and idle.watermark > end.watermark and p.ranges(end, idle) == []
    quiet = planner(c, emitWatermarkRows="false")
    assert quiet.next_offset(end, READ_ALL, None) is end  # without watermark rows, time alone is no batch


def test_a_target_bounds_the_run_and_it_terminates() -> None:
    clock, _, c = make()
    c.create_stream("s/a", 2)
    before = write(clock, c, "s/a", [f"k{i}" for i in range(40)], "a")
    p = planner(c)
    target = p.target_offset()
    after = write(clock, c, "s/a", [f"k{i}" for i in range(40)], "b")
    s0 = c.get_stream("s/a").active_segments[0]
    c.scale_stream("s/a", [s0.name], [(s0.key_low, 0.1), (0.1, s0.key_high)])
    write(clock, c, "s/a", [f"k{i}" for i in range(40)], "c")
    end, batches, marks = drain(p, c, p.initial_offset(), Limit(max_events=7), target)
    assert Counter(payloads(batches)) == Counter(before)
    assert max(marks) <= target.watermark
    _, more, _ = drain(p, c, end)  # an unbounded run goes on from there
    assert Counter(payloads(more)) == Counter(after) + Counter(
        x for x in payloads(more) if x.startswith(b"c")
    )


def test_new_streams_matching_a_pattern_join_at_their_head() -> None:
    clock, _, c = make()
    c.create_stream("iot/a", 1)
    first = write(clock, c, "iot/a", ["x"] * 5)
    p = planner(c, stream="iot/*")
    start, batches, _ = drain(p, c, p.initial_offset())
    c.create_stream("iot/b", 2)
    c.create_stream("other/c", 1)
    second = write(clock, c, "iot/b", ["y", "z"] * 4)
    write(clock, c, "other/c", ["w"])
    end, more, _ = drain(p, c, start)
    assert Counter(payloads(batches)) == Counter(first) and Counter(payloads(more)) == Counter(second)
    assert set(end.streams) == {"iot/a", "iot/b"}


def test_latest_starts_after_what_is_there() -> None:
    clock, _, c = make()
    c.create_stream("s/a", 2)
    write(clock, c, "s/a", ["x"] * 5, "old")
    p = planner(c, startingPosition="latest")
    start = p.initial_offset()
    new = write(clock, c, "s/a", ["x", "y"] * 3, "new")
    _, batches, _ = drain(p, c, start)
    assert Counter(payloads(batches)) == Counter(new)


def test_truncated_data_fails_or_is_skipped() -> None:
    _, _, c = make()
    c.create_stream("s/a", 1)
    frames = [encode_event("k", bytes([i]) * 10, None) for i in range(10)]
    seg = c.get_stream("s/a").active_segments[0].name
    for f in frames:
        c.append(seg, f)
    p = planner(c)
    start = p.initial_offset()
    cut = sum(len(f) for f in frames[:4])
    c.truncate(seg, cut)
    with pytest.raises(DataLossError, match=rf"{seg}.*truncated at {cut}.*failOnDataLoss"):
        p.next_offset(start, READ_ALL, None)
    warnings: list[str] = []
    lenient = Planner(
        c,
        parse_source_options(
            {"endpoint": "h:1", "stream": "s/a", "startingPosition": "earliest", "failOnDataLoss": "false"},
            streaming=True,
        ),
        warn=warnings.append,
    )
    _, batches, _ = drain(lenient, c, start)
    assert payloads(batches) == [bytes([i]) * 10 for i in range(4, 10)]
    assert len(warnings) == 1 and seg in warnings[0]


def test_a_segment_truncated_under_the_first_batch_still_bounds_its_watermark() -> None:
    """With failOnDataLoss=false the events left after a truncation are read; the watermark of the
    batch before (the query's first) must not pass them. (Before: the truncated segment was left
    out of the minimum, so its remaining events came after a watermark above them: late.)"""
    clock, _, c = make()
    c.create_stream("s/a", 2)
    old, new = (s.name for s in c.get_stream("s/a").active_segments)
    frame = encode_event("k", bytes(10), None)
    for _ in range(10):
        clock.advance(1)
        c.append(old, frame)
    clock.advance(100)
    for _ in range(3):
        clock.advance(1)
        c.append(new, frame)
    p = planner(c, failOnDataLoss="false")
    p._warn = lambda _m: None
    start = p.initial_offset()
    c.truncate(old, 4 * len(frame))
    first = p.next_offset(start, READ_ALL, None)
    end = p.next_offset(first, READ_ALL, None)
    times = [c.ingestion_time_at(r.segment, r.begin) for r in p.ranges(first, end)]
    assert len(times) == 2 and first.watermark < min(times)


@given(st.lists(st.integers(0, 1000), max_size=12), st.integers(0, 5000))
@settings(max_examples=200, deadline=None)
def test_water_fill_is_fair_and_exact(avail: list[int], budget: int) -> None:
    got = water_fill(avail, budget)
    assert all(0 <= g <= a for g, a in zip(got, avail, strict=True))
    assert sum(got) == min(budget, sum(avail))
    open_bins = [g for g, a in zip(got, avail, strict=True) if g < a]
    assert not open_bins or max(got) - min(open_bins) <= 1


class PlanningMachine(RuleBasedStateMachine):
    """Writes, scalings, idle time and micro-batches with random limits, interleaved."""

    def __init__(self) -> None:
        super().__init__()
        self.clock, self.store, self.c = make()
        self.c.create_stream("s/a", 2)
        self.p = planner(self.c)
        self.offset = self.p.initial_offset()
        self.written: list[bytes] = []
        self.read: list[bytes] = []
        self.marks: list[int] = []
        self.n = 0

    @rule(n=st.integers(1, 8))
    def write(self, n: int) -> None:
        self.n += 1
        self.written += write(self.clock, self.c, "s/a", [f"k{i}" for i in range(n)], f"{self.n}.")

    @precondition(lambda self: len(self.c.get_stream("s/a").active_segments) < 6)
    @rule(data=st.data())
    def split(self, data: st.DataObject) -> None:
        segs = self.c.get_stream("s/a").active_segments
        s = data.draw(st.sampled_from(segs))
        mid = (s.key_low + s.key_high) / 2
        self.c.scale_stream("s/a", [s.name], [(s.key_low, mid), (mid, s.key_high)])

    @precondition(lambda self: len(self.c.get_stream("s/a").active_segments) > 1)
    @rule(data=st.data())
    def merge(self, data: st.DataObject) -> None:
        segs = self.c.get_stream("s/a").active_segments
        i = data.draw(st.integers(0, len(segs) - 2))
        a, b = segs[i], segs[i + 1]
        self.c.scale_stream("s/a", [a.name, b.name], [(a.key_low, b.key_high)])

    @rule(ms=st.integers(0, 20_000))
    def idle(self, ms: int) -> None:
        self.clock.advance(ms)
        self.store.advance_idle_watermarks()

    @rule(events=st.one_of(st.none(), st.integers(1, 10)), nbytes=st.one_of(st.none(), st.integers(1, 200)))
    def batch(self, events: int | None, nbytes: int | None) -> None:
        end = self.p.next_offset(self.offset, Limit(events, nbytes), None)
        for r in self.p.ranges(self.offset, end):
            for b in read_range(self.c, r.stream, r.segment, r.begin, r.end, BatchMeta(end.watermark, 0)):
                self.read += b.column("payload").to_pylist()
        assert end.watermark >= self.offset.watermark
        self.offset = SourceOffset.from_dict(end.to_dict())  # what a restart would read back
        self.p._check()

    @invariant()
    def nothing_twice(self) -> None:
        assert len(self.read) == len(set(self.read))
        assert set(self.read) <= set(self.written)

    def teardown(self) -> None:
        _, batches, _ = drain(self.p, self.c, self.offset)
        assert Counter(self.read + payloads(batches)) == Counter(self.written)
        self.store.close()


PlanningMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)
TestPlanning = PlanningMachine.TestCase


@pytest.mark.parametrize("max_frames", [None, 1, 7_000, 39_999])
def test_frame_ends_cross_read_chunks_exactly(max_frames: int | None) -> None:
    """Boundaries found by the planner's scan are the frames' ends, also where a frame spans two reads."""
    from readergroup.format.events import decode_frames
    from spark_source.reading import SCAN_CHUNK_BYTES, frame_ends

    _, store, client = make()
    client.create_segment("seg")
    frames = [encode_event(f"k{i % 7}", bytes(i % 90), i) for i in range(40_000)]
    data = b"".join(frames)
    assert len(data) > 2 * SCAN_CHUNK_BYTES
    client.append("seg", data)
    whole, _ = decode_frames(data, 0)
    want = [f.end_offset for f in whole][: max_frames or None]
    assert frame_ends(client, "seg", 0, len(data), max_frames).tolist() == want
    # a byte budget that ends mid-frame stops at the last whole frame before it
    cut = SCAN_CHUNK_BYTES + 3
    assert frame_ends(client, "seg", 0, cut).tolist() == [
        e for e in (f.end_offset for f in whole) if e <= cut
    ]
    store.close()


class _Flaky(EmbeddedClient):
    """An embedded client whose ``get_successors`` fails transiently the first ``n`` times."""

    def __init__(self, store: SegmentStore, error: type[Exception], n: int) -> None:
        super().__init__(store)
        self.error, self.left = error, n

    def get_successors(self, segment_name: str):  # type: ignore[no-untyped-def]
        if self.left > 0:
            self.left -= 1
            raise self.error(f"injected: {segment_name}")
        return super().get_successors(segment_name)


@pytest.mark.parametrize("error", [ConnectionLostError, ReadTimeoutError, StoreClosedError])
def test_a_transient_store_error_after_a_scale_never_drops_events(error: type[Exception]) -> None:
    """The planner lets a transient error through (the batch is retried) and never caches "no successors"."""
    clock, store, _ = make()
    c = _Flaky(store, error, 0)
    c.create_stream("s/a", 1)
    (seg,) = c.get_stream("s/a").active_segments
    written = write(clock, c, "s/a", ["k1", "k2", "k3"])
    c.scale_stream("s/a", [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    written += write(clock, c, "s/a", ["k1", "k2", "k3"], tag="after-")
    p = planner(c)
    start = p.initial_offset()
    got: list[bytes] = []
    failures = 0
    c.left = 1  # the first successors call after the scale fails
    for _ in range(50):
        try:
            end = p.next_offset(start, READ_ALL, None)
        except error:
            failures += 1
            continue  # Spark retries the trigger
        if end is start:
            break
        for r in p.ranges(start, end):
            for b in read_range(c, r.stream, r.segment, r.begin, r.end, BatchMeta(end.watermark, 0)):
                got.extend(b.to_pydict()["payload"])
        start = end
    assert failures == 1
    assert Counter(got) == Counter(written), "events after the scale were dropped"
    store.close()


class _CountingReads(EmbeddedClient):
    """An embedded client that counts the bytes its ``read`` returns."""

    bytes_read = 0

    def read(self, name: str, offset: int, max_length: int, wait_ms: int = 0) -> SegmentRead:
        r = super().read(name, offset, max_length, wait_ms)
        self.bytes_read += len(r.data)
        return r


@pytest.mark.parametrize("limit", [Limit(max_events=300), Limit(max_bytes=5_000), Limit(300, 5_000)])
def test_planning_with_a_limit_moves_no_event_bytes(limit: Limit) -> None:
    """The store finds the frame boundaries (``scan_records``): the planner reads no event, only cuts."""
    clock, store, _ = make()
    c = _CountingReads(store)
    c.create_stream("s/a", 3)
    write(clock, c, "s/a", [f"k{i % 11}" for i in range(2_000)])
    c.bytes_read = 0
    p = planner(c)
    start = p.initial_offset()
    start = p.next_offset(start, limit, None)  # the first batch only carries the watermark
    end = p.next_offset(start, limit, None)
    assert c.bytes_read == 0
    events = sum(len(b) for b in drain(p, c, start, limit)[1])
    assert events == 2_000
    ranges = p.ranges(start, end)
    rows = sum(
        b.num_rows
        for r in ranges
        for b in read_range(c, r.stream, r.segment, r.begin, r.end, BatchMeta(end.watermark, 0))
    )
    assert 0 < rows <= (limit.max_events or rows)
    store.close()


def test_malformed_bytes_fail_the_planning_not_stall_it() -> None:
    """A segment whose bytes are not frames fails ``maxEventsPerTrigger`` planning with FrameFormatError."""
    _, store, c = make()
    c.create_stream("s/a", 1)
    seg = c.get_stream("s/a").active_segments[0].name
    c.append(seg, b"\xff\x00\x00\x00\x09" + b"x" * 20)  # 255 bytes announced, 21 there, kind 9
    p = planner(c)
    start = p.next_offset(p.initial_offset(), Limit(max_events=10), None)
    with pytest.raises(FrameFormatError, match="offset 0: unknown kind 9"):
        p.next_offset(start, Limit(max_events=10), None)
    store.close()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
@pytest.mark.parametrize("remote", [False, True])
def test_deleting_a_stream_read_in_full_loses_nothing_and_other_streams_go_on(
    fail_on_data_loss: str, remote: bool
) -> None:
    clock, store, c = make()
    c.create_stream("s/a", 2)
    c.create_stream("s/b", 1)
    write(clock, c, "s/a", ["x", "y"] * 4)
    write(clock, c, "s/b", ["z"] * 3)
    warnings: list[str] = []
    with contextlib.ExitStack() as stack:
        pc: Any = c
        if remote:  # the planner as a query runs it: over the wire
            server = stack.enter_context(SegmentStoreServer(store))
            pc = stack.enter_context(RemoteClient(("127.0.0.1", server.port), read_ahead=False))
        p = planner(pc, stream="s/a,s/b", failOnDataLoss=fail_on_data_loss)
        p._warn = warnings.append
        _deleting_a_stream_read_in_full(p, clock, c, warnings)


def _deleting_a_stream_read_in_full(
    p: Planner, clock: ManualClock, c: EmbeddedClient, warnings: list[str]
) -> None:
    start, _, _ = drain(p, c, p.initial_offset())
    c.seal_stream("s/a")
    c.delete_stream("s/a")  # sealed and deleted between two triggers: the planner never saw it sealed
    new = write(clock, c, "s/b", ["z"] * 3, "new")
    end, batches, _ = drain(p, c, start)
    assert Counter(payloads(batches)) == Counter(new)
    gone = end.stream("s/a")
    assert gone is not None and set(gone.positions) == gone.done  # complete: dropped from the next offset
    end, more, _ = drain(p, c, end)  # later triggers: nothing more, and no warning
    assert more == [] and warnings == []
    p._check()


def test_deleting_a_stream_not_read_in_full_is_data_loss() -> None:
    clock, _, c = make()
    c.create_stream("s/a", 1)
    write(clock, c, "s/a", ["x"] * 4)
    warnings: list[str] = []
    p = planner(c)
    p._warn = warnings.append
    start, _, _ = drain(p, c, p.initial_offset())
    write(clock, c, "s/a", ["x"] * 4, "unread")
    p.next_offset(start, READ_ALL, None)  # the planner sees the new length
    c.seal_stream("s/a")
    c.delete_stream("s/a")
    seg = next(iter(start.streams["s/a"].positions))
    with pytest.raises(
        DataLossError, match=rf"{seg}.*deleted at offset \d+ \(\d+ bytes long when last seen\)"
    ):
        p.next_offset(start, READ_ALL, None)
    lenient = planner(c, failOnDataLoss="false")
    lenient._warn = warnings.append
    end, _, _ = drain(lenient, c, start)
    drain(lenient, c, end)
    assert len(warnings) == 1 and "never looked at" in warnings[0]  # said once, not on every trigger


def test_a_stream_dropped_from_option_stream_is_no_longer_read() -> None:
    clock, _, c = make()
    c.create_stream("s/a", 1)
    c.create_stream("s/b", 1)
    write(clock, c, "s/a", ["x"] * 2)
    write(clock, c, "s/b", ["y"] * 2)
    p = planner(c, stream="s/a,s/b")
    start, _, _ = drain(p, c, p.initial_offset())  # the checkpoint holds both streams
    write(clock, c, "s/a", ["x"] * 2, "a-new")
    b_new = write(clock, c, "s/b", ["y"] * 2, "b-new")
    warnings: list[str] = []
    restarted = planner(c, stream="s/b")
    restarted._warn = warnings.append
    end, batches, _ = drain(restarted, c, start)
    assert Counter(payloads(batches)) == Counter(b_new)
    assert set(end.streams) == {"s/b"}
    assert len(warnings) == 1 and "'s/a'" in warnings[0] and "no longer in option stream" in warnings[0]
