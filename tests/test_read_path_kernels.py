"""The read path's one-pass kernels answer what the step-by-step path does (issue 46).

``read_many`` finds a block's records and the watermarks there in one kernel call
(``WatermarkIndex.records_into``); a reader decodes a block with its events'
ingestion times in one pass (``decode_event_block_at``), the blocks of one look side by
side (``decode_event_blocks_at``), and merges blocks decoded together without copying
them into one array first. Each is compared here with the path it replaces, on segments
written in many appends at many times, with writer markers between events, records
split over appends, reads that end inside a frame, truncated segments and tails.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from readergroup.format import events
from readergroup.format.events import KIND_WATERMARK, decode_event_block, encode_event
from readergroup.reading.block_merge import merge_blocks, merge_kernel
from readergroup.reading.segment_input import SegmentInput, decode_together
from segmentstore import ManualClock, SegmentStore, StreamSegment
from segmentstore.client import EmbeddedClient
from segmentstore.core.batched_reads import check_read_requests
from segmentstore.core.records import record_bounds
from segmentstore.core.warmup import warm_kernels
from segmentstore.results import FAILED, NOTHING_NEW, READ, UNREAD, PackedReads, RecordsRead


@pytest.fixture(scope="module", autouse=True)
def _kernels() -> None:
    warm_kernels()
    events._kernels()  # the frame kernels (as a reader's first large block loads them)
    assert merge_kernel() is not None


def _frames(rng: random.Random, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        kind = KIND_WATERMARK if rng.random() < 0.15 else 0
        key = f"k{rng.randrange(50)}" + "é" * rng.randrange(2)
        et = None if rng.random() < 0.1 else 1_000 + i
        out.append(encode_event(key, bytes(rng.randrange(40)), et, kind))
    return out


def _write(
    rng: random.Random, store: SegmentStore, clock: ManualClock, name: str, frames: list[bytes]
) -> None:
    """Append the frames in random pieces (a frame may be split over appends), at random times."""
    data = b"".join(frames)
    at = 0
    while at < len(data):
        n = rng.randrange(1, 200)
        store.append(name, data[at : at + n])
        at += n
        if rng.random() < 0.5:
            clock.advance(rng.randrange(3))


def _bounds(store: SegmentStore, name: str, rng: random.Random) -> int:
    """A record boundary of the segment at or above its start offset."""
    info = store.get_info(name)
    data = store.read(name, info.start_offset, info.length - info.start_offset).data
    b, count = record_bounds(data, info.start_offset)
    return int(b[rng.randrange(count + 1)])


def _segment(seed: int, truncate: bool) -> tuple[SegmentStore, ManualClock, str, random.Random]:
    rng = random.Random(seed)
    clock = ManualClock(1_000_000)
    store = SegmentStore(clock=clock)
    name = f"s/t/{seed}"
    store.create_segment(name)
    _write(rng, store, clock, name, _frames(rng, rng.randrange(1, 120)))
    if truncate:
        store.truncate(name, _bounds(store, name, rng))
    return store, clock, name, rng


@pytest.mark.parametrize("seed", range(40))
def test_read_many_records_and_watermarks_are_those_of_a_walk_and_a_batch_lookup(seed: int) -> None:
    store, _, name, rng = _segment(seed, truncate=seed % 3 == 0)
    info = store.get_info(name)
    for _ in range(20):
        offset = rng.randrange(info.start_offset, info.length + 1)
        size = rng.choice([0, 1, 7, 15, 64, 300, 1 << 20])
        (a,) = store.read_many([(name, offset, size)])
        assert a is not None and a.read is not None
        r = store.read(name, offset, size)
        assert (a.read.offset, a.read.data, a.read.watermark, a.read.at_tail) == (
            r.offset,
            r.data,
            r.watermark,
            r.at_tail,
        )
        if not r.data:
            continue
        bounds, count = record_bounds(r.data, offset)
        assert a.starts.tolist() == bounds[:count].tolist()
        assert a.watermarks.tolist() == [store.watermark_at(name, int(o)) for o in bounds]


def _inputs(store: SegmentStore, name: str, offset: int) -> tuple[SegmentInput, SegmentInput]:
    seg = StreamSegment("s/t", 0, 0, name, 0.0, 1.0, 0)
    wm = store.watermark_at(name, offset)
    return SegmentInput(seg, offset, wm), SegmentInput(seg, offset, wm)


def _state(s: SegmentInput) -> tuple[object, ...]:
    cols = [a.tolist() for a in (s.off, s.lengths, s.et, s.it, s.nxt_pos, s.nxt_wm)]
    keys = s.keys.to_pylist() if s.n else None
    pays = s.pays.to_pylist() if s.n else None
    ends = (s.end_of_segment, s.final_wm)
    return (s.n, s.idx, s.fetch, s.at_tail, s.base_pos, s.base_wm, *ends, cols, keys, pays)


@pytest.mark.parametrize("seed", range(40))
def test_a_block_decoded_with_its_records_watermarks_is_the_block_read_and_looked_up(seed: int) -> None:
    """``take_block`` with ``read_many``'s answer (one pass) and without it (``decode_event_block``, then
    ``watermarks_at``): the same events, ingestion times, positions and watermarks after each."""
    store, _, name, rng = _segment(seed, truncate=seed % 4 == 0)
    if seed % 5 == 0:
        store.seal(name)
    client = EmbeddedClient(store)
    info = store.get_info(name)
    for _ in range(10):
        offset = _bounds(store, name, rng)
        size = rng.choice([15, 64, 300, 1 << 20])
        (a,) = client.read_many([(name, offset, size)])
        assert a is not None and a.read is not None
        fast, slow = _inputs(store, name, offset)
        fast.take_block(client, a.read, a)
        slow.take_block(client, a.read, None)
        assert _state(fast) == _state(slow)
        fast._check()
    assert info.length >= 0


@pytest.mark.parametrize("seed", range(20))
def test_blocks_decoded_side_by_side_are_the_blocks_decoded_alone_and_merge_alike(seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock(1_000_000)
    store = SegmentStore(clock=clock)
    client = EmbeddedClient(store)
    names = [f"s/t/{seed}-{i}" for i in range(rng.randrange(2, 6))]
    for n in names:
        store.create_segment(n)
    for _ in range(3):  # interleaved, so that ingestion times cross between segments
        for n in names:
            _write(rng, store, clock, n, _frames(rng, rng.randrange(0, 30)))
    reqs = [(n, _bounds(store, n, rng), rng.choice([64, 1 << 20])) for n in names]
    answers = client.read_many(reqs)
    together = decode_together(answers)
    alone, side = [], []
    key_bytes: list[int] = []
    for i, ((n, offset, _), a) in enumerate(zip(reqs, answers, strict=True)):
        assert a is not None and a.read is not None
        one, two = _inputs(store, n, offset)
        one.take_block(client, a.read, a)
        if i in together:
            two.take_decoded(a.read, *together[i])
            eb, j = together[i][-1]  # its row among the others: the bytes and key bytes it holds alone
            assert eb.spans[j][6] == one.fetch - offset and one.block is not None
            key_bytes.append(one.block[3])
        else:
            two.take_block(client, a.read, a)
        assert _state(one) == _state(two)
        two._check()
        alone.append(one)
        side.append(two)
    if together:
        assert next(iter(together.values()))[-1][0].key_bytes == sum(key_bytes)
    k = merge_kernel()
    assert k is not None
    for max_events in (1, 7, 1 << 16):
        a_live = [s for s in alone if s.idx < s.n]
        s_live = [s for s in side if s.idx < s.n]
        if len(a_live) < 2:
            break
        ma = merge_blocks(k, a_live, max_events, 1_000_001, 1_010)
        ms = merge_blocks(k, s_live, max_events, 1_000_001, 1_010)
        assert ma.names == ms.names and ma.late_ingestion == ms.late_ingestion
        assert ma.late_event_time == ms.late_event_time
        assert ma.segment_index.tolist() == ms.segment_index.tolist()
        assert ma.cols.tolist() == ms.cols.tolist()
        assert ma.keys.to_pylist() == ms.keys.to_pylist() and ma.pays.to_pylist() == ms.pays.to_pylist()
        assert [s.idx for s in alone] == [s.idx for s in side]


def test_records_that_are_not_the_frames_fall_back_to_the_step_by_step_decode() -> None:
    frames = [encode_event("a", b"x", 5), encode_event("b", b"yy", 6)]
    data = b"".join(frames)
    starts = np.array([0, len(frames[0])], np.int64)
    values = np.array([10, 11, 12], np.int64)
    assert events.decode_event_block_at(data, 0, starts, values, 1, 99) is not None
    assert events.decode_event_block_at(data, 0, starts + 1, values, 1, 99) is None  # not where frames start
    assert events.decode_event_block_at(data, 0, starts[:1], values[:2], 1, 99) is None  # a record short
    block, after, consumed = events.decode_event_block_at(data + b"\x05", 0, starts, values, 1, 99) or (
        None,
        None,
        0,
    )
    assert block is not None and after is not None and consumed == len(data)
    assert block[0][3].tolist() == [11, 12] and after.tolist() == [[len(frames[0]), len(data)], [11, 12]]
    whole = decode_event_block(data, 0)[0]
    assert block[0][:3].tolist() == whole[0][:3].tolist()


def _assert_packed_as_read_many(p: PackedReads, answers: tuple[RecordsRead | None, ...]) -> None:
    """``p``'s answers are ``answers``, and its columns hold each answer as ``PackedReads`` says."""
    for a, b in zip(p.answers(), answers, strict=True):  # (a reader falls back on them)
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert (a.read, a.error, a.message) == (b.read, b.error, b.message)
            assert a.starts.tolist() == b.starts.tolist() and a.watermarks.tolist() == b.watermarks.tolist()
    row = 0
    for i, a in enumerate(answers):
        if a is None:
            assert p.kinds[i] == NOTHING_NEW and p.reads[i] is None
            continue
        if a.read is None:
            if a.error is None:  # not read: the reply was full
                assert p.kinds[i] == UNREAD and i not in p.errors
            else:
                assert p.kinds[i] == FAILED and p.errors[i] == (a.error, a.message)
            continue
        r = a.read
        assert p.kinds[i] == READ
        assert p.reads[i] == (r.offset, len(r.data), r.watermark, r.end_of_segment, r.at_tail)
        if not a.read.data:
            continue
        at, size, offset, watermark, s0, k = p.meta[row].tolist()
        assert p.data[at : at + size] == a.read.data
        assert (offset, watermark) == (a.read.offset, a.read.watermark)
        assert p.starts[s0 : s0 + k].tolist() == a.starts.tolist()
        assert p.values[s0 + row : s0 + row + k + 1].tolist() == a.watermarks.tolist()
        row += 1
    assert row == len(p.meta)


@pytest.mark.parametrize("seed", range(20))
def test_packed_answers_hold_in_columns_what_read_many_answers(seed: int) -> None:
    """``read_packed``: its answers are ``read_many``'s; per request its kind and read; for the reads
    with data a row of ``meta`` with where their bytes are in ``data``, their offset and watermark,
    and where their records' starts and the watermarks there are in ``starts`` and ``values`` --
    each what ``read_many`` answers; requests past the reply's size come back unread, a failed one
    with its error."""
    store, _, name, rng = _segment(seed, truncate=True)
    info = store.get_info(name)
    reqs: list[tuple[str, int, int, int | None]] = [
        (name, rng.randrange(info.start_offset, info.length + 1), rng.choice([0, 7, 64, 300, 1 << 20]), None)
        for _ in range(6)
    ]
    reqs.insert(rng.randrange(len(reqs)), (name, info.length, 100, info.last_write_time - 1))  # nothing new
    reqs.insert(rng.randrange(len(reqs)), ("no/such/segment", 0, 100, None))
    if info.start_offset:
        reqs.insert(rng.randrange(len(reqs)), (name, info.start_offset - 1, 100, None))  # truncated
    p = store.read_packed(reqs)
    answers = store.read_many(reqs)
    _assert_packed_as_read_many(p, answers)
    # a small reply: the first request is read whatever its size, the ones after it wait for another call
    first = next(i for i, a in enumerate(answers) if a is not None and a.read is not None and a.read.data)
    small = store._reads.read_packed(check_read_requests(reqs[first:]), 1)
    assert small.kinds[0] == READ and set(small.kinds[1:]) <= {UNREAD}


@pytest.mark.parametrize("seed", range(12))
def test_packed_answers_of_many_segments_are_read_manys(seed: int) -> None:
    """``read_packed`` over several segments at once, as a reader's look asks: sealed ones (read to
    their end, at their end, beyond it), truncated ones, tiny records in many reads (more starts than
    its first arrays hold), known watermarks (nothing new, or a tail read carrying a newer one),
    missing segments, a reply budget that leaves the rest unread -- each answer is ``read_many``'s,
    and its segments count as used as ``read_many``'s do."""
    rng = random.Random(seed)
    clock = ManualClock(1_000_000)
    store = SegmentStore(clock=clock)
    names = [f"s/many/{i}" for i in range(5)]
    for i, name in enumerate(names):
        store.create_segment(name)
        if i == 0:  # 4-byte records (empty): a quarter as many starts as bytes
            frames = [b"\0\0\0\0"] * rng.randrange(600, 1500)
        else:
            frames = _frames(rng, rng.randrange(1, 80))
        _write(rng, store, clock, name, frames)
        clock.advance(rng.randrange(1, 3))
    store.seal(names[1])
    store.truncate(names[2], _bounds(store, names[2], rng))
    infos = {n: store.get_info(n) for n in names}
    first = infos[names[0]].start_offset
    reqs: list[tuple[str, int, int, int | None]] = [(names[0], first, 1 << 20, None)] * 2  # (grown)
    for _ in range(rng.randrange(6, 14)):
        name = rng.choice(names)
        info = infos[name]
        pick = rng.random()
        if pick < 0.15:
            known = rng.choice([info.last_write_time - 1, info.last_write_time - 2, None])
            reqs.append((name, info.length, rng.choice([0, 100]), known))
        elif pick < 0.2:
            reqs.append((name, info.length + rng.randrange(1, 5), 100, None))  # beyond the length
        elif pick < 0.25:
            reqs.append((rng.choice(["no/such", name + "x"]), 0, 100, None))
        elif pick < 0.3 and info.start_offset:
            reqs.append((name, info.start_offset - 1, 100, None))  # truncated
        else:
            offset = rng.randrange(info.start_offset, info.length + 1)
            reqs.append((name, offset, rng.choice([0, 3, 64, 1 << 20]), rng.choice([None, 0])))
    for budget in (1 << 20, rng.randrange(1, 3000), 1, 0):  # (0: nothing is read)
        checked = check_read_requests(reqs)
        p = store._reads.read_packed(checked, budget)
        answers = store._reads.read_many(checked, budget)
        _assert_packed_as_read_many(p, answers)
        assert type(p) is PackedReads and len(p) == len(PackedReads._fields)  # (built by tuple.__new__)
        if UNREAD in p.kinds:  # every request after the budget is spent
            assert set(p.kinds[p.kinds.index(UNREAD) :]) == {UNREAD}
        assert budget or set(p.kinds) == {UNREAD}
    # the segments it read (not those it left unread) count as used, as by ``read_many``
    clock.advance(5)
    store.append(names[3], b"\0\0\0\0")  # a new timestamp for the uses to carry
    store._reads.read_packed(check_read_requests([(names[4], 0, 10, None)]), 1 << 20)
    with store._container.lock:
        seg = store._container.segment(names[4], use=False)
        assert seg.last_used == store._container.processor.last_timestamp


@pytest.mark.parametrize("packed", [True, False])
def test_a_read_that_reactivates_a_segment_counts_the_uses_after_it_at_its_advance(packed: bool) -> None:
    """A batched read finds the active segments in one table, and an evicted one as ``segment`` does:
    reactivated, advanced at once if it was idle past the lag (a new timestamp); the segments read before
    it count a use at the timestamp before, those after at the advance's, as a read each would."""
    from segmentstore import StoreConfig

    clock = ManualClock(1_000_000)
    cfg = StoreConfig(
        max_watermark_lag_ms=1_000, polling_period_ms=100, eviction_age_ms=5_000, advancer_thread=False
    )
    with SegmentStore(clock, cfg) as store:
        for n in ("a", "b", "c"):
            store.create_segment(n)
        for _ in range(120):  # "b" idle: evicted
            clock.advance(100)
            store.append("a", b"\1\0\0\0a")
            store.append("c", b"\1\0\0\0c")
            store.advance_idle_watermarks()
        assert store.eviction_stats.cold == 1
        clock.advance(7)
        store.append("a", b"\1\0\0\0a")  # the timestamp the uses before the reactivation carry
        before = store._container.processor.last_timestamp
        clock.advance(5)
        reqs = [("a", 0, 10, None), ("b", 0, 10, None), ("c", 0, 10, None)]
        got = store.read_packed(reqs).answers() if packed else store.read_many(reqs)
        after = store._container.processor.last_timestamp
        assert after > before and store.eviction_stats.advanced_on_reactivation == 1
        assert all(a is not None and a.read is not None for a in got)
        with store._container.lock:
            used = [store._container.segment(n, use=False).last_used for n in ("a", "b", "c")]
        assert used == [before, after, after]
