"""EventWriter: routing by key hash, framing, exactly-once retries, batching, following scaling."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from readergroup import (
    EventAck,
    EventWriter,
    Frame,
    InvalidEventError,
    NoSuccessorsError,
    RoutingTable,
    WriterClosedError,
    WriterConfig,
    WriterError,
    decode_frames,
    key_hash,
)
from segmentstore import AppendResult, ManualClock, SegmentStore
from segmentstore.client import EmbeddedClient, SegmentStoreClient
from segmentstore.controller.controller import controller_of

S = "scope/w"


class FlakyClient(EmbeddedClient):
    """Fails chosen appends: ``lose_ack`` stores then raises; ``fail`` raises without storing."""

    def __init__(self, store: SegmentStore) -> None:
        super().__init__(store)
        self.lose_ack = 0
        self.fail = 0
        self.duplicates = 0
        self.on_lost_ack: Callable[[], object] = lambda: None

    def append(self, name: str, data: bytes, expected_offset: int | None = None, **kw: Any) -> AppendResult:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("connection reset before the append")
        r = super().append(name, data, expected_offset, **kw)
        self.duplicates += r.duplicate
        if self.lose_ack:
            self.lose_ack -= 1
            self.on_lost_ack()
            raise ConnectionError("connection reset after the append")
        return r


@pytest.fixture
def client(store: SegmentStore) -> FlakyClient:
    return FlakyClient(store)


def segment_frames(client: SegmentStoreClient, name: str) -> list[Frame]:
    data = client.read(name, client.get_info(name).start_offset, 1 << 30).data
    frames, used = decode_frames(data)
    assert used == len(data), f"{name} ends in a partial frame"
    return frames


def read_stream(client: SegmentStoreClient, stream: str) -> dict[str, list[bytes]]:
    """Every segment ever in the stream, predecessors first; payloads per routing key, in order."""
    seen: dict[str, Any] = {}
    todo = [n for n, _ in client.get_head_cut(stream).positions]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen[n] = client.get_segment(n)
            todo.extend(s.segment.name for s in client.get_successors(n))
    per_key: dict[str, list[bytes]] = defaultdict(list)
    for seg in sorted(seen.values(), key=lambda s: s.number):  # numbers grow with creation
        for f in segment_frames(client, seg.name):
            assert seg.key_low <= key_hash(f.routing_key) < seg.key_high, f"{f.routing_key} in {seg.name}"
            per_key[f.routing_key].append(f.payload)
    return per_key


def expected(keys: int, n: int) -> dict[str, list[bytes]]:
    return {f"k{k}": [f"{k}:{i}".encode() for i in range(n)] for k in range(keys)}


def write_round(w: EventWriter, keys: int, start: int, stop: int) -> None:
    for i in range(start, stop):
        for k in range(keys):
            w.write_event(f"k{k}", f"{k}:{i}".encode(), event_time=i)


# ---------------------------------------------------------------------- routing
def test_key_hash_is_stable_across_processes() -> None:
    keys = ["", "a", "sensor-17", "ü/ß", "x" * 300]
    code = "from readergroup import key_hash; import sys; print([key_hash(k) for k in sys.argv[1:]])"
    out = subprocess.run(
        [sys.executable, "-c", code, *keys],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    ).stdout
    assert out.strip() == str([key_hash(k) for k in keys])
    assert all(0.0 <= key_hash(k) < 1.0 for k in keys)
    assert len({key_hash(f"k{i}") for i in range(1000)}) == 1000


def test_events_go_to_the_segment_owning_their_key_hash(client: FlakyClient) -> None:
    segs = client.create_stream(S, 4).active_segments
    with EventWriter(client, S) as w:
        write_round(w, 40, 0, 3)
        w._check()
    got = read_stream(client, S)
    assert got == expected(40, 3)
    used = {s.name for s in segs if client.get_info(s.name).length}
    assert len(used) == 4  # 40 keys spread over every segment
    table = RoutingTable(segs)
    for s in segs:
        for f in segment_frames(client, s.name):
            assert table.segment_for(f.routing_key) == s
            assert f.event_time == int(f.payload.split(b":")[1])


def test_sync_batching_and_flush(client: FlakyClient, clock: ManualClock) -> None:
    seg = client.create_stream(S).active_segments[0]
    w = EventWriter(client, S, config=WriterConfig(max_batch_events=10, sync=True))
    for i in range(9):
        w.write_event("k", b"%d" % i)
    assert client.get_info(seg.name).length == 0 and w.pending_events == 9
    w.write_event("k", b"9")  # the 10th fills the batch
    assert w.pending_events == 0 and len(segment_frames(client, seg.name)) == 10
    w.write_event("k", b"10")
    w.flush()
    assert w.pending_events == 0 and len(segment_frames(client, seg.name)) == 11
    big = EventWriter(client, S, config=WriterConfig(max_batch_events=1000, max_batch_bytes=200, sync=True))
    for _ in range(20):
        big.write_event("k", b"x" * 40)  # 20 * 57 bytes > 200: sent in batches of <= 200 bytes
    big.flush()
    assert len(segment_frames(client, seg.name)) == 31


def test_linger_flushes_old_batches(client: FlakyClient, clock: ManualClock) -> None:
    seg = client.create_stream(S).active_segments[0]
    w = EventWriter(client, S, clock=clock, config=WriterConfig(max_batch_events=100, linger_ms=10))
    w.write_event("k", b"a")
    clock.advance(9)
    w.write_event("k", b"b")
    assert client.get_info(seg.name).length == 0
    clock.advance(1)
    w.write_event("k", b"c")  # the linger ran out: the block goes out without a flush
    deadline = time.monotonic() + 10
    while client.get_info(seg.name).length == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert [f.payload for f in segment_frames(client, seg.name)] == [b"a", b"b", b"c"]


def test_a_wall_clock_step_back_does_not_hold_a_lingering_block(
    client: FlakyClient, clock: ManualClock
) -> None:
    """docs/design.md §1: the clock may step back; a block opened before must not wait until caught up."""
    seg = client.create_stream(S).active_segments[0]
    w = EventWriter(client, S, clock=clock, config=WriterConfig(max_batch_events=100, linger_ms=10))
    w.write_event("k", b"a")
    clock.set(clock.now() - 3_600_000)  # an hour back
    w.write_event("k", b"b")
    deadline = time.monotonic() + 5  # "a" may go out alone (the step back), "b" next: both, promptly
    while len(segment_frames(client, seg.name)) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert [f.payload for f in segment_frames(client, seg.name)] == [b"a", b"b"]
    w.close()


# ---------------------------------------------------------------------- exactly once
def test_lost_acknowledgements_do_not_duplicate(client: FlakyClient) -> None:
    client.create_stream(S, 2)
    w = EventWriter(client, S, config=WriterConfig(max_batch_events=3))
    write_round(w, 5, 0, 4)
    client.lose_ack = 3
    write_round(w, 5, 4, 8)
    client.fail = 2
    write_round(w, 5, 8, 10)
    w.close()
    assert client.duplicates == 3
    assert read_stream(client, S) == expected(5, 10)


def test_exhausted_retries_fail_the_future_and_flush_and_numbers_are_not_reused(client: FlakyClient) -> None:
    client.create_stream(S)
    w = EventWriter(client, S, config=WriterConfig(retry_attempts=1))
    client.lose_ack = 2  # stored, but both attempts look failed
    lost = w.write_event("k", b"0")
    with pytest.raises(WriterError, match="failed 2 times; they may or may not be stored"):
        lost.result(5)
    assert w.pending_events == 0
    with pytest.raises(WriterError, match="failed 2 times"):
        w.flush()
    w.flush()  # reported once
    client.fail = 2  # both attempts fail before the store
    never = w.write_event("k", b"1")
    assert isinstance(never.exception(5), WriterError)
    ok = w.write_event("k", b"2").result(5)  # a number above the failed ones: not taken for a duplicate
    assert ok.offset is not None and ok.ingestion_time is not None
    with pytest.raises(WriterError):
        w.close()
    assert read_stream(client, S) == {"k": [b"0", b"2"]}
    sync = EventWriter(client, S, config=WriterConfig(retry_attempts=0, max_batch_events=1, sync=True))
    client.fail = 1
    with pytest.raises(WriterError, match="failed 1 times"):
        sync.write_event("k", b"3")  # the synchronous writer raises from the write itself ...
    sync.close()  # ... and only there


def test_events_queued_behind_a_failed_append_are_said_not_stored(store: SegmentStore) -> None:
    """Resends run out for the append in flight: its events may or may not be stored; the events
    queued behind it were never sent, and their error says they are not stored."""
    gate = threading.Event()

    class Gated(FlakyClient):
        def append(
            self, name: str, data: bytes, expected_offset: int | None = None, **kw: Any
        ) -> AppendResult:
            gate.wait(10)  # the first append waits until events queue up behind it
            return super().append(name, data, expected_offset, **kw)

    c = Gated(store)
    c.create_stream(S)
    w = EventWriter(c, S, config=WriterConfig(retry_attempts=1, max_batch_events=1))
    c.fail = 2  # both attempts of the first append fail before the store
    first = w.write_event("k", b"0")
    queued = [w.write_event("k", b"%d" % i) for i in range(1, 5)]
    gate.set()
    with pytest.raises(WriterError, match="failed 2 times; they may or may not be stored"):
        first.result(10)
    for f in queued:
        with pytest.raises(
            WriterError, match="events queued behind a failed append were not sent; they are not"
        ):
            f.result(10)
    with pytest.raises(WriterError):
        w.close()
    assert read_stream(c, S) == {}


def test_restarted_writer_with_same_id_continues_numbering(client: FlakyClient) -> None:
    client.create_stream(S)
    with EventWriter(client, S, writer_id=77) as w1:
        write_round(w1, 1, 0, 3)
    with EventWriter(client, S, writer_id=77) as w2:
        write_round(w2, 1, 3, 5)
    assert read_stream(client, S) == expected(1, 5) and client.duplicates == 0


# ---------------------------------------------------------------------- scaling
def test_key_order_is_kept_across_splits_and_merges(client: FlakyClient) -> None:
    client.create_stream(S, 2)
    writers = [EventWriter(client, S, config=WriterConfig(max_batch_events=4)) for _ in range(2)]
    keys, n = 24, 0
    for step in range(6):
        for w in writers:  # writer w writes keys of its parity only
            for i in range(n, n + 5):
                for k in range(writers.index(w), keys, 2):
                    w.write_event(f"k{k}", f"{k}:{i}".encode())
        n += 5
        segs = client.get_stream(S).active_segments
        if step % 2 == 0:  # split the widest segment into three
            s = max(segs, key=lambda s: s.key_high - s.key_low)
            a, b = s.key_low, s.key_high
            client.scale_stream(
                S, [s.name], [(a, a + (b - a) / 3), (a + (b - a) / 3, b - (b - a) / 3), (b - (b - a) / 3, b)]
            )
        else:  # merge the two first
            client.scale_stream(S, [segs[0].name, segs[1].name], [(0.0, segs[1].key_high)])
    for w in writers:
        w.flush()
        w._check()
    controller_of(client.store)._check()
    assert read_stream(client, S) == expected(keys, n)
    assert client.duplicates == 0


def test_in_flight_append_that_landed_is_not_resent_to_successors(client: FlakyClient) -> None:
    seg = client.create_stream(S).active_segments[0]
    w = EventWriter(client, S)
    client.lose_ack = 1  # stored, acknowledgement lost; the stream splits before the resend
    client.on_lost_ack = lambda: client.scale_stream(S, [seg.name], [(0.0, 0.5), (0.5, 1.0)])
    first = w.write_event("k", b"0")  # the resend finds the seal; the store says it landed
    assert first.result(5) == EventAck(seg.name, None, None)
    w.write_event("k", b"1").result(5)
    w.flush()
    assert read_stream(client, S) == {"k": [b"0", b"1"]}
    assert {s.name for s in w.segments} == {s.name for s in client.get_stream(S).active_segments}


def test_sealed_stream_fails_the_events(client: FlakyClient) -> None:
    client.create_stream(S)
    w = EventWriter(client, S, config=WriterConfig(max_batch_events=5, sync=True))
    held = w.write_event("k", b"0")
    client.seal_stream(S)
    with pytest.raises(NoSuccessorsError, match="1 events were not written"):
        w.flush()
    assert w.pending_events == 0 and isinstance(held.exception(0), NoSuccessorsError)
    a = EventWriter(client, S)
    fut = a.write_event("k", b"1")
    with pytest.raises(NoSuccessorsError):
        fut.result(5)
    with pytest.raises(NoSuccessorsError):
        a.close()
    with pytest.raises(WriterClosedError):
        a.write_event("k", b"2")


# ---------------------------------------------------------------------- bad input and lifecycle
def test_closed_writer_rejects_writes(client: FlakyClient) -> None:
    seg = client.create_stream(S).active_segments[0]
    w = EventWriter(client, S, config=WriterConfig(max_batch_events=5))
    w.write_event("k", b"0")
    w.close()
    assert client.get_info(seg.name).length > 0  # close flushed
    w.close()
    with pytest.raises(WriterClosedError):
        w.write_event("k", b"1")


@pytest.mark.parametrize("writer_id", [0, -5, True, 2**63, "7", 1.0])
def test_bad_writer_ids(client: FlakyClient, writer_id: Any) -> None:
    client.create_stream(S)
    with pytest.raises(InvalidEventError, match="writer_id"):
        EventWriter(client, S, writer_id=writer_id)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_batch_events": 0},
        {"max_batch_bytes": -1},
        {"retry_attempts": -1},
        {"linger_ms": -1},
        {"max_batch_events": True},
        {"retry_attempts": 1.5},
    ],
)
def test_bad_writer_config(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidEventError, match="WriterConfig"):
        WriterConfig(**kwargs)


def test_bad_events_are_rejected_before_anything_is_buffered(client: FlakyClient, clock: ManualClock) -> None:
    client.create_stream(S)
    w = EventWriter(client, S, config=WriterConfig(max_batch_events=5))
    for args in ((1, b"x"), ("k", "text"), ("k", b"x", 1.5)):
        with pytest.raises(InvalidEventError):
            w.write_event(*args)
    assert w.pending_events == 0
    with pytest.raises(InvalidEventError, match="linger_ms needs a clock"):
        EventWriter(client, S, config=WriterConfig(linger_ms=5))
