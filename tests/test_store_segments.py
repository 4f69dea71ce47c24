"""Segment lifecycle through the façade: create, append, transactions, seal, truncate, delete, info."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from segmentstore import (
    CREATION_TIME,
    LAST_WRITE_TIME,
    AppendResult,
    BadOffsetError,
    ManualClock,
    SegmentInfo,
    SegmentNotFoundError,
    SegmentStore,
    StoreClosedError,
)


# ---------------------------------------------------------------- create and info
def test_create_returns_info_stamped_with_the_clock(store: SegmentStore, clock: ManualClock) -> None:
    info = store.create_segment("s")
    assert info == SegmentInfo("s", 0, 0, False, clock.now(), clock.now())
    assert store.get_info("s") == info
    assert store.exists("s") and not store.exists("t")
    assert store.list_segments() == ["s"]


def test_names_may_hold_slashes_and_unicode(store: SegmentStore) -> None:
    for name in ("scope/stream/0.#epoch.0", "ümlaut-流"):
        store.create_segment(name)
        store.append(name, b"x")
        assert store.read(name, 0, 5).data == b"x"
    assert sorted(store.list_segments()) == sorted(["scope/stream/0.#epoch.0", "ümlaut-流"])


# ---------------------------------------------------------------- append
def test_append_returns_offset_length_and_timestamp(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    clock.advance(10)
    r1 = store.append("s", b"hello")
    clock.advance(5)
    r2 = store.append("s", b"world!")
    assert r1 == AppendResult(0, 5, 1_000_010)
    assert r2 == AppendResult(5, 6, 1_000_015)
    info = store.get_info("s")
    assert (info.length, info.last_write_time, info.creation_time) == (11, 1_000_015, 1_000_000)
    assert store.read("s", 0, 100).data == b"helloworld!"


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_append_accepts_bytes_like_payloads(store: SegmentStore, kind: type) -> None:
    store.create_segment("s")
    buf = bytearray(b"abc")
    store.append("s", kind(buf))
    buf[0] = ord("z")  # the store keeps its own copy
    assert store.read("s", 0, 10).data == b"abc"


def test_conditional_append_at_the_right_offset(store: SegmentStore) -> None:
    store.create_segment("s")
    assert store.append("s", b"ab", 0).offset == 0
    assert store.append("s", b"cd", expected_offset=2).offset == 2
    assert store.get_info("s").length == 4


def test_append_batch_is_one_operation_with_one_timestamp(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    store.append("s", b"0123")
    clock.advance(7)
    r = store.append_batch("s", [b"aa", bytearray(b"b"), memoryview(b"ccc")])  # type: ignore[list-item]
    assert r == AppendResult(4, 6, clock.now())
    assert store.read("s", 0, 100).data == b"0123aabccc"
    assert [store.ingestion_time_at("s", o) for o in range(4, 10)] == [clock.now()] * 6
    r2 = store.append_batch("s", [b"x"], expected_offset=10)
    assert r2.offset == 10


def test_retried_append_of_a_writer_is_acknowledged_but_not_stored(
    store: SegmentStore, clock: ManualClock
) -> None:
    store.create_segment("s")
    first = store.append("s", b"e1", writer_id=77, event_number=1)
    clock.advance(3)
    retry = store.append("s", b"e1", writer_id=77, event_number=1)
    assert retry.duplicate and not first.duplicate
    assert store.get_info("s").length == 2
    assert store.get_attributes("s")[77] == 1
    nxt = store.append("s", b"e2", writer_id=77, event_number=2)
    assert (nxt.offset, nxt.duplicate) == (2, False)
    assert store.get_attributes("s")[77] == 2


# ---------------------------------------------------------------- timestamps
def test_timestamps_never_go_back_when_the_clock_steps_back(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    clock.advance(500)
    t_high = store.append("s", b"a").timestamp
    clock.set(1_000_100)  # the wall clock steps back by 400 ms
    assert store.append("s", b"b").timestamp == t_high
    info = store.create_segment("later")
    assert info.creation_time == t_high  # a create is temporal, and stamped the same way
    clock.set(t_high + 1)
    assert store.append("s", b"c").timestamp == t_high + 1
    assert [store.ingestion_time_at("s", o) for o in range(3)] == [t_high, t_high, t_high + 1]
    assert store.last_timestamp == t_high + 1


def test_temporal_operations_set_last_write_time(store: SegmentStore, clock: ManualClock) -> None:
    created = store.create_segment("s").creation_time
    txn = store.create_transaction("s")
    store.seal(txn)
    ops: list[Callable[[], object]] = [
        lambda: store.append("s", b"x"),
        lambda: store.append_batch("s", [b"y", b"z"]),
        lambda: store.update_attributes("s", []),
        lambda: store.merge_transaction(txn),
        lambda: store.seal("s"),
    ]
    for op in ops:
        clock.advance(10)
        op()
        assert store.get_info("s").last_write_time == clock.now()
        assert store.get_attributes("s")[LAST_WRITE_TIME] == clock.now()
        assert store.get_attributes("s")[CREATION_TIME] == created


def test_truncate_and_reads_are_not_temporal(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    store.append("s", b"abcdef")
    lwt = store.get_info("s").last_write_time
    clock.advance(50)
    store.truncate("s", 2)
    store.read("s", 2, 10)
    store.get_attributes("s")
    assert store.get_info("s").last_write_time == lwt


# ---------------------------------------------------------------- transactions
def test_transaction_lifecycle(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("p")
    store.append("p", b"head")
    txn = store.create_transaction("p")
    assert txn != "p" and store.exists(txn)
    info = store.get_info(txn)
    assert info.is_transaction and info.parent == "p" and info.length == 0
    clock.advance(5)
    store.append(txn, b"t1")
    clock.advance(5)
    store.append(txn, b"t2")
    assert store.read("p", 0, 100).data == b"head"  # invisible before the merge
    store.seal(txn)
    clock.advance(100)
    store.append("p", b"++")
    clock.advance(100)
    r = store.merge_transaction_result(txn, "p")
    assert (r.offset, r.length, r.timestamp) == (6, 4, clock.now())
    assert not store.exists(txn)
    assert store.read("p", 0, 100).data == b"head++t1t2"
    # merged bytes take the merge's timestamp, never the transaction's own times
    assert [store.ingestion_time_at("p", o) for o in range(6, 10)] == [r.timestamp] * 4
    assert store.get_info("p").last_write_time == r.timestamp
    assert store.watermark_at("p", 6) == r.timestamp - 1


def test_merge_returns_the_offset_and_works_without_naming_the_parent(store: SegmentStore) -> None:
    store.create_segment("p")
    store.append("p", b"12345")
    txn = store.create_transaction("p")
    store.append(txn, b"xy")
    store.seal(txn)
    assert store.merge_transaction(txn) == 5
    assert store.get_info("p").length == 7


def test_merging_an_empty_transaction_moves_only_time(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("p")
    store.append("p", b"ab")
    txn = store.create_transaction("p")
    store.seal(txn)
    clock.advance(40)
    assert store.merge_transaction(txn) == 2
    info = store.get_info("p")
    assert (info.length, info.last_write_time) == (2, clock.now())
    assert store.watermark_at("p", 2) == clock.now() - 1


def test_transactions_of_one_parent_are_independent(store: SegmentStore) -> None:
    store.create_segment("p")
    t1 = store.create_transaction("p")
    t2 = store.create_transaction("p")
    assert t1 != t2
    store.append(t1, b"one")
    store.append(t2, b"two")
    store.seal(t2)
    store.merge_transaction(t2)
    store.seal(t1)
    store.merge_transaction(t1)
    assert store.read("p", 0, 10).data == b"twoone"


# ---------------------------------------------------------------- seal, truncate, delete
def test_seal_returns_final_length_and_stamps(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    store.append("s", b"abc")
    clock.advance(30)
    assert store.seal("s") == 3
    info = store.get_info("s")
    assert info.sealed and info.last_write_time == clock.now()


def test_truncate_moves_the_start_offset(store: SegmentStore) -> None:
    store.create_segment("s")
    store.append("s", b"0123456789")
    store.truncate("s", 4)
    assert store.get_info("s").start_offset == 4
    assert store.read("s", 4, 100).data == b"456789"
    store.truncate("s", 4)  # at the start: nothing happens
    with pytest.raises(BadOffsetError, match="truncate offset 2 is below the start offset 4"):
        store.truncate("s", 2)  # below it: refused, as Pravega's BadOffsetException
    assert store.get_info("s").start_offset == 4
    store.truncate("s", 10)
    info = store.get_info("s")
    assert (info.start_offset, info.length) == (10, 10)
    assert store.append("s", b"x").offset == 10
    assert store.read("s", 10, 5).data == b"x"


def test_a_sealed_segment_can_still_be_truncated(store: SegmentStore) -> None:
    store.create_segment("s")
    store.append("s", b"abcd")
    store.seal("s")
    store.truncate("s", 3)
    assert store.read("s", 3, 10).data == b"d"


def test_large_truncates_keep_the_remaining_bytes(store: SegmentStore) -> None:
    store.create_segment("s")
    payload = bytes(range(256)) * 64  # 16 KiB
    for i in range(0, len(payload), 1024):
        store.append("s", payload[i : i + 1024])
    for cut in (5_000, 9_000, 16_000):
        store.truncate("s", cut)
        assert store.read("s", cut, len(payload)).data == payload[cut:]
    store.append("s", b"tail")
    assert store.read("s", 16_000, 10_000).data == payload[16_000:] + b"tail"
    store._check()


def test_delete_removes_and_the_name_can_be_reused(store: SegmentStore, clock: ManualClock) -> None:
    store.create_segment("s")
    store.append("s", b"old")
    store.delete("s")
    assert not store.exists("s")
    with pytest.raises(SegmentNotFoundError, match="'s'"):
        store.get_info("s")
    clock.advance(1)
    info = store.create_segment("s")
    assert (info.length, info.creation_time) == (0, clock.now())
    assert store.read("s", 0, 10).data == b""


def test_deleting_a_segment_ends_its_open_transactions(store: SegmentStore) -> None:
    store.create_segment("p")
    sealed = store.create_transaction("p")
    store.append(sealed, b"old")
    store.seal(sealed)
    open_txn = store.create_transaction("p")
    waiting = store.read_future(open_txn, 0, 10)
    store.delete("p")
    assert not store.exists(sealed) and not store.exists(open_txn)
    assert store.list_segments() == []
    with pytest.raises(SegmentNotFoundError, match="was deleted"):
        waiting.wait(5)
    store.create_segment("p")  # a new segment under the old name: the old transaction is not its
    with pytest.raises(SegmentNotFoundError):
        store.merge_transaction(sealed)
    assert store.get_info("p").length == 0
    store._check()


# ---------------------------------------------------------------- lifecycle
def test_closed_store_refuses_operations(clock: ManualClock) -> None:
    with SegmentStore(clock=clock) as s:
        s.create_segment("s")
    with pytest.raises(StoreClosedError):
        s.append("s", b"x")
    with pytest.raises(StoreClosedError):
        s.create_segment("t")
    for query in (
        lambda: s.exists("s"),
        lambda: s.list_segments(),
        lambda: s.get_info("s"),
        lambda: s.read("s", 0, 1),
        lambda: s.get_attributes("s"),
    ):
        with pytest.raises(StoreClosedError):
            query()
    s.close()  # idempotent


def test_check_passes_on_a_busy_store(store: SegmentStore, clock: ManualClock) -> None:
    for i in range(5):
        store.create_segment(f"s{i}")
        for j in range(20):
            clock.advance(j % 3)
            store.append(f"s{i}", bytes([j]) * (j + 1))
        store.truncate(f"s{i}", 7 * i)
    store._check()
