"""Reads and watermarks (docs/design.md §1) and future reads that wait at the tail."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import numpy as np
import pytest

from segmentstore import (
    AttributeUpdate,
    BadOffsetError,
    FutureRead,
    ManualClock,
    SegmentNotFoundError,
    SegmentRead,
    SegmentStore,
    SegmentTruncatedError,
    StoreClosedError,
    StoreConfig,
)

_WAIT_S = 10.0  # generous bound for anything that should complete at once; never reached when fine


def _three_appends(store: SegmentStore, clock: ManualClock) -> list[int]:
    """Segment 's' = b'aaa' @t1, b'bb' @t2, b'c' @t3; returns [t1, t2, t3]."""
    store.create_segment("s")
    ts = []
    for chunk in (b"aaa", b"bb", b"c"):
        clock.advance(10)
        ts.append(store.append("s", chunk).timestamp)
    return ts


# ---------------------------------------------------------------- watermarks
def test_watermark_is_ingestion_time_minus_one_and_tail_is_last_write(
    store: SegmentStore, clock: ManualClock
) -> None:
    t1, t2, t3 = _three_appends(store, clock)
    assert [store.ingestion_time_at("s", o) for o in range(6)] == [t1] * 3 + [t2] * 2 + [t3]
    assert [store.watermark_at("s", p) for p in range(7)] == [t1 - 1] * 3 + [t2 - 1] * 2 + [
        t3 - 1,
        t3 - 1,
    ]
    clock.advance(100)
    store.update_attributes("s", [])  # the tail moves with time; the bytes keep theirs
    assert store.watermark_at("s", 6) == clock.now() - 1
    assert store.watermark_at("s", 5) == t3 - 1


def test_empty_segment_watermark_is_creation_time_minus_one(store: SegmentStore, clock: ManualClock) -> None:
    info = store.create_segment("s")
    assert store.watermark_at("s", 0) == info.creation_time - 1
    r = store.read("s", 0, 10)
    assert r == SegmentRead(0, b"", info.creation_time - 1, False, True)


def test_watermark_never_decreases_along_the_segment(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    for i in range(30):
        if i % 7 == 3:
            clock.set(clock.now() - 15)  # step back: stamps stay at the last timestamp
        else:
            clock.advance(i % 4)
        store.append("s", b"x" * (1 + i % 3))
    length = store.get_info("s").length
    wms = [store.watermark_at("s", p) for p in range(length + 1)]
    assert wms == sorted(wms)


def test_batch_watermarks_equal_scalar_ones(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    for i in range(50):
        clock.advance(i % 5)
        store.append("s", b"y" * (1 + i % 4))
    store.truncate("s", 17)
    info = store.get_info("s")
    offsets = np.arange(info.start_offset, info.length + 1, dtype=np.int64)
    expected = [store.watermark_at("s", int(p)) for p in offsets]
    assert store.watermarks_at("s", offsets).tolist() == expected
    shuffled = np.random.default_rng(1).permutation(offsets)
    assert store.watermarks_at("s", shuffled).tolist() == [store.watermark_at("s", int(p)) for p in shuffled]
    assert store.watermarks_at("s", np.array([], dtype=np.int64)).tolist() == []


# ---------------------------------------------------------------- reads
def test_read_carries_the_watermark_after_its_last_byte(store: SegmentStore, clock: ManualClock) -> None:
    _t1, t2, t3 = _three_appends(store, clock)
    r = store.read("s", 1, 3)
    assert r == SegmentRead(1, b"aab", t2 - 1, False, False)
    assert r.end_offset == 4
    r = store.read("s", 0, 100)
    assert r == SegmentRead(0, b"aaabbc", t3 - 1, False, True)
    r = store.read("s", 3, 0)  # zero-length in the middle: watermark at its offset
    assert r == SegmentRead(3, b"", t2 - 1, False, False)
    for off in range(7):
        for n in range(8):
            r = store.read("s", off, n)
            assert r.watermark == store.watermark_at("s", off + len(r.data))
            assert r.data == b"aaabbc"[off : off + n]


def test_tail_read_learns_that_time_moved(store: SegmentStore, clock: ManualClock) -> None:
    _three_appends(store, clock)
    before = store.read("s", 6, 10)
    clock.advance(1_000)
    store.update_attributes("s", [AttributeUpdate(5, 5)])
    after = store.read("s", 6, 10)
    assert (before.data, after.data) == (b"", b"")
    assert after.watermark == clock.now() - 1 > before.watermark


def test_sealed_segment_ends_with_seal_time_minus_one(store: SegmentStore, clock: ManualClock) -> None:
    _, t2, _ = _three_appends(store, clock)
    clock.advance(77)
    store.seal("s")
    seal_time = clock.now()
    end = store.read("s", 6, 10)
    assert end == SegmentRead(6, b"", seal_time - 1, True, True)
    whole = store.read("s", 0, 100)
    assert (whole.end_of_segment, whole.watermark) == (True, seal_time - 1)
    middle = store.read("s", 0, 4)
    assert (middle.end_of_segment, middle.at_tail, middle.watermark) == (False, False, t2 - 1)
    clock.advance(10_000)  # time passing does not move a sealed segment's final watermark
    assert store.read("s", 6, 1).watermark == seal_time - 1
    assert store.watermark_at("s", 6) == seal_time - 1


def test_reads_after_truncation(store: SegmentStore, clock: ManualClock) -> None:
    _t1, t2, t3 = _three_appends(store, clock)
    store.truncate("s", 4)
    with pytest.raises(SegmentTruncatedError, match="3"):
        store.read("s", 3, 10)
    with pytest.raises(SegmentTruncatedError):
        store.watermark_at("s", 0)
    with pytest.raises(SegmentTruncatedError):
        store.ingestion_time_at("s", 2)
    assert store.read("s", 4, 10) == SegmentRead(4, b"bc", t3 - 1, False, True)
    assert store.watermark_at("s", 4) == t2 - 1
    assert store.ingestion_time_at("s", 5) == t3


def test_reads_beyond_the_length_fail(store: SegmentStore, clock: ManualClock) -> None:
    _three_appends(store, clock)
    with pytest.raises(BadOffsetError, match="7"):
        store.read("s", 7, 1)
    with pytest.raises(BadOffsetError):
        store.watermark_at("s", 7)
    with pytest.raises(BadOffsetError):
        store.ingestion_time_at("s", 6)  # no byte there yet


def test_read_of_a_transaction_segment(store: SegmentStore) -> None:
    store.create_segment("p")
    txn = store.create_transaction("p")
    store.append(txn, b"inside")
    assert store.read(txn, 2, 10).data == b"side"


# ---------------------------------------------------------------- future reads
def test_future_read_completes_at_once_when_data_is_there(store: SegmentStore, clock: ManualClock) -> None:
    _three_appends(store, clock)
    fut = store.read_future("s", 2, 2)
    assert fut.done()
    assert fut.result() == store.read("s", 2, 2)


def test_future_read_completes_on_data(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    store.append("s", b"ab")
    fut = store.read_future("s", 2, 100)
    got: list[SegmentRead] = []
    fut.add_done_callback(lambda f: got.append(f.result()))
    assert not fut.done()
    clock.advance(5)
    store.append("s", b"cd")
    assert fut.done()
    assert got == [SegmentRead(2, b"cd", clock.now() - 1, False, True)]


def test_future_read_beyond_the_tail_waits_for_its_offset(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    fut = store.read_future("s", 3, 10)
    clock.advance(1)
    store.append("s", b"ab")  # the tail watermark rises: a zero-length read at offset 3
    r = fut.result(timeout=_WAIT_S)
    assert (r.offset, r.data) == (3, b"")
    fut2 = store.read_future("s", 3, 10)
    store.append_batch("s", [b"c", b"def"])
    assert fut2.result(timeout=_WAIT_S).data == b"def"


def test_future_read_completes_when_the_tail_watermark_rises(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    store.append("s", b"abc")
    fut = store.read_future("s", 3, 10)
    store.update_attributes("s", [])  # same time as the append: the watermark did not rise
    assert not fut.done()
    clock.advance(20)
    store.update_attributes("s", [AttributeUpdate(1, 1)])
    assert fut.result(timeout=_WAIT_S) == SegmentRead(3, b"", clock.now() - 1, False, True)


def test_future_read_completes_when_the_advancer_moves_an_idle_segment(clock: ManualClock) -> None:
    with SegmentStore(clock=clock, config=StoreConfig(max_watermark_lag_ms=100)) as s:
        s.create_segment("s")
        fut = s.read_future("s", 0, 10)
        clock.advance(150)
        assert s.advance_idle_watermarks() == ["s"]
        assert fut.result(timeout=_WAIT_S) == SegmentRead(0, b"", clock.now() - 1, False, True)


def test_future_read_completes_on_seal(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    store.append("s", b"x")
    fut = store.read_future("s", 1, 10)
    clock.advance(3)
    store.seal("s")
    assert fut.result(timeout=_WAIT_S) == SegmentRead(1, b"", clock.now() - 1, True, True)
    late = store.read_future("s", 1, 10)  # on a sealed segment: end of segment at once
    assert late.done() and late.result().end_of_segment


def test_future_read_completes_on_a_merge(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("p")
    txn = store.create_transaction("p")
    store.append(txn, b"merged")
    store.seal(txn)
    fut = store.read_future("p", 0, 100)
    clock.advance(9)
    store.merge_transaction(txn)
    assert fut.result(timeout=_WAIT_S) == SegmentRead(0, b"merged", clock.now() - 1, False, True)


def test_future_read_expires_on_the_ingestion_clock(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    fut = store.read_future("s", 0, 10, timeout_ms=50)
    clock.advance(49)
    assert store.expire_future_reads() == 0
    assert not fut.done()
    clock.advance(1)
    assert store.expire_future_reads() == 1
    r = fut.result(timeout=_WAIT_S)
    assert (r.data, r.watermark, r.at_tail) == (b"", store.get_info("s").creation_time - 1, True)
    assert store.expire_future_reads() == 0


def test_future_read_with_zero_timeout_completes_at_once(store: SegmentStore) -> None:
    store.create_segment("s")
    fut = store.read_future("s", 0, 10, timeout_ms=0)
    assert fut.done() and fut.result().data == b""


def test_future_read_wait_returns_a_zero_length_read_after_real_time(store: SegmentStore) -> None:
    store.create_segment("s")
    fut = store.read_future("s", 0, 10)
    r = fut.wait(0.01)
    assert r == SegmentRead(0, b"", store.watermark_at("s", 0), False, True)
    store.append("s", b"late")  # no longer waiting: nothing breaks
    assert fut.result() == r
    store._check()


def test_future_read_fails_when_its_segment_is_deleted(store: SegmentStore) -> None:
    store.create_segment("s")
    fut = store.read_future("s", 0, 10)
    store.delete("s")
    with pytest.raises(SegmentNotFoundError, match="'s'"):
        fut.result(timeout=_WAIT_S)


def test_future_reads_on_a_transaction_complete_on_data_and_seal(store: SegmentStore) -> None:
    store.create_segment("p")
    txn = store.create_transaction("p")
    store.seal(txn)
    fut = store.read_future(txn, 0, 10)  # sealed: completes at once with end of segment
    assert fut.result().end_of_segment
    txn2 = store.create_transaction("p")
    fut2 = store.read_future(txn2, 0, 10)
    store.append(txn2, b"z")  # completes fut2 with data
    fut3 = store.read_future(txn2, 1, 10)
    store.seal(txn2)
    assert fut2.result().data == b"z" and fut3.result().end_of_segment


def test_future_read_fails_when_the_store_closes(clock: ManualClock) -> None:
    s = SegmentStore(clock=clock)
    s.create_segment("s")
    fut = s.read_future("s", 0, 10)
    s.close()
    with pytest.raises(StoreClosedError):
        fut.result(timeout=_WAIT_S)


def test_future_read_wakes_a_waiting_thread(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    fut = store.read_future("s", 0, 10)
    results: list[SegmentRead] = []
    waiter = threading.Thread(target=lambda: results.append(fut.wait(_WAIT_S)))
    waiter.start()
    clock.advance(1)
    store.append("s", b"hi")
    waiter.join(_WAIT_S)
    assert not waiter.is_alive()
    assert results[0].data == b"hi"


def test_callbacks_may_call_back_into_the_store(store: SegmentStore, clock: ManualClock) -> None:
    """A callback that reads, appends and registers a new future read does not deadlock."""
    store.create_segment("s")
    store.create_segment("log")
    seen: list[SegmentRead] = []

    def on_done(f: concurrent.futures.Future[SegmentRead]) -> None:
        r = f.result()
        seen.append(r)
        store.append("log", r.data or b"-")
        store.get_info("s")
        store.read("s", r.offset, 1)
        if len(seen) < 3:
            store.read_future("s", r.end_offset, 10).add_done_callback(on_done)

    def drive() -> None:
        store.read_future("s", 0, 10).add_done_callback(on_done)
        for chunk in (b"a", b"b", b"c"):
            clock.advance(1)
            store.append("s", chunk)
        clock.advance(1)
        store.seal("s")

    t = threading.Thread(target=drive, daemon=True)
    t.start()
    t.join(_WAIT_S)
    assert not t.is_alive(), "deadlock: a callback calling into the store never returned"
    assert [r.data for r in seen] == [b"a", b"b", b"c"]
    assert store.read("log", 0, 10).data == b"abc"


def test_expiry_callbacks_may_call_back_into_the_store(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    done = threading.Event()

    def on_done(f: concurrent.futures.Future[SegmentRead]) -> None:
        store.update_attributes("s", [AttributeUpdate(1, 1)])
        done.set()

    store.read_future("s", 0, 10, timeout_ms=5).add_done_callback(on_done)
    clock.advance(5)
    t = threading.Thread(target=store.expire_future_reads, daemon=True)
    t.start()
    t.join(_WAIT_S)
    assert not t.is_alive() and done.is_set()
    assert store.get_attributes("s")[1] == 1


def test_future_read_is_awaitable_from_asyncio(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")

    async def main() -> SegmentRead:
        fut = store.read_future("s", 0, 10)
        assert isinstance(fut, FutureRead)
        loop = asyncio.get_running_loop()
        loop.call_later(0.001, store.append, "s", b"async")
        return await asyncio.wait_for(fut, _WAIT_S)

    r = asyncio.run(main())
    assert r.data == b"async"


def test_already_complete_future_read_is_awaitable(store: SegmentStore) -> None:
    store.create_segment("s")
    store.append("s", b"q")

    async def main() -> SegmentRead:
        return await store.read_future("s", 0, 10)

    assert asyncio.run(main()).data == b"q"


def test_an_update_returns_its_own_timestamp_even_if_a_woken_callback_writes(
    store: SegmentStore, clock: ManualClock
) -> None:
    store.create_segment("s")

    def write_later(f: concurrent.futures.Future[SegmentRead]) -> None:
        clock.advance(50)
        store.append("s", b"from-callback")

    store.read_future("s", 0, 10).add_done_callback(write_later)
    clock.advance(10)
    t_update = clock.now()
    assert store.update_attributes("s", [AttributeUpdate(1, 1)]) == t_update
    assert store.get_info("s").last_write_time == t_update + 50
